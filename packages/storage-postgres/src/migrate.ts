/**
 * What `PostgresStorage.migrate()` runs inside its one transaction: the schema brought up to this
 * release's version under an advisory lock, and the leases of schema version 1 rewritten in the shape this
 * release reads. The storage class keeps the connection and the retries; this file holds the steps.
 */
import { StorageSchemaError } from '@leasehold/core';
import type { PoolClient } from 'pg';
import { isServerError, readFailed } from './errors.js';
import { migrationsTableDdl, PKG, SCHEMA_VERSION, type Statements, type TableNames } from './schema.js';

/** What `migrate()` did. */
export interface MigrationResult {
  /** The schema version found before (0 when the tables did not exist). */
  readonly fromVersion: number;
  /** The schema version now. */
  readonly toVersion: number;
}

/** Codes of concurrent DDL colliding on a catalog index (duplicate object): the migration is run again. */
export const DDL_RACE_CODES = new Set(['23505', '42P06', '42P07', '42710']);

/**
 * Migrates on `client` in one transaction, rolled back on any failure. `where` names the tables in
 * messages. Throws a `StorageSchemaError` if the database was migrated by a newer release or the server
 * refused a step.
 */
export async function migrateOn(client: PoolClient, names: TableNames, sql: Statements, where: string): Promise<MigrationResult> {
  const key = `${names.leaseTable}/${names.leaderTable}`;
  try {
    await client.query('BEGIN');
    await client.query(sql.lockMigrations);
    for (const ddl of migrationsTableDdl(names)) await client.query(ddl);
    const found = await client.query<{ version: number }>(sql.readVersion, [key]);
    const fromVersion = found.rows[0]?.version ?? 0;
    if (fromVersion > SCHEMA_VERSION) {
      throw new StorageSchemaError(
        `[${PKG}] the tables of ${where} are at schema version ${fromVersion}, newer than this release's ${SCHEMA_VERSION}; upgrade @leasehold/storage-postgres`,
      );
    }
    for (const ddl of sql.migrate(fromVersion)) await client.query(ddl);
    if (fromVersion === 1) await upgradeLeases(client, sql);
    if (fromVersion < SCHEMA_VERSION) await client.query(sql.recordVersion, [key, SCHEMA_VERSION]);
    await client.query('COMMIT');
    return { fromVersion, toVersion: SCHEMA_VERSION };
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    if (error instanceof StorageSchemaError) throw error;
    if (isServerError(error)) {
      throw new StorageSchemaError(`[${PKG}] migrate of ${where} failed: ${error.message}`, { cause: error });
    }
    throw readFailed('migrate', error);
  }
}

/**
 * Schema version 1 stored leases with a `pendingOwner` and no `incarnation`; this release's core reads
 * such a lease as corrupt. Each is rewritten as a free-standing lease of the new shape: no incarnation
 * (its owner holds it in no membership, so core treats it as expired) and no pending owner (handoff
 * requests now live in the roster). Its version moves, as every writer's does, so that a worker of the
 * previous release still holding the old version conflicts instead of writing the old shape back. A
 * state that is not JSON is left as it is, to be reported as corrupt.
 */
async function upgradeLeases(client: PoolClient, sql: Statements): Promise<void> {
  const { rows } = await client.query<{ group_name: string; lease_key: string; version: string; state: string }>(sql.leasesToUpgrade);
  const groups: string[] = [];
  const keys: string[] = [];
  const versions: string[] = [];
  const states: string[] = [];
  for (const row of rows) {
    let fields: Record<string, unknown>;
    try {
      fields = JSON.parse(row.state) as Record<string, unknown>;
    } catch {
      continue;
    }
    if (typeof fields !== 'object' || fields === null || Array.isArray(fields) || Object.hasOwn(fields, 'incarnation')) continue;
    delete fields.pendingOwner;
    groups.push(row.group_name);
    keys.push(row.lease_key);
    versions.push(row.version);
    states.push(JSON.stringify({ ...fields, incarnation: null }));
  }
  if (groups.length === 0) return;
  await client.query(sql.upgradeLeases, [JSON.stringify(groups), JSON.stringify(keys), versions.join(','), JSON.stringify(states)]);
}
