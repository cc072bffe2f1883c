export { DynamoDBStorage, type DynamoDBStorageOptions } from './dynamodb-storage.js';
export { createTable, checkTable, type CreateTableOptions } from './schema.js';
