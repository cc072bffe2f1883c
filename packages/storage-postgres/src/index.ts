export { PostgresStorage, type PostgresStorageOptions, type MigrationResult } from './postgres-storage.js';
export { SCHEMA_VERSION } from './schema.js';
export type { TransactionContext, TransactionOptions } from './transaction.js';
