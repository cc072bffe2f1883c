/**
 * The lease coordinator's unit-test worlds: one memory store (counting batched writes, or scripted to lose
 * an answer, fail a read or hold a call) and coordinators on virtual time, with the helpers the
 * lease-coordinator test files share.
 */
import {
  LeaseCoordinator,
  MemoryStorage,
  StorageOutcomeUnknownError,
  StorageUnavailableError,
  type LeaseCoordinatorOptions,
  type LeaseTenure,
  type LeaseListing,
  type LeaseRecord,
  type LeaseUpdate,
  type MemberState,
  type WriteResult,
} from '../../src/index.js';
import { RECORD_FORMAT, leaseStateOf, result } from '../../src/adapter.js';
import { seededRandom, FaultyStorage, noFaults, VirtualScheduler, type VirtualClock, withUnsafe, type CoordinatorUnsafe } from '../../src/testing/index.js';
import { run } from './virtual.js';

/** The tenure a checkpoint is made in: the held lease, or a stand-in that no longer holds. */
export function tenure(coordinator: LeaseCoordinator, leaseKey: string): LeaseTenure {
  return coordinator.lease(leaseKey) ?? { leaseKey, fencingToken: -1 };
}

export const GROUP = 'orders';

/** Counts batched writes, so a test can see how many round trips a tick made. */
export class CountingStorage extends MemoryStorage {
  updateCalls: Array<readonly LeaseUpdate[]> = [];
  override async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    this.updateCalls.push(updates);
    return super.updateLeases(group, updates);
  }
}

export function world(leaseKeys: string[] = ['shard-0']) {
  const scheduler = new VirtualScheduler();
  const storage = new CountingStorage();
  const ready = Promise.all(leaseKeys.map((leaseKey) => storage.createLease({ group: GROUP, leaseKey })));
  let seed = 1;
  const worker = (workerId: string, { unsafe, ...options }: Partial<LeaseCoordinatorOptions> & { unsafe?: CoordinatorUnsafe } = {}, clock: VirtualClock = scheduler.clock()) => {
    const faults = noFaults();
    const faulty = new FaultyStorage(storage, clock, seededRandom(seed), faults);
    const coordinator = new LeaseCoordinator(withUnsafe({
      storage: faulty,
      group: GROUP,
      workerId,
      clock,
      random: seededRandom(seed++),
      ...options,
    }, unsafe));
    return { coordinator, faults, clock };
  };
  return { scheduler, storage, ready, worker };
}


export async function started(scheduler: VirtualScheduler, coordinator: LeaseCoordinator): Promise<void> {
  await run(scheduler, coordinator.start());
}

/** Starts a worker and runs past its join tick (a new member takes nothing in it) to its first take tick. */
export async function joined(scheduler: VirtualScheduler, coordinator: LeaseCoordinator): Promise<void> {
  await started(scheduler, coordinator);
  await scheduler.advance(coordinator.takeIntervalMs * 1.06);
}

/** A member record written by hand: a worker that is not running in the test. */
export function member(incarnation: string, fields: Partial<MemberState> = {}): MemberState {
  return { format: RECORD_FORMAT, incarnation, leaseDurationMs: 10_000, status: 'alive', held: 0, changes: 0, requests: [], metadata: {}, ...fields };
}

/** A store that, on request, applies the next write but loses its answer, fails the next read, or holds the next call. */
export class ScriptedStorage extends MemoryStorage {
  loseNextAnswer = false;
  failNextRead = false;
  #held: { operation: 'list' | 'update'; leaseKey: string | undefined; called: () => void; gate: Promise<void> } | null = null;

  /**
   * The next call of `operation` (an update only if it writes `leaseKey`) waits until `release` is
   * called; `called` resolves when it began.
   */
  holdNext(operation: 'list' | 'update', leaseKey?: string): { called: Promise<void>; release: () => void } {
    let release = (): void => undefined;
    let called = (): void => undefined;
    const began = new Promise<void>((resolve) => (called = resolve));
    const gate = new Promise<void>((resolve) => (release = resolve));
    this.#held = { operation, leaseKey, called, gate };
    return { called: began, release };
  }

  async #wait(operation: 'list' | 'update', leaseKeys: readonly string[] = []): Promise<void> {
    const held = this.#held;
    if (held?.operation !== operation || (held.leaseKey !== undefined && !leaseKeys.includes(held.leaseKey))) return;
    this.#held = null;
    held.called();
    await held.gate;
  }

  override async listLeases(group: string): Promise<LeaseListing> {
    await this.#wait('list');
    return super.listLeases(group);
  }

  override async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    await this.#wait('update', updates.map((update) => update.leaseKey));
    const results = await super.updateLeases(group, updates);
    if (!this.loseNextAnswer) return results;
    this.loseNextAnswer = false;
    return results.map(() => result.unknown(new StorageOutcomeUnknownError('[test] the answer was lost')));
  }

  override async getLease(group: string, leaseKey: string): Promise<LeaseRecord | null> {
    if (this.failNextRead) {
      this.failNextRead = false;
      throw new StorageUnavailableError('[test] the read failed');
    }
    return super.getLease(group, leaseKey);
  }
}

export function scripted(leaseKeys: string[]) {
  const scheduler = new VirtualScheduler();
  const storage = new ScriptedStorage();
  const ready = Promise.all(leaseKeys.map((leaseKey) => storage.createLease({ group: GROUP, leaseKey })));
  const worker = (workerId: string, options: Partial<LeaseCoordinatorOptions> = {}) => {
    const clock = scheduler.clock();
    return { clock, coordinator: new LeaseCoordinator({ storage, group: GROUP, workerId, clock, random: seededRandom(7), ...options }) };
  };
  return { scheduler, storage, ready, worker };
}

/**
 * The rewind tool's write of a request on `shard-0`: the owner, incarnation and epoch kept, the version
 * moved, as any other client's write of the lease moves it. Returns the write's outcome.
 */
export async function writeRewindRequest(storage: MemoryStorage, id: string): Promise<string | undefined> {
  const lease = (await storage.getLease(GROUP, 'shard-0')) as LeaseRecord;
  const metadata = { ...lease.metadata, 'leasehold.rewind': JSON.stringify({ id, to: 'TRIM_HORIZON', requestedAt: 0 }) };
  const [outcome] = await storage.updateLeases(GROUP, [{ leaseKey: 'shard-0', expectedVersion: lease.version, next: { ...leaseStateOf(lease), metadata } }]);
  return outcome?.status;
}

/** `storage` with its method `name` replaced by what `replace` makes of it; every other call goes to it as is. */
export function overriding<K extends keyof MemoryStorage>(storage: MemoryStorage, name: K, replace: (target: MemoryStorage) => MemoryStorage[K]): MemoryStorage {
  const replacement = replace(storage);
  return new Proxy(storage, {
    get: (target, key) => {
      if (key === name) return replacement;
      const value: unknown = Reflect.get(target, key, target);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}
