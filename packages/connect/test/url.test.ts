import { InvalidConfigError } from '@leasehold/core';
import { describe, expect, it } from 'vitest';
import { hidePassword, parseStorageUrl, storageUrlFromEnv } from '../src/index.js';

describe('parseStorageUrl', () => {
  it("takes the adapter's options out of a Postgres URL and leaves the rest for pg", () => {
    const target = parseStorageUrl('postgres://app:secret@db:5432/prod?schema=leasehold&sslmode=require&leaseTable=l');
    expect(target).toEqual({
      kind: 'postgres',
      connectionString: 'postgres://app:secret@db:5432/prod?sslmode=require',
      schema: 'leasehold',
      leaseTable: 'l',
      leaderTable: undefined,
      migrationsTable: undefined,
      rosterTable: undefined,
      memberTable: undefined,
      display: 'postgres://app:***@db:5432/prod?schema=leasehold&sslmode=require&leaseTable=l',
    });
  });

  it('takes the member and roster table names of a Postgres URL for the adapter', () => {
    expect(parseStorageUrl('postgres://db/prod?memberTable=team&rosterTable=old_rosters')).toMatchObject({
      kind: 'postgres',
      connectionString: 'postgres://db/prod',
      memberTable: 'team',
      rosterTable: 'old_rosters',
    });
  });

  it('reads the key prefix of a Redis URL, empty included', () => {
    expect(parseStorageUrl('redis://127.0.0.1:6379/2?prefix=orders:')).toMatchObject({ kind: 'redis', connectionString: 'redis://127.0.0.1:6379/2', keyPrefix: 'orders:' });
    expect(parseStorageUrl('rediss://cache?prefix=')).toMatchObject({ kind: 'redis', keyPrefix: '' });
    expect(parseStorageUrl('redis://cache')).toMatchObject({ kind: 'redis', keyPrefix: undefined });
  });

  it('reads the table, region and endpoint of a DynamoDB URL', () => {
    expect(parseStorageUrl('dynamodb://leasehold?region=eu-west-1&endpoint=http%3A%2F%2F127.0.0.1%3A8000')).toEqual({
      kind: 'dynamodb',
      tableName: 'leasehold',
      region: 'eu-west-1',
      endpoint: 'http://127.0.0.1:8000',
      display: 'dynamodb://leasehold?region=eu-west-1&endpoint=http%3A%2F%2F127.0.0.1%3A8000',
    });
  });

  it('takes memory: and memory:// and refuses anything after them', () => {
    expect(parseStorageUrl('memory:')).toEqual({ kind: 'memory', display: 'memory:' });
    expect(parseStorageUrl('memory://')).toEqual({ kind: 'memory', display: 'memory:' });
    expect(() => parseStorageUrl('memory://shared')).toThrow('[connect] storage URL "memory://shared" has a host, path or query; write memory:');
  });

  it.each([
    ['ftp://example/x', '[connect] storage URL "ftp://example/x" has unknown scheme "ftp:"; expected postgres://, redis://, dynamodb:// or memory:'],
    ['memory', '[connect] storage URL "memory" is not a URL; expected postgres://..., redis://..., dynamodb://TABLE?region=... or memory:'],
    ['postgres://u:pw@db/x?schema=a&schema=b', '[connect] storage URL "postgres://u:***@db/x?schema=a&schema=b" gives schema 2 times'],
    ['redis://cache/orders', '[connect] storage URL "redis://cache/orders" has path "/orders"; a Redis URL\'s path is a database number'],
    ['dynamodb://t1?table=x', '[connect] storage URL "dynamodb://t1?table=x" has unknown parameter "table"; expected region and endpoint'],
  ])('refuses %s with an InvalidConfigError naming it, its password hidden', (url, message) => {
    expect(() => parseStorageUrl(url)).toThrow(InvalidConfigError);
    expect(() => parseStorageUrl(url)).toThrow(message);
  });

  it('hides a password in anything printed', () => {
    expect(hidePassword('redis://:hunter2@cache:6379')).toBe('redis://:***@cache:6379');
    expect(hidePassword('postgres://app@db/prod')).toBe('postgres://app@db/prod');
  });

  it('hides a password given as a query parameter, as libpq and pg take one', () => {
    expect(hidePassword('postgres://app@db/prod?password=hunter2&schema=s')).toBe('postgres://app@db/prod?password=***&schema=s');
    expect(hidePassword('postgres://app:pw@db/prod?sslpassword=key-secret')).toBe('postgres://app:***@db/prod?sslpassword=***');
    expect(parseStorageUrl('postgres://app@db/prod?password=hunter2').display).not.toContain('hunter2');
  });
});

describe('storageUrlFromEnv', () => {
  it('reads LEASEHOLD_STORAGE', () => {
    expect(storageUrlFromEnv({ env: { LEASEHOLD_STORAGE: 'redis://cache:6379' } })).toBe('redis://cache:6379');
  });

  it('uses the fallback only when the variable is unset or empty', () => {
    expect(storageUrlFromEnv({ env: {}, fallback: 'memory:' })).toBe('memory:');
    expect(storageUrlFromEnv({ env: { LEASEHOLD_STORAGE: '' }, fallback: 'memory:' })).toBe('memory:');
    expect(storageUrlFromEnv({ env: { LEASEHOLD_STORAGE: 'redis://cache' }, fallback: 'memory:' })).toBe('redis://cache');
  });

  it('refuses an unset variable without a fallback, so that a deployment never runs on memory by mistake', () => {
    expect(() => storageUrlFromEnv({ env: {} })).toThrow(InvalidConfigError);
    expect(() => storageUrlFromEnv({ env: {} })).toThrow(
      '[connect] LEASEHOLD_STORAGE is not set; set it to a storage URL: postgres://..., redis://..., dynamodb://TABLE?region=... or memory:',
    );
  });

  it('names the variable when its URL is malformed', () => {
    expect(() => storageUrlFromEnv({ env: { LEASEHOLD_STORAGE: 'postgres' } })).toThrow(
      '[connect] LEASEHOLD_STORAGE: storage URL "postgres" is not a URL; expected postgres://..., redis://..., dynamodb://TABLE?region=... or memory:',
    );
  });
});
