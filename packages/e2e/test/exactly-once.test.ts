import { startKinesisLocal, type RunningKinesisLocal } from '@leasehold/local-stack';
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Cluster } from '../src/cluster.js';
import type { RecordReport } from '../src/reports.js';
import { runScenario, type ScenarioResult } from '../src/scenario.js';
import { checkSink, prepareSink, type SinkCheck } from '../src/sink.js';
import { prepareStorage } from '../src/storage-url.js';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';

const POSTGRES = 'postgres://root@127.0.0.1:5432/test';
const START_POSTGRES = 'pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start';

let kinesis: RunningKinesisLocal;
beforeAll(async () => {
  try {
    kinesis = await startKinesisLocal();
  } catch (error) {
    throw new Error(`kinesis-local could not be started; try it by hand with "npx kinesis-local" in packages/local-stack: ${(error as Error).message}`, { cause: error });
  }
});
afterAll(async () => {
  await kinesis?.close();
});

describe('exactly-once into a Postgres sink: worker processes on kinesis-local, leases and sink in one database', () => {
  let result: ScenarioResult;
  let sink: SinkCheck;
  let cluster: Cluster | undefined;

  beforeAll(async () => {
    const runId = `eo${Date.now().toString(36)}${randomBytes(3).toString('hex')}`;
    const storageUrl = await prepareStorage(POSTGRES, runId).catch((error: unknown) => {
      throw new Error(`postgres at ${POSTGRES} cannot be used (${(error as Error).message}); start it with: ${START_POSTGRES}`, { cause: error });
    });
    await prepareSink(storageUrl);
    result = await runScenario({
      storageUrl,
      kinesis: { endpoint: kinesis.endpoint, region: kinesis.region },
      runId,
      recordsPerPhase: 500,
      sink: true,
      onCluster: (running) => {
        cluster = running;
      },
    });
    sink = await checkSink(storageUrl, result.produced);
    const records = result.reports.filter((report): report is RecordReport => report.type === 'record');
    const handedOver = new Map<string, number>();
    for (const record of records) handedOver.set(`${record.shardId}/${record.position}`, (handedOver.get(`${record.shardId}/${record.position}`) ?? 0) + 1);
    const replayed = [...handedOver.values()].filter((count) => count > 1).length;
    console.log(
      `exactly-once run: ${result.produced.length} records produced, ${records.length} handed to handlers (${replayed} more than once), ` +
        `${sink.rows} sink rows, ${sink.missing.length} missing, ${sink.duplicated.length} duplicated, ${sink.tokenRegressions} token regressions, 1 SIGKILL (${result.killed.workerId}), a split, a merge, a graceful stop and a rebalance`,
    );
  }, 240_000);

  afterAll(async () => {
    await cluster?.close(5_000);
  });

  it('the sink holds every produced record exactly once: none missing, none duplicated, nothing else', () => {
    expect(result.produced).toHaveLength(2_000);
    expect(sink.missing).toEqual([]);
    expect(sink.duplicated).toEqual([]);
    expect(sink.unexpected).toBe(0);
    expect(sink.rows).toBe(2_000);
  });

  it('went through a SIGKILL of a busy worker, a split, a merge, a graceful stop and a rebalance by handoff', () => {
    expect(result.killed.shards.length).toBeGreaterThan(0);
    expect(result.split.children).toHaveLength(2);
    expect(result.stopped.exitCode).toBe(0);
    expect(result.reports.some((report) => report.type === 'handed-off' && report.to === result.joined.workerId)).toBe(true);
    expect(Object.values(result.finalExitCodes).every((code) => code === 0)).toBe(true);
  });

  it('no tenure wrote into a shard after a later tenure had: along each shard, the rows\' fencing tokens never go back', () => {
    expect(sink.tokenRegressions).toBe(0);
    const tokens = new Set(result.reports.flatMap((report) => (report.type === 'started' ? [report.fencingToken] : [])));
    expect(tokens.size).toBeGreaterThan(1); // shards changed owners: there were later tenures to fence against
  });
});
