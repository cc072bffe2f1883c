import { AggregationTemporality, InMemoryMetricExporter, MeterProvider, PeriodicExportingMetricReader } from '@opentelemetry/sdk-metrics';
import { describe, expect, it } from 'vitest';
import {
  Consumer,
  InvalidConfigError,
  MemorySource,
  MemoryStorage,
  type ConsumerOptions,
  type FailedRecords,
  type SourceRecord,
} from '../src/index.js';
import { seededRandom, VirtualScheduler } from '../src/testing/index.js';
import { run } from './support/virtual.js';

const GROUP = 'poison';
const decoder = new TextDecoder();
const valueOf = (record: SourceRecord): number => Number(decoder.decode(record.data));

/**
 * One worker on a stream of `shards` shards of `batchSize` records per batch, records numbered 1.. in
 * their data (positions are the same numbers on one shard), a handler that fails on the numbers
 * `isPoison` names, and a log of every call.
 */
function poisonWorld(options: { shards?: number; batchSize?: number; isPoison?: (value: number) => boolean } = {}) {
  const scheduler = new VirtualScheduler();
  const source = new MemorySource(options.shards ?? 1, { clock: scheduler.clock(), batchSize: options.batchSize ?? 100 });
  const storage = new MemoryStorage();
  const isPoison = options.isPoison ?? (() => false);
  /** Every call of the handler: its values and whether it succeeded. */
  const calls: Array<{ values: number[]; ok: boolean }> = [];
  const succeeded: number[] = [];
  const deadLettered: Array<FailedRecords> = [];
  let produced = 0;
  /** The position of the last record put on each shard. */
  const lastPut = new Map<string, string>();
  const produce = (count: number): void => {
    for (let i = 0; i < count; i++) {
      const key = `key-${produced % 7}`;
      const shardId = source.shardFor(key);
      lastPut.set(shardId, source.put(key, String(++produced), shardId));
    }
  };
  const processBatch: ConsumerOptions['processBatch'] = (records) => {
    const values = records.map(valueOf);
    const ok = !values.some(isPoison);
    calls.push({ values, ok });
    if (!ok) throw new Error(`poison among ${values[0]}..${values[values.length - 1]}`);
    succeeded.push(...values);
  };
  const consumer = (overrides: Partial<ConsumerOptions> = {}): Consumer =>
    new Consumer({
      group: GROUP,
      source,
      storage,
      workerId: 'w1',
      clock: scheduler.clock(),
      random: seededRandom(7),
      initialPosition: 'TRIM_HORIZON',
      retry: { initialDelayMs: 10, maxDelayMs: 1_000 },
      metrics: false,
      processBatch,
      ...overrides,
    });
  const deadLetter = (failure: FailedRecords): void => void deadLettered.push(failure);
  const checkpointOf = async (shardId = 'shard-0000'): Promise<string | null | undefined> => (await storage.getLease(GROUP, shardId))?.checkpoint;
  /** Advances virtual time a millisecond at a time until `condition` holds (a worker's first read takes a take tick or two). */
  const until = async (condition: () => boolean): Promise<void> => {
    for (let i = 0; i < 60_000 && !condition(); i++) await scheduler.advance(1);
    expect(condition()).toBe(true);
  };
  return { scheduler, source, storage, calls, succeeded, deadLettered, lastPut, produce, consumer, deadLetter, checkpointOf, until };
}

describe('poison records (onHandlerError as a PoisonPolicy)', () => {
  it('refuses invalid failure policies with an InvalidConfigError naming the value', () => {
    const base = { group: GROUP, source: new MemorySource(1), storage: new MemoryStorage(), processBatch: () => undefined };
    const refuse = (onHandlerError: unknown, message: string): void => {
      expect(() => new Consumer({ ...base, onHandlerError: onHandlerError as never })).toThrow(InvalidConfigError);
      expect(() => new Consumer({ ...base, onHandlerError: onHandlerError as never })).toThrow(message);
    };
    refuse({ maxAttempts: -1 }, '[core] onHandlerError.maxAttempts must be a positive integer, got -1');
    refuse({ maxAttempts: 2.5 }, 'onHandlerError.maxAttempts must be a positive integer, got 2.5');
    refuse({ maxRecordAgeMs: 0 }, 'onHandlerError.maxRecordAgeMs must be a positive number of milliseconds, got 0');
    refuse({ maxAttempts: 3, deadLetter: 'queue' }, 'onHandlerError.deadLetter must be a function, got "queue"');
    refuse({ bisect: 'yes' }, 'onHandlerError.bisect must be a boolean, got "yes"');
    refuse({ maxRetries: 3 }, 'onHandlerError has no option "maxRetries"; it takes bisect, maxAttempts, maxRecordAgeMs and deadLetter');
    refuse({ deadLetter: () => undefined }, 'onHandlerError.deadLetter is never called without maxAttempts or maxRecordAgeMs');
    refuse(['retry'], `onHandlerError must be 'retry', 'skip', 'stop' or { bisect?, maxAttempts?, maxRecordAgeMs?, deadLetter? }, got ["retry"]`);
    expect(() => new Consumer({ ...base, onHandlerError: { bisect: true, maxAttempts: 5, maxRecordAgeMs: 60_000, deadLetter: () => undefined } })).not.toThrow();
  });

  it('bisection isolates the poison record in 2 log2(n) extra calls, and every other record succeeds exactly once, in order', async () => {
    const world = poisonWorld({ batchSize: 128, isPoison: (value) => value === 78 });
    const worker = world.consumer({ onHandlerError: { bisect: true, maxAttempts: 1, deadLetter: world.deadLetter } });
    const bisections: Array<[number, number]> = [];
    worker.on('batch-bisected', ({ left, right }) => bisections.push([left, right]));
    world.produce(128);
    await run(world.scheduler, worker.start());
    await world.scheduler.advance(5_000);
    // One call for the whole batch, then two per halving (the half with the poison record fails, the other
    // succeeds), seven halvings from 128 records down to one.
    expect(world.calls.length).toBe(1 + 2 * Math.log2(128));
    expect(bisections).toEqual([[64, 64], [32, 32], [16, 16], [8, 8], [4, 4], [2, 2], [1, 1]]);
    expect(world.succeeded).toEqual(Array.from({ length: 128 }, (_, i) => i + 1).filter((value) => value !== 78));
    expect(world.deadLettered.map((failure) => [failure.positions, failure.attempts, failure.reason])).toEqual([[['78'], 1, 'max-attempts']]);
    expect(world.deadLettered[0]?.records.map(valueOf)).toEqual([78]);
    expect(await world.checkpointOf()).toBe('128');
    await run(world.scheduler, worker.stop());
  });

  it('without bisection, the rest of the batch is given up as one run after maxAttempts failures', async () => {
    const world = poisonWorld({ batchSize: 10, isPoison: (value) => value === 14 });
    const worker = world.consumer({ onHandlerError: { maxAttempts: 3, deadLetter: world.deadLetter } });
    world.produce(30);
    await run(world.scheduler, worker.start());
    await world.scheduler.advance(5_000);
    expect(world.deadLettered.map((failure) => [failure.positions.join(','), failure.attempts])).toEqual([['11,12,13,14,15,16,17,18,19,20', 3]]);
    expect(world.succeeded).toEqual([...Array.from({ length: 10 }, (_, i) => i + 1), ...Array.from({ length: 10 }, (_, i) => i + 21)]);
    expect(await world.checkpointOf()).toBe('30');
    await run(world.scheduler, worker.stop());
  });

  it('a handler that reports its first failed record has the checkpoint stop just before it, and the records before it are not handed over again', async () => {
    const world = poisonWorld({ batchSize: 10 });
    let failuresLeft = 3;
    const handed: number[][] = [];
    const worker = world.consumer({
      processBatch: (records) => {
        handed.push(records.map(valueOf));
        const failed = records.find((record) => valueOf(record) === 5);
        if (failed && failuresLeft-- > 0) return { failedAt: failed.position, error: new Error('record 5 failed downstream') };
        return undefined;
      },
    });
    const failures: string[] = [];
    worker.on('handler-failed', ({ attempt, error }) => failures.push(`${attempt}: ${error.message}`));
    world.produce(10);
    await run(world.scheduler, worker.start());
    await world.until(() => handed.length > 0);
    await world.scheduler.advance(5);
    // Stuck on record 5 under the default 'retry' policy: 1 to 4 are done and checkpointed.
    expect(await world.checkpointOf()).toBe('4');
    await world.scheduler.advance(5_000);
    expect(handed).toEqual([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [5, 6, 7, 8, 9, 10], [5, 6, 7, 8, 9, 10], [5, 6, 7, 8, 9, 10]]);
    expect(failures).toEqual(['1: record 5 failed downstream', '2: record 5 failed downstream', '3: record 5 failed downstream']);
    expect(await world.checkpointOf()).toBe('10');
    await run(world.scheduler, worker.stop());
  });

  it('with bisection, a reported record is retried alone and given up alone, and the rest of its batch then succeeds', async () => {
    const world = poisonWorld({ batchSize: 10 });
    const handed: number[][] = [];
    const worker = world.consumer({
      onHandlerError: { bisect: true, maxAttempts: 2, deadLetter: world.deadLetter },
      processBatch: (records) => {
        handed.push(records.map(valueOf));
        const failed = records.find((record) => valueOf(record) === 5);
        return failed ? { failedAt: failed.position } : undefined;
      },
    });
    world.produce(10);
    await run(world.scheduler, worker.start());
    await world.scheduler.advance(5_000);
    expect(handed).toEqual([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [5], [6, 7, 8, 9, 10]]);
    expect(world.deadLettered.map((failure) => [failure.positions, failure.attempts, failure.error.message])).toEqual([
      [['5'], 2, '[core] processBatch reported record "5" of shard "shard-0000" as failed'],
    ]);
    expect(await world.checkpointOf()).toBe('10');
    await run(world.scheduler, worker.stop());
  });

  it('with stop, a reported failure stops the shard with the checkpoint just before the failed record', async () => {
    const world = poisonWorld({ batchSize: 10 });
    const worker = world.consumer({
      onHandlerError: 'stop',
      processBatch: (records) => {
        const failed = records.find((record) => valueOf(record) === 7);
        return failed ? { failedAt: failed.position } : undefined;
      },
    });
    const stopped: string[] = [];
    worker.on('shard-stopped', ({ shardId }) => stopped.push(shardId));
    world.produce(10);
    await run(world.scheduler, worker.start());
    await world.until(() => stopped.length > 0);
    expect(stopped).toEqual(['shard-0000']);
    expect(await world.checkpointOf()).toBe('6');
    await run(world.scheduler, worker.stop());
  });

  it('with bisection, a half that fails for a while is retried with backoff and nothing is given up', async () => {
    let failuresLeft = 5;
    const world = poisonWorld({ batchSize: 8, isPoison: (value) => value === 6 && failuresLeft-- > 0 });
    const worker = world.consumer({ onHandlerError: { bisect: true, maxAttempts: 5, deadLetter: world.deadLetter } });
    const retried: number[] = [];
    worker.on('batch-retried', ({ records, attempt }) => retried.push(records * 100 + attempt));
    world.produce(8);
    await run(world.scheduler, worker.start());
    await world.scheduler.advance(5_000);
    // [1..8] fails, [1..4] succeeds, [5..8] fails, [5, 6] fails, [5] succeeds, [6] fails twice on its own
    // (retried with backoff), then succeeds on its third attempt, under maxAttempts.
    expect(world.calls.map((call) => `${call.values.join(',')}:${call.ok ? 'ok' : 'failed'}`)).toEqual([
      '1,2,3,4,5,6,7,8:failed',
      '1,2,3,4:ok',
      '5,6,7,8:failed',
      '5,6:failed',
      '5:ok',
      '6:failed',
      '6:failed',
      '6:ok',
      '7,8:ok',
    ]);
    // One record, handed over again for its second and third attempts.
    expect(retried).toEqual([102, 103]);
    expect(world.deadLettered).toEqual([]);
    expect(world.succeeded).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    await run(world.scheduler, worker.stop());
  });

  it('a report naming no record of the call fails the whole call with an error naming the position', async () => {
    const world = poisonWorld({ batchSize: 10 });
    let reports = 1;
    const worker = world.consumer({ processBatch: () => (reports-- > 0 ? { failedAt: '999' } : undefined) });
    const failures: string[] = [];
    worker.on('handler-failed', ({ error }) => failures.push(error.message));
    world.produce(3);
    await run(world.scheduler, worker.start());
    await world.until(() => failures.length > 0);
    await world.scheduler.advance(1_000);
    expect(failures).toEqual(['[core] processBatch reported failedAt "999" for shard "shard-0000", which is not the position of a record it was handed']);
    expect(await world.checkpointOf()).toBe('3');
    await run(world.scheduler, worker.stop());
  });

  it('a record older than maxRecordAgeMs is not retried after it failed: it is dead-lettered for its age', async () => {
    const world = poisonWorld({ batchSize: 10, isPoison: (value) => value === 2 });
    const worker = world.consumer({
      onHandlerError: { bisect: true, maxRecordAgeMs: 5_000, deadLetter: world.deadLetter },
      retry: { initialDelayMs: 100, maxDelayMs: 1_000 },
    });
    world.produce(3);
    await run(world.scheduler, worker.start());
    await world.until(() => world.calls.length > 0);
    await world.scheduler.advance(2_000);
    expect(world.deadLettered).toEqual([]);
    expect(await world.checkpointOf()).toBe('1');
    await world.scheduler.advance(10_000);
    expect(world.deadLettered).toHaveLength(1);
    const [failure] = world.deadLettered as [FailedRecords];
    expect(failure.reason).toBe('max-record-age');
    expect(failure.positions).toEqual(['2']);
    // Retried with backoff until it was older than 5 s: each attempt at most a second apart.
    expect(failure.attempts).toBeGreaterThanOrEqual(5);
    expect(world.succeeded).toEqual([1, 3]);
    expect(await world.checkpointOf()).toBe('3');
    await run(world.scheduler, worker.stop());
  });

  it('an old record is still handed over once: its age only stops retries', async () => {
    const world = poisonWorld({ batchSize: 10 });
    world.produce(3);
    await world.scheduler.advance(60_000);
    const worker = world.consumer({ onHandlerError: { maxRecordAgeMs: 1_000, deadLetter: world.deadLetter } });
    await run(world.scheduler, worker.start());
    await world.until(() => world.calls.length > 0);
    await world.scheduler.advance(1_000);
    expect(world.succeeded).toEqual([1, 2, 3]);
    expect(world.deadLettered).toEqual([]);
    await run(world.scheduler, worker.stop());
  });

  it('a failing dead-letter handler is called again while the shard waits, and the record is skipped only once it accepted it', async () => {
    const world = poisonWorld({ batchSize: 10, isPoison: (value) => value === 3 });
    let refusals = 3;
    const accepted: string[][] = [];
    const worker = world.consumer({
      onHandlerError: {
        bisect: true,
        maxAttempts: 1,
        deadLetter: async (failure) => {
          if (refusals-- > 0) throw new Error('dead-letter queue unavailable');
          accepted.push([...failure.positions]);
        },
      },
    });
    const events: string[] = [];
    worker.on('dead-letter-failed', ({ attempt, positions, error }) => events.push(`failed ${attempt} [${positions.join()}]: ${error.message}`));
    worker.on('records-dead-lettered', ({ positions }) => events.push(`dead-lettered [${positions.join()}]`));
    worker.on('record-skipped', ({ position, deadLettered }) => events.push(`skipped ${position}${deadLettered ? ' (dead-lettered)' : ''}`));
    world.produce(5);
    await run(world.scheduler, worker.start());
    await world.until(() => events.length > 0);
    expect(await world.checkpointOf()).toBe('2');
    expect(world.succeeded).toEqual([1, 2]);
    await world.scheduler.advance(5_000);
    expect(events).toEqual([
      'failed 1 [3]: dead-letter queue unavailable',
      'failed 2 [3]: dead-letter queue unavailable',
      'failed 3 [3]: dead-letter queue unavailable',
      'dead-lettered [3]',
      'skipped 3 (dead-lettered)',
    ]);
    expect(accepted).toEqual([['3']]);
    expect(world.succeeded).toEqual([1, 2, 4, 5]);
    expect(await world.checkpointOf()).toBe('5');
    await run(world.scheduler, worker.stop());
  });

  it('a record whose dead-letter handler never accepts it is never skipped: a stop leaves the checkpoint just before it', async () => {
    const world = poisonWorld({ batchSize: 10, isPoison: (value) => value === 3 });
    const worker = world.consumer({
      onHandlerError: {
        bisect: true,
        maxAttempts: 2,
        deadLetter: () => {
          throw new Error('dead-letter queue unavailable');
        },
      },
    });
    const skipped: string[] = [];
    worker.on('record-skipped', ({ position }) => skipped.push(position));
    world.produce(5);
    await run(world.scheduler, worker.start());
    await world.scheduler.advance(10_000);
    await run(world.scheduler, worker.stop());
    expect(skipped).toEqual([]);
    expect(world.succeeded).toEqual([1, 2]);
    expect(await world.checkpointOf()).toBe('2');
    // The next reader starts at record 3.
    const next = world.consumer({ onHandlerError: { bisect: true, maxAttempts: 1, deadLetter: world.deadLetter } });
    await run(world.scheduler, next.start());
    await world.scheduler.advance(5_000);
    expect(world.deadLettered.map((failure) => failure.positions)).toEqual([['3']]);
    expect(world.succeeded).toEqual([1, 2, 4, 5]);
    await run(world.scheduler, next.stop());
  });

  it('without a dead-letter handler a record given up is skipped loudly: an event, an error log line and a metric', async () => {
    const world = poisonWorld({ batchSize: 10, isPoison: (value) => value === 2 });
    const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
    const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
    const provider = new MeterProvider({ readers: [reader] });
    const errors: string[] = [];
    const logger = { debug() {}, info() {}, warn() {}, error: (fields: object, message: string) => void errors.push(`${message} ${JSON.stringify(fields, ['position', 'reason', 'attempts'])}`) };
    const worker = world.consumer({ onHandlerError: { bisect: true, maxAttempts: 2 }, logger, metrics: { meter: provider.getMeter('test') } });
    const skipped: string[] = [];
    worker.on('record-skipped', ({ position, reason, attempts, deadLettered }) => skipped.push(`${position} ${reason} ${attempts} ${deadLettered}`));
    world.produce(4);
    await run(world.scheduler, worker.start());
    await world.scheduler.advance(5_000);
    expect(skipped).toEqual(['2 max-attempts 2 false']);
    expect(errors).toContain('record skipped after repeated handler failures {"position":"2","reason":"max-attempts","attempts":2}');
    expect(world.succeeded).toEqual([1, 3, 4]);
    await reader.forceFlush();
    const sums = new Map<string, number>();
    const attributes = new Map<string, Record<string, unknown>>();
    for (const resource of exporter.getMetrics()) {
      for (const scope of resource.scopeMetrics) {
        for (const metric of scope.metrics) {
          sums.set(metric.descriptor.name, metric.dataPoints.reduce((total, point) => total + Number(point.value), 0));
          attributes.set(metric.descriptor.name, metric.dataPoints[0]?.attributes ?? {});
        }
      }
    }
    expect(sums.get('leasehold.records.skipped')).toBe(1);
    expect(attributes.get('leasehold.records.skipped')).toMatchObject({ 'leasehold.give_up.reason': 'max-attempts', 'leasehold.record.dead_lettered': false });
    // 4 records: halves [1, 2] and [3, 4], then [1] and [2] alone, retried once.
    expect(sums.get('leasehold.handler.bisections')).toBe(2);
    expect(sums.get('leasehold.handler.retries')).toBe(1);
    expect(sums.get('leasehold.records.retried')).toBe(1);
    expect(sums.get('leasehold.records.processed')).toBe(3);
    await run(world.scheduler, worker.stop());
    await provider.shutdown();
  });

  it('dead-lettered records and dead-letter failures are counted in metrics', async () => {
    const world = poisonWorld({ batchSize: 10, isPoison: (value) => value === 1 });
    const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
    const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
    const provider = new MeterProvider({ readers: [reader] });
    let refusals = 1;
    const worker = world.consumer({
      onHandlerError: {
        maxAttempts: 1,
        deadLetter: () => {
          if (refusals-- > 0) throw new Error('queue down');
        },
      },
      metrics: { meter: provider.getMeter('test') },
    });
    world.produce(2);
    await run(world.scheduler, worker.start());
    await world.scheduler.advance(5_000);
    await reader.forceFlush();
    const sums = new Map<string, number>();
    for (const resource of exporter.getMetrics()) {
      for (const scope of resource.scopeMetrics) {
        for (const metric of scope.metrics) sums.set(metric.descriptor.name, metric.dataPoints.reduce((total, point) => total + Number(point.value), 0));
      }
    }
    expect(sums.get('leasehold.records.dead_lettered')).toBe(2);
    expect(sums.get('leasehold.dead_letter.failures')).toBe(1);
    expect(sums.get('leasehold.records.skipped')).toBe(2);
    await run(world.scheduler, worker.stop());
    await provider.shutdown();
  });

  it('one record in 10,000 always fails: the shards keep flowing, exactly those records are dead-lettered, every other one is processed, and the lag returns to zero', async () => {
    const total = 30_000;
    const isPoison = (value: number): boolean => value % 10_000 === 4_321;
    const world = poisonWorld({ shards: 2, batchSize: 500, isPoison });
    const worker = world.consumer({ onHandlerError: { bisect: true, maxAttempts: 3, deadLetter: world.deadLetter } });
    const lag = new Map<string, number | undefined>();
    worker.on('batch-processed', ({ shardId, millisBehindLatest }) => lag.set(shardId, millisBehindLatest));
    await run(world.scheduler, worker.start());
    // Records keep arriving while the poison records are being isolated.
    for (let second = 0; second < 30; second++) {
      world.produce(total / 30);
      await world.scheduler.advance(1_000);
    }
    await world.scheduler.advance(10_000);
    const poisoned = Array.from({ length: total }, (_, i) => i + 1).filter(isPoison);
    expect(poisoned).toEqual([4_321, 14_321, 24_321]);
    expect(world.deadLettered.flatMap((failure) => failure.records.map(valueOf)).sort((a, b) => a - b)).toEqual(poisoned);
    expect(world.deadLettered.every((failure) => failure.attempts === 3 && failure.records.length === 1)).toBe(true);
    const succeeded = [...world.succeeded].sort((a, b) => a - b);
    expect(succeeded).toEqual(Array.from({ length: total }, (_, i) => i + 1).filter((value) => !isPoison(value)));
    // Each shard is checkpointed at its last record, and its reader reports itself at the tip.
    expect(world.lastPut.size).toBe(2);
    for (const [shardId, position] of world.lastPut) {
      expect(await world.checkpointOf(shardId)).toBe(position);
      expect(lag.get(shardId)).toBe(0);
    }
    await run(world.scheduler, worker.stop());
  });
});
