import { shuffled, systemClock, systemRandom, type Clock, type Random } from '../clock.js';
import {
  AbortedError,
  describeValue,
  InvalidConfigError,
  LeaseholdError,
  RecordFormatError,
} from '../errors.js';
import { TypedEmitter } from '../events.js';
import { capOf, planMoves, shares } from './balance.js';
import { LEAVING_FIELD, Membership, type Incarnation } from './membership.js';
import type { RosterView } from './roster-view.js';
import { compareNumericPositions } from '../position.js';
import { limits } from '../validation.js';
import { checkWatcherReads } from '../watcher-reads.js';
import { unsafeOf } from '../unsafe.js';
import { optionKeys, refuseUnknownOptions } from '../known-options.js';
import {
  Checkpoint,
  leaseStateOf,
  RECORD_FORMAT,
  type ChangeSubscription,
  type CheckpointStorage,
  type LeaseChange,
  type LeaseListing,
  type LeaseRecord,
  type Position,
  type WriteResult,
} from '../storage.js';
import { hasRewindRequest } from '../rewind.js';
import { holdMs, nonNegative, positive, positiveInteger, resolveHoldTiming, resolveIdentity } from './timing.js';

import { FencedWrites, type CheckpointWrite } from './fenced-writes.js';
import type { DrainReason, Held, HeldLease, LeaseTenure } from './held.js';
import { Handovers } from './handovers.js';
import { Hold } from './hold.js';

const PKG = 'core';

export type { CheckpointWrite, DrainReason, HeldLease, LeaseTenure };

/**
 * Decides whether a lease may be taken now; the default lets a child start only after its parents ended.
 * `all` holds every readable lease of the group, `corrupt` the keys of those that cannot be read.
 */
export type EligibilityPredicate = (lease: LeaseRecord, all: ReadonlyMap<string, LeaseRecord>, corrupt: ReadonlySet<string>) => boolean;

/**
 * A lease whose parents have all reached `SHARD_END`, or whose leases are gone, is eligible (DESIGN
 * section 4, taking, rule 1). A parent's lease is deleted only once the parent finished or left the stream, and a
 * child's lease is created only while each parent has a lease or is retired (DESIGN section 5), so a
 * missing parent is a finished one. A parent whose lease cannot be read is not known to be finished, nor
 * is one that carries a rewind request: it is about to be read again, before its children.
 */
export const parentsFinished: EligibilityPredicate = (lease, all, corrupt) =>
  lease.parentKeys.every((parentKey) => {
    if (corrupt.has(parentKey)) return false;
    const parent = all.get(parentKey);
    return parent === undefined || (parent.checkpoint === Checkpoint.SHARD_END && !hasRewindRequest(parent));
  });

/** Options of {@link LeaseCoordinator}. Durations are in milliseconds of the injected clock. */
export interface LeaseCoordinatorOptions {
  /** Where the leases and the group's roster live. */
  storage: CheckpointStorage;
  /** The group (consuming application) whose leases this worker shares. */
  group: string;
  /** This worker's id, unique among the group's live processes. Default: host name, pid and a random suffix. */
  workerId?: string;
  /**
   * How long this worker's membership lasts without a heartbeat, as others observe it; others wait the
   * longer of theirs and this one before declaring it dead. Default 10,000 (KCL's failoverTimeMillis).
   */
  leaseDurationMs?: number;
  /**
   * How often this worker heartbeats its member record: one conditional write, whatever it holds.
   * Default 0.65 × the lease duration.
   */
  renewIntervalMs?: number;
  /** How often the roster is read, to see members join, die and ask for leases. Default 2,000. */
  takeIntervalMs?: number;
  /**
   * How often the group's leases are listed when nothing signalled a change (a safety net: membership
   * changes, the members' change counters and the change feed prompt a listing at once). Default 600,000.
   */
  listIntervalMs?: number;
  /** The most leases this worker holds. Default: no limit. */
  maxLeasesPerWorker?: number;
  /** The most handoffs this worker requests per take tick (four may be open at once). Default 2. */
  maxStealsPerTick?: number;
  /** The bound ρ on clock-rate error (rates in [1 - ρ, 1 + ρ]). Default 0.01. */
  maxClockDrift?: number;
  /** Subtracted from the time a holder counts on after a heartbeat. Default min(500, leaseDurationMs / 20). */
  safetyMarginMs?: number;
  /**
   * How long an owner waits for a lease someone asked for to drain before it stops the work anyway; the
   * lease is then handed over a lease duration later. Default half the lease duration.
   */
  handoffTimeoutMs?: number;
  /** Which leases may be taken. Default {@link parentsFinished}. */
  isEligible?: EligibilityPredicate;
  /**
   * Orders two checkpoints of the lease `leaseKey`; checkpoints only move forward. Default
   * {@link compareNumericPositions}.
   */
  comparePositions?: (a: Position, b: Position, leaseKey: string) => number;
  /**
   * Called before a held lease is given away, to finish the work in flight and checkpoint. The lease is
   * still held meanwhile. A handoff waits at most `handoffTimeoutMs` for it.
   */
  onDrain?: (lease: HeldLease, reason: DrainReason) => Promise<void>;
  /** Listen to the store's change feed (if it has one) to act on releases, handoffs and new leases at once. Default true. */
  useChangeFeed?: boolean;
  /**
   * How many members watch each member's liveness (DESIGN section 4, "Watchers and the roster digest"):
   * each reads the few members it watches every take tick and the rest only when the group's roster digest
   * moves. A member is taken over within the liveness bound as long as one of its watchers outlives it; a
   * member that dies together with all of them is taken over a lease duration and two take ticks later.
   * From 1 to 15. Default 3. Used when the store has the watchers' reads (`getMembers` and the digest);
   * without them every member reads the whole roster every take tick.
   */
  watchers?: number;
  /**
   * Groups of up to this many members read the whole roster every take tick, as on a store without the
   * watchers' reads: every member then judges every other's expiry at once (the fastest take-over), and a
   * roster of up to about 16 members of 300 bytes costs DynamoDB fewer read units whole than the digest
   * and a few members by id. Larger groups use the watchers and the digest. Default 16; 0 always watches.
   */
  wholeRosterUpTo?: number;
  /** The monotonic clock every timing decision is made on. Default: the process's. */
  clock?: Clock;
  /** The random source for shuffling, jitter and incarnations. Default: `Math.random`. */
  random?: Random;
}

const COORDINATOR_KEYS = optionKeys<LeaseCoordinatorOptions>({
  storage: true,
  group: true,
  workerId: true,
  leaseDurationMs: true,
  renewIntervalMs: true,
  takeIntervalMs: true,
  listIntervalMs: true,
  maxLeasesPerWorker: true,
  maxStealsPerTick: true,
  maxClockDrift: true,
  safetyMarginMs: true,
  handoffTimeoutMs: true,
  isEligible: true,
  comparePositions: true,
  onDrain: true,
  watchers: true,
  wholeRosterUpTo: true,
  useChangeFeed: true,
  clock: true,
  random: true,
});

import type { LeaseCoordinatorEvents, LossReason } from './events.js';

export type { LeaseCoordinatorEvents, LossReason };

const stateOf = leaseStateOf;

/** Member metadata of a worker that is stopping; defined with the membership, still exported from here. */
export { LEAVING_FIELD };

function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}

/**
 * Shares the leases of one group among workers (DESIGN section 4). Liveness is per worker: each worker
 * heartbeats its member record in the group's roster, and holds every lease naming its incarnation for as
 * long as its last successful heartbeat allows. A member whose heartbeat stops is declared dead by a
 * conditional write, after which its leases are taken; leases change only when ownership or checkpoints
 * do. Balances by cooperative handoff requested through the roster, fences itself by its own clock, and
 * checkpoints only while it holds the lease. Usable on its own for any set of keys.
 */
export class LeaseCoordinator extends TypedEmitter<LeaseCoordinatorEvents> implements AsyncDisposable {
  /** This worker's id in the group: the owner written into the leases it holds. */
  readonly workerId: string;
  /** The group whose leases this coordinator shares. */
  readonly group: string;
  /** How long this worker's membership lasts without a heartbeat, as others observe it. */
  readonly leaseDurationMs: number;
  /** How often this worker heartbeats. */
  readonly renewIntervalMs: number;
  /** How often the roster is read. */
  readonly takeIntervalMs: number;
  /** How often the leases are listed when nothing signalled a change. */
  readonly listIntervalMs: number;
  /** How long after sending a successful heartbeat this worker counts its leases as held. */
  readonly holdMs: number;

  readonly #storage: CheckpointStorage;
  readonly #clock: Clock;
  readonly #random: Random;
  readonly #maxLeases: number;
  readonly #maxSteals: number;
  readonly #handoffTimeoutMs: number;
  readonly #isEligible: EligibilityPredicate;
  readonly #useChangeFeed: boolean;
  readonly #skipSelfFencing: boolean;
  /** Unsafe: a dead member's lease whose free conflicted is freed again on the current record, whoever it names now. */
  readonly #freeRetryIgnoresOwner: boolean;
  /** This worker's member record, the hold its heartbeats buy, and its reads of the roster. */
  readonly #members: Membership;

  /** The leases held, and the self-fencing that drops them when the hold runs out. */
  readonly #hold: Hold;
  /** The conditional writes on held leases: checkpoints, annotations, and every lease write's tally. */
  readonly #writes: FencedWrites;
  /** Steal requests, handovers and releases. */
  readonly #handovers: Handovers;
  /** The roster as membership last read it: dealing and balancing judge on it, and never write it. */
  readonly #view: RosterView;
  /** When the leases were last listed; `null` before the first listing. */
  #listedAt: number | null = null;
  #listingDue = true;
  /** Keys first seen without a live owner, and when: a lease left unowned past a tick is anyone's to take. */
  readonly #unownedSince = new Map<string, number>();
  /** Keys reported as corrupt, so that each is reported once while it stays corrupt. */
  readonly #corrupt = new Set<string>();
  #stopping: Promise<void> | null = null;
  #state: 'new' | 'running' | 'stopping' | 'stopped' = 'new';
  readonly #lifetime = new AbortController();
  #wakeTake: (() => void) | null = null;
  #wakeRenew: (() => void) | null = null;
  #loops: Promise<void>[] = [];
  #takeInFlight: Promise<void> = Promise.resolve();
  #subscription: ChangeSubscription | null = null;

  constructor(options: LeaseCoordinatorOptions) {
    super();
    if (typeof options !== 'object' || options === null) {
      throw new InvalidConfigError(`[${PKG}] LeaseCoordinator options must be an object, got ${describeValue(options)}`);
    }
    refuseUnknownOptions(PKG, 'LeaseCoordinator', options, COORDINATOR_KEYS);
    if (!options.storage || typeof options.storage.updateLeases !== 'function' || typeof options.storage.putMember !== 'function') {
      throw new InvalidConfigError(`[${PKG}] storage must implement CheckpointStorage (leases and roster), got ${describeValue(options.storage)}`);
    }
    const leaseDurationMs = positive(PKG, 'leaseDurationMs', options.leaseDurationMs ?? 10_000);
    const timing = resolveHoldTiming(
      PKG,
      { ...options, leaseDurationMs, renewIntervalMs: options.renewIntervalMs ?? Math.round(leaseDurationMs * 0.65) },
      { leaseDurationMs: 'leaseDurationMs', renewIntervalMs: 'renewIntervalMs' },
    );
    this.#storage = options.storage;
    this.#clock = options.clock ?? systemClock;
    this.#random = options.random ?? systemRandom;
    ({ group: this.group, workerId: this.workerId } = resolveIdentity(options, this.#random));
    this.leaseDurationMs = timing.leaseDurationMs;
    this.renewIntervalMs = timing.renewIntervalMs;
    this.takeIntervalMs = positive(PKG, 'takeIntervalMs', options.takeIntervalMs ?? 2_000);
    this.listIntervalMs = positive(PKG, 'listIntervalMs', options.listIntervalMs ?? 600_000);
    this.holdMs = holdMs(timing);
    this.#maxLeases = positiveInteger(PKG, 'maxLeasesPerWorker', options.maxLeasesPerWorker ?? Infinity);
    this.#maxSteals = options.maxStealsPerTick === 0 ? 0 : positiveInteger(PKG, 'maxStealsPerTick', options.maxStealsPerTick ?? 2);
    this.#handoffTimeoutMs = nonNegative(PKG, 'handoffTimeoutMs', options.handoffTimeoutMs ?? timing.leaseDurationMs / 2);
    if (this.#handoffTimeoutMs >= this.holdMs) {
      throw new InvalidConfigError(
        `[${PKG}] handoffTimeoutMs (${this.#handoffTimeoutMs}) must be below the time a heartbeat holds the leases (${this.holdMs.toFixed(0)} ms)`,
      );
    }
    if (!Number.isSafeInteger(timing.leaseDurationMs)) {
      throw new InvalidConfigError(`[${PKG}] leaseDurationMs must be a whole number of milliseconds, got ${timing.leaseDurationMs}`);
    }
    this.#isEligible = options.isEligible ?? parentsFinished;
    this.#useChangeFeed = options.useChangeFeed ?? true;
    const watchers = positiveInteger(PKG, 'watchers', options.watchers ?? 3);
    if (watchers > limits.maxWatchedMembers - 1) {
      throw new InvalidConfigError(`[${PKG}] watchers must be at most ${limits.maxWatchedMembers - 1}, got ${watchers}`);
    }
    const watcherReads = checkWatcherReads(options.storage, PKG);
    const wholeRosterUpTo = options.wholeRosterUpTo === 0 ? 0 : positiveInteger(PKG, 'wholeRosterUpTo', options.wholeRosterUpTo ?? 16);
    const unsafe = unsafeOf(options);
    const skipRosterDigest = unsafe.skipRosterDigest ?? false;
    const ringKeepsTheDead = unsafe.ringKeepsTheDead ?? false;
    this.#freeRetryIgnoresOwner = unsafe.freeRetryIgnoresOwner ?? false;
    const skipSelfFencing = unsafe.skipSelfFencing ?? false;
    this.#skipSelfFencing = skipSelfFencing;
    // Membership is made first (the other parts judge on its roster view); it reads the requests, which are
    // the handovers', only once it runs.
    const handovers = (): Handovers => this.#handovers;
    this.#members = new Membership({
      storage: this.#storage,
      group: this.group,
      workerId: this.workerId,
      leaseDurationMs: this.leaseDurationMs,
      takeIntervalMs: this.takeIntervalMs,
      holdMs: this.holdMs,
      maxLeases: this.#maxLeases,
      clock: this.#clock,
      random: this.#random,
      watchers,
      watcherReads,
      wholeRosterUpTo,
      skipRosterDigest,
      ringKeepsTheDead,
      ownDurationOnly: unsafe.ownDurationOnly ?? false,
      expiryFactor: unsafe.expiryFactor ?? 1,
      host: {
        state: () => this.#state,
        lifetime: this.#lifetime.signal,
        get requests() {
          return handovers().requests;
        },
        countHeld: () => this.#hold.countHeld(),
        heldKeys: () => [...this.#hold.leases.keys()],
        isHeld: (leaseKey) => this.isHeld(leaseKey),
        fenceExpired: () => this.#hold.fenceExpired(),
        holdExtended: () => this.#hold.armWatchdog(),
        loseEverything: () => this.#loseEverything(),
        listingDue: () => {
          this.#listingDue = true;
        },
        wakeTake: () => this.#wakeTake?.(),
        emit: <K extends keyof LeaseCoordinatorEvents>(name: K, event: LeaseCoordinatorEvents[K]) => this.emit(name, event),
        report: (error, operation) => this.#report(error, operation),
        fail: (error) => this.#fail(error),
        refuseFormat: (what, format) => this.#fail(this.#formatError(what, format)),
      },
    });
    this.#view = this.#members.view;
    const emit = <K extends keyof LeaseCoordinatorEvents>(name: K, event: LeaseCoordinatorEvents[K]): void => this.emit(name, event);
    const listingDue = (): void => {
      this.#listingDue = true;
    };
    this.#hold = new Hold({ workerId: this.workerId, clock: this.#clock, members: this.#members, skipSelfFencing, host: { state: () => this.#state, listingDue, emit } });
    this.#writes = new FencedWrites({
      storage: this.#storage,
      group: this.group,
      clock: this.#clock,
      hold: this.#hold,
      compare: options.comparePositions ?? compareNumericPositions,
      checkpointPerKey: unsafe.checkpointPerKey ?? false,
      host: {
        noteLeasesChanged: () => this.noteLeasesChanged(),
        emit,
        report: (error, operation) => this.#report(error, operation),
        fail: (error) => this.#fail(error),
        formatError: (what, format) => this.#formatError(what, format),
      },
    });
    this.#handovers = new Handovers({
      storage: this.#storage,
      group: this.group,
      workerId: this.workerId,
      leaseDurationMs: this.leaseDurationMs,
      renewIntervalMs: this.renewIntervalMs,
      takeIntervalMs: this.takeIntervalMs,
      handoffTimeoutMs: this.#handoffTimeoutMs,
      maxLeases: this.#maxLeases,
      maxSteals: this.#maxSteals,
      onDrain: options.onDrain,
      clock: this.#clock,
      random: this.#random,
      members: this.#members,
      view: this.#view,
      hold: this.#hold,
      writes: this.#writes,
      releaseWithoutRetry: unsafe.releaseWithoutRetry ?? false,
      skipSelfFencing,
      host: {
        state: () => this.#state,
        lifetime: this.#lifetime.signal,
        listingDue,
        wakeRenew: () => this.#wakeRenew?.(),
        noteLeasesChanged: () => this.noteLeasesChanged(),
        giveBack: (leases) => this.#giveBack(leases),
        fairFloor: () => this.#fairFloor,
        lastTarget: () => this.#lastTarget,
        emit,
        report: (error, operation) => this.#report(error, operation),
      },
    });
  }

  /** This worker's current incarnation in the roster, or `null` while it is not a member. */
  get incarnation(): string | null {
    const current = this.#members.current;
    return current?.record ? current.incarnation : null;
  }

  /**
   * Joins the group's roster and starts heartbeating, reading the roster and taking; resolves once the
   * first take tick has run. A new member takes nothing in that first tick: it first lets every worker
   * started with it join, so that a cold start goes straight to fair shares.
   */
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
   * Stops taking, drains every held lease (through `onDrain`), releases it so that others can take it at
   * once, and leaves the roster; a lease handed to this worker meanwhile is released too. Returns within
   * `timeoutMs` (default `handoffTimeoutMs`) whatever user code or storage does: a lease that did not
   * drain in time is not released; its work was told to stop, and this worker's membership lapses (it
   * stops heartbeating), after which others take the lease. A second call waits for the first.
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
      // The heartbeat that says this worker is leaving goes out while its leases drain: the releases wait
      // for both, so nobody deals a released lease back to it, and the round trip costs the handoff nothing.
      const leaving = this.#hold.leases.size > 0 ? this.#until(drainDeadline, this.#members.heartbeat()) : Promise.resolve();
      // The roster is read again meanwhile, so that the leases go to members alive and staying now.
      const roster = this.#hold.leases.size > 0 ? this.#until(drainDeadline, this.#storage.getRoster(this.group).then((read) => void this.#members.readRoster(read))) : Promise.resolve();
      const entries = [...this.#hold.leases.entries()];
      const drained = await Promise.all(
        entries.map(async ([leaseKey, held]) => ({
          leaseKey,
          done: await this.#handovers.drain(leaseKey, held, 'shutdown', Math.max(0, drainDeadline - this.#clock.now())),
        })),
      );
      await Promise.all([leaving, roster]);
      const releasable = drained.filter((entry) => entry.done).map((entry) => entry.leaseKey);
      await this.#until(deadline, this.#handovers.handOverOrRelease(releasable));
      await this.#until(deadline, this.#handovers.withdraw());
      const lapsing = this.#hold.leases.size;
      for (const [leaseKey, held] of this.#hold.leases) this.#hold.lose(leaseKey, held, 'shutdown-timeout');
      // With nothing left to lapse, leaving the roster lets others act at once; otherwise the membership
      // lapses a lease duration after the last heartbeat, and the leases with it.
      if (lapsing === 0) await this.#until(deadline, this.#members.leave());
    }
    this.#state = 'stopped';
    this.#lifetime.abort(new AbortedError(`[${PKG}] lease coordinator ${this.workerId} stopped`));
    this.#hold.disarm();
    await this.#until(deadline, Promise.all([...this.#loops, ...[...this.#hold.leases.values()].map((held) => held.chain)]));
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

  /** `await using coordinator = ...`: stops it (and releases its leases) at the end of the scope. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  /** Whether this worker holds the lease now: it took it, its last heartbeat still holds, and it has not given it away. */
  isHeld(leaseKey: string): boolean {
    return this.#hold.isHeld(leaseKey);
  }

  /** The lease if this worker holds it now. */
  lease(leaseKey: string): HeldLease | undefined {
    const held = this.#hold.leases.get(leaseKey);
    return held && this.isHeld(leaseKey) ? this.#hold.handle(held) : undefined;
  }

  /** Every lease this worker holds now. */
  heldLeases(): HeldLease[] {
    return [...this.#hold.leases.keys()].filter((leaseKey) => this.isHeld(leaseKey)).map((leaseKey) => this.#hold.handle(this.#hold.leases.get(leaseKey) as Held));
  }

  /**
   * The sizes of this coordinator's bookkeeping (leases held, let go, handed over, asked for, members
   * watched...), cheap to read at any time: for soak tests and diagnostics that check it stays bounded.
   * The names may change between versions; the values are counts.
   */
  diagnostics(): Readonly<Record<string, number>> {
    return {
      held: this.#hold.leases.size,
      letGo: this.#hold.letGo.size,
      requests: this.#handovers.requests.size,
      handed: this.#handovers.handed.size,
      watching: this.#handovers.watching.size,
      unownedSince: this.#unownedSince.size,
      corrupt: this.#corrupt.size,
      transfers: this.#handovers.transfers.size,
      roster: this.#view.size,
      deadSince: this.#deadSince.size,
      observedMembers: this.#view.observed,
      loops: this.#loops.length,
      listeners: this.countListeners(),
    };
  }

  /**
   * Tells the group that its leases changed in a way other workers should look at (leases created or
   * deleted by the leader, a partition finished): the next heartbeat, sent now, carries it, and every
   * worker lists the leases at its next take tick. Without a change feed this is how others learn of it.
   */
  noteLeasesChanged(): void {
    this.#members.noteChanged();
    this.#listingDue = true;
    this.#wakeRenew?.();
  }

  /**
   * Lists the group's leases now and at the next take tick, on this worker, whatever the roster says:
   * for a change this worker learned of by other means (the group's rewind marker on the leader record:
   * a finished lease moved back can be taken again), or that only its own view depends on (its
   * eligibility rule now accepts leases it refused, as when a multi-stream consumer learns of a stream).
   */
  listSoon(): void {
    this.#listingDue = true;
    this.#wakeTake?.();
  }

  /**
   * Moves the lease's checkpoint forward, conditionally on this worker still holding it in the same
   * tenure (`lease.fencingToken`) at the version it last wrote: a handler of an earlier tenure can never
   * write into a later one. Refuses a position behind the stored one (`CheckpointBehindError`, checked
   * again on every retry) and any write after loss (`LeaseLostError`); an unknown outcome is re-read and
   * retried, never assumed. A partition's end is announced to the group (its children become takeable).
   */
  checkpoint(lease: LeaseTenure, position: Position): Promise<void> {
    return this.#writes.checkpoint(lease, position);
  }

  /**
   * Moves the lease's checkpoint forward through `write`, a conditional write of the lease made elsewhere
   * in one atomic step with the caller's own writes (a transaction on the lease's database; see
   * `PostgresStorage.transaction`). `write` is given the lease as this worker holds it and the state to
   * store, must apply it only if the stored lease still has that version, owner, incarnation and epoch,
   * and must report the exact outcome. It runs at most once per call, after every write already queued on
   * the lease, and only while the lease is held in `lease`'s tenure; `position` must be ahead of the
   * stored checkpoint (`CheckpointBehindError` otherwise: what led up to it was applied already). A
   * conflict drops the lease (`LeaseLostError`); an unknown outcome is read back and adopted when it
   * applied, or thrown as a `StorageOutcomeUnknownError` when it did not or cannot be told. The lease
   * record written is adopted, so this worker's next write on the lease follows it.
   */
  checkpointThrough(lease: LeaseTenure, position: Position, write: CheckpointWrite): Promise<void> {
    return this.#writes.checkpointThrough(lease, position, write);
  }

  /**
   * Writes metadata fields on a lease this worker holds in `lease`'s tenure (a field set to `null` is
   * removed), conditionally like a checkpoint; for facts the owner publishes about its lease, such as a
   * stall. A no-op when nothing changes.
   */
  annotate(lease: LeaseTenure, fields: Readonly<Record<string, string | null>>): Promise<void> {
    return this.#writes.annotate(lease, fields);
  }

  /**
   * Sets the checkpoint of a lease this worker holds in `lease`'s tenure to any position, behind the stored
   * one included, with metadata fields in the same conditional write (a field set to `null` is removed):
   * an operator's rewind, applied by the owner once its work in flight is done (DESIGN section 4,
   * "Rewinding"). The lease is read first, and a newer record of the same tenure adopted, so that `decide`
   * sees what another writer added (the request itself); `decide` is given the stored record on each
   * attempt and returns the checkpoint and fields, or `null` when there is nothing to write. Returns the
   * record written, or `null`. Refused once the lease is lost (`LeaseLostError`), as every write.
   */
  moveCheckpoint(
    lease: LeaseTenure,
    decide: (stored: LeaseRecord) => { checkpoint: Position; metadata: Readonly<Record<string, string | null>> } | null,
  ): Promise<LeaseRecord | null> {
    return this.#writes.moveCheckpoint(lease, decide);
  }

  /** Gives up one lease now: stops its work (its signal fires) and writes it free for others. */
  async release(leaseKey: string): Promise<void> {
    await this.#handovers.release([leaseKey], true);
  }

  // ---------------------------------------------------------------- loops

  async #loop(kind: 'take' | 'renew', intervalMs: number, tick: () => Promise<void>): Promise<void> {
    // Taking stops as soon as stop() begins; heartbeats go on while held leases drain.
    const active = (): boolean => this.#state === 'running' || (kind === 'renew' && this.#state === 'stopping');
    // A wake-up that comes while a tick runs is kept for the next sleep: a note of change made during a
    // heartbeat is sent at once after it, not an interval later.
    let woken = false;
    let tickStartedAt = this.#clock.now();
    while (active()) {
      const waker = new AbortController();
      const onStop = (): void => waker.abort();
      this.#lifetime.signal.addEventListener('abort', onStop, { once: true });
      const wake = (): void => {
        woken = true;
        waker.abort();
      };
      if (kind === 'take') this.#wakeTake = wake;
      else this.#wakeRenew = wake;
      const jitter = 1 + (this.#random.next() - 0.5) * 0.1;
      // A heartbeat whose outcome is not known is sent again soon: the hold runs out meanwhile. The period
      // runs from the start of the previous tick: a slow round trip must not push the next heartbeat past
      // the hold the previous one bought.
      // From its join to its first listing, and while a cold start waits for the members to stop joining,
      // the roster is read every quarter tick: workers started together then see the last join, and deal,
      // within a fraction of a tick of each other rather than each at its own tick.
      const quarter = kind === 'take' && (this.#coldWait || (this.#members.current !== null && this.#listedAt === null));
      const period = kind === 'renew' && this.#members.heartbeatFailed ? Math.min(intervalMs / 4, 1_000) : quarter ? (intervalMs / 4) * jitter : intervalMs * jitter;
      const wait = Math.max(0, period - (this.#clock.now() - tickStartedAt));
      if (woken) waker.abort();
      try {
        await this.#clock.sleep(wait, waker.signal);
      } catch {
        // Woken early: by the change feed, by a note of change, or by stop().
      } finally {
        this.#lifetime.signal.removeEventListener('abort', onStop);
      }
      woken = false;
      if (this.#lifetime.signal.aborted || !active()) return;
      tickStartedAt = this.#clock.now();
      await tick().catch((error: unknown) => this.#report(error, kind));
    }
  }

  #onChange(change: LeaseChange): void {
    if (this.#state !== 'running') return;
    if (change.kind === 'rewind') {
      // For the owner alone, and nothing to list: the lease's ownership did not change.
      if (this.#hold.leases.has(change.leaseKey)) this.emit('rewind-requested', { leaseKey: change.leaseKey });
      return;
    }
    if (change.kind === 'created' || change.kind === 'released') this.#listingDue = true;
    // A lease handed over unasked (a rebalance, or an owner leaving) is read at once: it may be this worker's.
    if (change.kind === 'handed-off' && !this.#handovers.requests.has(change.leaseKey) && !this.#handovers.watching.has(change.leaseKey)) this.#handovers.announced.add(change.leaseKey);
    this.#wakeTake?.();
  }

  // ---------------------------------------------------------------- heartbeats and self-fencing
  // The member record, its writes and the roster's reads are in membership.ts; the hold they buy fences
  // the leases here.

  /** The renew loop's tick: one heartbeat, its failure reported, never thrown into the loop. */
  async #renewTick(): Promise<void> {
    try {
      await this.#members.heartbeat();
    } catch (error) {
      this.#report(error, 'heartbeat');
    }
  }

  // ---------------------------------------------------------------- handing off and releasing

  // ---------------------------------------------------------------- reading the roster and taking

  #takeTick(): Promise<void> {
    const tick = this.#takeOnce();
    this.#takeInFlight = tick;
    return tick;
  }

  async #takeOnce(): Promise<void> {
    if (this.#state !== 'running') return;
    try {
      if (!(await this.#members.readMembers())) return;
    } catch (error) {
      if (error instanceof RecordFormatError) this.#fail(error);
      else this.#report(error, 'roster');
      return;
    }
    if (this.#state !== 'running') return;
    let now = this.#clock.now();
    const membership = this.#members.current;
    if (membership === null) {
      // A new member takes nothing in the tick it joins: the workers started with it join meanwhile.
      await this.#members.join(now);
      return;
    }
    if (!this.#members.checkOwnMember(membership)) return;
    for (const member of this.#view.values()) {
      if (member.workerId !== this.workerId && member.status === 'alive' && this.#view.expired(member, now)) {
        if (await this.#members.declareDead(member)) this.#listingDue = true;
        if (this.#state !== 'running') return;
      }
    }
    for (const [leaseKey, handed] of this.#handovers.handed) {
      const member = this.#view.get(handed.to);
      if (member?.status === 'alive' && member.incarnation === handed.incarnation && now < handed.until) continue;
      if (now < handed.until) this.#listingDue = true;
      this.#handovers.handed.delete(leaseKey);
    }
    this.#handovers.answerRequests(now);
    await this.#handovers.followRequests(now);
    if (this.#state !== 'running') return;
    await this.#handovers.followAnnounced();
    if (this.#state !== 'running') return;

    if (this.#members.signatureMoved()) this.#listingDue = true;
    // A corrupt lease is looked at every tick until it reads back: its repair is announced by nobody.
    if (this.#corrupt.size > 0) this.#listingDue = true;
    if (!this.#listingDue && this.#listedAt !== null && now - this.#listedAt < this.#members.safetyListingMs(this.listIntervalMs)) {
      // Nothing changed: balance on the members' own counts, and list only when a steal needs keys.
      if (this.#belowOthers() || this.#aboveOthers() || this.#leasesUnheld(now)) this.#listingDue = now - this.#listedAt >= this.takeIntervalMs * 0.9;
      if (!this.#listingDue) return;
    }
    // A cold start waiting for the members to stop joining reads only the roster meanwhile: listing the
    // whole group every tick of the wait would cost every worker the group's size each tick.
    if (this.#coldWait && this.#settling(now, membership)) {
      this.#listingDue = true;
      return;
    }
    let listing: LeaseListing;
    try {
      this.#listingDue = false;
      listing = await this.#storage.listLeases(this.group);
      // Judge owners on a roster read after the listing: a lease listed with an owner was taken after
      // its owner joined, so a member missing or dead in this roster is not alive now.
      if (!this.#members.readRoster(await this.#storage.getRoster(this.group))) return;
    } catch (error) {
      this.#listingDue = true;
      this.#report(error, 'list');
      return;
    }
    if (this.#state !== 'running' || this.#members.current !== membership || !this.#members.checkOwnMember(membership)) return;
    now = this.#clock.now();
    this.#listedAt = now;
    // The signature stays the one read before the listing: a change the roster shows after it (a note of
    // a lease handed over while the listing was on its way) may be missing from the listing, so the next
    // tick lists again rather than taking the later roster as seen.
    const newer = listing.leases.find((lease) => lease.format > RECORD_FORMAT);
    if (newer) {
      this.#fail(this.#formatError(`lease ${describeValue(newer.leaseKey)}`, newer.format));
      return;
    }
    await this.#balance(listing, now, membership);
    await this.#removeLongDead(listing, now);
  }

  /** Whether the last listing found the group cold (nobody holds anything) and this worker waits to deal. */
  #coldWait = false;

  /** In a cold start: whether other members joined or left within the last take tick, up to three ticks after this worker joined. */
  #settling(now: number, membership: Incarnation): boolean {
    return now - this.#view.othersChangedAt < this.takeIntervalMs * 0.9 && now - membership.joinedAt < 3 * this.takeIntervalMs;
  }

  /** Dead members, and when this worker first saw them dead at that version. */
  readonly #deadSince = new Map<string, { version: number; at: number }>();
  /** The smallest fair share of the last listing: an owner never hands over below it. */
  #fairFloor = 0;

  /**
   * Whether, by the members' own counts, this worker is two or more below the most loaded member: it then
   * lists every tick, to ask for leases and to find the ones handed to it unasked.
   */
  #belowOthers(): boolean {
    // Leases asked for count as on their way: a thief keeps asking, one per tick, without waiting for each.
    const mine = this.#hold.countHeld() + this.#handovers.requests.size;
    if (mine >= this.#maxLeases) return false;
    let most = 0;
    for (const member of this.#view.values()) if (member.status === 'alive' && member.workerId !== this.workerId) most = Math.max(most, member.held);
    return most >= mine + 2;
  }

  /**
   * Whether the members' counts fall short of the leases the last listing found, so that some lease is
   * held by nobody: handed to a member that has not seen it yet, released, or its owner gone. A member
   * below its share lists at once (it is the one a lease was most likely handed to); every member lists
   * once the shortfall has lasted two take ticks, so that a lease handed to a member above its share (an
   * owner with another view) is never left unread. Members at their share otherwise list nothing.
   */
  #leasesUnheld(now: number): boolean {
    let held = this.#hold.countHeld();
    for (const member of this.#view.values()) if (member.status === 'alive' && member.workerId !== this.workerId) held += member.held;
    if (held >= this.#lastWorkable) {
      this.#unheldSince = null;
      return false;
    }
    this.#unheldSince ??= now;
    return this.#hold.countHeld() < this.#lastTarget || now - this.#unheldSince >= 2 * this.takeIntervalMs;
  }

  /** The eligible leases and this worker's share at the last listing, and since when the counts fall short of them. */
  #lastWorkable = 0;
  #lastTarget = 0;
  #unheldSince: number | null = null;

  /**
   * Whether, by the members' own counts, this worker is two or more above a member with room: it then
   * lists, to hand that member leases unasked.
   */
  #aboveOthers(): boolean {
    const mine = [...this.#hold.leases.values()].filter((held) => !held.leaving && !held.handoff).length;
    if (mine < 2) return false;
    for (const member of this.#view.values()) {
      if (member.workerId === this.workerId || member.status !== 'alive' || member.metadata[LEAVING_FIELD] !== undefined) continue;
      if (member.held + 2 <= mine && member.held < capOf(member)) return true;
    }
    return false;
  }

  /**
   * Balances on a fresh listing: takes this worker's fair share of the leases without a live owner (the
   * same split on every worker, from the sorted members and keys), holds the leases handed to it, hands
   * its own excess to members below their share, and asks the most loaded members for leases when none
   * is left to take and none is on its way.
   */
  async #balance(listing: LeaseListing, now: number, membership: Incarnation): Promise<void> {
    const corrupt = this.#noticeCorrupt(listing.corrupt);
    // Without a hold (no heartbeat has applied lately) a take could not be counted as held: it would only
    // move the lease's epoch and strand it, naming an incarnation others still see alive.
    const holding = this.#skipSelfFencing || this.#clock.now() < this.#members.heldUntil;
    const leases = listing.leases;
    const all = new Map(leases.map((lease) => [lease.leaseKey, lease]));
    this.#noticeLosses(all, corrupt, membership);
    const alive = this.#view.alive();
    const isMine = (lease: LeaseRecord): boolean => lease.owner === this.workerId && lease.incarnation === membership.incarnation;
    for (const [leaseKey, epoch] of this.#hold.letGo) {
      const lease = all.get(leaseKey);
      if (!lease || !isMine(lease) || lease.epoch !== epoch) this.#hold.letGo.delete(leaseKey);
    }
    const ownerOf = (lease: LeaseRecord): string | null => {
      if (lease.owner === null) return null;
      if (lease.owner === this.workerId) return isMine(lease) && this.#hold.leases.has(lease.leaseKey) ? this.workerId : null;
      // A member whose record cannot be read may be alive: its leases wait for an operator.
      if (this.#view.isCorrupt(lease.owner)) return lease.owner;
      return alive.get(lease.owner) === lease.incarnation ? lease.owner : null;
    };
    // A finished lease still naming this incarnation that it no longer holds (a release whose outcome was
    // lost) is given back, so that the leader may clean it up: nobody else may judge it free. So is one
    // this worker may not take (not eligible here: a stream of a multi-stream group it no longer reads),
    // which it would never take back: named by a live incarnation, nobody could take or delete it.
    const leftovers = leases.filter(
      (lease) => isMine(lease) && !this.#hold.leases.has(lease.leaseKey) && (lease.checkpoint === Checkpoint.SHARD_END || !this.#isEligible(lease, all, corrupt)),
    );
    if (leftovers.length > 0) await this.#giveBack(leftovers);
    const workable = leases.filter((lease) => lease.checkpoint !== Checkpoint.SHARD_END && this.#isEligible(lease, all, corrupt));
    // Leases are dealt to the live members that are not leaving, this one included while it runs.
    const members = [...alive.keys()].filter((workerId) => workerId === this.workerId || this.#view.get(workerId)?.metadata[LEAVING_FIELD] === undefined).sort();
    const counts = new Map<string, number>(members.map((workerId) => [workerId, 0]));
    const unowned: LeaseRecord[] = [];
    for (const lease of workable) {
      const owner = ownerOf(lease);
      if (owner === null) unowned.push(lease);
      else if (counts.has(owner)) counts.set(owner, (counts.get(owner) ?? 0) + 1);
    }
    // A group's cold start (nobody holds anything) waits until the members stop joining for a take tick,
    // at most three ticks after this worker joined: workers started over a few seconds then each take their
    // share once, instead of the first taking everything and handing most of it on.
    this.#coldWait = unowned.length > 0 && [...counts.values()].every((count) => count === 0) && !unowned.some(isMine);
    if (this.#coldWait && this.#settling(now, membership)) {
      this.#listingDue = true;
      return;
    }
    this.#coldWait = false;
    const unownedKeys = new Set(unowned.map((lease) => lease.leaseKey));
    for (const leaseKey of this.#unownedSince.keys()) if (!unownedKeys.has(leaseKey)) this.#unownedSince.delete(leaseKey);
    for (const lease of unowned) if (!this.#unownedSince.has(lease.leaseKey)) this.#unownedSince.set(lease.leaseKey, now);
    const mine = counts.get(this.workerId) ?? 0;
    const n = Math.max(1, members.length);
    // Each member's share, by rank, with the caps members publish: the same on every worker.
    const capOfMember = (workerId: string): number => (workerId === this.workerId ? this.#maxLeases : capOf(this.#view.get(workerId)));
    const targets = shares(members, workable.length, capOfMember);
    // An owner never hands over below the smallest share of a member its cap does not hold back.
    const even = members.filter((workerId) => (targets.get(workerId) ?? 0) < capOfMember(workerId)).map((workerId) => targets.get(workerId) ?? 0);
    this.#fairFloor = Math.min(this.#maxLeases, even.length > 0 ? Math.min(...even) : Math.floor(workable.length / n));
    const target = (rank: number): number => targets.get(members[rank] as string) ?? 0;
    this.#lastWorkable = workable.length;
    this.#lastTarget = targets.get(this.workerId) ?? 0;
    this.#unheldSince = null;

    // Leases storage names this incarnation for, not held: every other worker sees them as this worker's,
    // so only this worker may take them. Handed to it (a tenure it never held), it holds them as they are;
    // lost by it (self-fencing, a handover that did not land), it takes them back in a new tenure.
    // (Not the ones it just handed over, which a listing read before the handover still shows as its own.)
    const before = (lease: LeaseRecord): boolean => lease.epoch < (this.#handovers.handed.get(lease.leaseKey)?.epoch ?? -Infinity);
    const named = unowned.filter((lease) => isMine(lease) && !before(lease));
    const handed = named.filter((lease) => this.#hold.letGo.get(lease.leaseKey) !== lease.epoch);
    const takeBack = named.filter((lease) => this.#hold.letGo.get(lease.leaseKey) === lease.epoch);

    // The same split on every worker that read the same records: sorted keys, dealt to the sorted
    // members by how far each is below its target, the rest round-robin.
    const sorted = unowned.filter((lease) => !isMine(lease)).sort((a, b) => (a.leaseKey < b.leaseKey ? -1 : a.leaseKey > b.leaseKey ? 1 : 0));
    const dealtTo = new Map<string, number>();
    const portion: LeaseRecord[] = [];
    let next = 0;
    const deal = (workerId: string): void => {
      dealtTo.set(workerId, (dealtTo.get(workerId) ?? 0) + 1);
      if (workerId === this.workerId) portion.push(sorted[next] as LeaseRecord);
      next++;
    };
    members.forEach((workerId, rank) => {
      const deficit = Math.max(0, target(rank) - (counts.get(workerId) ?? 0));
      for (let i = 0; i < deficit && next < sorted.length; i++) deal(workerId);
    });
    // What is left (members above their share hold the rest) goes round robin to those with room.
    const roomy = members.filter((workerId) => (counts.get(workerId) ?? 0) + (dealtTo.get(workerId) ?? 0) < capOfMember(workerId));
    for (let i = 0; next < sorted.length && roomy.length > 0; i++) deal(roomy[i % roomy.length] as string);
    // A lease left without a live owner for a take tick and a half is anyone's: a member that did not take its
    // portion (stopping, stuck, or not yet aware of the lease) never keeps it waiting.
    const dealt = new Set(portion);
    const stale = sorted.filter((lease) => now - (this.#unownedSince.get(lease.leaseKey) ?? now) >= this.takeIntervalMs * 1.5 && !dealt.has(lease));
    const extra = shuffled(stale, this.#random).slice(0, Math.ceil(stale.length / n));
    const room = Math.max(0, this.#maxLeases - mine);
    const keep = holding ? handed.slice(0, room) : [];
    let kept = 0;
    for (const lease of keep) if (this.#hold.add(lease, 'handoff', this.#clock.now())) kept++;
    // Handed more than this worker may hold: the rest goes back to the group.
    if (holding && handed.length > keep.length) await this.#giveBack(handed.slice(keep.length));
    if (this.#state !== 'running') return;
    const takeable = holding ? [...takeBack, ...portion, ...extra].slice(0, Math.max(0, room - keep.length)) : [];
    const taken = (await this.#take(takeable, membership)) + kept;
    if (this.#state !== 'running') return;
    await this.#freeForTheGroup(sorted);
    if (this.#state !== 'running') return;
    // Members balance on each other's counts: publish the new one now, not a heartbeat later.
    if (taken > 0) this.#wakeRenew?.();
    // Leases still without a live owner are looked at again next tick, until somebody holds them.
    if (unowned.length > taken && mine + taken < this.#maxLeases) this.#listingDue = true;
    if (taken < takeable.length + keep.length) {
      // Workers with different views picked the same leases: look again shortly, not at the next tick.
      this.#listingDue = true;
      this.#clock.sleep(this.#random.next() * 200, this.#lifetime.signal).then(() => this.#wakeTake?.(), () => undefined);
    }

    // What every member will hold once the leases just dealt are taken: the same on every worker that
    // read the same records, so that members above their share and members below it agree on the moves.
    const load = new Map(members.map((workerId) => [workerId, (counts.get(workerId) ?? 0) + (dealtTo.get(workerId) ?? 0)]));
    load.set(this.workerId, (load.get(this.workerId) ?? 0) + named.length);
    // A handover of this worker's that landed after the listing was read is its recipient's already.
    for (const [leaseKey, handed] of this.#handovers.handed) {
      const listed = all.get(leaseKey);
      if (!listed || !isMine(listed) || !before(listed) || this.#hold.leases.has(leaseKey) || !load.has(handed.to)) continue;
      load.set(handed.to, (load.get(handed.to) ?? 0) + 1);
    }
    const moves = planMoves(members, load, capOfMember);
    if (holding) this.#offer(moves.filter((move) => move.from === this.workerId).map((move) => move.to), now);
    // A member due to hand this worker leases is the one asked for them: an owner answers a request and
    // its own offer with the same lease count, so that a lease never moves twice for one place.
    const givers = new Map<string, number>();
    for (const move of moves) if (move.to === this.workerId) givers.set(move.from, (givers.get(move.from) ?? 0) + 1);
    const rank = members.indexOf(this.workerId);
    const wanted = (rank < 0 ? 0 : target(rank)) - mine - taken;
    const asked = this.#handovers.requests.size;
    if (holding && wanted - asked > 0 && this.#maxSteals > 0 && unowned.length <= taken) {
      this.#handovers.requestHandoffs(workable, counts, ownerOf, mine + taken + asked, wanted - asked, now, givers);
    }
  }

  /**
   * Frees the leases of the members this worker declared dead that it did not take itself, with the change
   * feed's `released`, in one batch (DESIGN section 4, "Watchers and the roster digest"). In a group of
   * watchers only the dead member's few watchers were woken at its expiry; the others would learn of the
   * death from the digest at their next take tick, up to a tick later. The feed wakes them at once, and
   * each takes its portion of the freed leases as it deals them. Only with a change feed (nobody would
   * hear the frees without one) and while this worker reads as a watcher (every member of a group that
   * reads the whole roster judges expiry itself, at the same moment). The write is conditional on the
   * listed version, as a take is: a lease taken or written since is left as it is.
   */
  async #freeForTheGroup(unowned: readonly LeaseRecord[]): Promise<void> {
    const declared = this.#members.takeDeclared();
    if (declared === null) return;
    if (this.#subscription === null || !this.#members.readsWatched()) return;
    const namesTheDead = (lease: LeaseRecord | null): lease is LeaseRecord => lease !== null && lease.owner !== null && declared.get(lease.owner) === lease.incarnation;
    let orphans = unowned.filter((lease) => namesTheDead(lease) && !this.#hold.leases.has(lease.leaseKey));
    if (orphans.length === 0) return;
    // Those woken read the whole roster first: the digest's advance for the death goes out before the frees.
    await this.#members.advancing;
    for (let attempt = 1; orphans.length > 0 && attempt <= 2 && this.#state === 'running'; attempt++) {
      const results = await this.#writes.update(
        orphans.map((lease) => ({ leaseKey: lease.leaseKey, expectedVersion: lease.version, next: { ...stateOf(lease), owner: null, incarnation: null }, notify: 'released' as const })),
        'free-dead',
      );
      // A lease written since the listing without being taken (an operator's rewind request in its
      // metadata) still names the dead: freed on the record the conflict carries. One taken is left be.
      orphans = results.flatMap((outcome) =>
        outcome.status === 'conflict' && outcome.current !== null && (this.#freeRetryIgnoresOwner || namesTheDead(outcome.current)) ? [outcome.current] : [],
      );
    }
  }

  /**
   * Writes free the leases that name this incarnation but that it will not hold, so that others may take
   * them. One that was not written free is looked at again at the next listing, at its next tick: nothing
   * else would list again for it.
   */
  async #giveBack(leases: readonly LeaseRecord[]): Promise<void> {
    const results = await this.#writes.update(
      leases.map((lease) => ({ leaseKey: lease.leaseKey, expectedVersion: lease.version, next: { ...stateOf(lease), owner: null, incarnation: null }, notify: 'released' as const })),
      'release',
    );
    if (results.some((result) => result.status !== 'applied')) this.#listingDue = true;
  }

  /**
   * Hands leases to members below their share without being asked, one per entry of `recipients`: the
   * moves this worker's part of the plan calls for, less the handovers already under way (answered
   * requests and earlier offers), to those members first. Each is drained and written to its recipient as
   * an answered request is. The recipients did not ask: they see the members' counts fall short of the
   * leases (see `#leasesUnheld`), list, and hold them; nobody else lists for it.
   */
  #offer(recipients: readonly string[], now: number): void {
    if (this.#state !== 'running' || recipients.length === 0) return;
    const underWay = new Map<string, number>();
    let others = 0;
    for (const held of this.#hold.leases.values()) if (held.handoff) underWay.set(held.handoff.to, (underWay.get(held.handoff.to) ?? 0) + 1);
    const due: string[] = [];
    for (const to of recipients) {
      const pending = underWay.get(to) ?? 0;
      if (pending > 0) underWay.set(to, pending - 1);
      else due.push(to);
    }
    for (const pending of underWay.values()) others += pending;
    const free = shuffled(
      [...this.#hold.leases.entries()].filter(([leaseKey, held]) => !held.leaving && !held.handoff && this.isHeld(leaseKey)),
      this.#random,
    );
    for (const to of due.slice(others)) {
      const member = this.#view.get(to);
      const entry = free.pop();
      if (!entry || member?.status !== 'alive') break;
      const [leaseKey, held] = entry;
      held.handoff = { to, incarnation: member.incarnation, seenAt: now };
      this.emit('handoff-offered', { leaseKey, to });
      void this.#handovers.handOff(leaseKey, held);
    }
  }

  /**
   * Removes members dead for ten lease durations (as this worker saw them) that no lease names any more,
   * so that workers that come and go (new ids each deploy) do not fill the roster. A removed worker id
   * that joins again gets a version above any it had, so nobody confuses it with the one removed.
   */
  async #removeLongDead(listing: LeaseListing, now: number): Promise<void> {
    const named = new Set(listing.leases.map((lease) => lease.owner));
    for (const member of this.#view.values()) {
      if (member.status !== 'dead') {
        this.#deadSince.delete(member.workerId);
        continue;
      }
      const since = this.#deadSince.get(member.workerId);
      if (since === undefined || since.version !== member.version) {
        this.#deadSince.set(member.workerId, { version: member.version, at: now });
        continue;
      }
      if (now - since.at < this.leaseDurationMs * 10 || named.has(member.workerId) || member.workerId === this.workerId) continue;
      try {
        const outcome = await this.#storage.removeMember(this.group, member.workerId, member.version);
        this.emit('storage', { operation: 'remove-member', applied: outcome.status === 'applied' ? 1 : 0, conflict: outcome.status === 'conflict' ? 1 : 0, unknown: outcome.status === 'unknown' ? 1 : 0 });
        if (outcome.status !== 'conflict') this.#members.announce();
      } catch (error) {
        this.#report(error, 'remove-member');
      }
      this.#deadSince.delete(member.workerId);
    }
    for (const workerId of this.#deadSince.keys()) if (!this.#view.has(workerId)) this.#deadSince.delete(workerId);
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

  /** A held lease that storage shows with another owner, incarnation or epoch, or not at all, is lost. */
  #noticeLosses(all: ReadonlyMap<string, LeaseRecord>, corrupt: ReadonlySet<string>, membership: Incarnation): void {
    for (const [leaseKey, held] of this.#hold.leases) {
      if (held.leaving || corrupt.has(leaseKey)) continue;
      const stored = all.get(leaseKey);
      if (stored === undefined) this.#hold.lose(leaseKey, held, 'deleted');
      else if (stored.version > held.record.version) {
        if (this.#hold.stillMine(held, stored) && stored.incarnation === membership.incarnation) held.record = stored;
        else this.#hold.lose(leaseKey, held, 'taken');
      }
    }
  }

  /** Takes leases without a live owner (free, or their owner's membership dead) in one batched write. */
  async #take(leases: readonly LeaseRecord[], membership: Incarnation): Promise<number> {
    if (leases.length === 0) return 0;
    const sentAt = this.#clock.now();
    const results = await this.#writes.update(
      leases.map((lease) => ({
        leaseKey: lease.leaseKey,
        expectedVersion: lease.version,
        next: { ...stateOf(lease), owner: this.workerId, incarnation: membership.incarnation, epoch: lease.epoch + 1 },
      })),
      'take',
    );
    let taken = 0;
    leases.forEach((lease, i) => {
      const outcome = results[i] as WriteResult<LeaseRecord>;
      // A conflict or an unknown outcome grants nothing: the next listing tells the truth.
      if (outcome.status !== 'applied') {
        this.#listingDue = true;
        return;
      }
      if (this.#hold.add(outcome.record, lease.owner === null ? 'free' : 'expired', sentAt)) taken++;
    });
    return taken;
  }

  // ---------------------------------------------------------------- writes and bookkeeping

  /**
   * This worker was expelled from the roster: whatever its hold says, others may own its leases now. It
   * drops every lease and request, and joins again as a new incarnation.
   */
  #loseEverything(): void {
    this.#handovers.dropRequests();
    this.#hold.loseEverything();
  }

  #report(error: unknown, operation: string): void {
    this.emit('error', { error: asError(error), operation });
  }

  #formatError(what: string, format: number): RecordFormatError {
    return new RecordFormatError(
      `[${PKG}] ${what} of group ${describeValue(this.group)} is in record format ${format}, newer than the ${RECORD_FORMAT} this worker knows: upgrade it`,
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
