/**
 * Storage URLs: which backend, where, and the adapter's options, from one string an operator can paste.
 * Options the adapter understands are taken out of the query; the rest is left for the client library
 * (`sslmode=` for pg, `family=` for ioredis), so nothing the user wrote is silently dropped.
 */
import { InvalidConfigError } from '@leasehold/core';
import { describeValue } from '@leasehold/core/adapter';

export const PKG = 'connect';

/** A PostgreSQL location: the connection string for `pg.Pool` and the adapter's table names. */
export interface PostgresTarget {
  readonly kind: 'postgres';
  /** The URL as given, without the adapter's own query parameters (it may carry a password). */
  readonly connectionString: string;
  readonly schema: string | undefined;
  readonly leaseTable: string | undefined;
  readonly leaderTable: string | undefined;
  readonly migrationsTable: string | undefined;
  readonly rosterTable: string | undefined;
  readonly memberTable: string | undefined;
  /** The URL with its password hidden, for messages. */
  readonly display: string;
}

/** A Redis location: the URL for ioredis and the adapter's key prefix. */
export interface RedisTarget {
  readonly kind: 'redis';
  readonly connectionString: string;
  readonly keyPrefix: string | undefined;
  readonly display: string;
}

/** A DynamoDB table, with an optional region and endpoint (a local emulator, a VPC endpoint). */
export interface DynamoDBTarget {
  readonly kind: 'dynamodb';
  readonly tableName: string;
  readonly region: string | undefined;
  readonly endpoint: string | undefined;
  readonly display: string;
}

/** A `MemoryStorage` of this process: for tests and for trying a program out on one machine. */
export interface MemoryTarget {
  readonly kind: 'memory';
  readonly display: string;
}

/** Where a group's records live, as parsed from a storage URL. */
export type StorageTarget = PostgresTarget | RedisTarget | DynamoDBTarget | MemoryTarget;

/** The backends a storage URL can name. */
export type StorageKind = StorageTarget['kind'];

const POSTGRES_OPTIONS = ['schema', 'leaseTable', 'leaderTable', 'migrationsTable', 'rosterTable', 'memberTable'] as const;
const DYNAMODB_OPTIONS = new Set(['region', 'endpoint']);

function bad(url: string, why: string): InvalidConfigError {
  return new InvalidConfigError(`[${PKG}] storage URL ${describeValue(hidePassword(url))} ${why}`);
}

/** Query parameters that carry a secret: libpq and pg take a password (and a client key's) there too. */
const SECRET_PARAMS = ['password', 'sslpassword'];

/** The URL with any password (in its user part or its query) replaced by `***`, safe to print. */
export function hidePassword(url: string): string {
  try {
    const parsed = new URL(url);
    const secrets = SECRET_PARAMS.filter((name) => parsed.searchParams.has(name));
    if (parsed.password === '' && secrets.length === 0) return url;
    if (parsed.password !== '') parsed.password = '***';
    for (const name of secrets) parsed.searchParams.set(name, '***');
    return parsed.toString();
  } catch {
    return url.replace(/\/\/([^/@:]*):[^/@]*@/, '//$1:***@').replace(/([?&](?:ssl)?password=)[^&#]*/gi, '$1***');
  }
}

function takeParam(url: URL, name: string, raw: string): string | undefined {
  const values = url.searchParams.getAll(name);
  url.searchParams.delete(name);
  if (values.length > 1) throw bad(raw, `gives ${name} ${values.length} times`);
  const [value] = values;
  if (value === '') throw bad(raw, `has an empty ${name}`);
  return value;
}

/**
 * Parses `postgres://`, `postgresql://`, `redis://`, `rediss://`, `dynamodb://TABLE` and `memory:` URLs.
 * Throws an `InvalidConfigError` naming the URL (its password hidden) for anything else.
 */
export function parseStorageUrl(raw: string): StorageTarget {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw bad(raw, 'is not a URL; expected postgres://..., redis://..., dynamodb://TABLE?region=... or memory:');
  }
  switch (url.protocol) {
    case 'postgres:':
    case 'postgresql:':
      return postgresTarget(url, raw);
    case 'redis:':
    case 'rediss:':
      return redisTarget(url, raw);
    case 'dynamodb:':
      return dynamoTarget(url, raw);
    case 'memory:':
      if (url.host !== '' || (url.pathname !== '' && url.pathname !== '/') || url.search !== '') throw bad(raw, 'has a host, path or query; write memory:');
      return { kind: 'memory', display: 'memory:' };
    default:
      throw bad(raw, `has unknown scheme ${describeValue(url.protocol)}; expected postgres://, redis://, dynamodb:// or memory:`);
  }
}

function postgresTarget(url: URL, raw: string): PostgresTarget {
  if (url.hostname === '' && !url.searchParams.has('host')) throw bad(raw, 'names no host');
  const options = Object.fromEntries(POSTGRES_OPTIONS.map((name) => [name, takeParam(url, name, raw)])) as Record<
    (typeof POSTGRES_OPTIONS)[number],
    string | undefined
  >;
  const connectionString = url.toString();
  return { kind: 'postgres', connectionString, ...options, display: hidePassword(raw) };
}

function redisTarget(url: URL, raw: string): RedisTarget {
  if (url.hostname === '') throw bad(raw, 'names no host');
  if (!/^\/?\d*$/.test(url.pathname)) throw bad(raw, `has path ${describeValue(url.pathname)}; a Redis URL's path is a database number`);
  const keyPrefix = url.searchParams.has('prefix') ? (url.searchParams.get('prefix') ?? '') : undefined;
  url.searchParams.delete('prefix');
  const connectionString = url.toString();
  return { kind: 'redis', connectionString, keyPrefix, display: hidePassword(raw) };
}

function dynamoTarget(url: URL, raw: string): DynamoDBTarget {
  const tableName = decodeURIComponent(url.hostname);
  if (tableName === '') throw bad(raw, 'names no table; write dynamodb://TABLE?region=REGION');
  if (url.pathname !== '' && url.pathname !== '/') throw bad(raw, `has path ${describeValue(url.pathname)}; the table is the host part`);
  if (url.username !== '' || url.password !== '' || url.port !== '') {
    throw bad(raw, 'has a user, password or port; credentials come from the AWS default chain, the endpoint from ?endpoint=');
  }
  for (const name of url.searchParams.keys()) {
    if (!DYNAMODB_OPTIONS.has(name)) throw bad(raw, `has unknown parameter ${describeValue(name)}; expected region and endpoint`);
  }
  const region = takeParam(url, 'region', raw);
  const endpoint = takeParam(url, 'endpoint', raw);
  if (endpoint !== undefined) {
    let parsed: URL | undefined;
    try {
      parsed = new URL(endpoint);
    } catch {
      parsed = undefined;
    }
    if (parsed === undefined || (parsed.protocol !== 'http:' && parsed.protocol !== 'https:')) {
      throw bad(raw, `has endpoint ${describeValue(endpoint)}, which is not an http:// or https:// URL`);
    }
  }
  return { kind: 'dynamodb', tableName, region, endpoint, display: raw };
}
