/**
 * A store in one JSON file, each operation a synchronous read, check and write of the file, with no lock:
 * atomic inside one process (nothing else runs between the read and the write), and a lost-update machine
 * between processes. It passes every race of clients in one process, as an adapter on a synchronous
 * driver does, and must fail the suite's cross-process mode.
 */
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import {
  STORAGE_CONTRACT_VERSION,
  type CreateLeaseOptions,
  type DeleteResult,
  type LeaderRecord,
  type LeaderState,
  type LeaseListing,
  type LeaseRecord,
  type LeaseUpdate,
  type MemberRecord,
  type MemberState,
  type NewLeader,
  type NewLease,
  type Roster,
  type Storage,
  type WriteResult,
} from '../../src/index.js';
import {
  leaderStateOf,
  leaseStateOf,
  memberStateOf,
  result,
  validateGroup,
  validateLeaderState,
  validateLeaseKey,
  validateLeaseUpdates,
  validateMemberWrite,
  validateNewLeader,
  validateNewLease,
  validateVersion,
  validateWorkerId,
  validateWorkerIds,
} from '../../src/adapter.js';

interface Slot {
  record: LeaseRecord | null;
  highVersion: number;
  highEpoch: number;
}

interface Contents {
  leases: Record<string, Record<string, Slot>>;
  leaders: Record<string, LeaderRecord>;
  /** Per group: the greatest member version it ever had, and its members. */
  rosters: Record<string, { highVersion: number; members: MemberRecord[] }>;
  /** Per group: the roster digest. */
  digests: Record<string, number>;
}

let writes = 0;

export class UnlockedFileStorage implements Storage {
  readonly contractVersion = STORAGE_CONTRACT_VERSION;
  constructor(private readonly file: string) {}

  /** Creates the file, empty. */
  static create(file: string): UnlockedFileStorage {
    const storage = new UnlockedFileStorage(file);
    storage.#save({ leases: {}, leaders: {}, rosters: {}, digests: {} });
    return storage;
  }

  async listLeases(group: string): Promise<LeaseListing> {
    validateGroup(group);
    const slots = Object.values(this.#load().leases[group] ?? {});
    return { leases: slots.flatMap((slot) => (slot.record ? [slot.record] : [])), corrupt: [] };
  }

  async getLease(group: string, leaseKey: string): Promise<LeaseRecord | null> {
    validateGroup(group);
    validateLeaseKey(leaseKey);
    return this.#load().leases[group]?.[leaseKey]?.record ?? null;
  }

  async createLease(lease: NewLease, options: CreateLeaseOptions = {}): Promise<WriteResult<LeaseRecord>> {
    const { group, leaseKey, state } = validateNewLease(lease);
    const contents = this.#load();
    const slots = (contents.leases[group] ??= {});
    const slot = (slots[leaseKey] ??= { record: null, highVersion: 0, highEpoch: 0 });
    if (slot.record) return result.conflict(slot.record);
    if (slot.highVersion > 0 && options.recreate !== true) return result.conflict(null);
    const record = { ...state, group, leaseKey, version: slot.highVersion + 1, epoch: Math.max(state.epoch, slot.highEpoch) };
    Object.assign(slot, { record, highVersion: record.version, highEpoch: record.epoch });
    this.#save(contents);
    return result.applied(record);
  }

  async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    validateLeaseUpdates(group, updates);
    const contents = this.#load();
    const results = updates.map((update) => {
      const slot = contents.leases[group]?.[update.leaseKey];
      if (!slot?.record || slot.record.version !== update.expectedVersion) return result.conflict(slot?.record ?? null);
      const record = { ...leaseStateOf(update.next), group, leaseKey: update.leaseKey, version: slot.record.version + 1 };
      Object.assign(slot, { record, highVersion: record.version, highEpoch: Math.max(slot.highEpoch, record.epoch) });
      return result.applied(record);
    });
    this.#save(contents);
    return results;
  }

  async deleteLease(group: string, leaseKey: string, expectedVersion: number): Promise<DeleteResult> {
    validateGroup(group);
    validateLeaseKey(leaseKey);
    validateVersion(expectedVersion);
    const contents = this.#load();
    const slot = contents.leases[group]?.[leaseKey];
    if (!slot?.record || slot.record.version !== expectedVersion) return result.conflict(slot?.record ?? null);
    slot.record = null;
    this.#save(contents);
    return { status: 'applied' };
  }

  async getLeader(group: string): Promise<LeaderRecord | null> {
    validateGroup(group);
    return this.#load().leaders[group] ?? null;
  }

  async createLeader(leader: NewLeader): Promise<WriteResult<LeaderRecord>> {
    const { group, state } = validateNewLeader(leader);
    const contents = this.#load();
    const current = contents.leaders[group];
    if (current) return result.conflict(current);
    const record = { ...state, group, version: 1 };
    contents.leaders[group] = record;
    this.#save(contents);
    return result.applied(record);
  }

  async updateLeader(group: string, expectedVersion: number, next: LeaderState): Promise<WriteResult<LeaderRecord>> {
    validateGroup(group);
    validateVersion(expectedVersion);
    validateLeaderState(next);
    const contents = this.#load();
    const current = contents.leaders[group];
    if (!current || current.version !== expectedVersion) return result.conflict(current ?? null);
    const record = { ...leaderStateOf(next), group, version: current.version + 1 };
    contents.leaders[group] = record;
    this.#save(contents);
    return result.applied(record);
  }

  async getRoster(group: string): Promise<Roster> {
    validateGroup(group);
    return { group, members: this.#load().rosters[group]?.members ?? [], corrupt: [] };
  }

  async putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    validateMemberWrite(group, workerId, expectedVersion, next);
    const contents = this.#load();
    const roster = (contents.rosters[group] ??= { highVersion: 0, members: [] });
    const index = roster.members.findIndex((member) => member.workerId === workerId);
    const current = roster.members[index] ?? null;
    if (current === null ? expectedVersion !== null : current.version !== expectedVersion) return result.conflict(current);
    roster.highVersion++;
    const record = { ...memberStateOf(next), group, workerId, version: roster.highVersion };
    if (index >= 0) roster.members[index] = record;
    else roster.members.push(record);
    this.#save(contents);
    return result.applied(record);
  }

  async removeMember(group: string, workerId: string, expectedVersion: number): Promise<DeleteResult<MemberRecord>> {
    validateGroup(group);
    validateWorkerId(workerId);
    validateVersion(expectedVersion);
    const contents = this.#load();
    const roster = contents.rosters[group];
    const current = roster?.members.find((member) => member.workerId === workerId) ?? null;
    if (!roster || !current || current.version !== expectedVersion) return result.conflict(current);
    roster.members = roster.members.filter((member) => member !== current);
    this.#save(contents);
    return { status: 'applied' };
  }

  async getMembers(group: string, workerIds: readonly string[]): Promise<Roster> {
    validateGroup(group);
    validateWorkerIds(workerIds);
    const members = this.#load().rosters[group]?.members ?? [];
    return { group, members: members.filter((member) => workerIds.includes(member.workerId)), corrupt: [] };
  }

  async getRosterDigest(group: string): Promise<number> {
    validateGroup(group);
    return this.#load().digests[group] ?? 0;
  }

  async advanceRosterDigest(group: string): Promise<number> {
    validateGroup(group);
    const contents = this.#load();
    const value = (contents.digests[group] ?? 0) + 1;
    contents.digests[group] = value;
    this.#save(contents);
    return value;
  }

  #load(): Contents {
    return JSON.parse(readFileSync(this.file, 'utf8')) as Contents;
  }

  #save(contents: Contents): void {
    // Written aside and renamed over, so that a reader never sees half a file: the only bug is the missing lock.
    const aside = `${this.file}.${process.pid}.${writes++}`;
    writeFileSync(aside, JSON.stringify(contents));
    renameSync(aside, this.file);
  }
}

/** Opens a client in another process (the suite's cross-process mode). */
export async function openClient(options: { file: string }): Promise<Storage> {
  return new UnlockedFileStorage(options.file);
}
