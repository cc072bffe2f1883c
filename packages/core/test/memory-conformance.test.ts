import { describe, expect, it } from 'vitest';
import { MemoryStorage } from '../src/index.js';
import { runConformanceSuite } from '../src/testing/index.js';

// One store shared by every client, as coordinators in one process share one MemoryStorage.
const shared = new MemoryStorage();

runConformanceSuite(
  { describe, it },
  {
    name: 'MemoryStorage',
    createStorage: async () => shared,
    changeFeed: true,
    addressedHandovers: true,
    corruptLease: async (group, leaseKey) => shared.corrupt(group, leaseKey),
    corruptMember: async (group, workerId) => shared.corruptMember(group, workerId),
    notApplicable: {
      faults: 'MemoryStorage has no connection to lose',
      crossProcess: 'MemoryStorage lives in one process',
    },
  },
);

describe('MemoryStorage close()', () => {
  it('ends every change-feed subscription and keeps the records', async () => {
    const changes: string[] = [];
    {
      await using storage = new MemoryStorage();
      await storage.subscribe('orders', (change) => changes.push(change.leaseKey));
      await storage.createLease({ group: 'orders', leaseKey: 'shard-1' });
      await storage.close();
      await storage.createLease({ group: 'orders', leaseKey: 'shard-2' });
      expect((await storage.listLeases('orders')).leases.map((lease) => lease.leaseKey)).toEqual(['shard-1', 'shard-2']);
    }
    expect(changes).toEqual(['shard-1']);
  });
});
