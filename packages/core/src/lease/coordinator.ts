import { shuffled, systemClock, systemRandom, type Clock, type Random } from '../clock.js';
import {
  AbortedError,
  CheckpointBehindError,
  describeValue,
  InvalidConfigError,
  LeaseholdError,
  LeaseLostError,
  RecordFormatError,
  StorageOutcomeUnknownError,
  StorageUnavailableError,
} from '../errors.js';
import { TypedEmitter } from '../events.js';
import { compareNumericPositions } from '../position.js';
import {
  Checkpoint,
  leaseStateOf,
  RECORD_FORMAT,
  type ChangeSubscription,
  type CheckpointStorage,
  type LeaseChange,
  type LeaseListing,
  type LeaseRecord,
  type LeaseState,
  type LeaseUpdate,
  type Position,
  type WriteResult,
} from '../storage.js';
import { holdMs, nonNegative, positive, positiveInteger, resolveHoldTiming, resolveIdentity } from './timing.js';

const PKG = 'core';

/**
 * Decides whether a lease may be taken now; the default lets a child start only after its parents ended.
 * `all` holds every readable lease of the group, `corrupt` the keys of those that cannot be read.
 */
export type EligibilityPredicate = (lease: LeaseRecord, all: ReadonlyMap<string, LeaseRecord>, corrupt: ReadonlySet<string>) => boolean;

/**
 * A lease whose parents have all reached `SHARD_END`, or whose leases are gone, is eligible (DESIGN
 * section 4, rule 3). A parent's lease is deleted only once the parent finished or left the stream, and a
 * child's lease is created only while each parent has a lease or is retired (DESIGN section 5), so a
 * missing parent is a finished one. A parent whose lease cannot be read is not known to be finished.
 */
export const parentsFinished: EligibilityPredicate = (lease, all, corrupt) =>
  lease.parentKeys.every((parentKey) => {
    if (corrupt.has(parentKey)) return false;
    const parent = all.get(parentKey);
    return parent === undefined || parent.checkpoint === Checkpoint.SHARD_END;
  });

/** Why the coordinator is about to give a lease away; passed to {@link LeaseCoordinatorOptions.onDrain}. */
export type DrainReason = 'handoff' | 'shutdown';

/** Options of {@link LeaseCoordinator}. Durations are in milliseconds of the injected clock. */
export interface LeaseCoordinatorOptions {
  /** Where the leases live. */
  storage: CheckpointStorage;
  /** The group (consuming application) whose leases this worker shares. */
  group: string;
  /** This worker's id, unique among the group's live processes. Default: host name, pid and a random suffix. */
  workerId?: string;
  /** How long a lease lasts without renewal, as observed by others. Default 10,000 (KCL's failoverTimeMillis). */
  leaseDurationMs?: number;
  /** How often held leases are renewed, all in one batched write. Default a third of the lease duration. */
  renewIntervalMs?: number;
  /** How often the group's leases are listed to take free, expired and (by handoff) stolen leases. Default 2,000. */
  takeIntervalMs?: number;
  /** The most leases this worker holds. Default: no limit. */
  maxLeasesPerWorker?: number;
  /** The most handoffs this worker requests per take tick. Default 1. */
  maxStealsPerTick?: number;
  /** The bound ρ on clock-rate error (rates in [1 - ρ, 1 + ρ]). Default 0.01. */
  maxClockDrift?: number;
  /** Subtracted from the time a holder counts on after a renewal. Default min(500, leaseDurationMs / 20). */
  safetyMarginMs?: number;
  /** How long an owner keeps renewing a lease someone asked for before letting it lapse. Default half the lease duration. */
  handoffTimeoutMs?: number;
  /** Which leases may be taken. Default {@link parentsFinished}. */
  isEligible?: EligibilityPredicate;
  /** Orders two checkpoints of one lease; checkpoints only move forward. Default {@link compareNumericPositions}. */
  comparePositions?: (a: Position, b: Position) => number;
  /**
   * Called before a held lease is given away, to finish the work in flight and checkpoint. The lease is
   * still held and renewed meanwhile. A handoff waits at most `handoffTimeoutMs` for it.
   */
  onDrain?: (lease: HeldLease, reason: DrainReason) => Promise<void>;
  /** Listen to the store's change feed (if it has one) to act on releases and handoffs at once. Default true. */
  useChangeFeed?: boolean;
  /** The monotonic clock every timing decision is made on. Default: the process's. */
  clock?: Clock;
  /** The random source for shuffling and jitter. Default: `Math.random`. */
  random?: Random;
  /**
   * Deliberately unsafe behaviours, for proving that the simulation catches them. Never set in production.
   * @internal
   */
  unsafe?: { skipSelfFencing?: boolean; expiryFactor?: number; checkpointPerKey?: boolean };
}

/** The lease a checkpoint belongs to: its key and the tenure (fencing token) it was read in. */
export type LeaseTenure = Pick<HeldLease, 'leaseKey' | 'fencingToken'>;

/** A lease this worker holds, as user code sees it. */
export interface HeldLease {
  readonly leaseKey: string;
  /** The ownership epoch: a fencing token for user code's own downstream writes. */
  readonly fencingToken: number;
  /** Fires the moment the lease is lost, handed off or released: stop working on it. */
  readonly signal: AbortSignal;
  /** The checkpoint stored with the lease, or `null` before the first one. */
  readonly checkpoint: Position | null;
  /** The lease keys of the partitions this one continues. */
  readonly parentKeys: readonly string[];
  /** The lease's metadata. */
  readonly metadata: Readonly<Record<string, string>>;
  /** Whether another worker asked for the lease: finish the work in flight and expect a handoff. */
  readonly draining: boolean;
}

/** Why a lease was lost. */
export type LossReason =
  | 'taken' // another worker owns it now
  | 'deleted' // the lease is gone from storage
  | 'self-fenced' // no successful renewal within the hold; stopped whether or not storage answered
  | 'handoff-timeout' // a requested handoff did not finish in time; the lease lapses
  | 'shutdown-timeout'; // stop() could not drain it in time; the lease lapses

/** The events of a {@link LeaseCoordinator}. */
export interface LeaseCoordinatorEvents {
  acquired: { leaseKey: string; fencingToken: number; how: 'free' | 'expired' | 'handoff'; checkpoint: Position | null };
  renewed: { leaseKeys: string[]; durationMs: number };
  lost: { leaseKey: string; fencingToken: number; reason: LossReason };
  /** Another worker asked for a lease this worker holds. */
  'handoff-requested': { leaseKey: string; to: string };
  /** This worker asked another to hand a lease over (a cooperative steal). */
  'steal-requested': { leaseKey: string; from: string };
  /** A lease moved to the worker that asked for it; `durationMs` since the request was seen. */
  'handed-off': { leaseKey: string; to: string; durationMs: number };
  released: { leaseKey: string };
  /** A checkpoint was stored; `durationMs` includes waiting for earlier writes on the lease. */
  checkpointed: { leaseKey: string; position: Position; durationMs: number };
  /**
   * A lease of the group cannot be read back (reported once per key until it is readable again): it is
   * neither taken, written nor deleted, and its children wait. An operator must repair or delete it.
   */
  'corrupt-lease': { leaseKey: string; error: Error };
  /**
   * The coordinator met a record of a newer format (a rolling upgrade): it never writes such a record, and
   * stops. The error is a `RecordFormatError`.
   */
  fatal: { error: Error };
  /** The outcome of one storage write call (a batch counts each of its leases). */
  storage: { operation: string; applied: number; conflict: number; unknown: number };
  error: { error: Error; operation: string };
}

interface Held {
  record: LeaseRecord;
  heldUntil: number;
  readonly controller: AbortController;
  handoff: { to: string; seenAt: number } | null;
  leaving: boolean;
  /** The writes on this lease run one after another (each needs the version the previous one made). */
  chain: Promise<void>;
  /** How many writes on this lease are queued or in flight. */
  busy: number;
}

interface Observation {
  version: number;
  firstSeenAt: number;
  /** Whether this version replaced one this worker saw before: the lease is seen to move. */
  moved: boolean;
}

const stateOf = leaseStateOf;

function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}

/**
 * Shares the leases of one group among workers (DESIGN section 4): takes free and expired leases, balances
 * by cooperative handoff, renews every held lease in one batched write, fences itself by its own clock,
 * and checkpoints only while it holds the lease. Usable on its own for any set of keys.
 */
export class LeaseCoordinator extends TypedEmitter<LeaseCoordinatorEvents> implements AsyncDisposable {
  /** This worker's id in the group: the owner written into the leases it holds. */
  readonly workerId: string;
  /** The group whose leases this coordinator shares. */
  readonly group: string;
  /** How long a lease lasts without renewal, as others observe it. */
  readonly leaseDurationMs: number;
  /** How often held leases are renewed. */
  readonly renewIntervalMs: number;
  /** How often the group's leases are listed to take and balance. */
  readonly takeIntervalMs: number;
  /** How long after sending a successful renewal this worker counts a lease as held. */
  readonly holdMs: number;

  readonly #storage: CheckpointStorage;
  readonly #clock: Clock;
  readonly #random: Random;
  readonly #maxLeases: number;
  readonly #maxSteals: number;
  readonly #handoffTimeoutMs: number;
  readonly #isEligible: EligibilityPredicate;
  readonly #compare: (a: Position, b: Position) => number;
  readonly #onDrain: ((lease: HeldLease, reason: DrainReason) => Promise<void>) | undefined;
  readonly #useChangeFeed: boolean;
  readonly #skipSelfFencing: boolean;
  readonly #checkpointPerKey: boolean;
  readonly #expiryMs: number;

  readonly #held = new Map<string, Held>();
  readonly #observations = new Map<string, Observation>();
  /** Leases this worker asked for, by key: the owner asked, and when. */
  readonly #requests = new Map<string, { from: string; at: number }>();
  /** Keys reported as corrupt, so that each is reported once while it stays corrupt. */
  readonly #corrupt = new Set<string>();
  #stopping: Promise<void> | null = null;
  #state: 'new' | 'running' | 'stopping' | 'stopped' = 'new';
  readonly #lifetime = new AbortController();
  #wakeTake: (() => void) | null = null;
  #wakeRenew: (() => void) | null = null;
  #watchdog: { at: number; controller: AbortController } | null = null;
  #loops: Promise<void>[] = [];
  #takeInFlight: Promise<void> = Promise.resolve();
  #subscription: ChangeSubscription | null = null;

  constructor(options: LeaseCoordinatorOptions) {
    super();
    if (typeof options !== 'object' || options === null) {
      throw new InvalidConfigError(`[${PKG}] LeaseCoordinator options must be an object, got ${describeValue(options)}`);
    }
    if (!options.storage || typeof options.storage.updateLeases !== 'function') {
      throw new InvalidConfigError(`[${PKG}] storage must implement CheckpointStorage, got ${describeValue(options.storage)}`);
    }
    const timing = resolveHoldTiming(PKG, options, { leaseDurationMs: 'leaseDurationMs', renewIntervalMs: 'renewIntervalMs' });
    this.#storage = options.storage;
    this.#clock = options.clock ?? systemClock;
    this.#random = options.random ?? systemRandom;
    ({ group: this.group, workerId: this.workerId } = resolveIdentity(options, this.#random));
    this.leaseDurationMs = timing.leaseDurationMs;
    this.renewIntervalMs = timing.renewIntervalMs;
    this.takeIntervalMs = positive(PKG, 'takeIntervalMs', options.takeIntervalMs ?? 2_000);
    this.holdMs = holdMs(timing);
    this.#maxLeases = positiveInteger(PKG, 'maxLeasesPerWorker', options.maxLeasesPerWorker ?? Infinity);
    this.#maxSteals = options.maxStealsPerTick === 0 ? 0 : positiveInteger(PKG, 'maxStealsPerTick', options.maxStealsPerTick ?? 1);
    this.#handoffTimeoutMs = nonNegative(PKG, 'handoffTimeoutMs', options.handoffTimeoutMs ?? timing.leaseDurationMs / 2);
    if (this.#handoffTimeoutMs >= this.holdMs) {
      throw new InvalidConfigError(
        `[${PKG}] handoffTimeoutMs (${this.#handoffTimeoutMs}) must be below the time a renewal holds a lease (${this.holdMs.toFixed(0)} ms)`,
      );
    }
    this.#isEligible = options.isEligible ?? parentsFinished;
    this.#compare = options.comparePositions ?? compareNumericPositions;
    this.#onDrain = options.onDrain;
    this.#useChangeFeed = options.useChangeFeed ?? true;
    this.#skipSelfFencing = options.unsafe?.skipSelfFencing ?? false;
    this.#checkpointPerKey = options.unsafe?.checkpointPerKey ?? false;
    this.#expiryMs = this.leaseDurationMs * (options.unsafe?.expiryFactor ?? 1);
  }

  /** Starts taking and renewing leases; resolves once the first take tick has run. */
  async start(): Promise<void> {
    if (this.#state !== 'new') throw new InvalidConfigError(`[${PKG}] a LeaseCoordinator starts once; this one is ${this.#state}`);
    this.#state = 'running';
    if (this.#useChangeFeed && this.#storage.subscribe) {
      try {
        this.#subscription = await this.#storage.subscribe(this.group, (change) => this.#onChange(change));
      } catch (error) {
        this.#report(error, 'subscribe');
      }
    }
    await this.#takeTick();
    this.#loops = [
      this.#loop('take', this.takeIntervalMs, () => this.#takeTick()),
      this.#loop('renew', this.renewIntervalMs, () => this.#renewTick()),
    ];
  }

  /**
   * Stops taking, drains every held lease (through `onDrain`), and releases it so that others can take
   * it at once; withdraws this worker's own handoff requests and gives back any lease handed to it
   * meanwhile. Returns within `timeoutMs` (default `handoffTimeoutMs`) whatever user code or storage does:
   * a lease that did not drain in time is not released but left to lapse (its signal has fired). A
   * second call waits for the first.
   */
  stop(options: { timeoutMs?: number } = {}): Promise<void> {
    this.#stopping ??= this.#stop(options.timeoutMs ?? this.#handoffTimeoutMs);
    return this.#stopping;
  }

  async #stop(timeoutMs: number): Promise<void> {
    const deadline = this.#clock.now() + nonNegative(PKG, 'timeoutMs', timeoutMs);
    // Drains may use most of the time, not all: the releases after them need a round trip.
    const drainDeadline = deadline - Math.min(timeoutMs / 5, 2_000);
    const wasRunning = this.#state === 'running';
    this.#state = 'stopping';
    if (wasRunning) {
      this.#wakeTake?.();
      await this.#until(deadline, this.#takeInFlight);
      const entries = [...this.#held.entries()];
      const drained = await Promise.all(
        entries.map(async ([leaseKey, held]) => ({
          leaseKey,
          done: await this.#drain(leaseKey, held, 'shutdown', Math.max(0, drainDeadline - this.#clock.now())),
        })),
      );
      const releasable = drained.filter((entry) => entry.done).map((entry) => entry.leaseKey);
      await this.#until(deadline, this.#release(releasable));
      await this.#until(deadline, this.#withdraw());
      for (const [leaseKey, held] of this.#held) this.#lose(leaseKey, held, 'shutdown-timeout');
    }
    this.#state = 'stopped';
    this.#lifetime.abort(new AbortedError(`[${PKG}] lease coordinator ${this.workerId} stopped`));
    this.#watchdog?.controller.abort();
    this.#watchdog = null;
    await this.#until(deadline, Promise.all([...this.#loops, ...[...this.#held.values()].map((held) => held.chain)]));
    const subscription = this.#subscription;
    this.#subscription = null;
    if (subscription) await this.#until(deadline, subscription.close().catch((error: unknown) => this.#report(error, 'unsubscribe')));
  }

  /** Waits for `work`, but not past `deadline` of this worker's clock; the work goes on unawaited. */
  async #until(deadline: number, work: Promise<unknown>): Promise<void> {
    work.catch((error: unknown) => this.#report(error, 'stop'));
    const remaining = deadline - this.#clock.now();
    if (remaining <= 0) return;
    const timer = new AbortController();
    try {
      await Promise.race([work.then(() => undefined, () => undefined), this.#clock.sleep(remaining, timer.signal).catch(() => undefined)]);
    } finally {
      timer.abort();
    }
  }

  /**
   * A stopping worker asks for nothing more: its handoff requests are withdrawn and a lease handed to it
   * while it stopped is written free, so that neither waits a lease duration for it.
   */
  async #withdraw(): Promise<void> {
    let leases: LeaseRecord[];
    try {
      leases = (await this.#storage.listLeases(this.group)).leases;
    } catch (error) {
      this.#report(error, 'list');
      return;
    }
    const updates: LeaseUpdate[] = [];
    for (const lease of leases) {
      if (lease.format > RECORD_FORMAT || this.#held.has(lease.leaseKey)) continue;
      if (lease.owner === this.workerId) {
        updates.push({ leaseKey: lease.leaseKey, expectedVersion: lease.version, next: { ...stateOf(lease), owner: null, pendingOwner: null }, notify: 'released' });
      } else if (lease.pendingOwner === this.workerId) {
        updates.push({ leaseKey: lease.leaseKey, expectedVersion: lease.version, next: { ...stateOf(lease), pendingOwner: null } });
      }
    }
    if (updates.length > 0) await this.#update(updates, 'withdraw');
    this.#requests.clear();
  }

  /** `await using coordinator = ...`: stops it (and releases its leases) at the end of the scope. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  /** Whether this worker holds the lease now: it took or renewed it within the hold and has not given it away. */
  isHeld(leaseKey: string): boolean {
    const held = this.#held.get(leaseKey);
    return held !== undefined && !held.leaving && (this.#skipSelfFencing || this.#clock.now() < held.heldUntil);
  }

  /** The lease if this worker holds it now. */
  lease(leaseKey: string): HeldLease | undefined {
    const held = this.#held.get(leaseKey);
    return held && this.isHeld(leaseKey) ? this.#handle(held) : undefined;
  }

  /** Every lease this worker holds now. */
  heldLeases(): HeldLease[] {
    return [...this.#held.keys()].filter((leaseKey) => this.isHeld(leaseKey)).map((leaseKey) => this.#handle(this.#held.get(leaseKey) as Held));
  }

  /**
   * Moves the lease's checkpoint forward, conditionally on this worker still holding it in the same
   * tenure (`lease.fencingToken`) at the version it last wrote: a handler of an earlier tenure can never
   * write into a later one. Refuses a position behind the stored one (`CheckpointBehindError`, checked
   * again on every retry) and any write after loss (`LeaseLostError`); an unknown outcome is re-read and
   * retried, never assumed.
   */
  async checkpoint(lease: LeaseTenure, position: Position): Promise<void> {
    const { leaseKey } = lease;
    if (typeof position !== 'string' || position.length === 0) {
      throw new CheckpointBehindError(`[${PKG}] checkpoint position must be a non-empty string, got ${describeValue(position)}`);
    }
    const held = this.#requireHeld(lease);
    const startedAt = this.#clock.now();
    let wrote = false;
    await this.#onLease(held, async () => {
      this.#requireHeld(lease);
      const next = (record: LeaseRecord): LeaseState | null => {
        const current = record.checkpoint;
        if (current !== null && (!Checkpoint.isSentinel(current) || current === Checkpoint.SHARD_END)) {
          const order = this.#compare(position, current);
          if (order < 0) {
            throw new CheckpointBehindError(
              `[${PKG}] checkpoint ${describeValue(position)} of lease ${describeValue(leaseKey)} is behind the stored ${describeValue(current)}`,
            );
          }
          if (order === 0) return null;
        }
        return { ...stateOf(record), checkpoint: position };
      };
      wrote = await this.#writeHeld(leaseKey, held, next, 'checkpoint');
    });
    if (wrote) this.emit('checkpointed', { leaseKey, position, durationMs: this.#clock.now() - startedAt });
  }

  /**
   * Writes metadata fields on a lease this worker holds in `lease`'s tenure (a field set to `null` is
   * removed), conditionally like a checkpoint; for facts the owner publishes about its lease, such as a
   * stall. A no-op when nothing changes.
   */
  async annotate(lease: LeaseTenure, fields: Readonly<Record<string, string | null>>): Promise<void> {
    const held = this.#requireHeld(lease);
    await this.#onLease(held, async () => {
      this.#requireHeld(lease);
      await this.#writeHeld(
        lease.leaseKey,
        held,
        (record) => {
          const metadata: Record<string, string> = { ...record.metadata };
          let changed = false;
          for (const [name, value] of Object.entries(fields)) {
            if (value === null ? name in metadata : metadata[name] !== value) changed = true;
            if (value === null) delete metadata[name];
            else metadata[name] = value;
          }
          return changed ? { ...stateOf(record), metadata } : null;
        },
        'annotate',
      );
    });
  }

  /** Gives up one lease now: stops its work (its signal fires) and writes it free for others. */
  async release(leaseKey: string): Promise<void> {
    await this.#release([leaseKey]);
  }

  // ---------------------------------------------------------------- loops

  async #loop(kind: 'take' | 'renew', intervalMs: number, tick: () => Promise<void>): Promise<void> {
    // Taking stops as soon as stop() begins; renewing goes on while held leases drain.
    const active = (): boolean => this.#state === 'running' || (kind === 'renew' && this.#state === 'stopping');
    while (active()) {
      const waker = new AbortController();
      const onStop = (): void => waker.abort();
      this.#lifetime.signal.addEventListener('abort', onStop, { once: true });
      if (kind === 'take') this.#wakeTake = () => waker.abort();
      else this.#wakeRenew = () => waker.abort();
      const jitter = 1 + (this.#random.next() - 0.5) * 0.1;
      try {
        await this.#clock.sleep(intervalMs * jitter, waker.signal);
      } catch {
        // Woken early: by the change feed, by a handoff request, or by stop().
      } finally {
        this.#lifetime.signal.removeEventListener('abort', onStop);
      }
      if (this.#lifetime.signal.aborted || !active()) return;
      await tick().catch((error: unknown) => this.#report(error, kind));
    }
  }

  #onChange(change: LeaseChange): void {
    if (this.#state !== 'running') return;
    if (change.kind === 'released' || change.kind === 'handed-off' || change.kind === 'created') this.#wakeTake?.();
    if (change.kind === 'handoff-requested' && this.#held.has(change.leaseKey)) this.#wakeRenew?.();
  }

  // ---------------------------------------------------------------- renewing

  async #renewTick(): Promise<void> {
    try {
      await this.#renewHeld();
    } catch (error) {
      this.#report(error, 'renew');
    }
  }

  async #renewHeld(): Promise<void> {
    this.#fenceExpired();
    const now = this.#clock.now();
    // A lease with a write in flight is renewed by that write (any write of ours moves the version).
    const due = [...this.#held.entries()].filter(
      ([, held]) => !held.leaving && held.busy === 0 && !(held.handoff && now - held.handoff.seenAt >= this.#handoffTimeoutMs),
    );
    for (const [leaseKey, held] of this.#held) {
      if (held.handoff && !held.leaving && now - held.handoff.seenAt >= this.#handoffTimeoutMs) {
        // The owner could not finish in time: stop renewing so that the lease lapses to the thief by expiry.
        this.#lose(leaseKey, held, 'handoff-timeout');
      }
    }
    if (due.length === 0) return;
    const startedAt = this.#clock.now();
    await this.#onLeases(due.map(([, held]) => held), async () => {
      const retry = await this.#renewBatch(due);
      if (retry.length > 0) await this.#renewBatch(retry);
    });
    this.#armWatchdog();
    this.emit('renewed', {
      leaseKeys: due.map(([leaseKey]) => leaseKey).filter((leaseKey) => this.isHeld(leaseKey)),
      durationMs: this.#clock.now() - startedAt,
    });
  }

  /** One batched renewal; returns the leases whose version moved under them while still theirs (retry once). */
  async #renewBatch(batch: Array<[string, Held]>): Promise<Array<[string, Held]>> {
    const sentAt = this.#clock.now();
    const results = await this.#update(
      batch.map(([leaseKey, held]) => ({ leaseKey, expectedVersion: held.record.version, next: stateOf(held.record) })),
      'renew',
    );
    const retry: Array<[string, Held]> = [];
    batch.forEach(([leaseKey, held], i) => {
      const outcome = results[i] as WriteResult<LeaseRecord>;
      if (this.#held.get(leaseKey) !== held) return;
      if (outcome.status === 'applied') {
        this.#adopt(leaseKey, held, outcome.record, sentAt);
      } else if (outcome.status === 'conflict') {
        if (this.#stillMine(held, outcome.current)) {
          this.#adopt(leaseKey, held, outcome.current, null);
          retry.push([leaseKey, held]);
        } else {
          this.#lose(leaseKey, held, outcome.current === null ? 'deleted' : 'taken');
        }
      }
      // unknown: the hold is not extended; the next renewal tells (a conflict with our own record is adopted).
    });
    return retry;
  }

  #stillMine(held: Held, current: LeaseRecord | null): current is LeaseRecord {
    return current !== null && current.owner === this.workerId && current.epoch === held.record.epoch;
  }

  /** Takes the stored record as ours; `sentAt` extends the hold when the record is the result of our own write. */
  #adopt(leaseKey: string, held: Held, record: LeaseRecord, sentAt: number | null): void {
    held.record = record;
    if (sentAt !== null) held.heldUntil = Math.max(held.heldUntil, sentAt + this.holdMs);
    if (record.pendingOwner !== null && record.pendingOwner !== this.workerId && !held.handoff && !held.leaving) {
      held.handoff = { to: record.pendingOwner, seenAt: this.#clock.now() };
      this.emit('handoff-requested', { leaseKey, to: record.pendingOwner });
      void this.#handOff(leaseKey, held);
    }
  }

  /**
   * Makes the lease's signal judge the hold itself whenever it is looked at. The watchdog timer fires at
   * the hold's end, but a process that was paused past it may run user code (an I/O completion, an earlier
   * timer) before that timer: reading `signal.aborted`, `signal.reason` or `signal.throwIfAborted()` then
   * fences the lease first, so user code never sees a lease as held past its hold.
   */
  #guardSignal(leaseKey: string, held: Held): void {
    const signal = held.controller.signal;
    const proto = AbortSignal.prototype;
    // The prototype's getters, read with this signal as the receiver (the own properties below shadow them).
    const aborted = (): boolean => Reflect.get<AbortSignal, 'aborted'>(proto, 'aborted', signal);
    const reason = (): unknown => Reflect.get(proto, 'reason', signal);
    const check = (): void => {
      if (aborted() || held.leaving || this.#skipSelfFencing || this.#held.get(leaseKey) !== held) return;
      if (this.#clock.now() >= held.heldUntil) this.#lose(leaseKey, held, 'self-fenced');
    };
    Object.defineProperties(signal, {
      aborted: { configurable: true, get: () => (check(), aborted()) },
      reason: { configurable: true, get: (): unknown => (check(), reason()) },
      throwIfAborted: {
        configurable: true,
        value: () => {
          check();
          if (aborted()) throw reason();
        },
      },
    });
  }

  /** Drops every lease whose hold has passed: past it, this worker must not act on it, answered or not. */
  #fenceExpired(): void {
    if (this.#skipSelfFencing) return;
    const now = this.#clock.now();
    for (const [leaseKey, held] of this.#held) {
      if (!held.leaving && now >= held.heldUntil) this.#lose(leaseKey, held, 'self-fenced');
    }
  }

  /**
   * Keeps one timer at the earliest hold's end. Renewals only push holds later, so the timer is moved
   * only when a hold ends sooner than it is set for; when it fires early it re-arms for the next end.
   */
  #armWatchdog(): void {
    if (this.#skipSelfFencing || this.#state === 'stopped') return;
    let earliest = Infinity;
    for (const held of this.#held.values()) if (!held.leaving) earliest = Math.min(earliest, held.heldUntil);
    if (earliest === Infinity || (this.#watchdog !== null && this.#watchdog.at <= earliest)) return;
    this.#watchdog?.controller.abort();
    const watchdog = { at: earliest, controller: new AbortController() };
    this.#watchdog = watchdog;
    this.#clock.sleep(Math.max(0, earliest - this.#clock.now()), watchdog.controller.signal).then(
      () => {
        if (this.#watchdog !== watchdog) return;
        this.#watchdog = null;
        this.#fenceExpired();
        this.#armWatchdog();
      },
      () => undefined,
    );
  }

  // ---------------------------------------------------------------- handing off and releasing

  async #handOff(leaseKey: string, held: Held): Promise<void> {
    const drained = await this.#drain(leaseKey, held, 'handoff', this.#handoffTimeoutMs);
    if (!drained || this.#held.get(leaseKey) !== held) return;
    await this.#onLease(held, async () => {
      if (this.#held.get(leaseKey) !== held || !this.isHeld(leaseKey)) return;
      const to = held.record.pendingOwner;
      if (to === null) return;
      this.#stopWork(leaseKey, held);
      const outcome = await this.#writeOnce(leaseKey, held, (record) => ({
        ...stateOf(record),
        owner: record.pendingOwner,
        epoch: record.epoch + 1,
        pendingOwner: null,
      }), 'handed-off');
      this.#forget(leaseKey, held);
      if (outcome?.status === 'applied') {
        const durationMs = this.#clock.now() - (held.handoff?.seenAt ?? this.#clock.now());
        this.emit('handed-off', { leaseKey, to: outcome.record.owner ?? to, durationMs });
      }
      else this.emit('lost', { leaseKey, fencingToken: held.record.epoch, reason: 'handoff-timeout' });
    }).catch((error: unknown) => this.#report(error, 'handoff'));
  }

  /** Runs `onDrain`, bounded by `timeoutMs`; true when it finished in time and the lease is still held. */
  async #drain(leaseKey: string, held: Held, reason: DrainReason, timeoutMs: number): Promise<boolean> {
    if (!this.#onDrain) return this.isHeld(leaseKey);
    const timer = new AbortController();
    try {
      const finished = await Promise.race([
        this.#onDrain(this.#handle(held), reason).then(
          () => true,
          (error: unknown) => {
            this.#report(error, 'drain');
            return true;
          },
        ),
        this.#clock.sleep(timeoutMs, timer.signal).then(() => false, () => false),
      ]);
      return finished && this.#held.get(leaseKey) === held && this.isHeld(leaseKey);
    } finally {
      timer.abort();
    }
  }

  async #release(leaseKeys: readonly string[]): Promise<void> {
    const leaving = leaseKeys
      .map((leaseKey) => [leaseKey, this.#held.get(leaseKey)] as const)
      .filter((entry): entry is readonly [string, Held] => entry[1] !== undefined && this.isHeld(entry[0]));
    if (leaving.length === 0) return;
    // Work stops first (signals fire, no new checkpoint is accepted), then the writes in flight finish.
    for (const [leaseKey, held] of leaving) this.#stopWork(leaseKey, held);
    await this.#onLeases(leaving.map(([, held]) => held), async () => {
      const results = await this.#update(
        leaving.map(([leaseKey, held]) => ({
          leaseKey,
          expectedVersion: held.record.version,
          next: { ...stateOf(held.record), owner: null, pendingOwner: null },
          notify: 'released' as const,
        })),
        'release',
      );
      leaving.forEach(([leaseKey, held], i) => {
        this.#forget(leaseKey, held);
        if (results[i]?.status === 'applied') this.emit('released', { leaseKey });
        else this.emit('lost', { leaseKey, fencingToken: held.record.epoch, reason: 'taken' });
      });
    });
  }

  // ---------------------------------------------------------------- taking

  #takeTick(): Promise<void> {
    const tick = this.#takeOnce();
    this.#takeInFlight = tick;
    return tick;
  }

  async #takeOnce(): Promise<void> {
    if (this.#state !== 'running') return;
    let listing: LeaseListing;
    try {
      listing = await this.#storage.listLeases(this.group);
    } catch (error) {
      this.#report(error, 'list');
      return;
    }
    if (this.#state !== 'running') return;
    const newer = listing.leases.find((lease) => lease.format > RECORD_FORMAT);
    if (newer) {
      this.#fail(this.#formatError(newer.leaseKey, newer.format));
      return;
    }
    const now = this.#clock.now();
    const corrupt = this.#noticeCorrupt(listing.corrupt);
    // A corrupt lease is nobody's to take; a held one that turned corrupt stops renewing and self-fences.
    const leases = listing.leases;
    const all = new Map(leases.map((lease) => [lease.leaseKey, lease]));
    this.#observe(leases, now, corrupt);
    this.#noticeLosses(all, corrupt);
    await this.#claimHandedOver(leases);
    if (this.#state !== 'running') return;

    const expired = (lease: LeaseRecord): boolean =>
      lease.owner !== null && now - (this.#observations.get(lease.leaseKey)?.firstSeenAt ?? now) >= this.#expiryMs;
    const workable = leases.filter((lease) => lease.checkpoint !== Checkpoint.SHARD_END && this.#isEligible(lease, all, corrupt));
    const counts = new Map<string, number>();
    for (const lease of workable) {
      if (lease.owner !== null && lease.owner !== this.workerId && !expired(lease)) {
        counts.set(lease.owner, (counts.get(lease.owner) ?? 0) + 1);
      }
    }
    // A request counts as a lease on its way only while its owner could still answer it: a request to a
    // worker that died stays unanswered, and must not hold this worker back from free and expired leases.
    const answerableMs = this.renewIntervalMs + this.#handoffTimeoutMs + this.takeIntervalMs;
    const onItsWay = (lease: LeaseRecord): boolean => {
      const request = this.#requests.get(lease.leaseKey);
      return request !== undefined && lease.pendingOwner === this.workerId && now - request.at < answerableMs && !expired(lease);
    };
    // Leases storage still shows as this worker's (lost to self-fencing, or taken with an unknown outcome)
    // count as everyone else counts them until they expire, so that all workers balance on the same view.
    const mine = workable.filter(
      (lease) => this.#held.has(lease.leaseKey) || onItsWay(lease) || (lease.owner === this.workerId && !expired(lease)),
    ).length;
    const live = counts.size + 1;
    const target = Math.min(Math.ceil(workable.length / live), this.#maxLeases);
    const unowned = workable.filter((lease) => !this.#held.has(lease.leaseKey) && (lease.owner === null || expired(lease)));
    // Free and expired leases are never left waiting while this worker sits at its target: it takes its
    // share of them, ceil(unowned / live workers), even above the target. A worker that died still counts
    // as live until its leases expire, and without this its leases would wait for the target to catch up;
    // the surplus is balanced away by handoff afterwards.
    const share = Math.min(Math.ceil(unowned.length / live), this.#maxLeases - mine);
    let wanted = Math.max(target - mine, share);
    if (wanted <= 0) return;

    const takeable = shuffled(unowned, this.#random).slice(0, wanted);
    const taken = await this.#take(takeable);
    if (this.#state !== 'running') return;
    // Workers woken by the same release pick from the same free leases, and some picks collide: look again
    // shortly instead of at the next tick, so that a graceful stop costs milliseconds, not a take interval.
    if (taken < takeable.length && this.#state === 'running') {
      this.#clock.sleep(this.#random.next() * 200, this.#lifetime.signal).then(() => this.#wakeTake?.(), () => undefined);
    }
    wanted = target - mine - taken;
    if (wanted > 0 && this.#maxSteals > 0) await this.#requestHandoffs(workable, counts, mine + taken, wanted, now);
  }

  /** Reports each newly corrupt lease once; returns the keys of every corrupt lease now. */
  #noticeCorrupt(errors: readonly Error[]): Set<string> {
    const keys = new Set<string>();
    for (const error of errors) {
      const leaseKey = (error as { leaseKey?: unknown }).leaseKey;
      if (typeof leaseKey !== 'string') continue;
      keys.add(leaseKey);
      if (!this.#corrupt.has(leaseKey)) {
        this.emit('corrupt-lease', { leaseKey, error });
        this.#report(error, 'list');
      }
    }
    for (const leaseKey of this.#corrupt) if (!keys.has(leaseKey)) this.#corrupt.delete(leaseKey);
    for (const leaseKey of keys) this.#corrupt.add(leaseKey);
    return keys;
  }

  #observe(leases: readonly LeaseRecord[], now: number, corrupt: ReadonlySet<string>): void {
    const present = new Set<string>(corrupt);
    for (const lease of leases) {
      present.add(lease.leaseKey);
      const seen = this.#observations.get(lease.leaseKey);
      if (!seen || seen.version !== lease.version) {
        this.#observations.set(lease.leaseKey, { version: lease.version, firstSeenAt: now, moved: seen !== undefined });
      }
    }
    for (const leaseKey of this.#observations.keys()) if (!present.has(leaseKey)) this.#observations.delete(leaseKey);
    for (const [leaseKey, request] of this.#requests) {
      const lease = leases.find((candidate) => candidate.leaseKey === leaseKey);
      if (!lease || (lease.pendingOwner !== this.workerId && lease.owner !== this.workerId) || now - request.at > this.leaseDurationMs * 3) {
        this.#requests.delete(leaseKey);
      }
    }
  }

  /** A held lease that storage shows with another owner or epoch, or not at all, is lost. */
  #noticeLosses(all: ReadonlyMap<string, LeaseRecord>, corrupt: ReadonlySet<string>): void {
    for (const [leaseKey, held] of this.#held) {
      if (held.leaving || corrupt.has(leaseKey)) continue;
      const stored = all.get(leaseKey);
      if (stored === undefined) this.#lose(leaseKey, held, 'deleted');
      else if (stored.version > held.record.version && !this.#stillMine(held, stored)) this.#lose(leaseKey, held, 'taken');
    }
  }

  /** Leases handed to this worker after it asked for them count as held once it has written them itself. */
  async #claimHandedOver(leases: readonly LeaseRecord[]): Promise<void> {
    const handed = leases.filter(
      (lease) => lease.owner === this.workerId && !this.#held.has(lease.leaseKey) && this.#requests.has(lease.leaseKey),
    );
    if (handed.length === 0) return;
    await this.#acquire(handed.map((lease) => ({ lease, next: { ...stateOf(lease), pendingOwner: null }, how: 'handoff' as const })));
  }

  /** Takes free and expired leases in one batched write; returns how many were taken. */
  async #take(leases: readonly LeaseRecord[]): Promise<number> {
    if (leases.length === 0) return 0;
    return this.#acquire(
      leases.map((lease) => ({
        lease,
        next: { ...stateOf(lease), owner: this.workerId, epoch: lease.epoch + 1, pendingOwner: null },
        how: lease.owner === null ? ('free' as const) : ('expired' as const),
      })),
    );
  }

  async #acquire(items: ReadonlyArray<{ lease: LeaseRecord; next: LeaseState; how: 'free' | 'expired' | 'handoff' }>): Promise<number> {
    const sentAt = this.#clock.now();
    const results = await this.#update(
      items.map(({ lease, next }) => ({ leaseKey: lease.leaseKey, expectedVersion: lease.version, next })),
      'take',
    );
    let taken = 0;
    items.forEach(({ lease, how }, i) => {
      const outcome = results[i] as WriteResult<LeaseRecord>;
      // A conflict or an unknown outcome grants nothing: the next tick's listing tells the truth (a
      // handed-over lease stays requested, so that the next tick claims it at its new version).
      if (outcome.status !== 'applied' || this.#state === 'stopped') return;
      this.#requests.delete(lease.leaseKey);
      if (sentAt + this.holdMs <= this.#clock.now() && !this.#skipSelfFencing) return;
      const held: Held = {
        record: outcome.record,
        heldUntil: sentAt + this.holdMs,
        controller: new AbortController(),
        handoff: null,
        leaving: false,
        chain: Promise.resolve(),
        busy: 0,
      };
      this.#guardSignal(lease.leaseKey, held);
      this.#held.set(lease.leaseKey, held);
      taken++;
      this.emit('acquired', { leaseKey: lease.leaseKey, fencingToken: outcome.record.epoch, how, checkpoint: outcome.record.checkpoint });
      this.#adopt(lease.leaseKey, held, outcome.record, sentAt);
    });
    if (taken > 0) this.#armWatchdog();
    return taken;
  }

  /**
   * Balances by cooperative handoff: asks the most loaded workers (above this one by two or more, so
   * that nobody ends below the thief) to hand over one lease each, up to `maxStealsPerTick`.
   */
  async #requestHandoffs(
    workable: readonly LeaseRecord[],
    counts: Map<string, number>,
    mine: number,
    wanted: number,
    now: number,
  ): Promise<void> {
    // Only a lease whose version moved within about one renew interval has an owner that is alive to
    // answer; asking a silent owner would only reset everyone's expiry clock on a lease nobody works.
    const fresh = (lease: LeaseRecord): boolean => {
      const seen = this.#observations.get(lease.leaseKey);
      return seen !== undefined && seen.moved && now - seen.firstSeenAt < this.renewIntervalMs * 1.5;
    };
    const requests: LeaseRecord[] = [];
    let have = mine;
    for (let steals = 0; steals < Math.min(wanted, this.#maxSteals); steals++) {
      const most = Math.max(0, ...counts.values());
      if (most < have + 2) break;
      // Among the most loaded workers (only those, so that nobody ends below another), the lease whose
      // version moved most recently: its owner is alive and will see the request soon.
      const candidates = workable
        .filter(
          (lease) =>
            lease.owner !== null &&
            counts.get(lease.owner) === most &&
            lease.pendingOwner === null &&
            fresh(lease) &&
            !requests.includes(lease),
        )
        .sort((a, b) => (this.#observations.get(b.leaseKey)?.firstSeenAt ?? 0) - (this.#observations.get(a.leaseKey)?.firstSeenAt ?? 0));
      const chosen = candidates[0];
      if (!chosen) break;
      const victim = chosen.owner as string;
      requests.push(chosen);
      counts.set(victim, (counts.get(victim) ?? 0) - 1);
      have++;
    }
    if (requests.length === 0) return;
    const results = await this.#update(
      requests.map((lease) => ({
        leaseKey: lease.leaseKey,
        expectedVersion: lease.version,
        next: { ...stateOf(lease), pendingOwner: this.workerId },
        notify: 'handoff-requested' as const,
      })),
      'steal',
    );
    requests.forEach((lease, i) => {
      if (results[i]?.status !== 'applied') return;
      this.#requests.set(lease.leaseKey, { from: lease.owner ?? '', at: this.#clock.now() });
      this.emit('steal-requested', { leaseKey: lease.leaseKey, from: lease.owner ?? '' });
    });
  }

  // ---------------------------------------------------------------- writes and bookkeeping

  /**
   * One conditional write on a held lease, retried (at most twice) when only a handoff request or an
   * unknown outcome of our own moved its version. `next` sees the stored record each time and may refuse
   * (throw) or find nothing to write (`null`). Returns whether a write applied.
   */
  async #writeHeld(leaseKey: string, held: Held, next: (record: LeaseRecord) => LeaseState | null, operation: string): Promise<boolean> {
    for (let attempt = 0; attempt < 3; attempt++) {
      const sentAt = this.#clock.now();
      const expected = held.record.version;
      const state = next(held.record);
      if (state === null) return false;
      const [outcome] = await this.#update([{ leaseKey, expectedVersion: expected, next: state }], operation);
      if (this.#held.get(leaseKey) !== held) throw this.#lostError(leaseKey);
      if (outcome?.status === 'applied') {
        this.#adopt(leaseKey, held, outcome.record, sentAt);
        this.#armWatchdog();
        return true;
      }
      let current: LeaseRecord | null;
      if (outcome?.status === 'conflict') {
        current = outcome.current;
      } else {
        // Unknown: read back what is stored before deciding anything.
        try {
          current = await this.#storage.getLease(this.group, leaseKey);
        } catch (error) {
          throw new StorageOutcomeUnknownError(
            `[${PKG}] ${operation} of lease ${describeValue(leaseKey)} may or may not have applied, and it could not be read back`,
            { cause: error },
          );
        }
        if (current && current.version === expected + 1 && this.#stillMine(held, current) && sameState(current, state)) {
          this.#adopt(leaseKey, held, current, null);
          return true;
        }
      }
      if (!this.#stillMine(held, current)) {
        this.#lose(leaseKey, held, current === null ? 'deleted' : 'taken');
        throw this.#lostError(leaseKey);
      }
      this.#adopt(leaseKey, held, current, null);
      if (!this.isHeld(leaseKey)) throw this.#lostError(leaseKey);
    }
    throw new StorageOutcomeUnknownError(`[${PKG}] ${operation} of lease ${describeValue(leaseKey)} did not apply after 3 attempts`);
  }

  /** A single write on a held lease (a transfer): applied, or whatever else happened. */
  async #writeOnce(leaseKey: string, held: Held, next: (record: LeaseRecord) => LeaseState, notify: 'handed-off'): Promise<WriteResult<LeaseRecord> | undefined> {
    const [outcome] = await this.#update([{ leaseKey, expectedVersion: held.record.version, next: next(held.record), notify }], 'handoff');
    return outcome;
  }

  async #update(updates: LeaseUpdate[], operation: string): Promise<WriteResult<LeaseRecord>[]> {
    const newer = updates.find((update) => update.next.format > RECORD_FORMAT);
    if (newer) {
      // Written by a newer core whose rules this one does not know: never overwrite it; stop instead.
      const error = this.#formatError(newer.leaseKey, newer.next.format);
      this.#fail(error);
      return updates.map(() => ({ status: 'unknown', error }));
    }
    try {
      const results = await this.#storage.updateLeases(this.group, updates);
      const tally = { operation, applied: 0, conflict: 0, unknown: 0 };
      for (const outcome of results) {
        tally[outcome.status]++;
        if (outcome.status === 'unknown') this.#report(outcome.error, operation);
      }
      this.emit('storage', tally);
      return results;
    } catch (error) {
      this.emit('storage', { operation, applied: 0, conflict: 0, unknown: updates.length });
      this.#report(error, operation);
      const unknown = error instanceof LeaseholdError ? error : new StorageUnavailableError(`[${PKG}] ${operation} failed`, { cause: error });
      return updates.map(() => ({ status: 'unknown', error: unknown }));
    }
  }

  /** Runs `fn` after every write already queued on the lease, and before any queued later. */
  #onLease<T>(held: Held, fn: () => Promise<T>): Promise<T> {
    return this.#onLeases([held], fn);
  }

  /** Runs `fn` (one batched write) once every lease in `leases` is free of earlier writes. */
  #onLeases<T>(leases: readonly Held[], fn: () => Promise<T>): Promise<T> {
    const before = Promise.all(leases.map((held) => held.chain));
    for (const held of leases) held.busy++;
    const run = before.then(fn);
    const done = run.then(
      () => undefined,
      () => undefined,
    );
    for (const held of leases) {
      held.chain = done.then(() => {
        held.busy--;
      });
    }
    return run;
  }

  /** The held lease of `lease`'s tenure, or a `LeaseLostError`: held by key alone is not enough. */
  #requireHeld(lease: LeaseTenure): Held {
    const { leaseKey } = lease;
    const held = this.#held.get(leaseKey);
    if (!held || !this.isHeld(leaseKey)) {
      if (held && !held.leaving) this.#fenceExpired();
      throw this.#lostError(leaseKey);
    }
    if (!this.#checkpointPerKey && held.record.epoch !== lease.fencingToken) {
      throw new LeaseLostError(
        `[${PKG}] lease ${describeValue(leaseKey)} is held in tenure ${held.record.epoch}, not in tenure ${describeValue(lease.fencingToken)} the write belongs to`,
        leaseKey,
      );
    }
    return held;
  }

  #lostError(leaseKey: string): LeaseLostError {
    return new LeaseLostError(`[${PKG}] worker ${describeValue(this.workerId)} does not hold lease ${describeValue(leaseKey)}`, leaseKey);
  }

  /** Stops user work on a lease this worker is about to give away. */
  #stopWork(leaseKey: string, held: Held): void {
    held.leaving = true;
    held.controller.abort(new AbortedError(`[${PKG}] lease ${describeValue(leaseKey)} is being given away`));
  }

  #forget(leaseKey: string, held: Held): void {
    if (this.#held.get(leaseKey) === held) this.#held.delete(leaseKey);
  }

  #lose(leaseKey: string, held: Held, reason: LossReason): void {
    if (this.#held.get(leaseKey) !== held) return;
    this.#held.delete(leaseKey);
    held.leaving = true;
    held.controller.abort(this.#lostError(leaseKey));
    this.emit('lost', { leaseKey, fencingToken: held.record.epoch, reason });
  }

  #handle(held: Held): HeldLease {
    const record = held.record;
    return {
      leaseKey: record.leaseKey,
      fencingToken: record.epoch,
      signal: held.controller.signal,
      checkpoint: record.checkpoint,
      parentKeys: record.parentKeys,
      metadata: record.metadata,
      draining: held.handoff !== null || this.#state === 'stopping',
    };
  }

  #report(error: unknown, operation: string): void {
    this.emit('error', { error: asError(error), operation });
  }

  #formatError(leaseKey: string, format: number): RecordFormatError {
    return new RecordFormatError(
      `[${PKG}] lease ${describeValue(leaseKey)} of group ${describeValue(this.group)} is in record format ${format}, newer than the ${RECORD_FORMAT} this worker knows: upgrade it`,
      format,
    );
  }

  /** A record this worker must not write was met: report it once and stop (releasing what it can). */
  #fail(error: LeaseholdError): void {
    if (this.#state !== 'running') return;
    this.#report(error, 'format');
    this.emit('fatal', { error });
    void this.stop();
  }
}

function sameState(record: LeaseRecord, state: LeaseState): boolean {
  return (
    record.owner === state.owner &&
    record.epoch === state.epoch &&
    record.checkpoint === state.checkpoint &&
    record.pendingOwner === state.pendingOwner &&
    sameFields(record.metadata, state.metadata)
  );
}

function sameFields(a: Readonly<Record<string, string>>, b: Readonly<Record<string, string>>): boolean {
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((key) => a[key] === b[key]);
}
