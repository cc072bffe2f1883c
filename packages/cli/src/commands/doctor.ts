/**
 * `leasehold doctor`: can this backend hold leases safely? Connectivity, tables of the right shape,
 * permissions, and the settings the adapters' READMEs name as needed for safety; with `--group`, that
 * group's records too: corrupt leases and members, dead members that leases still name, stalled shards,
 * records of a newer Leasehold. Prints a checklist
 * and fails when any item fails.
 */
import { randomBytes } from 'node:crypto';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { Checkpoint, LeaseholdError, StorageSchemaError, type Storage } from '@leasehold/core';
import { describeValue, RECORD_FORMAT } from '@leasehold/core/adapter';
import type { Redis } from 'ioredis';
import type pg from 'pg';
import { messageOf, openBackend } from '../connect.js';
import { isNewerFormat, stallAdvice, stallOf } from '../health.js';
import { checkGroup, formatDuration, readKnownGroup, type Io } from '../shared.js';
import { parseStorageUrl, type DynamoDBTarget, type PostgresTarget, type RedisTarget } from '@leasehold/connect';
import { PKG } from '../pkg.js';

/** The verdict of one item: `fail` makes the command fail, `warn` does not. */
export type CheckStatus = 'pass' | 'fail' | 'warn';

/** One item of the checklist. */
export interface Check {
  readonly status: CheckStatus;
  readonly name: string;
  readonly detail: string;
}

/** Options of {@link doctor}. */
export interface DoctorOptions {
  readonly storage: string;
  /** Also check this group's records. */
  readonly group?: string | undefined;
  readonly json: boolean;
}

const MARK: Record<CheckStatus, string> = { pass: '✓', fail: '✗', warn: '!' };

/** Runs the checks of the backend and prints them; throws when one fails, after printing all. */
export async function doctor(options: DoctorOptions, io: Io): Promise<void> {
  const target = parseStorageUrl(options.storage);
  if (options.group !== undefined) checkGroup(options.group);
  const checks: Check[] = [];
  const add = (status: CheckStatus, name: string, detail: string): void => {
    checks.push({ status, name, detail });
    if (!options.json) io.out(`${MARK[status]} ${name}: ${detail}\n`);
  };
  try {
    const backend = await openBackend(target);
    try {
      if (backend.kind === 'postgres') await postgresChecks(backend.pool, backend.target, add);
      else if (backend.kind === 'redis') await redisChecks(backend.client, backend.target, add);
      else await dynamoChecks(backend.client, backend.target, add);
      if (options.group !== undefined) await groupChecks(backend.storage, options.group, target.display, add);
    } finally {
      await backend.close();
    }
  } catch (error) {
    if (error instanceof Error && error.name === 'InvalidConfigError') throw error;
    add('fail', 'connect', messageOf(error));
  }
  const failed = checks.filter((check) => check.status === 'fail');
  if (options.json) io.out(`${JSON.stringify({ storage: target.display, ok: failed.length === 0, checks }, null, 2)}\n`);
  if (failed.length > 0) {
    throw new LeaseholdError(
      'ERR_DOCTOR_FAILED',
      `[${PKG}] ${failed.length} of ${checks.length} checks failed for ${target.display}: ${failed.map((check) => check.name).join(', ')}`,
    );
  }
}

type Add = (status: CheckStatus, name: string, detail: string) => void;

/**
 * The records of one group: each corrupt lease, each stalled shard and each record of a newer Leasehold
 * is an item of its own, with what to do about it.
 */
async function groupChecks(storage: Storage, group: string, display: string, report: Add): Promise<void> {
  let problems = 0;
  const add: Add = (status, name, detail) => {
    if (status !== 'pass') problems++;
    report(status, name, detail);
  };
  let state;
  try {
    state = await readKnownGroup(storage, group, display);
  } catch (error) {
    add('fail', `group ${group}`, messageOf(error));
    return;
  }
  for (const error of state.corrupt) {
    const key = describeValue(error.leaseKey);
    add(
      'fail',
      `corrupt lease ${error.leaseKey ?? '?'}`,
      `${error.message}. Nobody takes it and the shards after it wait. Stop the group's workers, note where its shard was processed to, ` +
        `then delete it with leasehold lease delete --group ${group} --key ${key} --at-version <its version in the backend> ` +
        `and create it again with leasehold lease create --group ${group} --key ${key} --checkpoint <position> [--parent <key>]` +
        ' (the leader does not create a deleted lease again)',
    );
  }
  for (const error of state.corruptMembers) {
    const worker = describeValue(error.workerId);
    const named = state.leases.filter((lease) => lease.owner === error.workerId).map((lease) => lease.leaseKey);
    add(
      'fail',
      `corrupt member ${error.workerId ?? '?'}`,
      `${error.message}. Whether its worker is alive cannot be told, so nobody takes the leases that name it${named.length > 0 ? ` (${named.join(', ')})` : ''}. ` +
        `Stop its worker if it runs, then remove it with leasehold member remove --group ${group} --worker ${worker} --at-version <its version in the backend>: ` +
        'it watches the member first, and its worker joins again as a new member when it starts',
    );
  }
  const members = new Map(state.members.map((member) => [member.workerId, member]));
  for (const member of state.members) {
    if (member.status !== 'dead') continue;
    const named = state.leases.filter((lease) => lease.owner === member.workerId && lease.incarnation === member.incarnation && lease.checkpoint !== Checkpoint.SHARD_END);
    if (named.length === 0) continue;
    add(
      'warn',
      `dead member ${member.workerId}`,
      `declared dead (incarnation ${describeValue(member.incarnation)}), and ${named.length} unfinished leases still name it: ${named.map((lease) => lease.leaseKey).join(', ')}. ` +
        'They are free to take: a running worker of the group takes them at its next take tick; if they stay, no worker of the group runs (or every one holds its maxLeasesPerWorker)',
    );
  }
  const orphans = state.leases.filter((lease) => lease.owner !== null && lease.checkpoint !== Checkpoint.SHARD_END && !members.has(lease.owner) && !state.corruptMembers.some((error) => error.workerId === lease.owner));
  if (orphans.length > 0 && state.members.some((member) => member.status === 'alive')) {
    add(
      'warn',
      'leases of former members',
      `${orphans.length} unfinished leases name a worker the roster has no member of (${orphans.map((lease) => `${lease.leaseKey} of ${describeValue(lease.owner)}`).join(', ')}): they are free to take, and a running worker takes them at its next listing`,
    );
  }
  if (state.corruptLeader !== null) {
    add('fail', 'corrupt leader record', `${state.corruptLeader.message}. No worker can lead the group: stop its workers and delete the record in the backend; the next leader creates it again`);
  }
  const wallNow = Date.now();
  for (const lease of state.leases) {
    const stall = stallOf(lease, wallNow);
    if (stall === null) continue;
    const since = stall.forMs === null ? `since ${describeValue(stall.since)}` : `since ${stall.since} (${formatDuration(stall.forMs)} ago by this machine's clock)`;
    add('fail', `stalled shard ${lease.leaseKey}`, `${stall.reason} ${since}, owner ${describeValue(lease.owner)}: ${stallAdvice(stall.reason)}`);
  }
  const records = [
    ...state.members.map((member) => ({ name: `member ${member.workerId}`, format: member.format })),
    ...state.leases.map((lease) => ({ name: `lease ${lease.leaseKey}`, format: lease.format })),
    ...(state.leader === null ? [] : [{ name: 'leader record', format: state.leader.format }]),
  ];
  for (const record of records.filter(isNewerFormat)) {
    add('fail', `record format of ${record.name}`, `${record.format}, written by a newer Leasehold: upgrade the CLI (it knows record format ${RECORD_FORMAT})`);
  }
  if (problems === 0) {
    add(
      'pass',
      `group ${group}`,
      `${state.members.length} members, ${state.leases.length} leases and ${state.leader === null ? 'no leader record' : 'the leader record'} read back; no dead member named by a lease, none stalled, none of a newer record format than ${RECORD_FORMAT}`,
    );
  }
}

/** What doctor advises for Postgres tables that are missing or behind: the command that sets a backend up. */
const SETUP_HINT = 'run leasehold setup with the same --storage URL: it creates the tables and records the schema version (what migrate() of @leasehold/storage-postgres does)';

const LEASE_COLUMNS = ['group_name text', 'lease_key text', 'version bigint', 'live boolean', 'high_epoch bigint', 'state text'];
const LEADER_COLUMNS = ['group_name text', 'version bigint', 'state text'];
const ROSTER_COLUMNS = ['group_name text', 'high_version bigint', 'members jsonb'];
const MEMBER_COLUMNS = ['group_name text', 'worker_id text', 'version bigint', 'removed boolean', 'state text'];

async function postgresChecks(pool: pg.Pool, target: PostgresTarget, add: Add): Promise<void> {
  const schema = target.schema ?? 'public';
  const leaseTable = target.leaseTable ?? 'leasehold_leases';
  const leaderTable = target.leaderTable ?? 'leasehold_leaders';
  const migrationsTable = target.migrationsTable ?? 'leasehold_migrations';
  const rosterTable = target.rosterTable ?? 'leasehold_rosters';
  const memberTable = target.memberTable ?? 'leasehold_members';
  const { PostgresStorage } = await import('@leasehold/storage-postgres');
  const client = await pool.connect().catch((error: unknown) => {
    throw new LeaseholdError('ERR_STORAGE_UNAVAILABLE', `cannot reach PostgreSQL at ${target.display}: ${messageOf(error)}`, { cause: error });
  });
  try {
    const info = await client.query<{ version: string; user: string; db: string; recovery: boolean }>(
      `SELECT current_setting('server_version') AS version, current_user AS user, current_database() AS db, pg_is_in_recovery() AS recovery`,
    );
    const server = info.rows[0];
    add('pass', 'connect', `PostgreSQL ${server?.version ?? '?'}, database ${describeValue(server?.db)} as ${describeValue(server?.user)}`);
    add(
      server?.recovery === true ? 'fail' : 'pass',
      'primary',
      server?.recovery === true ? 'the server is a standby in recovery: writes are refused; point the URL at the primary' : 'the server is a primary (not in recovery)',
    );

    const columns = await client.query<{ table_name: string; column: string }>(
      `SELECT table_name, column_name || ' ' || data_type AS column FROM information_schema.columns
       WHERE table_schema = $1 AND table_name = ANY($2::text[]) ORDER BY table_name, ordinal_position`,
      [schema, [leaseTable, leaderTable, rosterTable, memberTable]],
    );
    const shapeOk = [
      shapeCheck(add, `${schema}.${leaseTable}`, LEASE_COLUMNS, columns.rows.filter((row) => row.table_name === leaseTable).map((row) => row.column)),
      shapeCheck(add, `${schema}.${leaderTable}`, LEADER_COLUMNS, columns.rows.filter((row) => row.table_name === leaderTable).map((row) => row.column)),
      shapeCheck(add, `${schema}.${rosterTable}`, ROSTER_COLUMNS, columns.rows.filter((row) => row.table_name === rosterTable).map((row) => row.column)),
      shapeCheck(add, `${schema}.${memberTable}`, MEMBER_COLUMNS, columns.rows.filter((row) => row.table_name === memberTable).map((row) => row.column)),
    ].every(Boolean);

    const recorded = await client
      .query<{ version: number }>(`SELECT version FROM ${quote(schema)}.${quote(migrationsTable)} WHERE table_name = $1`, [`${leaseTable}/${leaderTable}`])
      .then((found) => found.rows[0]?.version ?? 0, () => 0);
    const expected = PostgresStorage.schemaVersion;
    if (recorded === expected) add('pass', 'schema version', `${recorded} recorded in ${schema}.${migrationsTable}, as this release expects`);
    else if (recorded > expected) add('fail', 'schema version', `${recorded} recorded, newer than this release's ${expected}: upgrade @leasehold/cli`);
    else add('fail', 'schema version', `${recorded === 0 ? 'none' : recorded} recorded, ${expected} expected: ${SETUP_HINT}`);

    if (shapeOk) {
      const table = (name: string): string => `${quote(schema)}.${quote(name)}`;
      await postgresWriteCheck(client, { leases: table(leaseTable), leaders: table(leaderTable), rosters: table(rosterTable), members: table(memberTable) }, add);
    }
    else add('fail', 'write permission', 'not checked: the tables are missing or of another shape');

    const settings = await client.query<{ name: string; setting: string }>(
      `SELECT name, setting FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit')`,
    );
    const setting = (name: string): string => settings.rows.find((row) => row.name === name)?.setting ?? '?';
    add(setting('fsync') === 'on' ? 'pass' : 'fail', 'fsync', `${setting('fsync')}${setting('fsync') === 'on' ? '' : ': a crash can lose acknowledged writes; set fsync = on'}`);
    const commit = setting('synchronous_commit');
    add(
      commit === 'off' ? 'fail' : 'pass',
      'synchronous_commit',
      `${commit}${commit === 'off' ? ': a crash can lose acknowledged heartbeats and checkpoints; set it to on' : ''}`,
    );
  } finally {
    client.release();
  }
}

function quote(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

function shapeCheck(add: Add, table: string, expected: readonly string[], found: readonly string[]): boolean {
  if (found.length === 0) {
    add('fail', `table ${table}`, `missing: ${SETUP_HINT}`);
    return false;
  }
  const missing = expected.filter((column) => !found.includes(column));
  if (missing.length > 0) {
    add('fail', `table ${table}`, `lacks columns ${missing.join(', ')} (found ${found.join(', ')})`);
    return false;
  }
  add('pass', `table ${table}`, `present, columns ${expected.map((column) => column.split(' ')[0]).join(', ')}`);
  return true;
}

/** Writes a lease and a leader row in a transaction that is rolled back: proves the grants, leaves nothing. */
async function postgresWriteCheck(
  client: pg.PoolClient,
  { leases, leaders, rosters, members }: { leases: string; leaders: string; rosters: string; members: string },
  add: Add,
): Promise<void> {
  const group = `leasehold-doctor-${randomBytes(6).toString('hex')}`;
  try {
    await client.query('BEGIN');
    await client.query(`INSERT INTO ${leases} (group_name, lease_key, version, live, high_epoch, state) VALUES ($1, 'doctor', 1, true, 0, '{}')`, [group]);
    await client.query(`UPDATE ${leases} SET version = version + 1 WHERE group_name = $1`, [group]);
    await client.query(`DELETE FROM ${leases} WHERE group_name = $1`, [group]);
    await client.query(`INSERT INTO ${leaders} (group_name, version, state) VALUES ($1, 1, '{}')`, [group]);
    await client.query(`INSERT INTO ${rosters} (group_name, high_version, members) VALUES ($1, 1, '{}')`, [group]);
    await client.query(`UPDATE ${rosters} SET high_version = high_version + 1 WHERE group_name = $1`, [group]);
    await client.query(`INSERT INTO ${members} (group_name, worker_id, version, removed, state) VALUES ($1, 'doctor', 1, false, '{}')`, [group]);
    await client.query(`UPDATE ${members} SET version = version + 1 WHERE group_name = $1`, [group]);
    add('pass', 'write permission', 'SELECT, INSERT, UPDATE and DELETE on the lease, leader, roster and member tables (tried in a transaction, rolled back)');
  } catch (error) {
    add('fail', 'write permission', messageOf(error));
  } finally {
    await client.query('ROLLBACK').catch(() => undefined);
  }
}

async function redisChecks(client: Redis, target: RedisTarget, add: Add): Promise<void> {
  const pong = await client.ping();
  const info = parseInfo(await client.info());
  add(pong === 'PONG' ? 'pass' : 'fail', 'connect', `Redis ${info.get('redis_version') ?? '?'} answered ${describeValue(pong)}`);

  const role = info.get('role') ?? '?';
  add(role === 'master' ? 'pass' : 'fail', 'role', role === 'master' ? 'primary' : `${role}: a replica refuses writes; point the URL at the primary`);
  if (info.get('cluster_enabled') === '1') {
    add('warn', 'cluster mode', 'enabled: the command line talks to this one node; run doctor against every primary');
  }

  let config: Map<string, string>;
  try {
    const pairs = (await client.call('CONFIG', 'GET', '*')) as string[];
    config = new Map();
    for (let i = 0; i + 1 < pairs.length; i += 2) config.set(pairs[i] as string, pairs[i + 1] as string);
  } catch (error) {
    add('warn', 'persistence', `CONFIG GET is not allowed (${messageOf(error)}); check appendonly yes, appendfsync always and maxmemory-policy noeviction with your provider`);
    await redisWriteCheck(client, target, add);
    return;
  }
  const appendonly = config.get('appendonly') ?? '?';
  const save = config.get('save') ?? '';
  add(
    appendonly === 'yes' ? 'pass' : 'fail',
    'appendonly',
    appendonly === 'yes'
      ? 'yes'
      : `${appendonly}: ${save === '' ? 'no persistence, a restart loses every lease' : `only RDB snapshots (save ${describeValue(save)}), a crash loses the writes since the last one`}; set appendonly yes`,
  );
  const fsync = config.get('appendfsync') ?? '?';
  add(
    fsync === 'always' ? 'pass' : 'fail',
    'appendfsync',
    fsync === 'always' ? 'always' : `${fsync}: a crash can lose ${fsync === 'everysec' ? 'up to a second of' : ''} acknowledged writes, and epochs can go back; set appendfsync always`,
  );
  const maxmemory = config.get('maxmemory') ?? '0';
  const policy = config.get('maxmemory-policy') ?? '?';
  const evicts = maxmemory !== '0' && policy !== 'noeviction';
  add(
    evicts ? 'fail' : 'pass',
    'eviction',
    evicts ? `maxmemory ${maxmemory} with ${policy}: an evicted lease is a lost write; set maxmemory-policy noeviction` : maxmemory === '0' ? 'no maxmemory' : `maxmemory-policy ${policy}`,
  );
  await redisWriteCheck(client, target, add);
}

/** Runs a script that writes and deletes one key under the prefix: proves EVAL and write grants. */
async function redisWriteCheck(client: Redis, target: RedisTarget, add: Add): Promise<void> {
  const key = `${target.keyPrefix ?? 'leasehold:'}doctor:${randomBytes(6).toString('hex')}`;
  try {
    const reply = await client.eval(`redis.call('SET', KEYS[1], '1', 'PX', 60000); return redis.call('DEL', KEYS[1])`, 1, key);
    add(reply === 1 ? 'pass' : 'fail', 'write permission', `a Lua script wrote and deleted ${describeValue(key)}`);
  } catch (error) {
    add('fail', 'write permission', `a Lua script could not write ${describeValue(key)}: ${messageOf(error)}`);
  }
}

function parseInfo(text: string): Map<string, string> {
  const fields = new Map<string, string>();
  for (const line of text.split(/\r?\n/)) {
    const colon = line.indexOf(':');
    if (colon > 0 && !line.startsWith('#')) fields.set(line.slice(0, colon), line.slice(colon + 1));
  }
  return fields;
}

async function dynamoChecks(client: DynamoDBClient, target: DynamoDBTarget, add: Add): Promise<void> {
  const table = target.tableName;
  const { checkTable } = await import('@leasehold/storage-dynamodb');
  const { DescribeContinuousBackupsCommand, DescribeTimeToLiveCommand, PutItemCommand, QueryCommand, UpdateItemCommand } = await import('@aws-sdk/client-dynamodb');
  try {
    await checkTable(client, table);
  } catch (error) {
    const missing = error instanceof StorageSchemaError && / does not exist/.test(error.message);
    add('fail', `table ${table}`, missing ? 'missing: run leasehold setup with the same --storage URL: it creates the table (what createTable() of @leasehold/storage-dynamodb does)' : messageOf(error));
    return;
  }
  add('pass', `table ${table}`, 'present, key schema pk (HASH, S) and sk (RANGE, S)');

  try {
    const ttl = await client.send(new DescribeTimeToLiveCommand({ TableName: table }));
    const state = ttl.TimeToLiveDescription?.TimeToLiveStatus ?? 'DISABLED';
    const on = state === 'ENABLED' || state === 'ENABLING';
    add(on ? 'fail' : 'pass', 'time to live', on ? `${state}: an expired tombstone lets a recreated lease repeat a version or epoch; disable TTL` : 'disabled');
  } catch (error) {
    add('warn', 'time to live', `not checked: ${messageOf(error)}`);
  }
  try {
    const backups = await client.send(new DescribeContinuousBackupsCommand({ TableName: table }));
    const pitr = backups.ContinuousBackupsDescription?.PointInTimeRecoveryDescription?.PointInTimeRecoveryStatus ?? 'DISABLED';
    add('pass', 'point-in-time recovery', `${pitr}${pitr === 'ENABLED' ? ': never restore while consumers run' : ''}`);
  } catch (error) {
    add('warn', 'point-in-time recovery', `not checked: ${messageOf(error)}`);
  }

  // Conditions that cannot hold on an item that does not exist: permission is checked before the
  // condition, so a ConditionalCheckFailedException proves the grant without writing anything.
  const pk = { S: `leasehold-doctor-${randomBytes(6).toString('hex')}` };
  const sk = { S: 'lease:doctor' };
  const probes: [string, () => Promise<unknown>][] = [
    ['Query', () => client.send(new QueryCommand({ TableName: table, ConsistentRead: true, KeyConditionExpression: 'pk = :pk', ExpressionAttributeValues: { ':pk': pk } }))],
    ['PutItem', () => client.send(new PutItemCommand({ TableName: table, Item: { pk, sk }, ConditionExpression: 'attribute_exists(pk)' }))],
    ['UpdateItem', () => client.send(new UpdateItemCommand({ TableName: table, Key: { pk, sk }, UpdateExpression: 'SET version = :v', ConditionExpression: 'attribute_exists(pk)', ExpressionAttributeValues: { ':v': { N: '1' } } }))],
  ];
  const denied: string[] = [];
  for (const [action, probe] of probes) {
    try {
      await probe();
    } catch (error) {
      if (!(error instanceof Error && error.name === 'ConditionalCheckFailedException')) denied.push(`${action}: ${messageOf(error)}`);
    }
  }
  add(denied.length === 0 ? 'pass' : 'fail', 'permissions', denied.length === 0 ? 'Query, PutItem and UpdateItem allowed (probed with conditions that write nothing)' : denied.join('; '));
}
