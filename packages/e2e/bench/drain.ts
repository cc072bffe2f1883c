/**
 * The drain benchmarks (run.ts's `BENCH_ONLY=drain`): records per second and CPU per 1,000 records of three
 * workers draining a backlog, cold (starting on it) and in a burst (warmed up, paused while it is put),
 * beside the plain GetRecords loop in the bench process, in one fresh process, and in three fresh
 * processes (plain-processes.ts). With BENCH_CPU_PROFILE=DIR the workers run under `node --cpu-prof` and
 * each drain's span is written beside their profiles (cpu-profile-summary.ts reads them).
 */
import type { KinesisClient } from '@aws-sdk/client-kinesis';
import { spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import type { WorkerProcess } from '../src/cluster.js';
import { listShards } from '../src/kinesis.js';
import { Producer } from '../src/producer.js';
import { now, type WorkerReport } from '../src/reports.js';
import { monotonicUs, writeProfileWindow } from './cpu-profile.js';
import type { DrainResult } from './drain-rounds.js';
import type { Group, System } from './group.js';
import { readPlain, type PlainRead } from './plain-loop.js';
import { cpuMsOf, PlainFollowers, plainProcessesDrain, shareShards, type PlainTarget } from './plain-processes.js';
import { waitFor } from './wait-for.js';

export const DRAIN_RECORDS = 20_000;

/**
 * Whether every record `producer` put was handed over, read from the reports as they arrive (a full ledger
 * check every poll would cost the workers CPU): each shard's reader reached the shard's last record, and,
 * read in order, handed over everything before it.
 */
export function drainedAll(group: Group, producer: Producer): () => boolean {
  const lastOf = new Map<string, bigint>();
  for (const record of producer.produced) lastOf.set(record.shardId, BigInt(record.position) > (lastOf.get(record.shardId) ?? -1n) ? BigInt(record.position) : lastOf.get(record.shardId)!);
  const reached = new Map<string, bigint>();
  let read = 0;
  return () => {
    for (; read < group.reports.length; read++) {
      const report = group.reports[read]!;
      if (report.type !== 'record' && report.type !== 'batch') continue;
      const at = BigInt((report.type === 'record' ? report.position : report.last).split(':')[0]!);
      if (at > (reached.get(report.shardId) ?? -1n)) reached.set(report.shardId, at);
    }
    return [...lastOf].every(([shardId, last]) => (reached.get(shardId) ?? -1n) >= last);
  };
}

/** What the drains need of the bench: its emulator and client, its groups and streams. */
export interface DrainContext {
  readonly client: KinesisClient;
  readonly kinesisEndpoint: string;
  /** The e2e package's directory, the fresh processes' working directory. */
  readonly packageDir: string;
  /** The compiled plain worker (bench/plain-worker.ts), built at its first use. */
  readonly plainScript: () => string;
  readonly openGroup: (system: System, streamName: string, maxRecordsPerCall: number, options?: { leaseDurationMs?: number; report?: 'records' | 'batches' }) => Promise<Group>;
  readonly freshStream: (shards: number) => Promise<string>;
  readonly keys: (count: number) => string[];
  readonly log: (line: string) => void;
  /** BENCH_CPU_PROFILE's directory, if the workers are profiled. */
  readonly cpuProfileDir: string | undefined;
  /** Extra node flags of the workers, given to the plain loop's three fresh processes too. */
  readonly nodeFlags: readonly string[];
}

/** The cold and the burst drain over `context`. */
export function drainBenches(context: DrainContext): { drain: (system: System) => Promise<DrainResult | string>; burstDrain: (system: System) => Promise<DrainResult | string> } {
  const { client, kinesisEndpoint, packageDir, plainScript, openGroup, freshStream, keys, log, cpuProfileDir, nodeFlags } = context;

  /** The CPU time (ms) of `workers` together, so far. */
  const cpuMsOfAll = (workers: readonly WorkerProcess[]): number => workers.reduce((sum, worker) => sum + cpuMsOf(worker.child.pid!), 0);

  /**
   * The plain loop (plain-loop.ts) in the bench process, over every shard of the stream; its record count
   * checked against `expected`. A cold start is timed from its GetShardIterator calls, as the
   * consumer is from its first reader's start; a burst from the moment every iterator is in hand, as the
   * consumer (which holds its iterators) is from its resume. The empty answer that shows a shard caught up
   * is not counted: the clock stops at the last answer with records. `pace` keeps Kinesis's limit of five GetRecords a second
   * per shard, as the consumer does by default (kinesis-local does not enforce it); `unpaced` reads as fast
   * as the emulator answers, which Kinesis itself would throttle.
   */
  async function plainDrain(
    streamName: string,
    { after, expected = DRAIN_RECORDS, pace = true }: { after?: ReadonlyMap<string, string>; expected?: number; pace?: boolean } = {},
  ): Promise<PlainRead> {
    const shards = await listShards(client, streamName);
    const read = await readPlain(client, streamName, shards.map((shard) => shard.ShardId!), { after, pace });
    if (process.env.BENCH_TRACE === '1') for (const [shardId, line] of [...read.pages].sort()) log(`  plain${pace ? '' : ' unpaced'} ${shardId}: ${line.join(' ')}`);
    if (read.count !== expected) throw new Error(`the plain loop read ${read.count} of ${expected} records`);
    return read;
  }

  /**
   * With BENCH_TRACE=1, each shard's timeline of a drain, in ms from `origin`: who took it, when its reader
   * started, and when each batch (its size) was handed over.
   */
  function trace(what: string, reports: readonly WorkerReport[], origin: number): void {
    if (process.env.BENCH_TRACE !== '1') return;
    const shards = new Map<string, string[]>();
    const at = (ms: number): string => String(Math.round(ms - origin));
    for (const report of reports) {
      if (!('shardId' in report)) continue;
      const line = shards.get(report.shardId) ?? [];
      if (report.type === 'acquired') line.push(`${report.worker} took@${at(report.at)}`);
      if (report.type === 'started') line.push(`start@${at(report.at)}`);
      if (report.type === 'batch') line.push(`${report.records}@${at(report.at)}`);
      shards.set(report.shardId, line);
    }
    log(`  ${what} origin ${origin.toFixed(1)}`);
    for (const [shardId, line] of [...shards].sort()) log(`  ${what} ${shardId}: ${line.join(' ')}`);
  }

  /** When records were handed over: each record report, or each batch report (`--report batches`). */
  const handedAt = (reports: readonly WorkerReport[]): number[] => reports.filter((report) => report.type === 'record' || report.type === 'batch').map((report) => report.at);


  /** Where the plain loop's fresh processes read `streamName`. */
  const plainTarget = (streamName: string): PlainTarget => ({ script: plainScript(), streamName, endpoint: kinesisEndpoint, cwd: packageDir, nodeFlags, cpuProfileDir });

  /** The plain loop of a cold drain in a fresh process, as the consumer's workers are, over the whole stream. */
  async function freshPlainDrain(streamName: string): Promise<{ rate: number; cpuPer1k: number }> {
    const worker = plainScript();
    const output = await new Promise<string>((resolve, reject) => {
      const child = spawn(process.execPath, [worker, '--stream', streamName, '--kinesis-endpoint', kinesisEndpoint, '--mode', 'drain'], {
        cwd: packageDir,
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')));
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
      child.on('error', reject);
      child.on('exit', (code) => (code === 0 ? resolve(stdout) : reject(new Error(`the fresh plain loop exited with ${String(code)}: ${stderr.slice(0, 200)}`))));
    });
    const line = output.split('\n').find((each) => each.includes('"drained"'));
    if (line === undefined) throw new Error('the fresh plain loop reported nothing');
    const figures = JSON.parse(line) as { start: number; last: number; count: number; cpuMs: number };
    if (figures.count !== DRAIN_RECORDS) throw new Error(`the fresh plain loop read ${figures.count} of ${DRAIN_RECORDS} records`);
    return { rate: DRAIN_RECORDS / ((figures.last - figures.start) / 1000), cpuPer1k: figures.cpuMs / (DRAIN_RECORDS / 1000) };
  }

  /**
   * Waits until `drained`, reading the workers' CPU time as soon as the first reader started (or at once,
   * `from` 'now') and again when the last record was handed over, each seen within 10 ms: what the
   * workers spent on the drain, their start-up left out. Undefined when it did not end within `timeoutMs`.
   * With BENCH_CPU_PROFILE, the span is written beside the profiles (on the monotonic clock the profiles'
   * sample times are on, in microseconds), labelled `kind`.
   */
  async function drainCpu(
    group: Group,
    workers: readonly WorkerProcess[],
    drained: () => boolean,
    timeoutMs: number,
    from: 'first start' | 'now',
    kind: string,
  ): Promise<{ spent: number; fromOwnStarts: number } | undefined> {
    let atFirstStart = from === 'now' ? cpuMsOfAll(workers) : undefined;
    let startUs = from === 'now' ? monotonicUs() : undefined;
    // Each worker's CPU when its own first reader started, as each plain process's span starts at its own reads.
    const atOwnStart = new Map<string, number>();
    const deadline = Date.now() + timeoutMs;
    for (let read = 0, scanned = 0; ; ) {
      if (atFirstStart === undefined) {
        // lifion-kinesis reports no reader start: its first record stands in for it.
        for (; read < group.reports.length && atFirstStart === undefined; read++) {
          if (['started', 'record', 'batch'].includes(group.reports[read]!.type)) {
            atFirstStart = cpuMsOfAll(workers);
            startUs = monotonicUs();
          }
        }
      }
      for (; scanned < group.reports.length; scanned++) {
        const report = group.reports[scanned]!;
        const worker = workers.find((each) => each.workerId === report.worker);
        if (['started', 'record', 'batch'].includes(report.type) && worker !== undefined && !atOwnStart.has(worker.workerId)) atOwnStart.set(worker.workerId, cpuMsOf(worker.child.pid!));
      }
      if (drained()) {
        const spent = cpuMsOfAll(workers) - (atFirstStart ?? cpuMsOfAll(workers));
        const fromOwnStarts = workers.reduce((sum, worker) => sum + (atOwnStart.has(worker.workerId) ? cpuMsOf(worker.child.pid!) - atOwnStart.get(worker.workerId)! : 0), 0);
        if (cpuProfileDir !== undefined) {
          writeProfileWindow(cpuProfileDir, { kind: `${kind} drain, workers`, startUs: startUs ?? monotonicUs(), endUs: monotonicUs(), pids: workers.map((worker) => worker.child.pid!), cpuMs: spent, records: DRAIN_RECORDS });
        }
        return { spent, fromOwnStarts: from === 'now' ? spent : fromOwnStarts };
      }
      if (Date.now() > deadline) return undefined;
      await sleep(10);
    }
  }

  /** CPU ms per 1,000 records of the consumer's workers and of the plain loop (the mean of its two reads). */
  const cpuOf = (workersMs: number, before: PlainRead, after: PlainRead): Pick<DrainResult, 'cpuPer1k' | 'plainCpuPer1k'> => ({
    cpuPer1k: workersMs / (DRAIN_RECORDS / 1000),
    plainCpuPer1k: (before.cpuMs + after.cpuMs) / 2 / (DRAIN_RECORDS / 1000),
  });

  /** A burst is timed from the moment reading can begin (the consumer's resume) to the last record. */
  const burstRate = (read: PlainRead): number => DRAIN_RECORDS / ((read.last - read.from) / 1000);

  /**
   * Records per second through three workers, and through the plain loop over the same stream read just
   * before and just after them (the emulator's speed drifts as the machine's load does; the mean of the two
   * brackets the consumer's run).
   */
  async function drain(system: System): Promise<DrainResult | string> {
    const streamName = await freshStream(4);
    const producer = new Producer(client, streamName, keys(48));
    await producer.put(DRAIN_RECORDS);
    const coldRate = (read: PlainRead): number => DRAIN_RECORDS / ((read.last - read.start) / 1000);
    const freshBefore = await freshPlainDrain(streamName);
    const shares = shareShards((await listShards(client, streamName)).map((shard) => shard.ShardId!), 3);
    const processesBefore = await plainProcessesDrain(plainTarget(streamName), shares, DRAIN_RECORDS);
    const readBefore = await plainDrain(streamName);
    const plainBefore = coldRate(readBefore);
    const group = await openGroup(system, streamName, 1_000, { report: 'batches' });
    let rate: number;
    let cpuMs: number;
    let cpuFromOwnStarts: number;
    try {
      const drained = drainedAll(group, producer);
      const workers = await Promise.all(['d1', 'd2', 'd3'].map((id) => group.start(id)));
      const spent = await drainCpu(group, workers, drained, 180_000, 'first start', 'cold');
      if (spent === undefined) return 'did not drain in 180 s';
      cpuMs = spent.spent;
      cpuFromOwnStarts = spent.fromOwnStarts;
      // From the first reader's start (its GetShardIterator), as the plain loop is timed from its own;
      // lifion-kinesis reports no reader start, so it is timed from its first record (in its favour).
      const handed = handedAt(group.reports);
      const starts = group.reports.filter((report) => report.type === 'started').map((report) => report.at);
      const first = Math.min(...(starts.length > 0 ? starts : handed));
      const last = Math.max(...handed);
      rate = DRAIN_RECORDS / ((last - first) / 1000);
      trace('cold', group.reports, first);
    } finally {
      await group.close();
    }
    const readAfter = await plainDrain(streamName);
    const plainAfter = coldRate(readAfter);
    const unpaced = coldRate(await plainDrain(streamName, { pace: false }));
    const freshAfter = await freshPlainDrain(streamName);
    const processesAfter = await plainProcessesDrain(plainTarget(streamName), shares, DRAIN_RECORDS);
    const fresh = { rate: (freshBefore.rate + freshAfter.rate) / 2, cpuPer1k: (freshBefore.cpuPer1k + freshAfter.cpuPer1k) / 2 };
    const processes = { rate: (processesBefore.rate + processesAfter.rate) / 2, cpuPer1k: (processesBefore.cpuPer1k + processesAfter.cpuPer1k) / 2 };
    return { rate, plain: (plainBefore + plainAfter) / 2, unpaced, ...cpuOf(cpuMs, readBefore, readAfter), fresh, processes, cpuPer1kFromOwnStarts: cpuFromOwnStarts / (DRAIN_RECORDS / 1000) };
  }

  /** The shards each worker holds by its reports. */
  function holdings(reports: readonly WorkerReport[]): Map<string, Set<string>> {
    const held = new Map<string, Set<string>>();
    for (const report of reports) {
      if (report.type === 'started') held.set(report.worker, (held.get(report.worker) ?? new Set()).add(report.shardId));
      if (report.type === 'lost' || report.type === 'handed-off' || report.type === 'ended') held.get(report.worker)?.delete(report.shardId);
    }
    return held;
  }

  /** Each shard's last record that `producer` put. */
  function lastPositions(producer: Producer): Map<string, string> {
    const last = new Map<string, string>();
    for (const record of producer.produced) {
      const before = last.get(record.shardId);
      if (before === undefined || BigInt(record.position) > BigInt(before)) last.set(record.shardId, record.position);
    }
    return last;
  }

  // BENCH_WARM_UP_RECORDS sets the records a burst drain's workers read before the burst (default 4,000).
  const WARM_UP_RECORDS = Number(process.env.BENCH_WARM_UP_RECORDS ?? 4_000);

  /**
   * The data path without the cold start: three workers share the four shards of a stream and drain a
   * warm-up of 4,000 records (as a running consumer has, its code compiled by the JIT; the plain
   * loop reads them too), then, caught up, they are paused (SIGSTOP, with leases long enough to outlast it),
   * the records are put, the plain loop reads them, and the workers resume together (SIGCONT). Records per
   * second from the resume to the last record handed over, against the plain loop over the same records
   * just before and after. Beside the workers, the plain loop in three fresh processes (plain-processes.ts)
   * reads the same warm-up, is paused with them, and is resumed once they have drained: its CPU per record
   * over the burst is what three fresh, warmed-up, paused readers cost without Leasehold.
   */
  async function burstDrain(system: System): Promise<DrainResult | string> {
    const streamName = await freshStream(4);
    const producer = new Producer(client, streamName, keys(48));
    // Leases far longer than the pause: on a loaded machine putting the burst can take minutes.
    const group = await openGroup(system, streamName, 1_000, { leaseDurationMs: 1_800_000, report: 'batches' });
    const followers = new PlainFollowers(plainTarget(streamName), shareShards((await listShards(client, streamName)).map((shard) => shard.ShardId!), 3));
    let rate: number;
    let readBefore: PlainRead;
    let cpuMs: number;
    let warmedUp: Map<string, string>;
    let processes: { rate: number; cpuPer1k: number };
    let workers: WorkerProcess[] = [];
    try {
      workers = await Promise.all(['d1', 'd2', 'd3'].map((id) => group.start(id)));
      const settled = (): boolean => {
        const held = [...holdings(group.reports).values()].map((shards) => shards.size);
        return held.length === 3 && held.every((n) => n >= 1) && held.reduce((a, b) => a + b, 0) === 4;
      };
      if (!(await waitFor(settled, 60_000))) return 'the workers did not share the shards within 60 s';
      await producer.put(WARM_UP_RECORDS);
      if (!(await waitFor(drainedAll(group, producer), 60_000))) return 'the warm-up did not drain within 60 s';
      if (!(await waitFor(() => followers.counted === WARM_UP_RECORDS, 60_000))) return `the plain processes read ${followers.counted} of the warm-up's ${WARM_UP_RECORDS} records in 60 s`;
      warmedUp = lastPositions(producer);
      await plainDrain(streamName, { expected: WARM_UP_RECORDS });
      await sleep(2_000);
      for (const worker of workers) worker.child.kill('SIGSTOP');
      followers.pause();
      const pausedAt = now();
      try {
        await producer.put(DRAIN_RECORDS);
        readBefore = await plainDrain(streamName, { after: warmedUp });
      } finally {
        for (const worker of workers) worker.child.kill('SIGCONT');
      }
      const resumedAt = now();
      const drained = drainedAll(group, producer);
      // The workers were stopped until the resume: their CPU from here on is the burst's.
      const spent = await drainCpu(group, workers, drained, 180_000, 'now', 'burst');
      if (spent === undefined) return 'did not drain in 180 s';
      cpuMs = spent.spent;
      // A lease that moved after the resume (the pause outlasted a hold) makes this a failover, not a burst.
      const moved = group.reports.filter((report) => report.at >= resumedAt && (report.type === 'acquired' || report.type === 'lost'));
      if (moved.length > 0) return `not a burst: ${moved.length} lease moves after the resume (paused ${Math.round((resumedAt - pausedAt) / 1000)} s)`;
      rate = DRAIN_RECORDS / ((Math.max(...handedAt(group.reports)) - resumedAt) / 1000);
      trace('burst', group.reports.filter((report) => report.at >= resumedAt), resumedAt);
      // The workers paused again, the plain processes read the same burst alone.
      for (const worker of workers) worker.child.kill('SIGSTOP');
      const followersFrom = followers.cpuMs();
      const followersResumedAt = Date.now();
      const followersResumedUs = monotonicUs();
      followers.resume();
      const expected = WARM_UP_RECORDS + DRAIN_RECORDS;
      if (!(await waitFor(() => followers.counted === expected, 180_000))) return `the plain processes read ${followers.counted - WARM_UP_RECORDS} of the burst's ${DRAIN_RECORDS} records in 180 s`;
      const followersMs = followers.cpuMs() - followersFrom;
      processes = { rate: DRAIN_RECORDS / ((followers.lastAt - followersResumedAt) / 1000), cpuPer1k: followersMs / (DRAIN_RECORDS / 1000) };
      if (cpuProfileDir !== undefined) {
        writeProfileWindow(cpuProfileDir, { kind: 'burst drain, three plain processes', startUs: followersResumedUs, endUs: monotonicUs(), pids: followers.pids, cpuMs: followersMs, records: DRAIN_RECORDS });
      }
    } finally {
      for (const worker of workers) worker.child.kill('SIGCONT');
      await followers.stop();
      await group.close();
    }
    const readAfter = await plainDrain(streamName, { after: warmedUp });
    const unpaced = burstRate(await plainDrain(streamName, { after: warmedUp, pace: false }));
    return { rate, plain: (burstRate(readBefore) + burstRate(readAfter)) / 2, unpaced, ...cpuOf(cpuMs, readBefore, readAfter), processes };
  }

  return { drain, burstDrain };
}
