import { systemClock, systemRandom, type Clock, type Random } from '../clock.js';
import { AbortedError, describeValue, InvalidConfigError, LeaseholdError, LeaseLostError } from '../errors.js';
import { TypedEmitter } from '../events.js';
import { checkContractVersion } from '../contract-version.js';
import { LeaderElector } from '../leader/elector.js';
import { LeaseCoordinator, parentsFinished, type HeldLease } from '../lease/coordinator.js';
import { nonNegative, positive, positiveInteger } from '../lease/timing.js';
import type { ShardSource, SourceRecord } from '../source.js';
import { Checkpoint, type CheckpointStorage, type LeaderStore, type Position } from '../storage.js';
import { resolveFailurePolicy, resolveGivingUp, type GivingUp, type ResolvedFailurePolicy } from './failure-policy.js';
import type { ConsumerEvents } from './events.js';
import type { ConsumerOptions, InitialPosition, Logger, StreamList } from './options.js';
import { unsafeOf, withUnsafe, type ConsumerUnsafe } from '../unsafe.js';
import { ShardPump, type PumpOutcome, type PumpReporter } from './shard-pump.js';
import { pumpReporter } from './pump-reporter.js';
import { attachMetrics, defaultMeter } from '../metrics.js';
import { refuseUnknownConsumerOptions } from './option-keys.js';
import { parseStreamLeaseKey } from '../stream-keys.js';
import { resolveStreams, type StreamSource } from './streams.js';
import { parentPending, REWIND_FIELDS, REWIND_MARKER_FIELD, rewindRequestOf, type RewindRequest } from '../rewind.js';
import { applyOwnRewind, type OwnRewind } from './owner-rewind.js';
import { StallWatch } from './stalls.js';
import { LeaderRounds } from './leader-rounds.js';

const PKG = 'core';

const silent: Logger = { debug() {}, info() {}, warn() {}, error() {} };

export { STALL_FIELDS } from './stalls.js';

export { BIRTH_POSITION_FIELD, BORN_FIELD } from './leader-rounds.js';

/** After this many failed reads of one shard in a row, its lease is given back for the group to retry elsewhere. */
const MAX_PUMP_FAILURES = 5;

function initialPositionOf(initial: InitialPosition | undefined): Position {
  if (initial === undefined || initial === 'LATEST') return Checkpoint.LATEST;
  if (initial === 'TRIM_HORIZON') return Checkpoint.TRIM_HORIZON;
  if (typeof initial === 'object' && initial !== null && 'atTimestamp' in initial) {
    const ms = initial.atTimestamp instanceof Date ? initial.atTimestamp.getTime() : initial.atTimestamp;
    if (Number.isFinite(ms) && ms >= 0) return Checkpoint.atTimestamp(ms);
  }
  throw new InvalidConfigError(
    `[${PKG}] initialPosition must be 'LATEST', 'TRIM_HORIZON' or { atTimestamp }, got ${describeValue(initial)}`,
  );
}

function isLeaderStore(value: unknown): value is LeaderStore {
  return typeof value === 'object' && value !== null && typeof (value as LeaderStore).updateLeader === 'function';
}

/**
 * A consumer group worker: takes a fair share of the stream's shards through leases, reads each held
 * shard in order and hands its batches to `processBatch`, checkpoints, follows resharding (children start
 * only after all their parents ended), and, when elected leader, keeps the lease table in step with the
 * stream. `stop()` finishes the batches in flight, checkpoints and releases every lease.
 *
 * ```ts
 * await using consumer = new Consumer({ group: 'orders', source, storage, processBatch: async (records) => {...} });
 * await consumer.start();
 * ```
 */
export class Consumer<R extends SourceRecord = SourceRecord> extends TypedEmitter<ConsumerEvents> implements AsyncDisposable {
  /** The lease coordinator this consumer runs (its events and held leases are public). */
  readonly coordinator: LeaseCoordinator;
  /** The leader elector, or `undefined` when no `LeaderStore` was given. */
  readonly elector: LeaderElector | undefined;
  /** The consuming application this worker belongs to. */
  readonly group: string;

  readonly #options: ConsumerOptions<R>;
  /** The one stream's source, or `undefined` in a multi-stream group. */
  readonly #source: ShardSource<R> | undefined;
  /** A multi-stream group's list, and the streams it resolved to last (by stream id). */
  readonly #streamList: StreamList<R> | undefined;
  #streams: ReadonlyMap<string, StreamSource<R>> = new Map();
  /** Every stream this worker read, for the positions of a removed stream's shards still winding down. */
  readonly #everSeen = new Map<string, StreamSource<R>>();
  readonly #streamRefreshMs: number;
  readonly #storage: CheckpointStorage;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #initialPosition: Position;
  readonly #retry: { initialDelayMs: number; maxDelayMs: number; maxAttempts: number };
  readonly #failurePolicy: ResolvedFailurePolicy<R>;
  readonly #givingUp: GivingUp;
  readonly #unsafe: ConsumerUnsafe;
  readonly #random: Random;
  readonly #pumps = new Map<string, ShardPump<R>>();
  readonly #drains = new Map<string, Promise<void>>();
  /**
   * Failed reads of a shard in a row, when its last pump ended without reading (for stall reports), and
   * whether the `stop` policy stopped it.
   */
  readonly #failures = new Map<string, { count: number; since: number; stopped?: boolean }>();
  /** Shards whose reader starts again after a backoff, or whose lease is being given back: not to reconcile. */
  readonly #settling = new Set<string>();
  /** Rewound leases whose parents a reader's start is reading (whether they are to be read first): nothing else starts their reader meanwhile. */
  readonly #parentChecks = new Set<string>();
  /** Leases being given back after their reader failed (a gone shard recorded finished first): a drain waits for them. */
  readonly #givingBack = new Map<string, Promise<void>>();
  readonly #stalls: StallWatch;
  /** Rewind requests being applied, one after another per shard. */
  readonly #rewinds = new Map<string, Promise<void>>();
  /**
   * The unreadable rewind request last reported for each lease: the owner may hear of one request twice
   * (the change feed, then the newer record a write's conflict brings), and reports it once a tenure.
   */
  readonly #unreadableReported = new Map<string, string>();
  /**
   * Per shard, the rewind request whose write's outcome is unknown (it may have applied, and could not be
   * read back): no reader starts until a retry has read the lease back, for one started from the record
   * held before would read on from the checkpoint of before the rewind, and checkpoint over it.
   */
  readonly #unknownRewinds = new Map<string, RewindRequest>();
  /** Per shard, how many rewinds paused its readers: a reader made before the last one refuses its contexts' checkpoints. */
  readonly #rewindCounts = new Map<string, number>();
  readonly #lifetime = new AbortController();
  #state: 'new' | 'running' | 'stopping' | 'stopped' = 'new';
  #stopping: Promise<void> | null = null;
  readonly #leader: LeaderRounds<R>;
  #background: Promise<void>[] = [];

  constructor(options: ConsumerOptions<R>) {
    super();
    if (typeof options !== 'object' || options === null) {
      throw new InvalidConfigError(`[${PKG}] Consumer options must be an object, got ${describeValue(options)}`);
    }
    refuseUnknownConsumerOptions(options);
    if (typeof options.processBatch !== 'function') {
      throw new InvalidConfigError(`[${PKG}] processBatch must be a function, got ${describeValue(options.processBatch)}`);
    }
    if (options.streams !== undefined) {
      if (options.source !== undefined) throw new InvalidConfigError(`[${PKG}] give either source (one stream) or streams (a multi-stream group), not both`);
      if (typeof options.streams !== 'function' && !Array.isArray(options.streams)) {
        throw new InvalidConfigError(`[${PKG}] streams must be an array of { id?, source } or a function returning one, got ${describeValue(options.streams)}`);
      }
    } else if (!options.source || typeof options.source.read !== 'function' || typeof options.source.listShards !== 'function') {
      throw new InvalidConfigError(`[${PKG}] source must implement ShardSource, got ${describeValue(options.source)}`);
    }
    // Before any part is made, so that a storage of another contract version is the one error a user sees.
    if (typeof options.storage === 'object' && options.storage !== null) checkContractVersion(options.storage, "Consumer's storage", PKG);
    if (options.leaderStore !== undefined) checkContractVersion(options.leaderStore, "Consumer's leaderStore", PKG);
    const policy = options.checkpointing ?? 'batch';
    if (policy !== 'batch' && policy !== 'manual') {
      if (typeof policy !== 'object' || policy === null || (policy.everyRecords === undefined && policy.everyMs === undefined)) {
        throw new InvalidConfigError(`[${PKG}] checkpointing must be 'batch', 'manual' or { everyRecords?, everyMs? }, got ${describeValue(policy)}`);
      }
      if (policy.everyRecords !== undefined) positiveInteger(PKG, 'checkpointing.everyRecords', policy.everyRecords);
      if (policy.everyMs !== undefined) positive(PKG, 'checkpointing.everyMs', policy.everyMs);
    }
    this.#failurePolicy = resolveFailurePolicy(options.onHandlerError);
    this.#givingUp = resolveGivingUp(options.isRecordError, options.maxRecordsGivenUpInARow);
    this.#options = options;
    this.#source = options.streams === undefined ? options.source : undefined;
    this.#streamList = options.streams;
    this.#storage = options.storage;
    this.group = options.group;
    this.#clock = options.clock ?? systemClock;
    this.#logger = options.logger ?? silent;
    this.#initialPosition = initialPositionOf(options.initialPosition);
    const shardSyncIntervalMs = positive(PKG, 'shardSyncIntervalMs', options.shardSyncIntervalMs ?? 60_000);
    this.#retry = {
      initialDelayMs: positive(PKG, 'retry.initialDelayMs', options.retry?.initialDelayMs ?? 100),
      maxDelayMs: positive(PKG, 'retry.maxDelayMs', options.retry?.maxDelayMs ?? 10_000),
      maxAttempts: positiveInteger(PKG, 'retry.maxAttempts', options.retry?.maxAttempts ?? 3),
    };
    const stallAfterMs = positive(PKG, 'stallAfterMs', options.stallAfterMs ?? 60_000);
    this.#streamRefreshMs = positive(PKG, 'streamRefreshIntervalMs', options.streamRefreshIntervalMs ?? shardSyncIntervalMs);
    const removedStreamGraceMs = nonNegative(PKG, 'removedStreamGraceMs', options.removedStreamGraceMs ?? 3_600_000);
    this.#unsafe = unsafeOf(options);
    const random = (this.#random = options.random ?? systemRandom);
    const lease = options.lease ?? {};
    this.coordinator = new LeaseCoordinator(withUnsafe({
      ...lease,
      storage: options.storage,
      group: options.group,
      workerId: options.workerId,
      clock: this.#clock,
      random,
      comparePositions: (a, b, leaseKey) => this.#comparePositions(a, b, leaseKey),
      // In a multi-stream group a worker takes only leases of the streams it reads.
      isEligible: this.#streamList ? (lease, all, corrupt) => this.#sourceOf(lease.leaseKey) !== undefined && parentsFinished(lease, all, corrupt) : undefined,
      onDrain: (held) => this.#drain(held),
    }, { skipSelfFencing: this.#unsafe.skipSelfFencing, checkpointPerKey: this.#unsafe.checkpointPerKey, releaseWithoutRetry: this.#unsafe.releaseWithoutRetry, letGoForgetsUnreadable: this.#unsafe.letGoForgetsUnreadable, stopHandoverKeeps: this.#unsafe.stopHandoverKeeps, stopWaitsForListing: this.#unsafe.stopWaitsForListing, adoptedRequestIgnored: this.#unsafe.adoptedRequestIgnored, drainAfterTakeTick: this.#unsafe.drainAfterTakeTick, stopSkipsHandoffs: this.#unsafe.stopSkipsHandoffs, handoverToLeaving: this.#unsafe.handoverToLeaving }));
    const leaderStore = options.leaderStore ?? (isLeaderStore(options.storage) ? options.storage : undefined);
    // The leader keeps the lease timing unless told otherwise: one set of numbers for a worker's liveness.
    const leader = options.leader ?? {};
    this.elector = leaderStore
      ? new LeaderElector(withUnsafe({
          store: leaderStore,
          group: options.group,
          workerId: this.coordinator.workerId,
          leaseDurationMs: leader.leaseDurationMs ?? lease.leaseDurationMs,
          renewIntervalMs: leader.renewIntervalMs ?? lease.renewIntervalMs,
          maxClockDrift: leader.maxClockDrift ?? lease.maxClockDrift,
          safetyMarginMs: leader.safetyMarginMs ?? lease.safetyMarginMs,
          clock: this.#clock,
          random,
          onElected: (term, signal) => this.#leader.lead(this.elector as LeaderElector, term, signal),
          onDemoted: (term) => this.emit('leader-demoted', { term }),
        }, { skipSelfFencing: this.#unsafe.skipSelfFencing }))
      : undefined;
    this.#leader = new LeaderRounds<R>({
      group: options.group,
      source: this.#source,
      multiStream: this.#streamList !== undefined,
      storage: this.#storage,
      leaderStore,
      coordinator: this.coordinator,
      initialPosition: this.#initialPosition,
      shardSyncIntervalMs,
      removedStreamGraceMs,
      clock: this.#clock,
      logger: this.#logger,
      unsafe: this.#unsafe,
      signal: this.#lifetime.signal,
      host: {
        running: () => this.#state === 'running',
        streams: () => this.#refreshStreams().catch((error: unknown) => (this.#report(error, 'streams'), this.#streams)),
        initialPositionOf: (source) => this.#initialPositionOf(source),
        emit: (name, event) => this.emit(name, event),
        report: (error, operation) => this.#report(error, operation),
      },
    });
    this.#stalls = new StallWatch({
      coordinator: this.coordinator,
      clock: this.#clock,
      logger: this.#logger,
      stallAfterMs,
      host: {
        reconcile: () => this.#reconcile(),
        pump: (shardId) => this.#pumps.get(shardId),
        failedSince: (shardId) => this.#failures.get(shardId)?.since,
        emit: (name, event) => this.emit(name, event),
        report: (error, operation) => this.#report(error, operation),
      },
    });
    this.#wire();
  }

  /** This worker's id in the group. */
  get workerId(): string {
    return this.coordinator.workerId;
  }

  /** The shards this worker processes now. */
  get shards(): string[] {
    return [...this.#pumps.keys()];
  }

  /**
   * The sizes of this consumer's bookkeeping (shard readers, drains, failures, stalls, rewinds, streams
   * seen, background loops) and its coordinator's (prefixed `coordinator.`), cheap to read at any time:
   * for soak tests and diagnostics that check it stays bounded. The names may change between versions;
   * the values are counts.
   */
  diagnostics(): Readonly<Record<string, number>> {
    const own: Record<string, number> = {
      pumps: this.#pumps.size,
      drains: this.#drains.size,
      failures: this.#failures.size,
      settling: this.#settling.size,
      stalled: this.#stalls.size,
      rewinds: this.#rewinds.size,
      rewindCounts: this.#rewindCounts.size,
      unknownRewinds: this.#unknownRewinds.size,
      unreadableReported: this.#unreadableReported.size,
      streams: this.#streams.size,
      everSeen: this.#everSeen.size,
      background: this.#background.length,
      listeners: this.countListeners(),
    };
    for (const [name, value] of Object.entries(this.coordinator.diagnostics())) own[`coordinator.${name}`] = value;
    return own;
  }

  /**
   * Joins the group: campaigns for leadership, waits for the group's first complete shard sync (a new
   * group's leases are created by its leader, parents before children, before anyone takes one; an
   * existing group is born already), and starts taking shards. Resolves once the first take tick ran,
   * or when `stop()` is called first.
   */
  async start(): Promise<void> {
    if (this.#state !== 'new') throw new InvalidConfigError(`[${PKG}] a Consumer starts once; this one is ${this.#state}`);
    this.#state = 'running';
    this.#logger.info({ group: this.group, workerId: this.workerId }, 'consumer starting');
    if (this.#streamList) {
      try {
        await this.#refreshStreams();
      } catch (error) {
        this.#state = 'stopped';
        throw error;
      }
      // Asked again from now on, also while the group is being born: a worker that starts taking goes by
      // a list at most a refresh interval old, not by the one it started with.
      if (typeof this.#streamList === 'function') this.#background.push(this.#watchStreams());
    }
    if (this.elector) await this.elector.start();
    if (this.elector && !this.#unsafe.birthRace) await this.#leader.awaitBirth(this.elector);
    if (this.#state !== 'running') return;
    await this.coordinator.start();
    this.#background.push(this.#stalls.watch(this.#lifetime.signal));
    if (this.elector) this.#background.push(this.#watchRewinds(this.elector));
  }

  /** The streams of a multi-stream group as this worker reads them now, by stream id (empty for one stream). */
  get streams(): string[] {
    return [...this.#streams.keys()];
  }

  /** The source that reads a lease: the stream's, or `undefined` for a lease of a stream this worker does not read. */
  #sourceOf(leaseKey: string): ShardSource<R> | undefined {
    if (this.#source) return this.#source;
    const parsed = parseStreamLeaseKey(leaseKey);
    return parsed ? this.#streams.get(parsed.streamId) : undefined;
  }

  #comparePositions(a: Position, b: Position, leaseKey: string): number {
    const parsed = this.#source ? undefined : parseStreamLeaseKey(leaseKey);
    const source = this.#source ?? (parsed && this.#everSeen.get(parsed.streamId));
    if (!source) throw new LeaseholdError('ERR_SHARD_NOT_FOUND', `[${PKG}] lease ${describeValue(leaseKey)} belongs to no stream this worker reads`);
    return source.comparePositions(a, b);
  }

  /**
   * Resolves the stream list again and applies the difference: a new stream's leases become eligible (the
   * coordinator lists at its next tick); a stream that left is no longer read: each of its shards this
   * worker holds finishes its batch, checkpoints and is given back, and nobody here takes it again.
   */
  async #refreshStreams(): Promise<ReadonlyMap<string, StreamSource<R>>> {
    const next = await resolveStreams(this.#streamList as StreamList<R>, this.#lifetime.signal);
    for (const stream of next.values()) if (stream.initialPosition !== undefined) initialPositionOf(stream.initialPosition);
    const before = this.#streams;
    this.#streams = next;
    for (const [streamId, stream] of next) this.#everSeen.set(streamId, stream);
    const added = [...next.keys()].filter((streamId) => !before.has(streamId));
    const removed = [...before.keys()].filter((streamId) => !next.has(streamId));
    for (const streamId of added) {
      this.#logger.info({ streamId }, 'stream added');
      this.emit('stream-added', { streamId });
    }
    for (const streamId of removed) {
      this.#logger.info({ streamId }, 'stream removed: its shards are given back');
      this.emit('stream-removed', { streamId });
    }
    if (removed.length > 0) {
      for (const lease of this.coordinator.heldLeases()) {
        if (this.#sourceOf(lease.leaseKey) !== undefined) continue;
        this.#settling.add(lease.leaseKey);
        void this.#drain(lease)
          .then(() => this.coordinator.release(lease.leaseKey))
          .catch((error: unknown) => this.#report(error, 'release'))
          .finally(() => this.#settling.delete(lease.leaseKey));
      }
    }
    if (added.length > 0 && this.#state === 'running') this.coordinator.listSoon();
    return next;
  }

  /** Where a shard with no checkpoint starts: its stream's own initial position, else the consumer's. */
  #initialPositionOf(source: ShardSource<R>): Position {
    const own = this.#source ? undefined : (source as StreamSource<R>).initialPosition;
    return own === undefined ? this.#initialPosition : initialPositionOf(own);
  }

  /** Calls the `streams` function again every `streamRefreshIntervalMs`; a failure keeps the last list. */
  async #watchStreams(): Promise<void> {
    const signal = this.#lifetime.signal;
    while (!signal.aborted) {
      try {
        await this.#clock.sleep(this.#streamRefreshMs, signal);
      } catch {
        return;
      }
      await this.#refreshStreams().catch((error: unknown) => this.#report(error, 'streams'));
    }
  }

  /**
   * Leaves the group gracefully: stops taking shards, lets every shard finish its batch in flight,
   * checkpoints, and releases every lease so that other workers take them at once. Returns within
   * `timeoutMs` (default 30,000) whatever handlers or storage do: a shard that does not finish in time is
   * not released but left to lapse (its handler's signal has fired). A second call waits for the first.
   */
  stop(options: { timeoutMs?: number } = {}): Promise<void> {
    this.#stopping ??= this.#stop(positive(PKG, 'timeoutMs', options.timeoutMs ?? 30_000));
    return this.#stopping;
  }

  async #stop(timeoutMs: number): Promise<void> {
    const wasRunning = this.#state === 'running';
    this.#state = 'stopping';
    this.#lifetime.abort(new AbortedError(`[${PKG}] consumer ${this.workerId} stopping`));
    if (wasRunning) {
      const deadline = this.#clock.now() + timeoutMs;
      this.#logger.info({ group: this.group, workerId: this.workerId }, 'consumer stopping');
      // Leave a little of the time for the releases after the drains, and for stepping down.
      await this.coordinator.stop({ timeoutMs: Math.max(0, timeoutMs - Math.min(timeoutMs / 10, 1_000)) });
      await this.#until(deadline, Promise.all([this.elector?.stop(), this.#leader.work, ...this.#background]));
      await this.#until(deadline, Promise.all([...this.#pumps.values()].map((pump) => pump.done)));
      this.#logger.info({ group: this.group, workerId: this.workerId }, 'consumer stopped');
    }
    this.#state = 'stopped';
  }

  /** Waits for `work`, but not past `deadline` of this worker's clock; the work goes on unawaited. */
  async #until(deadline: number, work: Promise<unknown>): Promise<void> {
    const settled = work.then(() => undefined, (error: unknown) => this.#report(error, 'stop'));
    const remaining = deadline - this.#clock.now();
    if (remaining <= 0) return;
    const timer = new AbortController();
    try {
      await Promise.race([settled, this.#clock.sleep(remaining, timer.signal).catch(() => undefined)]);
    } finally {
      timer.abort();
    }
  }

  /** `await using consumer = ...`: stops it gracefully at the end of the scope. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  #wire(): void {
    const { coordinator } = this;
    coordinator.on('acquired', ({ leaseKey }) => this.#startPump(leaseKey));
    coordinator.on('lost', ({ leaseKey, reason }) => {
      this.#tenureEnded(leaseKey);
      this.#logger.warn({ shardId: leaseKey, reason }, 'lease lost');
      this.emit('lease-lost', { shardId: leaseKey, reason });
    });
    coordinator.on('handed-off', ({ leaseKey, to }) => {
      this.#tenureEnded(leaseKey);
      this.emit('lease-handed-off', { shardId: leaseKey, to });
    });
    coordinator.on('released', ({ leaseKey }) => this.#tenureEnded(leaseKey));
    coordinator.on('rewind-requested', ({ leaseKey }) => this.#rewindRequested(leaseKey));
    coordinator.on('corrupt-lease', ({ leaseKey, error }) => {
      this.#logger.error({ shardId: leaseKey, err: error }, 'corrupt lease: nobody takes it until it is repaired or deleted');
      this.emit('lease-corrupt', { shardId: leaseKey, error });
    });
    const fatal = ({ error }: { error: Error }): void => {
      this.#logger.error({ err: error }, 'consumer cannot go on and stops');
      this.emit('fatal', { error });
      void this.stop();
    };
    coordinator.on('fatal', fatal);
    this.elector?.on('fatal', fatal);
    if (this.#options.metrics !== false) {
      attachMetrics(this.#options.metrics?.meter ?? defaultMeter(), { group: this.group, workerId: this.workerId }, {
        coordinator,
        elector: this.elector,
        consumer: this,
        streamOf: this.#streamList ? (leaseKey) => parseStreamLeaseKey(leaseKey)?.streamId : undefined,
      });
    }
    coordinator.on('error', ({ error, operation }) => this.#report(error, operation));
    this.elector?.on('error', ({ error, operation }) => this.#report(error, `leader ${operation}`));
  }

  #startPump(leaseKey: string, applyRewind = true, parentsChecked = false): void {
    const rewinding = applyRewind ? this.#rewinds.get(leaseKey) : undefined;
    if (rewinding) {
      // A rewind being applied starts the reader itself, at the rewound checkpoint: one started meanwhile
      // (the lease re-acquired while its last reader wound down) would read on from the old checkpoint and
      // checkpoint over the rewind.
      void rewinding.then(() => {
        if (!this.#pumps.has(leaseKey)) this.#startPump(leaseKey);
      });
      return;
    }
    // A rewind whose write's outcome is unknown starts the reader itself, once a retry read the lease back.
    if (this.#unknownRewinds.has(leaseKey) && !this.#unsafe.rewindUnknownReadsOn) return;
    const previous = this.#pumps.get(leaseKey);
    if (previous) {
      // Re-acquired while the last pump of the shard is still winding down: start after it stopped.
      void previous.done.then(() => this.#startPump(leaseKey, applyRewind, parentsChecked));
      return;
    }
    const lease = this.coordinator.lease(leaseKey);
    if (!lease || this.#state !== 'running') return;
    const source = this.#sourceOf(leaseKey);
    if (!source) {
      // A lease of a stream this worker stopped reading, taken before it knew: given back unread.
      this.#settling.add(leaseKey);
      void this.coordinator
        .release(leaseKey)
        .catch((error: unknown) => this.#report(error, 'release'))
        .finally(() => this.#settling.delete(leaseKey));
      return;
    }
    // A request its last owner did not apply (it died, or handed the lease over first) is applied before reading.
    if (applyRewind && lease.checkpoint !== Checkpoint.SHARD_END && rewindRequestOf(lease) !== undefined) {
      this.#rewindRequested(leaseKey);
      return;
    }
    // A lease rewound while it was being handed over comes with a parent still to be read (again): its
    // last owner could not give it back, so it is given back unread here. Only a rewound lease can have one.
    if (!parentsChecked && lease.parentKeys.length > 0 && lease.metadata[REWIND_FIELDS.rewound] !== undefined) {
      if (this.#parentChecks.has(leaseKey)) return;
      this.#settling.add(leaseKey);
      this.#parentChecks.add(leaseKey);
      void parentPending(this.#storage, this.group, lease)
        .then((pending) => {
          this.#parentChecks.delete(leaseKey);
          return pending ? this.coordinator.release(leaseKey) : this.#startPump(leaseKey, true, true);
        })
        .catch((error: unknown) => this.#report(error, 'release'))
        .finally(() => {
          this.#parentChecks.delete(leaseKey);
          this.#settling.delete(leaseKey);
        });
      return;
    }
    const pump = new ShardPump<R>(
      withUnsafe({
        group: this.group,
        source,
        streamId: this.#source ? undefined : (source as StreamSource<R>).streamId,
        storage: this.#storage,
        coordinator: this.coordinator,
        processBatch: this.#options.processBatch,
        checkpointing: this.#options.checkpointing ?? 'batch',
        onHandlerError: this.#failurePolicy,
        givingUp: this.#givingUp,
        retry: this.#retry,
        hooks: this.#options.hooks ?? {},
        initialPosition: this.#initialPositionOf(source),
        rewinds: () => this.#rewindCounts.get(leaseKey) ?? 0,
        clock: this.#clock,
        random: this.#random,
        logger: this.#logger,
        reporter: this.#reporter(lease),
      }, this.#unsafe),
      lease,
    );
    this.#pumps.set(leaseKey, pump);
    void pump.start().then((outcome) => {
      if (this.#pumps.get(leaseKey) === pump) this.#pumps.delete(leaseKey);
      this.#pumpEnded(lease, outcome);
    });
  }

  /**
   * A pump ended. A failed read is tried again with backoff while this worker holds the lease in the same
   * tenure; a shard that is gone, or that failed `MAX_PUMP_FAILURES` times in a row, is given back so that
   * the group tries again (elsewhere, or here after a take tick) and the leader can clean a gone shard up.
   * A lease never stays held with nobody reading it, except under the `stop` policy, which is reported.
   */
  #pumpEnded(lease: HeldLease, outcome: PumpOutcome): void {
    const shardId = lease.leaseKey;
    if (outcome.kind !== 'failed') {
      if (outcome.kind === 'stopped') this.#failures.set(shardId, { count: 0, since: this.#clock.now(), stopped: true });
      else this.#failures.delete(shardId);
      return;
    }
    const previous = this.#failures.get(shardId);
    const attempt = (previous?.count ?? 0) + 1;
    this.#failures.set(shardId, { count: attempt, since: previous?.since ?? this.#clock.now() });
    if (this.#unsafe.keepFailedPump || this.#state !== 'running') {
      this.emit('shard-failed', { shardId, error: outcome.error, attempt, retryInMs: undefined, released: false });
      return;
    }
    const gone = outcome.error instanceof LeaseholdError && outcome.error.code === 'ERR_SHARD_NOT_FOUND';
    if (gone || attempt >= MAX_PUMP_FAILURES) {
      this.#logger.error({ shardId, err: outcome.error, attempt }, 'reading the shard failed; its lease is given back');
      this.emit('shard-failed', { shardId, error: outcome.error, attempt, retryInMs: undefined, released: true });
      this.#failures.set(shardId, { count: gone ? attempt : 0, since: this.#clock.now() });
      this.#settling.add(shardId);
      // A drain that comes meanwhile (a stop, a handover) waits for it, as for a reader's end: a gone shard
      // is recorded finished and given back, not handed on half-done.
      const givingBack = (gone ? this.#retireGone(lease) : Promise.resolve())
        .catch((error: unknown) => this.#report(error, 'retire-gone-shard'))
        .then(() => this.coordinator.release(shardId))
        .catch((error: unknown) => this.#report(error, 'release'))
        .finally(() => {
          this.#settling.delete(shardId);
          this.#givingBack.delete(shardId);
        });
      this.#givingBack.set(shardId, givingBack);
      return;
    }
    const { initialDelayMs, maxDelayMs } = this.#retry;
    const retryInMs = Math.min(maxDelayMs, initialDelayMs * 2 ** (attempt - 1)) * (0.5 + this.#random.next() / 2);
    this.#logger.warn({ shardId, err: outcome.error, attempt, retryInMs }, 'reading the shard failed; reading it again');
    this.emit('shard-failed', { shardId, error: outcome.error, attempt, retryInMs, released: false });
    this.#settling.add(shardId);
    this.#clock
      .sleep(retryInMs, lease.signal)
      .then(
        () => {
          if (this.coordinator.lease(shardId)?.fencingToken === lease.fencingToken) this.#startPump(shardId);
        },
        () => undefined,
      )
      .finally(() => this.#settling.delete(shardId));
  }

  /**
   * A held lease must have a reader (DESIGN section 5, rule 8). One can be left without: its reader ended
   * and giving the lease back failed (storage was down). Such a lease gets a new reader, which reads on,
   * or, for a finished shard, gives the lease back again. The `stop` policy's shards are left stopped.
   */
  #reconcile(): void {
    if (this.#unsafe.keepFailedPump) return;
    for (const lease of this.coordinator.heldLeases()) {
      const shardId = lease.leaseKey;
      if (this.#pumps.has(shardId) || this.#settling.has(shardId) || this.#failures.get(shardId)?.stopped) continue;
      this.#logger.warn({ shardId }, 'a held shard had no reader; reading it again');
      this.#startPump(shardId);
    }
  }

  /**
   * A shard whose reads say it does not exist, and that the source confirms gone (trimmed past retention),
   * has nothing left to read: it is recorded as finished, so that its children start and the leader
   * cleans it up, instead of being taken and given back for ever. Without the source's word it stays as
   * it is, and the group tries again.
   */
  async #retireGone(lease: HeldLease): Promise<void> {
    const shardId = lease.leaseKey;
    let confirmed = false;
    try {
      confirmed = (await this.#sourceOf(shardId)?.isShardGone?.(shardId, { signal: lease.signal })) ?? false;
    } catch (error) {
      this.#report(error, 'is-shard-gone');
    }
    if (!confirmed) return;
    await this.coordinator.checkpoint(lease, Checkpoint.SHARD_END);
    this.#logger.warn({ shardId }, 'the shard left the stream (trimmed past retention): recorded as finished, nothing was left to read');
    this.emit('shard-ended', { shardId, childShardIds: [] });
  }

  #reporter(lease: HeldLease): PumpReporter {
    return pumpReporter(
      {
        logger: this.#logger,
        emit: (name, event) => this.emit(name, event),
        stillHeld: (held) => this.coordinator.lease(held.leaseKey)?.fencingToken === held.fencingToken,
        stalls: this.#stalls,
        report: (error, operation) => this.#report(error, operation),
      },
      lease,
    );
  }

  /** The coordinator is about to give a lease away: finish the batch in flight and checkpoint first. */
  #drain(lease: HeldLease): Promise<void> {
    const givingBack = this.#givingBack.get(lease.leaseKey);
    if (givingBack) return givingBack;
    // A rewind being applied finishes first; it does not read on once the lease is being given away. The
    // reader stops at once all the same: looking for a request can take a while, and a stream removed from
    // the list must not be read on meanwhile.
    const rewinding = this.#rewinds.get(lease.leaseKey);
    if (rewinding) return Promise.all([this.#drainPump(lease), rewinding]).then(() => this.#drain(lease));
    return this.#drainPump(lease);
  }

  /** Finishes the batch in flight of the shard's reader, checkpoints, and stops it. */
  #drainPump(lease: HeldLease): Promise<void> {
    const pump = this.#pumps.get(lease.leaseKey);
    if (!pump) return Promise.resolve();
    let drain = this.#drains.get(lease.leaseKey);
    if (!drain) {
      drain = pump.drain().finally(() => this.#drains.delete(lease.leaseKey));
      this.#drains.set(lease.leaseKey, drain);
    }
    return drain;
  }

  /**
   * Watches the group's rewind marker on the leader record (every worker reads the record each renew
   * interval): when it changes, looks at every lease this worker holds for a request. This is how a rewind
   * reaches owners whose storage has no change feed; with one, the feed brings it at once.
   */
  async #watchRewinds(elector: LeaderElector): Promise<void> {
    const signal = this.#lifetime.signal;
    let seen = elector.record?.metadata[REWIND_MARKER_FIELD];
    while (!signal.aborted) {
      try {
        await this.#clock.sleep(elector.renewIntervalMs / 4, signal);
      } catch {
        return;
      }
      const marker = elector.record?.metadata[REWIND_MARKER_FIELD];
      if (marker === seen) continue;
      seen = marker;
      for (const lease of this.coordinator.heldLeases()) this.#rewindRequested(lease.leaseKey);
      // A finished lease moved back (the marker changes again then) can be taken: list.
      this.coordinator.listSoon();
    }
  }

  /**
   * A tenure of the lease ended (lost, handed off, released): what this worker kept about its rewinds goes
   * with it. Readers of a tenure that ended are fenced by it, so the count of rewinds matters only within
   * one; an unreadable request is reported again in a later tenure.
   */
  #tenureEnded(leaseKey: string): void {
    this.#rewindCounts.delete(leaseKey);
    this.#unknownRewinds.delete(leaseKey);
    this.#unreadableReported.delete(leaseKey);
  }

  /** Applies the rewind request a held lease may carry, after any being applied to it already. */
  #rewindRequested(leaseKey: string): void {
    const next = (this.#rewinds.get(leaseKey) ?? Promise.resolve()).then(() => this.#rewind(leaseKey));
    this.#rewinds.set(leaseKey, next);
    void next.finally(() => {
      if (this.#rewinds.get(leaseKey) === next) this.#rewinds.delete(leaseKey);
    });
  }

  /**
   * The owner's part of a rewind (DESIGN section 4, "Rewinding"): the shard's batch in flight is finished
   * and checkpointed, its checkpoint moved to the target in one write of this tenure, and it is read again
   * from there; or its lease is given back when a parent must be read again first. Not while the lease is
   * being handed over or this worker stops: the request goes with the lease, and its next owner applies it.
   */
  async #rewind(leaseKey: string): Promise<void> {
    const lease = this.coordinator.lease(leaseKey);
    if (!lease || lease.draining || this.#state !== 'running') return;
    this.#settling.add(leaseKey);
    let outcome: OwnRewind;
    try {
      const stopReading = async (): Promise<void> => {
        const pump = this.#pumps.get(leaseKey);
        if (pump) await pump.pause().then(() => pump.done);
        // Every reader of the shard made so far, also one that ended before (a failed read), is of before the rewind.
        this.#rewindCounts.set(leaseKey, (this.#rewindCounts.get(leaseKey) ?? 0) + 1);
      };
      outcome = await applyOwnRewind({
        coordinator: this.coordinator,
        storage: this.#storage,
        group: this.group,
        lease,
        stopReading,
        applying: (request) => {
          if (!this.#unsafe.rewindUnknownReadsOn) this.#unknownRewinds.set(leaseKey, request);
        },
        unknown: this.#unknownRewinds.get(leaseKey),
      });
      this.#unknownRewinds.delete(leaseKey);
    } catch (error) {
      if (!(error instanceof LeaseLostError)) {
        // The request a failed attempt was writing stays in #unknownRewinds (set right before the write):
        // no reader starts before the retry has read the lease back.
        this.#report(error, 'rewind');
        // Tried again after a backoff (the request is still there), with nobody reading meanwhile.
        void this.#clock
          .sleep(this.#retry.maxDelayMs, lease.signal)
          .then(() => this.#rewindRequested(leaseKey), () => undefined)
          .finally(() => this.#settling.delete(leaseKey));
        return;
      }
      this.#settling.delete(leaseKey);
      return;
    }
    this.#settling.delete(leaseKey);
    if (outcome.kind === 'unreadable' && this.#unreadableReported.get(leaseKey) !== outcome.value) {
      this.#unreadableReported.set(leaseKey, outcome.value);
      this.#report(
        new LeaseholdError('ERR_REWIND_UNREADABLE', `[${PKG}] lease ${describeValue(leaseKey)} carries a rewind request that cannot be read (${describeValue(outcome.value)}): it is not applied, and its children wait for it; rewind it again`),
        'rewind',
      );
    }
    const now = this.coordinator.lease(leaseKey);
    if (!now || now.draining || this.#state !== 'running') return;
    if (outcome.kind === 'rewound') {
      const { request, from, parentFirst } = outcome;
      this.#logger.info({ shardId: leaseKey, rewindId: request.id, from, to: request.to, waitsForParent: parentFirst }, 'shard rewound');
      this.emit('shard-rewound', { shardId: leaseKey, rewindId: request.id, from, to: request.to, waitsForParent: parentFirst });
      if (parentFirst) {
        await this.coordinator.release(leaseKey).catch((error: unknown) => this.#report(error, 'release'));
        return;
      }
    }
    // Its parents were read by the rewind it applied; otherwise (nothing applied here) the reader's start
    // looks at them, unless a start that does is under way: it starts the reader or gives the lease back.
    if (this.#unsafe.rewindStartSkipsParents) {
      if (!this.#pumps.has(leaseKey)) this.#startPump(leaseKey, false, true);
    } else if (!this.#pumps.has(leaseKey) && !this.#parentChecks.has(leaseKey)) this.#startPump(leaseKey, false, outcome.kind === 'rewound');
  }

  #report(error: unknown, operation: string): void {
    const err = error instanceof Error ? error : new Error(String(error));
    this.#logger.error({ err, operation }, 'consumer error');
    this.emit('error', { error: err, operation });
  }
}
