import { describe, expect, it } from 'vitest';
import {
  Consumer,
  MemorySource,
  InvalidConfigError,
  MemoryStorage,
  StorageSchemaError,
  StorageUnavailableError,
  type CheckpointWrite,
  type ConsumerOptions,
  type FailedRecords,
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

  it('a commit whose outcome was unknown and could not be read back, but applied, is found by the next commit\'s conflict: the records it covered are not handed over again, and every effect applies once', async () => {
    const world = failureWorld();
    let readsFail = false;
    // The store as the worker sees it: a read of the lease fails while `readsFail` is set.
    const storage = new Proxy(world.storage, {
      get: (target, name) => {
        const value: unknown = Reflect.get(target, name, target);
        if (name === 'getLease') return async (...args: Parameters<MemoryStorage['getLease']>) => {
          if (readsFail) throw new StorageUnavailableError('[test] the lease cannot be read now');
          return target.getLease(...args);
        };
        return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      },
    });
    let calls = 0;
    const processBatch: ConsumerOptions['processBatch'] = async (records, context) => {
      world.handed.push(records.map(valueOf));
      if (++calls === 1) {
        // Records 1-4 commit with their effects, but the answer is lost and the read back fails.
        const fourth = records[3] as SourceRecord;
        await context.checkpointWith(async (current, next) => {
          const [outcome] = await world.storage.updateLeases(GROUP, [{ leaseKey: context.shardId, expectedVersion: current.version, next }]);
          if (outcome?.status === 'applied') for (const record of records.slice(0, 4)) world.effects.set(valueOf(record), (world.effects.get(valueOf(record)) ?? 0) + 1);
          readsFail = true;
          return { status: 'unknown', error: new StorageUnavailableError('[test] the answer was lost') };
        }, fourth.position);
      }
      readsFail = false;
      await world.commit(records, context, context.position);
    };
    const worker = world.consumer({ storage, processBatch });
    world.produce(10);
    await run(world.scheduler, worker.start());
    await world.until(() => world.effects.get(10) === 1);
    await run(world.scheduler, worker.stop());
    // The first call, the retry whose commit conflicted with the stored checkpoint 4, then only 5-10.
    expect(world.handed).toEqual([range(1, 10), range(1, 10), range(5, 10)]);
    expect(range(1, 10).map((value) => world.effects.get(value) ?? 0)).toEqual(range(1, 10).map(() => 1));
    expect((await world.lease())?.checkpoint).toBe('10');
  });

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


/** A handler that fails on every record past the tenth, as when its downstream is down. */
const downPastTen = (world: ReturnType<typeof failureWorld>): ConsumerOptions['processBatch'] => (records) => {
  world.handed.push(records.map(valueOf));
  if (records.some((record) => valueOf(record) > 10)) throw new Error('downstream unavailable');
};

const LONG_BACKOFF = { initialDelayMs: 40_000, maxDelayMs: 60_000 };

const STOPPING: ReadonlyArray<{ name: string; options: Partial<ConsumerOptions>; stopOnce: 'handler-failed' | 'record-skipped' | 'dead-letter-failed' }> = [
  { name: "'retry' (the default)", options: {}, stopOnce: 'handler-failed' },
  { name: "'skip', while it retries the whole batch", options: { onHandlerError: 'skip', retry: { initialDelayMs: 1_000, maxDelayMs: 10_000, maxAttempts: 1_000 } }, stopOnce: 'handler-failed' },
  { name: "'skip', while it retries record by record", options: { onHandlerError: 'skip', retry: { initialDelayMs: 1_000, maxDelayMs: 10_000, maxAttempts: 5 } }, stopOnce: 'record-skipped' },
  // Backoffs longer than the stop's timeout: a stop must not wait for the one under way to end.
  { name: 'a poison policy', options: { onHandlerError: { maxAttempts: 1_000, deadLetter: () => undefined }, retry: LONG_BACKOFF }, stopOnce: 'handler-failed' },
  { name: 'a poison policy with bisection', options: { onHandlerError: { bisect: true }, retry: LONG_BACKOFF }, stopOnce: 'handler-failed' },
  {
    name: 'a poison policy whose dead-letter handler keeps failing',
    options: {
      onHandlerError: {
        bisect: true,
        maxAttempts: 1,
        deadLetter: () => {
          throw new Error('dead-letter queue unavailable');
        },
      },
      retry: LONG_BACKOFF,
    },
    stopOnce: 'dead-letter-failed',
  },
];

describe('a stop while the handler keeps failing', () => {
  for (const { name, options, stopOnce } of STOPPING) {
    it(`under ${name}, hands the lease over with what was processed checkpointed, instead of waiting out its timeout and leaving the lease to lapse`, async () => {
      const world = failureWorld();
      const processBatch = downPastTen(world);
      const w1 = world.consumer({ ...options, processBatch });
      const skipped: string[] = [];
      let seen = 0;
      w1.on('record-skipped', ({ position }) => skipped.push(position));
      w1.on(stopOnce, () => seen++);
      world.produce(20);
      await run(world.scheduler, w1.start());
      await world.until(() => seen >= 2);
      await world.scheduler.advance(50);
      const takenOver: number[] = [];
      const w2 = world.consumer({ processBatch: (records) => void takenOver.push(...records.map(valueOf)) }, 'w2');
      await run(world.scheduler, w2.start());
      expect((await world.lease())?.owner).toBe('w1');
      await run(world.scheduler, w1.stop({ timeoutMs: 30_000 }));
      // Handed to the member staying, not left to lapse; it reads on from what was processed (and skipped)
      // before the failing records, which were never checkpointed.
      expect((await world.lease())?.owner).toBe('w2');
      expect(takenOver).toEqual(range(11 + skipped.length, 20));
      if (stopOnce === 'record-skipped') expect(skipped.length).toBeGreaterThan(0);
      await run(world.scheduler, w2.stop());
    });
  }
});

/**
 * A sink that fails every call while it is misconfigured (`broken` returns the error it throws, or `null`
 * once it is repaired), with the records each call succeeded with and the records dead-lettered.
 */
function sinkWorld(batchSize: number, broken: () => Error | null) {
  const world = failureWorld(batchSize);
  const succeeded: number[] = [];
  const deadLettered: number[] = [];
  const stalls: string[] = [];
  const processBatch: ConsumerOptions['processBatch'] = (records) => {
    world.handed.push(records.map(valueOf));
    const error = broken();
    if (error) throw error;
    succeeded.push(...records.map(valueOf));
  };
  const deadLetter = (failure: FailedRecords): void => void deadLettered.push(...failure.records.map(valueOf));
  const watch = (consumer: Consumer): Consumer => {
    consumer.on('shard-stalled', ({ reason, error }) => stalls.push(`${reason}: ${error?.message ?? '-'}`));
    consumer.on('shard-resumed', () => stalls.push('resumed'));
    consumer.on('record-skipped', ({ position, deadLettered: viaDeadLetter }) => {
      if (!viaDeadLetter) deadLettered.push(Number(position));
    });
    return consumer;
  };
  return { ...world, succeeded, deadLettered, stalls, processBatch, deadLetter, watch };
}

const GIVING_UP: ReadonlyArray<{ name: string; policy: (deadLetter: (failure: FailedRecords) => void) => FailurePolicy }> = [
  { name: "'skip'", policy: () => 'skip' },
  { name: 'a poison policy with bisection', policy: (deadLetter) => ({ bisect: true, maxAttempts: 2, deadLetter }) },
  { name: 'a poison policy without bisection', policy: (deadLetter) => ({ maxAttempts: 2, deadLetter }) },
];

describe('errors that are not the records\' fault, and giving up that runs away', () => {
  it('refuses an isRecordError that is not a function and a maxRecordsGivenUpInARow that is not a positive integer or Infinity, naming the value', () => {
    const base = { group: GROUP, source: new MemorySource(1), storage: new MemoryStorage(), processBatch: () => undefined };
    const refuse = (options: Partial<ConsumerOptions>, message: string): void => {
      expect(() => new Consumer({ ...base, ...options })).toThrow(InvalidConfigError);
      expect(() => new Consumer({ ...base, ...options })).toThrow(message);
    };
    refuse({ isRecordError: 'no' as never }, '[core] isRecordError must be a function, got "no"');
    refuse({ maxRecordsGivenUpInARow: 0 }, '[core] maxRecordsGivenUpInARow must be a positive integer or Infinity, got 0');
    refuse({ maxRecordsGivenUpInARow: 2.5 }, '[core] maxRecordsGivenUpInARow must be a positive integer or Infinity, got 2.5');
    refuse({ maxRecordsGivenUpInARow: '10' as never }, '[core] maxRecordsGivenUpInARow must be a positive integer or Infinity, got "10"');
    expect(() => new Consumer({ ...base, maxRecordsGivenUpInARow: Infinity, isRecordError: () => true })).not.toThrow();
  });

  for (const { name, policy } of GIVING_UP) {
    it(`under ${name}, a sink in the wrong schema gives no record up: the shard stalls naming the error, retries, and processes every record once the sink is repaired`, async () => {
      let repaired = false;
      const world = sinkWorld(10, () => (repaired ? null : new StorageSchemaError('[storage-postgres] the fence table "leasehold_fence" does not exist in schema "wrong"')));
      const worker = world.watch(world.consumer({ onHandlerError: policy(world.deadLetter), processBatch: world.processBatch }));
      world.produce(30);
      await run(world.scheduler, worker.start());
      await world.until(() => world.handed.length > 0);
      await world.scheduler.advance(30_000);
      expect(world.deadLettered).toEqual([]);
      expect(world.stalls).toEqual(['handler-error: [storage-postgres] the fence table "leasehold_fence" does not exist in schema "wrong"']);
      expect((await world.lease())?.metadata['leasehold.stalledReason']).toBe('handler-error');
      expect((await world.lease())?.checkpoint).toBe('TRIM_HORIZON');
      repaired = true;
      await world.scheduler.advance(15_000);
      expect(world.succeeded).toEqual(range(1, 30));
      expect(world.stalls.at(-1)).toBe('resumed');
      expect((await world.lease())?.checkpoint).toBe('30');
      await run(world.scheduler, worker.stop());
    });
  }

  it('an error the user marks as not the record\'s with isRecordError is retried, never given up', async () => {
    let repaired = false;
    const world = sinkWorld(10, () => (repaired ? null : Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' })));
    const worker = world.watch(
      world.consumer({
        onHandlerError: { bisect: true, maxAttempts: 2, deadLetter: world.deadLetter },
        isRecordError: (error) => (error as { code?: string }).code !== 'ECONNREFUSED',
        processBatch: world.processBatch,
      }),
    );
    world.produce(10);
    await run(world.scheduler, worker.start());
    await world.scheduler.advance(20_000);
    expect(world.deadLettered).toEqual([]);
    expect(world.stalls).toEqual(['handler-error: connect ECONNREFUSED 127.0.0.1:5432']);
    repaired = true;
    await world.scheduler.advance(15_000);
    expect(world.succeeded).toEqual(range(1, 10));
    await run(world.scheduler, worker.stop());
  });

  for (const { name, policy } of GIVING_UP) {
    it(`under ${name}, a handler that fails every call for a reason it does not tell gives up at most maxRecordsGivenUpInARow records, stalls loudly, loses none, and gives up again once a record succeeded`, async () => {
      let failing = true;
      const poison = new Set<number>();
      const world = sinkWorld(5, () => null);
      const errors: string[] = [];
      const logger = { debug() {}, info() {}, warn() {}, error: (_fields: object, message: string) => void errors.push(message) };
      const processBatch: ConsumerOptions['processBatch'] = (records) => {
        world.handed.push(records.map(valueOf));
        if (failing || records.some((record) => poison.has(valueOf(record)))) throw new Error('relation "orders" does not exist');
        world.succeeded.push(...records.map(valueOf));
      };
      const worker = world.watch(world.consumer({ onHandlerError: policy(world.deadLetter), maxRecordsGivenUpInARow: 4, logger, processBatch }));
      world.produce(40);
      await run(world.scheduler, worker.start());
      await world.until(() => world.handed.length > 0);
      await world.scheduler.advance(60_000);
      expect(world.deadLettered.length).toBeLessThanOrEqual(4);
      expect(world.stalls).toEqual(['give-up-limit: relation "orders" does not exist']);
      expect(errors.some((message) => message.startsWith('shard stalled: too many records given up in a row'))).toBe(true);
      failing = false;
      await world.scheduler.advance(15_000);
      expect(world.stalls.at(-1)).toBe('resumed');
      // Every record is accounted for, once: given up before the guard held, or processed after.
      expect([...world.deadLettered, ...world.succeeded].sort((a, b) => a - b)).toEqual(range(1, 40));
      expect((await world.lease())?.checkpoint).toBe('40');
      // The count started again: a new record that always fails is given up as before.
      poison.add(41);
      world.produce(1);
      await world.scheduler.advance(30_000);
      expect([...world.deadLettered, ...world.succeeded].sort((a, b) => a - b)).toEqual(range(1, 41));
      expect(world.deadLettered).toContain(41);
      await run(world.scheduler, worker.stop());
    });
  }

  it('a run given up together counts whole: a batch larger than maxRecordsGivenUpInARow is not given up', async () => {
    const world = sinkWorld(10, () => new Error('always'));
    const worker = world.watch(world.consumer({ onHandlerError: { maxAttempts: 1, deadLetter: world.deadLetter }, maxRecordsGivenUpInARow: 9, processBatch: world.processBatch }));
    world.produce(10);
    await run(world.scheduler, worker.start());
    await world.scheduler.advance(20_000);
    expect(world.deadLettered).toEqual([]);
    expect(world.stalls).toEqual(['give-up-limit: always']);
    await run(world.scheduler, worker.stop());
  });

  it('with the default limit, a sink failing every call for a reason it does not tell dead-letters at most 10 records and loses none', async () => {
    let failing = true;
    const world = sinkWorld(100, () => (failing ? new Error('permission denied for table orders') : null));
    const worker = world.watch(world.consumer({ onHandlerError: { bisect: true, maxAttempts: 3, deadLetter: world.deadLetter }, processBatch: world.processBatch }));
    world.produce(4_265);
    await run(world.scheduler, worker.start());
    await world.scheduler.advance(120_000);
    expect(world.deadLettered.length).toBeLessThanOrEqual(10);
    expect(world.stalls).toEqual(['give-up-limit: permission denied for table orders']);
    failing = false;
    await world.scheduler.advance(60_000);
    expect([...world.deadLettered, ...world.succeeded].sort((a, b) => a - b)).toEqual(range(1, 4_265));
    await run(world.scheduler, worker.stop());
  });
});
