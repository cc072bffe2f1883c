/**
 * After an import, a Leasehold group on kinesis-local hands each shard over from the user record right
 * after KCL's checkpoint: inside an aggregated record (the next sub-record), after a plain record, from the
 * start of a child, never a finished shard, and a merge child only after both parents ended.
 */
import {
  CreateStreamCommand,
  DescribeStreamSummaryCommand,
  KinesisClient,
  ListShardsCommand,
  MergeShardsCommand,
  PutRecordCommand,
  SplitShardCommand,
  type Shard,
} from '@aws-sdk/client-kinesis';
import { NodeHttpHandler } from '@smithy/node-http-handler';
import { Consumer, type ConsumerOptions } from '@leasehold/core';
import { startKinesisLocal, type RunningKinesisLocal } from '@leasehold/local-stack';
import { KinesisSource } from '@leasehold/source-kinesis';
import { DynamoDBStorage } from '@leasehold/storage-dynamodb';
import { createRequire } from 'node:module';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { kclArgs, kclTable, type KclLeaseSpec } from './kcl-support.js';
import { dynamo, freshName, leasehold } from './support.js';

let env: Awaited<ReturnType<typeof dynamo>>;
let emulator: RunningKinesisLocal;
let kinesis: KinesisClient;

beforeAll(async () => {
  env = await dynamo();
  try {
    emulator = await startKinesisLocal();
  } catch (error) {
    throw new Error(`kinesis-local could not be started; try it by hand with "npx kinesis-local" in packages/local-stack: ${(error as Error).message}`, { cause: error });
  }
  kinesis = new KinesisClient({ endpoint: emulator.endpoint, region: emulator.region, credentials: emulator.credentials, requestHandler: new NodeHttpHandler() });
});

afterAll(async () => {
  kinesis?.destroy();
  await emulator?.close();
  env?.client.destroy();
  await env?.dynalite.close();
});

/** The KPL encoder of aws-kinesis-agg (magic number, protobuf, MD5 trailer). */
const { RecordAggregator } = createRequire(import.meta.url)('aws-kinesis-agg') as {
  RecordAggregator: new () => { addUserRecord(record: { partitionKey: string; data: Buffer }): void; build(): { partitionKey: string; data: Buffer } | undefined };
};

async function createStream(shardCount: number): Promise<string> {
  const streamName = freshName('kcl-stream-');
  await kinesis.send(new CreateStreamCommand({ StreamName: streamName, ShardCount: shardCount }));
  await untilActive(streamName);
  return streamName;
}

async function untilActive(streamName: string): Promise<void> {
  while ((await kinesis.send(new DescribeStreamSummaryCommand({ StreamName: streamName }))).StreamDescriptionSummary?.StreamStatus !== 'ACTIVE') {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

async function shards(streamName: string): Promise<Map<string, Shard>> {
  const { Shards } = await kinesis.send(new ListShardsCommand({ StreamName: streamName }));
  return new Map((Shards ?? []).map((shard) => [shard.ShardId as string, shard]));
}

/** Puts one record at a hash key; returns its sequence number. */
async function put(streamName: string, hashKey: string, data: Buffer | string): Promise<string> {
  const output = await kinesis.send(new PutRecordCommand({ StreamName: streamName, PartitionKey: 'k', ExplicitHashKey: hashKey, Data: typeof data === 'string' ? Buffer.from(data) : data }));
  return output.SequenceNumber as string;
}

/** One KPL aggregated record of the texts, as its data. */
function aggregated(texts: readonly string[]): Buffer {
  const aggregator = new RecordAggregator();
  for (const text of texts) aggregator.addUserRecord({ partitionKey: 'k', data: Buffer.from(text) });
  return aggregator.build()!.data;
}

/** The first hash key of a shard. */
function startOf(shard: Shard | undefined): string {
  return shard?.HashKeyRange?.StartingHashKey as string;
}

/** Splits a shard in the middle of its range; returns the middle. */
async function split(streamName: string, shard: Shard): Promise<string> {
  const middle = ((BigInt(startOf(shard)) + BigInt(shard.HashKeyRange?.EndingHashKey as string) + 1n) / 2n).toString();
  await kinesis.send(new SplitShardCommand({ StreamName: streamName, ShardToSplit: shard.ShardId, NewStartingHashKey: middle }));
  await untilActive(streamName);
  return middle;
}

/** What the handler was given, in the order it was given, each record with its shard. */
function recorder() {
  const handed: { shardId: string; text: string }[] = [];
  const processBatch: ConsumerOptions['processBatch'] = (records, context) => {
    for (const record of records) handed.push({ shardId: context.shardId, text: Buffer.from(record.data).toString() });
  };
  const byShard = (): Record<string, string[]> => {
    const result: Record<string, string[]> = {};
    for (const { shardId, text } of handed) (result[shardId] ??= []).push(text);
    return result;
  };
  return { handed, processBatch, byShard };
}

async function until(condition: () => boolean, timeoutMs: number, what: () => string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what()}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Short timings, so that a run takes seconds. */
const FAST: Partial<ConsumerOptions> = {
  initialPosition: 'TRIM_HORIZON',
  shardSyncIntervalMs: 500,
  streamRefreshIntervalMs: 300,
  lease: { leaseDurationMs: 3_000, takeIntervalMs: 300 },
  leader: { leaseDurationMs: 3_000 },
};

/** A Leasehold table on dynalite, and its URL for the command line. */
async function leaseholdTable(): Promise<{ storage: DynamoDBStorage; url: string }> {
  const tableName = freshName('lh');
  const storage = new DynamoDBStorage({ client: env.client, tableName });
  await storage.createTable();
  return { storage, url: `dynamodb://${tableName}?region=us-east-1&endpoint=${encodeURIComponent(env.dynalite.endpoint)}` };
}

describe('a Leasehold group started from an imported KCL table on kinesis-local', () => {
  it('hands each shard the user record right after KCL\'s checkpoint (the next sub-record of an aggregate), never a finished shard, and a merge child only after its parents', async () => {
    // Shard 0 split into 2 and 3, then 3 merged with 1 into 4.
    const streamName = await createStream(2);
    const initial = await shards(streamName);
    const [s0, s1] = [initial.get('shardId-000000000000'), initial.get('shardId-000000000001')];
    await put(streamName, startOf(s0), 'p0');
    await put(streamName, startOf(s1), 't0');
    await put(streamName, startOf(s1), 't1');
    const t2 = await put(streamName, startOf(s1), 't2');
    await put(streamName, startOf(s1), 't3');
    await put(streamName, startOf(s1), 't4');
    const middle = await split(streamName, s0 as Shard);
    await put(streamName, startOf(s0), 'u0');
    const aggregate = await put(streamName, startOf(s0), aggregated(['a0', 'a1', 'a2']));
    await put(streamName, startOf(s0), 'u1');
    const v0 = await put(streamName, middle, 'v0');
    await put(streamName, middle, 'v1');
    await put(streamName, middle, 'v2');
    await kinesis.send(new MergeShardsCommand({ StreamName: streamName, ShardToMerge: 'shardId-000000000003', AdjacentShardToMerge: 'shardId-000000000001' }));
    await untilActive(streamName);
    const after = await shards(streamName);
    expect(after.get('shardId-000000000004')?.ParentShardId).toBe('shardId-000000000003');
    expect(after.get('shardId-000000000004')?.AdjacentParentShardId).toBe('shardId-000000000001');
    await put(streamName, middle, 'w0');
    await put(streamName, middle, 'w1');

    const leases: KclLeaseSpec[] = [
      { leaseKey: 'shardId-000000000000', leaseCounter: 80, checkpoint: 'SHARD_END', checkpointSubSequenceNumber: 0, ownerSwitchesSinceCheckpoint: 0, childShardIds: ['shardId-000000000002', 'shardId-000000000003'] },
      { leaseKey: 'shardId-000000000001', leaseOwner: 'kcl-1', leaseCounter: 70, checkpoint: t2, checkpointSubSequenceNumber: 0, ownerSwitchesSinceCheckpoint: 0 },
      { leaseKey: 'shardId-000000000002', leaseOwner: 'kcl-1', leaseCounter: 60, checkpoint: aggregate, checkpointSubSequenceNumber: 1, ownerSwitchesSinceCheckpoint: 0, parentShardId: ['shardId-000000000000'] },
      { leaseKey: 'shardId-000000000003', leaseOwner: 'kcl-2', leaseCounter: 50, checkpoint: v0, checkpointSubSequenceNumber: 0, ownerSwitchesSinceCheckpoint: 0, parentShardId: ['shardId-000000000000'] },
      { leaseKey: 'shardId-000000000004', leaseCounter: 1, checkpoint: 'TRIM_HORIZON', checkpointSubSequenceNumber: 0, ownerSwitchesSinceCheckpoint: 0, parentShardId: ['shardId-000000000001', 'shardId-000000000003'] },
    ];
    const table = await kclTable(env.client, leases);
    const target = await leaseholdTable();
    const group = freshName('g');
    const imported = await leasehold('import', 'kcl', ...kclArgs(env.dynalite.endpoint, table), '--storage', target.url, '--group', group, '--apply', '--observe-ms', '300');
    expect(imported.code, imported.stderr).toBe(0);

    const { handed, processBatch, byShard } = recorder();
    const worker = new Consumer({ ...FAST, group, source: new KinesisSource({ client: kinesis, streamName }), storage: target.storage, workerId: 'w1', processBatch });
    try {
      await worker.start();
      await until(() => handed.length >= 8, 40_000, () => `8 records, got ${JSON.stringify(byShard())}`);
    } finally {
      await worker.stop({ timeoutMs: 5_000 });
    }
    expect(byShard()).toEqual({
      'shardId-000000000001': ['t3', 't4'],
      'shardId-000000000002': ['a2', 'u1'],
      'shardId-000000000003': ['v1', 'v2'],
      'shardId-000000000004': ['w0', 'w1'],
    });
    const at = (text: string): number => handed.findIndex((record) => record.text === text);
    expect(at('w0')).toBeGreaterThan(at('t4'));
    expect(at('w0')).toBeGreaterThan(at('v2'));
  });

  it('a multi-stream KCL table resumes each stream of a multi-stream group where KCL stopped', async () => {
    const orders = await createStream(1);
    const payments = await createStream(1);
    const ordersSource = new KinesisSource({ client: kinesis, streamName: orders });
    const paymentsSource = new KinesisSource({ client: kinesis, streamName: payments });
    const [ordersId, paymentsId] = [await ordersSource.streamIdentity(), await paymentsSource.streamIdentity()];
    const o0 = (await shards(orders)).get('shardId-000000000000') as Shard;
    await put(orders, startOf(o0), 'x0');
    const middle = await split(orders, o0);
    await put(orders, startOf(o0), 'y0');
    await put(orders, startOf(o0), 'y1');
    const z0 = await put(orders, middle, 'z0');
    await put(orders, middle, 'z1');
    const p0 = (await shards(payments)).get('shardId-000000000000') as Shard;
    const b0 = await put(payments, startOf(p0), 'b0');
    await put(payments, startOf(p0), 'b1');
    await put(payments, startOf(p0), 'b2');

    const lease = (streamName: string, shardId: string, rest: Omit<KclLeaseSpec, 'leaseKey' | 'streamName' | 'shardId'>): KclLeaseSpec => ({
      leaseKey: `${streamName}:${shardId}`,
      streamName,
      shardId,
      entityType: 'LEASE',
      ownerSwitchesSinceCheckpoint: 0,
      checkpointSubSequenceNumber: 0,
      ...rest,
    });
    const table = await kclTable(env.client, [
      lease(ordersId, 'shardId-000000000000', { leaseCounter: 9, checkpoint: 'SHARD_END', childShardIds: ['shardId-000000000001', 'shardId-000000000002'] }),
      lease(ordersId, 'shardId-000000000001', { leaseCounter: 4, checkpoint: 'TRIM_HORIZON', parentShardId: ['shardId-000000000000'] }),
      lease(ordersId, 'shardId-000000000002', { leaseOwner: 'kcl-1', leaseCounter: 6, checkpoint: z0, parentShardId: ['shardId-000000000000'] }),
      lease(paymentsId, 'shardId-000000000000', { leaseOwner: 'kcl-2', leaseCounter: 12, checkpoint: b0 }),
    ]);
    const target = await leaseholdTable();
    const group = freshName('g');
    const imported = await leasehold('import', 'kcl', ...kclArgs(env.dynalite.endpoint, table), '--storage', target.url, '--group', group, '--apply', '--observe-ms', '300');
    expect(imported.code, imported.stderr).toBe(0);

    const { handed, processBatch, byShard } = recorder();
    const worker = new Consumer({ ...FAST, group, streams: [{ source: ordersSource }, { source: paymentsSource }], storage: target.storage, workerId: 'w1', processBatch });
    try {
      await worker.start();
      await until(() => handed.length >= 5, 40_000, () => `5 records, got ${JSON.stringify(byShard())}`);
    } finally {
      await worker.stop({ timeoutMs: 5_000 });
    }
    expect(byShard()).toEqual({
      [`${ordersId}:shardId-000000000001`]: ['y0', 'y1'],
      [`${ordersId}:shardId-000000000002`]: ['z1'],
      [`${paymentsId}:shardId-000000000000`]: ['b1', 'b2'],
    });
  });
});
