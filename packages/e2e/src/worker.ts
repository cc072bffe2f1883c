/**
 * A worker process: one `Consumer` of the group over the Kinesis stream and the storage it is given,
 * reporting every record it hands to its handler, and its lease events, as JSON lines on stdout (see
 * reports.ts). SIGTERM stops it gracefully (exit 0); the end of stdin (its parent died) ends it at once.
 *
 *   node --import tsx src/worker.ts --stream S --kinesis-endpoint URL --storage URL --group G --worker-id W
 *
 * With `--sink transactional` (postgres leases only) it also writes every record into the sink table, in
 * one transaction with its batch's checkpoint; with `--sink fenced --sink-url postgres://...?schema=S`
 * (leases in any backend) into the sink table of that Postgres schema through `fencedWrite`, before the
 * ordinary checkpoint (see sink.ts).
 */
import { Consumer, LeaseLostError, type BatchContext, type Position, type ReadOptions, type ShardBatch } from '@leasehold/core';
import { KinesisSource } from '@leasehold/source-kinesis';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { kinesisClient } from './kinesis.js';
import { parsePayload } from './producer.js';
import { now, type WorkerReport } from './reports.js';
import { memoryFigures } from './stats.js';
import type { SinkMode, SinkRow } from './sink.js';
import { openStorage } from './storage-url.js';
import type { PostgresStorage } from '@leasehold/storage-postgres';

const { values: args } = parseArgs({
  options: {
    stream: { type: 'string' },
    'kinesis-endpoint': { type: 'string' },
    region: { type: 'string', default: 'us-east-1' },
    storage: { type: 'string' },
    group: { type: 'string' },
    'worker-id': { type: 'string' },
    'lease-duration-ms': { type: 'string', default: '3000' },
    'take-interval-ms': { type: 'string', default: '500' },
    'shard-sync-interval-ms': { type: 'string', default: '1000' },
    'max-records-per-call': { type: 'string', default: '100' },
    'batch-delay-ms': { type: 'string', default: '0' },
    // Short, so that tests see a record soon after it is written; the source's own default is 1,000.
    'idle-delay-ms': { type: 'string', default: '200' },
    // `batches`: one report per batch instead of one per record (benchmarks), with no sink.
    report: { type: 'string', default: 'records' },
    // Write every record into the sink table: `transactional` (in one transaction with its batch's
    // checkpoint, postgres leases only) or `fenced` (through the fence of the sink at --sink-url).
    sink: { type: 'string' },
    'sink-url': { type: 'string' },
    // With a positive value: a `stats` report this often (memory after a collection when the process
    // runs with --expose-gc, and the sizes of the consumer's bookkeeping).
    'stats-interval-ms': { type: 'string', default: '0' },
  },
});

function required(name: keyof typeof args): string {
  const value = args[name];
  if (typeof value !== 'string' || value === '') {
    process.stderr.write(`worker: --${name} is required\n`);
    process.exit(2);
  }
  return value;
}

function number(name: keyof typeof args): number {
  const value = Number(required(name));
  if (!Number.isFinite(value) || value < 0) {
    process.stderr.write(`worker: --${name} must be a non-negative number, got ${String(args[name])}\n`);
    process.exit(2);
  }
  return value;
}

const workerId = required('worker-id');
const batchDelayMs = number('batch-delay-ms');
if (args.report !== 'records' && args.report !== 'batches') {
  process.stderr.write(`worker: --report must be records or batches, got ${String(args.report)}\n`);
  process.exit(2);
}
const reportBatches = args.report === 'batches';

/** A report as the worker writes it: its id and the time are added on the way out. */
type Report = WorkerReport extends infer R ? (R extends WorkerReport ? Omit<R, 'worker' | 'at'> : never) : never;

function lines(reports: readonly Report[], at?: number): string {
  return reports.map((report) => `${JSON.stringify({ ...report, worker: workerId, at: at ?? now() })}\n`).join('');
}

function report(...reports: Report[]): void {
  process.stdout.write(lines(reports));
}

// The parent holds our stdin open; when it dies, even by SIGKILL, we see its end and leave with it.
process.stdin.on('end', () => process.exit(1));
process.stdin.on('error', () => process.exit(1));
process.stdin.resume();

const client = kinesisClient({ endpoint: required('kinesis-endpoint'), region: required('region') });
// Listings of the whole stream are what resharding costs a worker, and iterators what a reader's start
// costs: the bench counts them.
client.middlewareStack.add(
  (next, context) => (input) => {
    if (context.commandName === 'ListShardsCommand') report({ type: 'list-shards' });
    if (context.commandName === 'GetShardIteratorCommand') report({ type: 'get-shard-iterator', shardId: String((input.input as { ShardId?: unknown }).ShardId) });
    return next(input);
  },
  { step: 'initialize', name: 'reportCalls' },
);
const kinesis = new KinesisSource({ client, streamName: required('stream'), maxRecordsPerCall: number('max-records-per-call'), idleDelayMs: number('idle-delay-ms') });
// Each reader's first answer (one GetRecords, even an empty one), with how many records it held: when a
// new owner began reading is the handoff's end, whatever the records' arrival and the reader's pace do after.
const readReported = (shardId: string, from: Position, options?: ReadOptions): AsyncIterable<ShardBatch> => ({
  async *[Symbol.asyncIterator]() {
    let first = true;
    for await (const batch of kinesis.read(shardId, from, options)) {
      if (first) report({ type: 'first-read', shardId, records: batch.kind === 'records' ? batch.records.length : 0 });
      first = false;
      yield batch;
    }
  },
});
const source = new Proxy(kinesis, {
  get: (target, name) => {
    if (name === 'read') return readReported;
    const value: unknown = Reflect.get(target, name, target);
    return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
  },
});
const sinkMode = args.sink as SinkMode | undefined;
// The sink's Postgres client is loaded only by a worker that writes into it: a worker of another backend
// does not carry pg, as an application of that backend would not.
const sinks = sinkMode === undefined ? undefined : await import('./sink.js');
if (sinkMode !== undefined && !sinks!.SINK_MODES.includes(sinkMode)) {
  process.stderr.write(`worker: --sink must be ${sinks!.SINK_MODES.join(' or ')}, got ${sinkMode}\n`);
  process.exit(2);
}
if (reportBatches && sinkMode !== undefined) {
  process.stderr.write('worker: --sink needs --report records\n');
  process.exit(2);
}
const opened = await openStorage(required('storage'));
if (sinkMode === 'transactional' && opened.kind !== 'postgres') {
  process.stderr.write(`worker: --sink transactional needs a postgres storage, got ${opened.kind}\n`);
  process.exit(2);
}
const sinkUrl = sinkMode === 'fenced' ? required('sink-url') : undefined;
const sink = sinkUrl === undefined ? undefined : sinks!.sinkPool(sinkUrl, 4);

/**
 * SIGUSR2 asks this worker to stop, for good, after its next batch that commits rows to the sink and
 * before that batch's checkpoint: a test that kills it then knows the kill falls between the two, however
 * slowly the machine carries the report and the kill.
 */
let holdAfterCommit = false;
process.on('SIGUSR2', () => {
  holdAfterCommit = true;
});

/**
 * The fenced write of a batch, reported with what the fence did; a zombie's refusal is reported and thrown.
 * Resolves with whether the worker holds here (see SIGUSR2).
 */
async function writeThroughFence(context: BatchContext, rows: readonly SinkRow[]): Promise<boolean> {
  const base = { type: 'fenced', shardId: context.shardId, fencingToken: context.fencingToken, position: context.position, records: rows.length } as const;
  try {
    const { outcome, written } = await sinks!.writeFenced(sink!, sinkUrl!, context, workerId, rows);
    const holding = holdAfterCommit && outcome === 'applied' && written > 0;
    report({ ...base, outcome, written, ...(holding ? { holding: true as const } : {}) });
    return holding;
  } catch (error) {
    if (error instanceof LeaseLostError) report({ ...base, outcome: 'refused', written: 0 });
    throw error;
  }
}

const consumer = new Consumer({
  group: required('group'),
  source,
  storage: opened.storage,
  workerId,
  initialPosition: 'TRIM_HORIZON',
  shardSyncIntervalMs: number('shard-sync-interval-ms'),
  lease: { leaseDurationMs: number('lease-duration-ms'), takeIntervalMs: number('take-interval-ms') },
  processBatch: async (records, context) => {
    // Every record of the batch is handed over now: stamp them all with this moment. A time taken per
    // line would be late for the last lines when the process is paused (SIGSTOP) while it writes them, and
    // the checker would take a batch handed over under a valid lease for one handed over after its loss.
    const handedAt = now();
    if (reportBatches) {
      const first = records[0];
      const last = records[records.length - 1];
      if (first && last) report({ type: 'batch', shardId: context.shardId, fencingToken: context.fencingToken, records: records.length, first: first.position, last: last.position });
      return;
    }
    process.stdout.write(
      lines(
        records.map((record): Report => {
          const { key, seq } = parsePayload(record.data);
          return { type: 'record', shardId: context.shardId, fencingToken: context.fencingToken, key, seq, position: record.position };
        }),
        handedAt,
      ),
    );
    // Simulated work, so that a worker is busy when it is killed; cut short when the lease goes.
    const work = async (): Promise<void> => {
      if (batchDelayMs > 0 && records.length > 0) await sleep(batchDelayMs, undefined, { signal: context.signal }).catch(() => undefined);
    };
    if (sinkMode === undefined) return work();
    const rows = records.map((record) => ({ ...parsePayload(record.data), position: record.position }));
    if (sinkMode === 'transactional') return sinks!.writeInTransaction(opened.storage as PostgresStorage, required('storage'), context, workerId, rows, work);
    // Asked to hold: the batch is committed, its checkpoint is never written; the kill comes meanwhile.
    if (await writeThroughFence(context, rows)) await new Promise<never>(() => undefined);
    // The work runs after the sink committed and before the runtime's checkpoint: a kill here replays
    // the batch to the next owner, and the fence keeps it out.
    await work();
  },
});

consumer.on('shard-started', ({ shardId, position, fencingToken }) => report({ type: 'started', shardId, position, fencingToken }));
consumer.on('checkpointed', ({ shardId, position }) => report({ type: 'checkpointed', shardId, position }));
consumer.on('lease-lost', ({ shardId, reason }) => report({ type: 'lost', shardId, reason: String(reason) }));
consumer.on('lease-handed-off', ({ shardId, to }) => report({ type: 'handed-off', shardId, to }));
consumer.coordinator.on('handoff-offered', ({ leaseKey, to }) => report({ type: 'handoff-offered', shardId: leaseKey, to }));
consumer.on('shard-ended', ({ shardId, childShardIds }) => report({ type: 'ended', shardId, childShardIds }));
consumer.on('shard-rewound', ({ shardId, rewindId, to, waitsForParent }) => report({ type: 'rewound', shardId, rewindId, to, waitsForParent }));
consumer.coordinator.on('acquired', ({ leaseKey, how }) => report({ type: 'acquired', shardId: leaseKey, how }));
consumer.coordinator.on('released', ({ leaseKey }) => report({ type: 'released', shardId: leaseKey }));
consumer.on('leader-elected', ({ term }) => report({ type: 'leader', term }));
consumer.on('error', ({ error, operation }) => report({ type: 'error', operation, message: error.message }));
consumer.on('handler-failed', ({ shardId, error }) => report({ type: 'handler-failed', shardId, message: error.message }));

let stopping = false;
process.on('SIGTERM', () => {
  if (stopping) return;
  stopping = true;
  report({ type: 'stopping' });
  void (async () => {
    await consumer.stop({ timeoutMs: 10_000 });
    report({ type: 'stopped' });
    await opened.close();
    await sink?.end();
    client.destroy();
    process.exit(0);
  })().catch((error: unknown) => {
    process.stderr.write(`worker ${workerId}: stop failed: ${String(error)}\n`);
    process.exit(1);
  });
});

const statsIntervalMs = number('stats-interval-ms');
if (statsIntervalMs > 0) {
  setInterval(() => {
    report({
      type: 'stats',
      collected: typeof (globalThis as { gc?: unknown }).gc === 'function',
      ...memoryFigures(),
      resources: process.getActiveResourcesInfo().length,
      shards: consumer.shards.length,
      diagnostics: consumer.diagnostics(),
    });
  }, statsIntervalMs).unref();
}

await consumer.start();
report({ type: 'ready', pid: process.pid });
