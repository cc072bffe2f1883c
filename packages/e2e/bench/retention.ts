/**
 * Whether a worker lets go of a batch once it is done with it: the records handed to the handler, and the
 * SDK's records they came from, must be collectable while the next batch is awaited (the consumer's pump,
 * the source's read and its reader are all suspended then, and a suspended async function keeps the
 * registers it used). Each check holds weak references to the records, waits for the next batch, collects
 * garbage and counts what is still alive; it exits non-zero if anything is. It needs a collector it can
 * call, so it runs in a process of its own (test/retention.test.ts runs it so, against the built packages):
 *
 *   node --expose-gc --import tsx bench/retention.ts     (from packages/e2e, after a build)
 */
import { GetRecordsCommand, GetShardIteratorCommand, type GetRecordsOutput, type KinesisClient } from '@aws-sdk/client-kinesis';
import { Checkpoint, Consumer, MemoryStorage, type ShardBatch, type ShardSource, type SourceRecord } from '@leasehold/core';
import { KinesisSource } from '@leasehold/source-kinesis';
import { setImmediate as tick, setTimeout as sleep } from 'node:timers/promises';

const collect = (globalThis as { gc?: () => void }).gc;
if (collect === undefined) {
  process.stderr.write('retention: run with node --expose-gc\n');
  process.exit(2);
}

const SEQ = (n: number): string => `4968070221431632128393721418750${String(n).padStart(25, '0')}`;

/** How many of `refs` survive full collections (a weak reference is cleared only after the job that made it). */
async function alive(refs: ReadonlyArray<WeakRef<object>>): Promise<number> {
  for (let round = 0; round < 3; round++) {
    collect!();
    await tick();
  }
  return refs.filter((ref) => ref.deref() !== undefined).length;
}

/**
 * The Kinesis source: one GetRecords answers three records; with `emptyBetween` the next one answers
 * nothing (the shard is caught up); the last one never answers. The handed records and the SDK's are let
 * go of once the consumer asked for the batch that does not come.
 */
async function sourceRead(emptyBetween: boolean): Promise<{ handed: number; sdk: number; of: number }> {
  const sdkRecords: Array<WeakRef<object>> = [];
  let calls = 0;
  const client = {
    send: async (command: unknown): Promise<unknown> => {
      if (command instanceof GetShardIteratorCommand) return { ShardIterator: 'iterator' };
      if (!(command instanceof GetRecordsCommand)) throw new Error(`unexpected ${String(command)}`);
      const call = calls++;
      if (call === 1 && emptyBetween) return { Records: [], NextShardIterator: 'iterator', MillisBehindLatest: 0 };
      if (call > 0) return new Promise(() => undefined);
      const records: NonNullable<GetRecordsOutput['Records']> = [1, 2, 3].map((n) => ({ Data: Buffer.from(`payload ${n}`), PartitionKey: 'k', SequenceNumber: SEQ(n) }));
      for (const record of records) sdkRecords.push(new WeakRef(record));
      return { Records: records, NextShardIterator: 'iterator', MillisBehindLatest: 0 };
    },
  } as unknown as KinesisClient;
  const source = new KinesisSource({ client, streamName: 's', idleDelayMs: 200 });
  const batches = source.read('shardId-000000000000', Checkpoint.TRIM_HORIZON)[Symbol.asyncIterator]();
  const handed = await firstRecords(batches);
  if (emptyBetween) await batches.next();
  // Left waiting: the call never answers (the process exits at the end).
  void batches.next().catch(() => undefined);
  await sleep(600); // the reader's next call is out, and unanswered
  return { handed: await alive(handed), sdk: await alive(sdkRecords), of: handed.length };
}

async function firstRecords(batches: AsyncIterator<ShardBatch<SourceRecord>>): Promise<Array<WeakRef<object>>> {
  const first = await batches.next();
  if (first.done === true || first.value.kind !== 'records') throw new Error('no batch of records');
  return first.value.records.map((record) => new WeakRef(record));
}

/** The consumer: a shard whose first batch has three records and whose second never comes. */
async function consumerPump(): Promise<{ handed: number; of: number }> {
  const handed: Array<WeakRef<object>> = [];
  let wasHanded: () => void = () => undefined;
  const handedOnce = new Promise<void>((resolve) => (wasHanded = resolve));
  const source: ShardSource = {
    listShards: async () => [{ shardId: 's-0', parentShardIds: [], closed: false }],
    comparePositions: (a, b) => Number(a) - Number(b),
    read: (_shardId, _from, options) => ({
      [Symbol.asyncIterator]: () => {
        let calls = 0;
        return {
          next: (): Promise<IteratorResult<ShardBatch>> => {
            if (calls++ === 0) {
              const records = [1, 2, 3].map((n) => ({ position: String(n), data: Buffer.from(`payload ${n}`), partitionKey: 'k' }));
              return Promise.resolve({ done: false, value: { kind: 'records', records, position: '3', millisBehindLatest: 0 } });
            }
            return new Promise((_, reject) => options?.signal?.addEventListener('abort', () => reject(options.signal?.reason as Error)));
          },
          return: async (): Promise<IteratorResult<ShardBatch>> => ({ done: true, value: undefined }),
        };
      },
    }),
  };
  const consumer = new Consumer({
    group: 'g',
    workerId: 'w',
    source,
    storage: new MemoryStorage(),
    initialPosition: Checkpoint.TRIM_HORIZON,
    processBatch: async (records) => {
      for (const record of records) handed.push(new WeakRef(record));
      wasHanded();
    },
  });
  await consumer.start();
  await handedOnce;
  await sleep(300); // checkpointed, and the pump waits for the next batch
  const result = { handed: await alive(handed), of: handed.length };
  await consumer.stop({ timeoutMs: 2_000 });
  return result;
}

let alives = 0;
for (const emptyBetween of [false, true]) {
  const read = await sourceRead(emptyBetween);
  alives += read.handed + read.sdk;
  process.stdout.write(`source read, next batch awaited${emptyBetween ? ' after an empty one' : ''}: handed records alive ${read.handed} of ${read.of}, SDK records alive ${read.sdk} of ${read.of}\n`);
}
const pump = await consumerPump();
alives += pump.handed;
process.stdout.write(`consumer, handler resolved, next batch awaited: handed records alive ${pump.handed} of ${pump.of}\n`);
process.exit(alives === 0 ? 0 : 1);
