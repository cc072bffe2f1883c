/**
 * Identifiers, the schema and its migrations, and every SQL statement the adapter sends. Names the user
 * configures are validated as plain identifiers and then always quoted; values always travel as
 * parameters. Nothing the user configures is spliced into SQL unquoted.
 */
import { createHash } from 'node:crypto';
import { InvalidConfigError } from '@leasehold/core';
import { describeValue } from '@leasehold/core/adapter';
import { OWNER_BUCKETS } from './owner-buckets.js';

export const PKG = 'storage-postgres';

/** The version of the tables this release reads and writes; `migrate()` brings a database up to it. */
export const SCHEMA_VERSION = 3;

/** PostgreSQL truncates identifiers longer than NAMEDATALEN - 1 bytes; refusing them avoids silent aliasing. */
const MAX_IDENTIFIER_BYTES = 63;
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Throws an `InvalidConfigError` naming the value unless it is a plain SQL identifier of at most 63 bytes. */
export function validateIdentifier(what: string, value: unknown): string {
  if (typeof value !== 'string' || !IDENTIFIER.test(value) || Buffer.byteLength(value) > MAX_IDENTIFIER_BYTES) {
    throw new InvalidConfigError(
      `[${PKG}] ${what} ${describeValue(value)} is not a valid identifier (letters, digits and _, not starting with a digit, at most ${MAX_IDENTIFIER_BYTES} bytes)`,
    );
  }
  return value;
}

/** Quotes an identifier the way PostgreSQL's quote_ident does, so that even an unvalidated name stays one name. */
export function quoteIdentifier(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/** The quoted, validated names of one installation's tables. */
export interface TableNames {
  readonly schema: string;
  readonly leaseTable: string;
  readonly leaderTable: string;
  readonly migrationsTable: string;
  /** The roster table of schema version 2 (one row per group), kept for an earlier release still running. */
  readonly rosterTable: string;
  /** The member table: one row per group and worker id. */
  readonly memberTable: string;
  /**
   * The NOTIFY channel of the lease table's change feed (one per schema and table): every change but a
   * handover that names its owner.
   */
  readonly channel: string;
  /** The name of each owner channel, by bucket (see owner-buckets.ts): the handovers that name their owner. */
  readonly ownerChannels: readonly string[];
  /** What each owner channel's name is before its bucket's decimal digits. */
  readonly ownerChannelPrefix: string;
}

/**
 * Between an owner channel's base and its bucket: a character no validated identifier has, so that no
 * table channel (`leasehold.<schema>.<table>`, or `leasehold.<hash>`) is ever some table's owner channel,
 * as `<table channel>_o1` would be for a table named `<table>_o1` in the same schema.
 */
const OWNER_CHANNEL_SEPARATOR = ':o';

/** Builds the names of one installation; throws `InvalidConfigError` for a bad one. */
export function tableNames(
  schema: unknown,
  leaseTable: unknown,
  leaderTable: unknown,
  migrationsTable: unknown,
  rosterTable: unknown,
  memberTable: unknown,
): TableNames {
  const names = {
    schema: validateIdentifier('schema name', schema),
    leaseTable: validateIdentifier('lease table name', leaseTable),
    leaderTable: validateIdentifier('leader table name', leaderTable),
    migrationsTable: validateIdentifier('migrations table name', migrationsTable),
    rosterTable: validateIdentifier('roster table name', rosterTable),
    memberTable: validateIdentifier('member table name', memberTable),
  };
  const tables = [names.leaseTable, names.leaderTable, names.rosterTable, names.memberTable, names.migrationsTable];
  if (new Set(tables).size !== tables.length) {
    throw new InvalidConfigError(`[${PKG}] lease, leader, roster, member and migrations tables must have different names, got ${describeValue(tables)}`);
  }
  const readable = `leasehold.${names.schema}.${names.leaseTable}`;
  // A channel name is an identifier too (63 bytes at most); a long pair of names is hashed instead (50
  // bytes). The names are ASCII (validated above): a byte is a character.
  const hashed = `leasehold.${createHash('sha256').update(`${names.schema}.${names.leaseTable}`).digest('hex').slice(0, 40)}`;
  const channel = readable.length <= MAX_IDENTIFIER_BYTES ? readable : hashed;
  // An owner channel adds up to 5 bytes (`:o255`) to its base: the table channel, or, when that leaves no
  // room for them, the hashed name (55 bytes with them).
  const longest = `${OWNER_CHANNEL_SEPARATOR}${OWNER_BUCKETS - 1}`;
  const base = channel.length + longest.length <= MAX_IDENTIFIER_BYTES ? channel : hashed;
  const ownerChannelPrefix = `${base}${OWNER_CHANNEL_SEPARATOR}`;
  const ownerChannels = Array.from({ length: OWNER_BUCKETS }, (_, bucket) => `${ownerChannelPrefix}${bucket}`);
  return { ...names, channel, ownerChannels, ownerChannelPrefix };
}

/**
 * One simple-protocol query that LISTENs on `listen` and stops listening on `unlisten`, every name quoted:
 * its statements run in one implicit transaction, so they all take effect or none.
 */
export function listenStatements(listen: Iterable<string>, unlisten: Iterable<string> = []): string {
  return [...[...listen].map((channel) => `LISTEN ${quoteIdentifier(channel)}`), ...[...unlisten].map((channel) => `UNLISTEN ${quoteIdentifier(channel)}`)].join('; ');
}

/** Stops listening on every channel, so that the feed's connection goes back to the pool clean. */
export const UNLISTEN_ALL = 'UNLISTEN *';

/** The SQL of every statement, built once per storage from quoted names. */
export interface Statements {
  readonly migrate: (fromVersion: number) => string[];
  readonly readVersion: string;
  readonly lockMigrations: string;
  readonly recordVersion: string;
  readonly listPage: string;
  readonly getLease: string;
  readonly lockLease: string;
  readonly readLeases: string;
  readonly createLease: string;
  readonly updateLeases: string;
  readonly updateOneLease: string;
  readonly updateOneLeaseAndNotify: string;
  readonly deleteLease: string;
  readonly getLeader: string;
  readonly createLeader: string;
  readonly updateLeader: string;
  readonly leasesToUpgrade: string;
  readonly upgradeLeases: string;
  readonly getRoster: string;
  readonly getMember: string;
  readonly getMembers: string;
  readonly getRosterDigest: string;
  readonly advanceRosterDigest: string;
  readonly advanceRosterDigestAfresh: string;
  readonly getRosterMoves: string;
  readonly joinMember: string;
  readonly updateMember: string;
  readonly removeMember: string;
  readonly lockEarlierRoster: string;
  readonly createEarlierRoster: string;
  readonly clearEarlierRoster: string;
  readonly markEarlierRoster: string;
}

/**
 * The SQL of a change's NOTIFY payload, as JSON text: `{"group", "leaseKey", "kind", "owner"}`, where
 * `owner` is the JSON text of the owner the write stores (see `ownerPayload` in rows.ts), or SQL NULL to
 * leave the owner out. Parsers of earlier releases read the first three fields and ignore the owner.
 */
function changePayload(group: string, leaseKey: string, kind: string, owner: string): string {
  const base = `'group', ${group}, 'leaseKey', ${leaseKey}, 'kind', ${kind}`;
  return `CASE WHEN ${owner} IS NULL THEN json_build_object(${base}) ELSE json_build_object(${base}, 'owner', ${owner}::json) END::text`;
}

/** Builds the statements of one installation. */
export function statements(names: TableNames): Statements {
  const schema = quoteIdentifier(names.schema);
  const leases = `${schema}.${quoteIdentifier(names.leaseTable)}`;
  const leaders = `${schema}.${quoteIdentifier(names.leaderTable)}`;
  const migrations = `${schema}.${quoteIdentifier(names.migrationsTable)}`;
  const leasesPk = quoteIdentifier(`${names.leaseTable}_pkey`.slice(0, MAX_IDENTIFIER_BYTES));
  const leadersPk = quoteIdentifier(`${names.leaderTable}_pkey`.slice(0, MAX_IDENTIFIER_BYTES));
  const rosters = `${schema}.${quoteIdentifier(names.rosterTable)}`;
  const rostersPk = quoteIdentifier(`${names.rosterTable}_pkey`.slice(0, MAX_IDENTIFIER_BYTES));
  const rostersMembers = quoteIdentifier(`${names.rosterTable}_members_check`.slice(0, MAX_IDENTIFIER_BYTES));
  const members = `${schema}.${quoteIdentifier(names.memberTable)}`;
  const membersPk = quoteIdentifier(`${names.memberTable}_pkey`.slice(0, MAX_IDENTIFIER_BYTES));

  // Each step brings the tables from version i to i + 1; a later release appends steps and never edits one.
  const steps: string[][] = [
    [
      // A deleted lease stays as a tombstone (live = false) that keeps its version and highest epoch, so that
      // neither repeats when the key is created again. COLLATE "C" makes key order bytewise, for paging.
      // Every renew rewrites the row: free space on each page (fillfactor) lets PostgreSQL update in place
      // of the page (HOT), without touching the index.
      `CREATE TABLE IF NOT EXISTS ${leases} (
        group_name text COLLATE "C" NOT NULL,
        lease_key text COLLATE "C" NOT NULL,
        version bigint NOT NULL CHECK (version >= 1),
        live boolean NOT NULL,
        high_epoch bigint NOT NULL CHECK (high_epoch >= 0),
        state text,
        CONSTRAINT ${leasesPk} PRIMARY KEY (group_name, lease_key)
      ) WITH (fillfactor = 70)`,
      `CREATE TABLE IF NOT EXISTS ${leaders} (
        group_name text COLLATE "C" NOT NULL,
        version bigint NOT NULL CHECK (version >= 1),
        state text,
        CONSTRAINT ${leadersPk} PRIMARY KEY (group_name)
      ) WITH (fillfactor = 70)`,
    ],
    [
      // Version 2's layout, kept for an earlier release still running (version 3 gives each member a row of
      // its own; this release only locks and marks this table on a join, see markEarlierRoster).
      // One row per group holds its whole roster, so that reading it is one row whatever the number of
      // members. `members` maps each worker id to {"v": version, "s": state}, the state being core's JSON
      // document kept as a JSON string: jsonb cannot hold the NUL characters and lone surrogates a state may
      // carry, while their escaped text is an ordinary string. `high_version` is the greatest version any
      // member of the group ever had; every applied write goes above it, and the row is never deleted (an
      // empty roster keeps its counter), so that a worker id that leaves and joins again never repeats a
      // version. Every heartbeat rewrites the row: free space on its page lets PostgreSQL update it in place
      // of the page (HOT), without touching the index.
      `CREATE TABLE IF NOT EXISTS ${rosters} (
        group_name text COLLATE "C" NOT NULL,
        high_version bigint NOT NULL CHECK (high_version >= 1),
        members jsonb NOT NULL CONSTRAINT ${rostersMembers} CHECK (jsonb_typeof(members) = 'object'),
        CONSTRAINT ${rostersPk} PRIMARY KEY (group_name)
      ) WITH (fillfactor = 50)`,
      // A roster of 100 members is about 25 KB of JSON, 3 KB compressed: kept compressed in the row (MAIN)
      // rather than moved to the TOAST table (EXTENDED, the default, moves it there as soon as it passes
      // 2 KB), every heartbeat writes one heap tuple instead of a heap tuple plus TOAST rows and their
      // index entries, several times faster. A roster too large for a page still goes to TOAST.
      `ALTER TABLE ${rosters} ALTER COLUMN members SET STORAGE MAIN`,
    ],
    [
      // One row per member, so that a heartbeat writes its own member's small row and nothing else: with the
      // whole roster in one row (version 2), every heartbeat rewrote every member (22 KB at 100 members) and
      // the heartbeats of a group queued on that row's lock. `state` is core's JSON document as text, as in
      // the lease table. A removed member stays as a tombstone (`removed`, its state dropped) that keeps its
      // version, so that the worker id joining again goes above every version it ever had. The roster table
      // of version 2 stays: a worker of the earlier release may still be running against it, and a join
      // marks it (see PostgresStorage.putMember). Every heartbeat rewrites its row: free space on each page
      // (fillfactor) lets PostgreSQL update it in place of the page (HOT), without touching the index. Each
      // group's roster digest is kept in this table too, in a reserved tombstone row (see getRosterDigest
      // below), which needed no step of its own.
      `CREATE TABLE IF NOT EXISTS ${members} (
        group_name text COLLATE "C" NOT NULL,
        worker_id text COLLATE "C" NOT NULL,
        version bigint NOT NULL CHECK (version >= 1),
        removed boolean NOT NULL,
        state text,
        CONSTRAINT ${membersPk} PRIMARY KEY (group_name, worker_id)
      ) WITH (fillfactor = 70)`,
    ],
  ];

  return {
    migrate: (fromVersion) => steps.slice(fromVersion).flat(),
    // Concurrent CREATE ... IF NOT EXISTS can still fail on the catalog's unique index, so migrations queue
    // on a transaction-level advisory lock (released at COMMIT: no session state is left behind).
    lockMigrations: `SELECT pg_advisory_xact_lock(hashtext('leasehold:migrate'))`,
    readVersion: `SELECT version FROM ${migrations} WHERE table_name = $1`,
    recordVersion: `INSERT INTO ${migrations} (table_name, version) VALUES ($1, $2)
      ON CONFLICT (table_name) DO UPDATE SET version = EXCLUDED.version, migrated_at = now()`,

    listPage: `SELECT lease_key, version, state FROM ${leases}
      WHERE group_name = $1 AND live AND lease_key > $2 ORDER BY lease_key LIMIT $3`,
    getLease: `SELECT version, state FROM ${leases} WHERE group_name = $1 AND lease_key = $2 AND live`,
    // The fencing condition of a transactional checkpoint: the lease row, locked until the transaction ends,
    // so that no take, handoff or release can move it between the check and the checkpoint.
    lockLease: `SELECT version, state FROM ${leases} WHERE group_name = $1 AND lease_key = $2 AND live FOR UPDATE`,
    // The live leases of the group among keys $2 (a text[] of distinct keys): `getLeases`, and the re-read of
    // a batch's conflicts. One statement, however many keys; tombstones (live = false) are left out as by getLease.
    readLeases: `SELECT lease_key, version, state FROM ${leases} WHERE group_name = $1 AND lease_key = ANY($2::text[]) AND live`,

    // Inserts, or, when the caller asks to recreate ($6), revives a tombstone with a greater version and an
    // epoch no lower than the key ever had. The revived state is the caller's JSON with the epoch put first:
    // $5 is that JSON without its epoch and without its opening brace. A live row, or a tombstone without
    // $6, is left alone; a live row is read back as the conflict's current row. A lease created is published
    // on channel $7 as `created`, naming owner $8 (delivered at commit, so only a create that applied is ever published).
    createLease: `WITH created AS (
        INSERT INTO ${leases} AS t (group_name, lease_key, version, live, high_epoch, state)
        VALUES ($1, $2, 1, true, $3, $4)
        ON CONFLICT (group_name, lease_key) DO UPDATE
          SET version = t.version + 1,
              live = true,
              high_epoch = GREATEST(t.high_epoch, EXCLUDED.high_epoch),
              state = '{"epoch":' || GREATEST(t.high_epoch, EXCLUDED.high_epoch)::text || ',' || $5::text
          WHERE NOT t.live AND $6::boolean
        RETURNING t.version, t.high_epoch
      )
      SELECT created.version AS applied_version, created.high_epoch AS applied_epoch,
             current.version AS current_version, current.state AS current_state, current.live AS current_live,
             CASE WHEN created.version IS NOT NULL
               THEN pg_notify($7, ${changePayload('$1::text', '$2::text', `'created'`, '$8::text')})
             END AS notified
      FROM (SELECT 1) AS one
      LEFT JOIN created ON true
      LEFT JOIN ${leases} AS current
        ON created.version IS NULL AND current.group_name = $1 AND current.lease_key = $2`,

    // The whole batch in one statement: one conditional UPDATE over the input rows, one result row per input row
    // in input order, the current row of each conflict, and pg_notify for each applied update that asks
    // for it (delivered at commit, so only writes that applied are ever published). A change is published
    // on the table channel $7, or, a handover that names its owner, on the owner channel of its bucket:
    // prefix $10 and the bucket the adapter computed (owner-buckets.ts), never a hash of PostgreSQL's own.
    //
    // The columns travel as text, not as PostgreSQL arrays, which the driver escapes element by element in
    // JavaScript: keys, kinds, the owners the changes name (each as JSON text, or null to leave it out) and
    // their buckets (null for the table channel) as JSON arrays, numbers joined by commas, and the states
    // (JSON documents already) joined by U+001E, a control character that JSON never contains unescaped.
    updateLeases: `WITH input AS (
        SELECT u.lease_key, u.expected, u.state, u.epoch, u.notify, u.owner, u.bucket, u.ord
        FROM ROWS FROM (
          json_array_elements_text($2::json),
          unnest(string_to_array($3::text, ',')::bigint[]),
          unnest(string_to_array($4::text, E'\\x1e')),
          unnest(string_to_array($5::text, ',')::bigint[]),
          json_array_elements_text($6::json),
          json_array_elements_text($8::json),
          json_array_elements_text($9::json)
      ) WITH ORDINALITY AS u(lease_key, expected, state, epoch, notify, owner, bucket, ord)
      ),
      updated AS (
        UPDATE ${leases} AS t
        SET version = t.version + 1, state = input.state, high_epoch = GREATEST(t.high_epoch, input.epoch)
        FROM input
        WHERE t.group_name = $1 AND t.lease_key = input.lease_key AND t.live AND t.version = input.expected
        RETURNING t.lease_key, t.version
      )
      SELECT updated.version AS applied_version,
             current.lease_key IS NOT NULL AS current_found, current.version AS current_version, current.state AS current_state,
             CASE WHEN updated.version IS NOT NULL AND input.notify IS NOT NULL
               THEN pg_notify(CASE WHEN input.bucket IS NULL THEN $7::text ELSE $10::text || input.bucket END,
                              ${changePayload('$1::text', 'input.lease_key', 'input.notify', 'input.owner')})
             END AS notified
      FROM input
      LEFT JOIN updated ON updated.lease_key = input.lease_key
      LEFT JOIN ${leases} AS current
        ON updated.version IS NULL AND current.group_name = $1 AND current.lease_key = input.lease_key AND current.live
      ORDER BY input.ord`,

    // The same write for one lease as a plain UPDATE, the common renew of a worker holding one lease: as
    // cheap as a hand-written statement. A conflict is read afterwards by a second statement. Without a
    // change to publish (a renew or a checkpoint), the statement has no pg_notify to parse and plan; with
    // one, $7 is the channel the adapter chose for it, as the batch chooses (the table's or an owner's).
    updateOneLease: `UPDATE ${leases}
      SET version = version + 1, state = $4, high_epoch = GREATEST(high_epoch, $5::bigint)
      WHERE group_name = $1 AND lease_key = $2 AND live AND version = $3
      RETURNING version AS applied_version`,
    updateOneLeaseAndNotify: `UPDATE ${leases}
      SET version = version + 1, state = $4, high_epoch = GREATEST(high_epoch, $5::bigint)
      WHERE group_name = $1 AND lease_key = $2 AND live AND version = $3
      RETURNING version AS applied_version,
        pg_notify($7, ${changePayload('$1::text', '$2::text', '$6::text', '$8::text')}) AS notified`,

    // A delete leaves a tombstone: the row keeps its version and highest epoch, and loses its state.
    deleteLease: `WITH deleted AS (
        UPDATE ${leases} AS t SET live = false, state = NULL
        WHERE t.group_name = $1 AND t.lease_key = $2 AND t.live AND t.version = $3
        RETURNING t.version
      )
      SELECT deleted.version AS applied_version,
             current.lease_key IS NOT NULL AS current_found, current.version AS current_version, current.state AS current_state
      FROM (SELECT 1) AS one
      LEFT JOIN deleted ON true
      LEFT JOIN ${leases} AS current
        ON deleted.version IS NULL AND current.group_name = $1 AND current.lease_key = $2 AND current.live`,

    getLeader: `SELECT version, state FROM ${leaders} WHERE group_name = $1`,
    createLeader: `WITH created AS (
        INSERT INTO ${leaders} (group_name, version, state) VALUES ($1, 1, $2)
        ON CONFLICT (group_name) DO NOTHING
        RETURNING version
      )
      SELECT created.version AS applied_version,
             current.group_name IS NOT NULL AS current_found, current.version AS current_version, current.state AS current_state
      FROM (SELECT 1) AS one
      LEFT JOIN created ON true
      LEFT JOIN ${leaders} AS current ON created.version IS NULL AND current.group_name = $1`,
    updateLeader: `WITH updated AS (
        UPDATE ${leaders} AS t SET version = t.version + 1, state = $3
        WHERE t.group_name = $1 AND t.version = $2
        RETURNING t.version
      )
      SELECT updated.version AS applied_version,
             current.group_name IS NOT NULL AS current_found, current.version AS current_version, current.state AS current_state
      FROM (SELECT 1) AS one
      LEFT JOIN updated ON true
      LEFT JOIN ${leaders} AS current ON updated.version IS NULL AND current.group_name = $1`,

    // Leases written before the roster named a pending owner and no incarnation; migrate() rewrites them
    // (see upgradeLeases in migrate.ts), moving each version as every writer does.
    leasesToUpgrade: `SELECT group_name, lease_key, version, state FROM ${leases}
      WHERE live AND state IS NOT NULL AND (state LIKE '%"pendingOwner":%' OR state NOT LIKE '%"incarnation":%')`,
    upgradeLeases: `UPDATE ${leases} AS t SET version = t.version + 1, state = u.state
      FROM ROWS FROM (json_array_elements_text($1::json), json_array_elements_text($2::json),
                      unnest(string_to_array($3::text, ',')::bigint[]), json_array_elements_text($4::json)) AS u(group_name, lease_key, version, state)
      WHERE t.group_name = u.group_name AND t.lease_key = u.lease_key AND t.live AND t.version = u.version`,

    // The roster: one row per member. Reading it is one statement, consistent as of its snapshot (MVCC),
    // whatever the number of members; tombstones are skipped.
    getRoster: `SELECT worker_id, version, state FROM ${members} WHERE group_name = $1 AND NOT removed ORDER BY worker_id`,
    getMember: `SELECT json_build_object('v', version, 's', state) AS member FROM ${members}
      WHERE group_name = $1 AND worker_id = $2 AND NOT removed`,
    // A watcher's few members: primary-key probes of the named rows, tombstones skipped, as getRoster reads them.
    getMembers: `SELECT worker_id, version, state FROM ${members}
      WHERE group_name = $1 AND worker_id = ANY($2::text[]) AND NOT removed ORDER BY worker_id`,

    // The group's roster digest lives in the member table, in a row of its own that no member can be: its
    // worker id is the empty string, which is never a valid worker id, and it is a tombstone (removed, no
    // state), which every member read skips, so that neither getRoster nor a join, a heartbeat or a removal
    // ever sees it. Its version is the digest (a group without the row has digest 0), and it needs no
    // migration: the table of schema version 3 holds it as it is, and a worker of an earlier release of
    // version 3 skips it as it skips every tombstone. An advance is one upsert: it creates the row at 1 or
    // adds one under the row's lock, so that no advance is lost to another.
    getRosterDigest: `SELECT version FROM ${members} WHERE group_name = $1 AND worker_id = ''`,
    // The reserved row's state, which no member read sees, keeps the worker ids each of the digest's last
    // advances named (getRosterMoves): a JSON object from the digest value an advance wrote (as text) to
    // its names, a JSON array ($2). Each advance adds its own and keeps only the last $3 (the advances of
    // an earlier release, which did not name, leave none to keep). One statement under the row's lock, as
    // before: an advance never loses its names to another. A state that is not such an object fails the
    // cast (22P02): the adapter then advances afresh, keeping its own names only.
    advanceRosterDigest: `INSERT INTO ${members} AS t (group_name, worker_id, version, removed, state)
      VALUES ($1, '', 1, true, jsonb_build_object('1', $2::jsonb)::text)
      ON CONFLICT (group_name, worker_id) DO UPDATE SET version = t.version + 1,
        state = (SELECT COALESCE(jsonb_object_agg(kept.key, kept.value), '{}'::jsonb) || jsonb_build_object((t.version + 1)::text, $2::jsonb)
          FROM jsonb_each(COALESCE(t.state, '{}')::jsonb) AS kept WHERE kept.key::bigint > t.version + 1 - $3::bigint)::text
      RETURNING t.version`,
    advanceRosterDigestAfresh: `INSERT INTO ${members} AS t (group_name, worker_id, version, removed, state)
      VALUES ($1, '', 1, true, jsonb_build_object('1', $2::jsonb)::text)
      ON CONFLICT (group_name, worker_id) DO UPDATE SET version = t.version + 1, state = jsonb_build_object((t.version + 1)::text, $2::jsonb)::text
      RETURNING t.version`,
    // The digest and, when it moved since $2 by at most $3 advances, each advance's names (null where none
    // is kept), from one snapshot of the row.
    getRosterMoves: `SELECT version, CASE WHEN version > $2::bigint AND version - $2::bigint <= $3::bigint THEN (
        SELECT json_agg(json_build_array(d, kept.moves -> d::text) ORDER BY d)
        FROM (SELECT COALESCE(state, '{}')::jsonb AS moves) AS kept, generate_series($2::bigint + 1, version) AS d
      ) END AS moves
      FROM ${members} WHERE group_name = $1 AND worker_id = ''`,

    // A member write is one statement on its member's row, conditional on that row's version alone: writes
    // of different members touch different rows and never wait for each other. Concurrent writes of one
    // member queue on its row's lock, and each is decided against the row as the previous one left it
    // (READ COMMITTED re-checks the condition on the newest row). A refused write reads the member in the
    // same statement with a locking read, which follows the row to its newest version rather than the
    // statement's snapshot: the conflict carries the member as stored when the write was refused. A row
    // inserted after the statement's snapshot is invisible even to a locking read; the adapter reads that
    // one again. The current member travels as {"v": version, "s": state}.
    //
    // A join inserts the member's row, or revives its tombstone one version above it; a live row is left
    // alone. The insert happens only once the group's row in the roster table of version 2 carries the
    // marker's "clear" note ($4 names the marker; $5 says the caller checked already, inside the
    // transaction that marks that row): `earlier_roster` tells the adapter to join through that
    // transaction instead (see the adapter's `#joinBesideEarlierRoster`). Once clear, a join is this one
    // statement, with one primary-key probe of the roster table.
    joinMember: `WITH earlier AS (
        SELECT NOT $5::boolean AND NOT EXISTS (
          SELECT 1 FROM ${rosters} WHERE group_name = $1 AND members -> $4::text ->> 'clear' = 'true'
        ) AS found
      ),
      applied AS (
        INSERT INTO ${members} AS t (group_name, worker_id, version, removed, state)
        SELECT $1, $2, 1, false, $3 FROM earlier WHERE NOT earlier.found
        ON CONFLICT (group_name, worker_id) DO UPDATE
          SET version = t.version + 1, removed = false, state = EXCLUDED.state
          WHERE t.removed
        RETURNING t.version
      )
      SELECT applied.version AS applied_version, earlier.found AS earlier_roster,
             CASE WHEN applied.version IS NULL AND NOT earlier.found
               THEN (SELECT json_build_object('v', c.version, 's', c.state) FROM ${members} AS c
                     WHERE c.group_name = $1 AND c.worker_id = $2 AND NOT c.removed FOR SHARE)
             END AS current
      FROM earlier LEFT JOIN applied ON true`,
    updateMember: `WITH applied AS (
        UPDATE ${members} AS t SET version = t.version + 1, state = $4
        WHERE t.group_name = $1 AND t.worker_id = $2 AND NOT t.removed AND t.version = $3
        RETURNING t.version
      )
      SELECT applied.version AS applied_version,
             CASE WHEN applied.version IS NULL
               THEN (SELECT json_build_object('v', c.version, 's', c.state) FROM ${members} AS c
                     WHERE c.group_name = $1 AND c.worker_id = $2 AND NOT c.removed FOR SHARE)
             END AS current
      FROM (SELECT 1) AS one LEFT JOIN applied ON true`,
    // A removal leaves a tombstone that keeps the version: the next join of the worker id goes above it.
    removeMember: `WITH applied AS (
        UPDATE ${members} AS t SET removed = true, state = NULL
        WHERE t.group_name = $1 AND t.worker_id = $2 AND NOT t.removed AND t.version = $3
        RETURNING t.version
      )
      SELECT applied.version AS applied_version,
             CASE WHEN applied.version IS NULL
               THEN (SELECT json_build_object('v', c.version, 's', c.state) FROM ${members} AS c
                     WHERE c.group_name = $1 AND c.worker_id = $2 AND NOT c.removed FOR SHARE)
             END AS current
      FROM (SELECT 1) AS one LEFT JOIN applied ON true`,

    // The roster row of version 2, as the earlier release wrote it: locked by a join for its transaction
    // (an earlier release's join of the group waits for it), and marked with a member in that layout,
    // {"v": high_version + 1, "s": state}, moving high_version as every writer of that layout does. A row
    // already marked is left as it is.
    lockEarlierRoster: `SELECT members FROM ${rosters} WHERE group_name = $1 FOR UPDATE`,
    // A group this release starts gets the roster row too, holding the marker alone: a worker of the
    // earlier release started on it later would otherwise find no row, start a roster of its own and see
    // none of this release's members. A row an earlier worker inserted meanwhile is kept (and then marked).
    // Once a marking found no member of the earlier release alive, the marker's entry notes it: every
    // worker of the earlier release that could hold a lease was a member before the marker, and was
    // checked; one that read the roster before the marker and joins after it holds nothing, and stops at
    // its next roster read. The earlier release reads only "v" and "s" of an entry.
    clearEarlierRoster: `UPDATE ${rosters} SET members = jsonb_set(members, ARRAY[$2::text, 'clear'], 'true'::jsonb)
      WHERE group_name = $1 AND members ? $2::text`,
    createEarlierRoster: `INSERT INTO ${rosters} (group_name, high_version, members)
      VALUES ($1, 1, jsonb_build_object($2::text, jsonb_build_object('v', 1, 's', $3::text)))
      ON CONFLICT (group_name) DO NOTHING`,
    markEarlierRoster: `UPDATE ${rosters}
      SET high_version = high_version + 1,
          members = jsonb_set(members, ARRAY[$2::text], jsonb_build_object('v', high_version + 1, 's', $3::text))
      WHERE group_name = $1 AND NOT (members ? $2::text)`,
  };
}

/** The DDL that creates the migrations table itself; run before reading the recorded version. */
export function migrationsTableDdl(names: TableNames): string[] {
  const schema = quoteIdentifier(names.schema);
  const migrations = `${schema}.${quoteIdentifier(names.migrationsTable)}`;
  return [
    `CREATE SCHEMA IF NOT EXISTS ${schema}`,
    `CREATE TABLE IF NOT EXISTS ${migrations} (
      table_name text PRIMARY KEY,
      version integer NOT NULL,
      migrated_at timestamptz NOT NULL DEFAULT now()
    )`,
  ];
}
