/**
 * Opens the backend a storage URL names, through `@leasehold/connect` as workers do, with what a person at
 * a terminal wants: one connection attempt, so that a backend that cannot be reached is a clear error
 * within seconds, not a command that hangs while the client retries.
 */
import { openStorage, type OpenedDynamoDB, type OpenedPostgres, type OpenedRedis, type OpenStorageOptions, type StorageTarget } from '@leasehold/connect';
import { InvalidConfigError } from '@leasehold/core';
import { PKG } from './pkg.js';

export { messageOf, storageOf } from '@leasehold/connect';

/** An open backend: the adapter, the raw client for checks the contract has no word for, and its closer. */
export type Backend = OpenedPostgres | OpenedRedis | OpenedDynamoDB;

const CLI_OPTIONS: OpenStorageOptions = {
  reconnect: false,
  maxConnections: 4,
  applicationName: 'leasehold-cli',
  // One retry: a throttled request is tried again, an unreachable endpoint is reported at once.
  dynamodb: { maxAttempts: 2 },
};

/**
 * Opens the backend a storage URL names. Redis is connected at once, so an unreachable server fails here.
 * A `memory:` URL is refused: such a store lives inside one process, never the command line's.
 */
export async function openBackend(target: StorageTarget): Promise<Backend> {
  if (target.kind === 'memory') {
    throw new InvalidConfigError(`[${PKG}] storage URL "memory:" names a store inside one process; the command line needs postgres://, redis:// or dynamodb://`);
  }
  return openStorage(target, CLI_OPTIONS);
}
