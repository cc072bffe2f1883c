import { describe, expect, it } from 'vitest';
import {
  Consumer,
  MemorySource,
  MemoryStorage,
  type CheckpointWrite,
  type ConsumerOptions,
  type FailurePolicy,
  type LeaseRecord,
  type SourceRecord,
  type WriteResult,
} from '../src/index.js';
import { seededRandom, VirtualScheduler } from '../src/testing/index.js';
import { run } from './support/virtual.js';

const GROUP = 'failures';
const SHARD = 'shard-0000';
const decoder = new TextDecoder();
const valueOf = (record: SourceRecord): number => Number(decoder.decode(record.data));
const range = (from: number, to: number): number[] => Array.from({ length: to - from + 1 }, (_, i) => from + i);

/**
 * One worker on a one-shard stream of batches of `batchSize` records numbered 1.. (their positions are
 * the same numbers), a log of every call's values, and a sink whose effects apply with the checkpoint
 * (`commit`), counted per record.
 */
function failureWorld(batchSize = 10) {
  const scheduler = new VirtualScheduler();
  const source = new MemorySource(1, { clock: scheduler.clock(), batchSize });
  const storage = new MemoryStorage();
  const handed: number[][] = [];
  const effects = new Map<number, number>();
  let produced = 0;
  const produce = (count: number): void => {
    for (let i = 0; i < count; i++) source.put('key', String(++produced), SHARD);
  };
  /** Writes the effects of `records` and the checkpoint at `position` in one atomic step of the store. */
  const commit = async (records: readonly SourceRecord[], context: Parameters<ConsumerOptions['processBatch']>[1], position: string): Promise<void> => {
    const write: CheckpointWrite = async (current, next) => {
      const [outcome] = await storage.updateLeases(GROUP, [{ leaseKey: context.shardId, expectedVersion: current.version, next }]);
      if (outcome?.status === 'applied') {
        for (const record of records) if (Number(record.position) <= Number(position)) effects.set(valueOf(record), (effects.get(valueOf(record)) ?? 0) + 1);
      }
      return outcome as WriteResult<LeaseRecord>;
    };
    await context.checkpointWith(write, position);
  };
  const consumer = (overrides: Partial<ConsumerOptions> & Pick<ConsumerOptions, 'processBatch'>, workerId = 'w1'): Consumer =>
    new Consumer({
      group: GROUP,
      source,
      storage,
      workerId,
      clock: scheduler.clock(),
      random: seededRandom(7),
      initialPosition: 'TRIM_HORIZON',
      retry: { initialDelayMs: 10, maxDelayMs: 1_000 },
      metrics: false,
      ...overrides,
    });
  const lease = async (): Promise<LeaseRecord | null> => storage.getLease(GROUP, SHARD);
  /** Advances virtual time a millisecond at a time until `condition` holds. */
  const until = async (condition: () => boolean): Promise<void> => {
    for (let i = 0; i < 60_000 && !condition(); i++) await scheduler.advance(1);
    expect(condition()).toBe(true);
  };
  return { scheduler, source, storage, handed, effects, produce, commit, consumer, lease, until };
}

const POLICIES: ReadonlyArray<{ name: string; policy: FailurePolicy }> = [
  { name: "'retry'", policy: 'retry' },
  { name: "'skip'", policy: 'skip' },
  { name: "'stop'", policy: 'stop' },
  { name: 'a poison policy', policy: { maxAttempts: 3, deadLetter: () => undefined } },
  { name: 'a poison policy with bisection', policy: { bisect: true, maxAttempts: 3, deadLetter: () => undefined } },
];

describe('a handler call that checkpointed part of its batch and then failed', () => {
  for (const { name, policy } of POLICIES) {
    it(`under ${name}, the records it committed with its writes are done and never handed over again, and every effect applies once`, async () => {
      const world = failureWorld();
      let failures = 1;
      const processBatch: ConsumerOptions['processBatch'] = async (records, context) => {
        world.handed.push(records.map(valueOf));
        const fourth = records[3];
        if (failures > 0 && fourth) {
          failures--;
          await world.commit(records, context, fourth.position);
          throw new Error('a step after the commit failed');
        }
        await world.commit(records, context, context.position);
      };
      const worker = world.consumer({ onHandlerError: policy, processBatch });
      world.produce(10);
      await run(world.scheduler, worker.start());
      await world.until(() => world.handed.length > 0);
      await world.scheduler.advance(5_000);
      if (policy === 'stop') {
        // The shard stopped at the failure; the committed records are checkpointed, and the next reader starts after them.
        expect((await world.lease())?.checkpoint).toBe('4');
        await run(world.scheduler, worker.stop());
        const next = world.consumer({ processBatch }, 'w2');
        await run(world.scheduler, next.start());
        await world.scheduler.advance(5_000);
        await run(world.scheduler, next.stop());
      } else {
        await run(world.scheduler, worker.stop());
      }
      const handedAgain = world.handed.slice(1).flat().filter((value) => value <= 4);
      expect(handedAgain).toEqual([]);
      expect(range(1, 10).map((value) => world.effects.get(value) ?? 0)).toEqual(range(1, 10).map(() => 1));
      expect((await world.lease())?.checkpoint).toBe('10');
    });
  }

  it('a plain checkpoint of part of the batch counts those records as done too: only the rest is handed over again', async () => {
    const world = failureWorld();
    let failures = 1;
    const checkpointed: string[] = [];
    const worker = world.consumer({
      processBatch: async (records, context) => {
        world.handed.push(records.map(valueOf));
        if (failures-- > 0) {
          await context.checkpoint((records[5] as SourceRecord).position);
          throw new Error('failed after checkpointing six records');
        }
      },
    });
    worker.on('checkpointed', ({ position }) => checkpointed.push(position));
    world.produce(10);
    await run(world.scheduler, worker.start());
    await world.until(() => world.handed.length > 1);
    await world.scheduler.advance(1_000);
    expect(world.handed).toEqual([range(1, 10), range(7, 10)]);
    // The runtime does not write the handler's checkpoint a second time.
    expect(checkpointed).toEqual(['6', '10']);
    await run(world.scheduler, worker.stop());
  });

  it('a report of a failed record behind what the call committed does not hand the committed records over again', async () => {
    const world = failureWorld();
    let failures = 1;
    const worker = world.consumer({
      processBatch: async (records, context) => {
        world.handed.push(records.map(valueOf));
        if (failures-- > 0) {
          await world.commit(records, context, (records[5] as SourceRecord).position);
          return { failedAt: (records[2] as SourceRecord).position };
        }
        await world.commit(records, context, context.position);
        return undefined;
      },
    });
    world.produce(10);
    await run(world.scheduler, worker.start());
    await world.until(() => world.handed.length > 1);
    await world.scheduler.advance(1_000);
    expect(world.handed).toEqual([range(1, 10), range(7, 10)]);
    expect(range(1, 10).map((value) => world.effects.get(value) ?? 0)).toEqual(range(1, 10).map(() => 1));
    await run(world.scheduler, worker.stop());
  });
});

