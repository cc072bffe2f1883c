import type { Random } from '../clock.js';
import { StorageOutcomeUnknownError, StorageUnavailableError } from '../errors.js';
import type {
  ChangeSubscription,
  CreateLeaseOptions,
  DeleteResult,
  LeaderRecord,
  LeaderState,
  LeaseChange,
  LeaseListing,
  LeaseRecord,
  LeaseUpdate,
  MemberRecord,
  MemberState,
  NewLeader,
  NewLease,
  Roster,
  RosterMoves,
  Storage,
  SubscribeOptions,
  WriteResult,
} from '../storage.js';
import { checkRosterMoves, checkWatcherReads } from '../watcher-reads.js';
import type { VirtualClock } from './virtual-time.js';

/** The faults a {@link FaultyStorage} injects; every field may change while it runs. */
export interface FaultPlan {
  /** One-way latency of a request and of its response, in milliseconds of the caller's clock. */
  latencyMs: (random: Random) => number;
  /** Probability that a call fails before its request is sent (nothing applies; it throws). */
  errorBeforeSend: number;
  /** Probability that a write applies but its caller hears an ambiguous timeout (`unknown`). */
  ambiguousAfterApply: number;
  /** While true, the caller is cut off from storage: every call fails after a timeout, nothing applies. */
  cutOff: boolean;
  /**
   * While above 0, each lease listing of the caller stalls this long (milliseconds of its clock), part of it
   * before the store is read and the rest after: a slow page, or an answer decoded while the process is
   * busy. The loop that listed waits; the caller's other loops (its heartbeats) go on, and the listing it
   * gets back may be older than what it has heard since.
   */
  listingStallMs?: number;
}

/** A plan with no faults and no latency. */
export function noFaults(): FaultPlan {
  return { latencyMs: () => 0, errorBeforeSend: 0, ambiguousAfterApply: 0, cutOff: false };
}

/**
 * Wraps one process's view of a shared store with the faults of a network and a busy backend: latency on
 * the way there and back (on the process's own clock, so a paused process hears nothing until it wakes),
 * errors before sending, ambiguous timeouts after a write applied, and being cut off entirely.
 */
export class FaultyStorage implements Storage {
  readonly #inner: Storage;
  readonly #clock: VirtualClock;
  readonly #random: Random;
  readonly plan: FaultPlan;
  /** The inner store's contract version: a wrapper is the store it wraps, as core checks it. */
  readonly contractVersion: Storage['contractVersion'];

  /** The watchers' reads, present when the inner store has them (see {@link Storage.getMembers}; a store with only some is refused). */
  readonly getMembers?: (group: string, workerIds: readonly string[]) => Promise<Roster>;
  readonly getRosterDigest?: (group: string) => Promise<number>;
  readonly advanceRosterDigest?: (group: string, workerIds?: readonly string[]) => Promise<number>;
  /** Present when the inner store has it. */
  readonly getRosterMoves?: (group: string, since: number) => Promise<RosterMoves>;
  /** Present when the inner store has it (see {@link Storage.getLeases}). */
  readonly getLeases?: (group: string, leaseKeys: readonly string[]) => Promise<LeaseListing>;

  constructor(inner: Storage, clock: VirtualClock, random: Random, plan: FaultPlan = noFaults()) {
    this.#inner = inner;
    this.contractVersion = inner.contractVersion;
    this.#clock = clock;
    this.#random = random;
    this.plan = plan;
    const getLeases = inner.getLeases?.bind(inner);
    if (getLeases) this.getLeases = (group, leaseKeys) => this.#call(() => getLeases(group, leaseKeys), false);
    if (checkRosterMoves(inner, 'testing')) this.getRosterMoves = (group, since) => this.#call(() => inner.getRosterMoves(group, since), false);
    if (checkWatcherReads(inner, 'testing')) {
      this.getMembers = (group, workerIds) => this.#call(() => inner.getMembers(group, workerIds), false);
      this.getRosterDigest = (group) => this.#call(() => inner.getRosterDigest(group), false);
      // An advance whose answer is lost throws, as an adapter's does: core advances again.
      this.advanceRosterDigest = (group, workerIds) =>
        this.#write(
          () => (workerIds === undefined ? inner.advanceRosterDigest(group) : inner.advanceRosterDigest(group, workerIds)),
          (error) => {
            throw error;
          },
        );
    }
  }

  async listLeases(group: string): Promise<LeaseListing> {
    const stallMs = this.plan.listingStallMs ?? 0;
    if (stallMs <= 0) return this.#call(() => this.#inner.listLeases(group), false);
    const beforeMs = stallMs * this.#random.next();
    await this.#clock.sleep(beforeMs);
    const listing = await this.#call(() => this.#inner.listLeases(group), false);
    await this.#clock.sleep(stallMs - beforeMs);
    return listing;
  }

  getLease(group: string, leaseKey: string): Promise<LeaseRecord | null> {
    return this.#call(() => this.#inner.getLease(group, leaseKey), false);
  }

  createLease(lease: NewLease, options?: CreateLeaseOptions): Promise<WriteResult<LeaseRecord>> {
    return this.#write(() => this.#inner.createLease(lease, options), (error) => ({ status: 'unknown', error }));
  }

  updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    return this.#write(
      () => this.#inner.updateLeases(group, updates),
      (error) => updates.map(() => ({ status: 'unknown' as const, error })),
    );
  }

  deleteLease(group: string, leaseKey: string, expectedVersion: number): Promise<DeleteResult> {
    return this.#write(() => this.#inner.deleteLease(group, leaseKey, expectedVersion), (error) => ({ status: 'unknown', error }));
  }

  getRoster(group: string): Promise<Roster> {
    return this.#call(() => this.#inner.getRoster(group), false);
  }

  putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    return this.#write(() => this.#inner.putMember(group, workerId, expectedVersion, next), (error) => ({ status: 'unknown', error }));
  }

  removeMember(group: string, workerId: string, expectedVersion: number): Promise<DeleteResult<MemberRecord>> {
    return this.#write(() => this.#inner.removeMember(group, workerId, expectedVersion), (error) => ({ status: 'unknown', error }));
  }

  async subscribe(group: string, listener: (change: LeaseChange) => void, options?: SubscribeOptions): Promise<ChangeSubscription> {
    if (!this.#inner.subscribe) throw new StorageUnavailableError('[testing] the inner store has no change feed');
    // Notifications reach the process like any response: late, and not while it is paused or cut off.
    return this.#inner.subscribe(group, (change) => {
      if (this.plan.cutOff) return;
      this.#clock.defer(this.plan.latencyMs(this.#random), () => listener(change));
    }, options);
  }

  getLeader(group: string): Promise<LeaderRecord | null> {
    return this.#call(() => this.#inner.getLeader(group), false);
  }

  createLeader(leader: NewLeader): Promise<WriteResult<LeaderRecord>> {
    return this.#write(() => this.#inner.createLeader(leader), (error) => ({ status: 'unknown', error }));
  }

  updateLeader(group: string, expectedVersion: number, next: LeaderState): Promise<WriteResult<LeaderRecord>> {
    return this.#write(() => this.#inner.updateLeader(group, expectedVersion, next), (error) => ({ status: 'unknown', error }));
  }

  async #write<T>(apply: () => Promise<T>, ambiguous: (error: StorageOutcomeUnknownError) => T): Promise<T> {
    return this.#call(apply, true, ambiguous);
  }

  async #call<T>(apply: () => Promise<T>, isWrite: boolean, ambiguous?: (error: StorageOutcomeUnknownError) => T): Promise<T> {
    const random = this.#random;
    if (random.next() < this.plan.errorBeforeSend) {
      throw new StorageUnavailableError('[testing] injected: connection refused before the request was sent');
    }
    await this.#clock.sleep(this.plan.latencyMs(random));
    if (this.plan.cutOff) {
      await this.#clock.sleep(1_000);
      if (isWrite && ambiguous) return ambiguous(new StorageOutcomeUnknownError('[testing] injected: request timed out (cut off)'));
      throw new StorageUnavailableError('[testing] injected: request timed out (cut off)');
    }
    const outcome = await apply();
    const lost = isWrite && random.next() < this.plan.ambiguousAfterApply;
    await this.#clock.sleep(this.plan.latencyMs(random));
    if (lost && ambiguous) return ambiguous(new StorageOutcomeUnknownError('[testing] injected: response lost after the write applied'));
    return outcome;
  }
}
