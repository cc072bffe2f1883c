/**
 * Opens the client and the adapter a storage URL names, with the timeouts a worker needs, and closes both
 * in the right order. Each backend's client library and adapter are optional peer dependencies, loaded only
 * when a URL names that backend: a program on Redis installs neither pg nor the AWS SDK, and starts faster.
 */
import type { DynamoDBClient, DynamoDBClientConfig } from '@aws-sdk/client-dynamodb';
import { InvalidConfigError, MemoryStorage, StorageUnavailableError, type Storage } from '@leasehold/core';
import { checkContractVersion, describeValue, optionKeys, refuseUnknownOptions } from '@leasehold/core/adapter';
import type { DynamoDBStorage } from '@leasehold/storage-dynamodb';
import type { PostgresStorage } from '@leasehold/storage-postgres';
import type { RedisStorage } from '@leasehold/storage-redis';
import type { Redis, RedisOptions } from 'ioredis';
import type pg from 'pg';
import { parseStorageUrl, PKG, type DynamoDBTarget, type MemoryTarget, type PostgresTarget, type RedisTarget, type StorageTarget } from './url.js';

/** How long a connection may take to open before the request fails, unless `connectTimeoutMs` says otherwise. */
export const DEFAULT_CONNECT_TIMEOUT_MS = 5_000;
/** How long one request may take before it fails (its outcome unknown), unless `requestTimeoutMs` says otherwise. */
export const DEFAULT_REQUEST_TIMEOUT_MS = 10_000;

/** Options of {@link openStorage}. Every backend gets the same timeouts; the client settings can be overridden per backend. */
export interface OpenStorageOptions {
  /** How long opening a connection may take. Default 5,000. */
  connectTimeoutMs?: number;
  /**
   * How long one request may take (pg `query_timeout`, ioredis `commandTimeout`, the AWS SDK's
   * `requestTimeout`): a stalled backend then gives an `unknown` outcome instead of a hung worker. Keep it
   * below the group's lease duration. Default 10,000.
   */
  requestTimeoutMs?: number;
  /**
   * Whether a lost Redis connection is opened again. Default `true`, what a worker wants (a Redis restart
   * must not end it); `false` for a tool that should fail at once, as the `leasehold` command line does.
   */
  reconnect?: boolean;
  /** The most connections of the Postgres pool. Default 10 (pg's own default). */
  maxConnections?: number;
  /** The name the connections give the server (pg `application_name`, ioredis `connectionName`). */
  applicationName?: string;
  /** Settings for `pg.Pool`, applied over the ones above. */
  postgres?: pg.PoolConfig;
  /** Settings for the ioredis client, applied over the ones above. */
  redis?: RedisOptions;
  /** Settings for the `DynamoDBClient`, applied over the ones above (credentials, retries). */
  dynamodb?: DynamoDBClientConfig;
}

/** What every opened storage has: the adapter, what to show of the URL, and how to set up and close it. */
interface OpenedBase extends AsyncDisposable {
  /** The URL without any password, for messages. */
  readonly display: string;
  /**
   * Creates what the backend needs and records its schema version: `migrate()` of `PostgresStorage`,
   * `createTable()` of `DynamoDBStorage`; nothing for Redis and memory. Harmless when already done, and
   * safe when many processes run it at once.
   */
  setup(): Promise<SetupResult>;
  /** Closes the adapter (its change feed), then the client this function created. */
  close(): Promise<void>;
}

/** An open Postgres storage and the pool behind it (for checks the storage contract has no word for). */
export interface OpenedPostgres extends OpenedBase {
  readonly kind: 'postgres';
  readonly target: PostgresTarget;
  readonly storage: PostgresStorage;
  readonly pool: pg.Pool;
}

/** An open Redis storage and its client. */
export interface OpenedRedis extends OpenedBase {
  readonly kind: 'redis';
  readonly target: RedisTarget;
  readonly storage: RedisStorage;
  readonly client: Redis;
}

/** An open DynamoDB storage and its client. */
export interface OpenedDynamoDB extends OpenedBase {
  readonly kind: 'dynamodb';
  readonly target: DynamoDBTarget;
  readonly storage: DynamoDBStorage;
  readonly client: DynamoDBClient;
}

/** A new `MemoryStorage`, private to this process. */
export interface OpenedMemory extends OpenedBase {
  readonly kind: 'memory';
  readonly target: MemoryTarget;
  readonly storage: MemoryStorage;
}

/** An open storage of any backend; narrow it on `kind` to reach the client. */
export type OpenedStorage = OpenedPostgres | OpenedRedis | OpenedDynamoDB | OpenedMemory;

/** The opened storage of a target's backend: `OpenedRedis` for a `RedisTarget`. */
export type OpenedFor<T extends StorageTarget> = Extract<OpenedStorage, { readonly kind: T['kind'] }>;

/** What {@link OpenedBase.setup} did. */
export type SetupResult =
  | { readonly kind: 'postgres'; /** 0 when the tables did not exist. */ readonly fromVersion: number; readonly toVersion: number }
  | { readonly kind: 'dynamodb'; readonly tableName: string }
  | { readonly kind: 'redis' | 'memory' };

/** The adapter of any opened storage, as the storage contract sees it. */
export function storageOf(opened: OpenedStorage): Storage {
  return opened.storage;
}

/**
 * Opens the storage a URL names (`postgres://`, `redis://`, `dynamodb://TABLE`, `memory:`; see
 * {@link parseStorageUrl}), or a target already parsed. Redis is connected at once, so an unreachable
 * server fails here with a `StorageUnavailableError`; Postgres and DynamoDB connect on the first request.
 */
export async function openStorage<T extends StorageTarget>(target: T, options?: OpenStorageOptions): Promise<OpenedFor<T>>;
export async function openStorage(url: string | StorageTarget, options?: OpenStorageOptions): Promise<OpenedStorage>;
export async function openStorage(url: string | StorageTarget, options: OpenStorageOptions = {}): Promise<OpenedStorage> {
  const target = typeof url === 'string' ? parseStorageUrl(url) : url;
  const settings = checkOptions(options);
  const opened = await openTarget(target, settings);
  // The adapters are peers: an installed one of another storage contract version than this core's is
  // refused here, with the error that names both, before anything reads or writes through it.
  try {
    checkContractVersion(opened.storage, `the ${target.kind} storage of ${target.display}`, PKG);
  } catch (error) {
    await opened.close().catch(() => undefined);
    throw error;
  }
  return opened;
}

async function openTarget(target: StorageTarget, settings: Settings): Promise<OpenedStorage> {
  switch (target.kind) {
    case 'postgres':
      return openPostgres(target, settings);
    case 'redis':
      return openRedis(target, settings);
    case 'dynamodb':
      return openDynamoDB(target, settings);
    case 'memory':
      return openMemory(target);
  }
}

type Settings = Required<Pick<OpenStorageOptions, 'connectTimeoutMs' | 'requestTimeoutMs' | 'reconnect' | 'maxConnections'>> & OpenStorageOptions;

/** The keys of {@link OpenStorageOptions}; the client settings under `postgres`, `redis` and `dynamodb` are their libraries' to check. */
export const OPEN_STORAGE_KEYS = optionKeys<OpenStorageOptions>({
  connectTimeoutMs: true,
  requestTimeoutMs: true,
  reconnect: true,
  maxConnections: true,
  applicationName: true,
  postgres: true,
  redis: true,
  dynamodb: true,
});

function checkOptions(options: OpenStorageOptions): Settings {
  if (typeof options !== 'object' || options === null) throw new InvalidConfigError(`[${PKG}] options must be an object, got ${describeValue(options)}`);
  refuseUnknownOptions(PKG, 'openStorage', options, OPEN_STORAGE_KEYS);
  const whole = (name: 'connectTimeoutMs' | 'requestTimeoutMs' | 'maxConnections', fallback: number): number => {
    const value = options[name] ?? fallback;
    if (!Number.isSafeInteger(value) || value < 1) throw new InvalidConfigError(`[${PKG}] ${name} must be a whole number of at least 1, got ${describeValue(value)}`);
    return value;
  };
  return {
    ...options,
    connectTimeoutMs: whole('connectTimeoutMs', DEFAULT_CONNECT_TIMEOUT_MS),
    requestTimeoutMs: whole('requestTimeoutMs', DEFAULT_REQUEST_TIMEOUT_MS),
    maxConnections: whole('maxConnections', 10),
    reconnect: options.reconnect ?? true,
  };
}

/** Loads a backend's modules, or says which packages to install for it. */
async function load<T>(scheme: string, packages: readonly string[], importer: () => Promise<T>): Promise<T> {
  try {
    return await importer();
  } catch (error) {
    if ((error as { code?: unknown }).code !== 'ERR_MODULE_NOT_FOUND') throw error;
    throw new InvalidConfigError(`[${PKG}] a ${scheme} URL needs the packages ${packages.join(' and ')}: npm install ${packages.join(' ')}`, { cause: error });
  }
}

function closer(first: () => Promise<void>, then: () => Promise<void> | void): () => Promise<void> {
  let closing: Promise<void> | undefined;
  return () =>
    (closing ??= (async () => {
      try {
        await first();
      } finally {
        await then();
      }
    })());
}

async function openPostgres(target: PostgresTarget, settings: Settings): Promise<OpenedPostgres> {
  const [{ default: pg }, { PostgresStorage }] = await load('postgres://', ['pg', '@leasehold/storage-postgres'], () =>
    Promise.all([import('pg'), import('@leasehold/storage-postgres')]),
  );
  const pool = new pg.Pool({
    connectionString: target.connectionString,
    max: settings.maxConnections,
    connectionTimeoutMillis: settings.connectTimeoutMs,
    query_timeout: settings.requestTimeoutMs,
    keepAlive: true,
    ...(settings.applicationName === undefined ? {} : { application_name: settings.applicationName }),
    ...settings.postgres,
  });
  // Idle connections of a restarting server are dropped by the pool; the error would otherwise end the process.
  pool.on('error', () => undefined);
  const storage = new PostgresStorage({
    pool,
    schema: target.schema,
    leaseTable: target.leaseTable,
    leaderTable: target.leaderTable,
    migrationsTable: target.migrationsTable,
    rosterTable: target.rosterTable,
    memberTable: target.memberTable,
  });
  const close = closer(() => storage.close(), () => pool.end());
  return {
    kind: 'postgres',
    target,
    storage,
    pool,
    display: target.display,
    setup: async () => ({ kind: 'postgres', ...(await storage.migrate()) }),
    close,
    [Symbol.asyncDispose]: close,
  };
}

async function openRedis(target: RedisTarget, settings: Settings): Promise<OpenedRedis> {
  const [{ Redis }, { RedisStorage }] = await load('redis://', ['ioredis', '@leasehold/storage-redis'], () =>
    Promise.all([import('ioredis'), import('@leasehold/storage-redis')]),
  );
  const client = new Redis(target.connectionString, {
    lazyConnect: true,
    connectTimeout: settings.connectTimeoutMs,
    commandTimeout: settings.requestTimeoutMs,
    // A command fails after one reconnect instead of waiting through twenty: the adapter reports it as an
    // unknown outcome and the worker decides, within its lease duration.
    maxRetriesPerRequest: 1,
    ...(settings.reconnect ? {} : { retryStrategy: () => null }),
    ...(settings.applicationName === undefined ? {} : { connectionName: settings.applicationName }),
    ...settings.redis,
  });
  let lastError: unknown;
  // Connection errors surface as failed commands; unhandled, the event would end the process.
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
  const close = closer(
    () => storage.close(),
    async () => {
      if (client.status === 'end') return;
      const ended = new Promise((resolve) => client.once('end', resolve));
      // QUIT lets the replies in flight arrive first; a client that is not connected is cut instead, or
      // QUIT would wait in its offline queue for a server that may never come back.
      if (client.status === 'ready') await client.quit().catch(() => client.disconnect());
      else client.disconnect();
      await ended;
    },
  );
  return {
    kind: 'redis',
    target,
    storage,
    client,
    display: target.display,
    setup: async () => ({ kind: 'redis' }),
    close,
    [Symbol.asyncDispose]: close,
  };
}

async function openDynamoDB(target: DynamoDBTarget, settings: Settings): Promise<OpenedDynamoDB> {
  const [{ DynamoDBClient }, { DynamoDBStorage }] = await load('dynamodb://', ['@aws-sdk/client-dynamodb', '@leasehold/storage-dynamodb'], () =>
    Promise.all([import('@aws-sdk/client-dynamodb'), import('@leasehold/storage-dynamodb')]),
  );
  const client = new DynamoDBClient({
    ...(target.region === undefined ? {} : { region: target.region }),
    ...(target.endpoint === undefined ? {} : { endpoint: target.endpoint }),
    requestHandler: { connectionTimeout: settings.connectTimeoutMs, requestTimeout: settings.requestTimeoutMs },
    ...settings.dynamodb,
  });
  const storage = new DynamoDBStorage({ client, tableName: target.tableName });
  const close = closer(() => storage.close(), () => client.destroy());
  return {
    kind: 'dynamodb',
    target,
    storage,
    client,
    display: target.display,
    setup: async () => {
      await storage.createTable();
      return { kind: 'dynamodb', tableName: target.tableName };
    },
    close,
    [Symbol.asyncDispose]: close,
  };
}

function openMemory(target: MemoryTarget): OpenedMemory {
  const storage = new MemoryStorage();
  const close = closer(() => storage.close(), () => undefined);
  return { kind: 'memory', target, storage, display: target.display, setup: async () => ({ kind: 'memory' }), close, [Symbol.asyncDispose]: close };
}

/** The message of an error, or of the first error inside an AggregateError (what Node gives for refused connections). */
export function messageOf(error: unknown): string {
  if (error instanceof AggregateError && error.errors.length > 0) return messageOf(error.errors[0]);
  if (error instanceof Error) return error.message || error.name;
  return String(error);
}
