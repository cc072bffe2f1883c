/**
 * The shared PostgreSQL server of the tests (127.0.0.1:5432, database `test`, trust authentication), and a
 * fresh schema per test file so that parallel runs never collide. A file's schema is dropped when all of its
 * tests passed and left behind otherwise, to be read.
 */
import { randomUUID } from 'node:crypto';
import type { MemberState, WriteResult } from '@leasehold/core';
import { memberStateOf, RECORD_FORMAT } from '@leasehold/core/adapter';
import { openTestPool, postgresTarget } from '@leasehold/local-stack';
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, expect } from 'vitest';
import { PostgresStorage } from '../src/index.js';

export const serverConfig: pg.PoolConfig = { ...postgresTarget() };

/** A pool on the shared server; fails loudly, with the command that starts the server, if it cannot connect. */
export function openPool(max: number): Promise<pg.Pool> {
  return openTestPool(max);
}

/** A schema name no other run uses. */
export function freshSchemaName(prefix: string): string {
  return `${prefix}_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
}

/**
 * Registers a pool and a fresh schema for the current test file. The schema is dropped after the file
 * only if no test failed.
 */
export function useServer(prefix: string, max = 10): { pool: () => pg.Pool; schema: string } {
  const schema = freshSchemaName(prefix);
  let pool: pg.Pool | undefined;
  let failed = false;
  beforeAll(async () => {
    pool = await openPool(max);
  });
  beforeEach(({ onTestFailed }) => {
    onTestFailed(() => {
      failed = true;
    });
  });
  afterAll(async () => {
    if (!pool) return;
    if (!failed) await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
  });
  return {
    pool: () => {
      if (!pool) throw new Error('the pool is opened in beforeAll');
      return pool;
    },
    schema,
  };
}

/**
 * `useServer` with this release's tables migrated into the file's schema before its tests; `storage`
 * builds a storage on them, with `options` over the pool and schema.
 */
export function useMigratedServer(
  prefix: string,
  max = 10,
): { server: ReturnType<typeof useServer>; storage: (options?: Partial<ConstructorParameters<typeof PostgresStorage>[0]>) => PostgresStorage } {
  const server = useServer(prefix, max);
  const storage = (options: Partial<ConstructorParameters<typeof PostgresStorage>[0]> = {}): PostgresStorage =>
    new PostgresStorage({ pool: server.pool(), schema: server.schema, ...options });
  beforeAll(async () => {
    await storage().migrate();
  });
  return { server, storage };
}

/** The record of a write that must have applied; anything else fails the test with the outcome. */
export function applied<T>(outcome: WriteResult<T> | undefined): T {
  if (outcome?.status !== 'applied') throw new Error(`expected applied, got ${JSON.stringify(outcome)}`);
  return outcome.record;
}

/** An alive member's state of this release's format, with `fields` over the defaults. */
export const member = (fields: Partial<MemberState> = {}): MemberState =>
  memberStateOf({ format: RECORD_FORMAT, incarnation: 'inc-1', leaseDurationMs: 10_000, status: 'alive', held: 0, changes: 0, requests: [], metadata: {}, ...fields });

/**
 * Ends the server process of the statement waiting for a lock whose text is LIKE `pattern`, once one
 * waits, so that its client's connection dies in the middle of it. The test fails if none waits within
 * 10 s.
 */
export async function terminateWaiting(pool: pg.Pool, pattern: string): Promise<void> {
  let pid: number | undefined;
  expect(await waitFor(async () => {
    const { rows: waiting } = await pool.query(`SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '${pattern}'`);
    pid = waiting[0]?.pid;
    return pid !== undefined;
  })).toBe(true);
  await pool.query('SELECT pg_terminate_backend($1)', [pid]);
}

/** Polls `check` every 20 ms until it returns true or `timeoutMs` passes; returns the last answer. */
export async function waitFor(check: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return true;
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** A pool whose clients count the statements sent through them. */
export function countingPool(pool: pg.Pool): { pool: pg.Pool; statements: () => number } {
  let count = 0;
  const counting = Object.create(pool) as pg.Pool;
  counting.connect = (async () => {
    const client = await pool.connect();
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    return Object.assign(Object.create(client) as pg.PoolClient, {
      query: (...args: unknown[]) => {
        count++;
        return query(...args);
      },
      release: (error?: Error | boolean) => client.release(error),
    });
  }) as pg.Pool['connect'];
  return { pool: counting, statements: () => count };
}
