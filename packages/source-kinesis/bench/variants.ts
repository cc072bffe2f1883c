/**
 * The ways of reading a whole stream that the CPU benchmarks compare, each one difference away from the
 * plain GetRecords loop: per-call options, one client per shard, the SDK's middleware cache, batches kept
 * to the end, KinesisSource, and KinesisSource under a Consumer with the in-memory store. Every variant
 * reads every shard from TRIM_HORIZON to its last record and returns the records it read.
 */
import { GetRecordsCommand, GetShardIteratorCommand, type GetRecordsOutput, type KinesisClient } from '@aws-sdk/client-kinesis';
import { Checkpoint, Consumer, MemoryStorage } from '@leasehold/core';
import { KinesisSource } from '../src/index.js';
import type { RunningKinesisLocal } from '@leasehold/local-stack';
import { clientFor } from '../test/support.js';

/** Where kinesis-local listens, as a client needs it. */
export type Emulator = Pick<RunningKinesisLocal, 'endpoint' | 'region' | 'credentials'>;

/** The stream every variant reads: its records per shard, and the client the variants share. */
export interface Workload {
  readonly emulator: Emulator;
  readonly client: KinesisClient;
  readonly streamName: string;
  readonly counts: ReadonlyMap<string, number>;
}

export const RECORDS_PER_CALL = 1_000;

type Send = (client: KinesisClient, command: GetRecordsCommand | GetShardIteratorCommand) => Promise<unknown>;

/** The plain loop over every shard at once, each call made by `send`, each answer handed to `keep`. */
async function plainLoop(workload: Workload, clientOf: (shardId: string) => KinesisClient, send: Send, keep?: (output: GetRecordsOutput) => void): Promise<number> {
  let total = 0;
  await Promise.all(
    [...workload.counts].map(async ([shardId, count]) => {
      const client = clientOf(shardId);
      const start = new GetShardIteratorCommand({ StreamName: workload.streamName, ShardId: shardId, ShardIteratorType: 'TRIM_HORIZON' });
      let iterator = ((await send(client, start)) as { ShardIterator?: string }).ShardIterator;
      let read = 0;
      while (read < count && iterator !== undefined) {
        const output = (await send(client, new GetRecordsCommand({ ShardIterator: iterator, Limit: RECORDS_PER_CALL }))) as GetRecordsOutput;
        read += output.Records?.length ?? 0;
        keep?.(output);
        iterator = output.NextShardIterator;
      }
      total += read;
    }),
  );
  return total;
}

// Clients a variant needs besides the shared one, made at its first read (the warm-up) and kept for the
// workload's life, so that a read's cost holds no client's construction.
const extraClients = new WeakMap<Workload, Map<string, KinesisClient>>();
function clientsOf(workload: Workload, key: string, make: () => KinesisClient): KinesisClient {
  const clients = extraClients.get(workload) ?? new Map<string, KinesisClient>();
  extraClients.set(workload, clients);
  let client = clients.get(key);
  if (client === undefined) clients.set(key, (client = make()));
  return client;
}

const plainSend: Send = (client, command) => client.send(command as GetRecordsCommand);

/** KinesisSource.read of every shard over `client`. */
async function readThroughSource(workload: Workload, client: KinesisClient): Promise<number> {
  const source = new KinesisSource({ client, streamName: workload.streamName, maxRecordsPerCall: RECORDS_PER_CALL });
  let total = 0;
  await Promise.all(
    [...workload.counts].map(async ([shardId, count]) => {
      let read = 0;
      for await (const batch of source.read(shardId, Checkpoint.TRIM_HORIZON)) {
        if (batch.kind === 'records') read += batch.records.length;
        if (read >= count) break;
      }
      total += read;
    }),
  );
  return total;
}

/** The variants by name; `plain` is the baseline. */
export const VARIANTS = {
  plain: (workload: Workload) => plainLoop(workload, () => workload.client, plainSend),

  /** The same loop with `{ abortSignal }` on every call, one signal for the whole read, as the source passed it. */
  'plain + abortSignal per call': (workload: Workload) => {
    const { signal } = new AbortController();
    return plainLoop(workload, () => workload.client, (client, command) => client.send(command as GetRecordsCommand, { abortSignal: signal }));
  },

  /** A client built with `cacheMiddleware: true` (the SDK resolves the middleware stack once per command class). */
  'plain with a cacheMiddleware client': (workload: Workload) => {
    const client = clientsOf(workload, 'cached', () => clientFor(workload.emulator, { cacheMiddleware: true }));
    return plainLoop(workload, () => client, plainSend);
  },

  /** A client of its own for each shard. */
  'plain with a client per shard': (workload: Workload) =>
    plainLoop(workload, (shardId) => clientsOf(workload, shardId, () => clientFor(workload.emulator)), plainSend),

  /** Every answer kept until the whole stream is read, as a consumer that lags keeps its prefetched batches. */
  'plain keeping every answer': (workload: Workload) => {
    const kept: GetRecordsOutput[] = [];
    return plainLoop(workload, () => workload.client, plainSend, (output) => kept.push(output));
  },

  /** KinesisSource.read of every shard, at its default pace (five calls a second per shard while behind). */
  KinesisSource: (workload: Workload) => readThroughSource(workload, workload.client),

  /** The same over a client built with `cacheMiddleware: true`. */
  'KinesisSource with a cacheMiddleware client': (workload: Workload) =>
    readThroughSource(workload, clientsOf(workload, 'cached', () => clientFor(workload.emulator, { cacheMiddleware: true }))),

  /** A Consumer with the in-memory store over KinesisSource: leases, checkpoints per batch, the runtime's queue. */
  'Consumer (memory store)': async (workload: Workload) => {
    const expected = [...workload.counts.values()].reduce((a, b) => a + b, 0);
    const source = new KinesisSource({ client: workload.client, streamName: workload.streamName, maxRecordsPerCall: RECORDS_PER_CALL });
    let total = 0;
    let done!: () => void;
    const drained = new Promise<void>((resolve) => (done = resolve));
    const consumer = new Consumer({
      group: `cpu-${Math.random().toString(36).slice(2)}`,
      source,
      storage: new MemoryStorage(),
      initialPosition: 'TRIM_HORIZON',
      processBatch: (records) => {
        total += records.length;
        if (total >= expected) done();
        return Promise.resolve();
      },
    });
    await consumer.start();
    try {
      await drained;
    } finally {
      await consumer.stop();
    }
    return total;
  },
} satisfies Record<string, (workload: Workload) => Promise<number>>;

export type VariantName = keyof typeof VARIANTS;
