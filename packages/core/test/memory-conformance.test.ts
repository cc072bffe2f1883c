import { describe, it } from 'vitest';
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
    corruptLease: async (group, leaseKey) => shared.corrupt(group, leaseKey),
    corruptMember: async (group, workerId) => shared.corruptMember(group, workerId),
    notApplicable: {
      faults: 'MemoryStorage has no connection to lose',
      crossProcess: 'MemoryStorage lives in one process',
    },
  },
);
