import { randomUUID } from 'node:crypto';
import type { Storage } from '@leasehold/core';
import { runConformanceSuite } from '@leasehold/core/testing';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { RedisStorage } from '../src/index.js';
import { groupKeys } from '../src/keys.js';
import { connectShared, corruptMember, deletePrefix, SHARED_HOST, SHARED_PORT } from './servers.js';

// A prefix of this run's own on the shared server, removed afterwards. Clients share one connection,
// except those the suite cuts off through its proxy, which have their own.
const keyPrefix = `leasehold-conformance-${randomUUID().slice(0, 8)}:`;
const shared = { host: SHARED_HOST, port: SHARED_PORT };
let client: Redis;
const ownConnections = new Map<Storage, Redis>();

beforeAll(async () => {
  client = await connectShared();
});

afterAll(async () => {
  await deletePrefix(client, keyPrefix);
  await client.quit();
});

runConformanceSuite(
  { describe, it, afterAll },
  {
    name: 'RedisStorage',
    createStorage: async () => new RedisStorage({ client, keyPrefix }),
    closeStorage: async (storage: Storage) => {
      await (storage as RedisStorage).close();
      ownConnections.get(storage)?.disconnect();
      ownConnections.delete(storage);
    },
    changeFeed: true,
    addressedHandovers: true,
    // A value that is not a lease, written by another program.
    corruptLease: async (group, leaseKey) => {
      await client.hset(groupKeys(keyPrefix, group).leases, leaseKey, 'not a lease');
    },
    // A member whose value is not a member, written with the next version of the group's counter.
    corruptMember: (group, workerId) => corruptMember(client, groupKeys(keyPrefix, group).roster, workerId),
    faults: {
      kind: 'proxy',
      upstream: () => shared,
      createStorage: async (through) => {
        const connection = new Redis({ host: through.host, port: through.port });
        connection.on('error', () => undefined);
        const storage = new RedisStorage({ client: connection, keyPrefix });
        ownConnections.set(storage, connection);
        return storage;
      },
      // ioredis sends a command again after a reconnect by default: this client does not, so that a cut
      // call fails and the adapter's own handling of the failure answers.
      createStorageWithoutResend: async (through) => {
        const connection = new Redis({ host: through.host, port: through.port, autoResendUnfulfilledCommands: false, maxRetriesPerRequest: 0 });
        connection.on('error', () => undefined);
        const storage = new RedisStorage({ client: connection, keyPrefix });
        ownConnections.set(storage, connection);
        return storage;
      },
    },
    crossProcess: {
      module: new URL('./conformance-client.ts', import.meta.url),
      closeExportName: 'closeClient',
      options: () => ({ ...shared, keyPrefix }),
      execArgv: ['--import', 'tsx'],
    },
  },
);
