/**
 * Opens the client and the adapter for a storage URL. The CLI owns these clients, so it sets timeouts a
 * person at a terminal wants: a backend that cannot be reached is a clear error within seconds, not a
 * command that hangs while the client retries.
 */
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { describeValue, StorageUnavailableError, type Storage } from '@leasehold/core';
import type { DynamoDBStorage } from '@leasehold/storage-dynamodb';
import type { PostgresStorage } from '@leasehold/storage-postgres';
import type { RedisStorage } from '@leasehold/storage-redis';
import type { Redis } from 'ioredis';
import type pg from 'pg';
import { PKG, type DynamoDBTarget, type PostgresTarget, type RedisTarget, type StorageTarget } from './url.js';

const CONNECT_TIMEOUT_MS = 5_000;
const REQUEST_TIMEOUT_MS = 15_000;

/** An open backend: the adapter, the raw client for checks the contract has no word for, and its closer. */
export type Backend =
  | { readonly kind: 'postgres'; readonly target: PostgresTarget; readonly storage: PostgresStorage; readonly pool: pg.Pool; close(): Promise<void> }
  | { readonly kind: 'redis'; readonly target: RedisTarget; readonly storage: RedisStorage; readonly client: Redis; close(): Promise<void> }
  | { readonly kind: 'dynamodb'; readonly target: DynamoDBTarget; readonly storage: DynamoDBStorage; readonly client: DynamoDBClient; close(): Promise<void> };

/** The adapter of any backend, as the contract sees it. */
export function storageOf(backend: Backend): Storage {
  return backend.storage;
}

/**
 * Opens the backend a storage URL names. Redis is connected at once, so an unreachable server fails here.
 * Each backend's libraries are loaded only when it is used: a command line starts faster without the
 * AWS SDK when it talks to Redis.
 */
export async function openBackend(target: StorageTarget): Promise<Backend> {
  switch (target.kind) {
    case 'postgres':
      return openPostgres(target);
    case 'redis':
      return openRedis(target);
    case 'dynamodb':
      return openDynamoDB(target);
  }
}

async function openPostgres(target: PostgresTarget): Promise<Backend> {
  const [{ default: pg }, { PostgresStorage }] = await Promise.all([import('pg'), import('@leasehold/storage-postgres')]);
  const pool = new pg.Pool({
    connectionString: target.connectionString,
    max: 4,
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    query_timeout: REQUEST_TIMEOUT_MS,
    application_name: 'leasehold-cli',
  });
  pool.on('error', () => undefined);
  const storage = new PostgresStorage({
    pool,
    schema: target.schema,
    leaseTable: target.leaseTable,
    leaderTable: target.leaderTable,
    migrationsTable: target.migrationsTable,
    rosterTable: target.rosterTable,
  });
  return {
    kind: 'postgres',
    target,
    storage,
    pool,
    async close() {
      await storage.close();
      await pool.end();
    },
  };
}

async function openRedis(target: RedisTarget): Promise<Backend> {
  const [{ Redis }, { RedisStorage }] = await Promise.all([import('ioredis'), import('@leasehold/storage-redis')]);
  const client = new Redis(target.connectionString, {
    lazyConnect: true,
    connectTimeout: CONNECT_TIMEOUT_MS,
    commandTimeout: REQUEST_TIMEOUT_MS,
    maxRetriesPerRequest: 1,
    // One connection attempt: an operator wants to hear at once that the server is not there.
    retryStrategy: () => null,
  });
  let lastError: unknown;
  client.on('error', (error) => {
    lastError = error;
  });
  try {
    await client.connect();
  } catch (error) {
    client.disconnect();
    const cause = lastError ?? error;
    throw new StorageUnavailableError(`[${PKG}] cannot reach Redis at ${describeValue(target.display)}: ${messageOf(cause)}`, { cause });
  }
  const storage = new RedisStorage({ client, keyPrefix: target.keyPrefix });
  return {
    kind: 'redis',
    target,
    storage,
    client,
    async close() {
      await storage.close();
      client.disconnect();
    },
  };
}

async function openDynamoDB(target: DynamoDBTarget): Promise<Backend> {
  const [{ DynamoDBClient }, { DynamoDBStorage }] = await Promise.all([import('@aws-sdk/client-dynamodb'), import('@leasehold/storage-dynamodb')]);
  const client = new DynamoDBClient({
    ...(target.region === undefined ? {} : { region: target.region }),
    ...(target.endpoint === undefined ? {} : { endpoint: target.endpoint }),
    maxAttempts: 2,
    requestHandler: { connectionTimeout: CONNECT_TIMEOUT_MS, requestTimeout: REQUEST_TIMEOUT_MS },
  });
  const storage = new DynamoDBStorage({ client, tableName: target.tableName });
  return {
    kind: 'dynamodb',
    target,
    storage,
    client,
    async close() {
      client.destroy();
    },
  };
}

/** The message of an error, or of the first error inside an AggregateError (what Node gives for refused connections). */
export function messageOf(error: unknown): string {
  if (error instanceof AggregateError && error.errors.length > 0) return messageOf(error.errors[0]);
  if (error instanceof Error) return error.message || error.name;
  return String(error);
}
