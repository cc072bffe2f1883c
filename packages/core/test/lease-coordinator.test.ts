import { describe, expect, it } from 'vitest';
import {
  CheckpointBehindError,
  InvalidConfigError,
  LeaseCoordinator,
  LeaseLostError,
  MemoryStorage,
  RECORD_FORMAT,
  RecordFormatError,
  StorageOutcomeUnknownError,
  StorageUnavailableError,
  leaseStateOf,
  result,
  seededRandom,
  type LeaseCoordinatorOptions,
  type LeaseTenure,
  type LeaseListing,
  type LeaseRecord,
  type LeaseUpdate,
  type WriteResult,
} from '../src/index.js';
import { FaultyStorage, noFaults, VirtualScheduler, type VirtualClock } from '../src/testing/index.js';
import { run } from './support/virtual.js';

/** The tenure a checkpoint is made in: the held lease, or a stand-in that no longer holds. */
function tenure(coordinator: LeaseCoordinator, leaseKey: string): LeaseTenure {
  return coordinator.lease(leaseKey) ?? { leaseKey, fencingToken: -1 };
}

const GROUP = 'orders';

/** Counts batched writes, so a test can see how many round trips a tick made. */
class CountingStorage extends MemoryStorage {
  updateCalls: Array<readonly LeaseUpdate[]> = [];
  override async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    this.updateCalls.push(updates);
    return super.updateLeases(group, updates);
  }
}

function world(leaseKeys: string[] = ['shard-0']) {
  const scheduler = new VirtualScheduler();
  const storage = new CountingStorage();
  const ready = Promise.all(leaseKeys.map((leaseKey) => storage.createLease({ group: GROUP, leaseKey })));
  let seed = 1;
  const worker = (workerId: string, options: Partial<LeaseCoordinatorOptions> = {}, clock: VirtualClock = scheduler.clock()) => {
    const faults = noFaults();
    const faulty = new FaultyStorage(storage, clock, seededRandom(seed), faults);
    const coordinator = new LeaseCoordinator({
      storage: faulty,
      group: GROUP,
      workerId,
      clock,
      random: seededRandom(seed++),
      ...options,
    });
    return { coordinator, faults, clock };
  };
  return { scheduler, storage, ready, worker };
}


async function started(scheduler: VirtualScheduler, coordinator: LeaseCoordinator): Promise<void> {
  await run(scheduler, coordinator.start());
}

describe('LeaseCoordinator options', () => {
  const storage = new MemoryStorage();
  const cases: Array<[string, Partial<LeaseCoordinatorOptions>, string]> = [
    ['a negative lease duration', { leaseDurationMs: -5 }, 'leaseDurationMs must be a positive number of milliseconds, got -5'],
    ['a zero take interval', { takeIntervalMs: 0 }, 'takeIntervalMs must be a positive number of milliseconds, got 0'],
    ['a renew interval not below the lease duration', { leaseDurationMs: 1000, renewIntervalMs: 1000 }, 'renewIntervalMs (1000) must be below leaseDurationMs (1000)'],
    ['an empty worker id', { workerId: '' }, 'worker id must not be empty'],
    ['a clock drift of 50%', { maxClockDrift: 0.5 }, 'maxClockDrift must be below 0.5'],
    ['a handoff timeout beyond the hold', { handoffTimeoutMs: 9_999 }, 'handoffTimeoutMs (9999) must be below the time a renewal holds a lease'],
    ['a renew interval the hold cannot cover', { leaseDurationMs: 1000, renewIntervalMs: 990 }, 'renew more often or lengthen the lease'],
    ['a fractional lease limit', { maxLeasesPerWorker: 1.5 }, 'maxLeasesPerWorker must be a positive integer, got 1.5'],
  ];
  for (const [label, options, message] of cases) {
    it(`refuses ${label} with an InvalidConfigError naming the value`, () => {
      expect(() => new LeaseCoordinator({ storage, group: GROUP, ...options })).toThrow(InvalidConfigError);
      expect(() => new LeaseCoordinator({ storage, group: GROUP, ...options })).toThrow(message);
    });
  }

  it('derives the renew interval, hold and a unique worker id from the defaults', () => {
    const coordinator = new LeaseCoordinator({ storage, group: GROUP, random: seededRandom(3) });
    expect(coordinator.leaseDurationMs).toBe(10_000);
    expect(coordinator.renewIntervalMs).toBeCloseTo(3_333.33, 1);
    expect(coordinator.takeIntervalMs).toBe(2_000);
    // H = 10,000 × 0.99 / 1.01 − 500
    expect(coordinator.holdMs).toBeCloseTo(9_301.98, 1);
    expect(coordinator.workerId).toMatch(/-\d+-[0-9a-z]+$/);
  });
});

describe('LeaseCoordinator taking and renewing', () => {
  it('takes a free lease at start and hands out its epoch as the fencing token', async () => {
    const { scheduler, ready, worker, storage } = world(['shard-0', 'shard-1']);
    await ready;
    const { coordinator } = worker('a');
    await started(scheduler, coordinator);
    expect(coordinator.heldLeases().map((lease) => lease.leaseKey).sort()).toEqual(['shard-0', 'shard-1']);
    expect(coordinator.lease('shard-0')?.fencingToken).toBe(1);
    expect((await storage.getLease(GROUP, 'shard-0'))?.owner).toBe('a');
    await run(scheduler, coordinator.stop());
  });

  it('renews every held lease in one batched write per renew tick', async () => {
    const keys = Array.from({ length: 20 }, (_, i) => `shard-${i}`);
    const { scheduler, ready, worker, storage } = world(keys);
    await ready;
    const { coordinator } = worker('a');
    await started(scheduler, coordinator);
    storage.updateCalls = [];
    await scheduler.advance(coordinator.renewIntervalMs * 1.06);
    const renewals = storage.updateCalls.filter((batch) => batch.length === 20);
    expect(renewals).toHaveLength(1);
    expect(storage.updateCalls).toHaveLength(1);
    await run(scheduler, coordinator.stop());
  });

  it('never takes a lease whose owner keeps renewing it', async () => {
    const { scheduler, ready, worker } = world(['shard-0']);
    await ready;
    const owner = worker('owner');
    await started(scheduler, owner.coordinator);
    const other = worker('other');
    const acquired: string[] = [];
    other.coordinator.on('acquired', ({ leaseKey }) => acquired.push(leaseKey));
    await started(scheduler, other.coordinator);
    await scheduler.advance(60_000);
    expect(acquired).toEqual([]);
    expect(owner.coordinator.isHeld('shard-0')).toBe(true);
    await run(scheduler, Promise.all([owner.coordinator.stop(), other.coordinator.stop()]));
  });

  it('takes a lease whose version has not changed for leaseDurationMs of its own clock, and not before', async () => {
    const { scheduler, ready, worker, storage } = world(['shard-0']);
    await ready;
    const lease = (await storage.getLease(GROUP, 'shard-0')) as LeaseRecord;
    // A dead owner: a lease with an owner that nobody renews.
    await storage.updateLeases(GROUP, [{ leaseKey: 'shard-0', expectedVersion: lease.version, next: { ...lease, owner: 'dead', epoch: 4 } }]);
    const taker = worker('taker');
    const acquiredAt: number[] = [];
    taker.coordinator.on('acquired', () => acquiredAt.push(scheduler.now));
    await started(scheduler, taker.coordinator);
    await scheduler.advance(9_000);
    expect(acquiredAt).toEqual([]);
    await scheduler.advance(4_000);
    expect(acquiredAt).toHaveLength(1);
    expect(acquiredAt[0]).toBeGreaterThanOrEqual(10_000);
    expect(taker.coordinator.lease('shard-0')?.fencingToken).toBe(5);
    await run(scheduler, taker.coordinator.stop());
  });

  it('stops counting a lease as held holdMs after its last successful renewal was sent, before anyone can take it', async () => {
    const { scheduler, ready, worker } = world(['shard-0']);
    await ready;
    const owner = worker('owner');
    await started(scheduler, owner.coordinator);
    const signal = owner.coordinator.lease('shard-0')?.signal as AbortSignal;
    const lostAt: number[] = [];
    owner.coordinator.on('lost', ({ reason }) => {
      expect(reason).toBe('self-fenced');
      lostAt.push(scheduler.now);
    });
    const thief = worker('thief');
    const takenAt: number[] = [];
    thief.coordinator.on('acquired', () => takenAt.push(scheduler.now));
    await started(scheduler, thief.coordinator);
    const cutAt = scheduler.now;
    owner.faults.cutOff = true; // the owner keeps running but cannot reach storage
    await scheduler.advance(30_000);
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBeInstanceOf(LeaseLostError);
    expect(lostAt).toHaveLength(1);
    expect(takenAt).toHaveLength(1);
    expect(lostAt[0]).toBeLessThanOrEqual(cutAt + owner.coordinator.holdMs);
    expect(lostAt[0] as number).toBeLessThan(takenAt[0] as number);
    await run(scheduler, Promise.all([owner.coordinator.stop(), thief.coordinator.stop()]));
  });

  it('does not extend the hold on a renewal whose outcome is unknown', async () => {
    const { scheduler, ready, worker } = world(['shard-0']);
    await ready;
    const owner = worker('owner');
    await started(scheduler, owner.coordinator);
    const lostAt: number[] = [];
    owner.coordinator.on('lost', () => lostAt.push(scheduler.now));
    owner.faults.ambiguousAfterApply = 1; // every write applies, but the owner never hears so
    const since = scheduler.now;
    await scheduler.advance(20_000);
    expect(lostAt).toHaveLength(1);
    expect((lostAt[0] as number) - since).toBeLessThanOrEqual(owner.coordinator.holdMs + 100);
    await run(scheduler, owner.coordinator.stop());
  });

  it('respects maxLeasesPerWorker', async () => {
    const { scheduler, ready, worker } = world(Array.from({ length: 10 }, (_, i) => `k${i}`));
    await ready;
    const { coordinator } = worker('a', { maxLeasesPerWorker: 3 });
    await started(scheduler, coordinator);
    await scheduler.advance(20_000);
    expect(coordinator.heldLeases()).toHaveLength(3);
    await run(scheduler, coordinator.stop());
  });

  it('takes a child only after all its parents reached SHARD_END', async () => {
    const { scheduler, ready, worker, storage } = world(['parent-a', 'parent-b']);
    await ready;
    await storage.createLease({ group: GROUP, leaseKey: 'child', parentKeys: ['parent-a', 'parent-b'] });
    const { coordinator } = worker('a');
    await started(scheduler, coordinator);
    expect(coordinator.isHeld('child')).toBe(false);
    await run(scheduler, coordinator.checkpoint(tenure(coordinator, 'parent-a'), 'SHARD_END'));
    await scheduler.advance(5_000);
    expect(coordinator.isHeld('child')).toBe(false);
    await run(scheduler, coordinator.checkpoint(tenure(coordinator, 'parent-b'), 'SHARD_END'));
    await scheduler.advance(5_000);
    expect(coordinator.isHeld('child')).toBe(true);
    await run(scheduler, coordinator.stop());
  });

  it('reports a failing store as error events and keeps running', async () => {
    const { scheduler, ready, worker } = world(['shard-0']);
    await ready;
    const { coordinator, faults } = worker('a');
    const errors: string[] = [];
    coordinator.on('error', ({ operation }) => errors.push(operation));
    faults.errorBeforeSend = 1;
    await started(scheduler, coordinator);
    await scheduler.advance(5_000);
    expect(errors).toContain('list');
    expect(coordinator.heldLeases()).toEqual([]);
    faults.errorBeforeSend = 0;
    await scheduler.advance(5_000);
    expect(coordinator.isHeld('shard-0')).toBe(true);
    await run(scheduler, coordinator.stop());
  });
});

describe('LeaseCoordinator balancing and handoff', () => {
  it('balances a joining worker by cooperative handoff, draining each lease before it moves', async () => {
    const keys = Array.from({ length: 10 }, (_, i) => `shard-${i}`);
    const { scheduler, ready, worker } = world(keys);
    await ready;
    const drained: string[] = [];
    const first = worker('first', { onDrain: async (lease, reason) => void drained.push(`${lease.leaseKey}:${reason}`) });
    await started(scheduler, first.coordinator);
    expect(first.coordinator.heldLeases()).toHaveLength(10);
    const second = worker('second');
    const how: string[] = [];
    second.coordinator.on('acquired', (event) => how.push(event.how));
    await started(scheduler, second.coordinator);
    await scheduler.advance(60_000);
    expect(first.coordinator.heldLeases()).toHaveLength(5);
    expect(second.coordinator.heldLeases()).toHaveLength(5);
    expect(how).toEqual(['handoff', 'handoff', 'handoff', 'handoff', 'handoff']);
    expect(drained).toHaveLength(5);
    expect(drained.every((entry) => entry.endsWith(':handoff'))).toBe(true);
    await run(scheduler, Promise.all([first.coordinator.stop(), second.coordinator.stop()]));
  });

  it('never takes more than it would have to give back: three workers settle with max - min <= 1', async () => {
    const keys = Array.from({ length: 11 }, (_, i) => `shard-${i}`);
    const { scheduler, ready, worker } = world(keys);
    await ready;
    const workers = ['a', 'b', 'c'].map((id) => worker(id).coordinator);
    const moves: string[] = [];
    for (const coordinator of workers) coordinator.on('acquired', ({ leaseKey }) => moves.push(`${coordinator.workerId}:${leaseKey}`));
    for (const coordinator of workers) await started(scheduler, coordinator);
    await scheduler.advance(90_000);
    const counts = workers.map((coordinator) => coordinator.heldLeases().length).sort();
    expect(counts).toEqual([3, 4, 4]);
    const settledMoves = moves.length;
    await scheduler.advance(60_000);
    expect(moves.length).toBe(settledMoves);
    await run(scheduler, Promise.all(workers.map((coordinator) => coordinator.stop())));
  });

  it('releases every lease on stop, and a waiting worker takes them at once through the change feed', async () => {
    const { scheduler, ready, worker, storage } = world(['shard-0', 'shard-1', 'shard-2', 'shard-3']);
    await ready;
    const leaving = worker('leaving');
    await started(scheduler, leaving.coordinator);
    const waiting = worker('waiting', { takeIntervalMs: 5_000 });
    await started(scheduler, waiting.coordinator);
    await scheduler.advance(12_000);
    expect(waiting.coordinator.heldLeases()).toHaveLength(2);
    const takenAt: number[] = [];
    waiting.coordinator.on('acquired', () => takenAt.push(scheduler.now));
    const stoppedAt = scheduler.now;
    await run(scheduler, leaving.coordinator.stop());
    await scheduler.advance(100);
    expect(waiting.coordinator.heldLeases()).toHaveLength(4);
    expect(takenAt).toHaveLength(2);
    // Well before its next take tick (5 s away): the release woke it.
    expect(Math.max(...takenAt) - stoppedAt).toBeLessThan(200);
    expect((await storage.listLeases(GROUP)).leases.every((lease) => lease.owner === 'waiting')).toBe(true);
    await run(scheduler, waiting.coordinator.stop());
  });
});

describe('LeaseCoordinator checkpoints', () => {
  it('moves a checkpoint forward and refuses one behind it', async () => {
    const { scheduler, ready, worker, storage } = world(['shard-0']);
    await ready;
    const { coordinator } = worker('a');
    await started(scheduler, coordinator);
    await run(scheduler, coordinator.checkpoint(tenure(coordinator, 'shard-0'), '100'));
    await run(scheduler, coordinator.checkpoint(tenure(coordinator, 'shard-0'), '200:3'));
    await expect(run(scheduler, coordinator.checkpoint(tenure(coordinator, 'shard-0'), '150'))).rejects.toThrow(CheckpointBehindError);
    await expect(run(scheduler, coordinator.checkpoint(tenure(coordinator, 'shard-0'), '150'))).rejects.toThrow('checkpoint "150" of lease "shard-0" is behind the stored "200:3"');
    expect((await storage.getLease(GROUP, 'shard-0'))?.checkpoint).toBe('200:3');
    await run(scheduler, coordinator.stop());
  });

  it('refuses a checkpoint after the lease was lost, and storage keeps the new owner checkpoint', async () => {
    const { scheduler, ready, worker, storage } = world(['shard-0']);
    await ready;
    const zombie = worker('zombie');
    await started(scheduler, zombie.coordinator);
    const zombieTenure = tenure(zombie.coordinator, 'shard-0');
    await run(scheduler, zombie.coordinator.checkpoint(zombieTenure, '10'));
    zombie.clock.pauseUntil(scheduler.now + 30_000); // a stop-the-world pause longer than the lease
    const heir = worker('heir');
    await started(scheduler, heir.coordinator);
    await scheduler.advance(20_000);
    expect(heir.coordinator.isHeld('shard-0')).toBe(true);
    await run(scheduler, heir.coordinator.checkpoint(tenure(heir.coordinator, 'shard-0'), '20'));
    await scheduler.advance(11_000);
    await expect(run(scheduler, zombie.coordinator.checkpoint(zombieTenure, '30'))).rejects.toThrow(LeaseLostError);
    expect((await storage.getLease(GROUP, 'shard-0'))?.checkpoint).toBe('20');
    await run(scheduler, Promise.all([zombie.coordinator.stop(), heir.coordinator.stop()]));
  });

  it('confirms a checkpoint whose outcome was unknown by reading it back, losing nothing', async () => {
    const { scheduler, ready, worker, storage } = world(['shard-0']);
    await ready;
    const { coordinator, faults } = worker('a');
    await started(scheduler, coordinator);
    faults.ambiguousAfterApply = 1;
    const write = coordinator.checkpoint(tenure(coordinator, 'shard-0'), '42');
    await scheduler.advance(100);
    faults.ambiguousAfterApply = 0;
    await run(scheduler, write);
    expect((await storage.getLease(GROUP, 'shard-0'))?.checkpoint).toBe('42');
    await run(scheduler, coordinator.checkpoint(tenure(coordinator, 'shard-0'), '43'));
    expect((await storage.getLease(GROUP, 'shard-0'))?.checkpoint).toBe('43');
    await run(scheduler, coordinator.stop());
  });
});

/** A store that, on request, applies the next write but loses its answer, fails the next read, or holds the next call. */
class ScriptedStorage extends MemoryStorage {
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

function scripted(leaseKeys: string[]) {
  const scheduler = new VirtualScheduler();
  const storage = new ScriptedStorage();
  const ready = Promise.all(leaseKeys.map((leaseKey) => storage.createLease({ group: GROUP, leaseKey })));
  const worker = (workerId: string, options: Partial<LeaseCoordinatorOptions> = {}) => {
    const clock = scheduler.clock();
    return { clock, coordinator: new LeaseCoordinator({ storage, group: GROUP, workerId, clock, random: seededRandom(7), ...options }) };
  };
  return { scheduler, storage, ready, worker };
}

describe('LeaseCoordinator tenures and fencing', () => {
  it('refuses a checkpoint from an earlier tenure of the same worker once it took the lease again', async () => {
    const { scheduler, ready, worker, storage } = world(['shard-0']);
    await ready;
    const { coordinator, clock } = worker('a');
    await started(scheduler, coordinator);
    const first = tenure(coordinator, 'shard-0');
    clock.pauseUntil(scheduler.now + 15_000); // past the hold: the lease is lost to self-fencing
    await scheduler.advance(30_000);
    const second = tenure(coordinator, 'shard-0');
    expect(second.fencingToken).toBeGreaterThan(first.fencingToken);
    await expect(run(scheduler, coordinator.checkpoint(first, '10'))).rejects.toThrow(
      'lease "shard-0" is held in tenure 2, not in tenure 1 the write belongs to',
    );
    await run(scheduler, coordinator.checkpoint(second, '20'));
    expect((await storage.getLease(GROUP, 'shard-0'))?.checkpoint).toBe('20');
    await run(scheduler, coordinator.stop());
  });

  it('with the unsafe per-key fencing, the earlier tenure writes into the later one (the switch brings the defect back)', async () => {
    const { scheduler, ready, worker, storage } = world(['shard-0']);
    await ready;
    const { coordinator, clock } = worker('a', { unsafe: { checkpointPerKey: true } });
    await started(scheduler, coordinator);
    const first = tenure(coordinator, 'shard-0');
    clock.pauseUntil(scheduler.now + 15_000);
    await scheduler.advance(30_000);
    await run(scheduler, coordinator.checkpoint(first, '10'));
    expect((await storage.getLease(GROUP, 'shard-0'))?.checkpoint).toBe('10');
    await run(scheduler, coordinator.stop());
  });

  it('checks the order again when a checkpoint is retried: an earlier write that applied unseen is never moved back', async () => {
    const { scheduler, ready, worker, storage } = scripted(['shard-0']);
    await ready;
    const { coordinator } = worker('a');
    await started(scheduler, coordinator);
    const lease = tenure(coordinator, 'shard-0');
    await run(scheduler, coordinator.checkpoint(lease, '30'));
    storage.loseNextAnswer = true;
    storage.failNextRead = true;
    await expect(run(scheduler, coordinator.checkpoint(lease, '50'))).rejects.toThrow(StorageOutcomeUnknownError);
    await expect(run(scheduler, coordinator.checkpoint(lease, '40'))).rejects.toThrow(CheckpointBehindError);
    expect((await storage.getLease(GROUP, 'shard-0'))?.checkpoint).toBe('50');
    await run(scheduler, coordinator.stop());
  });

  it('a handler resumed after a pause past the hold sees its signal aborted before anything else runs', async () => {
    const { scheduler, ready, worker } = world(['shard-0']);
    await ready;
    const { coordinator, clock } = worker('a');
    await started(scheduler, coordinator);
    const lease = coordinator.lease('shard-0');
    expect(lease).toBeDefined();
    // A timer due before the loss timer: after the pause it runs first, as an I/O completion could.
    const seen = clock.sleep(1_000).then(() => lease?.signal.aborted);
    clock.pauseUntil(scheduler.now + 30_000);
    await scheduler.advance(31_000);
    expect(await seen).toBe(true);
    expect(coordinator.isHeld('shard-0')).toBe(false);
    await run(scheduler, coordinator.stop());
  });
});

describe('LeaseCoordinator when stopping', () => {
  it('requests no handoff once stop() began, even from a take tick already in flight', async () => {
    const { scheduler, ready, worker, storage } = scripted(['s-0', 's-1', 's-2', 's-3']);
    await ready;
    const owner = worker('owner', { maxLeasesPerWorker: 4 });
    await started(scheduler, owner.coordinator);
    await scheduler.advance(5_000);
    expect(owner.coordinator.heldLeases()).toHaveLength(4);
    const thief = worker('thief');
    let stopCalled = false;
    const requestedWhileStopping: string[] = [];
    thief.coordinator.on('steal-requested', ({ leaseKey }) => {
      if (stopCalled) requestedWhileStopping.push(leaseKey);
    });
    await started(scheduler, thief.coordinator); // its first look: nothing free, nothing seen moving yet
    // A lease appears; the thief's next tick takes it, and that write waits while stop() begins. By then
    // the thief has seen the owner renew, so without the check it would go on to ask for a handoff.
    await storage.createLease({ group: GROUP, leaseKey: 'free' });
    const write = storage.holdNext('update', 'free');
    while (thief.coordinator.heldLeases().length === 0 && scheduler.now < 60_000) {
      const called = await Promise.race([write.called.then(() => true), scheduler.advance(50).then(() => false)]);
      if (called) break;
    }
    stopCalled = true;
    const stopping = thief.coordinator.stop();
    write.release();
    await run(scheduler, stopping);
    await scheduler.advance(5_000);
    expect(requestedWhileStopping).toEqual([]);
    expect((await storage.listLeases(GROUP)).leases.filter((lease) => lease.pendingOwner === 'thief')).toEqual([]);
    await run(scheduler, owner.coordinator.stop());
  });

  it('withdraws its own handoff requests and gives back a lease handed to it while it stopped', async () => {
    const { scheduler, ready, worker, storage } = scripted([]);
    await ready;
    await storage.createLease({ group: GROUP, leaseKey: 'asked', owner: 'someone', epoch: 3, pendingOwner: 'leaver' });
    const leaver = worker('leaver');
    await started(scheduler, leaver.coordinator);
    // Handed over to it just as it stops: it would otherwise hold the lease for nobody until it expired.
    await storage.createLease({ group: GROUP, leaseKey: 'handed', owner: 'leaver', epoch: 5 });
    await run(scheduler, leaver.coordinator.stop());
    const leases = new Map((await storage.listLeases(GROUP)).leases.map((lease) => [lease.leaseKey, lease]));
    expect(leases.get('asked')).toMatchObject({ owner: 'someone', pendingOwner: null, epoch: 3 });
    expect(leases.get('handed')).toMatchObject({ owner: null, epoch: 5 });
  });

  it('returns from stop() by its deadline when a drain never finishes', async () => {
    const { scheduler, ready, worker } = world(['shard-0']);
    await ready;
    const { coordinator } = worker('a', { onDrain: () => new Promise<void>(() => undefined) });
    await started(scheduler, coordinator);
    const stoppedAt = scheduler.now;
    let returnedAt = -1;
    const stopping = coordinator.stop({ timeoutMs: 1_000 }).then(() => (returnedAt = scheduler.now));
    const second = coordinator.stop({ timeoutMs: 60_000 });
    await run(scheduler, Promise.all([stopping, second]));
    expect(returnedAt - stoppedAt).toBeLessThanOrEqual(1_000);
    expect(coordinator.isHeld('shard-0')).toBe(false);
  });
});

describe('LeaseCoordinator with records it must not write', () => {
  it('reports a corrupt lease once, takes the others, and never takes a child of a corrupt parent', async () => {
    const { scheduler, ready, worker, storage } = world(['good', 'bad']);
    await ready;
    await storage.createLease({ group: GROUP, leaseKey: 'child', parentKeys: ['bad'] });
    storage.corrupt(GROUP, 'bad');
    const { coordinator } = worker('a');
    const reported: string[] = [];
    coordinator.on('corrupt-lease', ({ leaseKey }) => void reported.push(leaseKey));
    await started(scheduler, coordinator);
    await scheduler.advance(20_000);
    expect(reported).toEqual(['bad']);
    expect(coordinator.heldLeases().map((lease) => lease.leaseKey)).toEqual(['good']);
    await run(scheduler, coordinator.stop());
  });

  it('stops with a RecordFormatError when it meets a lease of a newer format, and never writes it', async () => {
    const { scheduler, ready, worker, storage } = world(['ours']);
    await ready;
    await storage.createLease({ group: GROUP, leaseKey: 'future', format: RECORD_FORMAT + 1 });
    const before = await storage.getLease(GROUP, 'future');
    const { coordinator } = worker('a');
    const fatal: Error[] = [];
    coordinator.on('fatal', ({ error }) => void fatal.push(error));
    await started(scheduler, coordinator);
    await scheduler.advance(20_000);
    expect(fatal).toHaveLength(1);
    expect(fatal[0]).toBeInstanceOf(RecordFormatError);
    expect(fatal[0]?.message).toContain('lease "future" of group "orders" is in record format 2, newer than the 1 this worker knows');
    expect(await storage.getLease(GROUP, 'future')).toEqual(before);
    expect(coordinator.heldLeases()).toEqual([]);
  });

  it('carries fields it does not name through taking, renewing and checkpointing', async () => {
    const { scheduler, worker, storage } = world([]);
    const extra = { addedLater: { nested: [1, 'two', null] }, note: 'kept' };
    await storage.createLease({ group: GROUP, leaseKey: 'shard-0', ...extra });
    const { coordinator } = worker('a');
    await started(scheduler, coordinator);
    await scheduler.advance(10_000);
    await run(scheduler, coordinator.checkpoint(tenure(coordinator, 'shard-0'), '5'));
    const stored = await storage.getLease(GROUP, 'shard-0');
    expect(stored).toMatchObject({ owner: 'a', checkpoint: '5', ...extra });
    expect(leaseStateOf(stored as LeaseRecord)).toMatchObject(extra);
    await run(scheduler, coordinator.stop());
  });
});
