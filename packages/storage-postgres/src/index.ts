export { PostgresStorage, type PostgresStorageOptions, type MigrationResult } from './postgres-storage.js';
export { SCHEMA_VERSION } from './schema.js';
export type { TransactionContext, TransactionOptions } from './transaction.js';
export { createFenceTable, fencedWrite, type Fence, type FencedWriteOptions, type FencedWriteResult, type FenceTableOptions } from './fence.js';
