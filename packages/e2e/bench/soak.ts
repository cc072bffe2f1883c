/**
 * The soak: a small consumer group at a steady load for a given time, judging whether its workers'
 * memory stays flat. A producer puts records at a steady rate into a stream on kinesis-local; three
 * workers (plain JavaScript under `node --expose-gc`, see workers.ts) share its shards the whole time,
 * and a fourth joins and leaves again and again, so that leases move. Each long-lived worker reports,
 * every few seconds, its RSS and heap after a collection and the sizes of its consumer's bookkeeping
 * (`Consumer.diagnostics()`: readers, drains, leases let go, members watched, listeners...).
 *
 *   pnpm soak --minutes 60                          (from the root: builds first)
 *   node --import tsx bench/soak.ts --minutes 5     (in packages/e2e, after a build)
 *
 * `pnpm bench` runs it for 3 minutes (BENCH_SOAK_MINUTES sets another default; 0 skips it).
 *
 * Options: --minutes (3), --backend redis|postgres|dynamodb (redis), --shards (8), --rate records/s (20),
 * --churn-seconds (120: every period the extra worker joins, and leaves half-way), --sample-seconds (10),
 * --json FILE (every sample and the verdict, for a closer look), --node-flags="..." (more flags for the
 * workers' node, such as --heapsnapshot-signal=SIGUSR2 to take heap snapshots of a worker by hand).
 *
 * The verdict, per long-lived worker, over the second half of the run (the first is warm-up: JIT,
 * connection pools, the roster filling): the least-squares slope of the heap after a collection, compiled
 * code left out (the JIT keeps optimizing for a long while, and code is bounded by the program), and
 * the growth it adds up to over that half, as a share of that heap at its start; the same for the whole
 * heap and for RSS, reported; and whether any bookkeeping count rose above everything it was in the first
 * half and stayed there. It fails (exit 1) when a worker's heap without code grows more than 5% (and more
 * than 1 MB) over the second half, its RSS more than 15% (and 8 MB), or a count keeps growing, or when
 * a record put was never handed over.
 */
import { postgresUrl, redisUrl, startDynalite, startKinesisLocal } from '@leasehold/local-stack';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { Cluster, type WorkerProcess } from '../src/cluster.js';
import { createStream, kinesisClient } from '../src/kinesis.js';
import { Producer } from '../src/producer.js';
import { now, type StatsReport } from '../src/reports.js';
import { prepareStorage } from '../src/storage-url.js';
import { buildWorkers } from './workers.js';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';
const log = (line: string): void => void process.stdout.write(`${line}\n`);

// `pnpm soak -- --minutes 60` passes the `--` on; it separates nothing here.
const { values: args } = parseArgs({
  args: process.argv.slice(2).filter((arg) => arg !== '--'),
  options: {
    minutes: { type: 'string', default: process.env.BENCH_SOAK_MINUTES ?? '3' },
    backend: { type: 'string', default: 'redis' },
    shards: { type: 'string', default: '8' },
    rate: { type: 'string', default: '20' },
    'churn-seconds': { type: 'string', default: '120' },
    'sample-seconds': { type: 'string', default: '10' },
    json: { type: 'string' },
    'node-flags': { type: 'string', default: '' },
  },
});

function positive(name: keyof typeof args): number {
  const value = Number(args[name]);
  if (!Number.isFinite(value) || value <= 0) throw new Error(`soak: --${name} must be a positive number, got ${String(args[name])}`);
  return value;
}

if (Number(args.minutes) === 0) {
  process.stdout.write('soak: skipped (--minutes 0)\n');
  process.exit(0);
}
const minutes = positive('minutes');
const shards = Math.round(positive('shards'));
const rate = positive('rate');
const churnMs = positive('churn-seconds') * 1_000;
const sampleMs = positive('sample-seconds') * 1_000;
const backend = args.backend;
if (!['redis', 'postgres', 'dynamodb'].includes(backend)) throw new Error(`soak: --backend must be redis, postgres or dynamodb, got ${backend}`);

const LONG_LIVED = ['w1', 'w2', 'w3'];

// ---- the verdict ----

/** Least-squares fit of `ys` against `xs`. */
function fit(xs: readonly number[], ys: readonly number[]): { slope: number; intercept: number } {
  const n = xs.length;
  const mx = xs.reduce((a, b) => a + b, 0) / n;
  const my = ys.reduce((a, b) => a + b, 0) / n;
  let sxy = 0;
  let sxx = 0;
  for (let i = 0; i < n; i++) {
    sxy += (xs[i]! - mx) * (ys[i]! - my);
    sxx += (xs[i]! - mx) ** 2;
  }
  const slope = sxx === 0 ? 0 : sxy / sxx;
  return { slope, intercept: my - slope * mx };
}

interface Trend {
  readonly start: number;
  readonly end: number;
  readonly max: number;
  /** Bytes per minute over the second half. */
  readonly slopePerMin: number;
  /** What the slope adds up to over the second half, in bytes and as a share of the fitted value at its start. */
  readonly growth: number;
  readonly growthShare: number;
}

function trend(samples: readonly StatsReport[], value: (sample: StatsReport) => number, from: number): Trend {
  const half = samples.filter((sample) => sample.at >= from);
  const xs = half.map((sample) => (sample.at - from) / 60_000);
  const { slope, intercept } = fit(xs, half.map(value));
  const span = xs.length > 0 ? xs[xs.length - 1]! : 0;
  return {
    start: value(samples[0]!),
    end: value(samples[samples.length - 1]!),
    max: Math.max(...samples.map(value)),
    slopePerMin: slope,
    growth: slope * span,
    growthShare: intercept > 0 ? (slope * span) / intercept : 0,
  };
}

interface Count {
  readonly start: number;
  readonly end: number;
  readonly firstHalfMax: number;
  readonly lastQuarterMin: number;
  /** Rose above all it was in the first half and stayed above it through the last quarter. */
  readonly growing: boolean;
}

function counts(samples: readonly StatsReport[], from: number, lastQuarter: number): Record<string, Count> {
  const names = new Set(samples.flatMap((sample) => Object.keys(sample.diagnostics)));
  names.add('resources');
  const result: Record<string, Count> = {};
  for (const name of names) {
    const of = (sample: StatsReport): number => (name === 'resources' ? sample.resources : (sample.diagnostics[name] ?? 0));
    const firstHalfMax = Math.max(...samples.filter((sample) => sample.at < from).map(of));
    const lastQuarterMin = Math.min(...samples.filter((sample) => sample.at >= lastQuarter).map(of));
    result[name] = { start: of(samples[0]!), end: of(samples[samples.length - 1]!), firstHalfMax, lastQuarterMin, growing: lastQuarterMin > firstHalfMax };
  }
  return result;
}

const mb = (bytes: number): string => `${(bytes / 1024 / 1024).toFixed(1)} MB`;

// ---- the run ----

const kinesis = await startKinesisLocal({ env: { SHARD_LIMIT: '1000' } });
const dynalite = backend === 'dynamodb' ? await startDynalite() : undefined;
const client = kinesisClient(kinesis);
const runId = `k${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;
const streamName = `soak-${runId}`;
let cluster: Cluster | undefined;
let exitCode = 0;
try {
  const workers = buildWorkers();
  await createStream(client, streamName, shards);
  const base =
    backend === 'postgres'
      ? postgresUrl()
      : backend === 'redis'
        ? redisUrl()
        : `dynamodb://leasehold-soak?endpoint=${encodeURIComponent(dynalite!.endpoint)}&region=us-east-1`;
  const storageUrl = await prepareStorage(base, runId);
  cluster = new Cluster({
    streamName,
    kinesisEndpoint: kinesis.endpoint,
    region: kinesis.region,
    storageUrl,
    group: `soak-${runId}`,
    leaseDurationMs: 3_000,
    takeIntervalMs: 500,
    shardSyncIntervalMs: 5_000,
    maxRecordsPerCall: 100,
    batchDelayMs: 0,
    report: 'batches',
    idleDelayMs: 1_000,
    workerScript: workers.leasehold,
    nodeFlags: ['--expose-gc', ...args['node-flags'].split(' ').filter((flag) => flag !== '')],
    statsIntervalMs: sampleMs,
  });
  const group = cluster;

  // Only what the verdict needs is kept: the stats of each worker, and the count of records handed over.
  const stats = new Map<string, StatsReport[]>();
  let handedOver = 0;
  let errors = 0;
  const lastError: string[] = [];
  group.onReport((report) => {
    if (report.type === 'stats') {
      const list = stats.get(report.worker) ?? [];
      list.push(report);
      stats.set(report.worker, list);
    }
    else if (report.type === 'batch') handedOver += report.records;
    else if (report.type === 'error') {
      errors++;
      lastError.splice(0, 1, `${report.worker} ${report.operation}: ${report.message}`);
    }
  });
  // The cluster keeps every report; a start waits for its worker's `ready` among them.
  let starting = 0;
  setInterval(() => starting === 0 && group.reports.splice(0), 5_000).unref();
  const start = async (workerId: string): Promise<WorkerProcess> => {
    starting++;
    try {
      return await group.start(workerId);
    } finally {
      starting--;
    }
  };

  const durationMs = minutes * 60_000;
  log(
    `soak: ${minutes} min, ${backend}, ${shards} shards, ${rate} records/s, workers ${LONG_LIVED.join(', ')} throughout and one joining every ${churnMs / 1_000} s ` +
      `for half of that, stats every ${sampleMs / 1_000} s (node ${process.version}, plain JavaScript, --expose-gc)`,
  );
  for (const workerId of LONG_LIVED) await start(workerId);
  const startedAt = now();
  const endAt = startedAt + durationMs;

  // The producer: a steady rate, in a put every 200 ms; what it put is counted, not kept.
  const producer = new Producer(client, streamName, Array.from({ length: 64 }, (_, i) => `key-${i}`));
  let produced = 0;
  let carry = 0;
  const production = (async () => {
    let next = now();
    while (now() < endAt) {
      carry += rate / 5;
      const count = Math.floor(carry);
      carry -= count;
      if (count > 0) await producer.put(count);
      produced += count;
      producer.produced.splice(0);
      next += 200;
      await sleep(Math.max(0, next - now()));
    }
  })();

  // The churn: an extra worker joins every period and leaves half-way through it.
  const churn = (async () => {
    let joins = 0;
    while (now() + churnMs <= endAt) {
      await sleep(churnMs / 2);
      const joiner = await start(`c${++joins}`);
      await sleep(churnMs / 2);
      await joiner.stop();
    }
    return joins;
  })();

  let lastLog = now();
  while (now() < endAt) {
    await sleep(Math.min(5_000, Math.max(0, endAt - now())));
    if (now() - lastLog >= 60_000 || now() >= endAt) {
      lastLog = now();
      const line = LONG_LIVED.map((workerId) => {
        const last = stats.get(workerId)?.at(-1);
        return last ? `${workerId} ${last.shards} shards rss ${mb(last.rss)} heap ${mb(last.heapUsed)}` : `${workerId} -`;
      }).join('; ');
      log(`  ${((now() - startedAt) / 60_000).toFixed(1)} min: produced ${produced}, handed over ${handedOver}, errors ${errors}; ${line}`);
    }
  }
  await production;
  const joins = await churn;
  // Catch up, for the record count (every record at least once; the churn hands some over twice).
  const caughtUp = now();
  while (handedOver < produced && now() - caughtUp < 30_000) await sleep(500);

  const from = startedAt + durationMs / 2;
  const lastQuarter = startedAt + (durationMs * 3) / 4;
  const verdicts = LONG_LIVED.map((workerId) => {
    const samples = (stats.get(workerId) ?? []).filter((sample) => sample.at >= startedAt);
    if (samples.length < 8) return { workerId, samples: samples.length, failures: [`only ${samples.length} samples`] };
    const data = trend(samples, (sample) => sample.heapUsed - sample.codeUsed, from);
    const heap = trend(samples, (sample) => sample.heapUsed, from);
    const rss = trend(samples, (sample) => sample.rss, from);
    const bookkeeping = counts(samples, from, lastQuarter);
    const failures: string[] = [];
    if (data.growthShare > 0.05 && data.growth > 1024 * 1024) failures.push(`the heap without code grew ${mb(data.growth)} (${(data.growthShare * 100).toFixed(1)}%) over the second half`);
    if (rss.growthShare > 0.15 && rss.growth > 8 * 1024 * 1024) failures.push(`RSS grew ${mb(rss.growth)} (${(rss.growthShare * 100).toFixed(1)}%) over the second half`);
    for (const [name, count] of Object.entries(bookkeeping)) {
      if (count.growing) failures.push(`${name} kept growing: at most ${count.firstHalfMax} in the first half, at least ${count.lastQuarterMin} in the last quarter`);
    }
    return { workerId, samples: samples.length, data, heap, rss, bookkeeping, failures };
  });

  log(`\nsoak: ${minutes} min; produced ${produced} records, handed over ${handedOver} (at least once each: ${handedOver >= produced}); ${joins} joins and leaves; ${errors} errors${errors > 0 ? ` (last: ${lastError[0]})` : ''}`);
  for (const verdict of verdicts) {
    if (!('heap' in verdict) || verdict.heap === undefined) {
      log(`  ${verdict.workerId}: ${verdict.failures.join('; ')}`);
      continue;
    }
    const { data, heap, rss, bookkeeping } = verdict;
    const line = (name: string, figure: Trend): string =>
      `${name} ${mb(figure.start)} -> ${mb(figure.end)} (max ${mb(figure.max)}), second half ${(figure.slopePerMin / 1024).toFixed(1)} KB/min = ${(figure.growthShare * 100).toFixed(2)}%`;
    log(`  ${verdict.workerId} (${verdict.samples} samples): ${line('heap after GC without code', data)}; ${line('whole heap', heap)}; ${line('RSS', rss)}`);
    log(`    counts (start/end/max in first half): ${Object.entries(bookkeeping).map(([name, count]) => `${name} ${count.start}/${count.end}/${count.firstHalfMax}`).join(', ')}`);
    log(`    ${verdict.failures.length === 0 ? 'flat' : `GROWS: ${verdict.failures.join('; ')}`}`);
  }
  const failed = verdicts.some((verdict) => verdict.failures.length > 0);
  log(failed ? '\nsoak: FAILED, memory grows' : '\nsoak: memory flat');
  if (args.json) writeFileSync(args.json, `${JSON.stringify({ minutes, backend, shards, rate, produced, handedOver, errors, joins, verdicts, stats: Object.fromEntries(stats) }, null, 1)}\n`);
  if (failed || handedOver < produced) exitCode = 1;
} finally {
  await cluster?.close();
  client.destroy();
  await dynalite?.close();
  await kinesis.close();
}
process.exit(exitCode);
