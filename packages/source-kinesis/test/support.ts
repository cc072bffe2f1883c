import {
  CreateStreamCommand,
  DescribeStreamSummaryCommand,
  KinesisClient,
  PutRecordsCommand,
  type KinesisClientConfig,
  type PutRecordsRequestEntry,
} from '@aws-sdk/client-kinesis';
import { NodeHttpHandler } from '@smithy/node-http-handler';
import type { Clock, ShardBatch } from '@leasehold/core';
import { startKinesisLocal, type RunningKinesisLocal } from '@leasehold/local-stack';
import { afterAll, beforeAll } from 'vitest';
import type { KinesisRecord, KinesisSource } from '../src/index.js';

/** Starts kinesis-local for a test file; a failure names the command that runs it by hand. */
export async function startEmulator(): Promise<RunningKinesisLocal> {
  try {
    return await startKinesisLocal();
  } catch (error) {
    throw new Error(
      `kinesis-local could not be started; try it by hand with "npx kinesis-local" in packages/local-stack: ${(error as Error).message}`,
      { cause: error },
    );
  }
}

/**
 * kinesis-local for the test file that calls it: started before its tests and closed after them, the
 * clients `client()` made destroyed first. Each `client(config)` is a new client (`clientFor`).
 */
export function useEmulator(): { emulator: () => RunningKinesisLocal; client: (config?: Partial<KinesisClientConfig>) => KinesisClient } {
  let running: RunningKinesisLocal | undefined;
  const clients: KinesisClient[] = [];
  beforeAll(async () => {
    running = await startEmulator();
  });
  afterAll(async () => {
    for (const client of clients.splice(0)) client.destroy();
    await running?.close();
  });
  const emulator = (): RunningKinesisLocal => {
    if (running === undefined) throw new Error('kinesis-local is not running: useEmulator() starts it before the tests');
    return running;
  };
  return {
    emulator,
    client: (config = {}) => {
      const client = clientFor(emulator(), config);
      clients.push(client);
      return client;
    },
  };
}

/** A client for the emulator: plain HTTP/1.1, dummy credentials; `config` adds to it. */
export function clientFor(emulator: Pick<RunningKinesisLocal, 'endpoint' | 'region' | 'credentials'>, config: Partial<KinesisClientConfig> = {}): KinesisClient {
  return new KinesisClient({
    endpoint: emulator.endpoint,
    region: emulator.region,
    credentials: emulator.credentials,
    requestHandler: new NodeHttpHandler(),
    ...config,
  });
}

let streams = 0;

/** A fresh ACTIVE stream: the emulator slows down as a shard fills, so every test gets its own. */
export async function createStream(client: KinesisClient, shardCount: number): Promise<{ streamName: string; streamArn: string }> {
  const streamName = `test-${process.pid}-${++streams}-${Math.random().toString(36).slice(2, 8)}`;
  await client.send(new CreateStreamCommand({ StreamName: streamName, ShardCount: shardCount }));
  return { streamName, streamArn: await waitUntilActive(client, streamName) };
}

export async function waitUntilActive(client: KinesisClient, streamName: string): Promise<string> {
  for (;;) {
    const summary = (await client.send(new DescribeStreamSummaryCommand({ StreamName: streamName }))).StreamDescriptionSummary;
    if (summary?.StreamStatus === 'ACTIVE') return summary.StreamARN!;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Puts records in order (500 a call), each to the shard its explicit hash key or partition key picks; returns their sequence numbers. */
export async function putRecords(client: KinesisClient, streamName: string, entries: PutRecordsRequestEntry[]): Promise<string[]> {
  const sequenceNumbers: string[] = [];
  for (let i = 0; i < entries.length; i += 500) {
    const output = await client.send(new PutRecordsCommand({ StreamName: streamName, Records: entries.slice(i, i + 500) }));
    if (output.FailedRecordCount) throw new Error(`${output.FailedRecordCount} records were not put`);
    for (const record of output.Records ?? []) sequenceNumbers.push(record.SequenceNumber!);
  }
  return sequenceNumbers;
}

/** Plain records `prefix-0`, `prefix-1`, ... */
export function textEntries(prefix: string, count: number, explicitHashKey?: string): PutRecordsRequestEntry[] {
  return Array.from({ length: count }, (_, i) => ({
    Data: Buffer.from(`${prefix}-${i}`),
    PartitionKey: `key-${i % 7}`,
    ...(explicitHashKey === undefined ? {} : { ExplicitHashKey: explicitHashKey }),
  }));
}

export function text(record: KinesisRecord): string {
  return Buffer.from(record.data).toString('utf8');
}

/** Reads until `count` records arrived or the shard ended, then leaves the loop. */
export async function readRecords(
  source: KinesisSource,
  shardId: string,
  from: string,
  count: number,
): Promise<{ records: KinesisRecord[]; batches: ShardBatch<KinesisRecord>[] }> {
  const records: KinesisRecord[] = [];
  const batches: ShardBatch<KinesisRecord>[] = [];
  for await (const batch of source.read(shardId, from, { signal: AbortSignal.timeout(45_000) })) {
    batches.push(batch);
    if (batch.kind === 'records') records.push(...batch.records);
    if (records.length >= count) break;
  }
  return { records, batches };
}

/** A clock whose sleeps return at once and move its time forward: deterministic pacing and backoff. */
export function fakeClock(): Clock & { sleeps: number[] } {
  let now = 0;
  const sleeps: number[] = [];
  return {
    sleeps,
    now: () => now,
    wallTime: () => Date.UTC(2026, 0, 1) + now,
    async sleep(ms: number, signal?: AbortSignal): Promise<void> {
      signal?.throwIfAborted();
      sleeps.push(ms);
      now += Math.max(0, ms);
      await Promise.resolve();
    },
  };
}

export const HASH_LOW = '0';
export const HASH_HIGH = '340282366920938463463374607431768211455';
