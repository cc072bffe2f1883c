/**
 * Fenced sink writes: exactly-once effects into a PostgreSQL table that is not the lease database (or with
 * leases in any backend). A small fence table keeps, per shard, the fencing token and the position of the
 * last batch applied; a write applies, in one transaction with the fence's update, only when its token is
 * not older than the stored one and its position is after the stored one. A zombie's writes and replays
 * are refused by the sink itself.
 */
import {
  Checkpoint,
  compareNumericPositions,
  InvalidConfigError,
  LeaseLostError,
  StorageOutcomeUnknownError,
  StorageSchemaError,
  type Position,
} from '@leasehold/core';
import { describeValue } from '@leasehold/core/adapter';
import type { ClientBase, Pool } from 'pg';
import { isServerError } from './errors.js';
import { runTransaction } from './pg-transaction.js';
import { PKG, quoteIdentifier, validateIdentifier } from './schema.js';

/** Where the fence table is. */
export interface FenceTableOptions {
  /** The schema of the fence table. Default `public`. A plain identifier; it is always quoted. */
  readonly schema?: string;
  /** The fence table: one row per shard. Default `leasehold_fences`. */
  readonly table?: string;
}

/** Options of {@link fencedWrite}. */
export interface FencedWriteOptions extends FenceTableOptions {
  /** The shard the batch comes from (`ctx.shardId`): the fence's key. */
  readonly shardId: string;
  /** The batch's fencing token (`ctx.fencingToken`). */
  readonly fencingToken: number;
  /** The position after the batch (`ctx.position`). */
  readonly position: Position;
  /** Orders two positions of one shard. Default `compareNumericPositions` (Kinesis sequence numbers). */
  readonly comparePositions?: (a: Position, b: Position) => number;
}

/** What the function of {@link fencedWrite} is told about the fence. */
export interface Fence {
  /** The position of the last batch the sink applied for this shard, or `null` when none was. */
  readonly appliedThrough: Position | null;
  /**
   * The records after `appliedThrough`: a batch that overlaps one applied before (read again from an
   * older checkpoint, cut at other boundaries) applies only what the sink has not seen.
   */
  fresh<R extends { readonly position: Position }>(records: readonly R[]): R[];
}

/** What {@link fencedWrite} did. */
export type FencedWriteResult<T> =
  | { readonly status: 'applied'; readonly value: T } // the function ran and committed with the fence
  | { readonly status: 'replay'; readonly appliedThrough: Position }; // the sink has this position already: nothing was written

const DEFAULT_TABLE = 'leasehold_fences';

/** The quoted name of the fence table. */
function fenceTable(options: FenceTableOptions): string {
  const schema = validateIdentifier('fence schema name', options.schema ?? 'public');
  const table = validateIdentifier('fence table name', options.table ?? DEFAULT_TABLE);
  return `${quoteIdentifier(schema)}.${quoteIdentifier(table)}`;
}

/** Creates the fence table if it does not exist. Idempotent; run it once, as `migrate()` is run. */
export async function createFenceTable(pool: Pool | ClientBase, options: FenceTableOptions = {}): Promise<void> {
  const table = fenceTable(options);
  const schema = quoteIdentifier(validateIdentifier('fence schema name', options.schema ?? 'public'));
  try {
    await pool.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
    await pool.query(`CREATE TABLE IF NOT EXISTS ${table} (
      shard_id text COLLATE "C" PRIMARY KEY,
      fencing_token bigint NOT NULL CHECK (fencing_token >= 0),
      position text,
      updated_at timestamptz NOT NULL DEFAULT now()
    )`);
  } catch (error) {
    // Two workers creating it at once can collide on the catalog; the table exists either way.
    if (isServerError(error) && (error.code === '23505' || error.code === '42P07' || error.code === '42P06')) return;
    throw new StorageSchemaError(`[${PKG}] could not create the fence table ${table}: ${(error as Error).message}`, { cause: error });
  }
}

/**
 * Runs `fn` in one transaction with the update of the shard's fence, when the batch's fencing token is
 * not older than the one the sink last saw for the shard and its position is after the stored one:
 * otherwise nothing is written. An older token throws a `LeaseLostError` (a newer owner wrote the shard);
 * a position the sink has already is a `replay` result. The fence row is locked for the transaction, so
 * two owners of one shard (a zombie and its successor) are decided one after the other. Works whatever
 * backend the leases live in. Pass a pool, or a client that is not in a transaction.
 */
export async function fencedWrite<T>(
  db: Pool | ClientBase,
  options: FencedWriteOptions,
  fn: (client: ClientBase, fence: Fence) => Promise<T>,
): Promise<FencedWriteResult<T>> {
  const { table, compare, shardId, fencingToken, position } = validateFencedWrite(db, options, fn);
  const rules = {
    operation: 'fencedWrite',
    lostCommit: (error: unknown): never => {
      throw new StorageOutcomeUnknownError(
        `[${PKG}] fencedWrite of shard ${describeValue(shardId)} at ${describeValue(position)} may or may not have committed (${(error as Error).message}); sending it again is safe: the fence tells`,
        { cause: error },
      );
    },
    thrown: (error: unknown) =>
      isServerError(error) && (error.code === '42P01' || error.code === '3F000')
        ? new StorageSchemaError(`[${PKG}] the fence table ${table} does not exist (${error.message}); run createFenceTable() first`, { cause: error })
        : error,
    // A newer owner's token: the transaction rolled back cleanly, and the connection is as good as before.
    keepsConnection: (failure: unknown) => failure instanceof LeaseLostError,
  };
  return runTransaction<FencedWriteResult<T>>(isPool(db) ? { pool: db } : { client: db }, rules, async (client) => {
    await client.query(`INSERT INTO ${table} (shard_id, fencing_token, position) VALUES ($1, $2, NULL) ON CONFLICT (shard_id) DO NOTHING`, [shardId, fencingToken]);
    const { rows } = await client.query<{ fencing_token: string; position: string | null }>(
      `SELECT fencing_token, position FROM ${table} WHERE shard_id = $1 FOR UPDATE`,
      [shardId],
    );
    const storedToken = Number(rows[0]?.fencing_token);
    const appliedThrough = rows[0]?.position ?? null;
    if (storedToken > fencingToken) {
      throw new LeaseLostError(
        `[${PKG}] fencing token ${fencingToken} of shard ${describeValue(shardId)} is older than the ${storedToken} the sink ${table} last saw: another worker owns the shard now`,
        shardId,
      );
    }
    if (appliedThrough !== null && compare(position, appliedThrough) <= 0) return { rollback: { status: 'replay', appliedThrough } };
    const fence: Fence = {
      appliedThrough,
      fresh: (records) => (appliedThrough === null ? [...records] : records.filter((record) => compare(record.position, appliedThrough) > 0)),
    };
    const value = await fn(client, fence);
    await client.query(`UPDATE ${table} SET fencing_token = $2, position = $3, updated_at = now() WHERE shard_id = $1`, [shardId, fencingToken, position]);
    return { commit: { status: 'applied', value } };
  });
}

function validateFencedWrite(db: unknown, options: FencedWriteOptions, fn: unknown) {
  if (typeof db !== 'object' || db === null || typeof (db as { query?: unknown }).query !== 'function') {
    throw new InvalidConfigError(`[${PKG}] fencedWrite needs a pg.Pool or a client, got ${describeValue(db)}`);
  }
  if (typeof options !== 'object' || options === null) throw new InvalidConfigError(`[${PKG}] fencedWrite options must be an object, got ${describeValue(options)}`);
  if (typeof fn !== 'function') throw new InvalidConfigError(`[${PKG}] fencedWrite needs a function, got ${describeValue(fn)}`);
  const table = fenceTable(options);
  const { shardId, fencingToken, position } = options;
  if (typeof shardId !== 'string' || shardId.length === 0) throw new InvalidConfigError(`[${PKG}] fencedWrite shardId must be a non-empty string, got ${describeValue(shardId)}`);
  if (!Number.isSafeInteger(fencingToken) || fencingToken < 0) {
    throw new InvalidConfigError(`[${PKG}] fencedWrite fencingToken must be a non-negative integer, got ${describeValue(fencingToken)}`);
  }
  const compare = options.comparePositions ?? compareNumericPositions;
  if (typeof compare !== 'function') throw new InvalidConfigError(`[${PKG}] fencedWrite comparePositions must be a function, got ${describeValue(compare)}`);
  let comparable = typeof position === 'string' && position.length > 0 && !Checkpoint.isSentinel(position);
  if (comparable) {
    try {
      compare(position, position);
    } catch {
      comparable = false;
    }
  }
  if (!comparable) throw new InvalidConfigError(`[${PKG}] fencedWrite position ${describeValue(position)} is not a record position`);
  return { table, compare, shardId, fencingToken, position };
}

function isPool(db: Pool | ClientBase): db is Pool {
  return typeof (db as { totalCount?: unknown }).totalCount === 'number' && typeof (db as { release?: unknown }).release !== 'function';
}
