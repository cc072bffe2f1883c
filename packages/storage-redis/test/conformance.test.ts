import { randomUUID } from 'node:crypto';
import type { Storage } from '@leasehold/core';
import { runConformanceSuite } from '@leasehold/core/testing';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { RedisStorage } from '../src/index.js';
import { connectShared, deletePrefix } from './servers.js';

// A prefix of this run's own on the shared server, removed afterwards.
const keyPrefix = `leasehold-conformance-${randomUUID().slice(0, 8)}:`;
let client: Redis;

beforeAll(async () => {
  client = await connectShared();
});

afterAll(async () => {
  await deletePrefix(client, keyPrefix);
  await client.quit();
});

runConformanceSuite(
  { describe, it },
  {
    name: 'RedisStorage',
    createStorage: async () => new RedisStorage({ client, keyPrefix }),
    closeStorage: async (storage: Storage) => (storage as RedisStorage).close(),
    changeFeed: true,
  },
);
