/**
 * Deliberately broken adapters: each breaks one rule of the storage contract the way a careful author
 * could, and the conformance suite must catch each one. They prove the suite bites.
 *
 * Most are a `MemoryStorage` with one method changed. Where a bug needs more than one method (versions
 * that do not move, names a backend mangles, a per-client cache, a change feed), a small wrapper carries
 * it; each wrapper with its bug switched off is run through the whole suite too, so that a failure is the
 * bug's and not the wrapper's.
 */
import {
  CorruptRecordError,
  MemoryStorage,
  StorageUnavailableError,
  type ChangeSubscription,
  type CreateLeaseOptions,
  type DeleteResult,
  type LeaderRecord,
  type LeaderState,
  type LeaseChange,
  type LeaseChangeKind,
  type LeaseListing,
  type LeaseRecord,
  type LeaseState,
  type LeaseUpdate,
  type MemberRecord,
  type MemberState,
  type NewLeader,
  type NewLease,
  type Roster,
  type RosterMoves,
  type Storage,
  type SubscribeOptions,
  type WriteResult,
} from '../../src/index.js';
import {
  encodeMemberState,
  leaseStateOf,
  limits,
  memberStateOf,
  RECORD_FORMAT,
  result,
  validateGroup,
  validateLeaseKey,
  validateLeaseKeys,
  validateLeaseUpdates,
  validateMemberWrite,
  validateNewLease,
  validateNewLeader,
  validateSubscribeOptions,
  validateVersion,
  validateWorkerId,
  validateWorkerIds,
  keptAfter,
  rosterMovesOf,
  type KeptAdvance,
  type WatcherReads,
} from '../../src/adapter.js';
import type { TransactionalCheckpoint } from '../../src/testing/index.js';

// ---------------------------------------------------------------------------------------------------
// One method changed

/** Applies every update whatever version the caller read: a lost-update machine. */
export class IgnoresVersionStorage extends MemoryStorage {
  override async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    validateLeaseUpdates(group, updates);
    const results: WriteResult<LeaseRecord>[] = [];
    for (const update of updates) {
      // The bug: the caller's expected version is replaced by whatever is stored at the time of writing.
      for (;;) {
        const current = await this.getLease(group, update.leaseKey);
        if (!current) {
          results.push(result.conflict(null));
          break;
        }
        const [outcome] = await super.updateLeases(group, [{ ...update, expectedVersion: current.version }]);
        if (outcome?.status === 'applied') {
          results.push(outcome);
          break;
        }
      }
    }
    return results;
  }
}

const KNOWN_METADATA = new Set(['count', 'padding', 'note', 'k']);

function dropUnknown(metadata: Readonly<Record<string, string>> | undefined): Record<string, string> {
  return Object.fromEntries(Object.entries(metadata ?? {}).filter(([key]) => KNOWN_METADATA.has(key)));
}

/** Stores only the metadata keys it knows about: a store that interprets what it should round-trip. */
export class DropsUnknownMetadataStorage extends MemoryStorage {
  override async createLease(lease: NewLease, options?: CreateLeaseOptions): Promise<WriteResult<LeaseRecord>> {
    return super.createLease({ ...lease, metadata: dropUnknown(lease.metadata) }, options);
  }

  override async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    return super.updateLeases(
      group,
      updates.map((update) => ({ ...update, next: { ...update.next, metadata: dropUnknown(update.next.metadata) } })),
    );
  }
}

const NAMED_LEASE_FIELDS = ['format', 'owner', 'epoch', 'checkpoint', 'parentKeys', 'incarnation', 'metadata'] as const;

function namedOnly(state: Partial<LeaseState>): Partial<LeaseState> {
  return Object.fromEntries(NAMED_LEASE_FIELDS.filter((name) => name in state).map((name) => [name, state[name]]));
}

/** Stores the fields core names today and drops the rest, as a column per field would. */
export class DropsFieldsCoreDoesNotNameStorage extends MemoryStorage {
  override async createLease(lease: NewLease, options?: CreateLeaseOptions): Promise<WriteResult<LeaseRecord>> {
    validateNewLease(lease);
    return super.createLease({ group: lease.group, leaseKey: lease.leaseKey, ...namedOnly(lease) }, options);
  }

  override async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    validateLeaseUpdates(group, updates);
    return super.updateLeases(group, updates.map((update) => ({ ...update, next: namedOnly(update.next) as LeaseState })));
  }
}

/** Writes the format it knows instead of the one it is given: a record of a newer core is relabelled. */
export class PinsFormatStorage extends MemoryStorage {
  override async createLease(lease: NewLease, options?: CreateLeaseOptions): Promise<WriteResult<LeaseRecord>> {
    validateNewLease(lease);
    return super.createLease({ ...lease, format: RECORD_FORMAT }, options);
  }

  override async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    validateLeaseUpdates(group, updates);
    return super.updateLeases(group, updates.map((update) => ({ ...update, next: { ...update.next, format: RECORD_FORMAT } })));
  }
}

/** Accepts a write at a stale version when it names the owner the lease has now ("it is the owner anyway"). */
export class AcceptsStaleWriteFromOwnerStorage extends MemoryStorage {
  override async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    validateLeaseUpdates(group, updates);
    const trusted: LeaseUpdate[] = [];
    for (const update of updates) {
      const current = await this.getLease(group, update.leaseKey);
      const sameOwner = current !== null && current.owner !== null && current.owner === update.next.owner;
      trusted.push(sameOwner ? { ...update, expectedVersion: current.version } : update);
    }
    return super.updateLeases(group, trusted);
  }
}

/** Lets a create replace a lease that nobody holds ("a free lease is as good as none"). */
export class CreateOverwritesFreeLeaseStorage extends MemoryStorage {
  override async createLease(lease: NewLease, options?: CreateLeaseOptions): Promise<WriteResult<LeaseRecord>> {
    validateNewLease(lease);
    const current = await this.getLease(lease.group, lease.leaseKey);
    if (current?.owner !== null || current === null) return super.createLease(lease, options);
    const [outcome] = await super.updateLeases(lease.group, [{ leaseKey: lease.leaseKey, expectedVersion: current.version, next: leaseStateOf(lease) }]);
    return outcome as WriteResult<LeaseRecord>;
  }
}

/** Creates a deleted key again whether or not the caller asked for `recreate`, as the first contract did. */
export class RecreatesWithoutFlagStorage extends MemoryStorage {
  override async createLease(lease: NewLease): Promise<WriteResult<LeaseRecord>> {
    return super.createLease(lease, { recreate: true });
  }
}

/**
 * Lists in pages of 4,096, asking for one lease more to learn whether another page follows, and starts
 * the next page after that extra lease instead of at it: one lease is lost at each page boundary, which a
 * group of up to 4,096 leases never shows.
 */
export class ListingLosesPageBoundaryStorage extends MemoryStorage {
  override async listLeases(group: string): Promise<LeaseListing> {
    const listing = await super.listLeases(group);
    const sorted = [...listing.leases].sort((a, b) => (a.leaseKey < b.leaseKey ? -1 : 1));
    const pageSize = 4096;
    const leases: LeaseRecord[] = [];
    for (let start = 0; ; ) {
      const page = sorted.slice(start, start + pageSize + 1);
      leases.push(...page.slice(0, pageSize));
      if (page.length <= pageSize) break;
      start += pageSize + 1;
    }
    return { leases, corrupt: listing.corrupt };
  }
}

/**
 * Keeps deleted keys as tombstones and lists in pages of 100 stored keys, tombstones included, filtering
 * them out afterwards; it stops at the first page without a live lease, taking it for the end.
 */
export class ListingStopsAtDeletedPageStorage extends MemoryStorage {
  readonly #tombstones = new Map<string, Set<string>>();

  override async deleteLease(group: string, leaseKey: string, expectedVersion: number): Promise<DeleteResult> {
    const outcome = await super.deleteLease(group, leaseKey, expectedVersion);
    if (outcome.status === 'applied') {
      const tombstones = this.#tombstones.get(group) ?? new Set<string>();
      tombstones.add(leaseKey);
      this.#tombstones.set(group, tombstones);
    }
    return outcome;
  }

  override async listLeases(group: string): Promise<LeaseListing> {
    const listing = await super.listLeases(group);
    const live = new Map(listing.leases.map((lease) => [lease.leaseKey, lease]));
    const stored = [...new Set([...live.keys(), ...(this.#tombstones.get(group) ?? [])])].sort();
    const leases: LeaseRecord[] = [];
    for (let start = 0; start < stored.length; start += 100) {
      const page = stored.slice(start, start + 100).flatMap((key) => (live.has(key) ? [live.get(key) as LeaseRecord] : []));
      if (page.length === 0) break;
      leases.push(...page);
    }
    return { leases, corrupt: listing.corrupt };
  }
}

/** Refuses a batch of more than 1,000 updates, as a statement with too many parameters would. */
export class FailsLargeBatchesStorage extends MemoryStorage {
  override async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    if (updates.length > 1000) throw new StorageUnavailableError(`[broken] bind message has ${updates.length * 5} parameters; the limit is 5,000`);
    return super.updateLeases(group, updates);
  }
}

/** Keeps 14 significant digits of epochs, terms and formats, as a Lua script's `tostring` would. */
export class RoundsLargeNumbersStorage extends MemoryStorage {
  override async createLease(lease: NewLease, options?: CreateLeaseOptions): Promise<WriteResult<LeaseRecord>> {
    validateNewLease(lease);
    return super.createLease({ ...lease, ...rounded(lease) }, options);
  }

  override async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    validateLeaseUpdates(group, updates);
    return super.updateLeases(group, updates.map((update) => ({ ...update, next: { ...update.next, ...rounded(update.next) } })));
  }
}

function rounded(state: Partial<LeaseState>): Partial<LeaseState> {
  const round = (value: number | undefined): number | undefined => (value === undefined ? undefined : Number(value.toPrecision(14)));
  return { epoch: round(state.epoch), format: round(state.format) };
}

/** Copies metadata key by key with `copy[key] = value`, which silently drops a `__proto__` key. */
export class DropsProtoMetadataKeyStorage extends MemoryStorage {
  override async createLease(lease: NewLease, options?: CreateLeaseOptions): Promise<WriteResult<LeaseRecord>> {
    validateNewLease(lease);
    return super.createLease({ ...lease, metadata: copyByAssignment(lease.metadata ?? {}) }, options);
  }

  override async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    validateLeaseUpdates(group, updates);
    return super.updateLeases(group, updates.map((update) => ({ ...update, next: { ...update.next, metadata: copyByAssignment(update.next.metadata) } })));
  }
}

function copyByAssignment(metadata: Readonly<Record<string, string>>): Record<string, string> {
  const copy: Record<string, string> = {};
  for (const [key, value] of Object.entries(metadata)) copy[key] = value;
  return copy;
}

/** Strips NUL characters from checkpoints and metadata values, as a text column that cannot hold them would. */
export class StripsNulStorage extends MemoryStorage {
  override async createLease(lease: NewLease, options?: CreateLeaseOptions): Promise<WriteResult<LeaseRecord>> {
    validateNewLease(lease);
    return super.createLease({ ...lease, ...stripped(leaseStateOf(lease)) }, options);
  }

  override async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    validateLeaseUpdates(group, updates);
    return super.updateLeases(group, updates.map((update) => ({ ...update, next: { ...update.next, ...stripped(update.next) } })));
  }
}

function stripped(state: LeaseState): Partial<LeaseState> {
  const strip = (text: string): string => text.replaceAll('\u0000', '');
  return {
    checkpoint: state.checkpoint === null ? null : strip(state.checkpoint),
    metadata: Object.fromEntries(Object.entries(state.metadata).map(([key, value]) => [key, strip(value)])),
  };
}

/** Throws the first corrupt lease's error out of the listing, as the first contract did: one bad record hides the rest. */
export class ListingThrowsOnCorruptStorage extends MemoryStorage {
  override async listLeases(group: string): Promise<LeaseListing> {
    const listing = await super.listLeases(group);
    if (listing.corrupt[0]) throw listing.corrupt[0];
    return listing;
  }
}

/** Leaves corrupt leases out of the listing without a word: nobody learns they are there. */
export class ListingHidesCorruptStorage extends MemoryStorage {
  override async listLeases(group: string): Promise<LeaseListing> {
    return { leases: (await super.listLeases(group)).leases, corrupt: [] };
  }
}

/** Runs a batch as one transaction that a corrupt lease rolls back: every item is unknown, none applies. */
export class BatchFailsWholeOnCorruptStorage extends MemoryStorage {
  override async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    validateLeaseUpdates(group, updates);
    for (const update of updates) {
      try {
        await this.getLease(group, update.leaseKey);
      } catch (error) {
        if (error instanceof CorruptRecordError) return updates.map(() => result.unknown(error));
        throw error;
      }
    }
    return super.updateLeases(group, updates);
  }
}

// ---------------------------------------------------------------------------------------------------
// Wrappers: a client of a shared store that changes more than one method

/** A client of a shared store that passes every call through; the base of the wrappers below. */
export class Passthrough implements Storage {
  /** The wrapped store's contract version: a wrapper is the store it wraps, as core checks it. */
  readonly contractVersion: Storage['contractVersion'];

  constructor(protected readonly inner: Storage) {
    this.contractVersion = inner.contractVersion;
  }

  listLeases(group: string): Promise<LeaseListing> {
    return this.inner.listLeases(group);
  }

  getLease(group: string, leaseKey: string): Promise<LeaseRecord | null> {
    return this.inner.getLease(group, leaseKey);
  }

  createLease(lease: NewLease, options?: CreateLeaseOptions): Promise<WriteResult<LeaseRecord>> {
    return this.inner.createLease(lease, options);
  }

  updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    return this.inner.updateLeases(group, updates);
  }

  deleteLease(group: string, leaseKey: string, expectedVersion: number): Promise<DeleteResult> {
    return this.inner.deleteLease(group, leaseKey, expectedVersion);
  }

  getLeader(group: string): Promise<LeaderRecord | null> {
    return this.inner.getLeader(group);
  }

  createLeader(leader: NewLeader): Promise<WriteResult<LeaderRecord>> {
    return this.inner.createLeader(leader);
  }

  updateLeader(group: string, expectedVersion: number, next: LeaderState): Promise<WriteResult<LeaderRecord>> {
    return this.inner.updateLeader(group, expectedVersion, next);
  }

  getRoster(group: string): Promise<Roster> {
    return this.inner.getRoster(group);
  }

  putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    return this.inner.putMember(group, workerId, expectedVersion, next);
  }

  removeMember(group: string, workerId: string, expectedVersion: number): Promise<DeleteResult<MemberRecord>> {
    return this.inner.removeMember(group, workerId, expectedVersion);
  }
}

/** When a {@link VersionShifting} store reports a version other than the one it stores. */
export type VersionBug = 'none' | 'renewal-keeps-version' | 'checkpoint-keeps-version' | 'recreate-restarts-version';

/**
 * A store that reports, per key, a version lower than the one it keeps by the number of writes it chose
 * to "not count". The count is shared by every client of the store, as a backend's would be.
 */
export class VersionShifting extends Passthrough {
  constructor(
    inner: Storage,
    private readonly shifts: Map<string, number>,
    private readonly bug: VersionBug,
  ) {
    super(inner);
  }

  #shift(group: string, leaseKey: string): number {
    return this.shifts.get(`${group}\u0000${leaseKey}`) ?? 0;
  }

  #present(record: LeaseRecord): LeaseRecord;
  #present(record: LeaseRecord | null): LeaseRecord | null;
  #present(record: LeaseRecord | null): LeaseRecord | null {
    return record && { ...record, version: record.version - this.#shift(record.group, record.leaseKey) };
  }

  #presentResult(outcome: WriteResult<LeaseRecord>): WriteResult<LeaseRecord> {
    if (outcome.status === 'applied') return result.applied(this.#present(outcome.record));
    if (outcome.status === 'conflict') return result.conflict(this.#present(outcome.current));
    return outcome;
  }

  override async listLeases(group: string): Promise<LeaseListing> {
    const listing = await super.listLeases(group);
    return { leases: listing.leases.map((lease) => this.#present(lease)), corrupt: listing.corrupt };
  }

  override async getLease(group: string, leaseKey: string): Promise<LeaseRecord | null> {
    return this.#present(await super.getLease(group, leaseKey));
  }

  override async createLease(lease: NewLease, options?: CreateLeaseOptions): Promise<WriteResult<LeaseRecord>> {
    const outcome = await super.createLease(lease, options);
    if (this.bug === 'recreate-restarts-version' && outcome.status === 'applied' && outcome.record.version > 1) {
      this.shifts.set(`${lease.group}\u0000${lease.leaseKey}`, outcome.record.version - 1);
    }
    return this.#presentResult(outcome);
  }

  override async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    validateLeaseUpdates(group, updates);
    const results: WriteResult<LeaseRecord>[] = [];
    for (const update of updates) {
      const current = await super.getLease(group, update.leaseKey).catch(() => null);
      const shift = this.#shift(group, update.leaseKey);
      const [outcome] = await super.updateLeases(group, [{ ...update, expectedVersion: update.expectedVersion + shift }]);
      if (outcome?.status === 'applied' && current && this.#uncounted(current, update.next)) {
        this.shifts.set(`${group}\u0000${update.leaseKey}`, shift + 1);
      }
      results.push(this.#presentResult(outcome as WriteResult<LeaseRecord>));
    }
    return results;
  }

  override async deleteLease(group: string, leaseKey: string, expectedVersion: number): Promise<DeleteResult> {
    const outcome = await super.deleteLease(group, leaseKey, expectedVersion + this.#shift(group, leaseKey));
    return outcome.status === 'conflict' ? result.conflict(this.#present(outcome.current)) : outcome;
  }

  /** Whether the bug leaves this write out of the version. */
  #uncounted(current: LeaseRecord, next: LeaseState): boolean {
    const before = JSON.stringify(leaseStateOf(current));
    if (this.bug === 'renewal-keeps-version') return before === JSON.stringify(leaseStateOf(next));
    if (this.bug === 'checkpoint-keeps-version') return before !== JSON.stringify(leaseStateOf(next)) && JSON.stringify(leaseStateOf({ ...current, checkpoint: next.checkpoint })) === JSON.stringify(leaseStateOf(next));
    return false;
  }
}

/**
 * A store that mangles group names and lease keys before storing them (the record comes back with the
 * stored name), as a column type, a collation or a key scheme may: input is checked first, so names the
 * contract refuses are still refused.
 */
export class MangledNames extends MemoryStorage {
  constructor(private readonly mangle: (name: string) => string) {
    super();
  }

  override async listLeases(group: string): Promise<LeaseListing> {
    validateGroup(group);
    return super.listLeases(this.mangle(group));
  }

  override async getLease(group: string, leaseKey: string): Promise<LeaseRecord | null> {
    validateGroup(group);
    validateLeaseKey(leaseKey);
    return super.getLease(this.mangle(group), this.mangle(leaseKey));
  }

  override async createLease(lease: NewLease, options?: CreateLeaseOptions): Promise<WriteResult<LeaseRecord>> {
    validateNewLease(lease);
    return super.createLease({ ...lease, group: this.mangle(lease.group), leaseKey: this.mangle(lease.leaseKey) }, options);
  }

  override async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    validateLeaseUpdates(group, updates);
    return super.updateLeases(this.mangle(group), updates.map((update) => ({ ...update, leaseKey: this.mangle(update.leaseKey) })));
  }

  override async deleteLease(group: string, leaseKey: string, expectedVersion: number): Promise<DeleteResult> {
    validateGroup(group);
    validateLeaseKey(leaseKey);
    return super.deleteLease(this.mangle(group), this.mangle(leaseKey), expectedVersion);
  }

  override async getLeader(group: string): Promise<LeaderRecord | null> {
    validateGroup(group);
    return super.getLeader(this.mangle(group));
  }

  override async createLeader(leader: NewLeader): Promise<WriteResult<LeaderRecord>> {
    validateNewLeader(leader);
    return super.createLeader({ ...leader, group: this.mangle(leader.group) });
  }

  override async updateLeader(group: string, expectedVersion: number, next: LeaderState): Promise<WriteResult<LeaderRecord>> {
    validateGroup(group);
    return super.updateLeader(this.mangle(group), expectedVersion, next);
  }

  override async getRoster(group: string): Promise<Roster> {
    validateGroup(group);
    return super.getRoster(this.mangle(group));
  }

  override async putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    validateMemberWrite(group, workerId, expectedVersion, next);
    return super.putMember(this.mangle(group), this.mangle(workerId), expectedVersion, next);
  }

  override async removeMember(group: string, workerId: string, expectedVersion: number): Promise<DeleteResult<MemberRecord>> {
    validateGroup(group);
    validateWorkerId(workerId);
    validateVersion(expectedVersion);
    return super.removeMember(this.mangle(group), this.mangle(workerId), expectedVersion);
  }
}

/** Names cut to their first 255 UTF-8 bytes, as a `VARCHAR(255)` column of a lenient database stores them. */
export function truncateTo255Bytes(name: string): string {
  const bytes = Buffer.from(name, 'utf8');
  return bytes.length <= 255 ? name : bytes.subarray(0, 255).toString('utf8');
}

/** Names over 255 bytes fail in the backend, as a `VARCHAR(255)` column of a strict database refuses them. */
export function refuseOver255Bytes(name: string): string {
  if (Buffer.byteLength(name) > 255) throw new StorageUnavailableError(`[broken] value too long for type character varying(255)`);
  return name;
}

/** A case-insensitive collation: `Shard-1` and `shard-1` are one key. */
export const foldCase = (name: string): string => name.toLowerCase();

/** Names normalized to NFC: composed and decomposed `café` are one key. */
export const normalizeUnicode = (name: string): string => name.normalize('NFC');

/** Trailing spaces ignored, as a PAD SPACE collation compares: `a` and `a ` are one key. */
export const ignoreTrailingSpaces = (name: string): string => name.replace(/ +$/, '');

/**
 * A client that serves reads from its own cache once it has read a key (or a group), and updates that
 * cache only with its own writes: client A never sees client B's update or delete.
 */
export class CachingReads extends Passthrough {
  readonly #leases = new Map<string, LeaseRecord | null>();
  readonly #listings = new Map<string, LeaseListing>();
  readonly #leaders = new Map<string, LeaderRecord | null>();

  override async listLeases(group: string): Promise<LeaseListing> {
    const cached = this.#listings.get(group);
    if (cached) return cached;
    const listing = await super.listLeases(group);
    this.#listings.set(group, listing);
    return listing;
  }

  override async getLease(group: string, leaseKey: string): Promise<LeaseRecord | null> {
    const key = `${group}\u0000${leaseKey}`;
    if (this.#leases.has(key)) return this.#leases.get(key) ?? null;
    const lease = await super.getLease(group, leaseKey);
    this.#leases.set(key, lease);
    return lease;
  }

  override async createLease(lease: NewLease, options?: CreateLeaseOptions): Promise<WriteResult<LeaseRecord>> {
    const outcome = await super.createLease(lease, options);
    if (outcome.status === 'applied') this.#remember(outcome.record.group, outcome.record.leaseKey, outcome.record);
    return outcome;
  }

  override async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    const results = await super.updateLeases(group, updates);
    for (const outcome of results) if (outcome.status === 'applied') this.#remember(group, outcome.record.leaseKey, outcome.record);
    return results;
  }

  override async deleteLease(group: string, leaseKey: string, expectedVersion: number): Promise<DeleteResult> {
    const outcome = await super.deleteLease(group, leaseKey, expectedVersion);
    if (outcome.status === 'applied') this.#remember(group, leaseKey, null);
    return outcome;
  }

  override async getLeader(group: string): Promise<LeaderRecord | null> {
    if (this.#leaders.has(group)) return this.#leaders.get(group) ?? null;
    const leader = await super.getLeader(group);
    this.#leaders.set(group, leader);
    return leader;
  }

  override async createLeader(leader: NewLeader): Promise<WriteResult<LeaderRecord>> {
    const outcome = await super.createLeader(leader);
    if (outcome.status === 'applied') this.#leaders.set(leader.group, outcome.record);
    return outcome;
  }

  override async updateLeader(group: string, expectedVersion: number, next: LeaderState): Promise<WriteResult<LeaderRecord>> {
    const outcome = await super.updateLeader(group, expectedVersion, next);
    if (outcome.status === 'applied') this.#leaders.set(group, outcome.record);
    return outcome;
  }

  #remember(group: string, leaseKey: string, record: LeaseRecord | null): void {
    this.#leases.set(`${group}\u0000${leaseKey}`, record);
    const listing = this.#listings.get(group);
    if (!listing) return;
    const leases = listing.leases.filter((lease) => lease.leaseKey !== leaseKey);
    this.#listings.set(group, { leases: record ? [...leases, record] : leases, corrupt: listing.corrupt });
  }
}

/**
 * A batch that reads the rows first and reports a conflict with the row as it read it, not as it is
 * stored when the write is refused (a statement's snapshot under read committed).
 */
export class ConflictFromSnapshot extends Passthrough {
  override async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    const snapshot = new Map((await super.listLeases(group)).leases.map((lease) => [lease.leaseKey, lease]));
    const results = await super.updateLeases(group, updates);
    return results.map((outcome, i) => (outcome.status === 'conflict' ? result.conflict(snapshot.get(updates[i]?.leaseKey as string) ?? null) : outcome));
  }
}

// ---------------------------------------------------------------------------------------------------
// Change feeds

/** A subscription on a {@link Bus}: its client, and the owners whose handovers it hears (`null`: every change). */
interface BusEntry {
  readonly client: object;
  readonly listener: (change: LeaseChange, from: object) => void;
  readonly addressed: ReadonlySet<string> | null;
}

/** Where the clients of one store publish and hear changes (a pub/sub channel of the backend, one per owner for handovers). */
export class Bus {
  readonly listeners = new Map<string, Set<BusEntry>>();

  /** Publishes `change`; a handover with `to` reaches the subscriptions without an address and those addressed to `to`. */
  publish(change: LeaseChange, from: object, to?: string | null): void {
    for (const entry of this.listeners.get(change.group) ?? []) {
      if (entry.addressed !== null && typeof to === 'string' && !entry.addressed.has(to)) continue;
      queueMicrotask(() => entry.listener(change, from));
    }
  }
}

/** How a {@link FeedClient}'s feed is broken. */
export type FeedBug =
  | 'none'
  | 'publishes-refused-items'
  | 'one-kind'
  | 'publishes-renewals'
  | 'close-keeps-delivering'
  | 'never-delivers'
  | 'no-created'
  | 'drops-rewind'
  | 'skips-own-writes'
  | 'publishes-member-writes'
  | 'owner-before-write'
  | 'owner-of-first-item'
  | 'addresses-first-owner-only'
  | 'addressed-hears-only-handovers'
  | 'close-drops-owner';

/** A client of a shared store with a change feed on a shared {@link Bus}; `bug` breaks one rule of the feed. */
export class FeedClient extends Passthrough {
  constructor(
    inner: Storage,
    private readonly bus: Bus,
    private readonly bug: FeedBug,
  ) {
    super(inner);
  }

  override async createLease(lease: NewLease, options?: CreateLeaseOptions): Promise<WriteResult<LeaseRecord>> {
    const outcome = await super.createLease(lease, options);
    if (outcome.status === 'applied' && this.bug !== 'no-created') this.#publish(lease.group, lease.leaseKey, 'created', outcome.record.owner);
    return outcome;
  }

  override async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    // The bug 'owner-before-write': each change names the owner the lease had before the write (read first).
    const before = this.bug === 'owner-before-write' ? await Promise.all(updates.map(async (update) => (await super.getLease(group, update.leaseKey))?.owner ?? null)) : [];
    const results = await super.updateLeases(group, updates);
    const anyApplied = results.some((outcome) => outcome.status === 'applied');
    updates.forEach((update, i) => {
      const wasApplied = results[i]?.status === 'applied';
      // The bug 'drops-rewind': a feed that knows only the kinds it was written for, and drops a newer one.
      if (update.notify === 'rewind' && this.bug === 'drops-rewind') return;
      if (update.notify && (wasApplied || (this.bug === 'publishes-refused-items' && anyApplied))) {
        // The bug 'owner-of-first-item': every change of a batch names the owner its first item set.
        const owner = this.bug === 'owner-before-write' ? before[i] : this.bug === 'owner-of-first-item' ? (updates[0]?.next.owner ?? null) : update.next.owner;
        const kind = this.bug === 'one-kind' ? 'released' : update.notify;
        this.#publish(group, update.leaseKey, kind, owner, kind === 'handed-off' ? update.next.owner : null);
      } else if (!update.notify && wasApplied && this.bug === 'publishes-renewals') {
        this.#publish(group, update.leaseKey, 'handed-off');
      }
    });
    return results;
  }

  override async putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    const outcome = await super.putMember(group, workerId, expectedVersion, next);
    // The bug: a heartbeat published as a change, so that waiting workers look at the member's leases.
    if (outcome.status === 'applied' && this.bug === 'publishes-member-writes') this.#publish(group, workerId, 'released');
    return outcome;
  }

  async subscribe(group: string, listener: (change: LeaseChange) => void, options?: SubscribeOptions): Promise<ChangeSubscription> {
    validateGroup(group);
    validateSubscribeOptions(options);
    const asked = options?.addressedTo?.length ? options.addressedTo : null;
    // The bug 'addresses-first-owner-only': a subscription joins the channel of its first owner alone.
    const addressed = asked === null ? null : new Set(this.bug === 'addresses-first-owner-only' ? asked.slice(0, 1) : asked);
    const entry: BusEntry = {
      client: this,
      addressed,
      listener: (change: LeaseChange, from: object) => {
        if (this.bug === 'skips-own-writes' && from === this) return;
        // The bug 'addressed-hears-only-handovers': an addressed subscription joins its owners' channels and not the group's.
        if (this.bug === 'addressed-hears-only-handovers' && addressed !== null && change.kind !== 'handed-off') return;
        listener(change);
      },
    };
    const entries = this.bus.listeners.get(group) ?? new Set();
    this.bus.listeners.set(group, entries);
    if (this.bug !== 'never-delivers') entries.add(entry);
    const close = async (): Promise<void> => {
      if (this.bug !== 'close-keeps-delivering') entries.delete(entry);
      // The bug 'close-drops-owner': closing leaves the owners' channels, though another subscription of the client still listens on them.
      if (this.bug === 'close-drops-owner' && addressed !== null) {
        for (const other of entries) if (other.client === this && [...(other.addressed ?? [])].some((owner) => addressed.has(owner))) entries.delete(other);
      }
    };
    return { close, [Symbol.asyncDispose]: close };
  }

  /**
   * Publishes a change, addressed to `to` when it is a handover to an owner; it names `owner` only when
   * the client is one of the bugs about owners, as a feed may leave it out.
   */
  #publish(group: string, leaseKey: string, kind: LeaseChangeKind, owner?: string | null, to?: string | null): void {
    const names = this.bug === 'owner-before-write' || this.bug === 'owner-of-first-item';
    this.bus.publish(names ? { group, leaseKey, kind, owner: owner ?? null } : { group, leaseKey, kind }, this, to);
  }
}

/** A correct feed that does not address handovers: it checks the options and delivers every change, as the contract allows. */
export class UnaddressedFeedClient extends FeedClient {
  constructor(inner: Storage, bus: Bus) {
    super(inner, bus, 'none');
  }

  override async subscribe(group: string, listener: (change: LeaseChange) => void, options?: SubscribeOptions): Promise<ChangeSubscription> {
    validateSubscribeOptions(options);
    return super.subscribe(group, listener);
  }
}

// ---------------------------------------------------------------------------------------------------
// A connection that breaks

/**
 * A client of a shared store whose "connection" the suite can break (the fault hook of an in-process
 * store). Once broken, each call fails as on a lost connection; with `bug`, a broken client's reads answer
 * "nothing there" instead.
 */
export class BreakableClient extends Passthrough {
  #broken = false;

  constructor(inner: Storage, private readonly bug?: 'empty-reads-when-broken') {
    super(inner);
  }

  breakConnection(): void {
    this.#broken = true;
  }

  override async listLeases(group: string): Promise<LeaseListing> {
    if (this.#broken && this.bug) return { leases: [], corrupt: [] };
    this.#check('listLeases');
    return super.listLeases(group);
  }

  override async getLease(group: string, leaseKey: string): Promise<LeaseRecord | null> {
    if (this.#broken && this.bug) return null;
    this.#check('getLease');
    return super.getLease(group, leaseKey);
  }

  override async createLease(lease: NewLease, options?: CreateLeaseOptions): Promise<WriteResult<LeaseRecord>> {
    this.#check('createLease');
    return super.createLease(lease, options);
  }

  override async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    this.#check('updateLeases');
    return super.updateLeases(group, updates);
  }

  override async deleteLease(group: string, leaseKey: string, expectedVersion: number): Promise<DeleteResult> {
    this.#check('deleteLease');
    return super.deleteLease(group, leaseKey, expectedVersion);
  }

  override async getLeader(group: string): Promise<LeaderRecord | null> {
    if (this.#broken && this.bug) return null;
    this.#check('getLeader');
    return super.getLeader(group);
  }

  override async createLeader(leader: NewLeader): Promise<WriteResult<LeaderRecord>> {
    this.#check('createLeader');
    return super.createLeader(leader);
  }

  override async updateLeader(group: string, expectedVersion: number, next: LeaderState): Promise<WriteResult<LeaderRecord>> {
    this.#check('updateLeader');
    return super.updateLeader(group, expectedVersion, next);
  }

  override async getRoster(group: string): Promise<Roster> {
    if (this.#broken && this.bug) return { group, members: [], corrupt: [] };
    this.#check('getRoster');
    return super.getRoster(group);
  }

  override async putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    this.#check('putMember');
    return super.putMember(group, workerId, expectedVersion, next);
  }

  override async removeMember(group: string, workerId: string, expectedVersion: number): Promise<DeleteResult<MemberRecord>> {
    this.#check('removeMember');
    return super.removeMember(group, workerId, expectedVersion);
  }

  #check(operation: string): void {
    if (this.#broken) throw new StorageUnavailableError(`[broken] ${operation}: the connection is closed`);
  }
}

// ---------------------------------------------------------------------------------------------------
// The roster: one rule broken each

function sameMember(a: MemberState, b: MemberState): boolean {
  return encodeMemberState(a) === encodeMemberState(b);
}

async function storedMember(storage: Storage, group: string, workerId: string): Promise<MemberRecord | null> {
  return (await storage.getRoster(group)).members.find((member) => member.workerId === workerId) ?? null;
}

/** Acknowledges a heartbeat that writes exactly the stored state without writing it ("nothing changed"): the version stands still. */
export class HeartbeatKeepsVersionStorage extends MemoryStorage {
  override async putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    validateMemberWrite(group, workerId, expectedVersion, next);
    const current = await storedMember(this, group, workerId);
    if (current && current.version === expectedVersion && sameMember(memberStateOf(current), next)) return result.applied(current);
    return super.putMember(group, workerId, expectedVersion, next);
  }
}

/** Conditions a member write on the roster's highest version instead of the member's own, as one item holding the roster with one version would: a put conflicts whenever another member moved. */
export class RosterWideVersionStorage extends MemoryStorage {
  override async putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    validateMemberWrite(group, workerId, expectedVersion, next);
    const roster = await this.getRoster(group);
    const highest = Math.max(0, ...roster.members.map((member) => member.version));
    const current = roster.members.find((member) => member.workerId === workerId) ?? null;
    if (expectedVersion !== null && expectedVersion !== highest) return result.conflict(current);
    return super.putMember(group, workerId, expectedVersion, next);
  }
}

/** Lets a join replace a member that exists ("the worker is back"), as an unconditional put would. */
export class JoinOverwritesStorage extends MemoryStorage {
  override async putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    validateMemberWrite(group, workerId, expectedVersion, next);
    const current = expectedVersion === null ? await storedMember(this, group, workerId) : null;
    return super.putMember(group, workerId, current ? current.version : expectedVersion, next);
  }
}

/** Treats a put of an absent member at a version as a join (an upsert): a removed member comes back through a late heartbeat. */
export class PutCreatesAbsentMemberStorage extends MemoryStorage {
  override async putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    validateMemberWrite(group, workerId, expectedVersion, next);
    const current = await storedMember(this, group, workerId);
    return super.putMember(group, workerId, current ? expectedVersion : null, next);
  }
}

/** Removes a member whatever version the caller read. */
export class RemoveIgnoresVersionStorage extends MemoryStorage {
  override async removeMember(group: string, workerId: string, expectedVersion: number): Promise<DeleteResult<MemberRecord>> {
    validateVersion(expectedVersion);
    const current = await storedMember(this, group, workerId);
    return super.removeMember(group, workerId, current ? current.version : expectedVersion);
  }
}

/** Stores the requests as an empty list, as a column the adapter forgot would. */
export class DropsRequestsStorage extends MemoryStorage {
  override async putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    validateMemberWrite(group, workerId, expectedVersion, next);
    return super.putMember(group, workerId, expectedVersion, { ...next, requests: [] });
  }
}

/** Copies member metadata key by key by assignment, which silently drops a `__proto__` key. */
export class DropsMemberProtoMetadataKeyStorage extends MemoryStorage {
  override async putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    validateMemberWrite(group, workerId, expectedVersion, next);
    return super.putMember(group, workerId, expectedVersion, { ...next, metadata: copyByAssignment(next.metadata) });
  }
}

/** Stores the member fields core names today and drops the rest, as a column per field would. */
export class DropsMemberFieldsCoreDoesNotNameStorage extends MemoryStorage {
  override async putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    validateMemberWrite(group, workerId, expectedVersion, next);
    const { format, incarnation, leaseDurationMs, status, held, changes, requests, metadata } = next;
    return super.putMember(group, workerId, expectedVersion, { format, incarnation, leaseDurationMs, status, held, changes, requests, metadata });
  }
}

/** Keeps a member's numbers as text of 14 significant digits (a Lua script's `tostring`), and reads them back so. */
export class RoundsMemberNumbersStorage extends MemoryStorage {
  override async getRoster(group: string): Promise<Roster> {
    const roster = await super.getRoster(group);
    return { ...roster, members: roster.members.map(roundMember) };
  }

  override async putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    const outcome = await super.putMember(group, workerId, expectedVersion, next);
    if (outcome.status === 'applied') return result.applied(roundMember(outcome.record));
    if (outcome.status === 'conflict') return result.conflict(outcome.current && roundMember(outcome.current));
    return outcome;
  }
}

function roundMember(member: MemberRecord): MemberRecord {
  const round = (value: number): number => Number(value.toPrecision(14));
  return { ...member, leaseDurationMs: round(member.leaseDurationMs), held: round(member.held), changes: round(member.changes), format: round(member.format) };
}

/** Leaves the size of a member to the backend, which refuses an item too large with its own error: not an `InvalidInputError`. */
export class OversizeMemberFailsInBackendStorage extends MemoryStorage {
  override async putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    if (sizeOf(next) > limits.maxMemberBytes) {
      throw new StorageUnavailableError('[broken] Item size has exceeded the maximum allowed size');
    }
    return super.putMember(group, workerId, expectedVersion, next);
  }
}

function sizeOf(state: MemberState): number {
  try {
    return Buffer.byteLength(encodeMemberState(state));
  } catch {
    return 0;
  }
}

/**
 * Keeps each group's members under keys `<group>/<worker id>` in one table and reads a roster with a
 * prefix scan on `<group>`: a group whose name extends another's shows up in its roster.
 */
export class RosterByPrefixStorage extends MemoryStorage {
  readonly #groups = new Set<string>();

  override async putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    const outcome = await super.putMember(group, workerId, expectedVersion, next);
    if (outcome.status === 'applied') this.#groups.add(group);
    return outcome;
  }

  override async getRoster(group: string): Promise<Roster> {
    const own = await super.getRoster(group);
    const others = await Promise.all([...this.#groups].filter((name) => name !== group && name.startsWith(group)).map((name) => super.getRoster(name)));
    return { group, members: [...own.members, ...others.flatMap((roster) => roster.members)], corrupt: own.corrupt };
  }
}

/** Throws the first corrupt member's error out of the roster: one bad member hides every other. */
export class RosterThrowsOnCorruptStorage extends MemoryStorage {
  override async getRoster(group: string): Promise<Roster> {
    const roster = await super.getRoster(group);
    if (roster.corrupt[0]) throw roster.corrupt[0];
    return roster;
  }
}

/** Leaves corrupt members out of the roster without a word. */
export class RosterHidesCorruptStorage extends MemoryStorage {
  override async getRoster(group: string): Promise<Roster> {
    return { ...(await super.getRoster(group)), corrupt: [] };
  }
}

/** Reports a write over a corrupt member as a conflict with no member ("it could not be read, so it is not there"). */
export class CorruptMemberConflictStorage extends MemoryStorage {
  override async putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    const outcome = await super.putMember(group, workerId, expectedVersion, next);
    return outcome.status === 'unknown' && outcome.error instanceof CorruptRecordError ? result.conflict(null) : outcome;
  }
}

/** Refuses every write of a member it cannot read, even at the version it is stored at: a damaged member stays damaged. */
export class CorruptMemberNeverReplacedStorage extends MemoryStorage {
  override async putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    validateMemberWrite(group, workerId, expectedVersion, next);
    const damaged = (await this.getRoster(group)).corrupt.find((error) => error.workerId === workerId);
    if (damaged) return result.unknown(damaged);
    return super.putMember(group, workerId, expectedVersion, next);
  }

  override async removeMember(group: string, workerId: string, expectedVersion: number): Promise<DeleteResult<MemberRecord>> {
    validateVersion(expectedVersion);
    const damaged = (await this.getRoster(group)).corrupt.find((error) => error.workerId === workerId);
    if (damaged) return result.unknown(damaged);
    return super.removeMember(group, workerId, expectedVersion);
  }
}

/**
 * A member write that reads the roster first and reports a conflict with the member as it read it, not
 * as it is stored when the write is refused (a statement's snapshot under read committed).
 */
export class MemberConflictFromSnapshot extends Passthrough {
  override async putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    const snapshot = await storedMember(this.inner, group, workerId);
    const outcome = await super.putMember(group, workerId, expectedVersion, next);
    return outcome.status === 'conflict' ? result.conflict(snapshot) : outcome;
  }
}

/** A client that serves the roster from its own cache once it has read it, updated only with its own writes. */
export class CachingRoster extends Passthrough {
  readonly #rosters = new Map<string, Roster>();

  override async getRoster(group: string): Promise<Roster> {
    const cached = this.#rosters.get(group);
    if (cached) return cached;
    const roster = await super.getRoster(group);
    this.#rosters.set(group, roster);
    return roster;
  }

  override async putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    const outcome = await super.putMember(group, workerId, expectedVersion, next);
    if (outcome.status === 'applied') this.#remember(group, workerId, outcome.record);
    return outcome;
  }

  override async removeMember(group: string, workerId: string, expectedVersion: number): Promise<DeleteResult<MemberRecord>> {
    const outcome = await super.removeMember(group, workerId, expectedVersion);
    if (outcome.status === 'applied') this.#remember(group, workerId, null);
    return outcome;
  }

  #remember(group: string, workerId: string, record: MemberRecord | null): void {
    const roster = this.#rosters.get(group);
    if (!roster) return;
    const others = roster.members.filter((member) => member.workerId !== workerId);
    this.#rosters.set(group, { ...roster, members: record ? [...others, record] : others });
  }
}

/** How a {@link CountedRosterStorage} numbers member versions. */
export type RosterCounterBug =
  /** One counter per group, kept for good: within the contract. */
  | 'none'
  /** A counter per member, on each member's own record, kept in a tombstone when it is removed: within the contract, and what a member per record does. */
  | 'tombstones'
  /** A counter per member, as a version attribute on each member's own item: it starts at 1 again when a member joins again. */
  | 'per-member'
  /** One counter per group, kept in the roster's own record, which goes when its last member does. */
  | 'forgotten-when-empty';

/**
 * A roster kept apart from the `MemoryStorage` it extends (for leases and leaders), with its own version
 * counter; `bug` chooses how the counter is kept. With `'none'` it keeps every roster rule (it has no
 * corrupt members).
 */
export class CountedRosterStorage extends MemoryStorage {
  readonly #rosters = new Map<string, { counter: number; members: Map<string, MemberRecord>; removed: Map<string, number> }>();

  constructor(private readonly bug: RosterCounterBug) {
    super();
  }

  override async getRoster(group: string): Promise<Roster> {
    validateGroup(group);
    return { group, members: [...(this.#rosters.get(group)?.members.values() ?? [])], corrupt: [] };
  }

  override async getMembers(group: string, workerIds: readonly string[]): Promise<Roster> {
    validateGroup(group);
    validateWorkerIds(workerIds);
    const members = this.#rosters.get(group)?.members;
    return { group, members: [...new Set(workerIds)].flatMap((workerId) => members?.get(workerId) ?? []), corrupt: [] };
  }

  override async putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    validateMemberWrite(group, workerId, expectedVersion, next);
    let roster = this.#rosters.get(group);
    if (!roster) this.#rosters.set(group, (roster = { counter: 0, members: new Map(), removed: new Map() }));
    const current = roster.members.get(workerId) ?? null;
    if (current === null ? expectedVersion !== null : current.version !== expectedVersion) return result.conflict(current);
    const version =
      this.bug === 'per-member' ? (current?.version ?? 0) + 1
      : this.bug === 'tombstones' ? (current?.version ?? roster.removed.get(workerId) ?? 0) + 1
      : ++roster.counter;
    const record = Object.freeze({ ...memberStateOf(next), group, workerId, version });
    roster.members.set(workerId, record);
    return result.applied(record);
  }

  override async removeMember(group: string, workerId: string, expectedVersion: number): Promise<DeleteResult<MemberRecord>> {
    validateGroup(group);
    validateWorkerId(workerId);
    validateVersion(expectedVersion);
    const roster = this.#rosters.get(group);
    const current = roster?.members.get(workerId) ?? null;
    if (!roster || !current || current.version !== expectedVersion) return result.conflict(current);
    roster.members.delete(workerId);
    roster.removed.set(workerId, current.version);
    if (this.bug === 'forgotten-when-empty' && roster.members.size === 0) this.#rosters.delete(group);
    return { status: 'applied' };
  }
}

// ---------------------------------------------------------------------------------------------------
// Reads that race writers

/** One round trip of a paged read: other clients' calls go in between, as they would on a backend. */
function nextPage(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * Reads the roster in pages of 8 members, newest first, each page the members with versions below the last
 * one read (a keyset on the version): a member that heartbeats during the read moves above the pages still
 * to come and is missed, and a missing member counts as dead.
 */
export class PagedRosterStorage extends MemoryStorage {
  override async getRoster(group: string): Promise<Roster> {
    const members: MemberRecord[] = [];
    for (let below = Number.POSITIVE_INFINITY; ; ) {
      const roster = await super.getRoster(group);
      const page = roster.members.filter((member) => member.version < below).sort((a, b) => b.version - a.version).slice(0, 8);
      members.push(...page);
      if (page.length < 8) return { group, members, corrupt: roster.corrupt };
      below = (page.at(-1) as MemberRecord).version;
      await nextPage();
    }
  }
}

/**
 * Lists in pages of 100 leases by key with LIMIT and OFFSET: a lease deleted in a page already read moves
 * every later lease one place up, so one is skipped, and a lease created there lists one twice.
 */
export class ListingByOffsetStorage extends MemoryStorage {
  override async listLeases(group: string): Promise<LeaseListing> {
    const leases: LeaseRecord[] = [];
    for (let offset = 0; ; offset += 100) {
      const listing = await super.listLeases(group);
      const page = [...listing.leases].sort((a, b) => (a.leaseKey < b.leaseKey ? -1 : 1)).slice(offset, offset + 100);
      leases.push(...page);
      if (page.length < 100) return { leases, corrupt: listing.corrupt };
      await nextPage();
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// The transactional checkpoint

/** How a transactional checkpoint over a `MemoryStorage` is broken. */
export type TransactionBug =
  | 'none'
  /** The user's writes apply first, whatever the lease condition then says, which compares the version only. */
  | 'writes-without-the-lease-condition';

/**
 * A transactional checkpoint over `store`, with the user's writes kept beside it: both apply only if the
 * lease is as the worker holds it (version, owner, incarnation, epoch), in one step (nothing else runs in
 * between on one event loop).
 */
export function transactionalCheckpointOver(store: MemoryStorage, bug: TransactionBug = 'none'): TransactionalCheckpoint {
  const values = new Map<string, string>();
  return {
    checkpoint: async (_storage, current, next, write) => {
      if (bug === 'writes-without-the-lease-condition') {
        values.set(write.key, write.value);
        const [outcome] = await store.updateLeases(current.group, [{ leaseKey: current.leaseKey, expectedVersion: current.version, next }]);
        return outcome as WriteResult<LeaseRecord>;
      }
      const stored = await store.getLease(current.group, current.leaseKey);
      if (!stored || stored.version !== current.version || stored.owner !== current.owner || stored.incarnation !== current.incarnation || stored.epoch !== current.epoch) {
        return result.conflict(stored);
      }
      const [outcome] = await store.updateLeases(current.group, [{ leaseKey: current.leaseKey, expectedVersion: current.version, next }]);
      if (outcome?.status === 'applied') values.set(write.key, write.value);
      return outcome as WriteResult<LeaseRecord>;
    },
    read: async (_storage, key) => values.get(key) ?? null,
  };
}

// ---------------------------------------------------------------------------------------------------
// The watchers' reads

/**
 * Keeps the roster digest beside the store and advances it by a read and then a write, each a round trip
 * of its own: two advances that run at once both read the same value, and one of them is lost.
 */
export class DigestReadThenWriteStorage extends MemoryStorage {
  readonly #digests = new Map<string, number>();

  override async getRosterDigest(group: string): Promise<number> {
    validateGroup(group);
    return this.#digests.get(group) ?? 0;
  }

  override async advanceRosterDigest(group: string): Promise<number> {
    const value = (await this.getRosterDigest(group)) + 1;
    await nextPage();
    this.#digests.set(group, value);
    return value;
  }
}

/**
 * Keeps a removed member's record as its tombstone (where its greatest version lives on) and reads members
 * by id without leaving tombstones out: a removed member reads as it was, alive.
 */
export class MembersIncludeRemovedStorage extends MemoryStorage {
  readonly #tombstones = new Map<string, MemberRecord>();

  override async removeMember(group: string, workerId: string, expectedVersion: number): Promise<DeleteResult<MemberRecord>> {
    const before = await storedMember(this, group, workerId).catch(() => null);
    const outcome = await super.removeMember(group, workerId, expectedVersion);
    if (outcome.status === 'applied' && before) this.#tombstones.set(`${group}\u0000${workerId}`, before);
    return outcome;
  }

  override async getMembers(group: string, workerIds: readonly string[]): Promise<Roster> {
    const roster = await super.getMembers(group, workerIds);
    const read = new Set([...roster.members.map((member) => member.workerId), ...roster.corrupt.map((error) => error.workerId)]);
    const removed = [...new Set(workerIds)].flatMap((workerId) => (read.has(workerId) ? [] : (this.#tombstones.get(`${group}\u0000${workerId}`) ?? [])));
    return { ...roster, members: [...roster.members, ...removed] };
  }
}

const DIGEST_MEMBER = '#digest';

/** Keeps the roster digest as a member of the roster under the worker id `#digest` (one table for the roster): every reader of the roster sees it. */
export class DigestAsMemberStorage extends MemoryStorage {
  override async getRosterDigest(group: string): Promise<number> {
    return (await storedMember(this, group, DIGEST_MEMBER))?.held ?? 0;
  }

  override async advanceRosterDigest(group: string): Promise<number> {
    for (;;) {
      const current = await storedMember(this, group, DIGEST_MEMBER);
      const next: MemberState = { format: RECORD_FORMAT, incarnation: 'digest', leaseDurationMs: 1, status: 'alive', held: (current?.held ?? 0) + 1, changes: 0, requests: [], metadata: {} };
      const outcome = await this.putMember(group, DIGEST_MEMBER, current?.version ?? null, next);
      if (outcome.status === 'applied') return outcome.record.held;
    }
  }
}

/** How a {@link WatchingClient} is broken. */
export type WatcherBug =
  | 'none'
  /** getMembers answers from the client's own cache once it has read a member, updated only with its own writes. */
  | 'caches-members'
  /** The client has getMembers alone. */
  | 'lacks-digest'
  /** The client has getMembers and getRosterDigest, but not advanceRosterDigest. */
  | 'lacks-advance';

/** A client of a shared store with the watchers' reads, passed through; `bug` breaks one rule of them. */
export class WatchingClient extends Passthrough {
  readonly getMembers?: (group: string, workerIds: readonly string[]) => Promise<Roster>;
  readonly getRosterDigest?: (group: string) => Promise<number>;
  readonly advanceRosterDigest?: (group: string) => Promise<number>;
  readonly #cached = new Map<string, MemberRecord | null>();

  constructor(
    inner: Storage & WatcherReads,
    private readonly bug: WatcherBug = 'none',
  ) {
    super(inner);
    this.getMembers = (group, workerIds) => (bug === 'caches-members' ? this.#cachedMembers(group, workerIds) : inner.getMembers(group, workerIds));
    if (bug !== 'lacks-digest') this.getRosterDigest = (group) => inner.getRosterDigest(group);
    if (bug !== 'lacks-digest' && bug !== 'lacks-advance') this.advanceRosterDigest = (group) => inner.advanceRosterDigest(group);
  }

  override async putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    const outcome = await super.putMember(group, workerId, expectedVersion, next);
    if (outcome.status === 'applied' && this.bug === 'caches-members') this.#cached.set(`${group}\u0000${workerId}`, outcome.record);
    return outcome;
  }

  override async removeMember(group: string, workerId: string, expectedVersion: number): Promise<DeleteResult<MemberRecord>> {
    const outcome = await super.removeMember(group, workerId, expectedVersion);
    if (outcome.status === 'applied' && this.bug === 'caches-members') this.#cached.set(`${group}\u0000${workerId}`, null);
    return outcome;
  }

  async #cachedMembers(group: string, workerIds: readonly string[]): Promise<Roster> {
    validateGroup(group);
    validateWorkerIds(workerIds);
    const unread = workerIds.filter((workerId) => !this.#cached.has(`${group}\u0000${workerId}`));
    const roster = await (this.inner as Storage & WatcherReads).getMembers(group, unread);
    for (const workerId of unread) this.#cached.set(`${group}\u0000${workerId}`, roster.members.find((member) => member.workerId === workerId) ?? null);
    const members = [...new Set(workerIds)].flatMap((workerId) => this.#cached.get(`${group}\u0000${workerId}`) ?? []);
    return { group, members, corrupt: roster.corrupt };
  }
}

/**
 * Keeps the advances' names beside the digest, written after the digest moved and on a read of the names
 * kept before it: an advance that runs meanwhile overwrites the other's names, as a read-then-write of a
 * list would on a backend, and the moves across it read `null` where they should name both.
 */
export class MovesReadThenWriteStorage extends MemoryStorage {
  readonly #kept = new Map<string, KeptAdvance[]>();

  override async advanceRosterDigest(group: string, workerIds: readonly string[] = []): Promise<number> {
    const kept = this.#kept.get(group) ?? [];
    const digest = await super.advanceRosterDigest(group, workerIds);
    await nextPage();
    this.#kept.set(group, keptAfter([...kept, { digest, workerIds: [...workerIds] }], digest));
    return digest;
  }

  override async getRosterMoves(group: string, since: number): Promise<RosterMoves> {
    const { digest } = await super.getRosterMoves(group, since);
    return rosterMovesOf(since, digest, this.#kept.get(group) ?? []);
  }
}

/** How a {@link MovesMisreadStorage} reads the moves wrong. */
export type MovesBug =
  /** An advance that named nobody is read as naming nobody new: a reader is told to read only the others. */
  | 'nobody-names-none'
  /** Only the last 16 advances are kept, and a read from further back names only what is kept. */
  | 'keeps-sixteen';

/** A store whose `getRosterMoves` answers from its advances the wrong way `bug` says. */
export class MovesMisreadStorage extends MemoryStorage {
  readonly #kept = new Map<string, KeptAdvance[]>();

  constructor(private readonly bug: MovesBug) {
    super();
  }

  override async advanceRosterDigest(group: string, workerIds: readonly string[] = []): Promise<number> {
    const digest = await super.advanceRosterDigest(group, workerIds);
    const kept = [...(this.#kept.get(group) ?? []), { digest, workerIds: [...workerIds] }];
    this.#kept.set(group, this.bug === 'keeps-sixteen' ? kept.slice(-16) : kept);
    return digest;
  }

  override async getRosterMoves(group: string, since: number): Promise<RosterMoves> {
    const { digest } = await super.getRosterMoves(group, since);
    if (since > digest) return { digest, moved: null };
    const after = (this.#kept.get(group) ?? []).filter((advance) => advance.digest > since && advance.digest <= digest);
    if (this.bug !== 'nobody-names-none' && after.some((advance) => advance.workerIds.length === 0)) return { digest, moved: null };
    return { digest, moved: [...new Set(after.flatMap((advance) => advance.workerIds))] };
  }
}

/** A client with `getRosterMoves` and none of the watchers' reads. */
export class MovesWithoutWatcherReads extends Passthrough {
  readonly getRosterMoves: (group: string, since: number) => Promise<RosterMoves>;

  constructor(inner: MemoryStorage) {
    super(inner);
    this.getRosterMoves = (group, since) => inner.getRosterMoves(group, since);
  }
}

// ---------------------------------------------------------------------------------------------------
// Reads of many leases by key (`getLeases`)

/** Keeps a deleted lease's record as its tombstone and reads leases by key without leaving tombstones out: a deleted lease reads as it was. */
export class LeasesIncludeDeletedStorage extends MemoryStorage {
  readonly #tombstones = new Map<string, LeaseRecord>();

  override async deleteLease(group: string, leaseKey: string, expectedVersion: number): Promise<DeleteResult> {
    const before = await super.getLease(group, leaseKey).catch(() => null);
    const outcome = await super.deleteLease(group, leaseKey, expectedVersion);
    if (outcome.status === 'applied' && before) this.#tombstones.set(`${group}\u0000${leaseKey}`, before);
    return outcome;
  }

  override async getLeases(group: string, leaseKeys: readonly string[]): Promise<LeaseListing> {
    const listing = await super.getLeases(group, leaseKeys);
    const read = new Set(listing.leases.map((lease) => lease.leaseKey));
    const deleted = [...new Set(leaseKeys)].flatMap((leaseKey) => (read.has(leaseKey) ? [] : (this.#tombstones.get(`${group}\u0000${leaseKey}`) ?? [])));
    return { ...listing, leases: [...listing.leases, ...deleted] };
  }
}

/** Reads each key named as often as it is named. */
export class LeasesRepeatedStorage extends MemoryStorage {
  override async getLeases(group: string, leaseKeys: readonly string[]): Promise<LeaseListing> {
    const listing = await super.getLeases(group, leaseKeys);
    const byKey = new Map(listing.leases.map((lease) => [lease.leaseKey, lease]));
    return { ...listing, leases: leaseKeys.flatMap((leaseKey) => byKey.get(leaseKey) ?? []) };
  }
}

/** Reads the leases of every group whose name starts with the group's: a key scheme that matches by prefix. */
export class LeasesByPrefixStorage extends MemoryStorage {
  readonly #groups = new Set<string>();

  override async createLease(lease: NewLease, options?: CreateLeaseOptions): Promise<WriteResult<LeaseRecord>> {
    const outcome = await super.createLease(lease, options);
    if (outcome.status === 'applied') this.#groups.add(lease.group);
    return outcome;
  }

  override async getLeases(group: string, leaseKeys: readonly string[]): Promise<LeaseListing> {
    const own = await super.getLeases(group, leaseKeys);
    const found = new Set(own.leases.map((lease) => lease.leaseKey));
    const missing = leaseKeys.filter((leaseKey) => !found.has(leaseKey));
    const others = await Promise.all([...this.#groups].filter((name) => name !== group && name.startsWith(group)).map((name) => super.getLeases(name, missing)));
    return { leases: [...own.leases, ...others.flatMap((listing) => listing.leases)], corrupt: own.corrupt };
  }
}

/** Throws the first corrupt lease's error out of a read of many: one bad lease hides every other. */
export class LeasesThrowOnCorruptStorage extends MemoryStorage {
  override async getLeases(group: string, leaseKeys: readonly string[]): Promise<LeaseListing> {
    const listing = await super.getLeases(group, leaseKeys);
    if (listing.corrupt[0]) throw listing.corrupt[0];
    return listing;
  }
}

/** Leaves corrupt leases out of a read of many without a word. */
export class LeasesHideCorruptStorage extends MemoryStorage {
  override async getLeases(group: string, leaseKeys: readonly string[]): Promise<LeaseListing> {
    return { leases: (await super.getLeases(group, leaseKeys)).leases, corrupt: [] };
  }
}

/** Reads many leases from a replica one write behind (an eventually consistent batch read): each lease as it was before its last write. */
export class LeasesOneWriteBehindStorage extends MemoryStorage {
  readonly #before = new Map<string, LeaseRecord | null>();

  override async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    const before = await Promise.all(updates.map((update) => super.getLease(group, update.leaseKey).catch(() => null)));
    const outcomes = await super.updateLeases(group, updates);
    for (const [i, outcome] of outcomes.entries()) if (outcome.status === 'applied') this.#before.set(`${group}\u0000${(updates[i] as LeaseUpdate).leaseKey}`, before[i] ?? null);
    return outcomes;
  }

  override async getLeases(group: string, leaseKeys: readonly string[]): Promise<LeaseListing> {
    const listing = await super.getLeases(group, leaseKeys);
    return { ...listing, leases: listing.leases.map((lease) => this.#before.get(`${group}\u0000${lease.leaseKey}`) ?? lease) };
  }
}

/** A client of a shared store with `getLeases`, which it answers from its own cache once it has read a key, updated only with its own writes. */
export class CachingLeaseReads extends Passthrough {
  readonly #cached = new Map<string, LeaseRecord | null>();

  constructor(inner: MemoryStorage) {
    super(inner);
  }

  async getLeases(group: string, leaseKeys: readonly string[]): Promise<LeaseListing> {
    validateGroup(group);
    const unread = leaseKeys.filter((leaseKey) => !this.#cached.has(`${group}\u0000${leaseKey}`));
    const listing = await (this.inner as MemoryStorage).getLeases(group, unread);
    for (const leaseKey of unread) this.#cached.set(`${group}\u0000${leaseKey}`, listing.leases.find((lease) => lease.leaseKey === leaseKey) ?? null);
    return { leases: [...new Set(leaseKeys)].flatMap((leaseKey) => this.#cached.get(`${group}\u0000${leaseKey}`) ?? []), corrupt: listing.corrupt };
  }

  override async createLease(lease: NewLease, options?: CreateLeaseOptions): Promise<WriteResult<LeaseRecord>> {
    const outcome = await super.createLease(lease, options);
    if (outcome.status === 'applied') this.#cached.set(`${lease.group}\u0000${lease.leaseKey}`, outcome.record);
    return outcome;
  }

  override async deleteLease(group: string, leaseKey: string, expectedVersion: number): Promise<DeleteResult> {
    const outcome = await super.deleteLease(group, leaseKey, expectedVersion);
    if (outcome.status === 'applied') this.#cached.set(`${group}\u0000${leaseKey}`, null);
    return outcome;
  }
}

/**
 * Reads many leases from a primary and a replica in turn, as a load balancer's round robin would send them.
 * A write applies on the primary, then on the replica a round trip later, and returns once both have it
 * (synchronous replication that waits for the replica to apply it): no read begun after a write returned
 * misses it, but a call on the replica right after one on the primary may read a lease at the version
 * before the one the primary gave.
 */
export class LeasesFromPrimaryAndReplicaStorage extends MemoryStorage {
  /** The replica's copy of each lease written through this store: `null` once deleted. */
  readonly #replica = new Map<string, LeaseRecord | null>();
  #calls = 0;

  override async createLease(lease: NewLease, options?: CreateLeaseOptions): Promise<WriteResult<LeaseRecord>> {
    const outcome = await super.createLease(lease, options);
    await nextPage();
    if (outcome.status === 'applied') this.#replica.set(`${lease.group}\u0000${lease.leaseKey}`, outcome.record);
    return outcome;
  }

  override async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    const outcomes = await super.updateLeases(group, updates);
    await nextPage();
    for (const [i, outcome] of outcomes.entries()) if (outcome.status === 'applied') this.#replica.set(`${group}\u0000${(updates[i] as LeaseUpdate).leaseKey}`, outcome.record);
    return outcomes;
  }

  override async deleteLease(group: string, leaseKey: string, expectedVersion: number): Promise<DeleteResult> {
    const outcome = await super.deleteLease(group, leaseKey, expectedVersion);
    await nextPage();
    if (outcome.status === 'applied') this.#replica.set(`${group}\u0000${leaseKey}`, null);
    return outcome;
  }

  override async getLeases(group: string, leaseKeys: readonly string[]): Promise<LeaseListing> {
    const primary = await super.getLeases(group, leaseKeys);
    if (this.#calls++ % 2 === 0) return primary;
    const onPrimary = new Map(primary.leases.map((lease) => [lease.leaseKey, lease]));
    const corrupt = new Set(primary.corrupt.map((error) => error.leaseKey));
    const leases = [...new Set(leaseKeys)].flatMap((leaseKey) => {
      if (corrupt.has(leaseKey)) return [];
      const copy = this.#replica.get(`${group}\u0000${leaseKey}`);
      return copy === undefined ? (onPrimary.get(leaseKey) ?? []) : (copy ?? []);
    });
    return { leases, corrupt: primary.corrupt };
  }
}

/**
 * Reads many leases in two round trips, the owner, epoch and incarnation first and the checkpoint, metadata
 * and every other field in a second (two statements outside a transaction, or two projections of a
 * backend's batch read), joined by key: a write that lands between the two gives a lease of fields of two
 * versions.
 */
export class LeasesReadInTwoPartsStorage extends MemoryStorage {
  override async getLeases(group: string, leaseKeys: readonly string[]): Promise<LeaseListing> {
    const heads = await super.getLeases(group, leaseKeys);
    await nextPage();
    const bodies = new Map((await super.getLeases(group, leaseKeys)).leases.map((lease) => [lease.leaseKey, lease]));
    const leases = heads.leases.flatMap((head) => {
      const body = bodies.get(head.leaseKey);
      return body ? [{ ...body, version: head.version, owner: head.owner, epoch: head.epoch, incarnation: head.incarnation }] : [];
    });
    return { leases, corrupt: heads.corrupt };
  }
}

/**
 * Reads the named leases by paging through the group by key with LIMIT and OFFSET, 100 a page, and keeping
 * those named (one query for any keys): a lease deleted in a page already read moves every later lease one
 * place up, so a named lease is skipped, and a lease created there reads one twice.
 */
export class LeasesByOffsetStorage extends MemoryStorage {
  override async getLeases(group: string, leaseKeys: readonly string[]): Promise<LeaseListing> {
    validateGroup(group);
    validateLeaseKeys(leaseKeys);
    const named = new Set(leaseKeys);
    const leases: LeaseRecord[] = [];
    for (let offset = 0; ; offset += 100) {
      const listing = await super.listLeases(group);
      const page = [...listing.leases].sort((a, b) => (a.leaseKey < b.leaseKey ? -1 : 1)).slice(offset, offset + 100);
      leases.push(...page.filter((lease) => named.has(lease.leaseKey)));
      if (page.length < 100) return { leases, corrupt: listing.corrupt.filter((error) => named.has(error.leaseKey as string)) };
      await nextPage();
    }
  }
}
