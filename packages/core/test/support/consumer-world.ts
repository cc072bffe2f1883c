import {
  Consumer,
  MemorySource,
  MemoryStorage,
  type ConsumerOptions,
  type MemorySourceOptions,
  type SourceRecord,
} from '../../src/index.js';
import { seededRandom, VirtualScheduler, type VirtualClock, withUnsafe, type ConsumerUnsafe } from '../../src/testing/index.js';

export const GROUP = 'orders';
export const decoder = new TextDecoder();

export interface Seen {
  worker: string;
  shardId: string;
  key: string;
  value: number;
}

export function world(shards = 2, sourceOptions: MemorySourceOptions = {}) {
  const scheduler = new VirtualScheduler();
  const sourceClock = scheduler.clock();
  const source = new MemorySource(shards, { clock: sourceClock, batchSize: 10, ...sourceOptions });
  const storage = new MemoryStorage();
  const seen: Seen[] = [];
  let seed = 1;
  const consumer = (workerId: string, { unsafe, ...options }: Partial<ConsumerOptions> & { unsafe?: ConsumerUnsafe } = {}, clock: VirtualClock = scheduler.clock()) =>
    new Consumer(withUnsafe({
      group: GROUP,
      source,
      storage,
      workerId,
      clock,
      random: seededRandom(seed++),
      initialPosition: 'TRIM_HORIZON',
      shardSyncIntervalMs: 5_000,
      processBatch: (records: readonly SourceRecord[], context) => {
        for (const record of records) {
          const [key, value] = decoder.decode(record.data).split('=') as [string, string];
          seen.push({ worker: workerId, shardId: context.shardId, key, value: Number(value) });
        }
      },
      ...options,
    }, unsafe));
  /** Produces `count` records for each of `keys`, numbered per key from `from`. */
  const produce = (keys: string[], count: number, from = 1): void => {
    for (let n = from; n < from + count; n++) for (const key of keys) source.put(key, `${key}=${n}`);
  };
  return { scheduler, source, storage, seen, consumer, produce };
}

export function perKey(seen: readonly Seen[]): Map<string, number[]> {
  const byKey = new Map<string, number[]>();
  for (const entry of seen) byKey.set(entry.key, [...(byKey.get(entry.key) ?? []), entry.value]);
  return byKey;
}

export const range = (from: number, to: number): number[] => Array.from({ length: to - from + 1 }, (_, i) => from + i);

