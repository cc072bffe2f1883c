/**
 * The scripted run that the demo shows and the end-to-end tests check: a 4-shard stream, three workers,
 * one SIGKILLed while busy, a split, a merge, one stopped gracefully, a fourth joining (a rebalance by
 * handoff), and the ledger at the end.
 */
import type { Cluster, ClusterOptions, WorkerProcess } from './cluster.js';
import { adjacentOpenShards, createStream, isOpen, listShards, mergeShards, splitShard, type KinesisEndpoint } from './kinesis.js';
import { checkLedger, type LedgerResult } from './ledger.js';
import type { Producer, ProducedRecord } from './producer.js';
import { setUpScenario } from './scenario-setup.js';
import type { WorkerReport } from './reports.js';
import type { SinkTarget } from './sink.js';
import { openStorage } from './storage-url.js';
import { applyRewind, awaitRewind, planRewind, type CheckpointStorage, type LeaderStore, type LeaseRecord, type MemberRecord, type RewindPlan, type RewindProgress } from '@leasehold/core';
import { setTimeout as sleep } from 'node:timers/promises';
import { now } from './reports.js';

/** Options of {@link runScenario}. */
export interface ScenarioOptions {
  /** A prepared storage URL (see `prepareStorage`). */
  readonly storageUrl: string;
  readonly kinesis: KinesisEndpoint;
  /** Names the stream and the group, so that runs never meet. */
  readonly runId: string;
  /** Records produced in each of the four production phases. Default 600. */
  readonly recordsPerPhase?: number;
  /** Partition keys. Default 40 (with fewer, the hash ranges of small shards may get no key at all). */
  readonly keys?: number;
  /** Lease timing and pacing of the workers. */
  readonly timing?: Partial<Pick<ClusterOptions, 'leaseDurationMs' | 'takeIntervalMs' | 'shardSyncIntervalMs' | 'maxRecordsPerCall' | 'batchDelayMs'>>;
  /** Every worker writes its records into the sink table, exactly once, in the way the target names (see sink.ts). */
  readonly sink?: SinkTarget;
  /**
   * When the busy worker is SIGKILLed: `'record'` (default) once it hands a fresh record to its handler;
   * `'sink-commit'` the moment its fenced sink reports a commit after that, so that the kill lands between
   * the sink's commit and the batch's checkpoint and the next owner reads the batch again.
   */
  readonly killAt?: 'record' | 'sink-commit';
  /**
   * Rewinds the running group to the moment before the last production phase once every record was
   * processed (`leasehold rewind --to <time> --apply`), and waits until each of those records was handed
   * over again, in order per key. Default false (the demo does it).
   */
  readonly rewind?: boolean;
  /** Hears the rewind's plan, and its progress as shards move. */
  onRewind?: (event: { plan: RewindPlan } | { progress: RewindProgress }) => void;
  /** Hears each step as it begins. */
  onStep?: (step: string) => void;
  /** Hears the producer's progress. */
  onProgress?: (done: number, count: number) => void;
  /** Called once the first workers each hold a shard (the group is balanced), before the kill. */
  onBalanced?: () => Promise<void>;
  /** Called once every record was processed (or the wait gave up), before the last workers stop. */
  onSettled?: () => Promise<void>;
  /** Called once the cluster exists, so that a caller can watch it (and end it if the run is abandoned). */
  onCluster?: (cluster: Cluster, producer: Producer) => void;
}

/** What happened to the shards of the worker that was killed. */
export interface KilledShard {
  readonly shardId: string;
  /** The killed worker's last checkpoint of the shard that it reported, or `null`. */
  readonly lastCheckpoint: string | null;
  /** The position of the last record of the shard that it handed to its handler, or `null`. */
  readonly lastDelivered: string | null;
}

/** Everything a run produced, reported and decided. */
export interface ScenarioResult {
  readonly group: string;
  readonly streamName: string;
  readonly produced: readonly ProducedRecord[];
  readonly reports: readonly WorkerReport[];
  readonly ledger: LedgerResult;
  readonly killed: { readonly workerId: string; readonly at: number; readonly shards: readonly KilledShard[] };
  readonly split: { readonly parent: string; readonly children: readonly string[] };
  readonly merge: { readonly parents: readonly [string, string]; readonly child: string };
  readonly stopped: { readonly workerId: string; readonly exitCode: number | null };
  readonly joined: { readonly workerId: string; readonly at: number };
  /** Exit codes of the workers stopped at the end (gracefully). */
  readonly finalExitCodes: Readonly<Record<string, number | null>>;
  /**
   * The rewind, when asked for: its target, when it was asked for and when every shard had moved (on the
   * reports' clock), and the records after the target that were not handed over again, or out of order.
   */
  readonly rewind?: { readonly targetMs: number; readonly askedAt: number; readonly movedAt: number; readonly notReplayed: number; readonly replayedOutOfOrder: number };
  /** The group's roster and leases as stored once every record was processed, before the last workers stopped. */
  readonly settled: { readonly members: readonly MemberRecord[]; readonly leases: readonly LeaseRecord[] };
}

const WORKERS = ['worker-1', 'worker-2', 'worker-3'];

/** Runs the scenario; every worker process is ended before it returns or throws. */
export async function runScenario(options: ScenarioOptions): Promise<ScenarioResult> {
  const step = options.onStep ?? (() => undefined);
  const perPhase = options.recordsPerPhase ?? 600;
  const keys = Array.from({ length: options.keys ?? 40 }, (_, i) => `key-${String(i).padStart(2, '0')}`);
  const streamName = `leasehold-${options.runId}`;
  const group = `group-${options.runId}`;
  const { client, producer, cluster } = setUpScenario(
    { kinesis: options.kinesis, storageUrl: options.storageUrl, streamName, group, keys },
    { shardSyncIntervalMs: 1_000, batchDelayMs: 100, ...options.timing, ...(options.sink ? { sink: options.sink } : {}) },
  );
  options.onCluster?.(cluster, producer);
  const after = (at: number, report: WorkerReport): boolean => report.at > at;
  try {
    step(`creating stream ${streamName} with 4 shards`);
    await createStream(client, streamName, 4);

    step(`producing ${perPhase} records over ${keys.length} keys`);
    await producer.put(perPhase, options.onProgress);

    step(`starting ${WORKERS.join(', ')}`);
    await Promise.all(WORKERS.map((workerId) => cluster.start(workerId)));
    await cluster.waitFor(() => WORKERS.every((workerId) => cluster.heldBy(workerId).size > 0), 'every worker to hold a shard', 120_000);
    await options.onBalanced?.();

    // The worker with the most shards dies while it is busy with fresh records.
    const victim = [...WORKERS].sort((a, b) => cluster.heldBy(b).size - cluster.heldBy(a).size)[0]!;
    step(`producing ${perPhase} more records; ${victim} will be killed with SIGKILL while it processes them`);
    const seenBefore = highestSeqs(producer.produced);
    const producing = producer.put(perPhase, options.onProgress);
    await cluster.waitFor(
      () => cluster.reports.some((report) => report.type === 'record' && report.worker === victim && report.seq > (seenBefore.get(report.key) ?? 0)),
      `${victim} to process a fresh record`,
      120_000,
    );
    if (options.killAt === 'sink-commit') {
      // The victim holds after its next commit, before the checkpoint: the kill lands between them.
      cluster.workers.get(victim)!.child.kill('SIGUSR2');
      await killOnReport(cluster, victim, (report) => report.type === 'fenced' && report.holding === true, `${victim}'s sink to commit a batch`);
    }
    const killed = await kill(cluster, victim);
    await producing;
    step(
      `${victim} killed holding ${killed.shards.map((shard) => shard.shardId).join(', ') || 'nothing'}; once its member record has not moved for ${cluster.options.leaseDurationMs} ms the others declare it dead and take its shards`,
    );
    await cluster.waitFor(
      () => killed.shards.every((shard) => cluster.reports.some((report) => report.type === 'started' && report.shardId === shard.shardId && after(killed.at, report))),
      `the shards of ${victim} to be resumed elsewhere`,
      120_000,
    );

    const toSplit = (await listShards(client, streamName)).filter(isOpen).at(-1)!.ShardId!;
    step(`splitting ${toSplit}`);
    const children = await splitShard(client, streamName, toSplit);
    step(`split ${toSplit} into ${children.join(' and ')}; producing ${perPhase} more records`);
    await producer.put(perPhase, options.onProgress);

    const pair = await adjacentOpenShards(client, streamName);
    if (pair === undefined) throw new Error(`stream ${streamName} has no two adjacent open shards to merge`);
    step(`merging ${pair[0]} and ${pair[1]}`);
    const mergedChild = await mergeShards(client, streamName, pair[0], pair[1]);
    step(`merged into ${mergedChild}`);

    const survivors = WORKERS.filter((workerId) => workerId !== victim);
    const leaving = [...survivors].sort((a, b) => cluster.heldBy(b).size - cluster.heldBy(a).size)[0]!;
    step(`stopping ${leaving} gracefully (SIGTERM): it finishes its batches, checkpoints and releases ${[...cluster.heldBy(leaving)].join(', ') || 'nothing'}`);
    const stoppedAt = Date.now();
    const releasing = cluster.heldBy(leaving);
    const exitCode = await cluster.workers.get(leaving)!.stop();
    // What it held up to its stop and did not finish (a shard that reached its end is not taken again).
    const ended = new Set(cluster.reports.flatMap((report) => (report.type === 'ended' ? [report.shardId] : [])));
    const leavingShards = [...releasing].filter((shardId) => !ended.has(shardId));
    await cluster.waitFor(
      () => leavingShards.every((shardId) => cluster.reports.some((report) => report.type === 'started' && report.shardId === shardId && report.worker !== leaving && after(stoppedAt, report))),
      `the shards released by ${leaving} to be taken`,
      120_000,
    );

    const joiner = 'worker-4';
    step(`starting ${joiner}: it takes its share by handoff (a rebalance)`);
    const joinedAt = Date.now();
    await cluster.start(joiner);
    await cluster.waitFor(
      () => cluster.reports.some((report) => report.type === 'handed-off' && report.to === joiner && after(joinedAt, report)),
      `a shard to be handed off to ${joiner}`,
      120_000,
    );

    // A quiet moment on each side of the rewind's target, so that no record arrives near it.
    let targetMs = 0;
    const lastPhaseFrom = producer.produced.length;
    if (options.rewind) {
      await sleep(1_500);
      targetMs = Date.now();
      await sleep(1_500);
    }
    step(`producing the last ${perPhase} records`);
    await producer.put(perPhase, options.onProgress);
    step('waiting until every record is processed');
    await cluster
      .waitFor(
        () => checkLedger(producer.produced, cluster.reports).lost.length === 0 && everyShardCheckpointed(producer.produced, cluster.reports),
        'every record to be processed and checkpointed',
        180_000,
      )
      .catch(() => undefined); // the ledger reports what is missing
    let rewound: ScenarioResult['rewind'];
    if (options.rewind) rewound = await rewindTo(options, group, cluster, producer.produced.slice(lastPhaseFrom), targetMs, step);
    const settled = await readSettled(options.storageUrl, group);
    await options.onSettled?.();

    const running = [...cluster.workers.values()].filter((worker) => worker.running);
    step(`stopping ${running.map((worker) => worker.workerId).join(', ')} gracefully`);
    const finalExitCodes = Object.fromEntries(
      await Promise.all(running.map(async (worker: WorkerProcess) => [worker.workerId, await worker.stop()] as const)),
    );
    return {
      group,
      streamName,
      produced: producer.produced,
      reports: cluster.reports,
      ledger: checkLedger(producer.produced, cluster.reports),
      killed,
      split: { parent: toSplit, children },
      ...(rewound ? { rewind: rewound } : {}),
      merge: { parents: pair, child: mergedChild },
      stopped: { workerId: leaving, exitCode },
      joined: { workerId: joiner, at: joinedAt },
      finalExitCodes,
      settled,
    };
  } finally {
    await cluster.close();
    client.destroy();
  }
}

/** The roster and the leases as stored now (the roster read after the leases, as workers read them). */
/**
 * Rewinds the live group to `targetMs` as `leasehold rewind --to <time> --apply` does, waits until every
 * shard moved, then until every record after the target was handed over again, and counts the replayed
 * records that came out of order per key.
 */
async function rewindTo(
  options: ScenarioOptions,
  group: string,
  cluster: Cluster,
  after: readonly ProducedRecord[],
  targetMs: number,
  step: (line: string) => void,
): Promise<NonNullable<ScenarioResult['rewind']>> {
  const opened = await openStorage(options.storageUrl);
  try {
    const storage = opened.storage as CheckpointStorage & Partial<LeaderStore>;
    step(`rewinding ${group} to ${new Date(targetMs).toISOString()} while it runs (leasehold rewind --group ${group} --to ${new Date(targetMs).toISOString()} --apply)`);
    const plan = await planRewind({ storage, group, to: { time: targetMs } });
    options.onRewind?.({ plan });
    const askedAt = now();
    const applied = await applyRewind(plan, { storage });
    const progress = await awaitRewind(applied, { storage, timeoutMs: 180_000, onProgress: (update) => options.onRewind?.({ progress: update }) });
    const movedAt = now();
    if (!progress.complete) throw new Error(`the rewind of ${group} did not move every shard within 180 s (${progress.done}/${progress.total})`);
    const replayed = (): Map<string, number[]> => {
      const byKey = new Map<string, number[]>();
      for (const report of cluster.reports) if (report.type === 'record' && report.at > askedAt) byKey.set(report.key, [...(byKey.get(report.key) ?? []), report.seq]);
      return byKey;
    };
    const missing = (): number => {
      const seen = replayed();
      return after.filter((record) => !(seen.get(record.key) ?? []).includes(record.seq)).length;
    };
    step(`every shard moved in ${Math.round(movedAt - askedAt)} ms; waiting until the ${after.length} records after the target are handed over again`);
    await cluster.waitFor(() => missing() === 0, 'every record after the rewind target to be handed over again', 180_000).catch(() => undefined);
    let outOfOrder = 0;
    for (const seqs of replayed().values()) for (let i = 1; i < seqs.length; i++) if ((seqs[i] as number) < (seqs[i - 1] as number)) outOfOrder++;
    return { targetMs, askedAt, movedAt, notReplayed: missing(), replayedOutOfOrder: outOfOrder };
  } finally {
    await opened.close();
  }
}

async function readSettled(storageUrl: string, group: string): Promise<ScenarioResult['settled']> {
  const opened = await openStorage(storageUrl);
  try {
    const { leases } = await opened.storage.listLeases(group);
    const { members } = await opened.storage.getRoster(group);
    return { members, leases };
  } finally {
    await opened.close();
  }
}

/** A position as a number; a sentinel is before every record. */
function rank(position: string): bigint {
  return /^\d/.test(position) ? BigInt(position.split(':')[0]!) : -1n;
}

/** Whether every shard with records has reached its end or been checkpointed at its last record. */
function everyShardCheckpointed(produced: readonly ProducedRecord[], reports: readonly WorkerReport[]): boolean {
  const last = new Map<string, bigint>();
  for (const record of produced) {
    const position = rank(record.position);
    if (position > (last.get(record.shardId) ?? -1n)) last.set(record.shardId, position);
  }
  const done = new Map<string, bigint>();
  for (const report of reports) {
    if (report.type === 'ended') done.set(report.shardId, 1n << 200n);
    if (report.type === 'checkpointed' && rank(report.position) > (done.get(report.shardId) ?? -1n)) done.set(report.shardId, rank(report.position));
  }
  return [...last].every(([shardId, position]) => (done.get(shardId) ?? -1n) >= position);
}

function highestSeqs(produced: readonly ProducedRecord[]): Map<string, number> {
  return new Map(produced.map((record) => [record.key, record.seq]));
}

/**
 * SIGKILLs a worker as soon as its parent reads a report of it that `matches`, from the report's own
 * listener: the worker is killed a moment after it wrote that report, not up to a polling interval later.
 */
async function killOnReport(cluster: Cluster, workerId: string, matches: (report: WorkerReport) => boolean, what: string): Promise<void> {
  const worker = cluster.workers.get(workerId)!;
  let matched = false;
  const stop = cluster.onReport((report) => {
    if (matched || report.worker !== workerId || !matches(report)) return;
    matched = true;
    worker.child.kill('SIGKILL');
  });
  try {
    await cluster.waitFor(() => matched, what, 120_000);
  } finally {
    stop();
  }
}

/** SIGKILLs a worker and notes, per shard it held, its last reported checkpoint and delivery. */
async function kill(cluster: Cluster, workerId: string): Promise<ScenarioResult['killed']> {
  await cluster.workers.get(workerId)!.kill();
  const at = Date.now();
  // Read after the kill: every report it wrote has been read once its pipes closed.
  // A shard it still believed held but that another worker started meanwhile was lost without a report
  // (a starved worker can miss its heartbeats): that shard was not the killed worker's when it died.
  const held = [...cluster.heldBy(workerId)].filter((shardId) => {
    const ownStart = cluster.reports.findLastIndex((report) => report.type === 'started' && report.worker === workerId && report.shardId === shardId);
    return !cluster.reports.some((report, i) => i > ownStart && report.type === 'started' && report.shardId === shardId && report.worker !== workerId);
  });
  const mine = cluster.reports.filter((report) => report.worker === workerId);
  const last = (shardId: string, type: 'checkpointed' | 'record'): string | null =>
    mine.findLast((report): report is Extract<WorkerReport, { position: string }> => report.type === type && report.shardId === shardId)?.position ?? null;
  return { workerId, at, shards: held.map((shardId) => ({ shardId, lastCheckpoint: last(shardId, 'checkpointed'), lastDelivered: last(shardId, 'record') })) };
}
