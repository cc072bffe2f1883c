export { DynamoDBStorage, type DynamoDBStorageOptions } from './dynamodb-storage.js';
export { createTable, checkTable, type CreateTableOptions } from './schema.js';
export { encodeFencePosition, fenceAttributes, fencedUpdate, type FencedUpdateOptions, type FencedUpdateResult } from './fence.js';
