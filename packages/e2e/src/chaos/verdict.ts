/**
 * What a chaos run proves, computed from the producer's records, every worker report, the monitor's
 * readings of storage and the log of faults the harness injected.
 *
 * - Lost, order: the shared ledger (ledger.ts).
 * - Processed twice, with a reason. The first delivery's owner lost the shard before the replay by:
 *   SIGKILL (crash replay), SIGSTOP past its lease (a paused owner is a crashed owner to the group), or a
 *   lease it lost because its heartbeats did not reach storage: it fenced itself (`self-fenced`), its
 *   membership was declared dead by another worker (`expelled`), or another worker took the lease after
 *   that (`taken`). These are the replays at-least-once allows: the owner could not checkpoint what it had
 *   processed. Any other duplicate is a failure: a
 *   replay behind a checkpoint that storage had acknowledged before the replaying owner started, a replay
 *   after a graceful handoff, stop or shard end, or a record handed over twice by one owner, unless its
 *   handler failed in between (with a sink, its write failed: the transaction rolled back, or the fence
 *   refused a zombie's write, or it may have committed and the fence keeps the retry out: a retry that
 *   writes nothing twice).
 * - Checkpoint regressions: a lease's checkpoint read lower than an earlier read of it, or lower than a
 *   checkpoint a worker reported as acknowledged before the read began.
 * - Processing after the lease was taken: a record handed over under epoch e at a moment (the report's
 *   own time stamp) later than the first sighting of an epoch above e for that shard, either in a new
 *   owner's `started` report or in the monitor's reading of storage. Every time stamp comes from the
 *   host's one clock; the first sighting is always after the take itself (a report is written after the
 *   event, a read ends after the write it returns), so the check can only err towards leniency. The margin
 *   ZOMBIE_MARGIN_MS absorbs the sub-millisecond steps between the handler being called and its report
 *   being stamped.
 * - Longest time without an owner: per shard that had been started and has not ended, the longest span
 *   with no holder, a holder being a worker that reported `started` and has not since reported losing,
 *   handing off or ending the shard, nor been killed, or paused until it is continued.
 */
import { checkLedger, type LedgerResult } from '../ledger.js';
import type { ProducedRecord } from '../producer.js';
import type { RecordReport, WorkerReport } from '../reports.js';
import { compareCheckpoints, type Monitor } from './monitor.js';

export const ZOMBIE_MARGIN_MS = 5;

/** What the harness did to a worker, by its id (each incarnation has its own id). */
export type WorkerFault =
  | { readonly kind: 'killed'; readonly worker: string; readonly at: number }
  | { readonly kind: 'paused'; readonly worker: string; readonly at: number }
  | { readonly kind: 'continued'; readonly worker: string; readonly at: number };

export interface ZombieRecord {
  readonly report: RecordReport;
  readonly higherEpoch: number;
  readonly higherSeenAt: number;
}

export interface Regression {
  readonly shardId: string;
  readonly read: string | null;
  readonly before: string | null;
  readonly why: 'read lower than an earlier read' | 'read lower than an acknowledged checkpoint';
  readonly at: number;
}

export interface ChaosVerdict {
  readonly ledger: LedgerResult;
  /** Duplicate deliveries by reason. */
  readonly duplicateReasons: ReadonlyMap<string, number>;
  /** Duplicate deliveries whose reason is not an allowed replay. */
  readonly badDuplicates: readonly { readonly report: RecordReport; readonly reason: string }[];
  readonly regressions: readonly Regression[];
  readonly zombies: readonly ZombieRecord[];
  readonly longestUnownedMs: number;
  readonly longestUnownedShard: string | undefined;
}

const SELF_FENCED = 'replay after the owner self-fenced (no heartbeat reached storage)';
const EXPELLED = 'replay after the owner was declared dead (its heartbeats had stopped)';
const TAKEN = "replay after the lease was taken (its owner's membership had lapsed)";
const RETRIED_AFTER_SINK_FAILURE = 'retry after its sink write failed (sink)';

const EXPECTED = new Set(['crash replay (SIGKILL)', 'replay after a pause past the lease (SIGSTOP)', SELF_FENCED, EXPELLED, TAKEN, RETRIED_AFTER_SINK_FAILURE]);

export function isExpectedReason(reason: string): boolean {
  return EXPECTED.has(reason);
}

export function judge(produced: readonly ProducedRecord[], reports: readonly WorkerReport[], monitor: Monitor, faults: readonly WorkerFault[], endAt: number): ChaosVerdict {
  const ledger = checkLedger(produced, reports);
  const byTime = [...reports].sort((a, b) => a.at - b.at);

  // Processed twice, with the reason.
  const duplicateReasons = new Map<string, number>();
  const badDuplicates: { report: RecordReport; reason: string }[] = [];
  for (const duplicate of ledger.duplicates) {
    const reason = duplicateReason(duplicate, ledger.firstDeliveryOf(duplicate)!, byTime, faults);
    duplicateReasons.set(reason, (duplicateReasons.get(reason) ?? 0) + 1);
    if (!isExpectedReason(reason)) badDuplicates.push({ report: duplicate, reason });
  }

  // Checkpoint regressions.
  const regressions: Regression[] = [];
  const acknowledged = byTime.filter((report): report is Extract<WorkerReport, { type: 'checkpointed' }> => report.type === 'checkpointed');
  const highestRead = new Map<string, string | null>();
  const readings = [...monitor.readings].sort((a, b) => a.readStart - b.readStart);
  for (const reading of readings) {
    const before = highestRead.get(reading.shardId);
    if (before !== undefined && compareCheckpoints(reading.checkpoint, before) < 0) {
      regressions.push({ shardId: reading.shardId, read: reading.checkpoint, before, why: 'read lower than an earlier read', at: reading.readStart });
    }
    if (before === undefined || compareCheckpoints(reading.checkpoint, before) > 0) highestRead.set(reading.shardId, reading.checkpoint);
    const acked = acknowledged.filter((report) => report.shardId === reading.shardId && report.at < reading.readStart);
    const highestAcked = acked.reduce<string | null>((high, report) => (compareCheckpoints(report.position, high) > 0 ? report.position : high), null);
    if (compareCheckpoints(reading.checkpoint, highestAcked) < 0) {
      regressions.push({ shardId: reading.shardId, read: reading.checkpoint, before: highestAcked, why: 'read lower than an acknowledged checkpoint', at: reading.readStart });
    }
  }

  // Processing after the lease was taken.
  const firstSeen = new Map<string, Map<number, number>>();
  const see = (shardId: string, epoch: number, at: number): void => {
    let epochs = firstSeen.get(shardId);
    if (epochs === undefined) firstSeen.set(shardId, (epochs = new Map<number, number>()));
    if ((epochs.get(epoch) ?? Infinity) > at) epochs.set(epoch, at);
  };
  for (const report of byTime) if (report.type === 'started') see(report.shardId, report.fencingToken, report.at);
  for (const [shardId, epochs] of monitor.epochSeen) for (const [epoch, at] of epochs) see(shardId, epoch, at);
  const zombies: ZombieRecord[] = [];
  for (const report of byTime) {
    if (report.type !== 'record') continue;
    let earliest: { epoch: number; at: number } | undefined;
    for (const [epoch, at] of firstSeen.get(report.shardId) ?? []) {
      if (epoch > report.fencingToken && (earliest === undefined || at < earliest.at)) earliest = { epoch, at };
    }
    if (earliest !== undefined && report.at > earliest.at + ZOMBIE_MARGIN_MS) zombies.push({ report, higherEpoch: earliest.epoch, higherSeenAt: earliest.at });
  }

  const unowned = longestUnowned(byTime, faults, endAt);
  return { ledger, duplicateReasons, badDuplicates, regressions, zombies, longestUnownedMs: unowned.ms, longestUnownedShard: unowned.shardId };
}

function duplicateReason(duplicate: RecordReport, first: RecordReport, byTime: readonly WorkerReport[], faults: readonly WorkerFault[]): string {
  const start = byTime.findLast((report) => report.type === 'started' && report.worker === duplicate.worker && report.shardId === duplicate.shardId && report.at <= duplicate.at);
  const behindAck = byTime.some(
    (report) =>
      report.type === 'checkpointed' &&
      report.shardId === duplicate.shardId &&
      report.at < (start?.at ?? duplicate.at) &&
      compareCheckpoints(report.position, duplicate.position) >= 0,
  );
  if (behindAck) return 'replay behind an acknowledged checkpoint';
  // How the first owner's hold on the shard ended, between the first delivery and the replay.
  const fates: { at: number; reason: string }[] = [];
  for (const fault of faults) {
    if (fault.worker !== first.worker || fault.at < first.at || fault.at > duplicate.at) continue;
    if (fault.kind === 'killed') fates.push({ at: fault.at, reason: 'crash replay (SIGKILL)' });
    if (fault.kind === 'paused') fates.push({ at: fault.at, reason: 'replay after a pause past the lease (SIGSTOP)' });
  }
  for (const report of byTime) {
    if (report.worker !== first.worker || report.at < first.at || report.at > duplicate.at) continue;
    if (report.type === 'stopped') fates.push({ at: report.at, reason: 'replay after a graceful stop' });
    // Only a sink's write makes a handler fail (the workers' handlers never throw otherwise): it rolled
    // back or the fence decides the retry, so the runtime hands the batch over again and the sink is
    // written once.
    if (report.type === 'handler-failed' && report.shardId === first.shardId) fates.push({ at: report.at, reason: RETRIED_AFTER_SINK_FAILURE });
    if (report.type !== 'lost' && report.type !== 'handed-off' && report.type !== 'ended') continue;
    if (report.shardId !== first.shardId) continue;
    if (report.type === 'handed-off') fates.push({ at: report.at, reason: 'replay after a graceful handoff' });
    if (report.type === 'ended') fates.push({ at: report.at, reason: 'replay after the shard ended' });
    if (report.type === 'lost') {
      const reason =
        report.reason === 'self-fenced'
          ? SELF_FENCED
          : report.reason === 'expelled'
            ? EXPELLED
            : report.reason === 'taken'
              ? TAKEN
              : `replay after the lease was lost (${report.reason})`;
      fates.push({ at: report.at, reason });
    }
  }
  fates.sort((a, b) => a.at - b.at);
  return fates[0]?.reason ?? 'handed over twice by one owner';
}

function longestUnowned(byTime: readonly WorkerReport[], faults: readonly WorkerFault[], endAt: number): { ms: number; shardId: string | undefined } {
  type Event = { at: number; apply: () => void };
  const holders = new Map<string, Set<string>>();
  const ended = new Set<string>();
  const emptySince = new Map<string, number>();
  let longest = { ms: 0, shardId: undefined as string | undefined };
  const held = (shardId: string): Set<string> => {
    let set = holders.get(shardId);
    if (set === undefined) holders.set(shardId, (set = new Set()));
    return set;
  };
  const remove = (shardId: string, worker: string, at: number): void => {
    const set = held(shardId);
    if (!set.delete(worker) || set.size > 0 || ended.has(shardId)) return;
    emptySince.set(shardId, at);
  };
  const add = (shardId: string, worker: string, at: number): void => {
    const since = emptySince.get(shardId);
    if (since !== undefined && at - since > longest.ms) longest = { ms: at - since, shardId };
    emptySince.delete(shardId);
    held(shardId).add(worker);
  };
  const pausedWith = new Map<string, string[]>();
  const lostSinceCont = new Set<string>();
  const events: Event[] = [];
  for (const report of byTime) {
    if (report.at > endAt) break;
    if (report.type === 'started') events.push({ at: report.at, apply: () => add(report.shardId, report.worker, report.at) });
    if (report.type === 'lost' || report.type === 'handed-off') {
      events.push({
        at: report.at,
        apply: () => {
          lostSinceCont.add(`${report.worker}\u0000${report.shardId}`);
          remove(report.shardId, report.worker, report.at);
        },
      });
    }
    if (report.type === 'ended') {
      events.push({
        at: report.at,
        apply: () => {
          ended.add(report.shardId);
          emptySince.delete(report.shardId);
          held(report.shardId).clear();
        },
      });
    }
  }
  for (const fault of faults) {
    if (fault.at > endAt) continue;
    events.push({
      at: fault.at,
      apply: () => {
        if (fault.kind === 'killed' || fault.kind === 'paused') {
          const mine = [...holders].filter(([, set]) => set.has(fault.worker)).map(([shardId]) => shardId);
          if (fault.kind === 'paused') {
            pausedWith.set(fault.worker, mine);
            for (const shardId of mine) lostSinceCont.delete(`${fault.worker}\u0000${shardId}`);
          }
          for (const shardId of mine) remove(shardId, fault.worker, fault.at);
        } else {
          // A continued worker holds again what it held, until it reports losing it.
          for (const shardId of pausedWith.get(fault.worker) ?? []) {
            if (!ended.has(shardId) && !lostSinceCont.has(`${fault.worker}\u0000${shardId}`) && held(shardId).size === 0) add(shardId, fault.worker, fault.at);
          }
        }
      },
    });
  }
  events.sort((a, b) => a.at - b.at);
  for (const event of events) event.apply();
  for (const [shardId, since] of emptySince) if (endAt - since > longest.ms) longest = { ms: endAt - since, shardId };
  return longest;
}
