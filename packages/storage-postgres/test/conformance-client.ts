/**
 * Opens `PostgresStorage` clients in whatever process imports it, on one pool per process: the
 * conformance suite's cross-process mode runs its races from clients opened here.
 */
import type { Storage } from '@leasehold/core';
import pg from 'pg';
import { PostgresStorage } from '../src/index.js';

interface Options {
  readonly connection: pg.PoolConfig;
  readonly schema: string;
  readonly preparedStatements: boolean;
}

let pool: pg.Pool | undefined;
let open = 0;

export async function openClient(options: Options): Promise<Storage> {
  pool ??= new pg.Pool({ ...options.connection, max: 4 });
  pool.on('error', () => undefined);
  open++;
  return new PostgresStorage({ pool, schema: options.schema, preparedStatements: options.preparedStatements });
}

export async function closeClient(storage: Storage): Promise<void> {
  await (storage as PostgresStorage).close();
  if (--open === 0) await pool?.end();
}
