/**
 * Worker processes of one group, started from source with tsx and watched through their reports: the
 * piece the demo, the end-to-end tests and a chaos harness share. Every report of every worker lands in
 * one list, in the order the parent read them.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { appendFileSync } from 'node:fs';
import { parseReport, type WorkerReport } from './reports.js';
import type { SinkTarget } from './sink.js';

const PACKAGE_DIR = fileURLToPath(new URL('..', import.meta.url));
const WORKER = fileURLToPath(new URL('./worker.ts', import.meta.url));

/** What every worker of a cluster is given. */
export interface ClusterOptions {
  readonly streamName: string;
  readonly kinesisEndpoint: string;
  readonly region: string;
  /** A prepared storage URL (see `prepareStorage`). */
  readonly storageUrl: string;
  readonly group: string;
  readonly leaseDurationMs: number;
  readonly takeIntervalMs: number;
  readonly shardSyncIntervalMs: number;
  readonly maxRecordsPerCall: number;
  /** Simulated work per batch. */
  readonly batchDelayMs: number;
  /** The source's `idleDelayMs` (how often a caught-up shard is read). Default 200, so that tests see a record soon. */
  readonly idleDelayMs?: number;
  /**
   * `batches`: each worker reports one line per batch (its size and its first and last positions) instead
   * of one per record, for benchmarks that must not pay for the accounting. Default `records`.
   */
  readonly report?: 'records' | 'batches';
  /** Every worker writes its records into the sink table, in the way the target names (see sink.ts). */
  readonly sink?: SinkTarget;
  /**
   * The worker compiled to plain JavaScript (see bench/build-workers.mjs), run with `node` against the
   * packages' built dist, instead of src/worker.ts under tsx against their sources: what the memory
   * and soak benchmarks measure, since tsx's compiler would be most of what they saw.
   */
  readonly workerScript?: string;
  /** Extra flags for the worker's `node` (such as `--expose-gc`, so that a stats report is taken after a collection). */
  readonly nodeFlags?: readonly string[];
  /** With a positive value, each worker reports its memory and its runtime's bookkeeping this often (a `stats` report). */
  readonly statsIntervalMs?: number;
}

/** One worker process. */
export class WorkerProcess {
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  #stderr = '';

  constructor(
    readonly workerId: string,
    readonly child: ChildProcess,
  ) {
    // 'close' comes after the exit and the end of its pipes, so every report it wrote has been read by then.
    this.exited = new Promise((resolve) => child.once('close', (code: number | null, signal: NodeJS.Signals | null) => resolve({ code, signal })));
    child.stderr?.on('data', (chunk: Buffer) => {
      this.#stderr = (this.#stderr + chunk.toString('utf8')).slice(-4_000);
    });
  }

  /** The last few kilobytes the worker wrote to stderr. */
  get stderr(): string {
    return this.#stderr;
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** SIGKILL: the worker gets no chance to release or checkpoint anything. */
  async kill(): Promise<void> {
    if (this.running) this.child.kill('SIGKILL');
    await this.exited;
  }

  /** SIGTERM, then SIGKILL if the worker has not left within `timeoutMs`; resolves with its exit code. */
  async stop(timeoutMs = 20_000): Promise<number | null> {
    if (this.running) this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), timeoutMs);
    const { code } = await this.exited;
    clearTimeout(timer);
    return code;
  }
}

/** The worker processes of one run and everything they reported. */
export class Cluster implements AsyncDisposable {
  readonly reports: WorkerReport[] = [];
  readonly workers = new Map<string, WorkerProcess>();
  readonly #listeners = new Set<(report: WorkerReport) => void>();

  constructor(readonly options: ClusterOptions) {}

  /** Starts a worker process and waits until its consumer has started. */
  async start(workerId: string): Promise<WorkerProcess> {
    const { options } = this;
    const flags: Record<string, string | number> = {
      stream: options.streamName,
      'kinesis-endpoint': options.kinesisEndpoint,
      region: options.region,
      storage: options.storageUrl,
      group: options.group,
      'worker-id': workerId,
      'lease-duration-ms': options.leaseDurationMs,
      'take-interval-ms': options.takeIntervalMs,
      'shard-sync-interval-ms': options.shardSyncIntervalMs,
      'max-records-per-call': options.maxRecordsPerCall,
      'batch-delay-ms': options.batchDelayMs,
    };
    if (options.report) flags.report = options.report;
    if (options.idleDelayMs !== undefined) flags['idle-delay-ms'] = options.idleDelayMs;
    if (options.sink) flags.sink = options.sink.mode;
    if (options.sink?.mode === 'fenced') flags['sink-url'] = options.sink.url;
    if (options.statsIntervalMs !== undefined) flags['stats-interval-ms'] = options.statsIntervalMs;
    const argv = Object.entries(flags).flatMap(([name, value]) => [`--${name}`, String(value)]);
    const script = options.workerScript === undefined ? ['--import', 'tsx', WORKER] : [options.workerScript];
    const child = spawn(process.execPath, [...(options.nodeFlags ?? []), ...script, ...argv], {
      cwd: PACKAGE_DIR,
      env: { ...process.env, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true', TSX_TSCONFIG_PATH: `${PACKAGE_DIR}tsconfig.json` },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const worker = new WorkerProcess(workerId, child);
    this.workers.set(workerId, worker);
    createInterface({ input: child.stdout }).on('line', (line) => {
      const report = parseReport(line);
      if (report === undefined) {
        // A benchmark may keep what else a worker prints (BENCH_WORKER_OUTPUT, bench/run.ts), such as --trace-gc's lines.
        if (process.env.BENCH_WORKER_OUTPUT) appendFileSync(`${process.env.BENCH_WORKER_OUTPUT}/${workerId}-${child.pid}.txt`, `${line}\n`);
        return;
      }
      this.reports.push(report);
      for (const listener of this.#listeners) listener(report);
    });
    await this.waitFor(
      () => this.reports.some((report) => report.type === 'ready' && report.worker === workerId),
      `worker ${workerId} to start`,
      60_000,
      () => (worker.running ? undefined : `worker ${workerId} exited before it started:\n${worker.stderr}`),
    );
    return worker;
  }

  /** Calls `listener` with every report from now on; returns the function that stops it. */
  onReport(listener: (report: WorkerReport) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * Waits until `condition` holds, checking every 100 ms; throws naming `what` after `timeoutMs`, or at
   * once with the message `failure` returns when it returns one.
   */
  async waitFor(condition: () => boolean, what: string, timeoutMs: number, failure?: () => string | undefined): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!condition()) {
      const failed = failure?.();
      if (failed !== undefined) throw new Error(failed);
      if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}\n${this.describe()}`);
      await sleep(100);
    }
  }

  /**
   * What the group did lately, for a failure's message: each worker's state and the shards its reports say
   * it holds, the last lease events (takes, releases, losses, handovers, errors) with their times relative
   * to now, and the end of each worker's stderr.
   */
  describe(events = 40): string {
    const now = Date.now();
    const lines = [...this.workers.values()].map(
      (worker) => `${worker.workerId}: ${worker.running ? 'running' : 'exited'}, holds ${[...this.heldBy(worker.workerId)].join(', ') || 'nothing'}`,
    );
    const quiet = new Set<WorkerReport['type']>(['record', 'batch', 'checkpointed', 'stats', 'first-read', 'get-shard-iterator', 'list-shards', 'fenced']);
    const recent = this.reports.filter((report) => !quiet.has(report.type)).slice(-events);
    lines.push(`the last ${recent.length} lease events (seconds before now):`);
    for (const report of recent) {
      const { worker, at, type, ...rest } = report as WorkerReport & Record<string, unknown>;
      lines.push(`  -${((now - at) / 1_000).toFixed(1)} ${worker} ${type} ${JSON.stringify(rest)}`);
    }
    for (const worker of this.workers.values()) {
      const tail = worker.stderr.trim().slice(-1_000);
      if (tail !== '') lines.push(`${worker.workerId}'s stderr, its end:\n${tail}`);
    }
    return lines.join('\n');
  }

  /** The shards a worker holds according to its own reports. */
  heldBy(workerId: string): Set<string> {
    const held = new Set<string>();
    for (const report of this.reports) {
      if (report.worker !== workerId) continue;
      if (report.type === 'started') held.add(report.shardId);
      if (report.type === 'lost' || report.type === 'handed-off' || report.type === 'ended') held.delete(report.shardId);
    }
    return held;
  }

  /** Ends every worker still running: SIGTERM, SIGKILL after `timeoutMs`. */
  async close(timeoutMs = 15_000): Promise<void> {
    await Promise.all([...this.workers.values()].map((worker) => worker.stop(timeoutMs)));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
