import { systemClock, systemRandom, type Clock } from '../clock.js';
import { describeValue, InvalidConfigError } from '../errors.js';
import { TypedEmitter } from '../events.js';
import { LeaderElector } from '../leader/elector.js';
import { LeaseCoordinator, type HeldLease, type LossReason } from '../lease/coordinator.js';
import { positive, positiveInteger } from '../lease/timing.js';
import type { ShardSource, SourceRecord } from '../source.js';
import { Checkpoint, type CheckpointStorage, type LeaderStore, type Position } from '../storage.js';
import { leaderLoop, syncShards, type ShardSyncReport } from './leader-duties.js';
import type { ConsumerOptions, InitialPosition, Logger } from './options.js';
import { ShardPump, type PumpReporter } from './shard-pump.js';
import { attachMetrics, defaultMeter } from '../metrics.js';

const PKG = 'core';

/** The events of a {@link Consumer}: everything that happens, typed. */
export interface ConsumerEvents {
  'shard-started': { shardId: string; position: Position; fencingToken: number };
  'shard-ended': { shardId: string; childShardIds: readonly string[] };
  'lease-lost': { shardId: string; reason: LossReason };
  'lease-handed-off': { shardId: string; to: string };
  'batch-processed': { shardId: string; records: number; bytes: number; millisBehindLatest: number | undefined; durationMs: number };
  checkpointed: { shardId: string; position: Position };
  'handler-failed': { shardId: string; attempt: number; error: Error };
  'record-skipped': { shardId: string; position: Position; error: Error };
  'shard-stopped': { shardId: string; error: Error };
  'leader-elected': { term: number };
  'leader-demoted': { term: number };
  'shard-sync': ShardSyncReport;
  error: { error: Error; operation: string };
}

const silent: Logger = { debug() {}, info() {}, warn() {}, error() {} };

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
  readonly #source: ShardSource<R>;
  readonly #storage: CheckpointStorage;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #initialPosition: Position;
  readonly #shardSyncIntervalMs: number;
  readonly #retry: { initialDelayMs: number; maxDelayMs: number; maxAttempts: number };
  readonly #pumps = new Map<string, ShardPump<R>>();
  readonly #drains = new Map<string, Promise<void>>();
  #state: 'new' | 'running' | 'stopping' | 'stopped' = 'new';
  #leaderWork: Promise<void> = Promise.resolve();

  constructor(options: ConsumerOptions<R>) {
    super();
    if (typeof options !== 'object' || options === null) {
      throw new InvalidConfigError(`[${PKG}] Consumer options must be an object, got ${describeValue(options)}`);
    }
    if (typeof options.processBatch !== 'function') {
      throw new InvalidConfigError(`[${PKG}] processBatch must be a function, got ${describeValue(options.processBatch)}`);
    }
    if (!options.source || typeof options.source.read !== 'function' || typeof options.source.listShards !== 'function') {
      throw new InvalidConfigError(`[${PKG}] source must implement ShardSource, got ${describeValue(options.source)}`);
    }
    const policy = options.checkpointing ?? 'batch';
    if (policy !== 'batch' && policy !== 'manual') {
      if (typeof policy !== 'object' || policy === null || (policy.everyRecords === undefined && policy.everyMs === undefined)) {
        throw new InvalidConfigError(`[${PKG}] checkpointing must be 'batch', 'manual' or { everyRecords?, everyMs? }, got ${describeValue(policy)}`);
      }
      if (policy.everyRecords !== undefined) positiveInteger(PKG, 'checkpointing.everyRecords', policy.everyRecords);
      if (policy.everyMs !== undefined) positive(PKG, 'checkpointing.everyMs', policy.everyMs);
    }
    const failure = options.onHandlerError ?? 'retry';
    if (!['retry', 'skip', 'stop'].includes(failure)) {
      throw new InvalidConfigError(`[${PKG}] onHandlerError must be 'retry', 'skip' or 'stop', got ${describeValue(failure)}`);
    }
    this.#options = options;
    this.#source = options.source;
    this.#storage = options.storage;
    this.group = options.group;
    this.#clock = options.clock ?? systemClock;
    this.#logger = options.logger ?? silent;
    this.#initialPosition = initialPositionOf(options.initialPosition);
    this.#shardSyncIntervalMs = positive(PKG, 'shardSyncIntervalMs', options.shardSyncIntervalMs ?? 60_000);
    this.#retry = {
      initialDelayMs: positive(PKG, 'retry.initialDelayMs', options.retry?.initialDelayMs ?? 100),
      maxDelayMs: positive(PKG, 'retry.maxDelayMs', options.retry?.maxDelayMs ?? 10_000),
      maxAttempts: positiveInteger(PKG, 'retry.maxAttempts', options.retry?.maxAttempts ?? 3),
    };
    const random = options.random ?? systemRandom;
    this.coordinator = new LeaseCoordinator({
      ...options.lease,
      storage: options.storage,
      group: options.group,
      workerId: options.workerId,
      clock: this.#clock,
      random,
      comparePositions: (a, b) => options.source.comparePositions(a, b),
      onDrain: (lease) => this.#drain(lease),
    });
    const leaderStore = options.leaderStore ?? (isLeaderStore(options.storage) ? options.storage : undefined);
    this.elector = leaderStore
      ? new LeaderElector({
          store: leaderStore,
          group: options.group,
          workerId: this.coordinator.workerId,
          leaseDurationMs: options.lease?.leaseDurationMs,
          maxClockDrift: options.lease?.maxClockDrift,
          clock: this.#clock,
          random,
          onElected: (term, signal) => this.#lead(term, signal),
          onDemoted: (term) => this.emit('leader-demoted', { term }),
        })
      : undefined;
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

  /** Joins the group: campaigns for leadership and starts taking shards. */
  async start(): Promise<void> {
    if (this.#state !== 'new') throw new InvalidConfigError(`[${PKG}] a Consumer starts once; this one is ${this.#state}`);
    this.#state = 'running';
    this.#logger.info({ group: this.group, workerId: this.workerId }, 'consumer starting');
    if (this.elector) await this.elector.start();
    await this.coordinator.start();
  }

  /**
   * Leaves the group gracefully: stops taking shards, lets every shard finish its batch in flight,
   * checkpoints, and releases every lease so that other workers take them at once. A shard that does not
   * finish within `timeoutMs` is not released but left to lapse (its handler's signal has fired).
   */
  async stop(options: { timeoutMs?: number } = {}): Promise<void> {
    if (this.#state === 'stopped' || this.#state === 'new') {
      this.#state = 'stopped';
      return;
    }
    if (this.#state === 'stopping') return;
    this.#state = 'stopping';
    this.#logger.info({ group: this.group, workerId: this.workerId }, 'consumer stopping');
    await this.coordinator.stop({ timeoutMs: options.timeoutMs ?? 30_000 });
    await this.elector?.stop();
    await this.#leaderWork;
    await Promise.all([...this.#pumps.values()].map((pump) => pump.done));
    this.#state = 'stopped';
    this.#logger.info({ group: this.group, workerId: this.workerId }, 'consumer stopped');
  }

  /** `await using consumer = ...`: stops it gracefully at the end of the scope. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  #wire(): void {
    const { coordinator } = this;
    coordinator.on('acquired', ({ leaseKey }) => this.#startPump(leaseKey));
    coordinator.on('lost', ({ leaseKey, reason }) => {
      this.#logger.warn({ shardId: leaseKey, reason }, 'lease lost');
      this.emit('lease-lost', { shardId: leaseKey, reason });
    });
    coordinator.on('handed-off', ({ leaseKey, to }) => this.emit('lease-handed-off', { shardId: leaseKey, to }));
    if (this.#options.metrics !== false) {
      attachMetrics(this.#options.metrics?.meter ?? defaultMeter(), { group: this.group, workerId: this.workerId }, {
        coordinator,
        elector: this.elector,
        consumer: this,
      });
    }
    coordinator.on('error', ({ error, operation }) => this.#report(error, operation));
    this.elector?.on('error', ({ error, operation }) => this.#report(error, `leader ${operation}`));
  }

  #startPump(leaseKey: string): void {
    const previous = this.#pumps.get(leaseKey);
    if (previous) {
      // Re-acquired while the last pump of the shard is still winding down: start after it stopped.
      void previous.done.then(() => this.#startPump(leaseKey));
      return;
    }
    const lease = this.coordinator.lease(leaseKey);
    if (!lease || this.#state !== 'running') return;
    const pump = new ShardPump<R>(
      {
        group: this.group,
        source: this.#source,
        storage: this.#storage,
        coordinator: this.coordinator,
        processBatch: this.#options.processBatch,
        checkpointing: this.#options.checkpointing ?? 'batch',
        onHandlerError: this.#options.onHandlerError ?? 'retry',
        retry: this.#retry,
        hooks: this.#options.hooks ?? {},
        initialPosition: this.#initialPosition,
        clock: this.#clock,
        random: this.#options.random ?? systemRandom,
        logger: this.#logger,
        reporter: this.#reporter(lease),
      },
      lease,
    );
    this.#pumps.set(leaseKey, pump);
    void pump.start().finally(() => {
      if (this.#pumps.get(leaseKey) === pump) this.#pumps.delete(leaseKey);
    });
  }

  #reporter(lease: HeldLease): PumpReporter {
    return {
      started: (shardId, position) => {
        this.#logger.info({ shardId, position, fencingToken: lease.fencingToken }, 'shard started');
        this.emit('shard-started', { shardId, position, fencingToken: lease.fencingToken });
      },
      batch: (shardId, records, bytes, millisBehindLatest, durationMs) =>
        this.emit('batch-processed', { shardId, records, bytes, millisBehindLatest, durationMs }),
      checkpointed: (shardId, position) => this.emit('checkpointed', { shardId, position }),
      handlerFailed: (shardId, attempt, error) => {
        this.#logger.warn({ shardId, attempt, err: error }, 'handler failed');
        this.emit('handler-failed', { shardId, attempt, error });
      },
      recordSkipped: (shardId, position, error) => {
        this.#logger.error({ shardId, position, err: error }, 'record skipped after repeated handler failures');
        this.emit('record-skipped', { shardId, position, error });
      },
      ended: (shardId, childShardIds) => {
        this.#logger.info({ shardId, childShardIds }, 'shard ended');
        this.emit('shard-ended', { shardId, childShardIds });
      },
      stopped: (shardId, error) => {
        this.#logger.error({ shardId, err: error }, 'shard stopped after a handler failure');
        this.emit('shard-stopped', { shardId, error });
      },
      error: (error, operation) => this.#report(error, operation),
    };
  }

  /** The coordinator is about to give a lease away: finish the batch in flight and checkpoint first. */
  #drain(lease: HeldLease): Promise<void> {
    const pump = this.#pumps.get(lease.leaseKey);
    if (!pump) return Promise.resolve();
    let drain = this.#drains.get(lease.leaseKey);
    if (!drain) {
      drain = pump.drain().finally(() => this.#drains.delete(lease.leaseKey));
      this.#drains.set(lease.leaseKey, drain);
    }
    return drain;
  }

  #lead(term: number, signal: AbortSignal): void {
    this.#logger.info({ term }, 'elected leader');
    this.emit('leader-elected', { term });
    this.#leaderWork = leaderLoop(
      async () => {
        try {
          const report = await syncShards(this.group, this.#source, this.#storage, signal);
          if (report.created.length > 0 || report.deleted.length > 0) {
            this.#logger.info({ term, ...report }, 'shard sync');
          }
          this.emit('shard-sync', report);
        } catch (error) {
          if (!signal.aborted) this.#report(error, 'shard-sync');
        }
      },
      this.#shardSyncIntervalMs,
      this.#clock,
      signal,
    );
  }

  #report(error: unknown, operation: string): void {
    const err = error instanceof Error ? error : new Error(String(error));
    this.#logger.error({ err, operation }, 'consumer error');
    this.emit('error', { error: err, operation });
  }
}
