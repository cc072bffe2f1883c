import { describe, expect, it } from 'vitest';
import { Checkpoint, Consumer, InvalidConfigError, type ConsumerOptions, MemorySource, MemoryStorage, type CheckpointWrite, type CreateLeaseOptions, type LeaseRecord, type NewLease, type ShardSource, StorageUnavailableError, type WriteResult } from '../src/index.js';
import { run } from './support/virtual.js';

import { decoder, GROUP, perKey, range, world } from './support/consumer-world.js';

/**
 * A memory store whose creates of children's leases (leases with parents) call `before` first, and a
 * consumer on it (made by a world's `consumer`) whose shard ends, hooks and errors are written down in order.
 */
function endWatched(consumer: ReturnType<typeof world>['consumer'], before: () => Promise<void>, options: Partial<ConsumerOptions> = {}) {
  class ChildCreates extends MemoryStorage {
    override async createLease(lease: NewLease, createOptions?: CreateLeaseOptions): Promise<WriteResult<LeaseRecord>> {
      if (lease.parentKeys !== undefined && lease.parentKeys.length > 0) await before();
      return super.createLease(lease, createOptions);
    }
  }
  const storage = new ChildCreates();
  const events: string[] = [];
  const errors: string[] = [];
  const worker = consumer('w1', {
    storage,
    ...options,
    hooks: {
      shardEnded: (shardId) => void events.push(`hook shardEnded ${shardId}`),
      shutdownRequested: (shardId) => void events.push(`hook shutdownRequested ${shardId}`),
    },
  });
  worker.on('shard-ended', ({ shardId }) => events.push(`ended ${shardId}`));
  worker.on('error', ({ operation, error }) => errors.push(`${operation}: ${error.message}`));
  return { storage, worker, events, errors };
}

describe('Consumer', () => {
  it('refuses invalid options with an InvalidConfigError naming the value', () => {
    const source = new MemorySource(1);
    const storage = new MemoryStorage();
    const base = { group: GROUP, source, storage, processBatch: () => undefined };
    expect(() => new Consumer({ ...base, processBatch: 5 as never })).toThrow('processBatch must be a function, got 5');
    expect(() => new Consumer({ ...base, checkpointing: { everyRecords: 0 } })).toThrow(InvalidConfigError);
    expect(() => new Consumer({ ...base, checkpointing: { everyRecords: 0 } })).toThrow('checkpointing.everyRecords must be a positive integer, got 0');
    expect(() => new Consumer({ ...base, onHandlerError: 'ignore' as never })).toThrow(`onHandlerError must be 'retry', 'skip', 'stop' or { bisect?, maxAttempts?, maxRecordAgeMs?, deadLetter? }, got "ignore"`);
    expect(() => new Consumer({ ...base, initialPosition: { atTimestamp: -1 } })).toThrow('initialPosition must be');
  });

  it('refuses an option it does not take with an InvalidConfigError naming it and, for an option of a nested object, where it belongs', () => {
    const source = new MemorySource(1);
    const storage = new MemoryStorage();
    const base = { group: GROUP, source, storage, processBatch: () => undefined };
    const refuse = (options: object, message: string): void => {
      expect(() => new Consumer({ ...base, ...options })).toThrow(InvalidConfigError);
      expect(() => new Consumer({ ...base, ...options })).toThrow(`[core] ${message}`);
    };
    refuse({ leaseDurationMs: 1000 }, 'Consumer has no option "leaseDurationMs"; did you mean lease.leaseDurationMs?');
    refuse({ takeIntervalMs: 500 }, 'Consumer has no option "takeIntervalMs"; did you mean lease.takeIntervalMs?');
    refuse({ initialDelayMs: 50 }, 'Consumer has no option "initialDelayMs"; did you mean retry.initialDelayMs?');
    refuse({ everyRecords: 10 }, 'Consumer has no option "everyRecords"; did you mean checkpointing.everyRecords?');
    refuse({ deadLetter: () => undefined }, 'Consumer has no option "deadLetter"; did you mean onHandlerError.deadLetter?');
    refuse({ meter: {} }, 'Consumer has no option "meter"; did you mean metrics.meter?');
    refuse({ shardSyncIntervalMS: 1000 }, 'Consumer has no option "shardSyncIntervalMS"; did you mean shardSyncIntervalMs?');
    refuse({ sauce: 1 }, 'Consumer has no option "sauce"; it takes group, source, streams,');
    refuse({ lease: { takeIntervalMS: 500 } }, 'Consumer option lease has no option "takeIntervalMS"; did you mean lease.takeIntervalMs?');
    refuse({ lease: { workerId: 'w1' } }, 'Consumer option lease has no option "workerId"; did you mean workerId (an option of the Consumer itself)?');
    refuse({ lease: { useChangeFeed: false } }, 'Consumer option lease has no option "useChangeFeed"; it takes leaseDurationMs, renewIntervalMs,');
    refuse({ leader: { takeIntervalMs: 500 } }, 'Consumer option leader has no option "takeIntervalMs"; did you mean lease.takeIntervalMs?');
    refuse({ retry: { maxRecordAgeMs: 500 } }, 'Consumer option retry has no option "maxRecordAgeMs"; did you mean onHandlerError.maxRecordAgeMs?');
    refuse({ checkpointing: { everyMs: 100, everyBatches: 2 } }, 'Consumer option checkpointing has no option "everyBatches"; it takes everyRecords, everyMs');
    refuse({ metrics: { meter: {}, prefix: 'x' } }, 'Consumer option metrics has no option "prefix"; it takes meter');
    // Every option it takes, nested ones included, is accepted.
    expect(
      () =>
        new Consumer({
          ...base,
          lease: { leaseDurationMs: 20_000, renewIntervalMs: 5_000, takeIntervalMs: 1_000, maxLeasesPerWorker: 5, maxStealsPerTick: 1, maxClockDrift: 0.01, safetyMarginMs: 100, handoffTimeoutMs: 1_000 },
          leader: { leaseDurationMs: 20_000, renewIntervalMs: 5_000, maxClockDrift: 0.01, safetyMarginMs: 100 },
          retry: { initialDelayMs: 10, maxDelayMs: 100, maxAttempts: 2 },
          checkpointing: { everyRecords: 10, everyMs: 100 },
          metrics: false,
        }),
    ).not.toThrow();
  });

  it('processes every record of every shard once, in order per key, and checkpoints each shard to its end', async () => {
    const { scheduler, storage, seen, consumer, produce } = world(3);
    produce(['a', 'b', 'c', 'd', 'e'], 40);
    const worker = consumer('w1');
    await run(scheduler, worker.start());
    await scheduler.advance(10_000);
    for (const values of perKey(seen).values()) expect(values).toEqual(range(1, 40));
    const { leases } = await storage.listLeases(GROUP);
    expect(leases).toHaveLength(3);
    for (const lease of leases) {
      const received = seen.some((entry) => entry.shardId === lease.leaseKey);
      // Born at the initial position; moved only by the records it delivered.
      expect(lease.checkpoint === 'TRIM_HORIZON' ? 'none' : 'position').toBe(received ? 'position' : 'none');
    }
    await run(scheduler, worker.stop());
  });

  it("a new group's workers started together deal the shards between them at birth: each shard taken once", async () => {
    const { scheduler, consumer } = world(40);
    const workers = Array.from({ length: 8 }, (_, i) => consumer(`w${i}`));
    let acquisitions = 0;
    for (const worker of workers) worker.coordinator.on('acquired', () => acquisitions++);
    await run(scheduler, Promise.all(workers.map((worker) => worker.start())));
    await scheduler.advance(20_000);
    expect(workers.map((worker) => worker.shards.length)).toEqual(Array.from({ length: 8 }, () => 5));
    expect(acquisitions).toBe(40);
    await run(scheduler, Promise.all(workers.map((worker) => worker.stop())));
  });

  it('a graceful stop hands every shard to the other worker, which replays nothing', async () => {
    const { scheduler, seen, consumer, produce } = world(4);
    const first = consumer('first');
    const second = consumer('second');
    await run(scheduler, first.start());
    await run(scheduler, second.start());
    produce(['a', 'b', 'c', 'd', 'e', 'f'], 30);
    await scheduler.advance(30_000);
    expect(first.shards.length).toBeGreaterThan(0);
    expect(second.shards.length).toBeGreaterThan(0);
    await run(scheduler, first.stop());
    produce(['a', 'b', 'c', 'd', 'e', 'f'], 30, 31);
    await scheduler.advance(10_000);
    expect(second.shards).toHaveLength(4);
    for (const values of perKey(seen).values()) expect(values).toEqual(range(1, 60));
    await run(scheduler, second.stop());
  });

  it('after a crash the survivor resumes from the last checkpoint: nothing lost, order kept, replays only past it', async () => {
    const { scheduler, seen, consumer, produce } = world(2);
    const doomedClock = scheduler.clock();
    const doomed = consumer('doomed', {}, doomedClock);
    await run(scheduler, doomed.start());
    const survivor = consumer('survivor');
    await run(scheduler, survivor.start());
    produce(['a', 'b', 'c', 'd'], 20);
    await scheduler.advance(20_000);
    doomedClock.kill();
    produce(['a', 'b', 'c', 'd'], 20, 21);
    await scheduler.advance(40_000);
    expect(survivor.shards).toHaveLength(2);
    for (const values of perKey(seen).values()) {
      // Every record at least once, and the sequence of first sights is in order.
      expect([...new Set(values)]).toEqual(range(1, 40));
      expect(values).toEqual([...values].sort((x, y) => x - y));
    }
    await run(scheduler, survivor.stop());
  });

  it('a split shard: the children start only after the parent ended, so per-key order holds', async () => {
    const { scheduler, source, seen, consumer, produce, storage } = world(1);
    const worker = consumer('w1', { checkpointing: { everyRecords: 5 } });
    produce(['a', 'b', 'c'], 30);
    const [left, right] = source.split('shard-0000');
    produce(['a', 'b', 'c'], 30, 31);
    const ended: string[] = [];
    worker.on('shard-ended', ({ shardId, childShardIds }) => ended.push(`${shardId}->${childShardIds.join(',')}`));
    await run(scheduler, worker.start());
    await scheduler.advance(30_000);
    expect(ended).toEqual([`shard-0000->${left},${right}`]);
    for (const values of perKey(seen).values()) expect(values).toEqual(range(1, 60));
    // The finished parent is cleaned up by the leader once its children started.
    expect((await storage.listLeases(GROUP)).leases.map((lease) => lease.leaseKey).sort()).toEqual([left, right]);
    await run(scheduler, worker.stop());
  });

  it("a graceful stop that comes while a shard's end is being finished waits for it: the end is reported, shardEnded called, the children's leases created, and nothing is checkpointed after SHARD_END", async () => {
    const { scheduler, source, seen, consumer, produce } = world(1);
    // The children's leases are created slowly: the stop comes between the parent's SHARD_END checkpoint and the end's report.
    let childCreates = 0;
    let openGate: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (openGate = resolve));
    const { storage, worker, events, errors } = endWatched(
      consumer,
      async () => {
        childCreates++;
        await gate;
      },
      { shardSyncIntervalMs: 3_600_000 },
    );
    produce(['a', 'b'], 10);
    await run(scheduler, worker.start());
    await scheduler.advance(5_000);
    const [left, right] = source.split('shard-0000');
    for (let step = 0; step < 1_000 && childCreates === 0; step++) await scheduler.advance(10);
    expect(childCreates).toBe(1);
    expect(events).toEqual([]);

    const clock = scheduler.clock();
    void clock.sleep(2_000).then(openGate);
    const stopping = worker.stop();
    await run(scheduler, stopping);
    // All of it before the stop returned: a process that exits then loses nothing of the end.
    expect(events).toEqual(['ended shard-0000', 'hook shardEnded shard-0000']);
    expect(errors).toEqual([]);
    const { leases } = await storage.listLeases(GROUP);
    expect(leases.map((lease) => [lease.leaseKey, lease.owner, lease.checkpoint])).toEqual([
      ['shard-0000', null, Checkpoint.SHARD_END],
      [left, null, Checkpoint.TRIM_HORIZON],
      [right, null, Checkpoint.TRIM_HORIZON],
    ]);
    for (const values of perKey(seen).values()) expect(values).toEqual(range(1, 10));
  });

  it("a child's lease that cannot be created at its parent's end (refused before it was sent) is reported and left to the leader: the end is still reported, shardEnded called and the parent given back", async () => {
    const { scheduler, source, consumer, produce } = world(1);
    let refused = 0;
    const { storage, worker, events, errors } = endWatched(
      consumer,
      async () => {
        if (refused === 0) {
          refused++;
          throw new StorageUnavailableError('connection refused before the request was sent');
        }
      },
      { shardSyncIntervalMs: 5_000 },
    );
    produce(['a', 'b'], 10);
    await run(scheduler, worker.start());
    await scheduler.advance(2_000);
    const [left, right] = source.split('shard-0000');
    await scheduler.advance(1_000);
    expect(refused).toBe(1);
    expect(events).toEqual(['ended shard-0000', 'hook shardEnded shard-0000']);
    expect(errors).toEqual(['create-child-lease: connection refused before the request was sent']);
    // The leader's shard sync creates the child that was refused (and then cleans the finished parent up); both are read.
    await scheduler.advance(10_000);
    const { leases } = await storage.listLeases(GROUP);
    expect(leases.map((lease) => lease.leaseKey).sort()).toEqual([left, right].sort());
    expect(worker.shards.sort()).toEqual([left, right].sort());
    await run(scheduler, worker.stop());
  });

  it('at a shard\'s end the reader creates the children\'s leases from the children the end names, listing the stream only when it names none', async () => {
    for (const named of [true, false]) {
      const { scheduler, source, storage, seen, consumer, produce } = world(1);
      let listings = 0;
      // The source, counting its listings; with `named` false its ends name the children without their parents.
      const counted: ShardSource = {
        listShards: () => {
          listings++;
          return source.listShards();
        },
        comparePositions: (a, b) => source.comparePositions(a, b),
        read: async function* (shardId, from, options) {
          for await (const batch of source.read(shardId, from, options)) yield batch.kind === 'end' && !named ? { kind: 'end', childShardIds: batch.childShardIds } : batch;
        },
      };
      // The leader syncs the shards once, at the group's birth: the children's leases come from the parent's reader.
      const worker = consumer('w1', { source: counted, shardSyncIntervalMs: 3_600_000 });
      produce(['a', 'b', 'c'], 10);
      await run(scheduler, worker.start());
      await scheduler.advance(5_000);
      const listedBefore = listings;
      const [left, right] = source.split('shard-0000');
      produce(['a', 'b', 'c'], 10, 11);
      await scheduler.advance(10_000);

      expect(listings - listedBefore).toBe(named ? 0 : 1);
      expect((await storage.listLeases(GROUP)).leases.map((lease) => [lease.leaseKey, lease.parentKeys])).toEqual([
        ['shard-0000', []],
        [left, ['shard-0000']],
        [right, ['shard-0000']],
      ]);
      for (const values of perKey(seen).values()) expect(values).toEqual(range(1, 20));
      await run(scheduler, worker.stop());
    }
  });

  it('a merged child waits for both parents, across two workers', async () => {
    const { scheduler, source, seen, consumer, produce } = world(2);
    produce(['a', 'b', 'c', 'd'], 20);
    const child = source.merge('shard-0000', 'shard-0001');
    produce(['a', 'b', 'c', 'd'], 20, 21);
    const workers = [consumer('x'), consumer('y')];
    for (const worker of workers) await run(scheduler, worker.start());
    await scheduler.advance(40_000);
    for (const values of perKey(seen).values()) expect(values).toEqual(range(1, 40));
    expect(seen.filter((entry) => entry.shardId === child).every((entry) => entry.value > 20)).toBe(true);
    await run(scheduler, Promise.all(workers.map((worker) => worker.stop())));
  });

  it('retries a failing batch with backoff and never checkpoints past it', async () => {
    const { scheduler, storage, consumer, produce } = world(1);
    let failures = 3;
    const handled: number[] = [];
    const worker = consumer('w1', {
      processBatch: (records) => {
        if (failures-- > 0) throw new Error('downstream unavailable');
        handled.push(records.length);
      },
    });
    const attempts: number[] = [];
    worker.on('handler-failed', ({ attempt }) => attempts.push(attempt));
    produce(['a'], 5);
    await run(scheduler, worker.start());
    await scheduler.advance(100);
    expect((await storage.getLease(GROUP, 'shard-0000'))?.checkpoint).toBe('TRIM_HORIZON');
    await scheduler.advance(10_000);
    expect(attempts).toEqual([1, 2, 3]);
    expect(handled).toEqual([5]);
    expect((await storage.getLease(GROUP, 'shard-0000'))?.checkpoint).toBe('5');
    await run(scheduler, worker.stop());
  });

  it('with skip, a record that keeps failing is reported and skipped, and the rest is processed', async () => {
    const { scheduler, consumer, produce, storage } = world(1);
    const handled: string[] = [];
    const worker = consumer('w1', {
      onHandlerError: 'skip',
      retry: { initialDelayMs: 10, maxAttempts: 2 },
      processBatch: (records) => {
        if (records.some((record) => decoder.decode(record.data) === 'a=3')) throw new Error('poison');
        handled.push(...records.map((record) => decoder.decode(record.data)));
      },
    });
    const skipped: string[] = [];
    worker.on('record-skipped', ({ position }) => skipped.push(position));
    produce(['a'], 5);
    await run(scheduler, worker.start());
    await scheduler.advance(5_000);
    expect(skipped).toEqual(['3']);
    expect(handled).toEqual(['a=1', 'a=2', 'a=4', 'a=5']);
    expect((await storage.getLease(GROUP, 'shard-0000'))?.checkpoint).toBe('5');
    await run(scheduler, worker.stop());
  });

  it('with stop, a failing shard stops without checkpointing past the failure and is reported', async () => {
    const { scheduler, consumer, produce, storage } = world(1);
    const worker = consumer('w1', {
      onHandlerError: 'stop',
      processBatch: () => {
        throw new Error('bug');
      },
    });
    const stopped: string[] = [];
    worker.on('shard-stopped', ({ shardId, error }) => stopped.push(`${shardId}: ${error.message}`));
    produce(['a'], 5);
    await run(scheduler, worker.start());
    await scheduler.advance(5_000);
    expect(stopped).toEqual(['shard-0000: bug']);
    expect((await storage.getLease(GROUP, 'shard-0000'))?.checkpoint).toBe('TRIM_HORIZON');
    await run(scheduler, worker.stop());
  });

  it('with manual checkpointing, only the handler checkpoints, and never past its batch', async () => {
    const { scheduler, consumer, produce, storage } = world(1);
    const refusals: string[] = [];
    const worker = consumer('w1', {
      checkpointing: 'manual',
      processBatch: async (records, context) => {
        await context.checkpoint('999').catch((error: Error) => refusals.push(error.message));
        if (records.length > 0) await context.checkpoint(records[0]?.position);
      },
    });
    produce(['a'], 25);
    await run(scheduler, worker.start());
    await scheduler.advance(5_000);
    expect(refusals[0]).toBe('[core] checkpoint "999" of shard "shard-0000" is past the batch being processed ("10")');
    // Batches of 10: the handler checkpointed the first record of each.
    expect((await storage.getLease(GROUP, 'shard-0000'))?.checkpoint).toBe('21');
    await run(scheduler, worker.stop());
  });

  it('a batch checkpointed together with the handler\'s own writes is not checkpointed again, nor handed over again when the handler fails after they committed', async () => {
    const { scheduler, consumer, produce, storage } = world(1);
    const applied: string[] = [];
    const written: string[] = [];
    let failAfterCommit = true;
    const worker = consumer('w1', {
      processBatch: async (records, context) => {
        // The sink and the lease live in one store here: the write applies both or neither.
        const write: CheckpointWrite = async (current, next) => {
          const [outcome] = await storage.updateLeases(GROUP, [{ leaseKey: context.shardId, expectedVersion: current.version, next }]);
          if (outcome?.status === 'applied') applied.push(...records.map((record) => decoder.decode(record.data)));
          return outcome as WriteResult<LeaseRecord>;
        };
        await context.checkpointWith(write);
        if (failAfterCommit) {
          failAfterCommit = false;
          throw new Error('a step after the commit failed');
        }
      },
    });
    worker.on('checkpointed', ({ position }) => written.push(position));
    produce(['a'], 25);
    await run(scheduler, worker.start());
    await scheduler.advance(5_000);
    expect(applied).toEqual(Array.from({ length: 25 }, (_, i) => `a=${i + 1}`));
    expect(written).toEqual(['10', '20', '25']);
    expect((await storage.getLease(GROUP, 'shard-0000'))?.checkpoint).toBe('25');
    await run(scheduler, worker.stop());
  });

  it('calls the shard hooks: started with its position, and shutdown requested before the lease is released', async () => {
    const { scheduler, consumer, produce, storage } = world(1);
    const calls: string[] = [];
    const worker = consumer('w1', {
      checkpointing: 'manual',
      hooks: {
        shardStarted: (shardId, position) => void calls.push(`started ${shardId} at ${position}`),
        shutdownRequested: async (shardId, checkpoint) => {
          calls.push(`shutdown ${shardId}`);
          await checkpoint();
        },
      },
    });
    produce(['a'], 7);
    await run(scheduler, worker.start());
    await scheduler.advance(4_000);
    await run(scheduler, worker.stop());
    expect(calls).toEqual(['started shard-0000 at TRIM_HORIZON', 'shutdown shard-0000']);
    const lease = await storage.getLease(GROUP, 'shard-0000');
    expect(lease?.checkpoint).toBe('7');
    expect(lease?.owner).toBeNull();
  });

  it('elects one leader that creates leases for new shards; other workers keep working when it stops', async () => {
    const { scheduler, source, consumer, produce, storage, seen } = world(1);
    const leader = consumer('leader');
    const follower = consumer('follower');
    const elected: string[] = [];
    leader.on('leader-elected', () => elected.push('leader'));
    follower.on('leader-elected', () => elected.push('follower'));
    await run(scheduler, leader.start());
    await run(scheduler, follower.start());
    expect(elected).toEqual(['leader']);
    expect((await storage.listLeases(GROUP)).leases.map((lease) => lease.leaseKey)).toEqual(['shard-0000']);
    await run(scheduler, leader.stop());
    await scheduler.advance(15_000);
    expect(elected).toEqual(['leader', 'follower']);
    produce(['a', 'b'], 10);
    expect(source).toBeDefined();
    await scheduler.advance(10_000);
    expect(seen.filter((entry) => entry.worker === 'follower')).toHaveLength(20);
    await run(scheduler, follower.stop());
  });
});
