import { systemClock, type Clock } from '../clock.js';
import { InvalidConfigError, describeValue } from '../errors.js';
import { corruptRecord } from '../codec.js';
import {
  validateGroup,
  validateSubscribeOptions,
  validateLeaseKey,
  validateLeaseKeys,
  validateLeaderState,
  validateLeaseUpdates,
  validateNewLeader,
  validateNewLease,
  validateMemberWrite,
  validateDigest,
  validateVersion,
  validateWorkerId,
  validateWorkerIds,
} from '../validation.js';
import { keptAfter, rosterMovesOf, type KeptAdvance } from '../roster-moves.js';
import {
  STORAGE_CONTRACT_VERSION,
  leaderStateOf,
  leaseStateOf,
  memberStateOf,
  result,
  type ChangeSubscription,
  type SubscribeOptions,
  type CreateLeaseOptions,
  type DeleteResult,
  type LeaderRecord,
  type LeaderState,
  type LeaseChange,
  type LeaseListing,
  type LeaseRecord,
  type LeaseUpdate,
  type RosterMoves,
  type MemberRecord,
  type MemberState,
  type NewLeader,
  type Roster,
  type NewLease,
  type Storage,
  type WriteResult,
} from '../storage.js';

/** A subscriber of a group's feed, and the owners whose handovers it asked for (`null`: every change). */
interface FeedListener {
  readonly hear: (change: LeaseChange) => void;
  readonly addressed: ReadonlySet<string> | null;
}

/** Options of {@link MemoryStorage}. */
export interface MemoryStorageOptions {
  /**
   * Delay before each operation takes effect, in milliseconds of `clock`: a number, or a function called
   * once per operation (for a distribution). Default 0: no delay and no timer.
   */
  latencyMs?: number | (() => number);
  /** The clock that latency is measured on. Default: the system clock. */
  clock?: Clock;
  /**
   * Called synchronously at the instant each write applies, with the record before and after (`null`
   * for none). For checkers such as the simulation's; it must not throw.
   */
  onWrite?: (event: MemoryWriteEvent) => void;
}

/** One applied write, as {@link MemoryStorageOptions.onWrite} sees it. */
export type MemoryWriteEvent =
  | { readonly kind: 'lease'; readonly group: string; readonly leaseKey: string; readonly before: LeaseRecord | null; readonly after: LeaseRecord | null }
  | { readonly kind: 'leader'; readonly group: string; readonly before: LeaderRecord | null; readonly after: LeaderRecord }
  | { readonly kind: 'member'; readonly group: string; readonly workerId: string; readonly before: MemberRecord | null; readonly after: MemberRecord | null };

interface RosterSlot {
  readonly members: Map<string, { record: MemberRecord; corrupt: boolean }>;
  /** The greatest version any member of the group ever had: every applied write goes above it. */
  highVersion: number;
  /** The roster digest: advanced by core after member writes others must look at. */
  digest: number;
  /** The last advances and the worker ids each named, for `getRosterMoves`. */
  advances: KeptAdvance[];
}

interface Slot {
  record: LeaseRecord | null;
  /** Set by {@link MemoryStorage.corrupt}: the stored lease can no longer be read back. */
  corrupt: boolean;
  /** The greatest version and epoch the key ever had, kept after a delete so that neither repeats. */
  highVersion: number;
  highEpoch: number;
}

const PKG = 'memory-storage';

/**
 * The reference implementation of both storage contracts, in process memory. Any number of coordinators
 * in one process can share one instance. Records are copied in and out and frozen, so callers can never
 * change stored state except through the contract. Use it in unit tests and to learn the contract.
 */
export class MemoryStorage implements Storage {
  /** The storage contract version this store implements: core's own, since it ships with core. */
  readonly contractVersion = STORAGE_CONTRACT_VERSION;
  readonly #groups = new Map<string, Map<string, Slot>>();
  readonly #leaders = new Map<string, LeaderRecord>();
  readonly #rosters = new Map<string, RosterSlot>();
  readonly #listeners = new Map<string, Set<FeedListener>>();
  readonly #clock: Clock;
  readonly #latency: () => number;
  readonly #onWrite: ((event: MemoryWriteEvent) => void) | undefined;

  constructor(options: MemoryStorageOptions = {}) {
    this.#clock = options.clock ?? systemClock;
    this.#onWrite = options.onWrite;
    const latency = options.latencyMs ?? 0;
    if (typeof latency === 'number' && (!Number.isFinite(latency) || latency < 0)) {
      throw new InvalidConfigError(`[${PKG}] latencyMs must be a non-negative number, got ${describeValue(latency)}`);
    }
    this.#latency = typeof latency === 'number' ? () => latency : latency;
  }

  async listLeases(group: string): Promise<LeaseListing> {
    validateGroup(group, PKG);
    await this.#delay();
    const listing: LeaseListing = { leases: [], corrupt: [] };
    for (const [leaseKey, slot] of this.#groups.get(group) ?? []) {
      if (slot.corrupt) listing.corrupt.push(this.#corruptError(group, leaseKey));
      else if (slot.record) listing.leases.push(slot.record);
    }
    return listing;
  }

  async getLease(group: string, leaseKey: string): Promise<LeaseRecord | null> {
    validateGroup(group, PKG);
    validateLeaseKey(leaseKey, PKG);
    await this.#delay();
    const slot = this.#groups.get(group)?.get(leaseKey);
    if (slot?.corrupt) throw this.#corruptError(group, leaseKey);
    return slot?.record ?? null;
  }

  async getLeases(group: string, leaseKeys: readonly string[]): Promise<LeaseListing> {
    validateGroup(group, PKG);
    validateLeaseKeys(leaseKeys, PKG);
    await this.#delay();
    const listing: LeaseListing = { leases: [], corrupt: [] };
    const slots = this.#groups.get(group);
    for (const leaseKey of new Set(leaseKeys)) {
      const slot = slots?.get(leaseKey);
      if (slot?.corrupt) listing.corrupt.push(this.#corruptError(group, leaseKey));
      else if (slot?.record) listing.leases.push(slot.record);
    }
    return listing;
  }

  async createLease(lease: NewLease, options: CreateLeaseOptions = {}): Promise<WriteResult<LeaseRecord>> {
    const { group, leaseKey, state } = validateNewLease(lease, PKG);
    await this.#delay();
    const slot = this.#slot(group, leaseKey);
    if (slot.corrupt) return result.unknown(this.#corruptError(group, leaseKey));
    if (slot.record) return result.conflict(slot.record);
    if (slot.highVersion > 0 && options.recreate !== true) return result.conflict(null);
    const epoch = Math.max(state.epoch, slot.highEpoch);
    const record = freezeLease({ group, leaseKey, version: slot.highVersion + 1, ...leaseStateOf(state), epoch });
    this.#store(slot, record);
    this.#onWrite?.({ kind: 'lease', group, leaseKey, before: null, after: record });
    this.#publish({ group, leaseKey, kind: 'created', owner: record.owner });
    return result.applied(record);
  }

  async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    validateLeaseUpdates(group, updates, PKG);
    await this.#delay();
    const results: WriteResult<LeaseRecord>[] = [];
    const changes: LeaseChange[] = [];
    for (const update of updates) {
      const slot = this.#groups.get(group)?.get(update.leaseKey);
      const current = slot?.record ?? null;
      if (!slot || !current || current.version !== update.expectedVersion) {
        // A conflict carries the stored record; one that cannot be read back makes the outcome unknown.
        results.push(slot?.corrupt ? result.unknown(this.#corruptError(group, update.leaseKey)) : result.conflict(current));
        continue;
      }
      // Writes decide on the version alone: a write at the stored version replaces even a damaged record.
      slot.corrupt = false;
      const record = freezeLease({ group, leaseKey: update.leaseKey, version: current.version + 1, ...leaseStateOf(update.next) });
      this.#store(slot, record);
      this.#onWrite?.({ kind: 'lease', group, leaseKey: update.leaseKey, before: current, after: record });
      results.push(result.applied(record));
      if (update.notify) changes.push({ group, leaseKey: update.leaseKey, kind: update.notify, owner: record.owner });
    }
    for (const change of changes) this.#publish(change);
    return results;
  }

  async deleteLease(group: string, leaseKey: string, expectedVersion: number): Promise<DeleteResult> {
    validateGroup(group, PKG);
    validateLeaseKey(leaseKey, PKG);
    validateVersion(expectedVersion, PKG);
    await this.#delay();
    const slot = this.#groups.get(group)?.get(leaseKey);
    const current = slot?.record ?? null;
    if (!slot || !current || current.version !== expectedVersion) {
      return slot?.corrupt ? result.unknown(this.#corruptError(group, leaseKey)) : result.conflict(current);
    }
    slot.corrupt = false;
    slot.record = null;
    this.#onWrite?.({ kind: 'lease', group, leaseKey, before: current, after: null });
    return { status: 'applied' };
  }

  /**
   * Calls `listener` for each change of the group; with `addressedTo`, a handover only when it names one of
   * those owners or left the lease free, as a network feed with a channel per owner would.
   */
  async subscribe(group: string, listener: (change: LeaseChange) => void, options?: SubscribeOptions): Promise<ChangeSubscription> {
    validateGroup(group, PKG);
    validateSubscribeOptions(options, PKG);
    let listeners = this.#listeners.get(group);
    if (!listeners) {
      listeners = new Set();
      this.#listeners.set(group, listeners);
    }
    const addressed = options?.addressedTo?.length ? new Set(options.addressedTo) : null;
    const own: FeedListener = { hear: (change) => listener(change), addressed };
    listeners.add(own);
    const close = async (): Promise<void> => {
      listeners.delete(own);
    };
    return { close, [Symbol.asyncDispose]: close };
  }

  /**
   * Ends every change-feed subscription, as the network adapters' `close()` ends their feed connection.
   * The records stay: the store is this object, and other holders of it may still read and write.
   */
  async close(): Promise<void> {
    this.#listeners.clear();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  async getRoster(group: string): Promise<Roster> {
    validateGroup(group, PKG);
    await this.#delay();
    const roster: Roster = { group, members: [], corrupt: [] };
    for (const [workerId, slot] of this.#rosters.get(group)?.members ?? []) {
      if (slot.corrupt) roster.corrupt.push(this.#corruptMemberError(group, workerId));
      else roster.members.push(slot.record);
    }
    return roster;
  }

  async getMembers(group: string, workerIds: readonly string[]): Promise<Roster> {
    validateGroup(group, PKG);
    validateWorkerIds(workerIds, PKG);
    await this.#delay();
    const roster: Roster = { group, members: [], corrupt: [] };
    const members = this.#rosters.get(group)?.members;
    for (const workerId of new Set(workerIds)) {
      const slot = members?.get(workerId);
      if (slot?.corrupt) roster.corrupt.push(this.#corruptMemberError(group, workerId));
      else if (slot) roster.members.push(slot.record);
    }
    return roster;
  }

  async getRosterDigest(group: string): Promise<number> {
    validateGroup(group, PKG);
    await this.#delay();
    return this.#rosters.get(group)?.digest ?? 0;
  }

  async advanceRosterDigest(group: string, workerIds: readonly string[] = []): Promise<number> {
    validateGroup(group, PKG);
    validateWorkerIds(workerIds, PKG);
    await this.#delay();
    const roster = this.#roster(group);
    const digest = ++roster.digest;
    roster.advances = keptAfter([...roster.advances, { digest, workerIds: [...new Set(workerIds)] }], digest);
    return digest;
  }

  async getRosterMoves(group: string, since: number): Promise<RosterMoves> {
    validateGroup(group, PKG);
    validateDigest(since, PKG);
    await this.#delay();
    const roster = this.#rosters.get(group);
    return rosterMovesOf(since, roster?.digest ?? 0, roster?.advances ?? []);
  }

  async putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    validateMemberWrite(group, workerId, expectedVersion, next, PKG);
    await this.#delay();
    const roster = this.#roster(group);
    const slot = roster.members.get(workerId);
    if (slot === undefined ? expectedVersion !== null : slot.record.version !== expectedVersion) {
      return slot?.corrupt ? result.unknown(this.#corruptMemberError(group, workerId)) : result.conflict(slot?.record ?? null);
    }
    roster.highVersion++;
    const record = freezeMember({ group, workerId, version: roster.highVersion, ...memberStateOf(next) });
    roster.members.set(workerId, { record, corrupt: false });
    this.#onWrite?.({ kind: 'member', group, workerId, before: slot?.record ?? null, after: record });
    return result.applied(record);
  }

  async removeMember(group: string, workerId: string, expectedVersion: number): Promise<DeleteResult<MemberRecord>> {
    validateGroup(group, PKG);
    validateWorkerId(workerId, PKG);
    validateVersion(expectedVersion, PKG);
    await this.#delay();
    const roster = this.#rosters.get(group);
    const slot = roster?.members.get(workerId);
    if (!roster || !slot || slot.record.version !== expectedVersion) {
      return slot?.corrupt ? result.unknown(this.#corruptMemberError(group, workerId)) : result.conflict(slot?.record ?? null);
    }
    roster.members.delete(workerId);
    this.#onWrite?.({ kind: 'member', group, workerId, before: slot.record, after: null });
    return { status: 'applied' };
  }

  async getLeader(group: string): Promise<LeaderRecord | null> {
    validateGroup(group, PKG);
    await this.#delay();
    return this.#leaders.get(group) ?? null;
  }

  async createLeader(leader: NewLeader): Promise<WriteResult<LeaderRecord>> {
    const { group, state } = validateNewLeader(leader, PKG);
    await this.#delay();
    const current = this.#leaders.get(group);
    if (current) return result.conflict(current);
    const record = freezeLeader({ group, version: 1, ...leaderStateOf(state) });
    this.#leaders.set(group, record);
    this.#onWrite?.({ kind: 'leader', group, before: null, after: record });
    return result.applied(record);
  }

  async updateLeader(group: string, expectedVersion: number, next: LeaderState): Promise<WriteResult<LeaderRecord>> {
    validateGroup(group, PKG);
    validateVersion(expectedVersion, PKG);
    validateLeaderState(next, PKG);
    await this.#delay();
    const current = this.#leaders.get(group) ?? null;
    if (!current || current.version !== expectedVersion) return result.conflict(current);
    const record = freezeLeader({ group, version: current.version + 1, ...leaderStateOf(next) });
    this.#leaders.set(group, record);
    this.#onWrite?.({ kind: 'leader', group, before: current, after: record });
    return result.applied(record);
  }

  /**
   * For tests: makes a stored lease unreadable, as a bad write by another program would, moving its
   * version as any writer does. Listing reports it in `corrupt`, reading it throws a `CorruptRecordError`,
   * a write at an older version is `unknown`; a write or delete at its new version (`version` of the
   * returned value) replaces or removes it, as on every backend, where writes decide on the version alone.
   */
  corrupt(group: string, leaseKey: string): { version: number } {
    const slot = this.#groups.get(group)?.get(leaseKey);
    if (!slot?.record) throw new InvalidConfigError(`[${PKG}] group ${describeValue(group)} has no lease ${describeValue(leaseKey)} to corrupt`);
    const version = Math.max(slot.highVersion, slot.record.version) + 1;
    slot.record = freezeLease({ ...slot.record, version });
    slot.highVersion = version;
    slot.corrupt = true;
    return { version };
  }

  /**
   * For tests: undoes {@link corrupt}, as an operator restoring the record would: the lease reads back
   * again with every field it had, at the version the damaging write left it at.
   */
  repair(group: string, leaseKey: string): void {
    const slot = this.#groups.get(group)?.get(leaseKey);
    if (!slot?.corrupt) throw new InvalidConfigError(`[${PKG}] group ${describeValue(group)} has no corrupt lease ${describeValue(leaseKey)} to repair`);
    slot.corrupt = false;
  }

  /**
   * For tests: makes a member of the roster unreadable, moving its version as any writer does (see
   * {@link corrupt}). The roster reports it in `corrupt`; a write at its new version replaces it.
   */
  corruptMember(group: string, workerId: string): { version: number } {
    const roster = this.#rosters.get(group);
    const slot = roster?.members.get(workerId);
    if (!roster || !slot) throw new InvalidConfigError(`[${PKG}] group ${describeValue(group)} has no member ${describeValue(workerId)} to corrupt`);
    const version = ++roster.highVersion;
    slot.record = freezeMember({ ...slot.record, version });
    slot.corrupt = true;
    return { version };
  }

  /** Forgets every group, lease, member and leader record (the change feed's listeners stay). */
  clear(): void {
    this.#groups.clear();
    this.#leaders.clear();
    this.#rosters.clear();
  }

  #roster(group: string): RosterSlot {
    let roster = this.#rosters.get(group);
    if (!roster) {
      roster = { members: new Map(), highVersion: 0, digest: 0, advances: [] };
      this.#rosters.set(group, roster);
    }
    return roster;
  }

  #corruptMemberError(group: string, workerId: string) {
    return corruptRecord({ group, workerId }, 'the stored record was damaged (MemoryStorage.corruptMember)', { pkg: PKG });
  }

  #slot(group: string, leaseKey: string): Slot {
    let slots = this.#groups.get(group);
    if (!slots) {
      slots = new Map();
      this.#groups.set(group, slots);
    }
    let slot = slots.get(leaseKey);
    if (!slot) {
      slot = { record: null, corrupt: false, highVersion: 0, highEpoch: 0 };
      slots.set(leaseKey, slot);
    }
    return slot;
  }

  #store(slot: Slot, record: LeaseRecord): void {
    slot.record = record;
    slot.highVersion = Math.max(slot.highVersion, record.version);
    slot.highEpoch = Math.max(slot.highEpoch, record.epoch);
  }

  #publish(change: LeaseChange): void {
    const owner = change.kind === 'handed-off' ? change.owner : null;
    for (const { hear: listener, addressed } of this.#listeners.get(change.group) ?? []) {
      if (addressed !== null && typeof owner === 'string' && !addressed.has(owner)) continue;
      // Delivered after the write returns, like a real feed; a listener's failure must not fail the write.
      queueMicrotask(() => {
        try {
          listener(change);
        } catch {
          // The feed is best effort; the listener owns its errors.
        }
      });
    }
  }

  #corruptError(group: string, leaseKey: string) {
    return corruptRecord({ group, leaseKey }, 'the stored record was damaged (MemoryStorage.corrupt)', { pkg: PKG });
  }

  async #delay(): Promise<void> {
    const ms = this.#latency();
    if (ms > 0) await this.#clock.sleep(ms);
  }
}

function freezeLease(record: LeaseRecord): LeaseRecord {
  Object.freeze(record.parentKeys);
  Object.freeze(record.metadata);
  return Object.freeze(record);
}

function freezeMember(record: MemberRecord): MemberRecord {
  for (const request of record.requests) Object.freeze(request);
  Object.freeze(record.requests);
  Object.freeze(record.metadata);
  return Object.freeze(record);
}

function freezeLeader(record: LeaderRecord): LeaderRecord {
  Object.freeze(record.metadata);
  return Object.freeze(record);
}
