import { GetRecordsCommand, GetShardIteratorCommand, ListShardsCommand, type GetRecordsOutput, type KinesisClient } from '@aws-sdk/client-kinesis';
import { Checkpoint, type ShardBatch } from '@leasehold/core';
import { seededRandom } from '@leasehold/core/testing';
import { describe, expect, it } from 'vitest';
import { KinesisSource, type KinesisSourceOptions } from '../src/index.js';
import { fakeClock } from './support.js';

const SHARD = 'shardId-000000000000';
const SEQ = (n: number): string => `4968070221431632128393721418750${String(n).padStart(25, '0')}`;

/**
 * A shard on a fake clock: each GetRecords answers what `answer` says for the call's time and limit;
 * the times of the calls are kept. Calls take no time, so the pace alone spaces them.
 */
function fakeShard(answer: (call: { at: number; limit: number; index: number }) => Omit<GetRecordsOutput, '$metadata' | 'NextShardIterator'> | Error) {
  const clock = fakeClock();
  const calls: number[] = [];
  let sequence = 0;
  const client = {
    send: async (command: unknown) => {
      if (command instanceof GetShardIteratorCommand) return { ShardIterator: 'iterator' };
      if (!(command instanceof GetRecordsCommand)) throw new Error(`unexpected ${String(command)}`);
      const at = clock.now();
      calls.push(at);
      const output = answer({ at, limit: command.input.Limit ?? 10_000, index: calls.length - 1 });
      if (output instanceof Error) throw output;
      // Each record gets the next sequence number, so that positions move on as in a real shard.
      const records = (output.Records ?? []).map((record) => ({ ...record, SequenceNumber: SEQ(++sequence) }));
      return { ...output, Records: records, NextShardIterator: 'iterator' };
    },
  } as unknown as KinesisClient;
  return { client, clock, calls };
}

const records = (count: number): NonNullable<GetRecordsOutput['Records']> =>
  Array.from({ length: count }, () => ({ Data: Buffer.from('r'), PartitionKey: 'k', SequenceNumber: '', ApproximateArrivalTimestamp: new Date(0) }));

/** Reads until the fake clock passes `untilMs`, then leaves; returns the calls made. */
async function readFor(shard: ReturnType<typeof fakeShard>, untilMs: number, options: Partial<KinesisSourceOptions> = {}): Promise<number[]> {
  const source = new KinesisSource({ client: shard.client, streamName: 's', clock: shard.clock, random: seededRandom(3), ...options });
  for await (const batch of source.read(SHARD, Checkpoint.TRIM_HORIZON)) {
    if (batch.kind === 'end' || shard.clock.now() >= untilMs) break;
  }
  return shard.calls.filter((at) => at < untilMs);
}

/** The most calls in any window of `windowMs` that starts at a call. */
function mostInWindow(calls: readonly number[], windowMs = 1_000): number {
  let most = 0;
  for (let i = 0; i < calls.length; i++) {
    let n = 0;
    while (i + n < calls.length && (calls[i + n] as number) < (calls[i] as number) + windowMs) n++;
    most = Math.max(most, n);
  }
  return most;
}

describe('the read budget of a polled shard', () => {
  it('reads a caught-up shard that gets nothing once a second', async () => {
    const shard = fakeShard(() => ({ Records: [], MillisBehindLatest: 0 }));

    const calls = await readFor(shard, 60_000);

    expect(mostInWindow(calls)).toBe(1);
    expect(calls.length).toBeGreaterThanOrEqual(59);
    expect(calls.length).toBeLessThanOrEqual(61);
  });

  it('reads a caught-up shard that gets a few records now and then once a second too', async () => {
    const shard = fakeShard(() => ({ Records: records(3), MillisBehindLatest: 0 }));

    const calls = await readFor(shard, 60_000);

    expect(mostInWindow(calls)).toBe(1);
    expect(calls.length).toBeGreaterThanOrEqual(59);
  });

  it('reads a shard that is behind at the full five calls a second, and never more', async () => {
    const shard = fakeShard(({ limit }) => ({ Records: records(limit), MillisBehindLatest: 30_000 }));

    const calls = await readFor(shard, 20_000, { maxRecordsPerCall: 100 });

    expect(mostInWindow(calls)).toBe(5);
    expect(calls.length).toBeGreaterThanOrEqual(99);
  });

  it('reads on at once after a full answer, even one that says it is at the tip', async () => {
    const shard = fakeShard(({ limit }) => ({ Records: records(limit), MillisBehindLatest: 0 }));

    const calls = await readFor(shard, 10_000, { maxRecordsPerCall: 50 });

    expect(mostInWindow(calls)).toBe(5);
  });

  it('reads on at once after an empty answer that says records lie further on', async () => {
    const shard = fakeShard(() => ({ Records: [], MillisBehindLatest: 5_000 }));

    const calls = await readFor(shard, 10_000);

    expect(mostInWindow(calls)).toBe(5);
  });

  it('goes from one pace to the other as the shard falls behind and catches up', async () => {
    // Behind for the first 10 s, caught up for the next 10 s, behind again.
    const behind = (at: number): boolean => at < 10_000 || at >= 20_000;
    const shard = fakeShard(({ at, limit }) => (behind(at) ? { Records: records(limit), MillisBehindLatest: 1_000 } : { Records: records(1), MillisBehindLatest: 0 }));

    const calls = await readFor(shard, 30_000, { maxRecordsPerCall: 10 });

    const inSecond = (from: number): number => calls.filter((at) => at >= from && at < from + 1_000).length;
    expect(inSecond(5_000)).toBe(5);
    expect(inSecond(15_000)).toBe(1);
    expect(inSecond(25_000)).toBe(5);
  });

  it('takes its paces from idleDelayMs and maxGetRecordsPerSecond', async () => {
    const idle = fakeShard(() => ({ Records: [], MillisBehindLatest: 0 }));
    const behind = fakeShard(({ limit }) => ({ Records: records(limit), MillisBehindLatest: 1_000 }));

    const idleCalls = await readFor(idle, 20_000, { idleDelayMs: 250 });
    const behindCalls = await readFor(behind, 20_000, { maxGetRecordsPerSecond: 2, maxRecordsPerCall: 10 });

    expect(mostInWindow(idleCalls)).toBe(4);
    expect(mostInWindow(behindCalls)).toBe(2);
  });

  it('never reads a caught-up shard faster than maxGetRecordsPerSecond, whatever idleDelayMs says', async () => {
    const shard = fakeShard(() => ({ Records: [], MillisBehindLatest: 0 }));

    const calls = await readFor(shard, 10_000, { idleDelayMs: 0, maxGetRecordsPerSecond: 5 });

    expect(mostInWindow(calls)).toBe(5);
  });

  it('backs off when throttled, behind or caught up, and goes back to its pace once answered', async () => {
    const throttled = (): Error => Object.assign(new Error('Rate exceeded for shard'), { name: 'ProvisionedThroughputExceededException' });
    // Calls 10 to 13 are throttled; the shard is behind before and caught up after.
    const shard = fakeShard(({ index, limit }) =>
      index >= 10 && index < 14 ? throttled() : index < 10 ? { Records: records(limit), MillisBehindLatest: 1_000 } : { Records: [], MillisBehindLatest: 0 },
    );

    const calls = await readFor(shard, 60_000, { maxRecordsPerCall: 10, backoffBaseMs: 1_000, backoffMaxMs: 8_000 });

    // Each retry waits at least half of the doubled backoff: 0.5, 1, 2 and 4 s.
    const gaps = calls.slice(11, 15).map((at, i) => at - (calls[10 + i] as number));
    gaps.forEach((gap, i) => expect(gap).toBeGreaterThanOrEqual(1_000 * 2 ** i * 0.5));
    expect(mostInWindow(calls.slice(15))).toBe(1);
  });
});

describe('the end of a polled shard', () => {
  /** A shard that answers one record, then ends with `last`; ListShards answers `shards`, and is counted. */
  function endingShard(last: Pick<GetRecordsOutput, 'ChildShards'>, shards: unknown[] = []) {
    const listed: unknown[] = [];
    const client = {
      send: async (command: unknown) => {
        if (command instanceof GetShardIteratorCommand) return { ShardIterator: 'first' };
        if (command instanceof ListShardsCommand) {
          listed.push(command.input);
          return { Shards: shards };
        }
        if (!(command instanceof GetRecordsCommand)) throw new Error(`unexpected ${String(command)}`);
        if (command.input.ShardIterator === 'first') return { Records: records(1).map((record) => ({ ...record, SequenceNumber: SEQ(1) })), NextShardIterator: 'last', MillisBehindLatest: 0 };
        return { Records: [], MillisBehindLatest: 0, ...last };
      },
    } as unknown as KinesisClient;
    return { source: new KinesisSource({ client, streamName: 's', clock: fakeClock() }), listed };
  }

  const endOf = async (source: KinesisSource) => {
    for await (const batch of source.read(SHARD, Checkpoint.TRIM_HORIZON)) if (batch.kind === 'end') return batch;
    return undefined;
  };

  it('names the children with their parents from the last answer, without listing the stream', async () => {
    const { source, listed } = endingShard({
      ChildShards: [{ ShardId: 'shardId-000000000003', ParentShards: [SHARD, 'shardId-000000000001'], HashKeyRange: { StartingHashKey: '0', EndingHashKey: '9' } }],
    });

    expect(await endOf(source)).toEqual({
      kind: 'end',
      childShardIds: ['shardId-000000000003'],
      childShards: [{ shardId: 'shardId-000000000003', parentShardIds: [SHARD, 'shardId-000000000001'], closed: false, details: { startingHashKey: '0', endingHashKey: '9' } }],
    });
    expect(listed).toEqual([]);
  });

  it('lists the stream once for the children when the last answer names none, or names one without this shard as a parent', async () => {
    const shards = [
      { ShardId: SHARD, SequenceNumberRange: { StartingSequenceNumber: '1', EndingSequenceNumber: '9' } },
      { ShardId: 'shardId-000000000001', ParentShardId: SHARD, SequenceNumberRange: { StartingSequenceNumber: '10' } },
      { ShardId: 'shardId-000000000002', ParentShardId: 'shardId-000000000009', AdjacentParentShardId: SHARD, SequenceNumberRange: { StartingSequenceNumber: '11' } },
    ];
    const withoutParent = { ChildShards: [{ ShardId: 'shardId-000000000001', ParentShards: [], HashKeyRange: { StartingHashKey: '0', EndingHashKey: '1' } }] };
    for (const last of [{}, withoutParent]) {
      const { source, listed } = endingShard(last, shards);

      expect(await endOf(source)).toEqual({
        kind: 'end',
        childShardIds: ['shardId-000000000001', 'shardId-000000000002'],
        childShards: [
          expect.objectContaining({ shardId: 'shardId-000000000001', parentShardIds: [SHARD] }),
          expect.objectContaining({ shardId: 'shardId-000000000002', parentShardIds: ['shardId-000000000009', SHARD] }),
        ],
      });
      expect(listed).toHaveLength(1);
    }
  });
});

describe('a polled batch', () => {
  it('carries the payload bytes of its records, counted while they were converted', async () => {
    const sizes = [3, 0, 17, 1];
    const shard = fakeShard(({ index }) =>
      index === 0 ? { Records: sizes.map((size) => ({ Data: Buffer.alloc(size, 1), PartitionKey: 'k', SequenceNumber: '' })), MillisBehindLatest: 0 } : { Records: [], MillisBehindLatest: 0 },
    );
    const source = new KinesisSource({ client: shard.client, streamName: 's', clock: shard.clock, random: seededRandom(3) });
    let first: ShardBatch | undefined;
    for await (const batch of source.read(SHARD, Checkpoint.TRIM_HORIZON)) {
      first = batch;
      break;
    }
    expect(first?.kind === 'records' && first.records.map((record) => record.data.byteLength)).toEqual(sizes);
    expect(first?.kind === 'records' && first.bytes).toBe(21);
  });
});
