/**
 * The scripted run of a rewind on a live group, for the end-to-end tests: worker processes on a 2-shard
 * stream, then two rewinds to a time while they run, one during a rebalance (a second worker joins and
 * takes its share by handoff) and one during a split (the parent still has records to read after the
 * target, and its children have more). Every record after each target must be handed over again, the
 * parent's before its children's.
 */
import { applyRewind, awaitRewind, planRewind, type RewindPlan, type RewindProgress } from '@leasehold/core';
import { setTimeout as sleep } from 'node:timers/promises';
import { createStream, isOpen, listShards, splitShard, type KinesisEndpoint } from './kinesis.js';
import { deliveriesOf } from './ledger.js';
import type { ProducedRecord } from './producer.js';
import { now, type RecordReport, type WorkerReport } from './reports.js';
import { setUpScenario } from './scenario-setup.js';
import { openStorage } from './storage-url.js';

/** Options of {@link runRewindScenario}. */
export interface RewindScenarioOptions {
  /** A prepared storage URL (see `prepareStorage`). */
  readonly storageUrl: string;
  readonly kinesis: KinesisEndpoint;
  /** Names the stream and the group, so that runs never meet. */
  readonly runId: string;
  /** Records in each production phase. Default 200. */
  readonly recordsPerPhase?: number;
  /** Hears each step as it begins. */
  readonly onStep?: (step: string) => void;
}

/** One rewind of the run. */
export interface RewindRound {
  /** The target, ms since the epoch. */
  readonly targetMs: number;
  /** When the rewind was asked for, on the clock of the reports. */
  readonly askedAt: number;
  readonly plan: RewindPlan;
  readonly progress: RewindProgress;
  /** The records produced after the target: each must be handed over again after `askedAt`. */
  readonly after: readonly ProducedRecord[];
  /** Per shard moved, ms from `askedAt` until its reader started at the new position (the `started` report). */
  readonly readingAfterMs: ReadonlyMap<string, number>;
}

/** Everything a run produced and reported. */
export interface RewindScenarioResult {
  readonly group: string;
  readonly produced: readonly ProducedRecord[];
  readonly reports: readonly WorkerReport[];
  /** `handing`: the shard worker-1 was handing over when the rewind was asked for. */
  readonly rebalance: RewindRound & { readonly handing: string };
  readonly split: RewindRound & { readonly parent: string; readonly children: readonly string[] };
}

/**
 * Per key, the last full pass over the records produced after a rewind's target, among the deliveries
 * since it was asked for: from the last delivery of the key's first such record, as many deliveries as it
 * has records. A reader that had not reached the rewind yet may hand some of them over before the pass.
 */
export function lastPass(deliveries: readonly RecordReport[], after: readonly ProducedRecord[], since: number, key: string): number[] {
  const expected = after.filter((record) => record.key === key).map((record) => record.seq);
  const seqs = deliveries.filter((report) => report.key === key && report.at >= since).map((report) => report.seq);
  const start = seqs.lastIndexOf(expected[0]!);
  return start < 0 ? [] : seqs.slice(start, start + expected.length);
}

/** Whether every key's last pass over `after` since `since` is whole and in order. */
function replayed(reports: readonly WorkerReport[], after: readonly ProducedRecord[], since: number): boolean {
  const deliveries = deliveriesOf(reports);
  return [...new Set(after.map((record) => record.key))].every((key) => {
    const expected = after.filter((record) => record.key === key).map((record) => record.seq);
    const pass = lastPass(deliveries, after, since, key);
    return pass.length === expected.length && pass.every((seq, i) => seq === expected[i]);
  });
}

const KEYS = Array.from({ length: 20 }, (_, i) => `key-${String(i).padStart(2, '0')}`);
/** The pause on each side of a target time, so that no record arrives near it (two clocks of one host). */
const GAP_MS = 1_500;

/** Runs the scenario; every worker process is ended before it returns or throws. */
export async function runRewindScenario(options: RewindScenarioOptions): Promise<RewindScenarioResult> {
  const step = options.onStep ?? (() => undefined);
  const perPhase = options.recordsPerPhase ?? 200;
  const streamName = `leasehold-rw-${options.runId}`;
  const group = `group-rw-${options.runId}`;
  const { client, producer, cluster } = setUpScenario(
    { kinesis: options.kinesis, storageUrl: options.storageUrl, streamName, group, keys: KEYS },
    {
      // One shard sync (at the election): a finished parent is not cleaned up while the test looks at it.
      shardSyncIntervalMs: 120_000,
      // Slow enough that a handover's drain is still under way when the rewind lands.
      batchDelayMs: 300,
    },
  );
  const opened = await openStorage(options.storageUrl);
  const delivered = (records: readonly ProducedRecord[], since: number): boolean => {
    const seen = new Set(deliveriesOf(cluster.reports).filter((report) => report.at >= since).map((report) => `${report.key}/${report.seq}`));
    return records.every((record) => seen.has(`${record.key}/${record.seq}`));
  };
  const round = async (targetMs: number, after: readonly ProducedRecord[]): Promise<RewindRound> => {
    const askedAt = now();
    const plan = await planRewind({ storage: opened.storage, group, to: { time: targetMs } });
    const applied = await applyRewind(plan, { storage: opened.storage });
    const progress = await awaitRewind(applied, { storage: opened.storage, timeoutMs: 180_000, pollIntervalMs: 100 });
    if (!progress.complete) throw new Error(`the rewind to ${new Date(targetMs).toISOString()} did not complete: ${JSON.stringify(progress.leases)}`);
    await cluster.waitFor(() => replayed(cluster.reports, after, askedAt), `every record after ${new Date(targetMs).toISOString()} to be handed over again, in order`, 180_000);
    const readingAfterMs = new Map<string, number>();
    for (const report of cluster.reports) {
      if (report.type !== 'started' || report.at < askedAt || report.position !== plan.to || readingAfterMs.has(report.shardId)) continue;
      readingAfterMs.set(report.shardId, report.at - askedAt);
    }
    return { targetMs, askedAt, plan, progress, after, readingAfterMs };
  };
  try {
    step(`creating stream ${streamName} with 2 shards`);
    await createStream(client, streamName, 2);
    await cluster.start('worker-1');
    await cluster.waitFor(() => cluster.heldBy('worker-1').size === 2, 'worker-1 to hold both shards', 120_000);

    step(`producing ${perPhase} records before the first target, and ${perPhase} after it`);
    await producer.put(perPhase);
    await sleep(GAP_MS);
    const firstTarget = Date.now();
    await sleep(GAP_MS);
    const beforeSecond = producer.produced.length;
    await producer.put(perPhase);
    const afterFirst = producer.produced.slice(beforeSecond);
    await cluster.waitFor(() => delivered(producer.produced, 0), 'every record to be processed', 180_000);

    step('starting worker-2, and rewinding the group to the first target as soon as worker-1 begins to hand it a shard');
    const offered = new Promise<WorkerReport>((resolve) => {
      const stop = cluster.onReport((report) => {
        if (report.type !== 'handoff-offered') return;
        stop();
        resolve(report);
      });
    });
    // Records keep coming meanwhile, so that worker-1 has a batch in flight to finish when it hands a shard over.
    let trickling = true;
    const trickle = (async () => {
      while (trickling) {
        await producer.put(10);
        await sleep(100);
      }
    })();
    // Its failure is thrown where it is awaited below; if the round throws first, the trickle stops with
    // it, and a put refused by the emulator shutting down afterwards is nobody's unhandled rejection.
    trickle.catch(() => undefined);
    let rebalance: RewindScenarioResult['rebalance'];
    try {
      await cluster.start('worker-2');
      const handing = await offered;
      rebalance = { ...(await round(firstTarget, afterFirst)), handing: handing.type === 'handoff-offered' ? handing.shardId : '' };
    } finally {
      trickling = false;
    }
    await trickle;
    await cluster.waitFor(() => delivered(producer.produced, 0), 'every record to be processed', 180_000);
    await cluster.waitFor(() => cluster.heldBy('worker-1').size === 1 && cluster.heldBy('worker-2').size === 1, 'the two workers to hold a shard each', 120_000);

    step('producing into a shard, splitting it, producing into its children, and rewinding to a time before both');
    await sleep(GAP_MS);
    const secondTarget = Date.now();
    await sleep(GAP_MS);
    const beforeThird = producer.produced.length;
    await producer.put(perPhase / 2);
    const parent = (await listShards(client, streamName)).filter(isOpen).at(-1)!.ShardId!;
    const children = await splitShard(client, streamName, parent);
    await producer.put(perPhase);
    const afterSecond = producer.produced.slice(beforeThird);
    const split = await round(secondTarget, afterSecond);
    return { group, produced: [...producer.produced], reports: [...cluster.reports], rebalance, split: { ...split, parent, children } };
  } finally {
    await cluster.close(10_000);
    await opened.close();
    client.destroy();
  }
}
