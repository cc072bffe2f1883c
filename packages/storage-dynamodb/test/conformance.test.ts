import { afterAll, beforeAll, describe, it } from 'vitest';
import { runConformanceSuite } from '@leasehold/core/testing';
import type { Storage } from '@leasehold/core';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { RunningDynalite } from '@leasehold/local-stack';
import { DynamoDBStorage } from '../src/index.js';
import { localClient, randomTableName, startLocalDynamo } from './support.js';

let dynalite: RunningDynalite;
const tableName = randomTableName('conformance');
const clients = new Map<Storage, DynamoDBClient>();

beforeAll(async () => {
  dynalite = await startLocalDynamo();
  const client = localClient(dynalite.endpoint);
  try {
    await new DynamoDBStorage({ client, tableName }).createTable();
  } finally {
    client.destroy();
  }
});

afterAll(async () => {
  await dynalite?.close();
});

runConformanceSuite(
  { describe, it },
  {
    name: 'DynamoDBStorage',
    // A client per storage, as separate worker processes would have.
    createStorage: async () => {
      const client = localClient(dynalite.endpoint);
      const storage = new DynamoDBStorage({ client, tableName });
      clients.set(storage, client);
      return storage;
    },
    closeStorage: async (storage) => {
      clients.get(storage)?.destroy();
      clients.delete(storage);
    },
    timeoutMs: 120_000,
  },
);
