import {
  CorruptRecordError,
  InvalidConfigError,
  StorageSchemaError,
  StorageUnavailableError,
  type ChangeSubscription,
  type CreateLeaseOptions,
  type DeleteResult,
  type LeaderRecord,
  type LeaderState,
  type LeaseChange,
  type LeaseholdError,
  type LeaseListing,
  type LeaseRecord,
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
} from '@leasehold/core';
import {
  decodeLease,
  decodeLeader,
  describeValue,
  encodeLeaderState,
  encodeLeaseState,
  encodeMemberState,
  leaderStateOf,
  leaseStateOf,
  listingOf,
  memberStateOf,
  result,
  validateGroup,
  validateLeaderState,
  validateLeaseKey,
  validateLeaseKeys,
  validateLeaseUpdates,
  validateNewLeader,
  validateNewLease,
  validateMemberWrite,
  validateVersion,
  validateWorkerId,
  validateWorkerIds,
  validateDigest,
  validateSubscribeOptions,
  optionKeys,
  refuseUnknownOptions,
} from '@leasehold/core/adapter';
import type { Pool, PoolClient } from 'pg';
import { ChangeFeed } from './change-feed.js';
import { ownerBucket } from './owner-buckets.js';
import { advanceDigest, readDigest, readMoves, type DigestIo } from './roster-digest.js';
import { isRetryable, isServerError, outcomeUnknown, schemaError, unavailable } from './errors.js';
import { runTransaction, type TransactionEnd } from './pg-transaction.js';
import { checkpointInTransaction, validateTransaction, type TransactionContext, type TransactionOptions } from './transaction.js';
import { PKG, SCHEMA_VERSION, statements, tableNames, type Statements, type TableNames } from './schema.js';
import { aliveInEarlierRoster, EARLIER_ROSTER_MARKER, earlierRosterMarker, membersStillInEarlierRoster, type EarlierJoin } from './earlier-roster.js';
import { DDL_RACE_CODES, migrateOn, type MigrationResult } from './migrate.js';
import {
  batchValues,
  changeChannel,
  ownerPayload,
  decodeStoredMember,
  rosterOfRows,
  toNumber,
  type CreateLeaseRow,
  type LeaseRow,
  type MemberOutcomeRow,
  type MemberRow,
  type OutcomeRow,
  type VersionRow,
  type WriteOutcome,
} from './rows.js';
import { hearClientErrors, MAX_ATTEMPTS, StatementSender } from './statement-sender.js';

export type { MigrationResult } from './migrate.js';

/** Options of {@link PostgresStorage}. */
export interface PostgresStorageOptions {
  /**
   * The pool every statement goes through. The storage never ends it: the pool is yours. It may point at
   * PgBouncer in transaction mode: the storage keeps no session state on it.
   */
  pool: Pool;
  /** The schema of the tables. Default `public`. A plain identifier; it is always quoted. */
  schema?: string;
  /** The table of leases. Default `leasehold_leases`. */
  leaseTable?: string;
  /** The table of leader records. Default `leasehold_leaders`. */
  leaderTable?: string;
  /** The table of members: one row per group and worker id. Default `leasehold_members`. */
  memberTable?: string;
  /**
   * The roster table of schema version 2 (one row per group, holding every member), which an earlier
   * release reads and writes. This release only marks it on a join, so that a worker of the earlier
   * release sharing the group stops (see `putMember`). Default `leasehold_rosters`.
   */
  rosterTable?: string;
  /** The table in which `migrate()` records the schema version. Default `leasehold_migrations`. */
  migrationsTable?: string;
  /** Leases read per query when listing a group. Default 1,000; from 1 to 10,000. */
  pageSize?: number;
  /**
   * The pool that the change feed takes its one LISTEN connection from. LISTEN needs a session: when
   * `pool` goes through PgBouncer in transaction mode, pass a pool with a direct (or session-mode)
   * connection here. Default: `pool`.
   */
  listenPool?: Pool;
  /**
   * Send statements as named prepared statements, parsed and planned once per connection. Default `true`.
   * They are only a per-connection cache, never relied on: a statement the server no longer knows (a
   * pooler in transaction mode that moved the session, `DISCARD ALL`) is refused before it runs, and is
   * sent again unnamed; after three such misses the storage stops naming statements. Set `false` behind
   * PgBouncer in transaction mode (before 1.21, or without `max_prepared_statements`) to skip the misses.
   */
  preparedStatements?: boolean;
}

const OPTION_KEYS = optionKeys<PostgresStorageOptions>({
  pool: true,
  schema: true,
  leaseTable: true,
  leaderTable: true,
  memberTable: true,
  rosterTable: true,
  migrationsTable: true,
  pageSize: true,
  listenPool: true,
  preparedStatements: true,
});

const DEFAULTS = {
  schema: 'public',
  leaseTable: 'leasehold_leases',
  leaderTable: 'leasehold_leaders',
  migrationsTable: 'leasehold_migrations',
  rosterTable: 'leasehold_rosters',
  memberTable: 'leasehold_members',
  pageSize: 1000,
} as const;

/**
 * Leasehold's lease, checkpoint and leader storage on PostgreSQL. Every write is one conditional statement
 * on the row's version; a batch of lease updates is one statement whatever its size. Create the tables
 * once with {@link PostgresStorage.migrate}.
 */
export class PostgresStorage implements Storage {
  /** The storage contract version this adapter implements (UPGRADING.md); core refuses any other. */
  readonly contractVersion = 8;

  readonly #pool: Pool;
  readonly #names: TableNames;
  readonly #sql: Statements;
  readonly #pageSize: number;
  readonly #where: string;
  readonly #feed: ChangeFeed;
  readonly #sender: StatementSender;
  /** Per group, the last join of this client waiting to mark the earlier release's roster row. */
  readonly #markings = new Map<string, Promise<unknown>>();

  constructor(options: PostgresStorageOptions) {
    if (typeof options !== 'object' || options === null) {
      throw new InvalidConfigError(`[${PKG}] options must be an object, got ${describeValue(options)}`);
    }
    refuseUnknownOptions(PKG, 'PostgresStorage', options, OPTION_KEYS);
    if (!isPool(options.pool)) {
      throw new InvalidConfigError(`[${PKG}] pool must be a pg.Pool, got ${describeValue(options.pool)}`);
    }
    if (options.listenPool !== undefined && !isPool(options.listenPool)) {
      throw new InvalidConfigError(`[${PKG}] listenPool must be a pg.Pool, got ${describeValue(options.listenPool)}`);
    }
    const pageSize = options.pageSize ?? DEFAULTS.pageSize;
    if (!Number.isSafeInteger(pageSize) || pageSize < 1 || pageSize > 10_000) {
      throw new InvalidConfigError(`[${PKG}] pageSize must be an integer from 1 to 10000, got ${describeValue(pageSize)}`);
    }
    if (options.preparedStatements !== undefined && typeof options.preparedStatements !== 'boolean') {
      throw new InvalidConfigError(`[${PKG}] preparedStatements must be a boolean, got ${describeValue(options.preparedStatements)}`);
    }
    this.#pool = options.pool;
    hearClientErrors(options.pool);
    if (options.listenPool !== undefined) hearClientErrors(options.listenPool);
    this.#pageSize = pageSize;
    this.#names = tableNames(
      options.schema ?? DEFAULTS.schema,
      options.leaseTable ?? DEFAULTS.leaseTable,
      options.leaderTable ?? DEFAULTS.leaderTable,
      options.migrationsTable ?? DEFAULTS.migrationsTable,
      options.rosterTable ?? DEFAULTS.rosterTable,
      options.memberTable ?? DEFAULTS.memberTable,
    );
    this.#sql = statements(this.#names);
    const { schema } = this.#names;
    this.#where = `${schema}.${this.#names.leaseTable}, ${schema}.${this.#names.leaderTable}, ${schema}.${this.#names.rosterTable} and ${schema}.${this.#names.memberTable}`;
    this.#sender = new StatementSender(options.pool, this.#where, options.preparedStatements !== false);
    this.#feed = new ChangeFeed(options.listenPool ?? options.pool, this.#names);
  }

  /** The schema version this release reads and writes. */
  static readonly schemaVersion = SCHEMA_VERSION;

  /**
   * The NOTIFY channel of the change feed (one per schema and lease table): every change but the handovers
   * that name their owner, which go to one of 256 owner channels (see "The change feed" in the README).
   */
  get channel(): string {
    return this.#names.channel;
  }

  /** The NOTIFY channel of the handovers to `owner` in `group`: one of the 256 owner channels of the lease table. */
  ownerChannel(group: string, owner: string): string {
    validateGroup(group, PKG);
    validateWorkerId(owner, PKG);
    return this.#names.ownerChannels[ownerBucket(group, owner)] as string;
  }

  /**
   * Creates the schema and tables, or brings them up to this release's version. Idempotent, and safe to
   * run from many workers at the same moment: migrations queue on a transaction-level advisory lock.
   * Throws a `StorageSchemaError` if the database was migrated by a newer release.
   */
  async migrate(): Promise<MigrationResult> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.#migrateOnce();
      } catch (error) {
        const cause = error instanceof Error && 'cause' in error ? error.cause : undefined;
        if (attempt < MAX_ATTEMPTS && isServerError(cause) && (DDL_RACE_CODES.has(cause.code) || isRetryable(cause))) continue;
        throw error;
      }
    }
  }

  async #migrateOnce(): Promise<MigrationResult> {
    const client = await this.#sender.connect('migrate');
    let failure: unknown;
    try {
      return await migrateOn(client, this.#names, this.#sql, this.#where);
    } catch (error) {
      failure = error;
      throw error;
    } finally {
      this.#sender.release(client, failure);
    }
  }

  async listLeases(group: string): Promise<LeaseListing> {
    validateGroup(group, PKG);
    const listing: LeaseListing = { leases: [], corrupt: [] };
    // Keyset pages in bytewise key order: one query per page, none repeated or skipped however many leases.
    // A row that cannot be decoded goes to `corrupt`; its key still moves the page on.
    let after = '';
    for (;;) {
      const rows = await this.#sender.read<LeaseRow>('listLeases', this.#sql.listPage, [group, after, this.#pageSize]);
      const page = listingOf(rows, (row) => decodeLease(group, row.lease_key, toNumber(row.version), row.state, PKG));
      listing.leases.push(...page.leases);
      listing.corrupt.push(...page.corrupt);
      const last = rows.at(-1);
      if (rows.length < this.#pageSize || !last) return listing;
      after = last.lease_key;
    }
  }

  async getLease(group: string, leaseKey: string): Promise<LeaseRecord | null> {
    validateGroup(group, PKG);
    validateLeaseKey(leaseKey, PKG);
    const [row] = await this.#sender.read<VersionRow>('getLease', this.#sql.getLease, [group, leaseKey]);
    return row ? decodeLease(group, leaseKey, toNumber(row.version), row.state, PKG) : null;
  }

  /**
   * The named leases of the group, in one statement whatever their number (at most
   * `limits.maxLeasesPerRead`): the live rows whose key is in the array of keys, each key sent once. A
   * row that cannot be decoded goes to `corrupt`, naming its key; the others are still read.
   */
  async getLeases(group: string, leaseKeys: readonly string[]): Promise<LeaseListing> {
    validateGroup(group, PKG);
    validateLeaseKeys(leaseKeys, PKG);
    const keys = [...new Set(leaseKeys)];
    if (keys.length === 0) return { leases: [], corrupt: [] };
    const rows = await this.#sender.read<LeaseRow>('getLeases', this.#sql.readLeases, [group, keys]);
    return listingOf(rows, (row) => decodeLease(group, row.lease_key, toNumber(row.version), row.state, PKG));
  }

  async createLease(lease: NewLease, options: CreateLeaseOptions = {}): Promise<WriteResult<LeaseRecord>> {
    const { group, leaseKey, state } = validateNewLease(lease, PKG);
    const recreate = options.recreate === true;
    const { epoch: _epoch, ...rest } = state;
    const outcome = await this.#sender.write<CreateLeaseRow>('createLease', this.#sql.createLease, [
      group,
      leaseKey,
      state.epoch,
      encodeLeaseState(state),
      JSON.stringify(rest).slice(1),
      recreate,
      this.#names.channel,
      ownerPayload(state.owner),
    ]);
    if ('unknown' in outcome) return result.unknown(outcome.unknown);
    const [row] = outcome.rows;
    if (!row) return result.unknown(outcomeUnknown('createLease', new Error('the statement returned no row')));
    if (row.applied_version !== null) {
      return result.applied({ group, leaseKey, version: Number(row.applied_version), ...state, epoch: Number(row.applied_epoch) });
    }
    try {
      if (row.current_live === true) return result.conflict(decodeLease(group, leaseKey, toNumber(row.current_version), row.current_state, PKG));
      // The row that refused the insert is a tombstone (the key was deleted and `recreate` was not asked
      // for), or was committed after this statement's snapshot: read it again, so that the conflict
      // carries the lease that is stored now, or none.
      return result.conflict(await this.getLease(group, leaseKey));
    } catch (error) {
      return result.unknown(asLeaseholdError('createLease', error));
    }
  }

  async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    validateLeaseUpdates(group, updates, PKG);
    if (updates.length === 0) return [];
    if (updates.length === 1) return [await this.#updateOne(group, updates[0] as LeaseUpdate)];
    // Sent in key order, so that two overlapping batches lock their rows in the same order and do not deadlock.
    const sorted = [...updates].sort((a, b) => (a.leaseKey < b.leaseKey ? -1 : a.leaseKey > b.leaseKey ? 1 : 0));
    const results = await this.#updateBatch(group, sorted);
    const byKey = new Map(sorted.map((update, i) => [update.leaseKey, results[i] as WriteResult<LeaseRecord>]));
    return updates.map((update) => byKey.get(update.leaseKey) as WriteResult<LeaseRecord>);
  }

  async #updateBatch(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    const encoded = updates.map((update) => encodeLeaseState(update.next));
    const outcome = await this.#sender.write<OutcomeRow>('updateLeases', this.#sql.updateLeases, batchValues(group, updates, encoded, this.#names));
    if ('unknown' in outcome) return updates.map(() => result.unknown(outcome.unknown));
    if (outcome.rows.length !== updates.length) {
      const error = outcomeUnknown('updateLeases', new Error(`${outcome.rows.length} result rows for ${updates.length} updates`));
      return updates.map(() => result.unknown(error));
    }
    const results: WriteResult<LeaseRecord>[] = [];
    const stale: number[] = [];
    updates.forEach((update, i) => {
      const row = outcome.rows[i] as OutcomeRow;
      if (row.applied_version !== null) {
        // Identity first: leaseStateOf never returns it, and a spread placed last is cloned far faster
        // than properties added after one (this runs once per lease of every renewal).
        results.push(result.applied({ group, leaseKey: update.leaseKey, version: Number(row.applied_version), ...leaseStateOf(update.next) }));
      } else if (!row.current_found) {
        results.push(result.conflict(null));
      } else if (toNumber(row.current_version) === update.expectedVersion) {
        // Matched in the snapshot but changed by a concurrent writer before the update could apply: the
        // current row is newer than the snapshot's, so it is read again below.
        stale.push(i);
        results.push(result.conflict(null));
      } else {
        results.push(this.#leaseConflict(group, update.leaseKey, row));
      }
    });
    if (stale.length > 0) await this.#rereadConflicts(group, updates, stale, results);
    return results;
  }

  async #updateOne(group: string, update: LeaseUpdate): Promise<WriteResult<LeaseRecord>> {
    const values = [group, update.leaseKey, update.expectedVersion, encodeLeaseState(update.next), update.next.epoch];
    const owner = update.notify === undefined ? null : ownerPayload(update.next.owner);
    const outcome = update.notify === undefined
      ? await this.#sender.write<{ applied_version: string }>('updateLeases', this.#sql.updateOneLease, values)
      : await this.#sender.write<{ applied_version: string }>('updateLeases', this.#sql.updateOneLeaseAndNotify, [...values, update.notify, changeChannel(this.#names, group, update, owner), owner]);
    if ('unknown' in outcome) return result.unknown(outcome.unknown);
    const [row] = outcome.rows;
    if (row) return result.applied({ group, leaseKey: update.leaseKey, version: Number(row.applied_version), ...leaseStateOf(update.next) });
    try {
      return result.conflict(await this.getLease(group, update.leaseKey));
    } catch (error) {
      // The write did not apply, but the record it lost to cannot be read: the caller must not act on it.
      return result.unknown(asLeaseholdError('updateLeases', error));
    }
  }

  async deleteLease(group: string, leaseKey: string, expectedVersion: number): Promise<DeleteResult> {
    validateGroup(group, PKG);
    validateLeaseKey(leaseKey, PKG);
    validateVersion(expectedVersion, PKG);
    const outcome = await this.#sender.write<OutcomeRow>('deleteLease', this.#sql.deleteLease, [group, leaseKey, expectedVersion]);
    if ('unknown' in outcome) return result.unknown(outcome.unknown);
    const [row] = outcome.rows;
    if (!row) return result.unknown(outcomeUnknown('deleteLease', new Error('the statement returned no row')));
    if (row.applied_version !== null) return { status: 'applied' };
    if (!row.current_found) return result.conflict(null);
    if (toNumber(row.current_version) !== expectedVersion) return this.#leaseConflict(group, leaseKey, row);
    try {
      return result.conflict(await this.getLease(group, leaseKey));
    } catch (error) {
      return result.unknown(asLeaseholdError('deleteLease', error));
    }
  }

  /**
   * Runs `fn` and the checkpoint of the batch in one transaction on this database, for exactly-once
   * effects: `await storage.transaction(ctx, async (client) => { await client.query(...) })` in
   * `processBatch`, on the storage the consumer's leases live in. The lease row is locked and checked
   * against this worker's tenure first (refused before `fn` runs if it moved on), and the checkpoint is
   * written before COMMIT: your writes and the checkpoint apply together or not at all. Throws a
   * `LeaseLostError` (everything rolled back) when the lease is no longer this worker's, a
   * `CheckpointBehindError` when the batch was committed already, `fn`'s own error (rolled back), or a
   * `StorageOutcomeUnknownError` when the answer to COMMIT was lost and the lease row did not show it
   * applied. `fn` must not COMMIT or ROLLBACK itself; the runtime does not checkpoint the batch again.
   * Resolves with what `fn` returned, or with `undefined` without running `fn` when it finds that an
   * earlier attempt of this checkpoint committed although its answer was lost.
   */
  async transaction<T>(context: TransactionContext, fn: (client: PoolClient) => Promise<T>, options: TransactionOptions = {}): Promise<T | undefined> {
    validateTransaction(context, fn, options);
    let value: T | undefined;
    const settings = { pool: this.#pool, lockLease: this.#sql.lockLease, updateLease: this.#sql.updateOneLease, where: this.#where };
    await context.checkpointWith(
      (current, next) =>
        checkpointInTransaction(settings, current, next, async (client) => {
          value = await fn(client);
        }),
      options.position,
    );
    return value;
  }

  /**
   * Calls `listener` when a lease of the group is created, released, rewound or handed over, through
   * LISTEN/NOTIFY. With `addressedTo` (at most 16 worker ids), of the handovers only those to these owners
   * (and those that left the lease free): the connection then LISTENs on their owner channels rather than
   * on all 256. The first subscription takes one connection from `listenPool` (or `pool`) and keeps it
   * until the last one closes; if that connection drops, it reconnects. Delivery is best effort: changes
   * made while reconnecting are missed.
   */
  async subscribe(group: string, listener: (change: LeaseChange) => void, options?: SubscribeOptions): Promise<ChangeSubscription> {
    validateGroup(group, PKG);
    validateSubscribeOptions(options, PKG);
    if (typeof listener !== 'function') {
      throw new InvalidConfigError(`[${PKG}] listener must be a function, got ${describeValue(listener)}`);
    }
    let remove: () => Promise<void>;
    try {
      remove = await this.#feed.add(group, listener, options?.addressedTo ?? []);
    } catch (error) {
      if (error instanceof Error && error.name === 'StorageUnavailableError') throw error;
      throw unavailable('subscribe', error);
    }
    const close = (): Promise<void> => remove();
    return { close, [Symbol.asyncDispose]: close };
  }

  async getRoster(group: string): Promise<Roster> {
    validateGroup(group, PKG);
    const rows = await this.#sender.read<MemberRow>('getRoster', this.#sql.getRoster, [group]);
    return rosterOfRows(group, rows);
  }

  /** The named members of the group in one `SELECT` of their rows, decoded as `getRoster` decodes them. */
  async getMembers(group: string, workerIds: readonly string[]): Promise<Roster> {
    validateGroup(group, PKG);
    validateWorkerIds(workerIds, PKG);
    const rows = await this.#sender.read<MemberRow>('getMembers', this.#sql.getMembers, [group, [...new Set(workerIds)]]);
    return rosterOfRows(group, rows);
  }

  /** The group's roster digest: the version of its reserved row in the member table (see `schema.ts`), 0 when it has none. */
  async getRosterDigest(group: string): Promise<number> {
    validateGroup(group, PKG);
    return readDigest(this.#digestIo, group);
  }

  /**
   * Adds one to the group's roster digest in one statement, creating it at 1, and keeps the worker ids it
   * names (for {@link getRosterMoves}) in the digest row's state (`roster-digest.ts`). Throws a
   * `StorageOutcomeUnknownError` when the statement may have applied but its answer was lost.
   */
  async advanceRosterDigest(group: string, workerIds: readonly string[] = []): Promise<number> {
    validateGroup(group, PKG);
    validateWorkerIds(workerIds, PKG);
    return advanceDigest(this.#digestIo, group, workerIds);
  }

  /** The group's roster digest with the names of the advances after `since`, in one statement (`roster-digest.ts`). */
  async getRosterMoves(group: string, since: number): Promise<RosterMoves> {
    validateGroup(group, PKG);
    validateDigest(since, PKG);
    return readMoves(this.#digestIo, group, since);
  }

  /** The digest's statements, sent as every other read and write of this storage is. */
  readonly #digestIo: DigestIo = {
    read: (operation, sql, values) => this.#sender.read(operation, sql, values),
    write: (operation, sql, values) => this.#sender.write(operation, sql, values),
    sql: () => this.#sql,
  };

  /**
   * Writes one member's row. Until a join found the group clear of the earlier release, a join marks the
   * group's row in the roster table of schema version 2 (an earlier release's layout), creating it for a
   * group that has none, so that the earlier release's workers stop, now or whenever they start, and is
   * refused with a `RecordFormatError` naming the members still alive there: the marker stops them only at
   * their next roster read, and until then they may hold leases that this worker, not seeing them in its
   * own roster, would take. Once clear, a join is one statement.
   */
  async putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    validateMemberWrite(group, workerId, expectedVersion, next, PKG);
    const state = memberStateOf(next);
    const encoded = encodeMemberState(state);
    let row: MemberOutcomeRow | undefined;
    if (expectedVersion === null) {
      const outcome = await this.#sender.write<MemberOutcomeRow>('putMember', this.#sql.joinMember, [group, workerId, encoded, EARLIER_ROSTER_MARKER, false]);
      if ('unknown' in outcome) return result.unknown(outcome.unknown);
      [row] = outcome.rows;
      if (row?.earlier_roster === true) {
        const joined = await this.#oneMarkingAtATime(group, async () => {
          // Another join of this client may have found the group clear meanwhile: then this is one statement.
          const again = await this.#sender.write<MemberOutcomeRow>('putMember', this.#sql.joinMember, [group, workerId, encoded, EARLIER_ROSTER_MARKER, false]);
          if ('unknown' in again) return again;
          if (again.rows[0]?.earlier_roster !== true) return { row: again.rows[0] };
          return this.#joinBesideEarlierRoster(group, workerId, encoded);
        });
        if ('unknown' in joined) return result.unknown(joined.unknown);
        row = joined.row;
      }
    } else {
      const outcome = await this.#sender.write<MemberOutcomeRow>('putMember', this.#sql.updateMember, [group, workerId, expectedVersion, encoded]);
      if ('unknown' in outcome) return result.unknown(outcome.unknown);
      [row] = outcome.rows;
    }
    if (!row) return result.unknown(outcomeUnknown('putMember', new Error('the statement returned no row')));
    // Identity first, then the state: the record is built as core's reference storage builds it.
    if (row.applied_version !== null) return result.applied({ group, workerId, version: Number(row.applied_version), ...state });
    return this.#memberConflict('putMember', group, workerId, row.current);
  }

  /**
   * Runs the joins of one group that found it not yet clear one after another in this client: the first
   * marks the earlier release's row and, finding nobody alive, notes the group clear, and the others then
   * join by the one statement, rather than each holding a connection while it waits for the row's lock (a
   * thousand workers joining a new group through one client would empty the pool).
   */
  async #oneMarkingAtATime<T>(group: string, join: () => Promise<T>): Promise<T> {
    const before = this.#markings.get(group) ?? Promise.resolve();
    const run = before.then(join, join);
    const settled = run.then(() => undefined, () => undefined);
    this.#markings.set(group, settled);
    try {
      return await run;
    } finally {
      if (this.#markings.get(group) === settled) this.#markings.delete(group);
    }
  }

  /**
   * One group, one roster, with an earlier release whose workers keep the group's members in one row of
   * the roster table (schema version 2): a join of a group not known clear runs in one transaction that
   * locks that row (creating it, holding the marker alone, for a group the earlier
   * release never ran; an earlier release's join of the group, an upsert of the row, waits for it), marks
   * it with a member of a format above the earlier core's, and then either joins, when no member there is
   * alive, or refuses with a `RecordFormatError` naming those that are.
   *
   * A refusal commits the marker rather than rolling it back, and the join is never sent: the marker is
   * what stops the earlier release's workers (each one stops at its next roster read, and one that stops
   * after releasing its leases writes its member dead), so that the refused worker, started again, can
   * join; rolled back, the marker would leave them running, and this join refused for as long as they
   * run. The marker is written in the same transaction as the check, under the row's lock, rather than in
   * a statement of its own, so that both decide on one version of the row: an earlier worker joining
   * meanwhile either committed before the lock was taken, and is named by the check, or commits after the
   * marker, and stops at its next roster read; and a join that applies commits with its marker. A refusal
   * whose COMMIT answer was lost is `unknown` (the marker may be missing): the retried join marks again.
   */
  async #joinBesideEarlierRoster(group: string, workerId: string, encoded: string): Promise<{ row: MemberOutcomeRow | undefined } | { unknown: LeaseholdError }> {
    const rules = {
      operation: 'putMember',
      lostCommit: (error: unknown): EarlierJoin => ({ lost: error }),
      thrown: (error: unknown): unknown => error,
    };
    for (let attempt = 1; ; attempt++) {
      const client = await this.#sender.connect('putMember');
      let failure: unknown;
      let end: EarlierJoin;
      try {
        end = await runTransaction({ client }, rules, async (tx): Promise<TransactionEnd<EarlierJoin>> => {
          const marker = earlierRosterMarker(`${this.#names.schema}.${this.#names.memberTable}`);
          let { rows } = await tx.query<{ members: unknown }>(this.#sql.lockEarlierRoster, [group]);
          if (rows[0] === undefined) {
            await tx.query(this.#sql.createEarlierRoster, [group, EARLIER_ROSTER_MARKER, marker]);
            ({ rows } = await tx.query<{ members: unknown }>(this.#sql.lockEarlierRoster, [group]));
          }
          const earlier = rows[0];
          if (earlier !== undefined) {
            await tx.query(this.#sql.markEarlierRoster, [group, EARLIER_ROSTER_MARKER, marker]);
            const alive = aliveInEarlierRoster(group, earlier.members);
            if (alive.length > 0) return { commit: { alive } };
            await tx.query(this.#sql.clearEarlierRoster, [group, EARLIER_ROSTER_MARKER]);
          }
          const joined = await tx.query<MemberOutcomeRow>(this.#sql.joinMember, [group, workerId, encoded, EARLIER_ROSTER_MARKER, true]);
          return { commit: { row: joined.rows[0] } };
        });
      } catch (error) {
        failure = error;
        if (attempt < MAX_ATTEMPTS && isRetryable(error)) continue;
        const schema = schemaError(error, this.#where);
        if (schema) throw schema;
        // A failure before COMMIT rolled everything back, but the join statement may have been sent: as
        // for every other member write, the caller learns the outcome by reading.
        return { unknown: outcomeUnknown('putMember', error) };
      } finally {
        this.#sender.release(client, failure);
      }
      if ('lost' in end) return { unknown: outcomeUnknown('putMember', end.lost) };
      if ('alive' in end) throw membersStillInEarlierRoster(group, end.alive, `${this.#names.schema}.${this.#names.rosterTable}`);
      return end;
    }
  }

  async removeMember(group: string, workerId: string, expectedVersion: number): Promise<DeleteResult<MemberRecord>> {
    validateGroup(group, PKG);
    validateWorkerId(workerId, PKG);
    validateVersion(expectedVersion, PKG);
    const outcome = await this.#sender.write<MemberOutcomeRow>('removeMember', this.#sql.removeMember, [group, workerId, expectedVersion]);
    if ('unknown' in outcome) return result.unknown(outcome.unknown);
    const [row] = outcome.rows;
    if (!row) return result.unknown(outcomeUnknown('removeMember', new Error('the statement returned no row')));
    if (row.applied_version !== null) return { status: 'applied' };
    return this.#memberConflict('removeMember', group, workerId, row.current);
  }

  /**
   * The conflict of a refused member write: the member the statement read with a locking read, or, when
   * that read found none (the member's row may have been inserted after the statement's snapshot, out of
   * its sight), the member read again. A member that cannot be read back makes the outcome unknown.
   */
  async #memberConflict(operation: string, group: string, workerId: string, current: unknown): Promise<WriteResult<MemberRecord>> {
    try {
      if (current !== null && current !== undefined) return result.conflict(decodeStoredMember(group, workerId, current));
      const [row] = await this.#sender.read<{ member: unknown }>(operation, this.#sql.getMember, [group, workerId]);
      const member = row?.member;
      return result.conflict(member === null || member === undefined ? null : decodeStoredMember(group, workerId, member));
    } catch (error) {
      return result.unknown(asLeaseholdError(operation, error));
    }
  }

  async getLeader(group: string): Promise<LeaderRecord | null> {
    validateGroup(group, PKG);
    const [row] = await this.#sender.read<VersionRow>('getLeader', this.#sql.getLeader, [group]);
    return row ? decodeLeader(group, toNumber(row.version), row.state, PKG) : null;
  }

  async createLeader(leader: NewLeader): Promise<WriteResult<LeaderRecord>> {
    const { group, state } = validateNewLeader(leader, PKG);
    const outcome = await this.#sender.write<OutcomeRow>('createLeader', this.#sql.createLeader, [group, encodeLeaderState(state)]);
    return this.#leaderOutcome('createLeader', group, state, outcome, null);
  }

  async updateLeader(group: string, expectedVersion: number, next: LeaderState): Promise<WriteResult<LeaderRecord>> {
    validateGroup(group, PKG);
    validateVersion(expectedVersion, PKG);
    validateLeaderState(next, PKG);
    const state = leaderStateOf(next);
    const outcome = await this.#sender.write<OutcomeRow>('updateLeader', this.#sql.updateLeader, [group, expectedVersion, encodeLeaderState(state)]);
    return this.#leaderOutcome('updateLeader', group, state, outcome, expectedVersion);
  }

  /** Stops the change feed and gives its connection back. The pool stays open: it is the caller's. */
  async close(): Promise<void> {
    await this.#feed.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  async #leaderOutcome(
    operation: string,
    group: string,
    state: LeaderState,
    outcome: WriteOutcome<OutcomeRow>,
    expectedVersion: number | null,
  ): Promise<WriteResult<LeaderRecord>> {
    if ('unknown' in outcome) return result.unknown(outcome.unknown);
    const [row] = outcome.rows;
    if (!row) return result.unknown(outcomeUnknown(operation, new Error('the statement returned no row')));
    if (row.applied_version !== null) return result.applied({ group, version: Number(row.applied_version), ...state });
    try {
      const snapshotCurrent = row.current_found && (expectedVersion === null || toNumber(row.current_version) !== expectedVersion);
      if (snapshotCurrent) return result.conflict(decodeLeader(group, toNumber(row.current_version), row.current_state, PKG));
      // The record that refused the write was committed after this statement's snapshot: read it again.
      return result.conflict(await this.getLeader(group));
    } catch (error) {
      return result.unknown(asLeaseholdError(operation, error));
    }
  }

  #leaseConflict(group: string, leaseKey: string, row: OutcomeRow): WriteResult<LeaseRecord> {
    try {
      return result.conflict(decodeLease(group, leaseKey, toNumber(row.current_version), row.current_state, PKG));
    } catch (error) {
      // The write did not apply, but the record it lost to cannot be read: the caller must not act on it.
      return result.unknown(asLeaseholdError('updateLeases', error));
    }
  }

  async #rereadConflicts(group: string, updates: readonly LeaseUpdate[], stale: readonly number[], results: WriteResult<LeaseRecord>[]): Promise<void> {
    const keys = stale.map((i) => (updates[i] as LeaseUpdate).leaseKey);
    let rows: LeaseRow[];
    try {
      rows = await this.#sender.read<LeaseRow>('updateLeases', this.#sql.readLeases, [group, keys]);
    } catch (error) {
      const unknown = asLeaseholdError('updateLeases', error);
      for (const i of stale) results[i] = result.unknown(unknown);
      return;
    }
    const byKey = new Map(rows.map((row) => [row.lease_key, row]));
    for (const i of stale) {
      const leaseKey = (updates[i] as LeaseUpdate).leaseKey;
      const row = byKey.get(leaseKey);
      results[i] = row
        ? this.#leaseConflict(group, leaseKey, { applied_version: null, current_found: true, current_version: row.version, current_state: row.state })
        : result.conflict(null);
    }
  }
}

function isPool(value: unknown): value is Pool {
  return typeof value === 'object' && value !== null && typeof (value as { connect?: unknown }).connect === 'function';
}

function asLeaseholdError(operation: string, error: unknown): LeaseholdError {
  if (error instanceof CorruptRecordError || error instanceof StorageUnavailableError || error instanceof StorageSchemaError) return error;
  return outcomeUnknown(operation, error);
}

