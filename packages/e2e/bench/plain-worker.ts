/**
 * The raw client's baseline for the memory benchmark: no leases, no checkpoints, no runtime; the AWS SDK v3
 * Kinesis client alone, reading every shard of a stream the way the Kinesis source does (GetShardIterator
 * at TRIM_HORIZON, then GetRecords of up to 100 records, 200 ms apart while the shard is behind and 1 s
 * apart once it is caught up), and reporting each record in the same JSON lines as src/worker.ts. With
 * `--mode idle` it only loads what the Leasehold worker loads (the SDK's Kinesis client and ioredis), sends
 * one ListShards and then waits: the floor under any worker that reads Kinesis with SDK v3. With
 * `--mode drain` it is the drain bench's plain loop (plain-loop.ts) in a fresh process, as the consumer's
 * workers are (run.ts runs the same loop in the long-lived bench process, its JIT and heap warmed up),
 * paced, over every shard from TRIM_HORIZON; it writes its figures as one JSON line and exits. With
 * `--mode follow` it reads its shards from TRIM_HORIZON on and on as a consumer's reader does (1,000 records a
 * call, five calls a second while behind, one a second once caught up), each answer with records reported as
 * one `answer` line: the burst drain's baseline in processes of its own (plain-processes.ts). `--shards a,b`
 * reads only those shards (drain and follow), as one of several processes sharing a stream.
 *
 *   node bench/dist/bench/plain-worker.js --stream S --kinesis-endpoint URL --worker-id W [--mode idle|drain|follow] [--shards a,b]
 */
import { GetRecordsCommand, GetShardIteratorCommand, type KinesisClient } from '@aws-sdk/client-kinesis';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { kinesisClient, listShards } from '../src/kinesis.js';
import { parsePayload } from '../src/producer.js';
import { now } from '../src/reports.js';
import { memoryFigures } from '../src/stats.js';
import { readPlain } from './plain-loop.js';

const IDLE_DELAY_MS = 1_000;
const MIN_CALL_INTERVAL_MS = 200;

const { values: args } = parseArgs({
  options: {
    stream: { type: 'string' },
    'kinesis-endpoint': { type: 'string' },
    region: { type: 'string', default: 'us-east-1' },
    'worker-id': { type: 'string' },
    mode: { type: 'string', default: 'read' },
    'stats-interval-ms': { type: 'string', default: '0' },
    shards: { type: 'string' },
  },
});
const workerId = args['worker-id'] ?? 'plain';
const write = (report: Record<string, unknown>): void => {
  process.stdout.write(`${JSON.stringify({ ...report, worker: workerId, at: now() })}\n`);
};
process.stdin.on('end', () => process.exit(1));
process.stdin.resume();

const client = kinesisClient({ endpoint: args['kinesis-endpoint']!, region: args.region });
// What the Leasehold worker loads besides: its lease store's client.
await import('ioredis');

async function readShard(kinesis: KinesisClient, streamName: string, shardId: string): Promise<void> {
  let iterator = (await kinesis.send(new GetShardIteratorCommand({ StreamName: streamName, ShardId: shardId, ShardIteratorType: 'TRIM_HORIZON' }))).ShardIterator;
  while (iterator !== undefined) {
    const started = Date.now();
    const page = await kinesis.send(new GetRecordsCommand({ ShardIterator: iterator, Limit: 100 }));
    const records = page.Records ?? [];
    if (records.length > 0) {
      process.stdout.write(
        records
          .map((record) => {
            const { key, seq } = parsePayload(record.Data!);
            return `${JSON.stringify({ type: 'record', shardId, fencingToken: 0, key, seq, position: record.SequenceNumber, worker: workerId, at: now() })}\n`;
          })
          .join(''),
      );
    }
    iterator = page.NextShardIterator;
    // Caught up as the source judges it: fewer records than asked for, and not behind the tip.
    const caughtUp = records.length < 100 && (page.MillisBehindLatest ?? 0) === 0;
    await sleep(Math.max(0, (caughtUp ? IDLE_DELAY_MS : MIN_CALL_INTERVAL_MS) - (Date.now() - started)));
  }
}

const statsIntervalMs = Number(args['stats-interval-ms']);
if (statsIntervalMs > 0) {
  setInterval(() => {
    write({ type: 'stats', collected: typeof (globalThis as { gc?: unknown }).gc === 'function', ...memoryFigures(), resources: process.getActiveResourcesInfo().length, shards: 0, diagnostics: {} });
  }, statsIntervalMs).unref();
}
process.on('SIGTERM', () => {
  write({ type: 'stopped' });
  process.exit(0);
});

/** A shard read on and on with the consumer's reader's pace, each answer with records reported as it comes. */
async function followShard(kinesis: KinesisClient, streamName: string, shardId: string): Promise<void> {
  let iterator = (await kinesis.send(new GetShardIteratorCommand({ StreamName: streamName, ShardId: shardId, ShardIteratorType: 'TRIM_HORIZON' }))).ShardIterator;
  while (iterator !== undefined) {
    const started = Date.now();
    const page = await kinesis.send(new GetRecordsCommand({ ShardIterator: iterator, Limit: 1_000 }));
    const records = page.Records?.length ?? 0;
    if (records > 0) write({ type: 'answer', shardId, records });
    iterator = page.NextShardIterator;
    const caughtUp = records < 1_000 && (page.MillisBehindLatest ?? 0) === 0;
    await sleep(Math.max(0, (caughtUp ? IDLE_DELAY_MS : MIN_CALL_INTERVAL_MS) - (Date.now() - started)));
  }
}

const listed = await listShards(client, args.stream!);
const shards = args.shards === undefined ? listed : listed.filter((shard) => args.shards!.split(',').includes(shard.ShardId!));
if (args.mode === 'drain') {
  const { pages: _pages, ...read } = await readPlain(client, args.stream!, shards.map((shard) => shard.ShardId!), { pace: true });
  write({ type: 'drained', ...read });
  process.exit(0);
}
write({ type: 'ready', pid: process.pid });
if (args.mode === 'read') {
  await Promise.all(shards.map((shard) => readShard(client, args.stream!, shard.ShardId!)));
}
if (args.mode === 'follow') {
  await Promise.all(shards.map((shard) => followShard(client, args.stream!, shard.ShardId!)));
}
