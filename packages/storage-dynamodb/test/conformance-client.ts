/**
 * Opens `DynamoDBStorage` clients in whatever process imports it, each with a DynamoDB client of its own:
 * the conformance suite's cross-process mode runs its races from clients opened here.
 */
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { Storage } from '@leasehold/core';
import { DynamoDBStorage } from '../src/index.js';
import { localClient } from './support.js';

const clients = new Map<Storage, DynamoDBClient>();

export async function openClient(options: { endpoint: string; tableName: string }): Promise<Storage> {
  const client = localClient(options.endpoint);
  const storage = new DynamoDBStorage({ client, tableName: options.tableName });
  clients.set(storage, client);
  return storage;
}

export async function closeClient(storage: Storage): Promise<void> {
  clients.get(storage)?.destroy();
  clients.delete(storage);
}
