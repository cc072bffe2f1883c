import {
  ExpiredIteratorException,
  MergeShardsCommand,
  ProvisionedThroughputExceededException,
  SplitShardCommand,
  type KinesisClient,
} from '@aws-sdk/client-kinesis';
import { AbortedError, Checkpoint } from '@leasehold/core';
import type { RunningKinesisLocal } from '@leasehold/local-stack';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KinesisSource, ShardNotFoundError, StreamNotFoundError } from '../src/index.js';
import {
  HASH_HIGH,
  HASH_LOW,
  clientFor,
  createStream,
  putRecords,
  readRecords,
  text,
  textEntries,
  waitUntilActive,
} from './support.js';

let emulator: RunningKinesisLocal;
let client: KinesisClient;

beforeAll(async () => {
  const { startEmulator } = await import('./support.js');
  emulator = await startEmulator();
  client = clientFor(emulator);
});

afterAll(async () => {
  client?.destroy();
  await emulator?.close();
});

const SHARD_0 = 'shardId-000000000000';

describe('KinesisSource against kinesis-local', () => {
  it('lists every shard of the stream with its hash key range, open', async () => {
    const { streamName } = await createStream(client, 3);
    const shards = await new KinesisSource({ client, streamName }).listShards();
    expect(shards.map((shard) => shard.shardId)).toEqual(['shardId-000000000000', 'shardId-000000000001', 'shardId-000000000002']);
    expect(shards.every((shard) => !shard.closed && shard.parentShardIds.length === 0)).toBe(true);
    expect(shards[0]!.details?.startingHashKey).toBe('0');
    expect(shards[2]!.details?.endingHashKey).toBe(HASH_HIGH);
  });

  it('hands over the records of a shard in the order they were written, with increasing positions', async () => {
    const { streamName, streamArn } = await createStream(client, 1);
    const sequenceNumbers = await putRecords(client, streamName, textEntries('r', 250));
    const source = new KinesisSource({ client, streamArn, maxRecordsPerCall: 100 });

    const { records } = await readRecords(source, SHARD_0, Checkpoint.TRIM_HORIZON, 250);

    expect(records.map(text)).toEqual(textEntries('r', 250).map((entry) => Buffer.from(entry.Data!).toString()));
    expect(records.map((record) => record.position)).toEqual(sequenceNumbers);
    for (let i = 1; i < records.length; i++) {
      expect(source.comparePositions(records[i - 1]!.position, records[i]!.position)).toBeLessThan(0);
    }
    expect(records[0]).toMatchObject({ partitionKey: 'key-0', subSequenceNumber: undefined, aggregated: false });
  });

  it('resumes after a checkpoint with no gap and no repeat', async () => {
    const { streamName } = await createStream(client, 1);
    await putRecords(client, streamName, textEntries('r', 60));
    const source = new KinesisSource({ client, streamName, maxRecordsPerCall: 25 });

    const first = await readRecords(source, SHARD_0, Checkpoint.TRIM_HORIZON, 25);
    const checkpoint = first.batches.at(-1)!;
    expect(checkpoint.kind).toBe('records');
    const rest = await readRecords(source, SHARD_0, checkpoint.kind === 'records' ? checkpoint.position : '', 35);

    expect([...first.records, ...rest.records].map(text)).toEqual(Array.from({ length: 60 }, (_, i) => `r-${i}`));
  });

  it('starts at LATEST with the records written after the read began', async () => {
    const { streamName } = await createStream(client, 1);
    await putRecords(client, streamName, textEntries('old', 5));
    const source = new KinesisSource({ client, streamName, idleDelayMs: 50 });
    const records: string[] = [];
    for await (const batch of source.read(SHARD_0, Checkpoint.LATEST, { signal: AbortSignal.timeout(30_000) })) {
      if (batch.kind !== 'records') break;
      // The first (empty) batch proves the iterator exists: only then are the new records written.
      if (batch.records.length === 0 && records.length === 0) await putRecords(client, streamName, textEntries('new', 3));
      records.push(...batch.records.map(text));
      if (records.length >= 3) break;
    }
    expect(records).toEqual(['new-0', 'new-1', 'new-2']);
  });

  it('starts AT_TIMESTAMP with the first record written at or after that time', async () => {
    const { streamName } = await createStream(client, 1);
    await putRecords(client, streamName, textEntries('before', 4));
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    const since = Date.now();
    await new Promise((resolve) => setTimeout(resolve, 20));
    await putRecords(client, streamName, textEntries('after', 4));
    const source = new KinesisSource({ client, streamName });

    const { records } = await readRecords(source, SHARD_0, Checkpoint.atTimestamp(since), 4);

    expect(records.map(text)).toEqual(['after-0', 'after-1', 'after-2', 'after-3']);
  });

  it('reads a split shard to its end and names both children, which hold the later records', async () => {
    const { streamName } = await createStream(client, 1);
    await putRecords(client, streamName, textEntries('parent', 20));
    await client.send(new SplitShardCommand({ StreamName: streamName, ShardToSplit: SHARD_0, NewStartingHashKey: (2n ** 127n).toString() }));
    await waitUntilActive(client, streamName);
    await putRecords(client, streamName, textEntries('low', 3, HASH_LOW));
    await putRecords(client, streamName, textEntries('high', 3, HASH_HIGH));
    const source = new KinesisSource({ client, streamName });

    const parent = await readRecords(source, SHARD_0, Checkpoint.TRIM_HORIZON, Number.POSITIVE_INFINITY);
    const shards = await source.listShards();
    const low = await readRecords(source, 'shardId-000000000001', Checkpoint.TRIM_HORIZON, 3);
    const high = await readRecords(source, 'shardId-000000000002', Checkpoint.TRIM_HORIZON, 3);

    expect(parent.records.map(text)).toEqual(Array.from({ length: 20 }, (_, i) => `parent-${i}`));
    expect(parent.batches.at(-1)).toEqual({
      kind: 'end',
      childShardIds: ['shardId-000000000001', 'shardId-000000000002'],
      childShards: [
        expect.objectContaining({ shardId: 'shardId-000000000001', parentShardIds: [SHARD_0] }),
        expect.objectContaining({ shardId: 'shardId-000000000002', parentShardIds: [SHARD_0] }),
      ],
    });
    expect(shards.find((shard) => shard.shardId === SHARD_0)?.closed).toBe(true);
    expect(shards.find((shard) => shard.shardId === 'shardId-000000000002')?.parentShardIds).toEqual([SHARD_0]);
    expect(low.records.map(text)).toEqual(['low-0', 'low-1', 'low-2']);
    expect(high.records.map(text)).toEqual(['high-0', 'high-1', 'high-2']);
  });

  it('reads both parents of a merge to their end and names the merged child', async () => {
    const { streamName } = await createStream(client, 2);
    await putRecords(client, streamName, [...textEntries('a', 4, HASH_LOW), ...textEntries('b', 4, HASH_HIGH)]);
    await client.send(
      new MergeShardsCommand({ StreamName: streamName, ShardToMerge: SHARD_0, AdjacentShardToMerge: 'shardId-000000000001' }),
    );
    await waitUntilActive(client, streamName);
    const source = new KinesisSource({ client, streamName });

    const first = await readRecords(source, SHARD_0, Checkpoint.TRIM_HORIZON, Number.POSITIVE_INFINITY);
    const second = await readRecords(source, 'shardId-000000000001', Checkpoint.TRIM_HORIZON, Number.POSITIVE_INFINITY);
    const merged = (await source.listShards()).find((shard) => shard.shardId === 'shardId-000000000002');

    expect(first.records.map(text)).toEqual(['a-0', 'a-1', 'a-2', 'a-3']);
    expect(second.records.map(text)).toEqual(['b-0', 'b-1', 'b-2', 'b-3']);
    const end = { kind: 'end', childShardIds: ['shardId-000000000002'], childShards: [expect.objectContaining({ shardId: 'shardId-000000000002', parentShardIds: [SHARD_0, 'shardId-000000000001'] })] };
    expect(first.batches.at(-1)).toEqual(end);
    expect(second.batches.at(-1)).toEqual(end);
    expect(merged?.parentShardIds).toEqual([SHARD_0, 'shardId-000000000001']);
  });

  it('recovers from throttling and expired iterators without losing or repeating a record', async () => {
    const { streamName } = await createStream(client, 1);
    await putRecords(client, streamName, textEntries('r', 80));
    const faulty = clientFor(emulator);
    let getRecordsCalls = 0;
    const injected = { throttled: 0, expired: 0 };
    faulty.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName !== 'GetRecordsCommand') return next(args);
        getRecordsCalls++;
        if (getRecordsCalls % 3 === 0) {
          injected.throttled++;
          throw new ProvisionedThroughputExceededException({ message: 'Rate exceeded for shard', $metadata: {} });
        }
        if (getRecordsCalls % 4 === 0) {
          // The records were read, then lost with the response: the fresh iterator must bring them back.
          await next(args);
          injected.expired++;
          throw new ExpiredIteratorException({ message: 'Iterator expired', $metadata: {} });
        }
        return next(args);
      },
      { step: 'initialize', name: 'injectFaults' },
    );
    const source = new KinesisSource({ client: faulty, streamName, maxRecordsPerCall: 10, backoffBaseMs: 10, backoffMaxMs: 50 });

    const { records } = await readRecords(source, SHARD_0, Checkpoint.TRIM_HORIZON, 80);
    faulty.destroy();

    expect(records.map(text)).toEqual(Array.from({ length: 80 }, (_, i) => `r-${i}`));
    expect(injected.throttled).toBeGreaterThan(0);
    expect(injected.expired).toBeGreaterThan(0);
  });

  it('stops every request and timer once the loop is left', async () => {
    const { streamName } = await createStream(client, 1);
    await putRecords(client, streamName, textEntries('r', 30));
    const counted = clientFor(emulator);
    let calls = 0;
    counted.middlewareStack.add((next) => async (args) => {
      calls++;
      return next(args);
    }, { step: 'initialize', name: 'countCalls' });
    const source = new KinesisSource({ client: counted, streamName, maxRecordsPerCall: 5, idleDelayMs: 10 });

    await readRecords(source, SHARD_0, Checkpoint.TRIM_HORIZON, 5);
    const callsWhenLeft = calls;
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    counted.destroy();

    expect(calls).toBe(callsWhenLeft);
  });

  it('ends with an AbortedError when the signal fires while it waits', async () => {
    const { streamName } = await createStream(client, 1);
    const source = new KinesisSource({ client, streamName, idleDelayMs: 60_000 });
    const controller = new AbortController();
    const read = (async () => {
      for await (const batch of source.read(SHARD_0, Checkpoint.TRIM_HORIZON, { signal: controller.signal })) {
        if (batch.kind === 'records') controller.abort();
      }
    })();
    await expect(read).rejects.toBeInstanceOf(AbortedError);
  });

  it('reports a missing stream and a missing shard as typed errors', async () => {
    const { streamName } = await createStream(client, 1);
    const missingStream = new KinesisSource({ client, streamName: 'no-such-stream' });
    const missingShard = new KinesisSource({ client, streamName });

    await expect(missingStream.listShards()).rejects.toThrow(new StreamNotFoundError('[source-kinesis] stream "no-such-stream" was not found'));
    await expect(readRecords(missingStream, SHARD_0, Checkpoint.TRIM_HORIZON, 1)).rejects.toBeInstanceOf(StreamNotFoundError);
    const shardError = readRecords(missingShard, 'shardId-000000000042', Checkpoint.TRIM_HORIZON, 1);
    await expect(shardError).rejects.toBeInstanceOf(ShardNotFoundError);
    await expect(shardError).rejects.toThrow(`[source-kinesis] shard "shardId-000000000042" was not found in stream "${streamName}"`);
    // The emulator names a missing stream by its ARN: a stream called "...shard..." is still a missing stream.
    const shardyName = new KinesisSource({ client, streamName: 'no-such-shard-stream' });
    await expect(readRecords(shardyName, SHARD_0, Checkpoint.TRIM_HORIZON, 1)).rejects.toThrow(
      new StreamNotFoundError('[source-kinesis] stream "no-such-shard-stream" was not found'),
    );
  });

  it('says a shard of the stream, open or closed, is not gone, and a shard id the stream never had is', async () => {
    const { streamName, streamArn } = await createStream(client, 1);
    await client.send(new SplitShardCommand({ StreamName: streamName, ShardToSplit: SHARD_0, NewStartingHashKey: (2n ** 127n).toString() }));
    await waitUntilActive(client, streamName);
    const source = new KinesisSource({ client, streamArn });

    await expect(source.isShardGone(SHARD_0)).resolves.toBe(false);
    await expect(source.isShardGone('shardId-000000000002')).resolves.toBe(false);
    await expect(source.isShardGone('shardId-000000000042')).resolves.toBe(true);
  });

  it('never says a shard is gone when the stream cannot be found', async () => {
    for (const streamName of ['no-such-stream', 'no-such-shard-stream']) {
      const source = new KinesisSource({ client, streamName });
      await expect(source.isShardGone(SHARD_0)).rejects.toThrow(new StreamNotFoundError(`[source-kinesis] stream "${streamName}" was not found`));
    }
  });
});
