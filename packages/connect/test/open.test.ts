import { randomBytes } from 'node:crypto';
import { InvalidConfigError, MemoryStorage, StorageUnavailableError } from '@leasehold/core';
import { postgresUrl, redisUrl, START_POSTGRES, START_REDIS, startDynalite, type RunningDynalite } from '@leasehold/local-stack';
import { DynamoDBStorage } from '@leasehold/storage-dynamodb';
import { PostgresStorage, SCHEMA_VERSION } from '@leasehold/storage-postgres';
import { RedisStorage } from '@leasehold/storage-redis';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { openStorage, openStorageFromEnv, type OpenedStorage } from '../src/index.js';

const POSTGRES = postgresUrl();
const REDIS = redisUrl();
const fresh = (kind: string): string => `${kind}${randomBytes(5).toString('hex')}`;

let dynalite: RunningDynalite;
const admin = new pg.Pool({ connectionString: POSTGRES, max: 1 });
const schemas: string[] = [];

beforeAll(async () => {
  process.env.AWS_ACCESS_KEY_ID ??= 'test';
  process.env.AWS_SECRET_ACCESS_KEY ??= 'test';
  try {
    await admin.query('SELECT 1');
  } catch (error) {
    throw new Error(
      `These tests need PostgreSQL on ${POSTGRES}; ${START_POSTGRES} (${(error as Error).message})`,
      { cause: error },
    );
  }
  dynalite = await startDynalite();
});

afterAll(async () => {
  for (const schema of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await admin.end();
  await dynalite?.close();
});

/** Opens, sets up, writes and reads one lease back, the way a worker's first minute does. */
async function roundTrip(opened: OpenedStorage): Promise<string[]> {
  await opened.setup();
  const group = fresh('group');
  const created = await opened.storage.createLease({ group, leaseKey: 'shard-0' });
  expect(created.status).toBe('applied');
  return (await opened.storage.listLeases(group)).leases.map((lease) => lease.leaseKey);
}

describe('openStorage', () => {
  it("opens Postgres with the URL's schema, sets it up to this release's schema version, and ends the pool it made on close", async () => {
    const schema = fresh('connect');
    schemas.push(schema);
    const opened = await openStorage(`${POSTGRES}?schema=${schema}`);
    if (opened.kind !== 'postgres') throw new Error(`opened ${opened.kind}`);
    expect(opened.storage).toBeInstanceOf(PostgresStorage);
    expect(await opened.setup()).toEqual({ kind: 'postgres', fromVersion: 0, toVersion: SCHEMA_VERSION });
    expect(await opened.setup()).toEqual({ kind: 'postgres', fromVersion: SCHEMA_VERSION, toVersion: SCHEMA_VERSION });
    expect(await roundTrip(opened)).toEqual(['shard-0']);
    const tables = await admin.query<{ table_name: string }>('SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1', [schema]);
    expect(tables.rows.map((row) => row.table_name)).toContain('leasehold_leases');
    await opened.close();
    expect(opened.pool.ended).toBe(true);
    await expect(opened.close()).resolves.toBeUndefined();
  });

  it('gives the pool the timeouts, size and name asked for, and the client settings given over them', async () => {
    const opened = await openStorage(`${POSTGRES}?schema=unused`, { connectTimeoutMs: 1_234, requestTimeoutMs: 4_321, maxConnections: 3, applicationName: 'connect-test', postgres: { max: 2 } });
    if (opened.kind !== 'postgres') throw new Error(`opened ${opened.kind}`);
    const { rows } = await opened.pool.query<{ name: string }>('SELECT current_setting($1) AS name', ['application_name']);
    expect(rows[0]?.name).toBe('connect-test');
    expect(opened.pool.options).toMatchObject({ connectionTimeoutMillis: 1_234, query_timeout: 4_321, max: 2, keepAlive: true });
    await opened.close();
  });

  it("opens Redis with the URL's key prefix, and quits the client it made on close", async () => {
    const prefix = `${fresh('connect')}:`;
    const opened = await openStorage(`${REDIS}?prefix=${prefix}`).catch((error: unknown) => {
      throw new Error(`These tests need Redis at ${REDIS}; ${START_REDIS} (${(error as Error).message})`, { cause: error });
    });
    if (opened.kind !== 'redis') throw new Error(`opened ${opened.kind}`);
    expect(opened.storage).toBeInstanceOf(RedisStorage);
    expect(await opened.setup()).toEqual({ kind: 'redis' });
    expect(await roundTrip(opened)).toEqual(['shard-0']);
    const keys = await opened.client.keys(`${prefix}*`);
    expect(keys.length).toBeGreaterThan(0);
    await opened.client.del(...keys);
    await opened.close();
    expect(opened.client.status).toBe('end');
  });

  it('fails at once with a StorageUnavailableError when Redis cannot be reached and reconnect is off', async () => {
    const opening = openStorage('redis://:secret@127.0.0.1:1', { reconnect: false });
    await expect(opening).rejects.toThrow(StorageUnavailableError);
    await expect(opening).rejects.toThrow(/^\[connect\] cannot reach Redis at "redis:\/\/:\*\*\*@127\.0\.0\.1:1": connect ECONNREFUSED 127\.0\.0\.1:1$/);
  });

  it("opens DynamoDB on the URL's endpoint and region, creates the table on setup, and destroys the client it made on close", async () => {
    const tableName = fresh('connect');
    const opened = await openStorage(`dynamodb://${tableName}?endpoint=${encodeURIComponent(dynalite.endpoint)}&region=eu-west-1`);
    if (opened.kind !== 'dynamodb') throw new Error(`opened ${opened.kind}`);
    expect(opened.storage).toBeInstanceOf(DynamoDBStorage);
    expect(await opened.client.config.region()).toBe('eu-west-1');
    expect(await opened.setup()).toEqual({ kind: 'dynamodb', tableName });
    expect(await roundTrip(opened)).toEqual(['shard-0']);
    const destroy = vi.spyOn(opened.client, 'destroy');
    await opened.close();
    expect(destroy).toHaveBeenCalledTimes(1);
  });

  it('opens a new MemoryStorage for each memory: URL', async () => {
    await using first = await openStorage('memory:');
    await using second = await openStorage('memory:');
    expect(first.storage).toBeInstanceOf(MemoryStorage);
    expect(await roundTrip(first)).toEqual(['shard-0']);
    expect(second.storage).not.toBe(first.storage);
  });

  it('refuses a timeout or pool size that is not a whole number of at least 1', async () => {
    await expect(openStorage('memory:', { requestTimeoutMs: 0 })).rejects.toThrow(InvalidConfigError);
    await expect(openStorage('memory:', { requestTimeoutMs: 0 })).rejects.toThrow('[connect] requestTimeoutMs must be a whole number of at least 1, got 0');
    await expect(openStorage('memory:', { maxConnections: 2.5 })).rejects.toThrow('[connect] maxConnections must be a whole number of at least 1, got 2.5');
  });

  it('refuses an option it does not take, naming it and what it takes', async () => {
    await expect(openStorage('memory:', { timeoutMs: 1000 } as never)).rejects.toThrow(InvalidConfigError);
    await expect(openStorage('memory:', { timeoutMs: 1000 } as never)).rejects.toThrow('[connect] openStorage has no option "timeoutMs"; it takes connectTimeoutMs, requestTimeoutMs,');
    await expect(openStorageFromEnv({ env: { LEASEHOLD_STORAGE: 'memory:' }, requestTimeoutMS: 1000 } as never)).rejects.toThrow(
      '[connect] openStorageFromEnv has no option "requestTimeoutMS"; did you mean requestTimeoutMs?',
    );
  });
});

describe('openStorageFromEnv', () => {
  it('opens the storage LEASEHOLD_STORAGE names', async () => {
    const tableName = fresh('connect');
    await using opened = await openStorageFromEnv({ env: { LEASEHOLD_STORAGE: `dynamodb://${tableName}?endpoint=${encodeURIComponent(dynalite.endpoint)}&region=us-east-1` } });
    expect(opened.kind).toBe('dynamodb');
    expect(await roundTrip(opened)).toEqual(['shard-0']);
  });

  it('opens the fallback when the variable is unset', async () => {
    await using opened = await openStorageFromEnv({ env: {}, fallback: 'memory:' });
    expect(opened.kind).toBe('memory');
  });
});
