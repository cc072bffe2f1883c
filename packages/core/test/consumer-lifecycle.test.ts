import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import {
  Checkpoint,
  Consumer,
  MemorySource,
  MemoryStorage,
  SourceError,
  type CheckpointStorage,
  type ConsumerOptions,
  type Position,
  type ReadOptions,
  type ShardBatch,
  type ShardSource,
  type SourceRecord,
} from '../src/index.js';
import { BORN_FIELD, leaderStateOf, STALL_FIELDS } from '../src/adapter.js';
import { seededRandom, VirtualScheduler, withUnsafe, type ConsumerUnsafe } from '../src/testing/index.js';
import { decoder, GROUP, perKey, range, world } from './support/consumer-world.js';
import { run } from './support/virtual.js';

/** A source whose reads of chosen shards fail: `failures` times (a transient fault), or for good (`Infinity`). */
class FailingReads implements ShardSource {
  readonly #inner: MemorySource;
  readonly failures = new Map<string, number>();
  /** Shards the source says are gone (trimmed), when asked. */
  readonly gone = new Set<string>();
  error: () => Error = () => new SourceError('ERR_READ', '[test] the read failed');

  async isShardGone(shardId: string): Promise<boolean> {
    return this.gone.has(shardId);
  }

  constructor(inner: MemorySource) {
    this.#inner = inner;
  }

  listShards() {
    return this.#inner.listShards();
  }

  comparePositions(a: Position, b: Position): number {
    return this.#inner.comparePositions(a, b);
  }

  async *read(shardId: string, from: Position, options?: ReadOptions): AsyncGenerator<ShardBatch> {
    let yielded = 0;
    for await (const batch of this.#inner.read(shardId, from, options)) {
      const left = this.failures.get(shardId) ?? 0;
      // Fail after one batch, so that the failure lands mid-shard with work already done.
      if (left > 0 && yielded >= 1) {
        this.failures.set(shardId, left - 1);
        throw this.error();
      }
      yielded++;
      yield batch;
    }
  }
}

/** The storage without its leader record methods: a consumer with no leader, no shard sync and no birth gate. */
function leaderless(storage: MemoryStorage): CheckpointStorage {
  return {
    contractVersion: storage.contractVersion,
    listLeases: (group) => storage.listLeases(group),
    getLease: (group, leaseKey) => storage.getLease(group, leaseKey),
    createLease: (lease, options) => storage.createLease(lease, options),
    updateLeases: (group, updates) => storage.updateLeases(group, updates),
    deleteLease: (group, leaseKey, version) => storage.deleteLease(group, leaseKey, version),
    getRoster: (group) => storage.getRoster(group),
    putMember: (group, workerId, version, next) => storage.putMember(group, workerId, version, next),
    removeMember: (group, workerId, version) => storage.removeMember(group, workerId, version),
    // The change feed tells the worker of leases created behind its back (here by the test itself).
    subscribe: (group, listener) => storage.subscribe(group, listener),
  };
}

describe('Consumer: resharding with default settings', () => {
  it('reads a child of a split from its beginning, with the default LATEST: records put to the children before their readers start are delivered', async () => {
    const { scheduler, source, seen, consumer, produce } = world(1);
    const clock = scheduler.clock();
    // A slow handler keeps a backlog in the parent, so the children's records wait for their readers.
    const worker = consumer('w1', {
      initialPosition: 'LATEST',
      processBatch: async (records, context) => {
        await clock.sleep(200);
        for (const record of records) {
          const [key, value] = decoder.decode(record.data).split('=') as [string, string];
          seen.push({ worker: 'w1', shardId: context.shardId, key, value: Number(value) });
        }
      },
    });
    await run(scheduler, worker.start());
    produce(['a', 'b', 'c', 'd'], 20);
    const [left, right] = source.split('shard-0000');
    produce(['a', 'b', 'c', 'd'], 20, 21);
    await scheduler.advance(60_000);
    expect(seen.filter((entry) => entry.shardId === left || entry.shardId === right)).toHaveLength(80);
    for (const values of perKey(seen).values()) expect(values).toEqual(range(1, 40));
    await run(scheduler, worker.stop());
  });

  it('with the unsafe switch, those records are lost (the switch brings the defect back)', async () => {
    const { scheduler, source, seen, consumer, produce } = world(1);
    const clock = scheduler.clock();
    const worker = consumer('w1', {
      initialPosition: 'LATEST',
      unsafe: { childrenAtInitialPosition: true },
      processBatch: async (records, context) => {
        await clock.sleep(200);
        for (const record of records) seen.push({ worker: 'w1', shardId: context.shardId, key: '', value: Number(record.position) });
      },
    });
    await run(scheduler, worker.start());
    produce(['a', 'b', 'c', 'd'], 20);
    source.split('shard-0000');
    produce(['a', 'b', 'c', 'd'], 20, 21);
    await scheduler.advance(60_000);
    expect(seen.length).toBeLessThan(160);
    await run(scheduler, worker.stop());
  });

  it('takes no lease before the leader records the group first complete shard sync', async () => {
    const scheduler = new VirtualScheduler();
    const clock = scheduler.clock();
    const storage = new MemoryStorage();
    const source = new MemorySource(1, { clock });
    await storage.createLease({ group: GROUP, leaseKey: 'shard-0000', checkpoint: Checkpoint.TRIM_HORIZON });
    // Another worker leads, and has not finished a sync yet: it renews its record every second.
    let leader = await storage.createLeader({ group: GROUP, holder: 'elsewhere', term: 1 });
    const renewing = (async () => {
      for (let i = 0; i < 40 && leader.status === 'applied'; i++) {
        await clock.sleep(1_000);
        const current = leader.record;
        const born: Record<string, string> = i >= 20 ? { [BORN_FIELD]: 'now' } : {};
        leader = await storage.updateLeader(GROUP, current.version, { ...leaderStateOf(current), metadata: born });
      }
    })();
    const worker = new Consumer({ group: GROUP, source, storage, workerId: 'w1', clock, random: seededRandom(1), processBatch: () => undefined });
    const starting = worker.start();
    await scheduler.advance(15_000);
    expect((await storage.getLease(GROUP, 'shard-0000'))?.owner).toBeNull();
    await scheduler.advance(15_000);
    await run(scheduler, starting);
    expect((await storage.getLease(GROUP, 'shard-0000'))?.owner).toBe('w1');
    await run(scheduler, Promise.all([worker.stop(), renewing]));
  });

  /** Two shards merged into one; only the first parent has a lease; one worker and no leader. */
  async function mergeWithOneParentLeased({ unsafe, ...options }: Partial<ConsumerOptions> & { unsafe?: ConsumerUnsafe } = {}) {
    const scheduler = new VirtualScheduler();
    const clock = scheduler.clock();
    const memory = new MemoryStorage();
    const source = new MemorySource(2, { clock });
    await memory.createLease({ group: GROUP, leaseKey: 'shard-0000', checkpoint: Checkpoint.TRIM_HORIZON });
    const child = source.merge('shard-0000', 'shard-0001');
    const worker = new Consumer(withUnsafe({ group: GROUP, source, storage: leaderless(memory), workerId: 'w1', clock, random: seededRandom(1), processBatch: () => undefined, ...options }, unsafe));
    await run(scheduler, worker.start());
    await scheduler.advance(10_000);
    return { scheduler, memory, child, worker };
  }

  it('at a parent end, creates a merge child only when its other parent has a lease; the leader does the rest', async () => {
    const { scheduler, memory, child, worker } = await mergeWithOneParentLeased();
    expect((await memory.getLease(GROUP, 'shard-0000'))?.checkpoint).toBe(Checkpoint.SHARD_END);
    expect(await memory.getLease(GROUP, child)).toBeNull();
    await memory.createLease({ group: GROUP, leaseKey: 'shard-0001', checkpoint: Checkpoint.TRIM_HORIZON });
    await scheduler.advance(10_000);
    expect(await memory.getLease(GROUP, child)).toMatchObject({ parentKeys: ['shard-0000', 'shard-0001'], checkpoint: Checkpoint.TRIM_HORIZON });
    await run(scheduler, worker.stop());
  });

  it('with the unsafe birth race, that merge child is created while its other parent has no lease (the switch brings the defect back)', async () => {
    const { scheduler, memory, child, worker } = await mergeWithOneParentLeased({ unsafe: { birthRace: true } });
    expect(await memory.getLease(GROUP, child)).not.toBeNull();
    await run(scheduler, worker.stop());
  });
});

describe('Consumer: readers that fail', () => {
  function failing({ unsafe, ...options }: Partial<ConsumerOptions> & { unsafe?: ConsumerUnsafe } = {}) {
    const scheduler = new VirtualScheduler();
    const clock = scheduler.clock();
    const storage = new MemoryStorage();
    const memory = new MemorySource(1, { clock, batchSize: 5 });
    const source = new FailingReads(memory);
    const seen: string[] = [];
    const worker = new Consumer(withUnsafe({
      group: GROUP,
      source,
      storage,
      workerId: 'w1',
      clock,
      random: seededRandom(3),
      initialPosition: 'TRIM_HORIZON',
      retry: { initialDelayMs: 100, maxDelayMs: 1_000 },
      processBatch: (records: readonly SourceRecord[]) => void seen.push(...records.map((record) => decoder.decode(record.data))),
      ...options,
    }, unsafe));
    const failures: Array<{ attempt: number; released: boolean }> = [];
    worker.on('shard-failed', ({ attempt, released }) => void failures.push({ attempt, released }));
    const owners: Array<string | null> = [];
    return { scheduler, clock, storage, memory, source, seen, worker, failures, owners };
  }

  it('reads a shard again after a failed read, with backoff, and delivers everything', async () => {
    const { scheduler, memory, source, seen, worker, failures } = failing();
    for (let i = 1; i <= 30; i++) memory.put('k', `r${i}`);
    source.failures.set('shard-0000', 2);
    await run(scheduler, worker.start());
    await scheduler.advance(20_000);
    expect(failures).toEqual([
      { attempt: 1, released: false },
      { attempt: 2, released: false },
    ]);
    expect(new Set(seen)).toEqual(new Set(range(1, 30).map((n) => `r${n}`)));
    await run(scheduler, worker.stop());
  });

  it('a reader started again after each failed read leaves nothing on its lease\'s signal: a lease held for long outlives many readers', async () => {
    const { scheduler, memory, source, seen, worker, failures } = failing();
    for (let i = 1; i <= 30; i++) memory.put('k', `r${i}`);
    // Four failures in a row: the fifth would give the lease back.
    source.failures.set('shard-0000', 4);
    await run(scheduler, worker.start());
    await scheduler.advance(30_000);
    expect(failures.map((failure) => failure.released)).toEqual([false, false, false, false]);
    expect(seen).toHaveLength(30);
    const lease = worker.coordinator.lease('shard-0000');
    // The reader of now, and nothing of the four before it.
    expect(getEventListeners(lease!.signal, 'abort')).toHaveLength(1);
    await run(scheduler, worker.stop());
  });

  it('gives the lease back after repeated failures, so that it is never held with nobody reading it', async () => {
    const { scheduler, memory, source, storage, worker, failures } = failing();
    for (let i = 1; i <= 30; i++) memory.put('k', `r${i}`);
    source.failures.set('shard-0000', Infinity);
    let freed = 0;
    const watch = (async () => {
      for (let i = 0; i < 300; i++) {
        if ((await storage.getLease(GROUP, 'shard-0000'))?.owner === null && worker.coordinator.heldLeases().length === 0) freed++;
        await scheduler.clock().sleep(100);
      }
    })();
    await run(scheduler, worker.start());
    await scheduler.advance(30_000);
    expect(failures.filter((failure) => failure.released).length).toBeGreaterThan(0);
    expect(failures.find((failure) => failure.released)?.attempt).toBe(5);
    expect(freed).toBeGreaterThan(0);
    await run(scheduler, Promise.all([worker.stop(), watch]));
  });

  it('gives a gone shard back at once', async () => {
    const { scheduler, memory, source, worker, failures } = failing();
    for (let i = 1; i <= 30; i++) memory.put('k', `r${i}`);
    source.failures.set('shard-0000', 1);
    source.error = () => new SourceError('ERR_SHARD_NOT_FOUND', '[test] shard-0000 does not exist');
    await run(scheduler, worker.start());
    // A new member takes its first leases a take tick after it joined.
    await scheduler.advance(2_500);
    expect(failures).toEqual([{ attempt: 1, released: true }]);
    await run(scheduler, worker.stop());
  });

  it('records a shard the source confirms gone as finished, so that it is not taken and given back for ever', async () => {
    const { scheduler, memory, source, storage, worker, failures } = failing();
    for (let i = 1; i <= 30; i++) memory.put('k', `r${i}`);
    source.failures.set('shard-0000', 1);
    source.gone.add('shard-0000');
    source.error = () => new SourceError('ERR_SHARD_NOT_FOUND', '[test] shard-0000 does not exist');
    await run(scheduler, worker.start());
    await scheduler.advance(10_000);
    expect(failures).toEqual([{ attempt: 1, released: true }]);
    expect(await storage.getLease(GROUP, 'shard-0000')).toMatchObject({ checkpoint: Checkpoint.SHARD_END, owner: null });
    await run(scheduler, worker.stop());
  });

  it("a stop that comes while a gone shard is being recorded finished waits for it: the shard's end is reported and its lease given back finished, not handed on", async () => {
    const { scheduler, clock, memory, source, storage, worker } = failing();
    for (let i = 1; i <= 30; i++) memory.put('k', `r${i}`);
    source.failures.set('shard-0000', 1);
    source.error = () => new SourceError('ERR_SHARD_NOT_FOUND', '[test] shard-0000 does not exist');
    // The source answers whether the shard is gone slowly: the stop comes while it is asked.
    let asked = 0;
    let answer: () => void = () => undefined;
    const answered = new Promise<void>((resolve) => (answer = resolve));
    source.isShardGone = async () => {
      asked++;
      await answered;
      return true;
    };
    const ended: string[] = [];
    worker.on('shard-ended', ({ shardId }) => ended.push(shardId));
    await run(scheduler, worker.start());
    for (let step = 0; step < 1_000 && asked === 0; step++) await scheduler.advance(10);
    expect(asked).toBe(1);
    void clock.sleep(1_000).then(answer);
    await run(scheduler, worker.stop());
    expect(ended).toEqual(['shard-0000']);
    expect(await storage.getLease(GROUP, 'shard-0000')).toMatchObject({ checkpoint: Checkpoint.SHARD_END, owner: null });
  });

  it('with the unsafe switch, a failed reader keeps its lease with nobody reading (the switch brings the defect back)', async () => {
    const { scheduler, memory, source, worker, failures } = failing({ unsafe: { keepFailedPump: true } });
    for (let i = 1; i <= 30; i++) memory.put('k', `r${i}`);
    source.failures.set('shard-0000', 1);
    await run(scheduler, worker.start());
    await scheduler.advance(20_000);
    expect(failures).toEqual([{ attempt: 1, released: false }]);
    expect(worker.coordinator.isHeld('shard-0000')).toBe(true);
    expect(worker.shards).toEqual([]);
    await run(scheduler, worker.stop());
  });
});

describe('Consumer: stopping and stalls', () => {
  it('returns from stop() by its deadline when a handler ignores its signal, and a second stop() waits for the first', async () => {
    const { scheduler, consumer, produce } = world(1);
    const worker = consumer('w1', { processBatch: () => new Promise<void>(() => undefined) });
    await run(scheduler, worker.start());
    produce(['a'], 3);
    await scheduler.advance(1_000);
    const stoppedAt = scheduler.now;
    const returned: Array<[string, number]> = [];
    const first = worker.stop({ timeoutMs: 2_000 }).then(() => void returned.push(['first', scheduler.now - stoppedAt]));
    const second = worker.stop().then(() => void returned.push(['second', scheduler.now - stoppedAt]));
    await run(scheduler, Promise.all([first, second]));
    expect(returned.map(([which]) => which)).toEqual(['first', 'second']);
    expect(Math.max(...returned.map(([, at]) => at))).toBeLessThanOrEqual(2_000);
  });

  it('gives the leader the lease timing it was given, unless told otherwise', () => {
    const source = new MemorySource(1);
    const storage = new MemoryStorage();
    const base = { group: GROUP, source, storage, processBatch: () => undefined };
    const same = new Consumer({ ...base, lease: { leaseDurationMs: 20_000, renewIntervalMs: 4_000, safetyMarginMs: 100 } });
    expect(same.elector?.renewIntervalMs).toBe(4_000);
    expect(same.elector?.holdMs).toBe(same.coordinator.holdMs);
    const own = new Consumer({ ...base, lease: { leaseDurationMs: 20_000 }, leader: { leaseDurationMs: 6_000, renewIntervalMs: 1_000 } });
    expect(own.elector?.leaseDurationMs).toBe(6_000);
    expect(own.elector?.renewIntervalMs).toBe(1_000);
  });

  it('reports a shard whose handler does not return as stalled, on the lease too, and as resumed when it does', async () => {
    const { scheduler, consumer, produce, storage } = world(1);
    const clock = scheduler.clock();
    let slow = true;
    const worker = consumer('w1', {
      stallAfterMs: 20_000,
      processBatch: async () => {
        if (slow) await clock.sleep(60_000);
        slow = false;
      },
    });
    const events: string[] = [];
    worker.on('shard-stalled', ({ shardId, reason }) => void events.push(`stalled ${shardId} ${reason}`));
    worker.on('shard-resumed', ({ shardId }) => void events.push(`resumed ${shardId}`));
    await run(scheduler, worker.start());
    produce(['a'], 3);
    await scheduler.advance(30_000);
    expect(events).toEqual(['stalled shard-0000 handler']);
    const metadata = (await storage.getLease(GROUP, 'shard-0000'))?.metadata ?? {};
    expect(metadata[STALL_FIELDS.reason]).toBe('handler');
    expect(Date.parse(metadata[STALL_FIELDS.since] ?? '')).toBeGreaterThan(0);
    await scheduler.advance(50_000);
    expect(events).toEqual(['stalled shard-0000 handler', 'resumed shard-0000']);
    expect(Object.keys((await storage.getLease(GROUP, 'shard-0000'))?.metadata ?? {})).toEqual([]);
    await run(scheduler, worker.stop());
  });

  it('reports a shard stopped by the stop policy as stalled with nobody reading it', async () => {
    const { scheduler, consumer, produce } = world(1);
    const worker = consumer('w1', {
      stallAfterMs: 10_000,
      onHandlerError: 'stop',
      processBatch: () => {
        throw new Error('bad record');
      },
    });
    const reasons: string[] = [];
    worker.on('shard-stalled', ({ reason }) => void reasons.push(reason));
    await run(scheduler, worker.start());
    produce(['a'], 3);
    await scheduler.advance(20_000);
    expect(reasons).toEqual(['failed']);
    await run(scheduler, worker.stop());
  });
});
