/**
 * Section 2: cold start without a change feed (10 x 1,000 and 100 x 10,000, the workers started within
 * half a take interval, one and two): the time to balanced, counted in take ticks after the last worker's
 * join tick, the acquisitions and the listings per worker, and what the listings bill on DynamoDB: the
 * read units of the Queries on the leases' partition key, and how long a partition's 3,000 strongly
 * consistent read units a second take to serve them (in virtual time a listing costs a round trip). Then
 * 100 x 10,000 with a change feed, where one member deals, its portions read by key one at a time and
 * with `getLeases`.
 */
import { advanceUntil, balanced, cluster, dispose, GROUP, TAKE_MS } from './cluster.js';
import { RENEWALS } from './before.js';
import { fmt, summarize, table, verdict, type Summary } from './shared.js';

interface ColdSample {
  /** Simulated ms from the first worker's start until balanced, or null. */
  fromFirstMs: number | null;
  /** Simulated ms from the last worker's start (its join tick) until balanced, or null. */
  fromLastJoinMs: number | null;
  acquisitions: number;
  /** Listings of the leases, per worker. */
  listings: number;
  /** DynamoDB read units billed on the leases' partition key (the group's) until balanced. */
  leaseKeyUnits: number;
}

/** A DynamoDB partition's read units a second, strongly consistent. */
const PARTITION_RCU_PER_S = 3_000;

interface FeedSample extends ColdSample {
  /** Calls that read leases by key (getLease or getLeases), all workers together. */
  readCalls: number;
  /** Leases read by key, all workers together. */
  readByKey: number;
}

async function coldStart(seed: number, workers: number, leases: number, startSpreadMs: number, feed?: { leaseReads: boolean }): Promise<FeedSample> {
  const c = await cluster(seed, workers, leases, { startSpreadMs, coordinator: { useChangeFeed: feed !== undefined }, meter: true, leaseReads: feed?.leaseReads === true });
  try {
    const ms = await advanceUntil(c.scheduler, () => c.workers.length === workers && balanced(c), { stepMs: 100, precise: false, capMs: 10 * 60_000 });
    const first = Math.min(...c.workers.map((worker) => worker.startedAt));
    const last = Math.max(...c.workers.map((worker) => worker.startedAt));
    return {
      fromFirstMs: ms === null ? null : ms - first,
      fromLastJoinMs: ms === null ? null : ms - last,
      acquisitions: c.workers.reduce((sum, worker) => sum + worker.acquisitions, 0),
      listings: c.workers.reduce((sum, worker) => sum + (worker.storage.counts.calls.listLeases ?? 0), 0) / workers,
      leaseKeyUnits: c.workers.reduce((sum, worker) => sum + (worker.storage.meter?.usage.byPartition.get(GROUP)?.rru ?? 0), 0),
      readCalls: c.workers.reduce((sum, worker) => sum + (worker.storage.counts.calls.getLease ?? 0) + (worker.storage.counts.calls.getLeases ?? 0), 0),
      readByKey: c.workers.reduce((sum, worker) => sum + (worker.storage.counts.itemsReadBy.getLease ?? 0) + (worker.storage.counts.itemsReadBy.getLeases ?? 0), 0),
    };
  } finally {
    dispose(c);
  }
}

/** Within 3 take ticks after the join tick: 3 take intervals at their longest jitter (+5%), plus a round trip. */
const COLD_LIMIT_MS = 3 * TAKE_MS * 1.05 + 40;

export interface ColdResult {
  workers: number;
  leases: number;
  startSpreadMs: number;
  seeds: number;
  fromFirst: Summary;
  fromLastJoin: Summary;
  acquisitions: Summary;
  listings: Summary;
  leaseKeyUnits: Summary;
  pass: boolean;
  samples: ColdSample[];
  /** Set for a run with a change feed: whether the store read many leases by key in one call. */
  feed?: { leaseReads: boolean };
}

export async function coldSection(seedCount: number): Promise<ColdResult[]> {
  const results: ColdResult[] = [];
  const cases = [
    { workers: 10, leases: 1_000, seeds: seedCount },
    { workers: 100, leases: 10_000, seeds: Math.max(2, Math.ceil(seedCount / 20)) },
  ];
  // Started together (within half a take interval), spread over one take interval, and over two (as the
  // other scenarios start).
  for (const startSpreadMs of [TAKE_MS / 2, TAKE_MS, 2 * TAKE_MS]) {
    for (const { workers, leases, seeds } of cases) {
      const samples: ColdSample[] = [];
      for (let seed = 1; seed <= seeds; seed++) samples.push(await coldStart(3_000_000 + seed, workers, leases, startSpreadMs));
      const fromLastJoin = summarize(samples.map((s) => s.fromLastJoinMs));
      const acquisitions = summarize(samples.map((s) => s.acquisitions));
      results.push({
        workers,
        leases,
        startSpreadMs,
        seeds,
        fromFirst: summarize(samples.map((s) => s.fromFirstMs)),
        fromLastJoin,
        acquisitions,
        listings: summarize(samples.map((s) => s.listings)),
        leaseKeyUnits: summarize(samples.map((s) => s.leaseKeyUnits)),
        pass: fromLastJoin.failures === 0 && fromLastJoin.max <= COLD_LIMIT_MS && acquisitions.max <= 1.05 * leases,
        samples,
      });
    }
  }
  console.log(`\n2. cold start without a change feed (useChangeFeed: false): every lease held, max - min <= 1`);
  console.log(`   target: within 3 take ticks after the join tick (${fmt(COLD_LIMIT_MS / 1_000, 2)} s after the last worker's join, jitter and a round trip included), acquisitions <= 1.05 x leases`);
  console.log(`   before (main, 10 x 1,000): balanced after ${RENEWALS.coldStart10x1000.seconds} s with ${RENEWALS.coldStart10x1000.acquisitions.toLocaleString('en')} acquisitions`);
  table(
    ['shape', 'starts within', 'seeds', 's after first start p50/max', 's after last join p50/max', 'take ticks (max)', 'acquisitions p50/max', 'x leases (max)', 'listings/worker max', "leases' key RCU max", `s at ${PARTITION_RCU_PER_S.toLocaleString('en')} RCU/s`, ''],
    results.map((r) => [
      `${r.workers} x ${r.leases.toLocaleString('en')}`,
      `${fmt(r.startSpreadMs / 1_000, 1)} s`,
      String(r.seeds),
      `${fmt(r.fromFirst.p50 / 1_000)} / ${fmt(r.fromFirst.max / 1_000)}`,
      `${fmt(r.fromLastJoin.p50 / 1_000)} / ${fmt(r.fromLastJoin.max / 1_000)}` + (r.fromLastJoin.failures > 0 ? ` (${r.fromLastJoin.failures} never)` : ''),
      fmt(r.fromLastJoin.max / TAKE_MS, 1),
      `${fmt(r.acquisitions.p50, 0)} / ${fmt(r.acquisitions.max, 0)}`,
      fmt(r.acquisitions.max / r.leases, 3),
      fmt(r.listings.max, 2),
      fmt(r.leaseKeyUnits.max, 0),
      fmt(r.leaseKeyUnits.max / PARTITION_RCU_PER_S, 1),
      verdict(r.pass),
    ]),
  );
  // With a change feed, one member deals a large group's cold start and the others read their portions by
  // key: one getLease each, or 100 a call with getLeases. One seed each: the memory store's feed delivers
  // every handover to every member through virtual time, about 17 s of wall time a run.
  const fed: Array<{ leaseReads: boolean; sample: FeedSample; pass: boolean }> = [];
  for (const leaseReads of [false, true]) {
    const sample = await coldStart(3_000_001, 100, 10_000, TAKE_MS / 2, { leaseReads });
    fed.push({ leaseReads, sample, pass: sample.fromLastJoinMs !== null && sample.fromLastJoinMs <= COLD_LIMIT_MS && sample.acquisitions <= 1.05 * 10_000 });
  }
  console.log(`\n   with a change feed (one member deals; 100 x 10,000, started within ${fmt(TAKE_MS / 2_000, 1)} s, seed 3,000,001): the others read their portions by key`);
  table(
    ['reads by key', 's after last join', 'take ticks', 'acquisitions', 'listings in all', 'calls reading by key', 'leases read by key', ''],
    fed.map(({ leaseReads, sample, pass }) => [
      leaseReads ? 'getLeases, 100 a call' : 'getLease, one each',
      sample.fromLastJoinMs === null ? 'never' : fmt(sample.fromLastJoinMs / 1_000),
      sample.fromLastJoinMs === null ? '-' : fmt(sample.fromLastJoinMs / TAKE_MS, 2),
      sample.acquisitions.toLocaleString('en'),
      fmt(sample.listings * 100, 0),
      sample.readCalls.toLocaleString('en'),
      sample.readByKey.toLocaleString('en'),
      verdict(pass),
    ]),
  );
  for (const { leaseReads, sample, pass } of fed) {
    results.push({
      workers: 100,
      leases: 10_000,
      startSpreadMs: TAKE_MS / 2,
      seeds: 1,
      fromFirst: summarize([sample.fromFirstMs]),
      fromLastJoin: summarize([sample.fromLastJoinMs]),
      acquisitions: summarize([sample.acquisitions]),
      listings: summarize([sample.listings]),
      leaseKeyUnits: summarize([sample.leaseKeyUnits]),
      pass,
      samples: [sample],
      feed: { leaseReads },
    });
  }
  return results;
}
