/**
 * One chaos run on one backend: a stream on kinesis-local, a producer writing `{ key, seq }` records the
 * whole time, a group of worker processes each reaching storage through its own TCP proxy, the monitor
 * reading storage directly, and the seeded faults injected one after the other. When the fault phase is
 * over, production stops, the run waits until every record was processed, stops the workers gracefully
 * and judges everything that was reported and read (verdict.ts).
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Cluster, type WorkerProcess } from '../cluster.js';
import { adjacentOpenShards, createStream, isOpen, kinesisClient, listShards, mergeShards, splitShard, type KinesisEndpoint } from '../kinesis.js';
import { checkLedger } from '../ledger.js';
import { Producer } from '../producer.js';
import { now, type WorkerReport } from '../reports.js';
import { openStorage, prepareStorage, type StorageKind } from '../storage-url.js';
import { startBackend, startSinkDatabase, type ChaosBackend } from './backends.js';
import { Monitor } from './monitor.js';
import { TcpProxy } from './proxy.js';
import { faultSchedule, type Fault } from './schedule.js';
import { checkSink, fencedSinkUrl, prepareSink, tallyFences, type FenceTally, type SinkCheck, type SinkMode, type SinkTarget } from '../sink.js';
import { judge, type ChaosVerdict, type WorkerFault } from './verdict.js';

export interface ChaosOptions {
  readonly backend: StorageKind;
  readonly seed: number;
  /** How long faults are injected; draining and checking come after. */
  readonly durationMs: number;
  readonly kinesis: KinesisEndpoint;
  readonly leaseDurationMs?: number;
  readonly workers?: number;
  readonly shards?: number;
  /** Records produced per second. Default 60. */
  readonly recordsPerSecond?: number;
  readonly log?: (line: string) => void;
  /**
   * Every worker writes its records into a sink table, and the run checks that the sink holds each
   * produced record exactly once (see sink.ts). `transactional`: in the lease database, in one
   * transaction with each checkpoint (postgres only). `fenced`: through `fencedWrite`, before the ordinary
   * checkpoint, into a schema of the run's PostgreSQL cluster reached through each worker's proxy (postgres
   * leases) or into a PostgreSQL cluster of its own reached directly (redis and dynamodb leases).
   */
  readonly sink?: SinkMode;
}

export interface ChaosResult {
  readonly backend: StorageKind;
  readonly seed: number;
  readonly durationMs: number;
  readonly leaseDurationMs: number;
  readonly schedule: readonly Fault[];
  readonly restartKind: string;
  readonly verdict: ChaosVerdict;
  /** Faults as they were carried out, with what they hit. */
  readonly injected: readonly string[];
  /** Workers that exited without being told to, with the end of their stderr. */
  readonly unexpectedExits: readonly string[];
  /** Whether every record was processed before the drain deadline. */
  readonly drained: boolean;
  readonly monitorReads: number;
  readonly monitorFailedReads: number;
  /** Leases the monitor read back corrupt, with the first error of each. */
  readonly corruptLeases: readonly string[];
  /** With `sink`: the mode, and the sink table as read back at the end. */
  readonly sinkMode?: SinkMode;
  readonly sink?: SinkCheck;
  /** With `sink: 'fenced'`: what the fences did. */
  readonly fences?: FenceTally;
}

interface Slot {
  readonly index: number;
  readonly proxy: TcpProxy;
  incarnation: number;
  current: WorkerProcess | undefined;
}

export async function runChaos(options: ChaosOptions): Promise<ChaosResult> {
  const log = options.log ?? (() => undefined);
  const leaseDurationMs = options.leaseDurationMs ?? 3_000;
  const workerCount = options.workers ?? 3;
  const schedule = faultSchedule(options.seed, options.durationMs, leaseDurationMs, workerCount);
  const runId = `c${options.seed.toString(36)}${randomBytes(3).toString('hex')}`;
  const streamName = `chaos-${runId}`;
  const group = `chaos-${runId}`;
  const started = Date.now();
  const stamp = (line: string): void => log(`${((Date.now() - started) / 1000).toFixed(1).padStart(6)}s  ${line}`);

  const backend: ChaosBackend = await startBackend(options.backend);
  const proxies: TcpProxy[] = [];
  const slots: Slot[] = [];
  const reports: WorkerReport[] = [];
  const faults: WorkerFault[] = [];
  const injected: string[] = [];
  const unexpectedExits: string[] = [];
  const ending = new Set<WorkerProcess>();
  const client = kinesisClient(options.kinesis);
  let monitorStorage: Awaited<ReturnType<typeof openStorage>> | undefined;
  let sink: RunSink | undefined;
  try {
    const prepared = await prepareStorage(backend.urlFor(backend.port), runId);
    if (options.sink) sink = await prepareRunSink(options.sink, options.backend, prepared, runId);
    for (let i = 0; i < workerCount; i++) proxies.push(await TcpProxy.start({ host: '127.0.0.1', port: backend.port }));
    monitorStorage = await openStorage(prepared);
    const monitor = new Monitor(monitorStorage.storage, group);
    await createStream(client, streamName, options.shards ?? 4);
    const keys = Array.from({ length: 24 }, (_, i) => `key-${String(i).padStart(2, '0')}`);
    const producer = new Producer(client, streamName, keys);

    const startWorker = async (slot: Slot): Promise<void> => {
      slot.incarnation++;
      const workerId = `w${slot.index + 1}${slot.incarnation > 1 ? `-r${slot.incarnation}` : ''}`;
      const target = sink?.target(slot.proxy.port);
      const cluster = new Cluster({
        streamName,
        kinesisEndpoint: options.kinesis.endpoint,
        region: options.kinesis.region,
        storageUrl: throughPort(prepared, slot.proxy.port),
        group,
        leaseDurationMs,
        takeIntervalMs: 500,
        shardSyncIntervalMs: 1_000,
        maxRecordsPerCall: 100,
        batchDelayMs: 20,
        ...(target ? { sink: target } : {}),
      });
      cluster.onReport((report) => reports.push(report));
      const worker = await cluster.start(workerId);
      slot.current = worker;
      void worker.exited.then(({ code, signal }) => {
        if (!ending.has(worker)) unexpectedExits.push(`${workerId} exited (code ${String(code)}, signal ${String(signal)}):\n${worker.stderr}`);
      });
    };
    for (let i = 0; i < workerCount; i++) slots.push({ index: i, proxy: proxies[i]!, incarnation: 0, current: undefined });
    await Promise.all(slots.map(startWorker));
    monitor.start();
    stamp(`${workerCount} workers started; producing ${options.recordsPerSecond ?? 60} records/s`);

    // The producer runs the whole fault phase; resharding holds it (kinesis-local answers puts racing a
    // split with errors, and a put that must be retried would break per-key order at the producer).
    let producing = true;
    let held: Promise<void> | undefined;
    let idle: (() => void) | undefined;
    const tick = 250;
    const perTick = Math.max(1, Math.round(((options.recordsPerSecond ?? 60) * tick) / 1000));
    const production = (async () => {
      while (producing) {
        if (held !== undefined) {
          idle?.();
          await held;
        }
        await producer.put(perTick);
        await sleep(tick);
      }
    })();
    const holdProducer = async <T>(work: () => Promise<T>): Promise<T> => {
      let release!: () => void;
      held = new Promise((resolve) => (release = resolve));
      await new Promise<void>((resolve) => (idle = resolve));
      try {
        return await work();
      } finally {
        held = undefined;
        idle = undefined;
        release();
      }
    };

    const inject = async (fault: Fault): Promise<void> => {
      const slot = slots[fault.slot]!;
      const worker = slot.current!;
      const note = (line: string): void => {
        injected.push(line);
        stamp(line);
      };
      switch (fault.kind) {
        case 'kill': {
          ending.add(worker);
          await worker.kill();
          faults.push({ kind: 'killed', worker: worker.workerId, at: now() });
          note(`SIGKILL ${worker.workerId} (held ${[...heldBy(reports, worker.workerId)].join(', ') || 'nothing'})`);
          await sleep(fault.holdMs);
          await startWorker(slot);
          note(`started ${slot.current!.workerId} in its place`);
          return;
        }
        case 'pause': {
          worker.child.kill('SIGSTOP');
          await sleep(20);
          faults.push({ kind: 'paused', worker: worker.workerId, at: now() });
          note(`SIGSTOP ${worker.workerId} for ${fault.holdMs} ms (lease ${leaseDurationMs} ms)`);
          await sleep(fault.holdMs);
          faults.push({ kind: 'continued', worker: worker.workerId, at: now() });
          worker.child.kill('SIGCONT');
          note(`SIGCONT ${worker.workerId}`);
          return;
        }
        case 'backend-restart': {
          if (backend.restart === undefined) {
            for (const proxy of proxies) proxy.set({ kind: 'drop' });
            await sleep(1_000);
            for (const proxy of proxies) proxy.set({ kind: 'pass' });
            note(`backend outage of 1 s for every worker (${backend.restartKind})`);
            return;
          }
          const begun = Date.now();
          await backend.restart();
          note(`backend restarted in ${Date.now() - begun} ms: ${backend.restartKind}`);
          return;
        }
        case 'cut-off':
        case 'drop':
        case 'delay': {
          const mode = fault.kind === 'cut-off' ? ({ kind: 'pause' } as const) : fault.kind === 'drop' ? ({ kind: 'drop' } as const) : ({ kind: 'delay', delayMs: fault.delayMs } as const);
          slot.proxy.set(mode);
          note(`${worker.workerId} ${fault.kind === 'cut-off' ? 'cut off from storage (bytes held)' : fault.kind === 'drop' ? 'connections to storage dropped' : `storage latency +${fault.delayMs} ms`} for ${fault.holdMs} ms`);
          await sleep(fault.holdMs);
          slot.proxy.set({ kind: 'pass' });
          note(`${worker.workerId} storage path restored`);
          return;
        }
        case 'split': {
          await holdProducer(async () => {
            const open = (await listShards(client, streamName)).filter(isOpen);
            const parent = open[fault.slot % open.length]!.ShardId!;
            const children = await splitShard(client, streamName, parent);
            note(`split ${parent} into ${children.join(' and ')}`);
          });
          return;
        }
        case 'merge': {
          await holdProducer(async () => {
            const pair = await adjacentOpenShards(client, streamName);
            if (pair === undefined) {
              note('merge skipped: no two adjacent open shards');
              return;
            }
            const child = await mergeShards(client, streamName, pair[0], pair[1]);
            note(`merged ${pair[0]} and ${pair[1]} into ${child}`);
          });
          return;
        }
      }
    };

    const faultStart = Date.now();
    for (const fault of schedule) {
      const wait = faultStart + fault.at - Date.now();
      if (wait > 0) await sleep(wait);
      await inject(fault);
    }
    const rest = faultStart + options.durationMs - Date.now();
    if (rest > 0) await sleep(rest);
    producing = false;
    idle?.();
    await production;
    stamp(`faults over; ${producer.produced.length} records produced; waiting until every record is processed`);

    const drainDeadline = Date.now() + 120_000;
    let drained = false;
    while (Date.now() < drainDeadline) {
      if (checkLedger(producer.produced, reports).lost.length === 0) {
        drained = true;
        break;
      }
      await sleep(250);
    }
    // With a sink, a record handed over by a worker that died before its commit is written by the next
    // owner, a lease duration or so later: wait for the sink too.
    let sinkCheck: SinkCheck | undefined;
    while (sink !== undefined && Date.now() < drainDeadline) {
      sinkCheck = await checkSink(sink.url, producer.produced).catch(() => undefined);
      if (sinkCheck !== undefined && sinkCheck.missing.length === 0) break;
      await sleep(500);
    }
    // A moment for late deliveries (a replay or a zombie) to show up before the workers stop.
    await sleep(1_000);
    const endAt = now();
    stamp(drained ? 'every record processed; stopping the workers gracefully' : 'records still missing after 120 s; stopping the workers');
    await Promise.all(
      slots.map(async (slot) => {
        const worker = slot.current!;
        ending.add(worker);
        await worker.stop();
      }),
    );
    await monitor.stop();
    if (sink !== undefined) sinkCheck = await checkSink(sink.url, producer.produced);
    const verdict = judge(producer.produced, reports, monitor, faults, endAt);
    return {
      backend: options.backend,
      seed: options.seed,
      durationMs: options.durationMs,
      leaseDurationMs,
      schedule,
      restartKind: backend.restartKind,
      verdict,
      injected,
      unexpectedExits,
      drained,
      monitorReads: monitor.reads,
      monitorFailedReads: monitor.failedReads,
      corruptLeases: [...monitor.corrupt.values()],
      ...(sinkCheck && options.sink ? { sinkMode: options.sink, sink: sinkCheck } : {}),
      ...(options.sink === 'fenced' ? { fences: tallyFences(reports) } : {}),
    };
  } finally {
    for (const slot of slots) {
      if (slot.current === undefined) continue;
      ending.add(slot.current);
      slot.current.child.kill('SIGCONT');
      await slot.current.kill();
    }
    await monitorStorage?.close().catch(() => undefined);
    for (const proxy of proxies) await proxy.close();
    client.destroy();
    await backend.close();
    await sink?.close();
  }
}

/** A run's sink: where the checker reads it (directly), and how each worker, behind its proxy, writes it. */
interface RunSink {
  readonly url: string;
  target(proxyPort: number): SinkTarget;
  close(): Promise<void>;
}

/**
 * Sets up the sink of a run. Transactional: the lease database. Fenced, postgres leases: a schema of the
 * run's cluster, through each worker's proxy (its faults and the restart hit the sink too). Fenced,
 * other leases: a cluster of its own, reached directly (a worker cut off from its leases still writes it).
 */
async function prepareRunSink(mode: SinkMode, kind: StorageKind, prepared: string, runId: string): Promise<RunSink> {
  if (mode === 'transactional') {
    if (kind !== 'postgres') throw new Error(`the transactional sink lives in the lease database, which must be postgres, not ${kind}`);
    await prepareSink(prepared);
    return { url: prepared, target: () => ({ mode }), close: async () => undefined };
  }
  if (kind === 'postgres') {
    const url = fencedSinkUrl(prepared, runId);
    await prepareSink(url, mode);
    return { url, target: (proxyPort) => ({ mode, url: throughPort(url, proxyPort) }), close: async () => undefined };
  }
  const database = await startSinkDatabase();
  try {
    const url = fencedSinkUrl(database.url, runId);
    await prepareSink(url, mode);
    return { url, target: () => ({ mode, url }), close: () => database.close() };
  } catch (error) {
    await database.close();
    throw error;
  }
}

/** The prepared storage URL, pointed at `port` on 127.0.0.1 instead (a worker's proxy). */
export function throughPort(prepared: string, port: number): string {
  const url = new URL(prepared);
  if (url.protocol === 'dynamodb:') {
    const endpoint = new URL(url.searchParams.get('endpoint')!);
    endpoint.port = String(port);
    url.searchParams.set('endpoint', endpoint.origin);
    return url.toString();
  }
  url.port = String(port);
  return url.toString();
}

function heldBy(reports: readonly WorkerReport[], workerId: string): Set<string> {
  const held = new Set<string>();
  for (const report of reports) {
    if (report.worker !== workerId) continue;
    if (report.type === 'started') held.add(report.shardId);
    if (report.type === 'lost' || report.type === 'handed-off' || report.type === 'ended') held.delete(report.shardId);
  }
  return held;
}
