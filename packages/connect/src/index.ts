export {
  parseStorageUrl,
  hidePassword,
  type StorageTarget,
  type StorageKind,
  type PostgresTarget,
  type RedisTarget,
  type DynamoDBTarget,
  type MemoryTarget,
} from './url.js';
export {
  openStorage,
  storageOf,
  messageOf,
  DEFAULT_CONNECT_TIMEOUT_MS,
  DEFAULT_REQUEST_TIMEOUT_MS,
  type OpenStorageOptions,
  type OpenedStorage,
  type OpenedPostgres,
  type OpenedRedis,
  type OpenedDynamoDB,
  type OpenedMemory,
  type OpenedFor,
  type SetupResult,
} from './open.js';
export { openStorageFromEnv, storageUrlFromEnv, STORAGE_ENV, type StorageFromEnvOptions } from './env.js';
