/**
 * The sink table of exactly-once runs, written in one of two ways, and the check that reads it back to
 * count each produced record: exactly once, or it is missing or duplicated. The table has no unique key on
 * purpose, so that a record written twice shows as two rows.
 *
 * - `transactional` (leases in Postgres): the sink is in the lease database, and a worker writes each
 *   batch's rows in one transaction with the batch's checkpoint (`PostgresStorage.transaction`).
 * - `fenced` (leases in any backend): the sink is in a Postgres database of its own, written through
 *   `fencedWrite`, whose fence table keeps per shard the fencing token and the last position applied; the
 *   checkpoint is the ordinary one, after the sink committed. A crash between the two replays records the
 *   fence then keeps out, and a zombie's writes are refused by the sink itself.
 */
import { compareNumericPositions, type BatchContext } from '@leasehold/core';
import { createFenceTable, fencedWrite, type PostgresStorage } from '@leasehold/storage-postgres';
import pg from 'pg';
import type { ProducedRecord } from './producer.js';
import type { FencedReport, WorkerReport } from './reports.js';

export const SINK_TABLE = 'leasehold_e2e_sink';
/** The fence table of the `fenced` mode: `fencedWrite`'s default name, in the sink's schema. */
export const FENCE_TABLE = 'leasehold_fences';

/** How a worker writes its records into the sink. */
export type SinkMode = 'transactional' | 'fenced';
export const SINK_MODES: readonly SinkMode[] = ['transactional', 'fenced'];

/** Where a run's workers write their records: the lease database, or a Postgres sink URL of its own. */
export type SinkTarget = { readonly mode: 'transactional' } | { readonly mode: 'fenced'; readonly url: string };

/** One record to write: what the worker parsed from it. */
export interface SinkRow {
  readonly key: string;
  readonly seq: number;
  readonly position: string;
}

/** The schema a postgres URL names with `?schema=`, checked to be a plain identifier. */
function schemaOf(url: string): string {
  const schema = new URL(url).searchParams.get('schema') ?? 'public';
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(schema)) throw new Error(`schema "${schema}" of the sink URL is not a plain identifier`);
  return schema;
}

/** The quoted sink table of the schema a postgres URL names. */
function sinkTable(url: string): string {
  return `"${schemaOf(url)}".${SINK_TABLE}`;
}

/**
 * A sink URL of the run `runId` in the Postgres database `postgresUrl` names: a schema of its own beside
 * the leases' (which `fencedWrite` never touches), so that runs never share a sink.
 */
export function fencedSinkUrl(postgresUrl: string, runId: string): string {
  const url = new URL(postgresUrl);
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') throw new Error(`a fenced sink lives in PostgreSQL, got ${url.protocol}`);
  url.searchParams.set('schema', `leasehold_e2e_sink_${runId}`);
  return url.toString();
}

/**
 * Creates the sink table (and, for `fenced`, the fence table) in the schema of a postgres URL: the
 * prepared storage URL for `transactional`, the sink URL for `fenced`.
 */
export async function prepareSink(url: string, mode: SinkMode = 'transactional'): Promise<void> {
  const schema = schemaOf(url);
  await withPool(url, async (pool) => {
    await pool.query(`CREATE SCHEMA IF NOT EXISTS "${schema}"`);
    await pool.query(`CREATE TABLE IF NOT EXISTS ${sinkTable(url)} (
      shard_id text NOT NULL, position text NOT NULL, key text NOT NULL, seq integer NOT NULL, worker text NOT NULL, fencing_token bigint NOT NULL)`);
    if (mode === 'fenced') await createFenceTable(pool, { schema, table: FENCE_TABLE });
  });
}

/** Inserts a batch's rows, on a client in a transaction. */
async function insertRows(client: pg.ClientBase, table: string, context: BatchContext, workerId: string, rows: readonly SinkRow[]): Promise<void> {
  await client.query(
    `INSERT INTO ${table} (shard_id, position, key, seq, worker, fencing_token)
     SELECT $1, p, k, s, $2, $3 FROM unnest($4::text[], $5::text[], $6::integer[]) AS u(p, k, s)`,
    [context.shardId, workerId, context.fencingToken, rows.map((row) => row.position), rows.map((row) => row.key), rows.map((row) => row.seq)],
  );
}

/** Writes a batch's rows and its checkpoint in one transaction; refused as a whole if the lease moved. */
export async function writeInTransaction(storage: PostgresStorage, storageUrl: string, context: BatchContext, workerId: string, rows: readonly SinkRow[], work: () => Promise<void>): Promise<void> {
  const table = sinkTable(storageUrl);
  await storage.transaction(context, async (client) => {
    await insertRows(client, table, context, workerId, rows);
    // The simulated work runs with the rows written and not committed: a kill here loses them, and the next owner writes them.
    await work();
  });
}

/** What the fence did with a batch of the `fenced` mode. */
export type FencedOutcome =
  | { readonly outcome: 'applied'; readonly written: number } // committed with the fence: `written` of the batch's records were after its stored position
  | { readonly outcome: 'replay'; readonly written: 0 }; // the sink had the batch already: nothing written

/**
 * Writes the rows of a batch that the sink does not have yet, in one transaction with the shard's fence
 * (`fencedWrite`). A zombie's write (its fencing token older than the fence's) throws a `LeaseLostError`
 * and writes nothing.
 */
export async function writeFenced(pool: pg.Pool, sinkUrl: string, context: BatchContext, workerId: string, rows: readonly SinkRow[]): Promise<FencedOutcome> {
  const table = sinkTable(sinkUrl);
  const result = await fencedWrite(
    pool,
    { schema: schemaOf(sinkUrl), table: FENCE_TABLE, shardId: context.shardId, fencingToken: context.fencingToken, position: context.position },
    async (client, fence) => {
      // A replay from an older checkpoint may be cut at other boundaries than what the sink applied.
      const fresh = fence.fresh(rows);
      await insertRows(client, table, context, workerId, fresh);
      return fresh.length;
    },
  );
  return result.status === 'applied' ? { outcome: 'applied', written: result.value } : { outcome: 'replay', written: 0 };
}

/** A pool on the database of a sink URL (its `schema` parameter is ours, not the driver's). */
export function sinkPool(url: string, max: number): pg.Pool {
  const target = new URL(url);
  if (target.protocol !== 'postgres:' && target.protocol !== 'postgresql:') throw new Error(`the sink lives in PostgreSQL, got ${target.protocol}`);
  target.searchParams.delete('schema');
  const pool = new pg.Pool({ connectionString: target.toString(), max });
  // A connection that dies idle (a restarted server) emits 'error' on the pool; unheard, that ends the process.
  pool.on('error', () => undefined);
  return pool;
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
export async function checkSink(url: string, produced: readonly ProducedRecord[]): Promise<SinkCheck> {
  const { rows } = await withPool(url, (pool) => pool.query<{ shard_id: string; position: string; copies: string }>(
    `SELECT shard_id, position, count(*) AS copies FROM ${sinkTable(url)} GROUP BY shard_id, position`,
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
  const { rows: ordered } = await withPool(url, (pool) => pool.query<{ shard_id: string; position: string; fencing_token: string }>(
    `SELECT shard_id, position, fencing_token FROM ${sinkTable(url)}`,
  ));
  ordered.sort((a, b) => (a.shard_id < b.shard_id ? -1 : a.shard_id > b.shard_id ? 1 : compareNumericPositions(a.position, b.position)));
  let tokenRegressions = 0;
  ordered.forEach((row, i) => {
    const before = ordered[i - 1];
    if (before && before.shard_id === row.shard_id && Number(row.fencing_token) < Number(before.fencing_token)) tokenRegressions++;
  });
  return { rows: total, missing, duplicated, unexpected: copies.size, tokenRegressions };
}

/** One shard's fence as the `fenced` mode left it. */
export interface FenceRow {
  readonly shardId: string;
  readonly fencingToken: number;
  readonly position: string | null;
}

/** Reads the fence table of a `fenced` sink. */
export async function readFences(sinkUrl: string): Promise<FenceRow[]> {
  const { rows } = await withPool(sinkUrl, (pool) =>
    pool.query<{ shard_id: string; fencing_token: string; position: string | null }>(`SELECT shard_id, fencing_token, position FROM "${schemaOf(sinkUrl)}".${FENCE_TABLE} ORDER BY shard_id`),
  );
  return rows.map((row) => ({ shardId: row.shard_id, fencingToken: Number(row.fencing_token), position: row.position }));
}

/** What the fences of a `fenced` run did, counted from the workers' reports. */
export interface FenceTally {
  /** Batches committed with their fence. */
  readonly applied: number;
  /** Of those, batches that overlapped what the sink had: only their records after the fence were written. */
  readonly trimmed: number;
  /** Records of the trimmed batches that the sink had already, so were not written again. */
  readonly trimmedRecords: number;
  /** Batches the sink had as a whole (a replay): nothing written. */
  readonly replays: number;
  /** Writes of a zombie (a fencing token older than the fence's): refused, nothing written. */
  readonly refused: number;
}

/** Counts the `fenced` reports of a run. */
export function tallyFences(reports: readonly WorkerReport[]): FenceTally {
  const fenced = reports.filter((report): report is FencedReport => report.type === 'fenced');
  const applied = fenced.filter((report) => report.outcome === 'applied');
  const trimmed = applied.filter((report) => report.written < report.records);
  return {
    applied: applied.length,
    trimmed: trimmed.length,
    trimmedRecords: trimmed.reduce((sum, report) => sum + report.records - report.written, 0),
    replays: fenced.filter((report) => report.outcome === 'replay').length,
    refused: fenced.filter((report) => report.outcome === 'refused').length,
  };
}

async function withPool<T>(url: string, fn: (pool: pg.Pool) => Promise<T>): Promise<T> {
  const pool = sinkPool(url, 2);
  try {
    return await fn(pool);
  } finally {
    await pool.end();
  }
}
