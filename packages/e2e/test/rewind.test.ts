import { randomBytes } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { checkLedger, deliveriesOf } from '../src/ledger.js';
import { lastPass, runRewindScenario, type RewindRound, type RewindScenarioResult } from '../src/rewind-scenario.js';
import { BACKENDS, prepareBackend, useKinesisLocal } from './backends.js';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';

const kinesis = useKinesisLocal();

function expectReplayedInOrder(result: RewindScenarioResult, round: RewindRound): void {
  const deliveries = deliveriesOf(result.reports);
  const keys = [...new Set(round.after.map((record) => record.key))];
  expect(keys.length).toBeGreaterThan(10);
  for (const key of keys) {
    const expected = round.after.filter((record) => record.key === key).map((record) => record.seq);
    expect(lastPass(deliveries, round.after, round.askedAt, key), key).toEqual(expected);
  }
}

for (const backend of BACKENDS) {
  describe(`a rewind of a live group on ${backend.name} against kinesis-local`, () => {
    let result: RewindScenarioResult;

    beforeAll(async () => {
      const opened = await backend.open();
      try {
        const runId = `${Date.now().toString(36)}${randomBytes(3).toString('hex')}`;
        const storageUrl = await prepareBackend(backend, opened.url, runId);
        result = await runRewindScenario({ storageUrl, kinesis: { endpoint: kinesis.endpoint, region: kinesis.region }, runId });
      } finally {
        await opened.close();
      }
      for (const [name, round] of [['rebalance', result.rebalance], ['split', result.split]] as const) {
        const figures = [...round.readingAfterMs].map(([shardId, ms]) => `${shardId} ${Math.round(ms)} ms`).join(', ');
        const applied = round.progress.leases.map((lease) => `${lease.leaseKey} ${lease.how} ${Math.round(lease.appliedAfterMs ?? NaN)} ms`).join(', ');
        const until = name === 'rebalance' ? result.split.askedAt : Infinity;
        const who = result.reports.flatMap((report) => (report.type === 'rewound' && report.at >= round.askedAt && report.at < until ? [`${report.worker}:${report.shardId}`] : []));
        console.log(`${backend.name}, rewind during a ${name}: reading at the target after ${figures}; applied after ${applied}; applied by ${who.join(', ')}`);
      }
    }, 600_000);

    it('loses nothing and keeps the first deliveries of every key in order', () => {
      const ledger = checkLedger(result.produced, result.reports);
      expect(ledger.lost).toEqual([]);
      expect(ledger.unexpected).toEqual([]);
      expect(ledger.orderViolations).toEqual([]);
    });

    it('during a rebalance: every record after the target time is handed over again, each key in order, and the records before it are not', () => {
      const { rebalance } = result;
      expect(rebalance.plan.moves).toHaveLength(2);
      expectReplayedInOrder(result, rebalance);
      const before = new Set(result.produced.slice(0, 200).map((record) => `${record.key}/${record.seq}`));
      const replayed = deliveriesOf(result.reports).filter((report) => report.at >= rebalance.askedAt && before.has(`${report.key}/${report.seq}`));
      expect(replayed).toEqual([]);
      // Both shards read again from the target, whoever held them when the rewind was applied.
      expect([...rebalance.readingAfterMs.keys()].sort()).toEqual(rebalance.plan.moves.map((move) => move.leaseKey).sort());
      // The shard worker-1 was handing over moved once: by worker-1 before the handover, or by worker-2
      // after it; and when the handover landed after the rewind was asked for, worker-2 applied the
      // request it came with before reading anything, or, told of the handover by the change feed before
      // the tool's request landed on the lease, read from the checkpoint and then applied it as the owner.
      const during = result.reports.filter((report) => report.at >= rebalance.askedAt && report.at < result.split.askedAt);
      const rewound = during.filter((report) => report.type === 'rewound' && report.shardId === rebalance.handing);
      expect(rewound).toHaveLength(1);
      const handedAfter = during.some((report) => report.type === 'handed-off' && report.shardId === rebalance.handing);
      if (handedAfter && rewound[0]?.worker === 'worker-2') {
        const startedThere = during.filter((report) => report.type === 'started' && report.worker === 'worker-2' && report.shardId === rebalance.handing);
        const positions = startedThere.map((report) => (report.type === 'started' ? report.position : undefined));
        expect(positions.at(-1)).toBe(rebalance.plan.to);
        expect(positions.length).toBeLessThanOrEqual(2);
        if (positions.length === 2) expect(startedThere[0]!.at).toBeLessThanOrEqual(rewound[0].at);
      }
      console.log(`the rewind reached the shard on its way to worker-2 ${handedAfter ? `during its handover, applied by ${rewound[0]?.worker}` : 'after its handover'}`);
    });

    it("during a split: the parent's records after the target are handed over again before its children's, each key in order", () => {
      const { split } = result;
      // The parent moves; its children move too when their leases exist already (the parent's reader
      // reached its end before the rewind), or are created later and read after it.
      const moved = split.plan.moves.map((move) => move.leaseKey);
      expect(moved).toContain(split.parent);
      for (const child of split.children.filter((key) => moved.includes(key))) {
        expect(split.plan.moves.find((move) => move.leaseKey === child)?.descendantOf).toBe(split.parent);
      }
      expectReplayedInOrder(result, split);
      // While the parent is read again (from its start at the target to its last record), no child is read.
      const deliveries = deliveriesOf(result.reports).filter((report) => report.at >= split.askedAt);
      const parentFrom = split.askedAt + split.readingAfterMs.get(split.parent)!;
      const parentTo = deliveries.findLast((report) => report.shardId === split.parent)!.at;
      const overlapping = deliveries.filter((report) => split.children.includes(report.shardId) && report.at >= parentFrom && report.at <= parentTo);
      expect(overlapping).toEqual([]);
    });
  });
}
