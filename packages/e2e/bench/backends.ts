/**
 * The real backends the scale and birth benchmarks run against: PostgreSQL on 127.0.0.1:5432 (database
 * `test`, or PGHOST/PGPORT/PGUSER/PGDATABASE), Redis on 127.0.0.1:6379 (or REDIS_HOST/REDIS_PORT), and
 * dynalite in a child process, each opened on a fresh schema, key prefix or table and dropped on close.
 */
import { DynamoDBClient, GetItemCommand, PutItemCommand, type AttributeValue } from '@aws-sdk/client-dynamodb';
import type { Storage } from '@leasehold/core';
import { DynamoDBStorage } from '@leasehold/storage-dynamodb';
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

export interface Opened {
  storage: Storage;
  /**
   * The storage worker `i` uses, when it differs from `storage`. DynamoDB: a client per worker, as in
   * production; one shared client's socket pool queues every worker's heartbeat behind the others' listings.
   */
  storageFor?: (i: number) => Storage;
  /** Extra figures only this backend can give (DynamoDB: the roster item's size and billed units). */
  inspect?: (group: string) => Promise<Record<string, unknown>>;
  close(): Promise<void>;
}

export const runId = `s${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;

async function openPostgres(): Promise<Opened> {
  const config = { host: process.env.PGHOST ?? '127.0.0.1', port: Number(process.env.PGPORT ?? 5432), database: process.env.PGDATABASE ?? 'test', user: process.env.PGUSER ?? 'root' };
  const pool = new pg.Pool({ ...config, max: 16, connectionTimeoutMillis: 5_000 });
  pool.on('error', () => undefined);
  try {
    await pool.query('SELECT 1');
  } catch (error) {
    await pool.end();
    throw new Error(
      `PostgreSQL is not reachable at ${config.host}:${config.port} (database ${config.database}): ${(error as Error).message}. Start one and set PGHOST, PGPORT, PGUSER and PGDATABASE`,
      { cause: error },
    );
  }
  const schema = `leasehold_scale_${runId}`;
  const storage = new PostgresStorage({ pool, schema });
  await storage.migrate();
  return {
    storage,
    close: async () => {
      await storage.close();
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined);
      await pool.end();
    },
  };
}

async function openRedis(): Promise<Opened> {
  const host = process.env.REDIS_HOST ?? '127.0.0.1';
  const port = Number(process.env.REDIS_PORT ?? 6379);
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
  const keyPrefix = `leasehold-scale:${runId}:`;
  const storage = new RedisStorage({ client, keyPrefix });
  return {
    storage,
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

/** DynamoDB's size of an item: names and values, by its documented rules. */
function itemBytes(item: Record<string, AttributeValue>): number {
  const value = (v: AttributeValue): number => {
    if (v.S !== undefined) return Buffer.byteLength(v.S, 'utf8');
    if (v.N !== undefined) return Math.ceil((v.N.replace(/[-.]/g, '').replace(/^0+/, '').length + 1) / 2) + 1;
    if (v.M !== undefined) return 3 + Object.entries(v.M).reduce((sum, [name, inner]) => sum + 1 + Buffer.byteLength(name, 'utf8') + value(inner), 0);
    if (v.BOOL !== undefined || v.NULL !== undefined) return 1;
    return Buffer.byteLength(JSON.stringify(v), 'utf8');
  };
  return Object.entries(item).reduce((sum, [name, v]) => sum + Buffer.byteLength(name, 'utf8') + value(v), 0);
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
  const workerClients: DynamoDBClient[] = [];
  return {
    storage,
    storageFor: () => {
      const own = new DynamoDBClient({ region: 'us-east-1', endpoint, credentials: LOCAL_CREDENTIALS });
      workerClients.push(own);
      return new DynamoDBStorage({ client: own, tableName });
    },
    // The roster item as stored, its size by DynamoDB's rules, and the write units dynalite bills for a
    // write of an item that size (the same attributes put under another key).
    inspect: async (group) => {
      const { Item } = await client.send(new GetItemCommand({ TableName: tableName, Key: { pk: { S: group }, sk: { S: 'roster' } }, ConsistentRead: true, ReturnConsumedCapacity: 'TOTAL' }));
      if (!Item) return { rosterItem: null };
      const probe = await client.send(
        new PutItemCommand({ TableName: tableName, Item: { ...Item, pk: { S: `${group}-size-probe` } }, ReturnConsumedCapacity: 'TOTAL' }),
      );
      const bytes = itemBytes(Item);
      return {
        rosterItemBytes: bytes,
        rosterMembers: Object.keys(Item).filter((name) => name.startsWith('m:')).length,
        wcuPerHeartbeatComputed: Math.ceil(bytes / 1024),
        wcuPerHeartbeatDynalite: probe.ConsumedCapacity?.CapacityUnits ?? null,
      };
    },
    close: async () => {
      for (const own of workerClients) own.destroy();
      client.destroy();
      child.stdin!.end();
      await new Promise((resolve) => child.once('exit', resolve));
    },
  };
}

export const OPEN: Record<Backend, () => Promise<Opened>> = { postgres: openPostgres, redis: openRedis, dynamodb: openDynamoDB };
