import type { KinesisClient } from '@aws-sdk/client-kinesis';
import { Checkpoint, Consumer, MemoryStorage, type ConsumerOptions, type RecordsBatch } from '@leasehold/core';
import { describe, expect, it } from 'vitest';
import { KinesisSource, type KinesisRecord } from '../src/index.js';
import { createStream, putRecords, text, textEntries, useEmulator } from './support.js';

const SHARD = 'shardId-000000000000';

const kinesis = useEmulator();

/** A client that counts the GetShardIterator calls made through it, and may fail its first `failGetRecords` GetRecords calls with `failWith`. */
function countingClient(failGetRecords = 0, failWith = 'ExpiredIteratorException') {
  const client = kinesis.client();
  const calls = { getShardIterator: 0, getRecords: 0 };
  let failing = failGetRecords;
  client.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName === 'GetShardIteratorCommand') calls.getShardIterator++;
      if (context.commandName === 'GetRecordsCommand') {
        calls.getRecords++;
        if (failing > 0) {
          failing--;
          throw Object.assign(new Error(`injected ${failWith}`), { name: failWith });
        }
      }
      return next(args);
    },
    { step: 'initialize', name: 'countCalls' },
  );
  return { client, calls };
}

/** Reads `count` records of the shard from `from` (with `resumeHint` if given), returning them and the first batch. */
async function readFrom(source: KinesisSource, from: string, count: number, resumeHint?: string): Promise<{ records: KinesisRecord[]; first: RecordsBatch<KinesisRecord> }> {
  const records: KinesisRecord[] = [];
  let first: RecordsBatch<KinesisRecord> | undefined;
  for await (const batch of source.read(SHARD, from, { signal: AbortSignal.timeout(45_000), resumeHint })) {
    if (batch.kind !== 'records') break;
    first ??= batch;
    records.push(...batch.records);
    if (records.length >= count) break;
  }
  if (!first) throw new Error('no batch read');
  return { records, first };
}

describe('the resume hint of a polled read', () => {
  it('a read from a batch\'s hint makes no GetShardIterator call and starts with the record after the batch; a refused one falls back to the position and reads the same records', async () => {
    const setup = countingClient();
    const { streamName } = await createStream(setup.client, 1);
    const put = await putRecords(setup.client, streamName, textEntries('r', 30));
    const options = { streamName, maxRecordsPerCall: 10, idleDelayMs: 50 };
    const { first } = await readFrom(new KinesisSource({ client: setup.client, ...options }), Checkpoint.TRIM_HORIZON, 1);
    expect(first.position).toBe(put[9]);
    expect(first.resumeHint).toMatch(new RegExp(`^${SHARD} \\S+$`));
    const hint = first.resumeHint as string;
    const expected = Array.from({ length: 20 }, (_, i) => `r-${i + 10}`);

    // Handed the hint, the next reader asks for no iterator.
    const next = countingClient();
    const hinted = await readFrom(new KinesisSource({ client: next.client, ...options }), first.position, 20, hint);
    expect(next.calls.getShardIterator).toBe(0);
    expect(hinted.records.map(text)).toEqual(expected);

    // Expired (Kinesis's answer after 5 minutes), invalid, malformed or another shard's: one GetShardIterator for the position, the same records.
    const refusals = [
      { client: countingClient(1, 'ExpiredIteratorException'), hint },
      { client: countingClient(), hint: `${SHARD} not-an-iterator` },
      { client: countingClient(), hint: 'garbage' },
      { client: countingClient(), hint: hint.replace(SHARD, 'shardId-000000000001') },
    ];
    for (const refusal of refusals) {
      const read = await readFrom(new KinesisSource({ client: refusal.client.client, ...options }), first.position, 20, refusal.hint);
      expect(refusal.client.calls.getShardIterator).toBe(1);
      expect(read.records.map(text)).toEqual(expected);
    }
  }, 60_000);

  it('a fan-out source gives no hints, and a polling one gives them for 4 minutes', () => {
    const { client } = countingClient();
    expect(new KinesisSource({ client, streamName: 's' }).resumeHintMaxAgeMs).toBe(240_000);
    expect(new KinesisSource({ client, streamName: 's', enhancedFanOut: { consumerArn: 'arn:aws:kinesis:us-east-1:123456789012:stream/s/consumer/c:1' } }).resumeHintMaxAgeMs).toBeUndefined();
  });
});

describe('a graceful stop on Kinesis', () => {
  it('hands the shard over with its iterator: the new owner makes no GetShardIterator call, and its first record is the one after the checkpoint', async () => {
    const setup = countingClient();
    const { streamName } = await createStream(setup.client, 1);
    await putRecords(setup.client, streamName, textEntries('a', 40));
    const storage = new MemoryStorage();
    const seen: Array<{ worker: string; value: string }> = [];
    const timing: Partial<ConsumerOptions<KinesisRecord>> = {
      initialPosition: 'TRIM_HORIZON',
      lease: { leaseDurationMs: 3_000, takeIntervalMs: 300 },
      leader: { leaseDurationMs: 3_000 },
      shardSyncIntervalMs: 500,
    };
    const worker = (workerId: string, client: KinesisClient) =>
      new Consumer<KinesisRecord>({
        ...timing,
        group: 'handover',
        storage,
        workerId,
        source: new KinesisSource({ client, streamName, maxRecordsPerCall: 10, idleDelayMs: 100 }),
        processBatch: (records) => {
          for (const record of records) seen.push({ worker: workerId, value: text(record) });
        },
      });
    const first = worker('first', setup.client);
    await first.start();
    await until(() => seen.length >= 40, 30_000, 'the first worker to read the backlog');
    const recipient = countingClient();
    const second = worker('second', recipient.client);
    await second.start();
    // The first worker hands its shard to a member it has seen join.
    await until(() => first.coordinator.diagnostics().roster === 2, 15_000, 'the first worker to see the second');
    await first.stop();
    await putRecords(setup.client, streamName, textEntries('b', 10));
    await until(() => seen.filter((entry) => entry.worker === 'second').length >= 10, 30_000, 'the second worker to read on');
    await second.stop();

    expect(recipient.calls.getShardIterator).toBe(0);
    expect(seen.filter((entry) => entry.worker === 'second').map((entry) => entry.value)).toEqual(Array.from({ length: 10 }, (_, i) => `b-${i}`));
    expect(seen.filter((entry) => entry.worker === 'first').map((entry) => entry.value)).toEqual(Array.from({ length: 40 }, (_, i) => `a-${i}`));
  }, 90_000);
});

async function until(condition: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
