import { compareNumericPositions } from '@leasehold/core';
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Cluster } from '../src/cluster.js';
import type { FencedReport, RecordReport, WorkerReport } from '../src/reports.js';
import { runScenario, type ScenarioResult } from '../src/scenario.js';
import { checkSink, fencedSinkUrl, prepareSink, readFences, tallyFences, type FenceRow, type FenceTally, type SinkCheck } from '../src/sink.js';
import { BACKENDS, POSTGRES, POSTGRES_URL, prepareBackend, START_POSTGRES, useKinesisLocal } from './backends.js';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';

const kinesis = useKinesisLocal();

/** Records handed to handlers, and how many distinct records were handed over more than once. */
function deliveries(result: ScenarioResult): { records: RecordReport[]; replayed: number } {
  const records = result.reports.filter((report): report is RecordReport => report.type === 'record');
  const handedOver = new Map<string, number>();
  for (const record of records) handedOver.set(`${record.shardId}/${record.position}`, (handedOver.get(`${record.shardId}/${record.position}`) ?? 0) + 1);
  return { records, replayed: [...handedOver.values()].filter((count) => count > 1).length };
}

function summary(label: string, result: ScenarioResult, sink: SinkCheck): string {
  const { records, replayed } = deliveries(result);
  return (
    `${label}: ${result.produced.length} records produced, ${records.length} handed to handlers (${replayed} more than once), ` +
    `${sink.rows} sink rows, ${sink.missing.length} missing, ${sink.duplicated.length} duplicated, ${sink.unexpected} unexpected, ${sink.tokenRegressions} token regressions, ` +
    `1 SIGKILL (${result.killed.workerId}), a split, a merge, a graceful stop and a rebalance`
  );
}

function expectExactlyOnce(result: ScenarioResult, sink: SinkCheck): void {
  expect(result.produced).toHaveLength(2_000);
  expect(sink.missing).toEqual([]);
  expect(sink.duplicated).toEqual([]);
  expect(sink.unexpected).toBe(0);
  expect(sink.rows).toBe(2_000);
}

function expectEveryFault(result: ScenarioResult): void {
  expect(result.killed.shards.length).toBeGreaterThan(0);
  expect(result.split.children).toHaveLength(2);
  expect(result.stopped.exitCode).toBe(0);
  expect(result.reports.some((report) => report.type === 'handed-off' && report.to === result.joined.workerId)).toBe(true);
  expect(Object.values(result.finalExitCodes).every((code) => code === 0)).toBe(true);
}

function expectNoTokenRegression(result: ScenarioResult, sink: SinkCheck): void {
  expect(sink.tokenRegressions).toBe(0);
  const tokens = new Set(result.reports.flatMap((report) => (report.type === 'started' ? [report.fencingToken] : [])));
  expect(tokens.size).toBeGreaterThan(1); // shards changed owners: there were later tenures to fence against
}

describe('exactly-once into a Postgres sink: worker processes on kinesis-local, leases and sink in one database', () => {
  let result: ScenarioResult;
  let sink: SinkCheck;
  let cluster: Cluster | undefined;

  beforeAll(async () => {
    const runId = `eo${Date.now().toString(36)}${randomBytes(3).toString('hex')}`;
    const storageUrl = await prepareBackend(POSTGRES, POSTGRES_URL, runId);
    await prepareSink(storageUrl);
    result = await runScenario({
      storageUrl,
      kinesis,
      runId,
      recordsPerPhase: 500,
      sink: { mode: 'transactional' },
      onCluster: (running) => {
        cluster = running;
      },
    });
    sink = await checkSink(storageUrl, result.produced);
    console.log(summary('exactly-once run (transactional)', result, sink));
  }, 600_000);

  afterAll(async () => {
    await cluster?.close(5_000);
  });

  it('the sink holds every produced record exactly once: none missing, none duplicated, nothing else', () => {
    expectExactlyOnce(result, sink);
  });

  it('went through a SIGKILL of a busy worker, a split, a merge, a graceful stop and a rebalance by handoff', () => {
    expectEveryFault(result);
  });

  it('no tenure wrote into a shard after a later tenure had: along each shard, the rows\' fencing tokens never go back', () => {
    expectNoTokenRegression(result, sink);
  });
});

for (const backend of [...BACKENDS.filter((candidate) => candidate !== POSTGRES), POSTGRES]) {
  describe(`exactly-once into a fenced Postgres sink: worker processes on kinesis-local, leases in ${backend.name}`, () => {
    let result: ScenarioResult;
    let sink: SinkCheck;
    let fences: FenceRow[];
    let tally: FenceTally;
    let cluster: Cluster | undefined;
    let opened: { url: string; close(): Promise<void> } | undefined;

    beforeAll(async () => {
      opened = await backend.open();
      const runId = `ef${Date.now().toString(36)}${randomBytes(3).toString('hex')}`;
      const storageUrl = await prepareBackend(backend, opened.url, runId);
      const sinkUrl = fencedSinkUrl(POSTGRES_URL, runId);
      await prepareSink(sinkUrl, 'fenced').catch((error: unknown) => {
        throw new Error(`the sink's postgres at ${POSTGRES_URL} cannot be used (${(error as Error).message}); start it with: ${START_POSTGRES}`, { cause: error });
      });
      result = await runScenario({
        storageUrl,
        kinesis,
        runId,
        recordsPerPhase: 500,
        sink: { mode: 'fenced', url: sinkUrl },
        killAt: 'sink-commit',
        onCluster: (running) => {
          cluster = running;
        },
      });
      sink = await checkSink(sinkUrl, result.produced);
      fences = await readFences(sinkUrl);
      tally = tallyFences(result.reports);
      console.log(
        `${summary(`exactly-once run (fenced, leases in ${backend.name})`, result, sink)}; fences: ${tally.applied} batches committed ` +
          `(${tally.trimmed} trimmed, ${tally.trimmedRecords} records kept out), ${tally.replays} replays refused, ${tally.refused} zombie writes refused`,
      );
    }, 600_000);

    afterAll(async () => {
      await cluster?.close(5_000);
      await opened?.close();
    });

    it('the sink holds every produced record exactly once: none missing, none duplicated, nothing else', () => {
      expectExactlyOnce(result, sink);
    });

    it('went through a SIGKILL of a busy worker between its sink commit and its checkpoint, a split, a merge, a graceful stop and a rebalance by handoff', () => {
      expectEveryFault(result);
      const commit = lastCommitOf(result.reports, result.killed.workerId);
      expect(commit, 'the killed worker committed a batch to the sink').toBeDefined();
      const checkpointed = result.reports.some(
        (report) => report.type === 'checkpointed' && report.worker === result.killed.workerId && report.shardId === commit!.shardId && compareNumericPositions(report.position, commit!.position) >= 0,
      );
      expect(checkpointed, `${result.killed.workerId} had not checkpointed ${commit!.shardId} at ${commit!.position} when it was killed`).toBe(false);
    });

    it('the batch the killed worker had committed but not checkpointed was read again by the next owner and kept out by the fence', () => {
      expect(deliveries(result).replayed).toBeGreaterThan(0);
      const commit = lastCommitOf(result.reports, result.killed.workerId)!;
      // The next owner reads the shard from the checkpoint before that batch: its first write that reaches
      // the batch's end is refused as a replay, or trimmed to the records after it.
      const reaching = result.reports.find(
        (report): report is FencedReport =>
          report.type === 'fenced' && report.shardId === commit.shardId && report.worker !== result.killed.workerId && report.at > result.killed.at && compareNumericPositions(report.position, commit.position) >= 0,
      );
      expect(reaching, `a later write of ${commit.shardId} reaching ${commit.position}`).toBeDefined();
      expect(reaching!.outcome === 'replay' || (reaching!.outcome === 'applied' && reaching!.written < reaching!.records), `${reaching!.outcome}: ${reaching!.written} of ${reaching!.records} written`).toBe(true);
      expect(tally.replays + tally.trimmed).toBeGreaterThan(0);
    });

    it("no tenure wrote after a later one: along each shard the rows' fencing tokens never go back, and each fence ends at its shard's last record with its last writer's token", () => {
      expectNoTokenRegression(result, sink);
      const lastProduced = new Map<string, string>();
      for (const record of result.produced) {
        const before = lastProduced.get(record.shardId);
        if (before === undefined || compareNumericPositions(record.position, before) > 0) lastProduced.set(record.shardId, record.position);
      }
      // A write applies only with a token not older than the fence's, so the fence ends with the highest token that applied.
      const lastWriter = new Map<string, number>();
      for (const report of result.reports) {
        if (report.type === 'fenced' && report.outcome === 'applied') lastWriter.set(report.shardId, Math.max(report.fencingToken, lastWriter.get(report.shardId) ?? 0));
      }
      const byShard = new Map(fences.map((fence) => [fence.shardId, fence]));
      for (const [shardId, position] of lastProduced) {
        expect(byShard.get(shardId)?.position, `the fence of ${shardId}`).toBe(position);
        expect(byShard.get(shardId)?.fencingToken, `the token of ${shardId}'s fence`).toBe(lastWriter.get(shardId));
      }
    });
  });
}

/** The last batch a worker's fenced sink committed with records: the one it was killed after. */
function lastCommitOf(reports: readonly WorkerReport[], workerId: string): FencedReport | undefined {
  return reports.findLast((report): report is FencedReport => report.type === 'fenced' && report.worker === workerId && report.outcome === 'applied' && report.written > 0);
}
