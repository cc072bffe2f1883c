/**
 * A complete Leasehold storage adapter on SQLite, written from scratch against the contract of
 * `@leasehold/core` (its `storage.ts`). Copy it as the starting point of an adapter for your own backend:
 * the shape stays the same whatever the database, only the statements change.
 *
 * What every adapter must get right, and where this file does it:
 * - every write is a compare-and-set on the record's `version`, done by the database in ONE statement
 *   (`UPDATE ... WHERE version = ?`), never as a read in JavaScript followed by a write;
 * - a batch of lease updates is one transaction: one lock, one commit, one result per update, in order;
 * - a deleted lease leaves a tombstone: the key is not created again unless the caller asks to recreate
 *   it, and then it never repeats a version or lowers its epoch (an old owner holding the old version
 *   must not be able to write the new lease);
 * - a record is stored whole, every field of its state in one JSON document, including the record
 *   format and fields a later core adds, and given back exactly as stored;
 * - input is checked with core's helpers before anything is written, so every adapter refuses exactly the
 *   same input with exactly the same error;
 * - a stored row that cannot be read back is reported as a `CorruptRecordError` naming it, never
 *   repaired: in a listing beside the others, in a batch as that one update's `unknown` result;
 * - a write reports `unknown` whenever it cannot prove what happened;
 * - the roster of a group is read by one SELECT; each member is a row of its own, written conditionally
 *   on its own version alone, so a heartbeat writes one small row whatever the group's size; a removed
 *   member leaves a tombstone keeping its version, so a version never repeats for a worker id, not even
 *   after it is removed and joins again;
 * - the optional watchers' reads, all three or none: a few members by id (one SELECT), and the group's
 *   roster digest, a counter advanced atomically by one statement.
 *
 * SQLite is one file with one writer at a time, which suits one machine (several processes on one host,
 * a single-node deployment, tests). The adapter has no change feed: SQLite cannot wake other processes,
 * and the feed is optional; workers then find free leases at their next take tick.
 *
 * ```ts
 * import Database from 'better-sqlite3';
 * const storage = new SqliteStorage({ database: new Database('leases.db') });
 * ```
 */
import type Database from 'better-sqlite3';
import {
  CorruptRecordError,
  InvalidConfigError,
  LeaseholdError,
  StorageOutcomeUnknownError,
  StorageUnavailableError,
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
} from '@leasehold/core';
import {
  decodeLeader,
  decodeLease,
  decodeMember,
  describeValue,
  encodeLeaderState,
  encodeLeaseState,
  encodeMemberState,
  leaseStateOf,
  listingOf,
  memberStateOf,
  result,
  rosterOf,
  validateGroup,
  validateLeaderState,
  validateLeaseKey,
  validateLeaseKeys,
  validateLeaseUpdates,
  validateMemberWrite,
  validateNewLeader,
  validateNewLease,
  validateVersion,
  validateWorkerId,
  validateWorkerIds,
} from '@leasehold/core/adapter';

/** The name in every error message, so that a user sees at once which adapter refused what. */
const PKG = 'sqlite-storage';

/** Options of {@link SqliteStorage}. */
export interface SqliteStorageOptions {
  /**
   * An open better-sqlite3 connection. The storage never closes it: the connection is yours. Open one per
   * process (or per worker); they may all point at the same file.
   */
  database: Database.Database;
  /** Prefix of the tables, `<prefix>_leases`, `<prefix>_leaders`, `<prefix>_members` and `<prefix>_digests`. Default `leasehold`. */
  tablePrefix?: string;
}

/** A row as SQLite returns it. Typed loosely on purpose: whatever is stored is checked by `decodeLease`. */
interface StoredRow {
  version: unknown;
  state: unknown;
}

/**
 * Leasehold's lease, checkpoint and leader storage on SQLite. Implements both `CheckpointStorage` and
 * `LeaderStore`; the constructor creates its tables if they are missing.
 */
export class SqliteStorage implements Storage {
  /**
   * The storage contract version this adapter was written for (UPGRADING.md): core refuses an adapter of
   * another version when it is handed one. Written as a number, not as core's `STORAGE_CONTRACT_VERSION`, so
   * that a newer core's contract is taken on only by changing the adapter.
   */
  readonly contractVersion = 8;

  readonly #database: Database.Database;
  readonly #sql: ReturnType<typeof prepare>;

  constructor(options: SqliteStorageOptions) {
    if (typeof options !== 'object' || options === null || typeof options.database?.prepare !== 'function') {
      throw new InvalidConfigError(`[${PKG}] database must be a better-sqlite3 Database, got ${describeValue(options?.database)}`);
    }
    const prefix = options.tablePrefix ?? 'leasehold';
    // The prefix becomes part of SQL text (identifiers cannot be bound parameters), so it is validated
    // here rather than quoted: a name a user configures must never be able to change a statement.
    if (typeof prefix !== 'string' || !/^[A-Za-z_][A-Za-z0-9_]{0,47}$/.test(prefix)) {
      throw new InvalidConfigError(`[${PKG}] table prefix ${describeValue(prefix)} must be letters, digits and underscores, starting with a letter or underscore`);
    }
    this.#database = options.database;
    createTables(this.#database, prefix);
    this.#sql = prepare(this.#database, prefix);
  }

  async listLeases(group: string): Promise<LeaseListing> {
    validateGroup(group, PKG);
    // One statement reads one consistent snapshot, so the list is strongly consistent. A network backend
    // would page here (and the contract makes paging the adapter's business); a local file needs none.
    const rows = this.#read('listLeases', () => this.#sql.listLeases.all({ group }) as Array<StoredRow & { leaseKey: string }>);
    // A row that cannot be decoded is reported by its key in `corrupt`, and never hides the others.
    return listingOf(rows, (row) => decodeLease(group, row.leaseKey, row.version, row.state, PKG));
  }

  async getLease(group: string, leaseKey: string): Promise<LeaseRecord | null> {
    validateGroup(group, PKG);
    validateLeaseKey(leaseKey, PKG);
    const row = this.#read('getLease', () => this.#sql.getLease.get({ group, leaseKey }) as StoredRow | undefined);
    return row ? decodeLease(group, leaseKey, row.version, row.state, PKG) : null;
  }

  // Optional: core reads the leases the change feed announces to a worker with it, 100 a call, instead of
  // one getLease each. This example has no change feed, so core never calls it here; it is what an adapter
  // with one would write, and the suite checks it.
  async getLeases(group: string, leaseKeys: readonly string[]): Promise<LeaseListing> {
    validateGroup(group, PKG);
    validateLeaseKeys(leaseKeys, PKG);
    const keys = [...new Set(leaseKeys)];
    // One SELECT of the named rows reads one snapshot, tombstones left out, decoded as getLease decodes.
    const rows = this.#read('getLeases', () => this.#sql.getLeases.all({ group, keys: JSON.stringify(keys) }) as Array<StoredRow & { leaseKey: string }>);
    return listingOf(rows, (row) => decodeLease(group, row.leaseKey, row.version, row.state, PKG));
  }

  async createLease(lease: NewLease, options: CreateLeaseOptions = {}): Promise<WriteResult<LeaseRecord>> {
    const { group, leaseKey, state } = validateNewLease(lease, PKG);
    const recreate = options.recreate === true ? 1 : 0;
    const outcome = this.#write('createLease', () => {
      const created = this.#sql.createLease.get({ group, leaseKey, epoch: state.epoch, state: encodeLeaseState(state), recreate }) as StoredRow | undefined;
      // No row back means a live lease refused the insert, or a tombstone did (the key was deleted and
      // the caller did not ask to recreate it). It is read in the same transaction, so the conflict
      // carries exactly the lease that refused it, or none for a tombstone.
      return { created, current: created ? undefined : (this.#sql.getLease.get({ group, leaseKey }) as StoredRow | undefined) };
    });
    if (outcome instanceof LeaseholdError) return result.unknown(outcome);
    // The created record is decoded from what the database returned: the epoch may have been raised to
    // the key's highest, so the input alone does not say what is stored.
    if (outcome.created) return result.applied(decodeLease(group, leaseKey, outcome.created.version, outcome.created.state, PKG));
    return this.#leaseConflict(group, leaseKey, outcome.current);
  }

  async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    // The whole batch is checked first: one bad update refuses the batch before anything is written.
    validateLeaseUpdates(group, updates, PKG);
    if (updates.length === 0) return [];
    const outcome = this.#write('updateLeases', () =>
      updates.map((update) => {
        const applied = this.#sql.updateLease.get({
          group,
          leaseKey: update.leaseKey,
          expectedVersion: update.expectedVersion,
          epoch: update.next.epoch,
          state: encodeLeaseState(update.next),
        }) as { version: number } | undefined;
        return applied ? { version: applied.version } : { current: this.#sql.getLease.get({ group, leaseKey: update.leaseKey }) as StoredRow | undefined };
      }),
    );
    if (outcome instanceof LeaseholdError) return updates.map(() => result.unknown(outcome));
    // Decoded after the commit: a corrupt row met while reading a conflict must not roll back the
    // other leases of the batch (a worker renews all its leases in one batch).
    return updates.map((update, i) => {
      const row = outcome[i] as { version: number } | { current: StoredRow | undefined };
      // Identity first: leaseStateOf never returns it, and a spread placed last is cloned far faster by V8.
      if ('version' in row) return result.applied({ group, leaseKey: update.leaseKey, version: row.version, ...leaseStateOf(update.next) });
      return this.#leaseConflict(group, update.leaseKey, row.current);
    });
  }

  async deleteLease(group: string, leaseKey: string, expectedVersion: number): Promise<DeleteResult> {
    validateGroup(group, PKG);
    validateLeaseKey(leaseKey, PKG);
    validateVersion(expectedVersion, PKG);
    const outcome = this.#write('deleteLease', () => {
      const deleted = this.#sql.deleteLease.run({ group, leaseKey, expectedVersion }).changes === 1;
      return { deleted, current: deleted ? undefined : (this.#sql.getLease.get({ group, leaseKey }) as StoredRow | undefined) };
    });
    if (outcome instanceof LeaseholdError) return result.unknown(outcome);
    return outcome.deleted ? { status: 'applied' } : this.#leaseConflict(group, leaseKey, outcome.current);
  }

  async getRoster(group: string): Promise<Roster> {
    validateGroup(group, PKG);
    // One SELECT reads one consistent snapshot of every member of the group, tombstones left out. A
    // network backend reads the members' records in one query too, paging inside the adapter if it must.
    const rows = this.#read('getRoster', () => this.#sql.listMembers.all({ group }) as Array<StoredRow & { workerId: string }>);
    return rosterOf(group, rows, (row) => decodeMember(group, row.workerId, row.version, row.state, PKG));
  }

  async getMembers(group: string, workerIds: readonly string[]): Promise<Roster> {
    validateGroup(group, PKG);
    validateWorkerIds(workerIds, PKG);
    const ids = [...new Set(workerIds)];
    // One SELECT of the named rows reads one snapshot, tombstones left out, decoded as getRoster decodes.
    const rows = this.#read('getMembers', () => this.#sql.getMembers.all({ group, ids: JSON.stringify(ids) }) as Array<StoredRow & { workerId: string }>);
    const byId = new Map(rows.map((row) => [row.workerId, row]));
    const found = ids.flatMap((workerId) => byId.get(workerId) ?? []);
    return rosterOf(group, found, (row) => decodeMember(group, row.workerId, row.version, row.state, PKG));
  }

  async getRosterDigest(group: string): Promise<number> {
    validateGroup(group, PKG);
    const row = this.#read('getRosterDigest', () => this.#sql.getDigest.get({ group }) as { digest: unknown } | undefined);
    if (row === undefined) return 0;
    if (typeof row.digest === 'number' && Number.isSafeInteger(row.digest) && row.digest >= 0) return row.digest;
    throw corruptDigest(group, row.digest);
  }

  async advanceRosterDigest(group: string): Promise<number> {
    validateGroup(group, PKG);
    // One statement: created at 1, or one more than stored, under the write lock; never lost to another.
    const outcome = this.#write('advanceRosterDigest', () => {
      const advanced = this.#sql.advanceDigest.get({ group }) as { digest: number } | undefined;
      return { advanced, stored: advanced ? undefined : (this.#sql.getDigest.get({ group }) as { digest: unknown } | undefined) };
    });
    // The contract: an advance whose outcome is unknown throws, and core advances again.
    if (outcome instanceof LeaseholdError) throw outcome;
    // Nothing back: the stored digest is not a number, and is reported rather than overwritten.
    if (outcome.advanced === undefined) throw corruptDigest(group, outcome.stored?.digest);
    return outcome.advanced.digest;
  }

  async putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    validateMemberWrite(group, workerId, expectedVersion, next, PKG);
    const state = memberStateOf(next);
    const outcome = this.#write('putMember', () => {
      const params = { group, workerId, state: encodeMemberState(state) };
      // One conditional statement on the member's own row; the transaction only makes the conflict read
      // below see exactly the member that refused the write.
      const written = (
        expectedVersion === null ? this.#sql.joinMember.get(params) : this.#sql.updateMember.get({ ...params, expectedVersion })
      ) as { version: number } | undefined;
      return { written, current: written ? undefined : (this.#sql.getMember.get({ group, workerId }) as StoredRow | undefined) };
    });
    if (outcome instanceof LeaseholdError) return result.unknown(outcome);
    if (outcome.written) return result.applied({ group, workerId, version: outcome.written.version, ...state });
    return this.#memberConflict(group, workerId, outcome.current);
  }

  async removeMember(group: string, workerId: string, expectedVersion: number): Promise<DeleteResult<MemberRecord>> {
    validateGroup(group, PKG);
    validateWorkerId(workerId, PKG);
    validateVersion(expectedVersion, PKG);
    // The row stays as a tombstone keeping the version: a worker that joins again continues above it.
    const outcome = this.#write('removeMember', () => {
      const removed = this.#sql.removeMember.run({ group, workerId, expectedVersion }).changes === 1;
      return { removed, current: removed ? undefined : (this.#sql.getMember.get({ group, workerId }) as StoredRow | undefined) };
    });
    if (outcome instanceof LeaseholdError) return result.unknown(outcome);
    return outcome.removed ? { status: 'applied' } : this.#memberConflict(group, workerId, outcome.current);
  }

  async getLeader(group: string): Promise<LeaderRecord | null> {
    validateGroup(group, PKG);
    const row = this.#read('getLeader', () => this.#sql.getLeader.get({ group }) as StoredRow | undefined);
    return row ? decodeLeader(group, row.version, row.state, PKG) : null;
  }

  async createLeader(leader: NewLeader): Promise<WriteResult<LeaderRecord>> {
    const { group, state } = validateNewLeader(leader, PKG);
    const outcome = this.#write('createLeader', () => {
      const created = this.#sql.createLeader.get({ group, state: encodeLeaderState(state) }) as StoredRow | undefined;
      return { created, current: created ? undefined : (this.#sql.getLeader.get({ group }) as StoredRow | undefined) };
    });
    if (outcome instanceof LeaseholdError) return result.unknown(outcome);
    if (outcome.created) return result.applied(decodeLeader(group, outcome.created.version, outcome.created.state, PKG));
    return this.#leaderConflict(group, outcome.current);
  }

  async updateLeader(group: string, expectedVersion: number, next: LeaderState): Promise<WriteResult<LeaderRecord>> {
    validateGroup(group, PKG);
    validateVersion(expectedVersion, PKG);
    validateLeaderState(next, PKG);
    const outcome = this.#write('updateLeader', () => {
      const updated = this.#sql.updateLeader.get({ group, expectedVersion, state: encodeLeaderState(next) }) as StoredRow | undefined;
      return { updated, current: updated ? undefined : (this.#sql.getLeader.get({ group }) as StoredRow | undefined) };
    });
    if (outcome instanceof LeaseholdError) return result.unknown(outcome);
    if (outcome.updated) return result.applied(decodeLeader(group, outcome.updated.version, outcome.updated.state, PKG));
    return this.#leaderConflict(group, outcome.current);
  }

  /** A conflict carrying the current lease; if that row is corrupt, the outcome is reported as unknown with the error. */
  #leaseConflict(group: string, leaseKey: string, row: StoredRow | undefined): WriteResult<LeaseRecord> {
    try {
      return result.conflict(row ? decodeLease(group, leaseKey, row.version, row.state, PKG) : null);
    } catch (error) {
      return result.unknown(error as LeaseholdError);
    }
  }

  #memberConflict(group: string, workerId: string, row: StoredRow | undefined): WriteResult<MemberRecord> {
    try {
      return result.conflict(row ? decodeMember(group, workerId, row.version, row.state, PKG) : null);
    } catch (error) {
      return result.unknown(error as LeaseholdError);
    }
  }

  #leaderConflict(group: string, row: StoredRow | undefined): WriteResult<LeaderRecord> {
    try {
      return result.conflict(row ? decodeLeader(group, row.version, row.state, PKG) : null);
    } catch (error) {
      return result.unknown(error as LeaseholdError);
    }
  }

  /** Runs a read; a failure of the database becomes a `StorageUnavailableError` naming the operation. */
  #read<T>(operation: string, read: () => T): T {
    try {
      return read();
    } catch (error) {
      throw new StorageUnavailableError(`[${PKG}] ${operation} failed: ${messageOf(error)}`, { cause: error });
    }
  }

  /**
   * Runs `work` in one IMMEDIATE transaction (it takes the database's write lock at BEGIN, so nothing
   * else writes between its statements). Returns what `work` returned, or the error of an `unknown`
   * outcome.
   *
   * The rule for errors: say "nothing was written" only when that is certain. SQLITE_BUSY means the
   * lock was never had (or the commit was refused and rolled back), so nothing was written: that is
   * thrown as `StorageUnavailableError`. Any other failure (an I/O error during COMMIT, a full disk) may
   * leave the outcome to SQLite's recovery, so it is `unknown` and core re-reads before acting.
   */
  #write<T>(operation: string, work: () => T): T | LeaseholdError {
    try {
      return this.#database.transaction(work).immediate();
    } catch (error) {
      if (isBusy(error)) {
        throw new StorageUnavailableError(`[${PKG}] ${operation} could not lock the database: ${messageOf(error)}`, { cause: error });
      }
      return new StorageOutcomeUnknownError(`[${PKG}] the outcome of ${operation} is unknown: ${messageOf(error)}`, { cause: error });
    }
  }
}

/**
 * The tables. A lease row whose `state` is NULL is a tombstone: the key was deleted, but its
 * `version` and `high_epoch` stay, so that a new lease under the same key continues above them.
 * `high_epoch` is the greatest epoch the key ever had (core only raises epochs, but the contract asks the
 * store to keep the bound itself rather than trust every writer).
 *
 * A member is one row of `<prefix>_members`, and a member row whose `state` is NULL is a removed member's
 * tombstone: its `version` stays, so that the worker id's next join continues above every version it had.
 * Members share no row: a heartbeat writes its own row alone. A tombstone is a few dozen bytes per worker
 * id that ever joined (the contract keeps a worker id's greatest version for good).
 *
 * A group's roster digest is one row of `<prefix>_digests`, created at 1 by its first advance.
 *
 * The example is not a published package, so no earlier release of it can run beside this one: it has no
 * earlier layout to mark or migrate (an adapter whose earlier release kept members in another layout must
 * mark it on a join, see `putMember` in core's `storage.ts`). Start from a new database file rather than
 * one an older copy of this example wrote.
 */
function createTables(database: Database.Database, prefix: string): void {
  // WAL lets readers of other connections go on while one connection writes. A file setting: once is enough.
  database.pragma('journal_mode = WAL');
  database.exec(`
    CREATE TABLE IF NOT EXISTS ${prefix}_leases (
      grp        TEXT    NOT NULL,
      lease_key  TEXT    NOT NULL,
      version    INTEGER NOT NULL,
      high_epoch INTEGER NOT NULL,
      state      TEXT,
      PRIMARY KEY (grp, lease_key)
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS ${prefix}_leaders (
      grp     TEXT    NOT NULL PRIMARY KEY,
      version INTEGER NOT NULL,
      state   TEXT    NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS ${prefix}_members (
      grp       TEXT    NOT NULL,
      worker_id TEXT    NOT NULL,
      version   INTEGER NOT NULL,
      state     TEXT,
      PRIMARY KEY (grp, worker_id)
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS ${prefix}_digests (
      grp    TEXT    NOT NULL PRIMARY KEY,
      digest INTEGER NOT NULL
    ) WITHOUT ROWID;
  `);
}

/** Every statement, prepared once per connection. Each write is a single conditional statement. */
function prepare(database: Database.Database, prefix: string) {
  const leases = `${prefix}_leases`;
  const leaders = `${prefix}_leaders`;
  const members = `${prefix}_members`;
  const digests = `${prefix}_digests`;
  return {
    listLeases: database.prepare(`SELECT lease_key AS leaseKey, version, state FROM ${leases} WHERE grp = @group AND state IS NOT NULL`),
    getLease: database.prepare(`SELECT version, state FROM ${leases} WHERE grp = @group AND lease_key = @leaseKey AND state IS NOT NULL`),
    // The named leases: @keys is a JSON array of lease keys, unpacked by json_each.
    getLeases: database.prepare(`
      SELECT lease_key AS leaseKey, version, state FROM ${leases}
      WHERE grp = @group AND lease_key IN (SELECT value FROM json_each(@keys)) AND state IS NOT NULL`),
    // Create if absent, or over a tombstone when asked to recreate: the version continues above the
    // deleted one and the epoch is raised to the key's highest, inside the stored JSON too (in an UPDATE,
    // unqualified columns are the old row's values). A live row, or a tombstone without @recreate, makes
    // the WHERE false: nothing changes, and no row is returned.
    createLease: database.prepare(`
      INSERT INTO ${leases} (grp, lease_key, version, high_epoch, state) VALUES (@group, @leaseKey, 1, @epoch, @state)
      ON CONFLICT (grp, lease_key) DO UPDATE SET
        version = version + 1,
        high_epoch = max(high_epoch, excluded.high_epoch),
        state = json_set(excluded.state, '$.epoch', max(high_epoch, excluded.high_epoch))
      WHERE state IS NULL AND @recreate = 1
      RETURNING version, state`),
    // The compare-and-set: applies only at the version the caller read, and only to a live lease.
    updateLease: database.prepare(`
      UPDATE ${leases} SET version = version + 1, high_epoch = max(high_epoch, @epoch), state = @state
      WHERE grp = @group AND lease_key = @leaseKey AND version = @expectedVersion AND state IS NOT NULL
      RETURNING version`),
    // A delete writes the tombstone; the version is kept, so a writer holding it still conflicts.
    deleteLease: database.prepare(`
      UPDATE ${leases} SET state = NULL
      WHERE grp = @group AND lease_key = @leaseKey AND version = @expectedVersion AND state IS NOT NULL`),
    listMembers: database.prepare(`SELECT worker_id AS workerId, version, state FROM ${members} WHERE grp = @group AND state IS NOT NULL`),
    getMember: database.prepare(`SELECT version, state FROM ${members} WHERE grp = @group AND worker_id = @workerId AND state IS NOT NULL`),
    // The named members: @ids is a JSON array of worker ids, unpacked by json_each.
    getMembers: database.prepare(`
      SELECT worker_id AS workerId, version, state FROM ${members}
      WHERE grp = @group AND worker_id IN (SELECT value FROM json_each(@ids)) AND state IS NOT NULL`),
    getDigest: database.prepare(`SELECT digest FROM ${digests} WHERE grp = @group`),
    advanceDigest: database.prepare(`
      INSERT INTO ${digests} (grp, digest) VALUES (@group, 1)
      ON CONFLICT (grp) DO UPDATE SET digest = digest + 1
      WHERE typeof(digest) = 'integer'
      RETURNING digest`),
    // A join applies only when the worker id has no member: on a new worker id at version 1, over its
    // tombstone one above the version it had. A live member makes the WHERE false: no row is returned.
    // Neither this nor the update below reads or writes any other member's row.
    joinMember: database.prepare(`
      INSERT INTO ${members} (grp, worker_id, version, state) VALUES (@group, @workerId, 1, @state)
      ON CONFLICT (grp, worker_id) DO UPDATE SET version = version + 1, state = excluded.state
      WHERE state IS NULL
      RETURNING version`),
    updateMember: database.prepare(`
      UPDATE ${members} SET version = version + 1, state = @state
      WHERE grp = @group AND worker_id = @workerId AND version = @expectedVersion AND state IS NOT NULL
      RETURNING version`),
    // A remove writes the tombstone; the version is kept, so a writer holding it still conflicts.
    removeMember: database.prepare(`
      UPDATE ${members} SET state = NULL
      WHERE grp = @group AND worker_id = @workerId AND version = @expectedVersion AND state IS NOT NULL`),
    getLeader: database.prepare(`SELECT version, state FROM ${leaders} WHERE grp = @group`),
    // Leader records are never deleted, so the term needs no tombstone: it lives on in the row.
    createLeader: database.prepare(`
      INSERT INTO ${leaders} (grp, version, state) VALUES (@group, 1, @state)
      ON CONFLICT (grp) DO NOTHING
      RETURNING version, state`),
    updateLeader: database.prepare(`
      UPDATE ${leaders} SET version = version + 1, state = @state
      WHERE grp = @group AND version = @expectedVersion
      RETURNING version, state`),
  };
}

function corruptDigest(group: string, digest: unknown): CorruptRecordError {
  return new CorruptRecordError(`[${PKG}] stored roster digest of group ${describeValue(group)} is corrupt: digest is ${describeValue(digest)}`, { group });
}

function isBusy(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.startsWith('SQLITE_BUSY');
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : describeValue(error);
}
