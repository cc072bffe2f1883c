import { AggregationTemporality, InMemoryMetricExporter, MeterProvider, PeriodicExportingMetricReader } from '@opentelemetry/sdk-metrics';
import { describe, expect, it } from 'vitest';
import { createNoopMeter, type Meter } from '@opentelemetry/api';
import { attachMetrics, Consumer, MemorySource, MemoryStorage, type ShardSource } from '../src/index.js';
import { seededRandom, VirtualScheduler } from '../src/testing/index.js';
import { run } from './support/virtual.js';


describe('metrics', () => {
  it('records leases, heartbeats, checkpoints, records, bytes, lag, leadership and storage results on the given meter', async () => {
    const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
    const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
    const provider = new MeterProvider({ readers: [reader] });
    const scheduler = new VirtualScheduler();
    const source = new MemorySource(2, { clock: scheduler.clock() });
    for (let i = 0; i < 10; i++) source.put(`key-${i}`, 'payload!');
    const consumer = new Consumer({
      group: 'metered',
      source,
      storage: new MemoryStorage(),
      workerId: 'w1',
      clock: scheduler.clock(),
      random: seededRandom(1),
      initialPosition: 'TRIM_HORIZON',
      processBatch: () => undefined,
      metrics: { meter: provider.getMeter('test') },
    });
    await run(scheduler, consumer.start());
    await scheduler.advance(10_000);
    await reader.forceFlush();
    const points = new Map<string, Array<{ value: unknown; attributes: Record<string, unknown> }>>();
    for (const resource of exporter.getMetrics()) {
      for (const scope of resource.scopeMetrics) {
        for (const metric of scope.metrics) {
          points.set(metric.descriptor.name, metric.dataPoints.map((point) => ({ value: point.value, attributes: point.attributes })));
        }
      }
    }
    expect([...points.keys()].sort()).toEqual(
      expect.arrayContaining([
        'leasehold.checkpoint.duration',
        'leasehold.lease.acquired',
        'leasehold.lease.held',
        'leasehold.member.heartbeat.duration',
        'leasehold.member.heartbeat.leases',
        'leasehold.leader.changes',
        'leasehold.leader.term',
        'leasehold.records.processed',
        'leasehold.records.processed.size',
        'leasehold.shard.behind_latest',
        'leasehold.storage.results',
      ]),
    );
    const sum = (name: string): number => (points.get(name) ?? []).reduce((total, point) => total + Number(point.value), 0);
    expect(sum('leasehold.records.processed')).toBe(10);
    expect(sum('leasehold.records.processed.size')).toBe(80);
    expect(sum('leasehold.lease.held')).toBe(2);
    expect(sum('leasehold.leader.term')).toBe(1);
    expect(points.get('leasehold.lease.held')?.[0]?.attributes).toEqual({ 'leasehold.group': 'metered', 'leasehold.worker.id': 'w1' });
    const applied = (points.get('leasehold.storage.results') ?? []).filter((point) => point.attributes['leasehold.storage.result'] === 'applied');
    expect(applied.length).toBeGreaterThan(0);
    await run(scheduler, consumer.stop());
    await provider.shutdown();
  });

  it('takes a batch\'s bytes from its source when the source counted them, and counts them itself otherwise', async () => {
    const bytesSeen = async (sourceCounts: boolean): Promise<number[]> => {
      const scheduler = new VirtualScheduler();
      const memory = new MemorySource(1, { clock: scheduler.clock() });
      for (let i = 0; i < 4; i++) memory.put(`key-${i}`, 'payload!');
      // A source that says each batch is 1,000 bytes, whatever it holds: the runtime does not count again.
      const source: ShardSource = {
        listShards: () => memory.listShards(),
        comparePositions: (a, b) => memory.comparePositions(a, b),
        read: (shardId, from, options) => ({
          async *[Symbol.asyncIterator]() {
            for await (const batch of memory.read(shardId, from, options)) yield batch.kind === 'records' && sourceCounts && batch.records.length > 0 ? { ...batch, bytes: 1_000 } : batch;
          },
        }),
      };
      const consumer = new Consumer({ group: 'bytes', source, storage: new MemoryStorage(), workerId: 'w1', clock: scheduler.clock(), random: seededRandom(1), initialPosition: 'TRIM_HORIZON', processBatch: () => undefined });
      const seen: number[] = [];
      consumer.on('batch-processed', ({ bytes }) => seen.push(bytes));
      await run(scheduler, consumer.start());
      await scheduler.advance(5_000);
      await run(scheduler, consumer.stop());
      return seen;
    };
    expect(await bytesSeen(false)).toEqual([32]);
    expect(await bytesSeen(true)).toEqual([1_000]);
  });

  it("a multi-stream consumer's shard measurements carry the stream's id", async () => {
    const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
    const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
    const provider = new MeterProvider({ readers: [reader] });
    const scheduler = new VirtualScheduler();
    const orders = new MemorySource(1, { clock: scheduler.clock() });
    const payments = new MemorySource(1, { clock: scheduler.clock() });
    orders.put('k', 'x');
    payments.put('k', 'y');
    const consumer = new Consumer({
      group: 'metered-streams',
      streams: [
        { id: '111:orders:1', source: orders },
        { id: '111:payments:1', source: payments },
      ],
      storage: new MemoryStorage(),
      workerId: 'w1',
      clock: scheduler.clock(),
      random: seededRandom(1),
      initialPosition: 'TRIM_HORIZON',
      processBatch: () => undefined,
      metrics: { meter: provider.getMeter('test') },
    });
    await run(scheduler, consumer.start());
    await scheduler.advance(10_000);
    await reader.forceFlush();
    const processed = exporter
      .getMetrics()
      .flatMap((resource) => resource.scopeMetrics.flatMap((scope) => scope.metrics))
      .filter((metric) => metric.descriptor.name === 'leasehold.records.processed')
      .flatMap((metric) => metric.dataPoints.map((point) => [point.attributes['leasehold.stream.id'], point.attributes['leasehold.shard.id'], point.value]));
    expect(processed.sort()).toEqual([
      ['111:orders:1', '111:orders:1:shard-0000', 1],
      ['111:payments:1', '111:payments:1:shard-0000', 1],
    ]);
    await run(scheduler, consumer.stop());
    await provider.shutdown();
  });

  it('attaches no listener to the API\'s no-op meter, what the global provider gives before an SDK registers one, so that events build no attributes', () => {
    let listeners = 0;
    const consumer = { on: () => (listeners++, () => undefined) };
    const detach = attachMetrics(createNoopMeter(), { group: 'g', workerId: 'w' }, { consumer });
    expect(listeners).toBe(0);
    detach();
    // Any other meter is instrumented: one that wraps the no-op meter records nothing, but is not it.
    attachMetrics(Object.create(createNoopMeter()) as Meter, { group: 'g', workerId: 'w' }, { consumer });
    expect(listeners).toBeGreaterThan(10);
  });

  it('records nothing and needs no SDK when metrics are off or no provider is registered', async () => {
    const scheduler = new VirtualScheduler();
    const consumer = new Consumer({
      group: 'unmetered',
      source: new MemorySource(1, { clock: scheduler.clock() }),
      storage: new MemoryStorage(),
      clock: scheduler.clock(),
      processBatch: () => undefined,
    });
    await run(scheduler, consumer.start());
    await scheduler.advance(5_000);
    expect(consumer.coordinator.heldLeases()).toHaveLength(1);
    await run(scheduler, consumer.stop());
  });
});
