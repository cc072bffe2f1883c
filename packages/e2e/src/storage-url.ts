/**
 * Opens a `Storage` from a URL, the way the `leasehold` CLI spells them: `postgres://...?schema=`,
 * `redis://...?prefix=`, `dynamodb://TABLE?region=&endpoint=`. The CLI's parser is not exported by a
 * package, so this is a small one of the same syntax. {@link prepareStorage} gives a run its own space
 * (a fresh schema or key prefix) and creates what the backend needs, so that runs never share records.
 */
import type { Storage } from '@leasehold/core';
import { LOCAL_CREDENTIALS } from './kinesis.js';

/** The backends a URL can name. */
export type StorageKind = 'postgres' | 'redis' | 'dynamodb';

/** An open storage and the clients behind it. */
export interface OpenStorage extends AsyncDisposable {
  readonly kind: StorageKind;
  readonly storage: Storage;
  /** The URL without any password, for messages. */
  readonly display: string;
  /** Creates what the adapter needs (Postgres tables, the DynamoDB table); harmless when they exist. */
  prepare(): Promise<unknown>;
  close(): Promise<void>;
}

/** The backend a storage URL names, or an error that lists the accepted forms. */
export function storageKindOf(raw: string): StorageKind {
  const protocol = URL.canParse(raw) ? new URL(raw).protocol : '';
  if (protocol === 'postgres:' || protocol === 'postgresql:') return 'postgres';
  if (protocol === 'redis:' || protocol === 'rediss:') return 'redis';
  if (protocol === 'dynamodb:') return 'dynamodb';
  throw new Error(`storage URL "${hidePassword(raw)}" is not postgres://..., redis://... or dynamodb://TABLE?endpoint=...&region=...`);
}

/** The URL with any password replaced by `***`. */
export function hidePassword(raw: string): string {
  if (!URL.canParse(raw)) return raw;
  const url = new URL(raw);
  if (url.password !== '') url.password = '***';
  return url.toString();
}

// Each backend's client and adapter are loaded only when a URL names it: a worker starts faster.

/** Opens the storage a URL names. Redis connects at once, so an unreachable server fails here. */
export async function openStorage(raw: string): Promise<OpenStorage> {
  const kind = storageKindOf(raw);
  const url = new URL(raw);
  const display = hidePassword(raw);
  if (kind === 'postgres') {
    const schema = take(url, 'schema');
    const [{ default: pg }, { PostgresStorage }] = await Promise.all([import('pg'), import('@leasehold/storage-postgres')]);
    const pool = new pg.Pool({ connectionString: url.toString(), max: 4, connectionTimeoutMillis: 5_000, query_timeout: 10_000 });
    pool.on('error', () => undefined);
    const storage = new PostgresStorage({ pool, schema });
    const prepare = (): Promise<unknown> => storage.migrate();
    const close = async (): Promise<void> => {
      await storage.close();
      await pool.end();
    };
    return { kind, storage, display, prepare, close, [Symbol.asyncDispose]: close };
  }
  if (kind === 'redis') {
    const keyPrefix = take(url, 'prefix');
    const [{ Redis }, { RedisStorage }] = await Promise.all([import('ioredis'), import('@leasehold/storage-redis')]);
    const client = new Redis(url.toString(), { lazyConnect: true, connectTimeout: 5_000, commandTimeout: 10_000, maxRetriesPerRequest: 1 });
    client.on('error', () => undefined);
    try {
      await client.connect();
    } catch (error) {
      client.disconnect();
      throw new Error(`cannot reach Redis at ${display}: ${(error as Error).message}`, { cause: error });
    }
    const storage = new RedisStorage({ client, keyPrefix });
    const close = async (): Promise<void> => {
      await storage.close();
      client.disconnect();
    };
    return { kind, storage, display, prepare: async () => undefined, close, [Symbol.asyncDispose]: close };
  }
  const tableName = decodeURIComponent(url.hostname);
  const endpoint = take(url, 'endpoint');
  const [{ DynamoDBClient }, { DynamoDBStorage }] = await Promise.all([import('@aws-sdk/client-dynamodb'), import('@leasehold/storage-dynamodb')]);
  const client = new DynamoDBClient({
    region: take(url, 'region') ?? 'us-east-1',
    ...(endpoint === undefined ? {} : { endpoint, credentials: LOCAL_CREDENTIALS }),
  });
  const storage = new DynamoDBStorage({ client, tableName });
  const close = async (): Promise<void> => client.destroy();
  return { kind, storage, display, prepare: () => storage.createTable(), close, [Symbol.asyncDispose]: close };
}

/**
 * Gives the run `runId` its own space in the backend and creates what the adapter needs there: a fresh
 * schema migrated in Postgres, a fresh key prefix in Redis, the table in DynamoDB. Returns the URL every
 * process of the run opens.
 */
export async function prepareStorage(raw: string, runId: string): Promise<string> {
  const kind = storageKindOf(raw);
  const url = new URL(raw);
  if (kind === 'postgres' && !url.searchParams.has('schema')) url.searchParams.set('schema', `leasehold_e2e_${runId}`);
  if (kind === 'redis' && !url.searchParams.has('prefix')) url.searchParams.set('prefix', `leasehold-e2e:${runId}:`);
  const prepared = url.toString();
  await using opened = await openStorage(prepared);
  await opened.prepare();
  // One read proves the backend answers before any worker starts.
  await opened.storage.listLeases(`probe-${runId}`);
  return prepared;
}

function take(url: URL, name: string): string | undefined {
  const value = url.searchParams.get(name) ?? undefined;
  url.searchParams.delete(name);
  return value;
}
