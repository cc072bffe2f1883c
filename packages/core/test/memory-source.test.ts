import { describe, expect, it } from 'vitest';
import { Checkpoint, InvalidInputError, MemorySource, SourceError, type ShardBatch, type ShardInfo } from '../src/index.js';
import { VIRTUAL_EPOCH_MS, VirtualScheduler } from '../src/testing/index.js';

const HASH_SPACE = 2n ** 128n;
const keys = Array.from({ length: 200 }, (_, i) => `key-${i}`);

function rangeOf(shard: ShardInfo): [bigint, bigint] {
  return [BigInt(shard.details?.startingHashKey ?? '-1'), BigInt(shard.details?.endingHashKey ?? '-1')];
}

/** Reads a shard until it ends or nothing more is there, returning the positions read and the end, if any. */
async function drain(source: MemorySource, shardId: string, from: string = Checkpoint.TRIM_HORIZON): Promise<{ positions: string[]; end?: readonly string[] }> {
  const controller = new AbortController();
  const positions: string[] = [];
  const batches = source.read(shardId, from, { signal: controller.signal })[Symbol.asyncIterator]();
  for (;;) {
    const next: Promise<IteratorResult<ShardBatch>> = batches.next();
    // An open shard that has nothing more waits for records on the virtual clock, which does not move
    // here: a batch that is not there once every pending continuation ran is not coming.
    const result = await Promise.race([next, new Promise<'idle'>((resolve) => setImmediate(() => resolve('idle')))]);
    if (result === 'idle') {
      controller.abort();
      await next;
      return { positions };
    }
    if (result.done) return { positions };
    if (result.value.kind === 'end') return { positions, end: result.value.childShardIds };
    positions.push(...result.value.records.map((record) => record.position));
  }
}

function world(shards = 1, options: { listLagMs?: number; randomValue?: number } = {}) {
  const scheduler = new VirtualScheduler();
  const clock = scheduler.clock();
  const source = new MemorySource(shards, {
    clock,
    idleDelayMs: 1_000_000,
    listLagMs: options.listLagMs,
    random: { next: () => options.randomValue ?? 0 },
  });
  return { scheduler, clock, source };
}

describe('MemorySource', () => {
  it('splits the 128-bit hash key space evenly among the initial shards, as CreateStream does', async () => {
    const { source } = world(3);
    const ranges = (await source.listShards()).map(rangeOf);
    expect(ranges[0]?.[0]).toBe(0n);
    expect(ranges[2]?.[1]).toBe(HASH_SPACE - 1n);
    expect(ranges[1]?.[0]).toBe((ranges[0]?.[1] ?? 0n) + 1n);
    expect(ranges[2]?.[0]).toBe((ranges[1]?.[1] ?? 0n) + 1n);
  });

  it('routes each key to the one open shard whose hash key range holds its MD5', async () => {
    const { source } = world(4);
    const expected = new Map<string, string[]>();
    for (const key of keys) {
      const shardId = source.shardFor(key);
      expected.set(shardId, [...(expected.get(shardId) ?? []), source.put(key, 'x')]);
    }
    for (const shard of await source.listShards()) {
      expect((await drain(source, shard.shardId)).positions).toEqual(expected.get(shard.shardId));
    }
    // Spread over every shard, not piled on one.
    expect(new Set(keys.map((key) => source.shardFor(key))).size).toBe(4);
  });

  it('keeps each key within its lineage: after a split a key goes to a child of the shard it went to', () => {
    const { source } = world(2);
    const before = new Map(keys.map((key) => [key, source.shardFor(key)]));
    const [left, right] = source.split('shard-0000');
    for (const key of keys) {
      const after = source.shardFor(key);
      if (before.get(key) === 'shard-0000') expect([left, right]).toContain(after);
      else expect(after).toBe(before.get(key));
    }
    expect(new Set(keys.filter((key) => before.get(key) === 'shard-0000').map((key) => source.shardFor(key)))).toEqual(new Set([left, right]));
  });

  it('merges two adjacent shards into one child that covers both ranges and takes every key of both', async () => {
    const { source } = world(3);
    const child = source.merge('shard-0001', 'shard-0002');
    const shards = await source.listShards();
    const merged = shards.find((shard) => shard.shardId === child) as ShardInfo;
    expect(merged.parentShardIds).toEqual(['shard-0001', 'shard-0002']);
    expect(rangeOf(merged)).toEqual([rangeOf(shards[1] as ShardInfo)[0], HASH_SPACE - 1n]);
    for (const key of keys) expect(['shard-0000', child]).toContain(source.shardFor(key));
    expect(source.adjacentOpenShards()).toEqual([['shard-0000', child]]);
  });

  it('refuses to merge shards whose ranges are not adjacent, and to split outside a range', () => {
    const { source } = world(3);
    expect(() => source.merge('shard-0000', 'shard-0002')).toThrow(InvalidInputError);
    expect(() => source.merge('shard-0000', 'shard-0002')).toThrow('[core] shards "shard-0000" and "shard-0002" are not adjacent and cannot be merged');
    expect(() => source.split('shard-0000', 0n)).toThrow('[core] hash key 0 does not split shard "shard-0000"');
    source.split('shard-0001');
    expect(() => source.split('shard-0001')).toThrow('[core] shard "shard-0001" is missing or already closed');
  });

  it('ends a closed shard after its last record, naming its children', async () => {
    const { source } = world(1);
    const first = source.put('a', '1');
    const children = source.split('shard-0000');
    expect(await drain(source, 'shard-0000')).toEqual({ positions: [first], end: children });
    expect(() => source.put('a', '2', 'shard-0000')).toThrow('[core] shard "shard-0000" is missing or closed');
  });

  it('names the children with their parents at a shard\'s end, as Kinesis does, however stale its listings are', async () => {
    const { source, scheduler } = world(2, { listLagMs: 5_000, randomValue: 0.999 });
    await scheduler.advance(10_000);
    const [left, right] = source.split('shard-0000');
    const merged = source.merge(left, right);
    const ends = async (shardId: string): Promise<ShardBatch | undefined> => {
      for await (const batch of source.read(shardId, Checkpoint.TRIM_HORIZON)) if (batch.kind === 'end') return batch;
      return undefined;
    };

    expect(await ends('shard-0000')).toEqual({
      kind: 'end',
      childShardIds: [left, right],
      childShards: [
        expect.objectContaining({ shardId: left, parentShardIds: ['shard-0000'] }),
        expect.objectContaining({ shardId: right, parentShardIds: ['shard-0000'] }),
      ],
    });
    expect(await ends(right)).toEqual({ kind: 'end', childShardIds: [merged], childShards: [expect.objectContaining({ shardId: merged, parentShardIds: [left, right] })] });
    // The listing has not caught up with either reshard yet.
    expect((await source.listShards()).map((shard) => shard.shardId)).toEqual(['shard-0000', 'shard-0001']);
  });

  it('stamps arrivals with the wall time of its clock, and starts an AT_TIMESTAMP read at the first record at or after it', async () => {
    const { source, scheduler } = world(1);
    const early = source.put('a', '1');
    await scheduler.advance(1_000);
    const late = source.put('a', '2');
    const batches = source.read('shard-0000', Checkpoint.TRIM_HORIZON)[Symbol.asyncIterator]();
    const batch = (await batches.next()).value as ShardBatch;
    expect(batch.kind === 'records' && batch.records.map((record) => record.approximateArrivalTimestampMs)).toEqual([VIRTUAL_EPOCH_MS, VIRTUAL_EPOCH_MS + 1_000]);
    await batches.return?.(undefined);
    expect((await drain(source, 'shard-0000', Checkpoint.atTimestamp(VIRTUAL_EPOCH_MS + 1))).positions).toEqual([late]);
    expect((await drain(source, 'shard-0000', Checkpoint.atTimestamp(VIRTUAL_EPOCH_MS))).positions).toEqual([early, late]);
  });

  it('with listLagMs, lists the stream as it was up to that long ago: new children missing, their parent still open', async () => {
    const { source, scheduler } = world(1, { listLagMs: 5_000, randomValue: 0.999 });
    await scheduler.advance(10_000);
    const [left, right] = source.split('shard-0000');
    const stale = await source.listShards();
    expect(stale).toEqual([expect.objectContaining({ shardId: 'shard-0000', closed: false })]);
    await scheduler.advance(5_000);
    const fresh = await source.listShards();
    expect(fresh.map((shard) => [shard.shardId, shard.closed])).toEqual([
      ['shard-0000', true],
      [left, false],
      [right, false],
    ]);
  });

  it('fails the next read of a shard once with failNextRead; reading again goes on from the same place', async () => {
    const { source } = world(1);
    const position = source.put('a', '1');
    source.failNextRead('shard-0000');
    const failing = source.read('shard-0000', Checkpoint.TRIM_HORIZON)[Symbol.asyncIterator]();
    const error = await failing.next().catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(SourceError);
    expect(error).toMatchObject({ code: 'ERR_SOURCE_READ', message: '[core] reading shard "shard-0000" failed (injected fault)' });
    expect((await drain(source, 'shard-0000')).positions).toEqual([position]);
  });

  it('fails every read of a shard for a while with failReadsFor, by its clock', async () => {
    const { source, scheduler } = world(2);
    const position = source.put('a', '1', 'shard-0000');
    source.failReadsFor('shard-0000', 3_000);
    await expect(drain(source, 'shard-0000')).rejects.toThrow('[core] reading shard "shard-0000" failed (injected fault)');
    await scheduler.advance(2_999);
    await expect(drain(source, 'shard-0000')).rejects.toBeInstanceOf(SourceError);
    expect((await drain(source, 'shard-0001')).positions).toEqual([]);
    await scheduler.advance(1);
    expect((await drain(source, 'shard-0000')).positions).toEqual([position]);
  });

  it('fails every listing for a while with failListingsFor, by its clock, while reads go on', async () => {
    const { source, scheduler } = world(1);
    const position = source.put('a', '1');
    source.failListingsFor(2_000);
    await expect(source.listShards()).rejects.toMatchObject({ code: 'ERR_SOURCE_LIST', message: '[core] listing the shards failed (injected fault)' });
    expect((await drain(source, 'shard-0000')).positions).toEqual([position]);
    await scheduler.advance(1_999);
    await expect(source.listShards()).rejects.toBeInstanceOf(SourceError);
    await scheduler.advance(1);
    expect((await source.listShards()).map((shard) => shard.shardId)).toEqual(['shard-0000']);
    expect(() => source.failListingsFor(-1)).toThrow('[core] a listing fault lasts a non-negative number of ms, got -1');
  });

  it('trims a closed shard: listings drop it, reading it fails with ERR_SHARD_NOT_FOUND, and only it is gone', async () => {
    const { source } = world(1);
    source.put('a', '1');
    const [left] = source.split('shard-0000');
    expect(() => source.trim(left)).toThrow(`[core] shard "${left}" is open; only a closed shard leaves the stream`);
    source.trim('shard-0000');
    expect((await source.listShards()).map((shard) => shard.shardId)).not.toContain('shard-0000');
    await expect(drain(source, 'shard-0000')).rejects.toMatchObject({ code: 'ERR_SHARD_NOT_FOUND', message: '[core] shard "shard-0000" was not found' });
    expect(await source.isShardGone('shard-0000')).toBe(true);
    expect(await source.isShardGone(left)).toBe(false);
    expect(await source.isShardGone('shard-9999')).toBe(false);
  });

  it('refuses a shard count that is not a positive whole number, and a negative list lag', () => {
    expect(() => new MemorySource(0)).toThrow('[core] a MemorySource needs a positive whole number of shards, got 0');
    expect(() => new MemorySource(1, { listLagMs: -1 })).toThrow('[core] listLagMs must be a non-negative number, got -1');
    expect(() => new MemorySource(1, { resumeHintTtlMs: -5 })).toThrow('[core] resumeHintTtlMs must be a non-negative number, got -5');
  });

  it('reads on from a batch\'s resume hint without looking its position up; a hint malformed, of another shard or expired starts from the position', async () => {
    const { scheduler, source } = world(2);
    const [first, second] = (await source.listShards()).map((shard) => shard.shardId) as [string, string];
    const positions = keys.slice(0, 140).map((key) => source.put(key, 'x', first));
    source.put('other', 'x', second);
    const batches = source.read(first, Checkpoint.TRIM_HORIZON)[Symbol.asyncIterator]();
    const batch = (await batches.next()).value as ShardBatch;
    await batches.return?.(undefined);
    if (batch.kind !== 'records' || batch.resumeHint === undefined) throw new Error('expected a batch with a resume hint');
    const hint = batch.resumeHint;
    const readFrom = async (resumeHint: string): Promise<string | undefined> => {
      const reader = source.read(first, batch.position, { resumeHint })[Symbol.asyncIterator]();
      const next = (await reader.next()).value as ShardBatch;
      await reader.return?.(undefined);
      return next.kind === 'records' ? next.records[0]?.position : undefined;
    };
    const after = positions[positions.indexOf(batch.position) + 1];
    const starts = { ...source.starts };
    expect(await readFrom(hint)).toBe(after);
    expect(source.starts.fromHint - starts.fromHint).toBe(1);
    const otherShard = JSON.stringify({ ...JSON.parse(hint), shardId: second });
    for (const refused of ['not a hint', otherShard]) expect(await readFrom(refused)).toBe(after);
    expect(source.starts.fromPosition - starts.fromPosition).toBe(2);
    await scheduler.advance(300_000);
    expect(await readFrom(hint)).toBe(after);
    expect(source.starts).toEqual({ fromHint: starts.fromHint + 1, fromPosition: starts.fromPosition + 3 });
    expect(source.resumeHintMaxAgeMs).toBe(240_000);
  });
});
