/**
 * The sink table of exactly-once runs: a worker started with `--sink` writes every record it is handed
 * into it, in one transaction with the batch's checkpoint (`PostgresStorage.transaction`), and the
 * checker reads it back to count each produced record: exactly once, or it is missing or duplicated. The
 * table has no unique key on purpose, so that a record written twice shows as two rows.
 */
import type { PostgresStorage } from '@leasehold/storage-postgres';
import { compareNumericPositions, type BatchContext } from '@leasehold/core';
import pg from 'pg';
import type { ProducedRecord } from './producer.js';

export const SINK_TABLE = 'leasehold_e2e_sink';

/** One record to write: what the worker parsed from it. */
export interface SinkRow {
  readonly key: string;
  readonly seq: number;
  readonly position: string;
}

/** The quoted sink table of the schema a postgres storage URL names. */
function sinkTable(storageUrl: string): string {
  const schema = new URL(storageUrl).searchParams.get('schema') ?? 'public';
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(schema)) throw new Error(`schema "${schema}" of the storage URL is not a plain identifier`);
  return `"${schema}".${SINK_TABLE}`;
}

/** Creates the sink table of a prepared postgres storage URL. */
export async function prepareSink(storageUrl: string): Promise<void> {
  await withPool(storageUrl, (pool) =>
    pool.query(`CREATE TABLE IF NOT EXISTS ${sinkTable(storageUrl)} (
      shard_id text NOT NULL, position text NOT NULL, key text NOT NULL, seq integer NOT NULL, worker text NOT NULL, fencing_token bigint NOT NULL)`),
  );
}

/** Writes a batch's rows and its checkpoint in one transaction; refused as a whole if the lease moved. */
export async function writeBatch(storage: PostgresStorage, storageUrl: string, context: BatchContext, workerId: string, rows: readonly SinkRow[], work: () => Promise<void>): Promise<void> {
  const table = sinkTable(storageUrl);
  await storage.transaction(context, async (client) => {
    await client.query(
      `INSERT INTO ${table} (shard_id, position, key, seq, worker, fencing_token)
       SELECT $1, p, k, s, $2, $3 FROM unnest($4::text[], $5::text[], $6::integer[]) AS u(p, k, s)`,
      [context.shardId, workerId, context.fencingToken, rows.map((row) => row.position), rows.map((row) => row.key), rows.map((row) => row.seq)],
    );
    // The simulated work runs with the rows written and not committed: a kill here loses them, and the next owner writes them.
    await work();
  });
}

/** How the sink ended: each produced record counted, and any row that no record produced. */
export interface SinkCheck {
  readonly rows: number;
  readonly missing: ProducedRecord[];
  readonly duplicated: Array<ProducedRecord & { readonly copies: number }>;
  readonly unexpected: number;
  /**
   * Rows whose fencing token is older than that of a row before them in their shard: a write of an earlier
   * tenure that committed after a later tenure had written. Fencing keeps it at 0.
   */
  readonly tokenRegressions: number;
}

/** Reads the sink table back and counts every produced record in it. */
export async function checkSink(storageUrl: string, produced: readonly ProducedRecord[]): Promise<SinkCheck> {
  const { rows } = await withPool(storageUrl, (pool) => pool.query<{ shard_id: string; position: string; copies: string }>(
    `SELECT shard_id, position, count(*) AS copies FROM ${sinkTable(storageUrl)} GROUP BY shard_id, position`,
  ));
  const copies = new Map(rows.map((row) => [`${row.shard_id}/${row.position}`, Number(row.copies)]));
  const missing: ProducedRecord[] = [];
  const duplicated: Array<ProducedRecord & { copies: number }> = [];
  for (const record of produced) {
    const count = copies.get(`${record.shardId}/${record.position}`) ?? 0;
    copies.delete(`${record.shardId}/${record.position}`);
    if (count === 0) missing.push(record);
    if (count > 1) duplicated.push({ ...record, copies: count });
  }
  const total = rows.reduce((sum, row) => sum + Number(row.copies), 0);
  const { rows: ordered } = await withPool(storageUrl, (pool) => pool.query<{ shard_id: string; position: string; fencing_token: string }>(
    `SELECT shard_id, position, fencing_token FROM ${sinkTable(storageUrl)}`,
  ));
  ordered.sort((a, b) => (a.shard_id < b.shard_id ? -1 : a.shard_id > b.shard_id ? 1 : compareNumericPositions(a.position, b.position)));
  let tokenRegressions = 0;
  ordered.forEach((row, i) => {
    const before = ordered[i - 1];
    if (before && before.shard_id === row.shard_id && Number(row.fencing_token) < Number(before.fencing_token)) tokenRegressions++;
  });
  return { rows: total, missing, duplicated, unexpected: copies.size, tokenRegressions };
}

async function withPool<T>(storageUrl: string, fn: (pool: pg.Pool) => Promise<T>): Promise<T> {
  const url = new URL(storageUrl);
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') throw new Error('the sink lives in the lease database, which must be postgres');
  url.searchParams.delete('schema');
  const pool = new pg.Pool({ connectionString: url.toString(), max: 2 });
  pool.on('error', () => undefined);
  try {
    return await fn(pool);
  } finally {
    await pool.end();
  }
}
