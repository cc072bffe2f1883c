/**
 * The memory of one worker process holding 100 leases, Leasehold (Redis leases) against lifion-kinesis
 * (DynamoDB leases on dynalite), both as plain JavaScript under `node` (see workers.ts), over the same
 * stream in the same run: 100 shards and 4,000 records, which each worker reads from the start in a
 * group of its own. The systems take turns, `rounds` times each; the peak RSS (VmHWM) is read once the
 * worker has handed over records of every shard and held them all for a few seconds, with the worker's
 * own figures at that moment (src/stats.ts: heap used, each heap space's committed size, the RSS's
 * anonymous and file-backed parts). With `snapshotDir` each worker also writes a heap snapshot there right
 * after its peak is read (`<system>-<round>.heapsnapshot`, for bench/heap-summary.ts).
 */
import type { KinesisClient } from '@aws-sdk/client-kinesis';
import type { RunningDynalite, RunningKinesisLocal } from '@leasehold/local-stack';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Cluster, WorkerProcess } from '../src/cluster.js';
import { createStream } from '../src/kinesis.js';
import { Producer } from '../src/producer.js';
import { parseReport, type StatsReport, type WorkerReport } from '../src/reports.js';
import { prepareStorage } from '../src/storage-url.js';
import type { CompiledWorkers } from './workers.js';
import { waitFor } from './wait-for.js';

const PACKAGE_DIR = fileURLToPath(new URL('..', import.meta.url));
const SHARDS = 100;
const RECORDS = 4_000;
const HOLD_MS = 5_000;

/**
 * `sdk-v3 loop`: the raw client reading every shard at the source's pace, without leases (bench/plain-worker.ts);
 * `sdk-v3 idle`: that process loaded and idle, the floor under any SDK v3 worker.
 */
export type MemorySystem = 'leasehold/redis' | 'lifion-kinesis' | 'sdk-v3 loop' | 'sdk-v3 idle';

export interface MemorySample {
  readonly system: MemorySystem;
  /** VmHWM, bytes. */
  readonly peakRss: number;
  /** The worker's last stats report before the peak was read. */
  readonly usage: StatsReport;
}

export interface MemoryEnvironment {
  readonly kinesis: RunningKinesisLocal;
  readonly dynalite: RunningDynalite;
  readonly client: KinesisClient;
  readonly workers: CompiledWorkers;
  /** Extra `node` flags, the same for both systems (such as `--max-semi-space-size=1`, to see what the young generation costs). */
  readonly nodeFlags?: readonly string[];
  /** How long a worker holds every shard before its peak is read (the idle process: twice that). Default 5,000 ms. */
  readonly holdMs?: number;
  /** Where each worker writes a heap snapshot after its peak is read; none when not given. */
  readonly snapshotDir?: string;
}

/** The signal that makes a worker write its heap snapshot: one that no worker handles and whose default is to ignore it. */
const SNAPSHOT_SIGNAL = 'SIGWINCH';

function nodeFlagsOf(env: MemoryEnvironment): string[] {
  const flags = [...(env.nodeFlags ?? [])];
  if (env.snapshotDir !== undefined) flags.push(`--heapsnapshot-signal=${SNAPSHOT_SIGNAL}`, `--diagnostic-dir=${env.snapshotDir}`);
  return flags;
}

/**
 * Has the worker write its heap snapshot and names it after `system` and `round`: it is written on the
 * worker's main thread, so the first stats report after the signal comes once it is complete.
 */
async function snapshot(env: MemoryEnvironment, worker: WorkerProcess, reports: WorkerReport[], system: MemorySystem, round: number): Promise<void> {
  const dir = env.snapshotDir!;
  const pid = worker.child.pid!;
  const before = reports.length;
  process.kill(pid, SNAPSHOT_SIGNAL);
  const written = await waitFor(() => reports.slice(before).some((report) => report.type === 'stats'), 120_000);
  const file = readdirSync(dir).find((name) => name.includes(`.${pid}.`) && name.endsWith('.heapsnapshot'));
  if (!written || file === undefined) throw new Error(`no heap snapshot of ${system} in ${dir}`);
  renameSync(join(dir, file), join(dir, `${system.replace(/[^a-z0-9]+/g, '-')}-${round}.heapsnapshot`));
}

function peakRss(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8').split('\n').find((each) => each.startsWith('VmHWM:'))!;
  return Number(line.split(/\s+/)[1]) * 1024;
}

/** One worker of `system` in a group of its own over `streamName`, with its reports. */
async function startWorker(env: MemoryEnvironment, system: MemorySystem, streamName: string): Promise<{ reports: WorkerReport[]; worker: WorkerProcess; close: () => Promise<void> }> {
  const runId = `m${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;
  const group = `bench-${runId}`;
  if (system === 'leasehold/redis') {
    const cluster = new Cluster({
      streamName,
      kinesisEndpoint: env.kinesis.endpoint,
      region: env.kinesis.region,
      storageUrl: await prepareStorage('redis://127.0.0.1:6379', runId),
      group,
      leaseDurationMs: 3_000,
      takeIntervalMs: 500,
      shardSyncIntervalMs: 1_000,
      maxRecordsPerCall: 100,
      batchDelayMs: 0,
      idleDelayMs: 1_000,
      workerScript: env.workers.leasehold,
      nodeFlags: nodeFlagsOf(env),
      statsIntervalMs: 1_000,
    });
    const worker = await cluster.start('m1');
    return { reports: cluster.reports, worker, close: () => cluster.close() };
  }
  const flags =
    system === 'lifion-kinesis'
      ? [env.workers.lifion, '--stream', streamName, '--kinesis-endpoint', env.kinesis.endpoint, '--dynamodb-endpoint', env.dynalite.endpoint, '--table', `lifion-${runId}`, '--group', group]
      : [env.workers.plain, '--stream', streamName, '--kinesis-endpoint', env.kinesis.endpoint, '--mode', system === 'sdk-v3 idle' ? 'idle' : 'read'];
  const child = spawn(process.execPath, [...nodeFlagsOf(env), ...flags, '--worker-id', 'm1', '--stats-interval-ms', '1000'], {
    cwd: PACKAGE_DIR,
    env: { ...process.env, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true', AWS_SDK_JS_SUPPRESS_MAINTENANCE_MODE_MESSAGE: '1' },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const worker = new WorkerProcess('m1', child);
  const reports: WorkerReport[] = [];
  createInterface({ input: child.stdout }).on('line', (line) => {
    const report = parseReport(line);
    if (report !== undefined) reports.push(report);
  });
  await waitFor(() => reports.some((report) => report.type === 'ready'), 60_000, () => (worker.running ? undefined : worker.stderr));
  return { reports, worker, close: async () => void (await worker.stop(5_000)) };
}

/** One measurement: a fresh group's worker reads the stream until it handed over records of every shard. */
async function measure(env: MemoryEnvironment, system: MemorySystem, streamName: string, round: number): Promise<MemorySample | string> {
  const { reports, worker, close } = await startWorker(env, system, streamName);
  try {
    if (system === 'sdk-v3 idle') {
      // Nothing to read: as long as a reading worker takes to hold every shard and then HOLD_MS.
      await sleep(2 * (env.holdMs ?? HOLD_MS));
      const sample = { system, peakRss: peakRss(worker.child.pid!), usage: reports.findLast((report): report is StatsReport => report.type === 'stats')! };
      if (env.snapshotDir !== undefined) await snapshot(env, worker, reports, system, round);
      return sample;
    }
    const shards = new Set<string>();
    let read = 0;
    const all = await waitFor(() => {
      for (; read < reports.length; read++) {
        const report = reports[read]!;
        if (report.type === 'record') shards.add(report.shardId);
      }
      return shards.size === SHARDS;
    }, 120_000);
    if (!all) return `held ${shards.size} of ${SHARDS} shards within 120 s`;
    await sleep(env.holdMs ?? HOLD_MS);
    const usage = reports.findLast((report): report is StatsReport => report.type === 'stats');
    if (usage === undefined) return 'no stats report';
    const sample = { system, peakRss: peakRss(worker.child.pid!), usage };
    if (env.snapshotDir !== undefined) await snapshot(env, worker, reports, system, round);
    return sample;
  } finally {
    await close();
  }
}

/** `rounds` measurements of each system, taking turns, over one stream. */
export async function memoryRounds(env: MemoryEnvironment, systems: readonly MemorySystem[], rounds: number): Promise<{ samples: MemorySample[]; failures: string[] }> {
  const streamName = `bench-mem-${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;
  await createStream(env.client, streamName, SHARDS);
  await new Producer(env.client, streamName, Array.from({ length: 2_000 }, (_, i) => `key-${i}`)).put(RECORDS);
  const samples: MemorySample[] = [];
  const failures: string[] = [];
  for (let round = 0; round < rounds; round++) {
    for (const system of systems) {
      try {
        const sample = await measure(env, system, streamName, round);
        if (typeof sample === 'string') failures.push(`${system}: ${sample}`);
        else samples.push(sample);
      } catch (error) {
        failures.push(`${system}: ${((error as Error).message.split('\n')[0] ?? '').slice(0, 120)}`);
      }
    }
  }
  return { samples, failures };
}
