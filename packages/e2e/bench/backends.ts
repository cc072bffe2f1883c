/**
 * The real backends the scale and birth benchmarks run against: PostgreSQL on 127.0.0.1:5432 (database
 * `test`, or PGHOST/PGPORT/PGUSER/PGDATABASE), Redis on 127.0.0.1:6379 (or REDIS_HOST/REDIS_PORT), and
 * dynalite in a child process, each opened on a fresh schema, key prefix or table and dropped on close.
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { Storage } from '@leasehold/core';
import { DynamoDBStorage } from '@leasehold/storage-dynamodb';
import { openTestPool, redisTarget } from '@leasehold/local-stack';
import { PostgresStorage } from '@leasehold/storage-postgres';
import { RedisStorage } from '@leasehold/storage-redis';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import pg from 'pg';
import { LOCAL_CREDENTIALS } from '../src/kinesis.js';

export type Backend = 'postgres' | 'redis' | 'dynamodb';
export const BACKENDS: Backend[] = ['postgres', 'redis', 'dynamodb'];

/**
 * Where a run's records are: enough for another process to open the same ones (a JSON value, sent to the
 * coordinators' processes of `scale-procs.ts`).
 */
export type Location =
  | { readonly backend: 'postgres'; readonly schema: string }
  | { readonly backend: 'redis'; readonly keyPrefix: string }
  | { readonly backend: 'dynamodb'; readonly endpoint: string; readonly tableName: string };

/** Clients of a run's records, opened by `attach`; closing them drops nothing. */
export interface Attached {
  storage: Storage;
  /**
   * The storage worker `i` uses, when it differs from `storage`. DynamoDB: a client per worker, as in
   * production; one shared client's socket pool queues every worker's heartbeat behind the others' listings.
   */
  storageFor?: (i: number) => Storage;
  close(): Promise<void>;
}

/** A run's records, made by `OPEN` on a fresh schema, key prefix or table, and dropped on close. */
export interface Opened extends Attached {
  location: Location;
  /** Extra figures only this backend can give (DynamoDB: the roster as read, and the read units of a roster and a digest read). */
  inspect?: (group: string) => Promise<Record<string, unknown>>;
  /** The emulator's process, when the backend runs in one this run started (dynalite). */
  serverPid?: number;
}

/** Creates `count` leases named as shards (`shardId-000000000000` on), 200 at a time; returns their keys. */
export async function createLeases(storage: Storage, group: string, count: number): Promise<string[]> {
  const keys = Array.from({ length: count }, (_, i) => `shardId-${String(i).padStart(12, '0')}`);
  for (let i = 0; i < keys.length; i += 200) {
    await Promise.all(keys.slice(i, i + 200).map((leaseKey) => storage.createLease({ group, leaseKey, checkpoint: 'TRIM_HORIZON' })));
  }
  return keys;
}

export const runId = `s${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;

function connectPostgres(max: number): Promise<pg.Pool> {
  return openTestPool(max, { connectionTimeoutMillis: 5_000 });
}

/** The coordinators of one process share a pool of 16 connections. */
const POSTGRES_POOL = 16;

async function openPostgres(): Promise<Opened> {
  const pool = await connectPostgres(POSTGRES_POOL);
  const schema = `leasehold_scale_${runId}`;
  const storage = new PostgresStorage({ pool, schema });
  await storage.migrate();
  return {
    storage,
    location: { backend: 'postgres', schema },
    close: async () => {
      await storage.close();
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined);
      await pool.end();
    },
  };
}

async function connectRedis(): Promise<Redis> {
  const { host, port } = redisTarget();
  const client = new Redis({ host, port, lazyConnect: true, connectTimeout: 5_000, maxRetriesPerRequest: 1 });
  client.on('error', () => undefined);
  try {
    await client.connect();
  } catch (error) {
    client.disconnect();
    throw new Error(`Redis is not reachable at ${host}:${port}: ${(error as Error).message}. Start one and set REDIS_HOST and REDIS_PORT`, {
      cause: error,
    });
  }
  return client;
}

async function openRedis(): Promise<Opened> {
  const client = await connectRedis();
  const keyPrefix = `leasehold-scale:${runId}:`;
  const storage = new RedisStorage({ client, keyPrefix });
  return {
    storage,
    location: { backend: 'redis', keyPrefix },
    close: async () => {
      await storage.close();
      // Drop the run's keys.
      let cursor = '0';
      do {
        const [next, keys] = await client.scan(cursor, 'MATCH', `${keyPrefix}*`, 'COUNT', 1_000);
        cursor = next;
        if (keys.length > 0) await client.del(...keys);
      } while (cursor !== '0');
      client.disconnect();
    },
  };
}

/**
 * The roster as the adapter reads it (`getRoster`), and the read units dynalite bills for one roster read
 * and one read of the roster digest, through a client of its own that asks for the consumed capacity.
 */
async function inspectDynamoDB(endpoint: string, tableName: string, group: string): Promise<Record<string, unknown>> {
  const client = new DynamoDBClient({ region: 'us-east-1', endpoint, credentials: LOCAL_CREDENTIALS });
  const units: number[] = [];
  type Add = (middleware: unknown, options: { step: 'initialize'; name: string }) => void;
  const meter = (next: (args: { input: Record<string, unknown> }) => Promise<{ output: { ConsumedCapacity?: { CapacityUnits?: number } } }>) =>
    async (args: { input: Record<string, unknown> }) => {
      args.input.ReturnConsumedCapacity = 'TOTAL';
      const answer = await next(args);
      units.push(answer.output.ConsumedCapacity?.CapacityUnits ?? Number.NaN);
      return answer;
    };
  // At the initialize step, before the request is serialized, so that the parameter is sent.
  (client.middlewareStack.add as Add).call(client.middlewareStack, meter, { step: 'initialize', name: 'meterCapacity' });
  const billed = async <T>(read: () => Promise<T>): Promise<[T, number]> => {
    units.length = 0;
    const value = await read();
    return [value, units.reduce((sum, n) => sum + n, 0)];
  };
  try {
    const storage = new DynamoDBStorage({ client, tableName });
    const [roster, rcuPerRosterRead] = await billed(() => storage.getRoster(group));
    const [rosterDigest, rcuPerDigestRead] = await billed(() => storage.getRosterDigest(group));
    return { rosterMembers: roster.members.length, rosterCorruptMembers: roster.corrupt.length, rcuPerRosterRead, rosterDigest, rcuPerDigestRead };
  } finally {
    client.destroy();
  }
}

/** A DynamoDB client for each worker, as in production. */
function dynamoDBClients(endpoint: string, tableName: string): { storageFor: (i: number) => Storage; destroy(): void } {
  const clients: DynamoDBClient[] = [];
  return {
    storageFor: () => {
      const own = new DynamoDBClient({ region: 'us-east-1', endpoint, credentials: LOCAL_CREDENTIALS });
      clients.push(own);
      return new DynamoDBStorage({ client: own, tableName });
    },
    destroy: () => {
      for (const own of clients) own.destroy();
    },
  };
}

async function openDynamoDB(): Promise<Opened> {
  const script = fileURLToPath(new URL('./dynalite-child.ts', import.meta.url));
  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', script], { cwd: fileURLToPath(new URL('..', import.meta.url)), stdio: ['pipe', 'pipe', 'inherit'] });
  const line = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once('line', resolve);
    child.once('exit', (code) => reject(new Error(`dynalite exited with ${code} before it listened`)));
  });
  const { endpoint } = JSON.parse(line) as { endpoint: string };
  const client = new DynamoDBClient({ region: 'us-east-1', endpoint, credentials: LOCAL_CREDENTIALS });
  const tableName = 'leasehold-scale';
  const storage = new DynamoDBStorage({ client, tableName });
  await storage.createTable();
  const perWorker = dynamoDBClients(endpoint, tableName);
  return {
    storage,
    storageFor: perWorker.storageFor,
    location: { backend: 'dynamodb', endpoint, tableName },
    ...(child.pid === undefined ? {} : { serverPid: child.pid }),
    inspect: (group) => inspectDynamoDB(endpoint, tableName, group),
    close: async () => {
      perWorker.destroy();
      client.destroy();
      child.stdin!.end();
      await new Promise((resolve) => child.once('exit', resolve));
    },
  };
}

export const OPEN: Record<Backend, () => Promise<Opened>> = { postgres: openPostgres, redis: openRedis, dynamodb: openDynamoDB };

/**
 * Opens clients of the records `OPEN` made, from another process: a pool of `postgresPool` connections
 * (default 16) on PostgreSQL, one pipelined connection on Redis, a client per worker on DynamoDB.
 */
export async function attach(location: Location, options: { postgresPool?: number } = {}): Promise<Attached> {
  switch (location.backend) {
    case 'postgres': {
      const pool = await connectPostgres(options.postgresPool ?? POSTGRES_POOL);
      const storage = new PostgresStorage({ pool, schema: location.schema });
      return {
        storage,
        close: async () => {
          await storage.close();
          await pool.end();
        },
      };
    }
    case 'redis': {
      const client = await connectRedis();
      const storage = new RedisStorage({ client, keyPrefix: location.keyPrefix });
      return {
        storage,
        close: async () => {
          await storage.close();
          client.disconnect();
        },
      };
    }
    case 'dynamodb': {
      const client = new DynamoDBClient({ region: 'us-east-1', endpoint: location.endpoint, credentials: LOCAL_CREDENTIALS });
      const perWorker = dynamoDBClients(location.endpoint, location.tableName);
      return {
        storage: new DynamoDBStorage({ client, tableName: location.tableName }),
        storageFor: perWorker.storageFor,
        close: async () => {
          perWorker.destroy();
          client.destroy();
        },
      };
    }
  }
}
