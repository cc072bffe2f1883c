/**
 * End-to-end benchmarks, side by side in one run on one machine, one kinesis-local and one dynalite:
 * drain throughput, failover, scale-out and the memory of a worker holding 100 leases, for Leasehold on
 * each backend and for lifion-kinesis (polling mode, DynamoDB leases) as the peer baseline.
 *
 *   pnpm --filter @leasehold/e2e bench        (or `pnpm bench` from the root, with the other benches)
 *
 * BENCH_ONLY=drain,handoff (any of drain, failover, handoff, reshard, scale-out, memory) runs only those parts
 * (drain,cold or drain,burst only that kind of drain);
 * BENCH_SYSTEMS=leasehold/redis,... only those systems; BENCH_HANDOFFS=5 sets the graceful stops measured
 * per backend. The memory part (bench/memory.ts) runs both workers compiled to plain JavaScript;
 * BENCH_MEMORY_ROUNDS=3 sets its turns per system, BENCH_MEMORY_NODE_FLAGS=--flag,... gives both the same
 * extra node flags, BENCH_MEMORY_SNAPSHOTS=DIR has each worker write a heap snapshot into DIR after its peak is
 * read (bench/heap-summary.ts reads them), BENCH_MEMORY_HOLD_MS=30000 holds every shard that long before the peak
 * is read (default 5,000). The other parts run the Leasehold workers under tsx; BENCH_COMPILED=1 runs them as
 * plain JavaScript too. The drain also compares CPU time per record: the workers' (from /proc, from the
 * first reader's start to the last record) against the plain loop's process over its reads.
 * BENCH_DRAIN_ROUNDS=5 runs each drain five times per system and adds a row of medians.
 * BENCH_TRACE=1 prints each shard's timeline of a drain, with its origin on the reports' clock.
 * BENCH_CPU_PROFILE=DIR runs the Leasehold workers under `node --cpu-prof` into DIR and writes there, for each
 * drain, the span its CPU figure covers (`window-<kind>-<n>.json`); bench/cpu-profile-summary.ts says where
 * the workers' CPU went in that span. BENCH_DRAIN_NODE_FLAGS=--flag,... gives the drains' Leasehold workers and
 * the plain loop's three fresh processes the same extra node flags. BENCH_WORKER_OUTPUT=DIR keeps every line a
 * worker or a plain-loop process prints that is not a report, a file per process in DIR (with
 * BENCH_DRAIN_NODE_FLAGS=--trace-gc, each one's collections).
 */
import { GetRecordsCommand, GetShardIteratorCommand } from '@aws-sdk/client-kinesis';
import { startDynalite, startKinesisLocal } from '@leasehold/local-stack';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Cluster, WorkerProcess } from '../src/cluster.js';
import { createStream, kinesisClient, listShards, splitShard } from '../src/kinesis.js';
import { checkLedger } from '../src/ledger.js';
import { Producer } from '../src/producer.js';
import { parseReport, now, type RecordReport, type WorkerReport } from '../src/reports.js';
import { prepareStorage } from '../src/storage-url.js';
import { DRAIN_RECORDS, drainBenches, drainedAll } from './drain.js';
import { DRAIN_ROUNDS, median, medianDrain, type DrainResult } from './drain-rounds.js';
import type { Group, System } from './group.js';
import { memoryRounds, type MemorySample } from './memory.js';
import { waitFor } from './wait-for.js';
import { buildWorkers } from './workers.js';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';

const LEASE_MS = 3_000;
const PACKAGE_DIR = fileURLToPath(new URL('..', import.meta.url));
const LIFION_WORKER = fileURLToPath(new URL('./lifion-worker.ts', import.meta.url));
const log = (line: string): void => void process.stdout.write(`${line}\n`);

const ALL_SYSTEMS: System[] = ['leasehold/postgres', 'leasehold/redis', 'leasehold/dynamodb', 'lifion-kinesis'];
const listed = (name: string): string[] | undefined => process.env[name]?.split(',').map((item) => item.trim()).filter((item) => item !== '');
const SYSTEMS = ALL_SYSTEMS.filter((system) => listed('BENCH_SYSTEMS')?.includes(system) ?? true);
// BENCH_COMPILED=1: the Leasehold workers of every part run as plain JavaScript (see workers.ts), not under tsx.
const compiled = process.env.BENCH_COMPILED === '1' ? buildWorkers() : undefined;
/** The compiled workers for the fresh plain loop, built at its first use. */
let builtWorkers = compiled;
const selected = (part: string): boolean => listed('BENCH_ONLY')?.includes(part) ?? true;
// BENCH_CPU_PROFILE=DIR: each Leasehold worker writes a V8 CPU profile into DIR when it exits.
const cpuProfileDir = process.env.BENCH_CPU_PROFILE;
if (cpuProfileDir !== undefined) mkdirSync(cpuProfileDir, { recursive: true });
const drainNodeFlags = listed('BENCH_DRAIN_NODE_FLAGS') ?? [];


const kinesis = await startKinesisLocal({ env: { SHARD_LIMIT: '1000' } });
const dynalite = await startDynalite();
const client = kinesisClient(kinesis);
let runs = 0;

async function openGroup(
  system: System,
  streamName: string,
  maxRecordsPerCall: number,
  {
    leaseDurationMs = LEASE_MS,
    report = 'records',
    shardSyncIntervalMs = 1_000,
  }: { leaseDurationMs?: number; report?: 'records' | 'batches'; shardSyncIntervalMs?: number } = {},
): Promise<Group> {
  const runId = `b${Date.now().toString(36)}${randomBytes(2).toString('hex')}${runs++}`;
  const group = `bench-${runId}`;
  if (system !== 'lifion-kinesis') {
    const base =
      system === 'leasehold/postgres'
        ? 'postgres://root@127.0.0.1:5432/test'
        : system === 'leasehold/redis'
          ? 'redis://127.0.0.1:6379'
          : `dynamodb://leasehold-bench?endpoint=${encodeURIComponent(dynalite.endpoint)}&region=us-east-1`;
    const storageUrl = await prepareStorage(base, runId);
    const cluster = new Cluster({
      streamName,
      kinesisEndpoint: kinesis.endpoint,
      region: kinesis.region,
      storageUrl,
      group,
      leaseDurationMs,
      takeIntervalMs: 500,
      shardSyncIntervalMs,
      maxRecordsPerCall,
      batchDelayMs: 0,
      report,
      // The source's own default: a caught-up shard is read once a second.
      idleDelayMs: 1_000,
      ...(compiled === undefined ? {} : { workerScript: compiled.leasehold }),
      nodeFlags: [...drainNodeFlags, ...(cpuProfileDir === undefined ? [] : ['--cpu-prof', `--cpu-prof-dir=${cpuProfileDir}`])],
    });
    return { reports: cluster.reports, start: (workerId) => cluster.start(workerId), close: () => cluster.close() };
  }
  const reports: WorkerReport[] = [];
  const workers: WorkerProcess[] = [];
  return {
    reports,
    start: async (workerId) => {
      const flags = ['--stream', streamName, '--kinesis-endpoint', kinesis.endpoint, '--dynamodb-endpoint', dynalite.endpoint, '--table', `lifion-${runId}`, '--group', group, '--worker-id', workerId];
      const child = spawn(process.execPath, ['--import', 'tsx', LIFION_WORKER, ...flags], {
        cwd: PACKAGE_DIR,
        env: { ...process.env, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true', AWS_SDK_JS_SUPPRESS_MAINTENANCE_MODE_MESSAGE: '1' },
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      const worker = new WorkerProcess(workerId, child);
      workers.push(worker);
      createInterface({ input: child.stdout }).on('line', (line) => {
        const report = parseReport(line);
        if (report !== undefined) reports.push(report);
      });
      await waitFor(() => reports.some((report) => report.type === 'ready' && report.worker === workerId), 60_000, () => (worker.running ? undefined : worker.stderr));
      return worker;
    },
    close: async () => {
      await Promise.all(workers.map((worker) => worker.stop(5_000)));
    },
  };
}

const records = (reports: readonly WorkerReport[]): RecordReport[] => reports.filter((report): report is RecordReport => report.type === 'record');
const keys = (count: number): string[] => Array.from({ length: count }, (_, i) => `key-${i}`);

async function freshStream(shards: number): Promise<string> {
  const name = `bench-${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;
  await createStream(client, name, shards);
  return name;
}

const { drain, burstDrain } = drainBenches({
  client,
  kinesisEndpoint: kinesis.endpoint,
  packageDir: PACKAGE_DIR,
  plainScript: () => (builtWorkers ??= buildWorkers()).plain,
  openGroup,
  freshStream,
  keys,
  log,
  cpuProfileDir,
  nodeFlags: drainNodeFlags,
});

/** Keeps producing until stopped. */
function keepProducing(producer: Producer): { stop(): Promise<void> } {
  let going = true;
  const loop = (async () => {
    while (going) {
      await producer.put(20);
      await sleep(100);
    }
  })();
  return {
    stop: async () => {
      going = false;
      await loop;
    },
  };
}

// ---- failover ----

/** Milliseconds from `at` until every shard in `shards` had a record handed over by another worker than `from`. */
async function resumedElsewhere(group: Group, shards: readonly string[], from: string, at: number, timeoutMs: number): Promise<number | undefined> {
  const resumedAt = (shardId: string): number | undefined =>
    records(group.reports).find((report) => report.shardId === shardId && report.worker !== from && report.at > at)?.at;
  const ok = await waitFor(() => shards.every((shardId) => resumedAt(shardId) !== undefined), timeoutMs);
  return ok ? Math.max(...shards.map((shardId) => resumedAt(shardId)!)) - at : undefined;
}

/** The shards whose latest record went to `workerId`. */
function shardsOf(group: Group, workerId: string): string[] {
  const last = new Map<string, string>();
  for (const report of records(group.reports)) last.set(report.shardId, report.worker);
  return [...last].filter(([, worker]) => worker === workerId).map(([shardId]) => shardId);
}

async function failover(system: System): Promise<{ kill: string; graceful: string }> {
  const streamName = await freshStream(4);
  const producer = new Producer(client, streamName, keys(48));
  const production = keepProducing(producer);
  const group = await openGroup(system, streamName, 100);
  const cap = system === 'lifion-kinesis' ? 120_000 : 30_000;
  const format = (ms: number | undefined): string => (ms === undefined ? `none within ${cap / 1000} s` : `${(ms / 1000).toFixed(2)} s = ${(ms / LEASE_MS).toFixed(2)} x ${LEASE_MS} ms`);
  try {
    const workers = await Promise.all(['f1', 'f2', 'f3'].map((id) => group.start(id)));
    await waitFor(() => new Set(records(group.reports).filter((report) => report.at > now() - 1_000).map((report) => report.shardId)).size === 4, 60_000);
    await sleep(2_000);
    const pick = (): WorkerProcess => [...workers].filter((worker) => worker.running).sort((a, b) => shardsOf(group, b.workerId).length - shardsOf(group, a.workerId).length)[0]!;
    const victim = pick();
    const victimShards = shardsOf(group, victim.workerId);
    await victim.kill();
    const killedAt = now();
    const kill = format(await resumedElsewhere(group, victimShards, victim.workerId, killedAt, cap));
    await sleep(2_000);
    const leaving = pick();
    const leavingShards = shardsOf(group, leaving.workerId);
    const stoppedAt = now();
    const stopping = leaving.stop();
    const graceful = format(await resumedElsewhere(group, leavingShards, leaving.workerId, stoppedAt, cap));
    await stopping;
    return { kill, graceful };
  } finally {
    await production.stop();
    await group.close();
  }
}

// ---- handoff ----


/** One graceful stop: per shard of the stopped worker, the moments of each step, from the workers' reports. */
interface HandoffSample {
  /** SIGTERM sent to the first record handed over elsewhere, the longest over the worker's shards. */
  readonly totalMs: number;
  /**
   * SIGTERM sent to the new owners' first reads answered (one GetRecords each, maybe empty), the longest
   * over the worker's shards: the handoff itself, before the records' arrival and the reader's pace.
   */
  readonly toFirstReadMs: number;
  /** The emulator's own GetShardIterator then GetRecords on one of the shards, by the bench right after: the floor of "start to first record". */
  readonly emulatorMs: number;
  /**
   * Per shard, the steps in ms: the stopping worker's release or handover after SIGTERM, the take (or hold)
   * after it, the reader's start after the take, the first record after the start, and of that last step
   * how long the record did not exist yet (put after the reader's start: the producer's pace, not the handoff's),
   * and the GetShardIterator calls the new owner made for the shard from the take to its first record; the
   * reader's start to its first answer, and whether that answer held no record (the reader then waits its
   * idle delay, `idleDelayMs`, before the next).
   */
  readonly steps: ReadonlyArray<{ release: number; take: number; start: number; firstRead: number; firstReadEmpty: boolean; firstRecord: number; notYetPut: number; iterators: number }>;
}

async function gracefulStop(group: Group, workers: readonly WorkerProcess[], streamName: string, producer: Producer): Promise<HandoffSample | string> {
  const leaving = [...workers].filter((worker) => worker.running).sort((a, b) => shardsOf(group, b.workerId).length - shardsOf(group, a.workerId).length)[0]!;
  const shards = shardsOf(group, leaving.workerId);
  if (shards.length === 0) return 'no shard to hand over';
  const stoppedAt = now();
  const stopping = leaving.stop();
  const total = await resumedElsewhere(group, shards, leaving.workerId, stoppedAt, 30_000);
  await stopping;
  if (total === undefined) return 'not processing elsewhere within 30 s';
  const probeAt = now();
  const latest = producer.produced.filter((record) => record.shardId === shards[0]).at(-2);
  const probe = await client.send(
    new GetShardIteratorCommand({
      StreamName: streamName,
      ShardId: shards[0],
      ...(latest === undefined ? { ShardIteratorType: 'TRIM_HORIZON' as const } : { ShardIteratorType: 'AFTER_SEQUENCE_NUMBER' as const, StartingSequenceNumber: latest.position }),
    }),
  );
  await client.send(new GetRecordsCommand({ ShardIterator: probe.ShardIterator, Limit: 100 }));
  const emulatorMs = now() - probeAt;
  const after = group.reports.filter((report) => report.at >= stoppedAt);
  const steps = shards.map((shardId) => {
    // A stopping worker hands each lease to a chosen member, or writes it free when it has none to hand it to.
    const released =
      after.find((report) => (report.type === 'released' || report.type === 'handed-off') && report.worker === leaving.workerId && report.shardId === shardId)?.at ?? NaN;
    const taken = after.find((report) => report.type === 'acquired' && report.worker !== leaving.workerId && report.shardId === shardId);
    const started = after.find((report) => report.type === 'started' && report.worker === taken?.worker && report.shardId === shardId)?.at ?? NaN;
    const first = after.find((report): report is RecordReport => report.type === 'record' && report.worker === taken?.worker && report.shardId === shardId);
    const putAt = producer.produced.find((record) => record.shardId === shardId && record.position === first?.position)?.putAt ?? NaN;
    const read = after.find((report): report is Extract<WorkerReport, { type: 'first-read' }> => report.type === 'first-read' && report.worker === taken?.worker && report.shardId === shardId && report.at >= started);
    return {
      release: released - stoppedAt,
      take: (taken?.at ?? NaN) - released,
      start: started - (taken?.at ?? NaN),
      firstRead: (read?.at ?? NaN) - started,
      firstReadEmpty: read?.records === 0,
      readAt: read?.at ?? NaN,
      firstRecord: (first?.at ?? NaN) - started,
      notYetPut: Math.max(0, putAt - started),
      iterators: after.filter(
        (report) => report.type === 'get-shard-iterator' && report.worker === taken?.worker && report.shardId === shardId && report.at >= (taken?.at ?? Infinity) && report.at <= (first?.at ?? -Infinity),
      ).length,
    };
  });
  const toFirstReadMs = Math.max(...steps.map((step) => step.readAt - stoppedAt));
  return { totalMs: total, toFirstReadMs, emulatorMs, steps: steps.map(({ readAt: _, ...step }) => step) };
}

/**
 * Graceful stop to processing elsewhere, `BENCH_HANDOFFS` times per backend: three workers share four
 * shards under load; the busiest is stopped (SIGTERM), and once its shards are processed elsewhere a new
 * worker joins and the group rebalances before the next stop.
 */
async function handoff(system: System): Promise<{ samples: HandoffSample[]; failures: string[] } | string> {
  const count = Number(process.env.BENCH_HANDOFFS ?? 5);
  const streamName = await freshStream(4);
  const producer = new Producer(client, streamName, keys(48));
  const production = keepProducing(producer);
  const group = await openGroup(system, streamName, 100);
  const samples: HandoffSample[] = [];
  const failures: string[] = [];
  try {
    const workers = await Promise.all(['h1', 'h2', 'h3'].map((id) => group.start(id)));
    const balanced = (): boolean => {
      const live = workers.filter((worker) => worker.running);
      const held = live.map((worker) => shardsOf(group, worker.workerId).length);
      const recent = new Set(records(group.reports).filter((report) => report.at > now() - 1_000).map((report) => report.shardId));
      return recent.size === 4 && held.every((n) => n >= 1) && held.reduce((a, b) => a + b, 0) === 4;
    };
    for (let i = 0; i < count; i++) {
      if (!(await waitFor(balanced, 60_000))) return `not balanced within 60 s before stop ${i + 1}`;
      await sleep(1_500);
      const sample = await gracefulStop(group, workers, streamName, producer);
      if (typeof sample === 'string') failures.push(sample);
      else samples.push(sample);
      workers.push(await group.start(`h${workers.length + 1}`));
    }
    return { samples, failures };
  } finally {
    await production.stop();
    await group.close();
  }
}

// ---- resharding ----

/**
 * What a shard's end costs in listings of the whole stream: three workers share four shards, the leader
 * syncs the shards only at the group's birth (shardSyncIntervalMs 10 minutes), each shard is split, and
 * the ListShards calls the workers make from the first split until every child has been read are counted.
 */
async function reshard(system: System): Promise<{ ended: number; listings: number } | string> {
  const streamName = await freshStream(4);
  const producer = new Producer(client, streamName, keys(48));
  const group = await openGroup(system, streamName, 100, { shardSyncIntervalMs: 600_000 });
  try {
    await Promise.all(['r1', 'r2', 'r3'].map((id) => group.start(id)));
    await producer.put(400);
    if (!(await waitFor(drainedAll(group, producer), 60_000))) return 'the stream was not read within 60 s';
    const splitAt = now();
    for (const shard of await listShards(client, streamName)) await splitShard(client, streamName, shard.ShardId!);
    await producer.put(400);
    if (!(await waitFor(drainedAll(group, producer), 60_000))) return 'the children were not read within 60 s';
    const after = group.reports.filter((report) => report.at >= splitAt);
    return { ended: after.filter((report) => report.type === 'ended').length, listings: after.filter((report) => report.type === 'list-shards').length };
  } finally {
    await group.close();
  }
}

// ---- scale-out ----

async function scaleOut(system: System): Promise<{ time: string; twice: string }> {
  const streamName = await freshStream(4);
  const producer = new Producer(client, streamName, keys(48));
  const production = keepProducing(producer);
  const group = await openGroup(system, streamName, 100);
  try {
    await group.start('s1');
    await waitFor(() => new Set(records(group.reports).map((report) => report.shardId)).size === 4, 60_000);
    await sleep(2_000);
    await group.start('s2');
    const joinedAt = now();
    // Its fair share: two shards whose records now go to s2 only.
    const capMs = system === 'lifion-kinesis' ? 90_000 : 30_000;
    const fair = await waitFor(() => shardsOf(group, 's2').length >= 2 && shardsOf(group, 's1').length <= 2, capMs);
    // lifion-kinesis takes no lease from a live owner: a joiner waits for leases to end (5 min terms).
    const time = fair ? `${((now() - joinedAt) / 1000).toFixed(2)} s` : `no fair share within ${capMs / 1000} s`;
    await sleep(2_000);
    await production.stop();
    await waitFor(() => checkLedger(producer.produced, group.reports).lost.length === 0, 30_000);
    return { time, twice: String(checkLedger(producer.produced, group.reports).processedTwice) };
  } finally {
    await production.stop();
    await group.close();
  }
}

function table(title: string, header: readonly string[], rows: readonly (readonly string[])[]): void {
  const widths = header.map((cell, i) => Math.max(cell.length, ...rows.map((row) => row[i]!.length)));
  const line = (row: readonly string[]): string => `  ${row.map((cell, i) => cell.padEnd(widths[i]!)).join('  ')}`.trimEnd();
  log(`\n${title}\n${line(header)}\n${line(widths.map((width) => '-'.repeat(width)))}\n${rows.map(line).join('\n')}`);
}

const attempt = async <T>(what: string, work: () => Promise<T>): Promise<T | string> => {
  try {
    return await work();
  } catch (error) {
    return `cannot run: ${((error as Error).message.split('\n')[0] ?? '').slice(0, 120)}`;
  }
};

try {
  log(`e2e bench: kinesis-local, dynalite; lease ${LEASE_MS} ms, take tick 500 ms, idleDelayMs 1,000 (the source's default) for Leasehold; lifion-kinesis 1.3.3 in polling mode`);
  if (selected('drain')) {
    const drains: string[][] = [];
    const cells = (result: DrainResult | string, withFresh: boolean): string[] =>
      typeof result === 'string'
        ? [result, ...Array<string>(withFresh ? 7 : 5).fill('-')]
        : [
            String(Math.round(result.rate)),
            String(Math.round(result.plain)),
            `${(result.rate / result.plain).toFixed(2)}x`,
            ...(withFresh ? (result.fresh ? [String(Math.round(result.fresh.rate)), `${(result.rate / result.fresh.rate).toFixed(2)}x`] : ['-', '-']) : []),
            String(Math.round(result.unpaced)),
            `${result.cpuPer1k.toFixed(0)} / ${result.plainCpuPer1k.toFixed(0)}${withFresh && result.fresh ? ` / ${result.fresh.cpuPer1k.toFixed(0)}` : ''}${result.processes ? ` / ${result.processes.cpuPer1k.toFixed(0)}` : ''}`,
            result.processes
              ? `${(result.cpuPer1k / result.plainCpuPer1k).toFixed(2)}x / ${(result.cpuPer1k / result.processes.cpuPer1k).toFixed(2)}x${result.cpuPer1kFromOwnStarts === undefined ? '' : ` (${(result.cpuPer1kFromOwnStarts / result.processes.cpuPer1k).toFixed(2)}x)`}`
              : '-',
          ];
    for (const system of SYSTEMS) {
      const colds: Array<DrainResult | string> = [];
      const bursts: Array<DrainResult | string> = [];
      for (let round = 1; round <= DRAIN_ROUNDS; round++) {
        const cold = selected('cold') || !selected('burst') ? await attempt('drain', () => drain(system)) : '-';
        log(`drain ${system}: ${JSON.stringify(cold)}`);
        const burst = system !== 'lifion-kinesis' && (selected('burst') || !selected('cold')) ? await attempt('burst drain', () => burstDrain(system)) : '-';
        log(`burst drain ${system}: ${JSON.stringify(burst)}`);
        colds.push(cold);
        bursts.push(burst);
        drains.push([DRAIN_ROUNDS > 1 ? `${system} #${round}` : system, ...cells(cold, true), ...cells(burst, false)]);
      }
      if (DRAIN_ROUNDS > 1) drains.push([`${system} median`, ...cells(medianDrain(colds), true), ...cells(medianDrain(bursts), false)]);
    }
    table(
      `drain: ${DRAIN_RECORDS} records, 4 shards, 3 workers, no-op handler, checkpoint per batch, against a plain GetRecords loop in one process over the same stream, read just before and after,\n` +
        '  at most 5 GetRecords a second per shard (Kinesis\'s limit, the consumer\'s default pace; kinesis-local does not enforce it); unpaced: the plain loop as fast as the emulator answers, read once after.\n' +
        '  cold start: workers start on the backlog (records/s from the first shard reader\'s start, lifion-kinesis from its first record, to the last record; the plain loop from its GetShardIterator calls); ' +
        'burst: workers sharing the shards, warmed up and caught up, are paused while the backlog is put and resumed together (records/s from the resume to the last record; the plain loop from its start).\n' +
        '  fresh: the same plain loop in a fresh process of its own, as the workers are (the plain loop runs in the bench process, warmed up).\n' +
        '  3 fresh: the plain loop in three fresh processes at once, each over its share of the shards as the workers hold them (2, 1, 1); in a burst they read the warm-up with the workers, are paused with them and read the burst once the workers have drained it.\n' +
        '  CPU/1k: ms of CPU per 1,000 records over the same span, the three workers together / the plain loop\'s process / (cold) the fresh one\'s / the three fresh processes together (storage servers and the emulator not counted); CPU ratio: the workers\' to the plain loop\'s / to the three fresh processes\' (cold: in brackets, each worker\'s CPU counted from its own first reader\'s start, as each plain process\'s is from its own reads)',
      ['system', 'cold start records/s', 'plain loop', 'vs plain', 'fresh', 'vs fresh', 'unpaced', 'CPU/1k', 'CPU ratio', 'burst records/s', 'plain loop', 'vs plain', 'unpaced', 'CPU/1k', 'CPU ratio'],
      drains,
    );
  }

  if (selected('failover')) {
    const failovers: string[][] = [];
    for (const system of SYSTEMS) {
      const result = await attempt('failover', () => failover(system));
      failovers.push(typeof result === 'string' ? [system, result, result] : [system, result.kill, result.graceful]);
      log(`failover ${system}: ${JSON.stringify(result)}`);
    }
    table('failover: time until every shard of the worker is processing elsewhere', ['system', 'after SIGKILL', 'after graceful stop (SIGTERM)'], failovers);
  }

  if (selected('handoff')) {
    const handoffs: string[][] = [];
    const ms = (value: number): string => (Number.isFinite(value) ? String(Math.round(value)) : '-');
    for (const system of SYSTEMS.filter((each) => each !== 'lifion-kinesis')) {
      const result = await attempt('handoff', () => handoff(system));
      log(`handoff ${system}: ${JSON.stringify(result)}`);
      if (typeof result === 'string') {
        handoffs.push([system, result, ...Array<string>(13).fill('-')]);
        continue;
      }
      const steps = result.samples.flatMap((sample) => sample.steps);
      const totals = result.samples.map((sample) => sample.totalMs);
      const toReads = result.samples.map((sample) => sample.toFirstReadMs);
      handoffs.push([
        system,
        ms(median(toReads)),
        ms(Math.max(...toReads)),
        ms(median(totals)),
        ms(Math.max(...totals)),
        ms(median(steps.map((step) => step.release))),
        ms(median(steps.map((step) => step.take))),
        ms(median(steps.map((step) => step.start))),
        ms(median(steps.map((step) => step.firstRead))),
        `${steps.filter((step) => step.firstReadEmpty).length}/${steps.length}`,
        ms(median(steps.map((step) => step.firstRecord))),
        ms(median(steps.map((step) => step.notYetPut))),
        ms(median(result.samples.map((sample) => sample.emulatorMs))),
        steps.length === 0 ? '-' : (steps.reduce((sum, step) => sum + step.iterators, 0) / steps.length).toFixed(2),
        `${result.samples.length}${result.failures.length > 0 ? ` (${result.failures.join('; ')})` : ''}`,
      ]);
    }
    table(
      `handoff: SIGTERM to the first read answered elsewhere, and to the first record handed over elsewhere, the slowest of the stopped worker's shards (ms; lease ${LEASE_MS} ms, take tick 500 ms); steps are medians per shard;\n` +
        '  first read: the new owner\'s first GetRecords answered (the handoff\'s end); empty: first reads that held no record, after which the reader waits its idle delay (1,000 ms, the pace of any caught-up reader, the stopped one too) before the next;\n' +
        `  not yet put: of "start to first record", the time until that record was put at all (the producer puts 20 records, then waits 100 ms), which no handoff can shorten;\n` +
        '  emulator: the bench\'s own GetShardIterator and GetRecords right after each stop, the floor of the reader\'s start; GetShardIterator: calls the new owner made per handed-over shard, from its take to its first record (mean)',
      ['system', 'to first read, median', 'max', 'to first record, median', 'max', 'SIGTERM to release/hand-over', 'release to take/hold', 'take to reader start', 'start to first read', 'first reads empty', 'start to first record', 'of which not yet put', 'emulator iterator+read', 'GetShardIterator', 'stops'],
      handoffs,
    );
  }

  if (selected('reshard')) {
    const rows: string[][] = [];
    for (const system of SYSTEMS.filter((each) => each !== 'lifion-kinesis').slice(0, 1)) {
      const result = await attempt('reshard', () => reshard(system));
      log(`reshard ${system}: ${JSON.stringify(result)}`);
      rows.push(typeof result === 'string' ? [system, result, '-', '-'] : [system, String(result.ended), String(result.listings), (result.listings / result.ended).toFixed(2)]);
    }
    table(
      'resharding: each of 4 shards split under 3 workers; ListShards calls the workers make at the shards\' ends (the leader syncs only at birth)',
      ['system', 'shards ended', 'ListShards calls', 'per ended shard'],
      rows,
    );
  }

  if (selected('scale-out')) {
    const scaling: string[][] = [];
    for (const system of SYSTEMS) {
      const result = await attempt('scale-out', () => scaleOut(system));
      scaling.push(typeof result === 'string' ? [system, result, '-'] : [system, result.time, result.twice]);
      log(`scale-out ${system}: ${JSON.stringify(result)}`);
    }
    table('scale-out: a second worker joins one holding 4 shards under load', ['system', 'time to fair share (2 of 4)', 'records processed twice'], scaling);
  }

  if (selected('memory')) {
    const rounds = Number(process.env.BENCH_MEMORY_ROUNDS ?? 3);
    const nodeFlags = listed('BENCH_MEMORY_NODE_FLAGS') ?? [];
    const snapshotDir = process.env.BENCH_MEMORY_SNAPSHOTS;
    const holdMs = process.env.BENCH_MEMORY_HOLD_MS === undefined ? undefined : Number(process.env.BENCH_MEMORY_HOLD_MS);
    // The raw SDK v3 reader and its idle floor are baselines, measured in every run beside the systems.
    const systems = [...(['leasehold/redis', 'lifion-kinesis'] as const).filter((system) => SYSTEMS.includes(system)), 'sdk-v3 loop', 'sdk-v3 idle'] as const;
    const result = await attempt('memory', () => memoryRounds({ kinesis, dynalite, client, workers: buildWorkers(), nodeFlags, ...(snapshotDir === undefined ? {} : { snapshotDir }), ...(holdMs === undefined ? {} : { holdMs }) }, systems, rounds));
    if (typeof result === 'string') log(`memory: ${result}`);
    else {
      const mb = (bytes: number | undefined): string => (bytes !== undefined && Number.isFinite(bytes) ? (bytes / 1024 / 1024).toFixed(0) : '-');
      const figures: Array<[string, (sample: MemorySample) => number | undefined]> = [
        ['peak RSS', (sample) => sample.peakRss],
        ['RSS', (sample) => sample.usage.rss],
        ['anonymous', (sample) => sample.usage.rssAnon],
        ['file-backed', (sample) => sample.usage.rssFile],
        ['heap used', (sample) => sample.usage.heapUsed],
        ['new space', (sample) => sample.usage.heapSpaces.new_space],
        ['old space', (sample) => sample.usage.heapSpaces.old_space],
        ['code space', (sample) => sample.usage.heapSpaces.code_space],
        ['external', (sample) => sample.usage.external],
      ];
      for (const sample of result.samples) log(`memory ${sample.system}: ${figures.map(([name, value]) => `${name} ${mb(value(sample))}`).join(', ')} MB`);
      const of = (system: string): MemorySample[] => result.samples.filter((sample) => sample.system === system);
      const rows = systems.map((system) => [system, ...figures.map(([, value]) => mb(median(of(system).map((sample) => value(sample) ?? NaN)))), String(of(system).length)]);
      const peak = (system: string): number => median(of(system).map((sample) => sample.peakRss));
      const ratio = peak('leasehold/redis') / peak('lifion-kinesis');
      const ofLoop = peak('leasehold/redis') / peak('sdk-v3 loop');
      table(
        `memory: one worker process holding 100 leases (100 shards, 4,000 records read from the start), both plain JavaScript under node${nodeFlags.length > 0 ? ` ${nodeFlags.join(' ')}` : ''}, ` +
          `taking turns over one stream; medians in MB (peak RSS: VmHWM; the rest when read, heap spaces committed)` +
          (Number.isFinite(ratio) ? `; Leasehold's peak RSS is ${ratio.toFixed(2)} of lifion-kinesis's` : '') +
          (Number.isFinite(ofLoop) ? `, ${ofLoop.toFixed(2)} of the raw SDK v3 loop's` : '') +
          (Number.isFinite(peak('sdk-v3 idle') / peak('lifion-kinesis')) ? `; the idle SDK v3 process alone is ${(peak('sdk-v3 idle') / peak('lifion-kinesis')).toFixed(2)} of lifion-kinesis's` : '') +
          (result.failures.length > 0 ? `\n  failed: ${result.failures.join('; ')}` : ''),
        ['system', ...figures.map(([name]) => name), 'rounds'],
        rows,
      );
    }
  }
} finally {
  client.destroy();
  await dynalite.close();
  await kinesis.close();
}
process.exit(0);
