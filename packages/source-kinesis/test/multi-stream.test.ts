import { DescribeStreamConsumerCommand, DescribeStreamSummaryCommand, SplitShardCommand, type KinesisClient } from '@aws-sdk/client-kinesis';
import { Consumer, MemoryStorage, parseStreamLeaseKey, type ConsumerOptions, type StreamSpec } from '@leasehold/core';
import { describe, expect, it } from 'vitest';
import { KinesisSource } from '../src/index.js';
import { HASH_HIGH, createStream, putRecords, textEntries, useEmulator, waitUntilActive } from './support.js';

const kinesis = useEmulator();
/** One client per stream, as a stream of another account (its own credentials) would have. */
const clients: KinesisClient[] = [];

function newClient(): KinesisClient {
  const client = kinesis.client();
  clients.push(client);
  return client;
}

/** Short timings, so that a real-time run takes seconds. */
const FAST: Partial<ConsumerOptions> = {
  initialPosition: 'TRIM_HORIZON',
  shardSyncIntervalMs: 500,
  streamRefreshIntervalMs: 300,
  lease: { leaseDurationMs: 3_000, takeIntervalMs: 300 },
  leader: { leaseDurationMs: 3_000 },
};

/** Records seen per stream id, as `<data>` strings in the order the handler got them per partition key. */
function recorder() {
  const seen = new Map<string, Map<string, string[]>>();
  const processBatch: ConsumerOptions['processBatch'] = (records, context) => {
    const { streamId } = parseStreamLeaseKey(context.shardId) as { streamId: string };
    const byKey = seen.get(streamId) ?? new Map<string, string[]>();
    seen.set(streamId, byKey);
    for (const record of records) byKey.set(record.partitionKey, [...(byKey.get(record.partitionKey) ?? []), Buffer.from(record.data).toString()]);
  };
  const count = (streamId: string): number => [...(seen.get(streamId)?.values() ?? [])].reduce((sum, list) => sum + list.length, 0);
  return { seen, processBatch, count };
}

async function until(condition: () => boolean | Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** The values `prefix-<i>` with `i % 7 === key`, in order: what textEntries puts under `key-<key>`. */
function expectedPerKey(prefix: string, count: number, key: number): string[] {
  return Array.from({ length: count }, (_, i) => i)
    .filter((i) => i % 7 === key)
    .map((i) => `${prefix}-${i}`);
}

describe('multi-stream groups on kinesis-local', () => {
  it('one group reads a stream named by ARN and one by name, each through its own client, named account:stream:creation', async () => {
    const a = await createStream(newClient(), 2);
    const b = await createStream(newClient(), 1);
    const sourceA = new KinesisSource({ client: newClient(), streamArn: a.streamArn });
    const sourceB = new KinesisSource({ client: newClient(), streamName: b.streamName });
    const summary = (await clients[0]!.send(new DescribeStreamSummaryCommand({ StreamName: a.streamName }))).StreamDescriptionSummary!;
    const idA = await sourceA.streamIdentity();
    expect(idA).toBe(`${a.streamArn.split(':')[4]}:${a.streamName}:${Math.floor(summary.StreamCreationTimestamp!.getTime() / 1000)}`);
    await putRecords(clients[0]!, a.streamName, textEntries('a', 70));
    await putRecords(clients[0]!, b.streamName, textEntries('b', 35));
    const { seen, processBatch, count } = recorder();
    const storage = new MemoryStorage();
    const streams: StreamSpec[] = [{ source: sourceA }, { source: sourceB }];
    const workers = ['w1', 'w2'].map((workerId) => new Consumer({ ...FAST, group: 'multi', streams, storage, workerId, processBatch }));
    try {
      for (const worker of workers) await worker.start();
      const idB = await sourceB.streamIdentity();
      await until(() => count(idA) >= 70 && count(idB) >= 35, 30_000, 'every record of both streams');
      for (let key = 0; key < 7; key++) {
        expect(seen.get(idA)?.get(`key-${key}`)).toEqual(expectedPerKey('a', 70, key));
        expect(seen.get(idB)?.get(`key-${key}`)).toEqual(expectedPerKey('b', 35, key));
      }
      const keys = (await storage.listLeases('multi')).leases.map((lease) => lease.leaseKey).sort();
      expect(keys).toEqual([`${idA}:shardId-000000000000`, `${idA}:shardId-000000000001`, `${idB}:shardId-000000000000`].sort());
    } finally {
      await Promise.all(workers.map((worker) => worker.stop({ timeoutMs: 5_000 })));
    }
  });

  it("a split on one stream is followed in order, and the other stream's lease is never written by the sync", async () => {
    const client = newClient();
    const a = await createStream(client, 1);
    const b = await createStream(client, 1);
    const streams: StreamSpec[] = [
      { id: 'tenant-a', source: new KinesisSource({ client, streamName: a.streamName }) },
      { id: 'tenant-b', source: new KinesisSource({ client, streamName: b.streamName }) },
    ];
    const { seen, processBatch, count } = recorder();
    const storage = new MemoryStorage();
    const worker = new Consumer({ ...FAST, group: 'split', streams, storage, workerId: 'w1', processBatch, checkpointing: 'manual' });
    try {
      await putRecords(client, a.streamName, textEntries('x', 35));
      await worker.start();
      await until(() => count('tenant-a') >= 35, 30_000, 'the records before the split');
      const before = await storage.getLease('split', 'tenant-b:shardId-000000000000');
      const middle = (BigInt(HASH_HIGH) + 1n) / 2n;
      await client.send(new SplitShardCommand({ StreamName: a.streamName, ShardToSplit: 'shardId-000000000000', NewStartingHashKey: middle.toString() }));
      await waitUntilActive(client, a.streamName);
      const more = textEntries('x', 70).slice(35);
      await putRecords(client, a.streamName, more);
      // kinesis-local ends a split parent for polling readers: the children start after it, per key in order.
      await until(() => count('tenant-a') >= 70, 60_000, 'the records after the split');
      for (let key = 0; key < 7; key++) expect(seen.get('tenant-a')?.get(`key-${key}`)).toEqual(expectedPerKey('x', 70, key));
      await until(async () => (await storage.listLeases('split')).leases.filter((lease) => lease.leaseKey.startsWith('tenant-a:')).length >= 2, 10_000, 'the children leases');
      const after = await storage.getLease('split', 'tenant-b:shardId-000000000000');
      // Manual checkpointing and no records: nothing but its holder's take ever wrote tenant-b's lease.
      expect(after?.version).toBe(before?.version);
    } finally {
      await worker.stop({ timeoutMs: 5_000 });
    }
  });

  it('a stream added while the group runs is read; one removed is no longer read and its leases go after the grace', async () => {
    const client = newClient();
    const a = await createStream(client, 1);
    const b = await createStream(client, 1);
    const sources = { a: new KinesisSource({ client, streamName: a.streamName }), b: new KinesisSource({ client, streamName: b.streamName }) };
    let listed: Array<'a' | 'b'> = ['a'];
    const { processBatch, count } = recorder();
    const storage = new MemoryStorage();
    const worker = new Consumer({
      ...FAST,
      group: 'add-remove',
      streams: () => listed.map((name) => ({ id: name, source: sources[name] })),
      storage,
      workerId: 'w1',
      processBatch,
      removedStreamGraceMs: 2_000,
    });
    try {
      await worker.start();
      await putRecords(client, b.streamName, textEntries('b', 14));
      listed = ['a', 'b'];
      await until(() => count('b') >= 14, 30_000, 'the added stream read');
      listed = ['a'];
      await until(() => worker.shards.every((key) => key.startsWith('a:')), 10_000, 'the removed stream given back');
      await putRecords(client, b.streamName, textEntries('late', 14));
      await until(async () => (await storage.listLeases('add-remove')).leases.every((lease) => lease.leaseKey.startsWith('a:')), 15_000, 'the removed stream deleted');
      expect(count('b')).toBe(14);
    } finally {
      await worker.stop({ timeoutMs: 5_000 });
    }
  });

  it('enhanced fan-out registers its consumer on each stream of the group', async () => {
    const client = newClient();
    const a = await createStream(client, 1);
    const b = await createStream(client, 1);
    await putRecords(client, a.streamName, textEntries('a', 7));
    await putRecords(client, b.streamName, textEntries('b', 7));
    const streams: StreamSpec[] = [a, b].map(({ streamName }) => ({ source: new KinesisSource({ client, streamName, enhancedFanOut: { consumerName: 'efo-group' } }) }));
    const { processBatch, count } = recorder();
    const worker = new Consumer({ ...FAST, group: 'efo', streams, storage: new MemoryStorage(), workerId: 'w1', processBatch });
    try {
      await worker.start();
      const ids = worker.streams;
      await until(() => ids.every((id) => count(id) >= 7), 30_000, 'both streams read through SubscribeToShard');
      for (const { streamArn } of [a, b]) {
        const { ConsumerDescription } = await client.send(new DescribeStreamConsumerCommand({ StreamARN: streamArn, ConsumerName: 'efo-group' }));
        expect(ConsumerDescription?.ConsumerStatus).toBe('ACTIVE');
      }
    } finally {
      await worker.stop({ timeoutMs: 5_000 });
    }
  });
});
