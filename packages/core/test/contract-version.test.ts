/**
 * The storage contract version: core refuses, where it is handed a storage, an adapter written for another
 * version of the contract, or one that declares none, with one error that names both versions, the adapter
 * and the upgrade notes.
 */
import { describe, expect, it } from 'vitest';
import {
  Checkpoint,
  Consumer,
  ContractVersionError,
  LeaderElector,
  LeaseCoordinator,
  MemorySource,
  MemoryStorage,
  STORAGE_CONTRACT_VERSION,
  type Storage,
} from '../src/index.js';
import { applyRewind, awaitRewind, planRewind } from '../src/rewind.js';
import { checkContractVersion, ShardSync } from '../src/adapter.js';
import { VirtualClock, VirtualScheduler } from '../src/testing/index.js';
import { Passthrough } from './support/broken-adapters.js';

/** An adapter that declares `version` as its contract version (or declares none, with `undefined`). */
class OtherContractStorage extends Passthrough {
  constructor(version: unknown) {
    super(new MemoryStorage());
    if (version === undefined) delete (this as { contractVersion?: unknown }).contractVersion;
    else Object.defineProperty(this, 'contractVersion', { value: version });
  }
}

/** A JavaScript adapter: a plain object with every operation, and no contractVersion. */
function javascriptAdapter(): Storage {
  const store = new MemoryStorage();
  const adapter: Record<string, unknown> = {};
  for (const name of Object.getOwnPropertyNames(MemoryStorage.prototype)) {
    const value: unknown = Reflect.get(store, name);
    if (name !== 'constructor' && typeof value === 'function') adapter[name] = (value as (...args: unknown[]) => unknown).bind(store);
  }
  return adapter as unknown as Storage;
}

const older = STORAGE_CONTRACT_VERSION - 1;
const newer = STORAGE_CONTRACT_VERSION + 1;
const cases: Array<{ what: string; storage: () => Storage; message: RegExp; adapterVersion: number | undefined }> = [
  {
    what: 'an adapter declaring an older contract version',
    storage: () => new OtherContractStorage(older),
    message: new RegExp(
      `OtherContractStorage, implements storage contract version ${older}, but this core implements version ${STORAGE_CONTRACT_VERSION}: make the changes of UPGRADING\\.md, section "Contract version ${STORAGE_CONTRACT_VERSION}", then declare contractVersion = ${STORAGE_CONTRACT_VERSION}`,
    ),
    adapterVersion: older,
  },
  {
    what: 'a JavaScript adapter declaring no contract version',
    storage: javascriptAdapter,
    message: new RegExp(
      `a storage object, declares no storage contract version \\(no contractVersion property\\); this core implements storage contract version ${STORAGE_CONTRACT_VERSION}\\. .*UPGRADING\\.md, sections "Contract version 1" to "Contract version ${STORAGE_CONTRACT_VERSION}"`,
    ),
    adapterVersion: undefined,
  },
  {
    what: 'an adapter declaring a newer contract version',
    storage: () => new OtherContractStorage(newer),
    message: new RegExp(
      `OtherContractStorage, implements storage contract version ${newer}, newer than version ${STORAGE_CONTRACT_VERSION} that this core implements: upgrade @leasehold/core .*UPGRADING\\.md, section "Contract versions"`,
    ),
    adapterVersion: newer,
  },
];

function thrownBy(make: () => unknown): unknown {
  try {
    make();
  } catch (error) {
    return error;
  }
  return undefined;
}

async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => undefined,
    (error: unknown) => error,
  );
}

function expectContractVersionError(error: unknown, expected: (typeof cases)[number], role: string): void {
  expect(error).toBeInstanceOf(ContractVersionError);
  const refusal = error as ContractVersionError;
  expect(refusal.code).toBe('ERR_CONTRACT_VERSION');
  expect(refusal.message.startsWith(`[core] ${role}, `)).toBe(true);
  expect(refusal.message).toMatch(expected.message);
  expect(refusal.adapterVersion).toBe(expected.adapterVersion);
  expect(refusal.coreVersion).toBe(STORAGE_CONTRACT_VERSION);
}

describe('storage contract version', () => {
  for (const expected of cases) {
    describe(expected.what, () => {
      it('fails new LeaseCoordinator with one ContractVersionError naming both versions and UPGRADING.md', () => {
        const error = thrownBy(() => new LeaseCoordinator({ storage: expected.storage(), group: 'g', workerId: 'w1' }));
        expectContractVersionError(error, expected, "LeaseCoordinator's storage");
      });

      it('fails new LeaderElector with the same error', () => {
        const error = thrownBy(() => new LeaderElector({ store: expected.storage(), group: 'g', workerId: 'w1' }));
        expectContractVersionError(error, expected, "LeaderElector's store");
      });

      it('fails new Consumer with the same error, as its storage and as its leaderStore', () => {
        const source = new MemorySource(1);
        const asStorage = thrownBy(() => new Consumer({ group: 'g', source, storage: expected.storage(), processBatch: () => undefined }));
        expectContractVersionError(asStorage, expected, "Consumer's storage");
        const asLeaderStore = thrownBy(() => new Consumer({ group: 'g', source, storage: new MemoryStorage(), leaderStore: expected.storage(), processBatch: () => undefined }));
        expectContractVersionError(asLeaderStore, expected, "Consumer's leaderStore");
      });

      it('fails ShardSync and the rewind helpers with the same error, before anything is read', async () => {
        const storage = expected.storage();
        expectContractVersionError(thrownBy(() => new ShardSync({ group: 'g', source: new MemorySource(1), storage, initialPosition: Checkpoint.TRIM_HORIZON, clock: new VirtualClock(new VirtualScheduler()), isLeader: () => true })), expected, "ShardSync's storage");
        expectContractVersionError(await rejectionOf(planRewind({ storage, group: 'g', to: 'trim-horizon' })), expected, "planRewind's storage");
        const store = new MemoryStorage();
        await store.createLease({ group: 'g', leaseKey: 'shard-0', checkpoint: '5' });
        const plan = await planRewind({ storage: store, group: 'g', to: 'trim-horizon' });
        expectContractVersionError(await rejectionOf(applyRewind(plan, { storage })), expected, "applyRewind's storage");
        const applied = await applyRewind(plan, { storage: store });
        expectContractVersionError(await rejectionOf(awaitRewind(applied, { storage, timeoutMs: 0 })), expected, "awaitRewind's storage");
      });
    });
  }

  it('accepts a store of this core\'s contract version, and a wrapper that passes its store\'s version through', () => {
    expect(() => checkContractVersion(new MemoryStorage())).not.toThrow();
    expect(() => checkContractVersion(new Passthrough(new MemoryStorage()))).not.toThrow();
    expect(() => new LeaseCoordinator({ storage: new MemoryStorage(), group: 'g', workerId: 'w1' })).not.toThrow();
  });

  it('names every section between the adapter\'s version and this core\'s for an adapter several versions behind', () => {
    const error = thrownBy(() => checkContractVersion(new OtherContractStorage(STORAGE_CONTRACT_VERSION - 3), 'storage', 'storage-x'));
    expect(error).toBeInstanceOf(ContractVersionError);
    expect((error as Error).message).toContain(
      `[storage-x] storage, OtherContractStorage, implements storage contract version ${STORAGE_CONTRACT_VERSION - 3}, but this core implements version ${STORAGE_CONTRACT_VERSION}: make the changes of UPGRADING.md, sections "Contract version ${STORAGE_CONTRACT_VERSION - 2}" to "Contract version ${STORAGE_CONTRACT_VERSION}"`,
    );
  });

  it('refuses a contract version that is not a positive integer as one that declares none', () => {
    for (const version of ['8', 0, 7.5, null]) {
      const error = thrownBy(() => checkContractVersion(new OtherContractStorage(version)));
      expect(error).toBeInstanceOf(ContractVersionError);
      expect((error as ContractVersionError).adapterVersion).toBeUndefined();
      expect((error as Error).message).toContain('which is not a contract version; this core implements storage contract version');
    }
  });
});
