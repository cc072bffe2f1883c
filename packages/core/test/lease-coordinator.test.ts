import { describe, expect, it } from 'vitest';
import {
  CheckpointBehindError,
  InvalidConfigError,
  LeaseCoordinator,
  LeaseLostError,
  MemoryStorage,
  RecordFormatError,
  StorageOutcomeUnknownError,
  type LeaseCoordinatorOptions,
  type CheckpointWrite,
  type LeaseState,
  type LeaseRecord,
  type WriteResult,
} from '../src/index.js';
import { RECORD_FORMAT, leaseStateOf, result } from '../src/adapter.js';
import { seededRandom, FaultyStorage, noFaults, VirtualScheduler } from '../src/testing/index.js';
import { GROUP, joined, member, scripted, started, tenure, world, writeRewindRequest } from './support/lease-world.js';
import { run } from './support/virtual.js';

describe('LeaseCoordinator options', () => {
  const storage = new MemoryStorage();
  const cases: Array<[string, Partial<LeaseCoordinatorOptions>, string]> = [
    ['a negative lease duration', { leaseDurationMs: -5 }, 'leaseDurationMs must be a positive number of milliseconds, got -5'],
    ['a zero take interval', { takeIntervalMs: 0 }, 'takeIntervalMs must be a positive number of milliseconds, got 0'],
    ['a renew interval not below the lease duration', { leaseDurationMs: 1000, renewIntervalMs: 1000 }, 'renewIntervalMs (1000) must be below leaseDurationMs (1000)'],
    ['an empty worker id', { workerId: '' }, 'worker id must not be empty'],
    ['a clock drift of 50%', { maxClockDrift: 0.5 }, 'maxClockDrift must be below 0.5'],
    ['a handoff timeout beyond the hold', { handoffTimeoutMs: 9_999 }, 'handoffTimeoutMs (9999) must be below the time a heartbeat holds the leases'],
    ['a renew interval the hold cannot cover', { leaseDurationMs: 1000, renewIntervalMs: 990 }, 'renew more often or lengthen the lease'],
    ['a fractional lease limit', { maxLeasesPerWorker: 1.5 }, 'maxLeasesPerWorker must be a positive integer, got 1.5'],
  ];
  for (const [label, options, message] of cases) {
    it(`refuses ${label} with an InvalidConfigError naming the value`, () => {
      expect(() => new LeaseCoordinator({ storage, group: GROUP, ...options })).toThrow(InvalidConfigError);
      expect(() => new LeaseCoordinator({ storage, group: GROUP, ...options })).toThrow(message);
    });
  }

  it('refuses an option it does not take with an InvalidConfigError naming it, and what it takes', () => {
    const options = { storage, group: GROUP, leaseDurationMS: 1000 } as unknown as LeaseCoordinatorOptions;
    expect(() => new LeaseCoordinator(options)).toThrow(InvalidConfigError);
    expect(() => new LeaseCoordinator(options)).toThrow('[core] LeaseCoordinator has no option "leaseDurationMS"; did you mean leaseDurationMs?');
    const lease = { storage, group: GROUP, lease: { leaseDurationMs: 1000 } } as unknown as LeaseCoordinatorOptions;
    expect(() => new LeaseCoordinator(lease)).toThrow('[core] LeaseCoordinator has no option "lease"; it takes storage, group, workerId, leaseDurationMs,');
  });

  it('derives the heartbeat interval, hold, listing interval and a unique worker id from the defaults', () => {
    const coordinator = new LeaseCoordinator({ storage, group: GROUP, random: seededRandom(3) });
    expect(coordinator.leaseDurationMs).toBe(10_000);
    expect(coordinator.renewIntervalMs).toBe(6_500);
    expect(coordinator.takeIntervalMs).toBe(2_000);
    expect(coordinator.listIntervalMs).toBe(600_000);
    // H = 10,000 × 0.99 / 1.01 − 500
    expect(coordinator.holdMs).toBeCloseTo(9_301.98, 1);
    expect(coordinator.workerId).toMatch(/-\d+-[0-9a-z]+$/);
  });
});

describe('LeaseCoordinator taking and holding', () => {
  it('takes free leases at its first take tick after the join tick, and hands out their epoch as the fencing token', async () => {
    const { scheduler, ready, worker, storage } = world(['shard-0', 'shard-1']);
    await ready;
    const { coordinator } = worker('a');
    await started(scheduler, coordinator);
    expect(coordinator.incarnation).not.toBeNull();
    expect(coordinator.heldLeases()).toEqual([]);
    await scheduler.advance(coordinator.takeIntervalMs * 1.06);
    expect(coordinator.heldLeases().map((lease) => lease.leaseKey).sort()).toEqual(['shard-0', 'shard-1']);
    expect(coordinator.lease('shard-0')?.fencingToken).toBe(1);
    expect(await storage.getLease(GROUP, 'shard-0')).toMatchObject({ owner: 'a', incarnation: coordinator.incarnation, epoch: 1 });
    await run(scheduler, coordinator.stop());
  });

  it('never declares dead a member that keeps heartbeating, nor takes its leases', async () => {
    const { scheduler, ready, worker } = world(['shard-0']);
    await ready;
    const owner = worker('owner');
    await joined(scheduler, owner.coordinator);
    const other = worker('other');
    const acquired: string[] = [];
    const dead: string[] = [];
    other.coordinator.on('acquired', ({ leaseKey }) => acquired.push(leaseKey));
    other.coordinator.on('member-dead', ({ workerId }) => dead.push(workerId));
    await started(scheduler, other.coordinator);
    await scheduler.advance(60_000);
    expect(acquired).toEqual([]);
    expect(dead).toEqual([]);
    expect(owner.coordinator.isHeld('shard-0')).toBe(true);
    await run(scheduler, Promise.all([owner.coordinator.stop(), other.coordinator.stop()]));
  });

  it('takes the leases of a member whose record has not moved for leaseDurationMs of its own clock, and not before', async () => {
    const { scheduler, ready, worker, storage } = world(['shard-0']);
    await ready;
    // A crashed worker: alive in the roster, named by a lease, never heartbeating again.
    await storage.putMember(GROUP, 'crashed', null, member('inc-crashed', { held: 1 }));
    const lease = (await storage.getLease(GROUP, 'shard-0')) as LeaseRecord;
    await storage.updateLeases(GROUP, [{ leaseKey: 'shard-0', expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner: 'crashed', incarnation: 'inc-crashed', epoch: 4 } }]);
    const taker = worker('taker');
    const acquiredAt: number[] = [];
    const deadAt: number[] = [];
    taker.coordinator.on('acquired', () => acquiredAt.push(scheduler.now));
    taker.coordinator.on('member-dead', ({ workerId }) => workerId === 'crashed' && deadAt.push(scheduler.now));
    await started(scheduler, taker.coordinator); // first sight of the member's version at 0
    await scheduler.advance(9_900);
    expect(deadAt).toEqual([]);
    expect(acquiredAt).toEqual([]);
    await scheduler.advance(3_000);
    expect(deadAt).toHaveLength(1);
    expect(deadAt[0]).toBeGreaterThanOrEqual(10_000);
    expect(acquiredAt).toHaveLength(1);
    expect(taker.coordinator.lease('shard-0')?.fencingToken).toBe(5);
    expect((await storage.getRoster(GROUP)).members.find((m) => m.workerId === 'crashed')?.status).toBe('dead');
    await run(scheduler, taker.coordinator.stop());
  });

  it('takes the leases of a dead member within a take tick of its death while a hundred handovers among others are announced every second', async () => {
    const moving = Array.from({ length: 100 }, (_, i) => `moving-${i}`);
    const { scheduler, ready, worker, storage } = world(['shard-0', ...moving]);
    await ready;
    await storage.putMember(GROUP, 'crashed', null, member('inc-crashed', { held: 1 }));
    const lease = (await storage.getLease(GROUP, 'shard-0')) as LeaseRecord;
    await storage.updateLeases(GROUP, [{ leaseKey: 'shard-0', expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner: 'crashed', incarnation: 'inc-crashed', epoch: 4 } }]);
    // Two live members (heartbeating by hand, saying they hold nothing, so that nobody asks them for
    // leases) hand a hundred leases to each other every second, each handover announced on the change feed
    // as a rebalance's are: the worker below reads every one, to see whether it was handed to it. They
    // come after it by id, so that the deal gives it the dead member's lease.
    const versions = new Map<string, number | null>([['x', null], ['y', null]]);
    const heartbeat = async (workerId: string): Promise<void> => {
      const written = await storage.putMember(GROUP, workerId, versions.get(workerId) ?? null, member(`inc-${workerId}`));
      if (written.status === 'applied') versions.set(workerId, written.record.version);
    };
    await Promise.all([heartbeat('x'), heartbeat('y')]);
    const handOver = async (round: number): Promise<void> => {
      const [from, to] = round % 2 === 0 ? ['x', 'y'] : ['y', 'x'];
      const listed = (await storage.listLeases(GROUP)).leases.filter((record) => moving.includes(record.leaseKey));
      await storage.updateLeases(
        GROUP,
        listed.map((record) => ({
          leaseKey: record.leaseKey,
          expectedVersion: record.version,
          next: { ...leaseStateOf(record), owner: to, incarnation: `inc-${to}`, epoch: record.epoch + 1 },
          notify: 'handed-off' as const,
        })),
      );
      await Promise.all([heartbeat(from), heartbeat(to)]);
    };
    for (let round = 0; round < 40; round++) scheduler.schedule(500 + round * 1_000, () => void handOver(round));
    const taker = worker('taker');
    // Each read a 30 ms round trip: a hundred read one after another would take three seconds of every second.
    taker.faults.latencyMs = () => 15;
    const deadAt: number[] = [];
    const acquiredAt: number[] = [];
    taker.coordinator.on('member-dead', ({ workerId }) => workerId === 'crashed' && deadAt.push(scheduler.now));
    taker.coordinator.on('acquired', ({ leaseKey }) => leaseKey === 'shard-0' && acquiredAt.push(scheduler.now));
    await started(scheduler, taker.coordinator); // first sight of the crashed member's version at 0
    await scheduler.advance(10_000 + 2 * taker.coordinator.takeIntervalMs);
    expect(deadAt).toHaveLength(1);
    expect(acquiredAt).toHaveLength(1);
    expect((acquiredAt[0] as number) - (deadAt[0] as number)).toBeLessThan(taker.coordinator.takeIntervalMs);
    expect(taker.coordinator.lease('shard-0')?.fencingToken).toBe(5);
    await scheduler.advance(30_000);
    await run(scheduler, taker.coordinator.stop());
  });

  it('stops counting its leases as held holdMs after its last successful heartbeat was sent, before anyone can take them', async () => {
    const { scheduler, ready, worker } = world(['shard-0']);
    await ready;
    const owner = worker('owner');
    let lastSentAt = -Infinity;
    owner.coordinator.on('joined', () => (lastSentAt = Math.max(lastSentAt, scheduler.now)));
    owner.coordinator.on('renewed', ({ durationMs }) => (lastSentAt = Math.max(lastSentAt, scheduler.now - durationMs)));
    await joined(scheduler, owner.coordinator);
    const signal = owner.coordinator.lease('shard-0')?.signal as AbortSignal;
    const lostAt: number[] = [];
    const reasons: string[] = [];
    owner.coordinator.on('lost', ({ reason }) => {
      reasons.push(reason);
      lostAt.push(scheduler.now);
    });
    const thief = worker('thief');
    const takenAt: number[] = [];
    thief.coordinator.on('acquired', () => takenAt.push(scheduler.now));
    await started(scheduler, thief.coordinator);
    owner.faults.cutOff = true; // the owner keeps running but cannot reach storage
    await scheduler.advance(30_000);
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBeInstanceOf(LeaseLostError);
    expect(reasons).toEqual(['self-fenced']);
    expect(takenAt).toHaveLength(1);
    expect(lostAt[0]).toBeLessThanOrEqual(lastSentAt + owner.coordinator.holdMs);
    expect(lostAt[0] as number).toBeLessThan(takenAt[0] as number);
    await run(scheduler, Promise.all([owner.coordinator.stop(), thief.coordinator.stop()]));
  });

  it('does not extend the hold on a heartbeat whose outcome is unknown', async () => {
    const { scheduler, ready, worker } = world(['shard-0']);
    await ready;
    const owner = worker('owner');
    await joined(scheduler, owner.coordinator);
    const lostAt: number[] = [];
    owner.coordinator.on('lost', () => lostAt.push(scheduler.now));
    let lastSentAt = -Infinity;
    owner.coordinator.on('renewed', ({ durationMs }) => (lastSentAt = scheduler.now - durationMs));
    await scheduler.advance(owner.coordinator.renewIntervalMs * 1.06); // one heartbeat that is heard
    expect(lastSentAt).toBeGreaterThan(0);
    owner.faults.ambiguousAfterApply = 1; // every write applies, but the owner never hears so
    const since = lastSentAt;
    await scheduler.advance(20_000);
    expect(lastSentAt).toBe(since);
    expect(lostAt.length).toBeGreaterThanOrEqual(1);
    expect((lostAt[0] as number) - since).toBeLessThanOrEqual(owner.coordinator.holdMs + 1);
    expect(owner.coordinator.isHeld('shard-0')).toBe(false);
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
    await joined(scheduler, coordinator);
    expect(coordinator.heldLeases().map((lease) => lease.leaseKey).sort()).toEqual(['parent-a', 'parent-b']);
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
    expect(errors).toContain('roster');
    expect(coordinator.incarnation).toBeNull();
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
    const { scheduler, ready, worker, storage } = world(keys);
    await ready;
    const drained: string[] = [];
    const first = worker('first', { onDrain: async (lease, reason) => void drained.push(`${lease.leaseKey}:${reason}`) });
    await joined(scheduler, first.coordinator);
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
    // Each handed-over lease names the thief's incarnation, in a new tenure.
    for (const lease of second.coordinator.heldLeases()) {
      expect(await storage.getLease(GROUP, lease.leaseKey)).toMatchObject({ owner: 'second', incarnation: second.coordinator.incarnation, epoch: 2 });
    }
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
    await joined(scheduler, leaving.coordinator);
    const waiting = worker('waiting', { takeIntervalMs: 5_000 });
    await started(scheduler, waiting.coordinator);
    await scheduler.advance(30_000);
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

describe('LeaseCoordinator reading handovers the change feed announces', () => {
  it('a lease handed over unasked is read by the member it was handed to, and by no other member', async () => {
    const scheduler = new VirtualScheduler();
    const storage = new MemoryStorage();
    const keys = Array.from({ length: 6 }, (_, i) => `shard-${i}`);
    for (const leaseKey of keys) await storage.createLease({ group: GROUP, leaseKey });
    // Each worker's own client, counting the leases it reads by key, one by one or many in one call.
    const reads = new Map<string, string[]>();
    const workers = ['a', 'b', 'c'].map((workerId, i) => {
      const clock = scheduler.clock();
      const read: string[] = [];
      reads.set(workerId, read);
      const client = new (class extends FaultyStorage {
        override async getLease(group: string, leaseKey: string): Promise<LeaseRecord | null> {
          read.push(leaseKey);
          return super.getLease(group, leaseKey);
        }
      })(storage, clock, seededRandom(i + 1), noFaults());
      const many = client.getLeases;
      expect(many, 'the memory store reads many leases by key').toBeDefined();
      Object.defineProperty(client, 'getLeases', {
        value: (group: string, leaseKeys: readonly string[]) => {
          read.push(...leaseKeys);
          return (many as NonNullable<typeof many>)(group, leaseKeys);
        },
      });
      return new LeaseCoordinator({ storage: client, group: GROUP, workerId, clock, random: seededRandom(i + 1) });
    });
    for (const coordinator of workers) await started(scheduler, coordinator);
    await scheduler.advance(60_000);
    expect(workers.map((coordinator) => coordinator.heldLeases().length)).toEqual([2, 2, 2]);
    const [leaving, ...staying] = workers as [LeaseCoordinator, ...LeaseCoordinator[]];
    // The leaving member hands each of its leases to a member that stays; the change feed announces each.
    const handed = new Map<string, string>();
    leaving.on('handed-off', ({ leaseKey, to }) => handed.set(leaseKey, to));
    for (const read of reads.values()) read.length = 0;
    await run(scheduler, leaving.stop());
    await scheduler.advance(1_000);
    expect(handed.size).toBe(2);
    for (const coordinator of staying) {
      const mine = [...handed].filter(([, to]) => to === coordinator.workerId).map(([leaseKey]) => leaseKey);
      const others = [...handed.keys()].filter((leaseKey) => !mine.includes(leaseKey));
      expect(mine.every((leaseKey) => coordinator.isHeld(leaseKey)), `${coordinator.workerId} holds the leases handed to it`).toBe(true);
      expect(reads.get(coordinator.workerId)?.filter((leaseKey) => mine.includes(leaseKey)).sort(), `${coordinator.workerId} read each lease handed to it once`).toEqual(mine.sort());
      expect(reads.get(coordinator.workerId)?.filter((leaseKey) => others.includes(leaseKey)), `${coordinator.workerId} read leases handed to another member`).toEqual([]);
    }
    await run(scheduler, Promise.all(staying.map((coordinator) => coordinator.stop())));
  });
});

describe('LeaseCoordinator checkpoints', () => {
  for (const unsafe of [false, true]) {
    it(unsafe
      ? 'with the unsafe switch, an owner without a change feed whose checkpoint meets a rewind request written since it read the lease adopts the record and says nothing (the switch brings the defect back)'
      : 'tells its runtime of a rewind request that a checkpoint\'s conflict brings, when no change feed told it', async () => {
      const { scheduler, ready, worker, storage } = world(['shard-0']);
      await ready;
      const { coordinator } = worker('owner', { useChangeFeed: false, unsafe: { adoptedRequestIgnored: unsafe } });
      await joined(scheduler, coordinator);
      const requested: string[] = [];
      coordinator.on('rewind-requested', ({ leaseKey }) => requested.push(leaseKey));
      expect(await writeRewindRequest(storage, 'r1')).toBe('applied');
      await run(scheduler, coordinator.checkpoint(tenure(coordinator, 'shard-0'), '100'));
      // The checkpoint is written on the newer record, the request kept on it for the owner to apply.
      const stored = (await storage.getLease(GROUP, 'shard-0')) as LeaseRecord;
      expect(stored.checkpoint).toBe('100');
      expect(stored.metadata['leasehold.rewind']).toContain('r1');
      expect(requested).toEqual(unsafe ? [] : ['shard-0']);
      await run(scheduler, coordinator.stop());
    });
  }

  it('moves a checkpoint forward and refuses one behind it', async () => {
    const { scheduler, ready, worker, storage } = world(['shard-0']);
    await ready;
    const { coordinator } = worker('a');
    await joined(scheduler, coordinator);
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
    await joined(scheduler, zombie.coordinator);
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
    await joined(scheduler, coordinator);
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

describe('LeaseCoordinator tenures and fencing', () => {
  it('waits on stop for a release begun before it, so that the lease is written free and not left to lapse', async () => {
    const { scheduler, storage, ready, worker } = scripted(['shard-0']);
    await ready;
    const { coordinator } = worker('a');
    await run(scheduler, coordinator.start());
    await scheduler.advance(coordinator.takeIntervalMs * 1.06);
    expect(coordinator.heldLeases().map((lease) => lease.leaseKey)).toEqual(['shard-0']);
    const lost: string[] = [];
    coordinator.on('lost', ({ leaseKey, reason }) => lost.push(`${leaseKey} ${reason}`));
    // The release's write is on its way (a stream that left the list, or user code) when stop() begins.
    const write = storage.holdNext('update', 'shard-0');
    const releasing = coordinator.release('shard-0');
    await run(scheduler, write.called);
    const stopping = coordinator.stop();
    await scheduler.advance(500);
    write.release();
    await run(scheduler, Promise.all([releasing, stopping]));
    expect(lost).toEqual([]);
    expect(await storage.getLease(GROUP, 'shard-0')).toMatchObject({ owner: null, incarnation: null });
    // Nothing lapsed, so the worker left the roster rather than waiting to expire.
    expect((await storage.getRoster(GROUP)).members.find((member) => member.workerId === 'a')?.status).toBe('dead');
  });

  it('refuses a checkpoint from an earlier tenure of the same worker once it took the lease again', async () => {
    const { scheduler, ready, worker, storage } = world(['shard-0']);
    await ready;
    const { coordinator, clock } = worker('a');
    await joined(scheduler, coordinator);
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
    await joined(scheduler, coordinator);
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
    await joined(scheduler, coordinator);
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
    await joined(scheduler, coordinator);
    const lease = coordinator.lease('shard-0');
    expect(lease).toBeDefined();
    // A timer due before the loss timer: after the pause it runs first, as an I/O completion could.
    const seen = clock.sleep(1_000).then(() => lease?.signal.aborted);
    clock.pauseUntil(scheduler.now + 30_000);
    await scheduler.advance(31_000);
    expect(await seen).toBe(true);
    expect(lease?.signal.reason).toBeInstanceOf(LeaseLostError);
    // Its membership lived on (nobody else declared it dead): it took the lease back in a new tenure.
    expect(coordinator.lease('shard-0')?.fencingToken).toBe(2);
    await run(scheduler, coordinator.stop());
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

  it('stops with the RecordFormatError its storage throws on a join beside an earlier layout\'s live members, and takes nothing', async () => {
    const { scheduler, ready, worker, storage } = world(['shard-0', 'shard-1']);
    await ready;
    const refusal = new RecordFormatError('[test] group "orders" still has live members in the earlier layout: "old-1"', 1);
    const joins: string[] = [];
    storage.putMember = async (group, workerId, expectedVersion, next) => {
      joins.push(workerId);
      if (expectedVersion === null) throw refusal;
      return MemoryStorage.prototype.putMember.call(storage, group, workerId, expectedVersion, next);
    };
    const { coordinator } = worker('a');
    const fatal: Error[] = [];
    coordinator.on('fatal', ({ error }) => void fatal.push(error));
    await run(scheduler, coordinator.start());
    await scheduler.advance(20_000);
    expect(fatal).toEqual([refusal]);
    expect(joins).toEqual(['a']);
    expect(coordinator.heldLeases()).toEqual([]);
    expect((await storage.listLeases(GROUP)).leases.map((lease) => lease.owner)).toEqual([null, null]);
  });

  it('stops with the RecordFormatError its storage throws on a roster read, rather than retrying it every tick', async () => {
    const { scheduler, ready, worker, storage } = world(['shard-0']);
    await ready;
    const refusal = new RecordFormatError('[test] group "orders" is kept in a layout this worker cannot share', 1);
    let reads = 0;
    storage.getRoster = async () => {
      reads += 1;
      throw refusal;
    };
    const { coordinator } = worker('a');
    const fatal: Error[] = [];
    coordinator.on('fatal', ({ error }) => void fatal.push(error));
    await run(scheduler, coordinator.start());
    await scheduler.advance(20_000);
    expect(fatal).toEqual([refusal]);
    expect(reads).toBe(1);
    expect(coordinator.heldLeases()).toEqual([]);
  });

  it('carries fields it does not name through taking, heartbeats and checkpointing', async () => {
    const { scheduler, worker, storage } = world([]);
    const extra = { addedLater: { nested: [1, 'two', null] }, note: 'kept' };
    await storage.createLease({ group: GROUP, leaseKey: 'shard-0', ...extra });
    const { coordinator } = worker('a');
    await joined(scheduler, coordinator);
    await scheduler.advance(10_000);
    await run(scheduler, coordinator.checkpoint(tenure(coordinator, 'shard-0'), '5'));
    const stored = await storage.getLease(GROUP, 'shard-0');
    expect(stored).toMatchObject({ owner: 'a', checkpoint: '5', ...extra });
    expect(leaseStateOf(stored as LeaseRecord)).toMatchObject(extra);
    await run(scheduler, coordinator.stop());
  });
});

describe('LeaseCoordinator checkpoints through the caller\'s write', () => {
  /** The caller's atomic write, as a transaction on the lease's database would make it, counting its calls. */
  function writer(storage: MemoryStorage, leaseKey = 'shard-0') {
    const calls: Array<{ current: LeaseRecord; next: LeaseState }> = [];
    const write: CheckpointWrite = async (current, next) => {
      calls.push({ current, next });
      const [outcome] = await storage.updateLeases(GROUP, [{ leaseKey, expectedVersion: current.version, next }]);
      return outcome as WriteResult<LeaseRecord>;
    };
    return { calls, write };
  }

  it('stores the checkpoint through the caller\'s write and adopts the record, so that its next own write follows it', async () => {
    const { scheduler, ready, worker, storage } = world(['shard-0']);
    await ready;
    const { coordinator } = worker('a');
    await joined(scheduler, coordinator);
    const { calls, write } = writer(storage);
    const before = await storage.getLease(GROUP, 'shard-0');
    await run(scheduler, coordinator.checkpointThrough(tenure(coordinator, 'shard-0'), '100', write));
    expect(calls).toHaveLength(1);
    expect(calls[0]?.current.version).toBe(before?.version);
    expect(calls[0]?.next).toMatchObject({ owner: 'a', epoch: before?.epoch, incarnation: before?.incarnation, checkpoint: '100' });
    expect(await storage.getLease(GROUP, 'shard-0')).toMatchObject({ checkpoint: '100', version: (before?.version ?? 0) + 1 });
    await run(scheduler, coordinator.checkpoint(tenure(coordinator, 'shard-0'), '200'));
    expect((await storage.getLease(GROUP, 'shard-0'))?.checkpoint).toBe('200');
    expect(coordinator.isHeld('shard-0')).toBe(true);
    await run(scheduler, coordinator.stop());
  });

  it('refuses a position at or behind the stored checkpoint without calling the write', async () => {
    const { scheduler, ready, worker, storage } = world(['shard-0']);
    await ready;
    const { coordinator } = worker('a');
    await joined(scheduler, coordinator);
    await run(scheduler, coordinator.checkpoint(tenure(coordinator, 'shard-0'), '100'));
    const { calls, write } = writer(storage);
    await expect(run(scheduler, coordinator.checkpointThrough(tenure(coordinator, 'shard-0'), '100', write))).rejects.toThrow(
      new CheckpointBehindError('[core] checkpoint "100" of lease "shard-0" is not ahead of the stored "100"'),
    );
    await expect(run(scheduler, coordinator.checkpointThrough(tenure(coordinator, 'shard-0'), '99', write))).rejects.toThrow(CheckpointBehindError);
    expect(calls).toHaveLength(0);
    await run(scheduler, coordinator.stop());
  });

  it('refuses before calling the write when the hold has passed by the worker\'s own clock', async () => {
    const { scheduler, ready, worker, storage } = world(['shard-0']);
    await ready;
    const { coordinator, clock } = worker('a');
    await joined(scheduler, coordinator);
    const lease = tenure(coordinator, 'shard-0');
    clock.pauseUntil(scheduler.now + 15_000); // past the hold; storage still names this worker
    await scheduler.advance(15_000);
    const { calls, write } = writer(storage);
    await expect(coordinator.checkpointThrough(lease, '100', write)).rejects.toThrow(LeaseLostError);
    expect(calls).toHaveLength(0);
    await run(scheduler, coordinator.stop());
  });

  it('drops the lease when the write finds it moved on (a conflict), and refuses the checkpoint with a LeaseLostError', async () => {
    const { scheduler, ready, worker, storage } = world(['shard-0']);
    await ready;
    const { coordinator } = worker('a');
    await joined(scheduler, coordinator);
    const lease = coordinator.lease('shard-0');
    const stored = await storage.getLease(GROUP, 'shard-0');
    if (!lease || !stored) throw new Error('the lease is not held');
    // Another worker took it in storage (this one has not seen it yet).
    await storage.updateLeases(GROUP, [{ leaseKey: 'shard-0', expectedVersion: stored.version, next: { ...leaseStateOf(stored), owner: 'b', incarnation: 'b-1', epoch: stored.epoch + 1 } }]);
    const { write } = writer(storage);
    const refused = run(scheduler, coordinator.checkpointThrough(lease, '100', write));
    await expect(refused).rejects.toThrow(LeaseLostError);
    await expect(refused).rejects.toThrow('worker "a" does not hold lease "shard-0"');
    expect(lease.signal.aborted).toBe(true);
    expect(coordinator.isHeld('shard-0')).toBe(false);
    expect(await storage.getLease(GROUP, 'shard-0')).toMatchObject({ owner: 'b', checkpoint: null });
    await run(scheduler, coordinator.stop());
  });

  it('reads back an unknown outcome: adopted when the write applied, refused as unknown when it did not, and the next attempt goes on from the stored lease', async () => {
    const { scheduler, ready, worker, storage } = world(['shard-0']);
    await ready;
    const { coordinator } = worker('a');
    await joined(scheduler, coordinator);
    const { write } = writer(storage);
    const lost: CheckpointWrite = async (current, next) => {
      await write(current, next);
      return result.unknown(new StorageOutcomeUnknownError('[test] the connection was cut at COMMIT'));
    };
    await run(scheduler, coordinator.checkpointThrough(tenure(coordinator, 'shard-0'), '100', lost));
    expect((await storage.getLease(GROUP, 'shard-0'))?.checkpoint).toBe('100');
    const rolledBack: CheckpointWrite = async () => result.unknown(new StorageOutcomeUnknownError('[test] the connection was cut at COMMIT'));
    await expect(run(scheduler, coordinator.checkpointThrough(tenure(coordinator, 'shard-0'), '200', rolledBack))).rejects.toThrow(
      '[core] checkpoint of lease "shard-0" through the caller\'s write did not apply',
    );
    expect(coordinator.isHeld('shard-0')).toBe(true);
    await run(scheduler, coordinator.checkpointThrough(tenure(coordinator, 'shard-0'), '200', write));
    expect((await storage.getLease(GROUP, 'shard-0'))?.checkpoint).toBe('200');
    await run(scheduler, coordinator.stop());
  });
});
