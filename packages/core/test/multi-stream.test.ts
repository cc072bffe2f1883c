import { describe, expect, it } from 'vitest';
import {
  Consumer,
  InvalidConfigError,
  MemorySource,
  MemoryStorage,
  parseStreamLeaseKey,
  Checkpoint,
  StorageUnavailableError,
  type LeaderRecord,
  type LeaderState,
  type LeaseListing,
  streamLeaseKey,
  type LeaseRecord,
  type LeaseUpdate,
  type WriteResult,
  type ConsumerOptions,
  type MultiStreamSyncReport,
  type ShardSource,
  type SourceRecord,
  type StreamSpec,
} from '../src/index.js';
import { seededRandom, VirtualScheduler } from '../src/testing/index.js';
import { MultiStreamSync, type StreamBirths } from '../src/consumer/stream-sync.js';
import { StreamSource } from '../src/consumer/streams.js';
import { decoder, range } from './support/consumer-world.js';
import { run } from './support/virtual.js';

const GROUP = 'tenants';

interface Seen {
  worker: string;
  streamId: string;
  shardId: string;
  key: string;
  value: number;
}

/** A MemoryStorage whose next releases of a chosen lease fail before they are sent, as a cut connection does. */
class ReleaseRefusingStorage extends MemoryStorage {
  readonly #refuse = new Map<string, number>();
  refused = 0;

  refuseRelease(leaseKey: string, times = 1): void {
    this.#refuse.set(leaseKey, times);
  }

  override async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    const release = updates.find((update) => (this.#refuse.get(update.leaseKey) ?? 0) > 0 && update.next.owner === null);
    if (release) {
      this.#refuse.set(release.leaseKey, (this.#refuse.get(release.leaseKey) ?? 0) - 1);
      this.refused++;
      throw new StorageUnavailableError(`[test] the release of ${release.leaseKey} was refused before it was sent`);
    }
    return super.updateLeases(group, updates);
  }
}

/** A MemoryStorage whose first write of the group's birth mark to the leader record fails before it is sent. */
class BirthRefusingStorage extends MemoryStorage {
  refused = 0;

  override async updateLeader(group: string, expectedVersion: number, next: LeaderState): Promise<WriteResult<LeaderRecord>> {
    if (this.refused === 0 && next.metadata['leasehold.shardsSynced'] !== undefined) {
      this.refused++;
      throw new StorageUnavailableError('[test] the birth mark was refused before it was sent');
    }
    return super.updateLeader(group, expectedVersion, next);
  }
}

/** A MemoryStorage whose listings show the lease table as it was when `freeze` was called. */
class StaleListingStorage extends MemoryStorage {
  #frozen: LeaseListing | undefined;

  async freeze(group: string): Promise<void> {
    this.#frozen = await super.listLeases(group);
  }

  override async listLeases(group: string): Promise<LeaseListing> {
    return this.#frozen ?? super.listLeases(group);
  }
}

/** Streams of MemorySources on one virtual clock, and workers of one group reading them. */
function streamsWorld(storage: MemoryStorage = new MemoryStorage()) {
  const scheduler = new VirtualScheduler();
  const sourceClock = scheduler.clock();
  const sources = new Map<string, MemorySource>();
  const seen: Seen[] = [];
  let listed: string[] = [];
  let seed = 1;
  const stream = (id: string, shards = 2): MemorySource => {
    const source = new MemorySource(shards, { clock: sourceClock, batchSize: 10 });
    sources.set(id, source);
    return source;
  };
  /** The list the workers' `streams` function returns: the streams named in `listed`. */
  const list = (): StreamSpec[] => listed.map((id) => ({ id, source: sources.get(id) as MemorySource }));
  const setListed = (ids: string[]): void => {
    listed = ids;
  };
  const consumer = (workerId: string, options: Partial<ConsumerOptions> = {}) =>
    new Consumer({
      group: GROUP,
      streams: list,
      storage,
      workerId,
      clock: scheduler.clock(),
      random: seededRandom(seed++),
      initialPosition: 'TRIM_HORIZON',
      shardSyncIntervalMs: 5_000,
      streamRefreshIntervalMs: 5_000,
      processBatch: (records: readonly SourceRecord[], context) => {
        const { streamId, shardId } = parseStreamLeaseKey(context.shardId) as { streamId: string; shardId: string };
        if (context.streamId !== streamId) throw new Error(`context.streamId ${String(context.streamId)} for lease ${context.shardId}`);
        for (const record of records) {
          const [key, value] = decoder.decode(record.data).split('=') as [string, string];
          seen.push({ worker: workerId, streamId, shardId, key, value: Number(value) });
        }
      },
      ...options,
    });
  const produce = (id: string, keys: string[], count: number, from = 1): void => {
    const source = sources.get(id) as MemorySource;
    for (let n = from; n < from + count; n++) for (const key of keys) source.put(key, `${key}=${n}`);
  };
  /** Values seen per stream and key, in the order the handler got them. */
  const perStreamKey = (): Map<string, number[]> => {
    const byKey = new Map<string, number[]>();
    for (const entry of seen) byKey.set(`${entry.streamId}/${entry.key}`, [...(byKey.get(`${entry.streamId}/${entry.key}`) ?? []), entry.value]);
    return byKey;
  };
  const leaseKeys = async (): Promise<string[]> => (await storage.listLeases(GROUP)).leases.map((lease) => lease.leaseKey).sort();
  return { scheduler, storage, sources, seen, stream, list, setListed, consumer, produce, perStreamKey, leaseKeys };
}

describe('Multi-stream groups', () => {
  it('reads two streams with the same shard ids in one group: leases name their stream, every record once, in order per key', async () => {
    const w = streamsWorld();
    w.stream('acct:orders:1');
    w.stream('acct:payments:1');
    w.setListed(['acct:orders:1', 'acct:payments:1']);
    w.produce('acct:orders:1', ['a', 'b', 'c'], 30);
    w.produce('acct:payments:1', ['a', 'b', 'c'], 20);
    const worker = w.consumer('w1');
    await run(w.scheduler, worker.start());
    await w.scheduler.advance(20_000);
    expect(await w.leaseKeys()).toEqual(['acct:orders:1:shard-0000', 'acct:orders:1:shard-0001', 'acct:payments:1:shard-0000', 'acct:payments:1:shard-0001']);
    const byKey = w.perStreamKey();
    for (const key of ['a', 'b', 'c']) {
      expect(byKey.get(`acct:orders:1/${key}`)).toEqual(range(1, 30));
      expect(byKey.get(`acct:payments:1/${key}`)).toEqual(range(1, 20));
    }
    await run(w.scheduler, worker.stop());
  });

  it('balances across streams: two workers on two streams of two shards hold two leases each', async () => {
    const w = streamsWorld();
    w.stream('s1');
    w.stream('s2');
    w.setListed(['s1', 's2']);
    const workers = [w.consumer('x'), w.consumer('y')];
    for (const worker of workers) await run(w.scheduler, worker.start());
    await w.scheduler.advance(30_000);
    expect(workers.map((worker) => worker.shards.length)).toEqual([2, 2]);
    await run(w.scheduler, Promise.all(workers.map((worker) => worker.stop())));
  });

  it("a split on one stream creates children for that stream only, and never touches the other stream's leases", async () => {
    const w = streamsWorld();
    const orders = w.stream('orders', 1);
    w.stream('payments', 1);
    w.setListed(['orders', 'payments']);
    w.produce('orders', ['a', 'b'], 10);
    w.produce('payments', ['a', 'b'], 10);
    const worker = w.consumer('w1');
    await run(w.scheduler, worker.start());
    await w.scheduler.advance(10_000);
    const paymentsBefore = await w.storage.getLease(GROUP, 'payments:shard-0000');
    const [left, right] = orders.split('shard-0000');
    w.produce('orders', ['a', 'b'], 10, 11);
    await w.scheduler.advance(20_000);
    expect(await w.leaseKeys()).toEqual([`orders:${left}`, `orders:${right}`, 'payments:shard-0000'].sort());
    const paymentsAfter = await w.storage.getLease(GROUP, 'payments:shard-0000');
    expect(paymentsAfter?.version).toBe(paymentsBefore?.version);
    const byKey = w.perStreamKey();
    expect(byKey.get('orders/a')).toEqual(range(1, 20));
    expect(byKey.get('orders/b')).toEqual(range(1, 20));
    await run(w.scheduler, worker.stop());
  });

  it("a stream whose listing fails is skipped for the round; the other stream's new shards still get leases", async () => {
    const w = streamsWorld();
    const good = w.stream('good', 1);
    const bad = w.stream('bad', 1);
    w.setListed(['good', 'bad']);
    const worker = w.consumer('w1');
    const rounds: MultiStreamSyncReport[] = [];
    worker.on('streams-sync', (report) => rounds.push(report));
    const errors: string[] = [];
    worker.on('error', ({ operation }) => errors.push(operation));
    await run(w.scheduler, worker.start());
    await w.scheduler.advance(6_000);
    const listShards = bad.listShards.bind(bad);
    bad.listShards = () => Promise.reject(new Error('throttled'));
    const [left, right] = good.split('shard-0000');
    await w.scheduler.advance(20_000);
    expect(await w.leaseKeys()).toEqual(['bad:shard-0000', `good:${left}`, `good:${right}`].sort());
    expect(rounds.at(-1)?.failed.bad?.message).toBe('throttled');
    expect(rounds.at(-1)?.complete).toBe(false);
    expect(errors).toContain('shard-sync bad');
    bad.listShards = listShards;
    await run(w.scheduler, worker.stop());
  });

  it('a stream whose listing fails at the birth of the group does not hold the others back; it is read once it answers', async () => {
    const w = streamsWorld();
    const good = w.stream('good', 1);
    const bad = w.stream('bad', 1);
    w.setListed(['good', 'bad']);
    w.produce('good', ['k'], 10);
    w.produce('bad', ['k'], 10);
    const listShards = bad.listShards.bind(bad);
    bad.listShards = () => Promise.reject(new Error('not authorised'));
    const worker = w.consumer('w1');
    const started = worker.start();
    await w.scheduler.advance(20_000);
    expect(w.perStreamKey().get('good/k')).toEqual(range(1, 10));
    good.split('shard-0000');
    w.produce('good', ['k'], 5, 11);
    await w.scheduler.advance(20_000);
    expect(w.perStreamKey().get('good/k')).toEqual(range(1, 15));
    expect(w.perStreamKey().get('bad/k')).toBeUndefined();
    bad.listShards = listShards;
    await w.scheduler.advance(20_000);
    expect(w.perStreamKey().get('bad/k')).toEqual(range(1, 10));
    await run(w.scheduler, started);
    await run(w.scheduler, worker.stop());
  });

  it("a group whose birth mark could not be written is born later by its streams' own marks, though no stream answers then", async () => {
    const storage = new BirthRefusingStorage();
    const w = streamsWorld(storage);
    const a = w.stream('a', 1);
    w.stream('b', 1);
    w.setListed(['a', 'b']);
    w.produce('a', ['k'], 10);
    const worker = w.consumer('w1');
    const started = worker.start();
    await w.scheduler.advance(2_000);
    expect(storage.refused).toBe(1);
    // Every stream had its first complete round; now the one left in the list fails to answer.
    a.listShards = () => Promise.reject(new Error('throttled'));
    w.setListed(['a']);
    await w.scheduler.advance(30_000);
    expect(w.perStreamKey().get('a/k')).toEqual(range(1, 10));
    await run(w.scheduler, started);
    await run(w.scheduler, worker.stop());
  });

  it("a stream's first birth never creates over a deleted lease: a round on a stale listing does not bring a finished shard back", async () => {
    const scheduler = new VirtualScheduler();
    const clock = scheduler.clock();
    const storage = new StaleListingStorage();
    const source = new MemorySource(1, { clock });
    const stream = new StreamSource('s', source);
    // The round's listing was read before the parent's lease was created, processed to its end and deleted.
    await storage.freeze(GROUP);
    const [left, right] = source.split('shard-0000');
    const created = await storage.createLease({ group: GROUP, leaseKey: 's:shard-0000', checkpoint: Checkpoint.TRIM_HORIZON });
    const parent = created.status === 'applied' ? created.record : undefined;
    await storage.updateLeases(GROUP, [{ leaseKey: 's:shard-0000', expectedVersion: parent?.version ?? 0, next: { ...(parent as LeaseRecord), checkpoint: Checkpoint.SHARD_END } }]);
    await storage.deleteLease(GROUP, 's:shard-0000', (parent?.version ?? 0) + 1);
    let births: StreamBirths = {};
    const sync = new MultiStreamSync({
      group: GROUP,
      storage,
      clock,
      streams: () => Promise.resolve(new Map([['s', stream]])),
      initialPositionOf: () => Checkpoint.TRIM_HORIZON,
      removedStreamGraceMs: 60_000,
      births: () => births,
      writeBirths: (next) => {
        births = next;
        return Promise.resolve(true);
      },
      isLeader: () => true,
    });
    const report = await sync.run(new AbortController().signal);
    expect(await storage.getLease(GROUP, 's:shard-0000')).toBeNull();
    // The children continue a shard the group had: they start at their beginning.
    expect(report.streams.s?.created).toEqual([`s:${left}`, `s:${right}`]);
    expect(await storage.getLease(GROUP, `s:${left}`)).toMatchObject({ checkpoint: Checkpoint.TRIM_HORIZON });
  });

  it("a worker asks for the stream list every refresh interval from its start, also while it waits for the group's birth", async () => {
    const w = streamsWorld();
    const only = w.stream('only', 1);
    only.listShards = () => Promise.reject(new Error('throttled'));
    w.setListed(['only']);
    const calls = new Map<string, number>();
    const counted = (workerId: string) =>
      w.consumer(workerId, {
        streams: () => {
          calls.set(workerId, (calls.get(workerId) ?? 0) + 1);
          return w.list();
        },
      });
    const workers = [counted('x'), counted('y')];
    const started = workers.map((worker) => worker.start());
    await w.scheduler.advance(21_000);
    // Nothing could be listed: the group is not born, and nobody takes anything.
    expect(await w.leaseKeys()).toEqual([]);
    const follower = workers.find((worker) => !worker.elector?.isLeader()) as Consumer;
    expect(calls.get(follower.workerId)).toBeGreaterThanOrEqual(4);
    await run(w.scheduler, Promise.all(workers.map((worker) => worker.stop())));
    await run(w.scheduler, Promise.all(started));
  });

  it('a stream added while the group runs is read from its initial position and spread over the workers', async () => {
    const w = streamsWorld();
    w.stream('first', 2);
    w.setListed(['first']);
    const workers = [w.consumer('x'), w.consumer('y')];
    const added: string[] = [];
    workers[0]!.on('stream-added', ({ streamId }) => added.push(streamId));
    for (const worker of workers) await run(w.scheduler, worker.start());
    await w.scheduler.advance(10_000);
    w.stream('second', 2);
    w.produce('second', ['k'], 15);
    w.setListed(['first', 'second']);
    await w.scheduler.advance(30_000);
    expect(added).toEqual(['first', 'second']);
    expect(w.perStreamKey().get('second/k')).toEqual(range(1, 15));
    expect(workers.map((worker) => worker.shards.length)).toEqual([2, 2]);
    await run(w.scheduler, Promise.all(workers.map((worker) => worker.stop())));
  });

  it('a removed stream stops being read at once, keeps its leases for the grace period, then they are deleted', async () => {
    const w = streamsWorld();
    w.stream('stay', 1);
    w.stream('leave', 2);
    w.setListed(['stay', 'leave']);
    w.produce('leave', ['k'], 10);
    const worker = w.consumer('w1', { removedStreamGraceMs: 60_000 });
    const removed: string[] = [];
    worker.on('stream-removed', ({ streamId }) => removed.push(streamId));
    await run(w.scheduler, worker.start());
    await w.scheduler.advance(10_000);
    expect(w.perStreamKey().get('leave/k')).toEqual(range(1, 10));
    w.setListed(['stay']);
    await w.scheduler.advance(6_000);
    expect(removed).toEqual(['leave']);
    expect(worker.shards).toEqual(['stay:shard-0000']);
    w.produce('leave', ['k'], 5, 11);
    await w.scheduler.advance(30_000);
    // Not read any more, and its leases (with their checkpoints) are still there within the grace.
    expect(w.perStreamKey().get('leave/k')).toEqual(range(1, 10));
    expect(await w.leaseKeys()).toEqual(['leave:shard-0000', 'leave:shard-0001', 'stay:shard-0000']);
    await w.scheduler.advance(40_000);
    expect(await w.leaseKeys()).toEqual(['stay:shard-0000']);
    await run(w.scheduler, worker.stop());
  });

  it("a removed stream's lease whose release failed is given back all the same, and deleted once the grace passed", async () => {
    const storage = new ReleaseRefusingStorage();
    const w = streamsWorld(storage);
    w.stream('stay', 1);
    w.stream('leave', 1);
    w.setListed(['stay', 'leave']);
    const worker = w.consumer('w1', { removedStreamGraceMs: 20_000 });
    await run(w.scheduler, worker.start());
    await w.scheduler.advance(10_000);
    expect(worker.shards.sort()).toEqual(['leave:shard-0000', 'stay:shard-0000']);
    storage.refuseRelease('leave:shard-0000');
    w.setListed(['stay']);
    await w.scheduler.advance(10_000);
    expect(storage.refused).toBe(1);
    // Still named for this worker's live incarnation, which no longer reads it: nobody else may take it
    // and the leader may not delete it, so the worker writes it free itself.
    expect(await storage.getLease(GROUP, 'leave:shard-0000')).toMatchObject({ owner: null });
    await w.scheduler.advance(30_000);
    expect(await w.leaseKeys()).toEqual(['stay:shard-0000']);
    await run(w.scheduler, worker.stop());
  });

  it("a removed stream's lease whose release failed, and then its giving back, is given back at a later listing", async () => {
    const storage = new ReleaseRefusingStorage();
    const w = streamsWorld(storage);
    w.stream('stay', 1);
    w.stream('leave', 1);
    w.setListed(['stay', 'leave']);
    const worker = w.consumer('w1', { removedStreamGraceMs: 20_000 });
    await run(w.scheduler, worker.start());
    await w.scheduler.advance(10_000);
    storage.refuseRelease('leave:shard-0000', 2);
    w.setListed(['stay']);
    await w.scheduler.advance(10_000);
    expect(storage.refused).toBe(2);
    expect(await storage.getLease(GROUP, 'leave:shard-0000')).toMatchObject({ owner: null });
    await w.scheduler.advance(30_000);
    expect(await w.leaseKeys()).toEqual(['stay:shard-0000']);
    await run(w.scheduler, worker.stop());
  });

  it('a stream added back within the grace resumes at its checkpoints: nothing read twice', async () => {
    const w = streamsWorld();
    w.stream('s', 1);
    w.setListed(['s']);
    w.produce('s', ['k'], 10);
    const worker = w.consumer('w1', { removedStreamGraceMs: 600_000 });
    await run(w.scheduler, worker.start());
    await w.scheduler.advance(10_000);
    w.setListed([]);
    await w.scheduler.advance(10_000);
    w.produce('s', ['k'], 10, 11);
    w.setListed(['s']);
    await w.scheduler.advance(20_000);
    expect(w.perStreamKey().get('s/k')).toEqual(range(1, 20));
    await run(w.scheduler, worker.stop());
  });

  it('a stream added back after its leases were deleted is born again at the initial position', async () => {
    const w = streamsWorld();
    w.stream('s', 1);
    w.setListed(['s']);
    w.produce('s', ['k'], 10);
    const worker = w.consumer('w1', { removedStreamGraceMs: 10_000 });
    await run(w.scheduler, worker.start());
    await w.scheduler.advance(10_000);
    w.setListed([]);
    await w.scheduler.advance(30_000);
    expect(await w.leaseKeys()).toEqual([]);
    w.setListed(['s']);
    await w.scheduler.advance(20_000);
    expect(await w.leaseKeys()).toEqual(['s:shard-0000']);
    // TRIM_HORIZON again: the stream's records are read from its start, as for a stream never seen.
    expect(w.perStreamKey().get('s/k')).toEqual([...range(1, 10), ...range(1, 10)]);
    await run(w.scheduler, worker.stop());
  });

  it('names a stream by its source when the spec has no id, and refuses bad stream lists with the value named', async () => {
    const scheduler = new VirtualScheduler();
    const storage = new MemoryStorage();
    const named: ShardSource = Object.assign(new MemorySource(1, { clock: scheduler.clock() }), { streamIdentity: () => Promise.resolve('123456789012:named:1700000000') });
    const base = { group: GROUP, storage, clock: scheduler.clock(), processBatch: () => undefined, initialPosition: 'TRIM_HORIZON' as const };
    const worker = new Consumer({ ...base, streams: [{ source: named }] });
    await run(scheduler, worker.start());
    expect(worker.streams).toEqual(['123456789012:named:1700000000']);
    await scheduler.advance(5_000);
    expect((await storage.listLeases(GROUP)).leases.map((lease) => lease.leaseKey)).toEqual(['123456789012:named:1700000000:shard-0000']);
    await run(scheduler, worker.stop());

    const source = new MemorySource(1);
    expect(() => new Consumer({ ...base, source, streams: [] })).toThrow('give either source (one stream) or streams');
    expect(() => new Consumer({ ...base, streams: 'orders' as never })).toThrow(InvalidConfigError);
    const start = (streams: ConsumerOptions['streams']) => new Consumer({ ...base, streams }).start();
    await expect(start([{ id: 'a b', source }])).rejects.toThrow('stream id "a b" is not valid');
    await expect(start([{ id: 'x', source }, { id: 'x', source }])).rejects.toThrow('stream id "x" is listed twice');
    await expect(start([{ id: 'x', source, initialPositon: 'TRIM_HORIZON' } as never])).rejects.toThrow(
      '[core] a stream of streams has no option "initialPositon"; it takes id, source, initialPosition',
    );
    await expect(start([{ source }])).rejects.toThrow('its source has no streamIdentity()');
    await expect(start(() => Promise.reject(new InvalidConfigError('no such tenant')))).rejects.toThrow('no such tenant');
  });

  it('names a stream\'s children and their parents by lease key at a shard\'s end, as its listings do', async () => {
    const memory = new MemorySource(2);
    const [left, right] = memory.split('shard-0000');
    const merged = memory.merge(left, right);
    const stream = new StreamSource('123:orders:17', memory);
    const key = (shardId: string): string => streamLeaseKey('123:orders:17', shardId);
    const endOf = async (shardId: string) => {
      for await (const batch of stream.read(key(shardId), 'TRIM_HORIZON')) if (batch.kind === 'end') return batch;
      return undefined;
    };

    expect(await endOf('shard-0000')).toEqual({
      kind: 'end',
      childShardIds: [key(left), key(right)],
      childShards: [
        expect.objectContaining({ shardId: key(left), parentShardIds: [key('shard-0000')] }),
        expect.objectContaining({ shardId: key(right), parentShardIds: [key('shard-0000')] }),
      ],
    });
    expect(await endOf(left)).toEqual({
      kind: 'end',
      childShardIds: [key(merged)],
      childShards: [expect.objectContaining({ shardId: key(merged), parentShardIds: [key(left), key(right)] })],
    });
    // An end that names no children with their parents stays so: the runtime lists the stream for them.
    const bare: ShardSource = {
      listShards: () => memory.listShards(),
      comparePositions: (a, b) => memory.comparePositions(a, b),
      read: async function* () {
        yield { kind: 'end', childShardIds: [left, right] };
      },
    };
    const ends = [];
    for await (const batch of new StreamSource('s', bare).read('s:shard-0000', 'TRIM_HORIZON')) ends.push(batch);
    expect(ends).toEqual([{ kind: 'end', childShardIds: [`s:${left}`, `s:${right}`] }]);
  });

  it('splits and joins lease keys at the last separator', () => {
    expect(streamLeaseKey('123:orders:17', 'shardId-000000000001')).toBe('123:orders:17:shardId-000000000001');
    expect(parseStreamLeaseKey('123:orders:17:shardId-000000000001')).toEqual({ streamId: '123:orders:17', shardId: 'shardId-000000000001' });
    expect(parseStreamLeaseKey('shardId-000000000001')).toBeUndefined();
    expect(parseStreamLeaseKey(':x')).toBeUndefined();
    expect(parseStreamLeaseKey('x:')).toBeUndefined();
  });
});
