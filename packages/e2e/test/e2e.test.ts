import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Cluster } from '../src/cluster.js';
import type { RecordReport, WorkerReport } from '../src/reports.js';
import { runScenario, type ScenarioResult } from '../src/scenario.js';
import { BACKENDS, prepareBackend, useKinesisLocal } from './backends.js';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';

const kinesis = useKinesisLocal();

/** A position as a number to compare; a sentinel (`TRIM_HORIZON`) or no position at all is before every record. */
function rank(position: string | null): bigint {
  return position === null || !/^\d/.test(position) ? -1n : BigInt(position.split(':')[0]!);
}

const WORKER_IDS = ['worker-1', 'worker-2', 'worker-3', 'worker-4'];

const recordsOf = (result: ScenarioResult): RecordReport[] => result.reports.filter((report): report is RecordReport => report.type === 'record');

function reportsOf<T extends WorkerReport['type']>(result: ScenarioResult, type: T): Extract<WorkerReport, { type: T }>[] {
  return result.reports.filter((report): report is Extract<WorkerReport, { type: T }> => report.type === type);
}

/** Keys that have records in one of `before` and then in one of `after`: the ones resharding could reorder. */
function keysAcross(result: ScenarioResult, before: readonly string[], after: readonly string[]): string[] {
  const keysIn = (shards: readonly string[]): Set<string> =>
    new Set(result.produced.filter((record) => shards.includes(record.shardId)).map((record) => record.key));
  const later = keysIn(after);
  return [...keysIn(before)].filter((key) => later.has(key));
}

for (const backend of BACKENDS) {
  describe(`three worker processes on ${backend.name} against kinesis-local`, () => {
    let result: ScenarioResult;
    let cluster: Cluster | undefined;
    let opened: { url: string; close(): Promise<void> } | undefined;

    beforeAll(async () => {
      opened = await backend.open();
      const runId = `${Date.now().toString(36)}${randomBytes(3).toString('hex')}`;
      const storageUrl = await prepareBackend(backend, opened.url, runId);
      result = await runScenario({
        storageUrl,
        kinesis: { endpoint: kinesis.endpoint, region: kinesis.region },
        runId,
        recordsPerPhase: 500,
        onCluster: (running) => {
          cluster = running;
        },
      });
    }, 600_000);

    afterAll(async () => {
      // The scenario ends its workers itself; this is for a run cut short by a timeout.
      await cluster?.close(5_000);
      await opened?.close();
    });

    it('processes every produced record at least once', () => {
      expect(result.produced).toHaveLength(2_000);
      expect(result.ledger.lost).toEqual([]);
      expect(result.ledger.unexpected).toEqual([]);
      expect(result.ledger.processed).toBe(2_000);
    });

    it('holds per-key order across a split and a merge', () => {
      const ended = new Map(reportsOf(result, 'ended').map((report) => [report.shardId, [...report.childShardIds].sort()]));
      expect(ended.get(result.split.parent)).toEqual([...result.split.children].sort());
      expect(ended.get(result.merge.parents[0])).toEqual([result.merge.child]);
      expect(ended.get(result.merge.parents[1])).toEqual([result.merge.child]);
      // The order check below covers keys that moved from a parent to a child shard.
      expect(keysAcross(result, [result.split.parent], result.split.children).length).toBeGreaterThan(0);
      expect(keysAcross(result, result.merge.parents, [result.merge.child]).length).toBeGreaterThan(0);
      expect(result.ledger.orderViolations).toEqual([]);
    });

    it("resumes a SIGKILLed worker's shards on other workers from its last checkpoint", () => {
      const { killed } = result;
      expect(killed.shards.length).toBeGreaterThan(0);
      for (const shard of killed.shards) {
        const resumed = reportsOf(result, 'started').find((report) => report.shardId === shard.shardId && report.at > killed.at);
        expect(resumed, `${shard.shardId} was resumed`).toBeDefined();
        expect(resumed!.worker).not.toBe(killed.workerId);
        // It starts where storage says: at or after the last checkpoint the killed worker reported, and
        // never past the last record of the shard handed over before the kill (so nothing is skipped). That
        // record may be another worker's: the killed one may have been handed the lease at its previous
        // owner's checkpoint and died before it read anything.
        const deliveredBefore = recordsOf(result)
          .filter((record) => record.shardId === shard.shardId && record.at <= killed.at)
          .reduce((highest, record) => (rank(record.position) > highest ? rank(record.position) : highest), rank(shard.lastDelivered));
        expect(rank(resumed!.position)).toBeGreaterThanOrEqual(rank(shard.lastCheckpoint));
        expect(rank(resumed!.position)).toBeLessThanOrEqual(deliveredBefore);
        // The first record handed over after the kill is the one right after that position. Whoever hands
        // it over: a rebalance may move the lease on by a handoff before the resumer reads anything, and
        // the next owner then starts at the same stored checkpoint.
        const next = result.produced
          .filter((record) => record.shardId === shard.shardId && rank(record.position) > rank(resumed!.position))
          .sort((a, b) => (rank(a.position) < rank(b.position) ? -1 : 1))[0];
        const first = recordsOf(result)
          .filter((record) => record.shardId === shard.shardId && record.at > killed.at)
          .reduce<RecordReport | undefined>((earliest, record) => (earliest === undefined || record.at < earliest.at ? record : earliest), undefined);
        expect(first && { key: first.key, seq: first.seq }).toEqual(next && { key: next.key, seq: next.seq });
      }
    });

    it('keeps liveness in the roster: the killed worker was declared dead, the stopped one left, and every open lease names an alive incarnation', () => {
      const { members, leases } = result.settled;
      const byId = new Map(members.map((member) => [member.workerId, member]));
      // Declared dead by a worker that saw its record stand still for the lease duration (a SIGKILLed
      // worker writes nothing), or removed once dead and named by no lease.
      expect(byId.get(result.killed.workerId)?.status ?? 'dead').toBe('dead');
      expect(byId.get(result.stopped.workerId)?.status ?? 'dead').toBe('dead');
      const running = [...byId.values()].filter((member) => member.status === 'alive').map((member) => member.workerId).sort();
      expect(running).toEqual(WORKER_IDS.filter((id) => id !== result.killed.workerId && id !== result.stopped.workerId).sort());
      for (const lease of leases.filter((candidate) => candidate.checkpoint !== 'SHARD_END')) {
        const owner = lease.owner === null ? undefined : byId.get(lease.owner);
        expect(owner?.status, `${lease.leaseKey} is held by an alive member`).toBe('alive');
        expect(lease.incarnation, `${lease.leaseKey} names its owner's current incarnation`).toBe(owner?.incarnation);
      }
    });

    it('replays nothing on a graceful stop or a rebalance: every duplicate is a record the killed worker had not checkpointed', () => {
      expect(result.stopped.exitCode).toBe(0);
      expect(Object.values(result.finalExitCodes).every((code) => code === 0)).toBe(true);
      // worker-4 got its shards by handoff from a running worker, and processed records of them.
      const handedToJoiner = reportsOf(result, 'handed-off').filter((report) => report.to === result.joined.workerId);
      expect(handedToJoiner.length).toBeGreaterThan(0);
      expect(recordsOf(result).some((record) => record.worker === result.joined.workerId)).toBe(true);
      const lastCheckpoint = new Map(result.killed.shards.map((shard) => [shard.shardId, shard.lastCheckpoint]));
      const unexplained = result.ledger.duplicates.filter((duplicate) => {
        const first = result.ledger.firstDeliveryOf(duplicate)!;
        return first.worker !== result.killed.workerId || !lastCheckpoint.has(first.shardId) || rank(first.position) <= rank(lastCheckpoint.get(first.shardId) ?? null);
      });
      expect(unexplained).toEqual([]);
    });
  });
}
