/**
 * Section 7: a rolling restart, as a deploy makes one: 100 workers over 10,000 leases with worker ids as
 * long as a cloud host's, without a change feed (DynamoDB) and with one, billed as each backend would (`meter.ts`).
 * Every `everyMs` the longest-running worker stops gracefully and a worker under a new id joins, for the
 * window; beside it, in the same run and from the same seed, the same window with nobody restarting. The
 * steady figures of section 1 say what membership costs when nothing moves; this says what it costs while
 * the roster moves all the time, where every move of the digest has every worker read the whole roster.
 */
import { advanceUntil, balanced, cluster, dispose, GROUP, TAKE_MS, type Cluster } from './cluster.js';
import { addUsage, emptyUsage, hottestPartition, PARTITION_RCU, totalOf } from './meter.js';
import { memberBucketKeys } from './roster-size.js';
import { REAL_ID } from './steady.js';
import { fmt, kb, now, since, summarize, table, tookText, type Took } from './shared.js';

export interface ChurnRun {
  /** `steady` (nobody restarts) or `rolling` (one restart every `everyMs`). */
  mode: 'steady' | 'rolling';
  /** Whether the store had a change feed (Redis, PostgreSQL) or not (DynamoDB). */
  useChangeFeed: boolean;
  /**
   * Whether the store said whom each move of the digest named (`getRosterMoves`): a move read as those
   * members; `'dynamodb'`: as a DynamoDB adapter keeping them in slots would answer (no names past its last
   * whole read's cost; README, "Moves read by name on DynamoDB").
   */
  rosterMoves: boolean | 'dynamodb';
  workers: number;
  leases: number;
  everyMs: number | null;
  windowMs: number;
  restarts: number;
  /** Per live worker per second, over the window: items read, DynamoDB bytes read, whole roster reads. */
  itemsReadPerWorkerSecond: number;
  /** Of them, members read by id (the watched few, the moves' members). */
  membersByIdPerWorkerSecond: number;
  /** Bytes of stored JSON read per live worker per second, as Redis and Postgres move them. */
  redisBytesReadPerWorkerSecond: number;
  dynamodbBytesReadPerWorkerSecond: number;
  rosterReadsPerWorkerMinute: number;
  listingsPerWorkerMinute: number;
  /** Group-wide DynamoDB read units a second, and the members' partition keys' share of them. */
  rcuPerSecond: number;
  membersRcuPerSecond: number;
  /** The busiest partition key: its name, read units a second, and its share of one partition's limits. */
  hottestPartition: string;
  hottestRcuPerSecond: number;
  hottestShare: number;
  /** A member item as DynamoDB bills it, at the window's end (real worker ids). */
  meanMemberItemBytes: number;
  /** Whether the group was balanced at the window's end, or within 30 s of it. */
  balancedAtEnd: boolean;
  took: Took;
}

/** How long after balancing the window begins. */
const SETTLE_MS = 60_000;

async function run(mode: ChurnRun['mode'], useChangeFeed: boolean, rosterMoves: boolean | 'dynamodb', seed: number, everyMs: number, windowMs: number, [workers, leases] = [100, 10_000]): Promise<ChurnRun> {
  const started = now();
  const c: Cluster = await cluster(seed, workers, leases, { startSpreadMs: TAKE_MS / 2, workerId: REAL_ID, meter: true, rosterMoves, coordinator: { useChangeFeed } });
  try {
    const ready = await advanceUntil(c.scheduler, () => c.workers.length === workers && balanced(c), { precise: false, capMs: 30 * 60_000 });
    if (ready === null) throw new Error(`churn (${mode}): ${workers} x ${leases} never balanced`);
    await c.scheduler.advance(SETTLE_MS);
    for (const worker of c.workers) worker.storage.meter!.usage = emptyUsage();
    const counted = new Set(c.workers);
    const itemsBefore = new Map(c.workers.map((worker) => [worker, worker.storage.counts.itemsRead]));
    const membersByIdBefore = new Map(c.workers.map((worker) => [worker, worker.storage.counts.itemsReadBy.getMembers ?? 0]));
    const callsBefore = new Map(c.workers.map((worker) => [worker, { ...worker.storage.counts.calls }]));
    let restarts = 0;
    let elapsed = 0;
    while (elapsed < windowMs) {
      const step = Math.min(everyMs, windowMs - elapsed);
      if (mode === 'rolling') {
        const leaving = c.live()[0]!;
        leaving.alive = false;
        void leaving.coordinator.stop();
        counted.add(c.add());
        restarts++;
      }
      await c.scheduler.advance(step);
      elapsed += step;
    }
    const seconds = windowMs / 1_000;
    const workerSeconds = workers * seconds;
    const all = [...counted];
    const usage = all.reduce((sum, worker) => addUsage(sum, worker.storage.meter!.usage), emptyUsage());
    const total = totalOf(usage);
    const itemsRead = all.reduce((sum, worker) => sum + worker.storage.counts.itemsRead - (itemsBefore.get(worker) ?? 0), 0);
    const membersById = all.reduce((sum, worker) => sum + (worker.storage.counts.itemsReadBy.getMembers ?? 0) - (membersByIdBefore.get(worker) ?? 0), 0);
    const calls = (name: string): number => all.reduce((sum, worker) => sum + (worker.storage.counts.calls[name] ?? 0) - (callsBefore.get(worker)?.[name] ?? 0), 0);
    const memberKeys = new Set(memberBucketKeys(GROUP));
    let membersRru = 0;
    for (const [partition, load] of usage.byPartition) if (memberKeys.has(partition)) membersRru += load.rru;
    const hottest = hottestPartition(usage, seconds);
    const balancedAtEnd = (await advanceUntil(c.scheduler, () => balanced(c), { precise: false, capMs: 30_000 })) !== null;
    return {
      mode,
      useChangeFeed,
      rosterMoves,
      workers,
      leases,
      everyMs: mode === 'rolling' ? everyMs : null,
      windowMs,
      restarts,
      itemsReadPerWorkerSecond: itemsRead / workerSeconds,
      membersByIdPerWorkerSecond: membersById / workerSeconds,
      redisBytesReadPerWorkerSecond: total.read.redis / workerSeconds,
      dynamodbBytesReadPerWorkerSecond: total.read.dynamodb / workerSeconds,
      rosterReadsPerWorkerMinute: calls('getRoster') / workers / (seconds / 60),
      listingsPerWorkerMinute: calls('listLeases') / workers / (seconds / 60),
      rcuPerSecond: total.rru / seconds,
      membersRcuPerSecond: membersRru / seconds,
      hottestPartition: hottest?.partition ?? '-',
      hottestRcuPerSecond: (hottest?.load.rru ?? 0) / seconds,
      hottestShare: hottest?.share ?? 0,
      meanMemberItemBytes: c.ledger.rosterQuery().bytes / c.ledger.liveMembers,
      balancedAtEnd,
      took: since(started),
    };
  } finally {
    dispose(c);
  }
}

function movesText(r: ChurnRun): string {
  if (r.rosterMoves === false) return '';
  return r.rosterMoves === true ? ', moves read by name' : ', moves kept in DynamoDB slots';
}

/**
 * The rolling restart beside the steady window, and what the same rates come to at 1,000 workers where
 * every worker reads the whole roster of 1,000 at each move of the digest (arithmetic, not run).
 */
export async function churnSection(
  seed = 1,
  everyMs = 6_000,
  windowMs = 3 * 60_000,
  larger: { workers: number; windowMs: number } | null = null,
  spreadSeeds = 0,
): Promise<{ runs: ChurnRun[]; fleet: Record<string, number>; fast: ChurnRun[]; largerRuns: ChurnRun[]; spread: ChurnRun[] }> {
  const runs = [
    await run('steady', false, false, seed, everyMs, windowMs),
    await run('rolling', false, false, seed, everyMs, windowMs),
    await run('rolling', true, false, seed, everyMs, windowMs),
    await run('rolling', false, true, seed, everyMs, windowMs),
    await run('rolling', true, true, seed, everyMs, windowMs),
    await run('rolling', false, 'dynamodb', seed, everyMs, windowMs),
  ];
  console.log(`\nA rolling restart of 100 x 10,000, one graceful stop and one join under a new id every ${everyMs / 1_000} s for ${windowMs / 60_000} simulated minutes, beside the same window with nobody restarting (real worker ids; billed as DynamoDB bills them):`);
  table(
    ['', 'items read / worker / s', 'of them members by id', 'Redis / Postgres JSON bytes read / worker / s', 'DynamoDB bytes read / worker / s', 'whole roster reads / worker / min', 'listings / worker / min', 'RCU/s, group', 'RCU/s, member keys', 'busiest key: RCU/s, share of a partition', 'balanced at the end'],
    runs.map((r) => [
      `${r.mode === 'steady' ? 'nobody restarting' : `a restart every ${r.everyMs! / 1_000} s (${r.restarts})`}, ${r.useChangeFeed ? 'with a change feed' : 'no feed'}${movesText(r)}`,
      fmt(r.itemsReadPerWorkerSecond, 1),
      fmt(r.membersByIdPerWorkerSecond, 1),
      kb(r.redisBytesReadPerWorkerSecond),
      kb(r.dynamodbBytesReadPerWorkerSecond),
      fmt(r.rosterReadsPerWorkerMinute, 2),
      fmt(r.listingsPerWorkerMinute, 3),
      fmt(r.rcuPerSecond, 1),
      fmt(r.membersRcuPerSecond, 1),
      `${fmt(r.hottestRcuPerSecond, 1)}, ${fmt(r.hottestShare * 100, 1)}% (${r.hottestPartition})`,
      r.balancedAtEnd ? 'yes' : 'NO',
    ]),
  );
  // At 1,000 members a whole roster read is ten times the bytes and read by ten times the workers: the
  // rolling run's rate of whole reads per worker, with 1,000 member items of the measured size each.
  const rolling = runs[1]!;
  const steady = runs[0]!;
  const memberBytes = rolling.meanMemberItemBytes;
  const readsPerWorkerSecond = rolling.rosterReadsPerWorkerMinute / 60;
  // A whole read is one Query of each of the four member keys, each billed by the bytes it read.
  const fleetMembersRcu = 1_000 * readsPerWorkerSecond * Math.ceil((1_000 * memberBytes) / 4 / 4_096) * 4;
  const fleet = {
    wholeReadsPerWorkerSecond: readsPerWorkerSecond,
    membersRcuPerSecond: fleetMembersRcu,
    perMemberKeyRcuPerSecond: fleetMembersRcu / 4,
    perMemberKeyShare: fleetMembersRcu / 4 / PARTITION_RCU,
    steadyWholeReadsPerWorkerSecond: steady.rosterReadsPerWorkerMinute / 60,
  };
  console.log(
    `   At 1,000 workers (NOT MEASURED: this run's ${fmt(readsPerWorkerSecond, 3)} whole roster reads a worker a second, each of 1,000 member items of ${fmt(memberBytes, 0)} bytes over the four member keys): ` +
      `${fmt(fleetMembersRcu, 0)} RCU/s on the member keys, ${fmt(fleet.perMemberKeyRcuPerSecond, 0)} on each, ${fmt(fleet.perMemberKeyShare * 100, 0)}% of a partition's 3,000.`,
  );
  console.log(`   (${runs.map((r) => `${r.mode}${r.useChangeFeed ? ' with a feed' : ''}${r.rosterMoves === false ? '' : r.rosterMoves === true ? ', moves' : ', moves as DynamoDB'} ${tookText(r.took)}`).join('; ')})`);
  // Restarts faster than a take tick, with a change feed: some member is always above its share, and
  // whoever lists for being two below it is counted here (DESIGN section 4, "Taking, on a listing", step 5).
  const fast = [await run('rolling', true, true, seed, 1_000, 60_000)];
  console.log('\nThe same, a restart every second (faster than a take tick) for a simulated minute, with a change feed and the moves read by name:');
  table(
    ['', 'items read / worker / s', 'whole roster reads / worker / min', 'listings / worker / min', 'balanced at the end'],
    fast.map((r) => [`${r.restarts} restarts`, fmt(r.itemsReadPerWorkerSecond, 1), fmt(r.rosterReadsPerWorkerMinute, 2), fmt(r.listingsPerWorkerMinute, 3), r.balancedAtEnd ? 'yes' : 'NO']),
  );
  console.log(`   (${tookText(fast[0]!.took)})`);
  const largerRuns: ChurnRun[] = [];
  if (larger !== null) {
    // The restart's pace per member kept: k times the members, a restart k times as often.
    const k = larger.workers / 100;
    for (const rosterMoves of [false, true]) largerRuns.push(await run('rolling', true, rosterMoves, seed, everyMs / k, larger.windowMs, [larger.workers, larger.workers * 100]));
    // DynamoDB's case: no change feed, the moves as an adapter keeping them in slots would answer them.
    for (const rosterMoves of [false, 'dynamodb'] as const) largerRuns.push(await run('rolling', false, rosterMoves, seed, everyMs / k, larger.windowMs, [larger.workers, larger.workers * 100]));
    console.log(
      `\nThe same at ${larger.workers.toLocaleString('en-US')} x ${(larger.workers * 100).toLocaleString('en-US')}, a restart every ${fmt(everyMs / k / 1_000, 2)} s (each member restarted as often as at 100) for ${fmt(larger.windowMs / 60_000, 2)} simulated minutes:`,
    );
    table(
      ['', 'items read / worker / s', 'of them members by id', 'Redis / Postgres JSON bytes read / worker / s', 'whole roster reads / worker / min', 'listings / worker / min', 'RCU/s, member keys', 'busiest key: RCU/s, share of a partition', 'balanced at the end'],
      largerRuns.map((r) => [
        `${r.restarts} restarts, ${r.useChangeFeed ? 'with a change feed' : 'no feed'}${movesText(r)}`,
        fmt(r.itemsReadPerWorkerSecond, 1),
        fmt(r.membersByIdPerWorkerSecond, 1),
        kb(r.redisBytesReadPerWorkerSecond),
        fmt(r.rosterReadsPerWorkerMinute, 2),
        fmt(r.listingsPerWorkerMinute, 3),
        fmt(r.membersRcuPerSecond, 1),
        `${fmt(r.hottestRcuPerSecond, 1)}, ${fmt(r.hottestShare * 100, 1)}% (${r.hottestPartition})`,
        r.balancedAtEnd ? 'yes' : 'NO',
      ]),
    );
    console.log(`   (${largerRuns.map((r) => `${r.useChangeFeed ? 'feed' : 'no feed'}${movesText(r) === '' ? ', whole reads' : movesText(r)} ${tookText(r.took)}`).join('; ')})`);
  }
  // One seed's restart is one trajectory: which members a leave's leases go to, and whether a giver to the
  // newcomer was also a recipient of the leave within one heartbeat (its count then did not move), decide
  // how many counts each restart moves, and so how many members each digest move names. The same restart
  // over several seeds gives the spread a single run's figure sits in (the table's own seed is not run again).
  const spread: ChurnRun[] = [];
  for (let at = 1; at <= spreadSeeds; at++) spread.push(at === seed ? runs[4]! : await run('rolling', true, true, at, everyMs, windowMs));
  if (spread.length > 0) {
    const items = summarize(spread.map((r) => r.itemsReadPerWorkerSecond));
    const whole = summarize(spread.map((r) => r.rosterReadsPerWorkerMinute));
    console.log(`\nThe restart every ${everyMs / 1_000} s with a change feed and the moves read by name, seeds 1 to ${spread.length} (the table above is seed ${seed}):`);
    table(
      ['seed', 'items read / worker / s', 'whole roster reads / worker / min', 'listings / worker / min', 'balanced at the end'],
      [
        ...spread.map((r, i) => [String(i + 1), fmt(r.itemsReadPerWorkerSecond, 1), fmt(r.rosterReadsPerWorkerMinute, 2), fmt(r.listingsPerWorkerMinute, 3), r.balancedAtEnd ? 'yes' : 'NO']),
        ['min / p50 / max', `${fmt(items.min, 1)} / ${fmt(items.p50, 1)} / ${fmt(items.max, 1)}`, `${fmt(whole.min, 2)} / ${fmt(whole.p50, 2)} / ${fmt(whole.max, 2)}`, '', ''],
      ],
    );
    console.log(`   (seeds other than ${seed}: ${tookText(spread.filter((r) => r !== runs[4]).reduce((sum, r) => ({ wallSeconds: sum.wallSeconds + r.took.wallSeconds, cpuSeconds: sum.cpuSeconds + r.took.cpuSeconds }), { wallSeconds: 0, cpuSeconds: 0 }))})`);
  }
  return { runs, fleet, fast, largerRuns, spread };
}
