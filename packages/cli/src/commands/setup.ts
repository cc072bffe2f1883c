/**
 * `leasehold setup`: prepares a backend for Leasehold, as a deploy step before the first worker starts:
 * the Postgres tables and their schema version (`migrate()` of `PostgresStorage`), the DynamoDB table
 * (`createTable()`, on-demand billing). Redis needs nothing: keys are created by the first write. Harmless
 * when already done, and safe beside workers that run the same setup on start.
 */
import { describeValue } from '@leasehold/core/adapter';
import { parseStorageUrl, type SetupResult } from '@leasehold/connect';
import { openBackend, type Backend } from '../connect.js';
import type { Io } from '../shared.js';

/** Options of {@link setup}. */
export interface SetupOptions {
  readonly storage: string;
  readonly json: boolean;
}

/** Sets the backend up and prints what it found and did. */
export async function setup(options: SetupOptions, io: Io): Promise<void> {
  const target = parseStorageUrl(options.storage);
  const backend = await openBackend(target);
  try {
    const result = await backend.setup();
    if (options.json) io.out(`${JSON.stringify({ storage: target.display, ...result })}\n`);
    else io.out(`${describe(backend, result)}\nnext: leasehold doctor --storage URL checks the settings safety needs\n`);
  } finally {
    await backend.close();
  }
}

function describe(backend: Backend, result: SetupResult): string {
  if (result.kind === 'postgres' && backend.kind === 'postgres') {
    const { target } = backend;
    const schema = target.schema ?? 'public';
    const tables = [
      target.leaseTable ?? 'leasehold_leases',
      target.leaderTable ?? 'leasehold_leaders',
      target.rosterTable ?? 'leasehold_rosters',
      target.memberTable ?? 'leasehold_members',
    ];
    const where = `${tables.map((table) => `${schema}.${table}`).join(', ')} in ${target.display}`;
    if (result.fromVersion === result.toVersion) return `already set up: ${where} at schema version ${result.toVersion}; nothing to do`;
    if (result.fromVersion === 0) return `set up ${where}: created, schema version ${result.toVersion} recorded in ${schema}.${target.migrationsTable ?? 'leasehold_migrations'}`;
    return `set up ${where}: migrated from schema version ${result.fromVersion} to ${result.toVersion}`;
  }
  if (result.kind === 'dynamodb') return `set up table ${describeValue(result.tableName)} in ${backend.display}: active, key schema pk (HASH, S) and sk (RANGE, S), on-demand billing unless it existed`;
  return `nothing to set up in ${backend.display}: Redis keys are created by the first write under the key prefix`;
}
