/**
 * Section 1 (and the steady figures of sections 4 and 5): the steady state of 10 x 1,000 and 100 x 10,000
 * (and 1,000 x 100,000 with --fleet, otherwise scaled from 100 x 10,000 by `scaleToFleet`, NOT MEASURED),
 * with worker ids as long as a cloud host's: items read and written per lease per minute, what a heartbeat
 * writes and a worker reads on each backend, DynamoDB's request units, and each partition key's and the
 * hottest item's requests a second. Each run also gives its own cold start (with the change feed) and,
 * after its window, a crash of a hundredth of the group (`crashOfAHundredth`), which section 4 uses at the
 * shapes sections 2 and 3 do not run.
 */
import { addCounts, advanceUntil, balanced, cluster, dispose, emptyCounts, LEASE_MS, TAKE_MS, type Counts, GROUP } from './cluster.js';
import { MEMBER_BUCKETS, MEMBER_SORT_PREFIX, memberBucketKeys, membersKey } from './roster-size.js';
import { limits } from '../src/adapter.js';
import { DIGEST_SORT_KEY, digestKey, pagedReadUnits } from './billing.js';
import { addOpUsage, addUsage, emptyOpUsage, emptyUsage, hottestItem, hottestPartition, mostWrittenItem, PARTITION_RCU, PARTITION_WCU, partitionShare, totalOf, type Backend, type OpUsage } from './meter.js';
import { ONE_RECORD, RENEWALS, WHOLE_ROSTER } from './before.js';
import { GOALS } from './goal.js';
import { crashOfAHundredth, newsOfOneLease, type GroupCrash, type LeaseNews } from './moving.js';
import { fmt, kb, NOT_MEASURED, notRun, now, pairOf, pct, rowName, shapeKey, shapeName, shortItem, since, table, tookText, trioOf, verdict, type Took } from './shared.js';

/** The coordinators' listIntervalMs (their default). */
const LIST_MS = 600_000;
/**
 * How often a member of a group of `members` reads the whole roster while the digest does not move: every
 * max(30, members / 20) take ticks (the coordinator's `#refreshMs`).
 */
const refreshMs = (members: number): number => Math.max(30, members / 20) * TAKE_MS;
/** The largest shape whose run creates and releases a lease after its crash (`SteadyResult.news`). */
const NEWS_UP_TO_LEASES = 10_000;
/** Groups of up to this many members read the whole roster every take tick (the coordinator's default `wholeRosterUpTo`). */
const WHOLE_ROSTER_UP_TO = 16;
/**
 * How often a member lists the leases when nothing signalled a change: listIntervalMs x max(1, members /
 * 10) in a group of watchers (the coordinator's `#safetyListingMs`), so that the group lists as often as
 * ten members would. Past 10 members that is longer than the steady window: no member lists in it, and
 * the bench adds the listing at this rate, computed from the measured listing's size.
 */
const safetyListingMs = (members: number): number => LIST_MS * Math.max(1, members / 10);
/** Each worker's whole roster reads in a window, and the busiest reader's (see `SteadyResult.wholeRosterReads`). */
function wholeRosterReadsOf(byWorker: readonly Record<string, OpUsage>[], totals: readonly OpUsage[], refresh: number): NonNullable<SteadyResult['wholeRosterReads']> {
  const reads = byWorker.map((byOp) => byOp.getRoster?.calls ?? 0);
  let busiest = 0;
  totals.forEach((op, i) => {
    if (op.read.dynamodb > (totals[busiest]?.read.dynamodb ?? -1)) busiest = i;
  });
  return { meanPerWorker: reads.reduce((sum, n) => sum + n, 0) / Math.max(1, reads.length), mostPerWorker: Math.max(0, ...reads), busiestReader: reads[busiest] ?? 0, refreshMs: refresh };
}

/** How long the steady state is measured: two safety-net listing intervals, so each worker lists about twice. */
const STEADY_WINDOW_MS = 20 * 60_000;
/** How long after balancing the steady-state window begins. */
const STEADY_AFTER_MS = 60_000;
/**
 * A worker id as long as the default one on a cloud host (host name, pid, random suffix), to size the
 * member items as a real deployment would: the bench's own ids (`w0`...) are shorter than any real one.
 */
export const REAL_ID = (index: number): string => `ip-10-0-${String(index).padStart(3, '0')}-45.eu-west-1.compute.internal-12345-k3j9x2`;

/** The group issue 28 is for: 1,000 workers over 100,000 leases. */
const FLEET = { workers: 1_000, leases: 100_000 } as const;
/**
 * The fleet's steady window: 10 simulated minutes, six of each member's whole roster reads (one every
 * 50 take ticks at 1,000 members); its safety-net listing (every 60,000 s) is added at its rate.
 */
export const FLEET_WINDOW_MS = 10 * 60_000;

interface SteadyShape {
  workers: number;
  leases: number;
  windowMs: number;
}

/** Bytes per heartbeat as each backend stores one, and DynamoDB's write units for it. */
export interface PerHeartbeat {
  dynamodbBytes: number;
  wcu: number;
  redisBytes: number;
  postgresBytes: number;
}

/** The requests a second on one DynamoDB item or partition key, and what they cost. */
export interface KeyLoad {
  writesPerSecond: number;
  wcuPerSecond: number;
  /** GetItems (each item of a BatchGetItem one) and Queries; an item's count the Queries that read it. */
  readsPerSecond: number;
  /** An item's: its GetItems' units and one for each Query that read it (an upper bound). */
  rcuPerSecond: number;
  /** The larger of WCU/s / 1,000 and RCU/s / 3,000: the share of one partition's limits. */
  shareOfPartition: number;
}

/** An item, by its sort key, and its load. */
export interface HottestItem extends KeyLoad {
  item: string;
  /** The partition key it lives under. */
  partition: string;
}

/** A partition key and its load. */
export interface HottestPartition extends KeyLoad {
  partition: string;
}

const loadOf = (load: { writes: number; wru: number; reads: number; rru: number }, seconds: number): KeyLoad => ({
  writesPerSecond: load.writes / seconds,
  wcuPerSecond: load.wru / seconds,
  readsPerSecond: load.reads / seconds,
  rcuPerSecond: load.rru / seconds,
  shareOfPartition: partitionShare(load.wru / seconds, load.rru / seconds),
});

/** The safety-net listing: how often a member makes it, and what one costs (as the ledger bills it at the window's end). */
interface Listing {
  everyMs: number;
  dynamodbBytes: number;
  jsonBytes: number;
  units: number;
}

export interface SteadyResult {
  workers: number;
  leases: number;
  balancedAfterMs: number;
  windowMs: number;
  /** What the run took (balancing, settling and the window); none when scaled. */
  took?: Took;
  calls: Record<string, number>;
  /** Items read in the window, by storage method. */
  itemsReadBy: Record<string, number>;
  itemsReadPerLeaseMinute: number;
  itemsWrittenPerLeaseMinute: number;
  memberWritesPerLeaseMinute: number;
  leaseWritesPerLeaseMinute: number;
  /** Of the items written, the digest's advances, per lease per minute. */
  digestWritesPerLeaseMinute: number;
  /** Whether the shape ran; false for 1,000 x 100,000 scaled from a smaller run (`scaleToFleet`). */
  measured: boolean;
  /** What a roster Query of every member item read at the end of the window, real worker ids. */
  rosterQueryBytes: number;
  /** The mean member item and lease item at the end of the window, real worker ids; and their JSON (Redis, Postgres). */
  meanMemberItemBytes: number;
  meanLeaseItemBytes: number;
  meanMemberJsonBytes: number;
  meanLeaseJsonBytes: number;
  perHeartbeat: PerHeartbeat;
  /** The item with the most requests a second (reads and writes). */
  hottest: HottestItem;
  /** The item written most often. */
  mostWritten: HottestItem;
  hottestPartition: HottestPartition;
  /** Every partition key the window touched: `<group>#members`, `<group>#digest`, `<group>` (the leases). */
  partitions: Record<string, KeyLoad>;
  /** Group-wide usage in the window, by storage method. */
  byOp: Record<string, OpUsage>;
  /** Bytes read per worker per second, by backend: the mean over workers and the worker that read most. */
  bytesReadPerWorkerSecond: Record<Backend, { mean: number; max: number }>;
  /**
   * The whole roster reads (`getRoster`) a worker made in the window: the mean over workers, the most, and
   * those of the worker that read the most DynamoDB bytes; and the interval the coordinator reads it at
   * while the digest stands still (`refreshMs`). Most of a large group's reads are these, so a short window
   * that catches one worker at one read more than the mean shows it as the busiest reader. Absent when scaled,
   * and for a group small enough to read the whole roster at every take tick.
   */
  wholeRosterReads?: { meanPerWorker: number; mostPerWorker: number; busiestReader: number; refreshMs: number };
  /** The safety-net listing (computed from the run: its size as billed, its interval by the coordinator's rule). */
  listing: Listing;
  /**
   * The window's reads without its listings, plus each member's safety-net listing at its rate: what a
   * member reads in the long run, where the listing's interval (past 10 members) is longer than the window.
   */
  withListing: { bytesReadPerWorkerSecond: Record<Backend, { mean: number; max: number }>; rruPerMinute: number };
  /** Bytes written per worker per second, by backend (mean over workers). */
  bytesWrittenPerWorkerSecond: Record<Backend, number>;
  /** DynamoDB request units per minute, group-wide, by storage method. */
  unitsPerMinute: Record<string, { wru: number; rru: number }>;
  wruPerMinute: number;
  rruPerMinute: number;
  stillBalanced: boolean;
  /**
   * The run's own start, its workers started within half a take interval with the change feed (one member
   * deals a group of watchers' cold start): take ticks from the last worker's join to balanced, the
   * acquisitions per lease and the listings per worker until then. None when scaled.
   */
  coldStart?: { takeTicks: number; acquisitionsPerLease: number; listingsPerWorker: number; changesHeardPerWorker: number; subscriptionsPerWorker: number };
  /** After the window, a hundredth of the group (at least two) killed at once (`crashOfAHundredth`). None when scaled. */
  crash?: GroupCrash;
  /**
   * After the crash, one lease created and one released (`newsOfOneLease`): what each cost the group. Run up
   * to 100 x 10,000 only: at 1,000 x 100,000 each member's listing for it would be 10^8 items to simulate.
   */
  news?: { created: LeaseNews; released: LeaseNews };
}

async function steady({ workers, leases, windowMs }: SteadyShape, seed: number): Promise<SteadyResult> {
  const started = now();
  const c = await cluster(seed, workers, leases, { startSpreadMs: TAKE_MS / 2, workerId: REAL_ID, meter: true });
  try {
    const balancedAfterMs = await advanceUntil(c.scheduler, () => c.workers.length === workers && balanced(c), { precise: false, stepMs: 100, capMs: 30 * 60_000 });
    if (balancedAfterMs === null) throw new Error(`${workers} x ${leases}: never balanced`);
    const coldStart = {
      takeTicks: (balancedAfterMs - Math.max(...c.workers.map((worker) => worker.startedAt))) / TAKE_MS,
      acquisitionsPerLease: c.workers.reduce((sum, worker) => sum + worker.acquisitions, 0) / leases,
      listingsPerWorker: c.workers.reduce((sum, worker) => sum + (worker.storage.counts.calls.listLeases ?? 0), 0) / workers,
      changesHeardPerWorker: c.workers.reduce((sum, worker) => sum + worker.storage.counts.changesHeard, 0) / workers,
      // The first, and each move of its address as the ring moved the members it watches.
      subscriptionsPerWorker: c.workers.reduce((sum, worker) => sum + (worker.storage.counts.calls.subscribe ?? 0), 0) / workers,
    };
    console.log(`   (steady ${shapeName(workers, leases)}: balanced ${fmt(balancedAfterMs / 1_000, 1)} s after the first start; ${tookText(since(started))} so far)`);
    await c.scheduler.advance(STEADY_AFTER_MS);
    for (const worker of c.workers) {
      worker.storage.counts = emptyCounts();
      worker.storage.meter!.usage = emptyUsage();
    }
    await c.scheduler.advance(windowMs);
    const total: Counts = c.workers.reduce((sum, worker) => addCounts(sum, worker.storage.counts), emptyCounts());
    const usage = c.workers.reduce((sum, worker) => addUsage(sum, worker.storage.meter!.usage), emptyUsage());
    const minutes = windowMs / 60_000;
    const seconds = windowMs / 1_000;
    const perLeaseMinute = (count: number): number => count / leases / minutes;
    const heartbeats = usage.byOp.putMember ?? emptyOpUsage();
    const perHeartbeat = (bytes: number): number => (heartbeats.calls === 0 ? NaN : bytes / heartbeats.calls);
    const item = hottestItem(usage);
    const written = mostWrittenItem(usage);
    const partition = hottestPartition(usage, seconds);
    const workerTotals = c.workers.map((worker) => totalOf(worker.storage.meter!.usage));
    const perWorker = (pick: (op: OpUsage) => number, totals = workerTotals): { mean: number; max: number } => ({
      mean: totals.reduce((sum, op) => sum + pick(op), 0) / totals.length / seconds,
      max: Math.max(...totals.map(pick)) / seconds,
    });
    const unitsPerMinute = Object.fromEntries(Object.entries(usage.byOp).map(([name, op]) => [name, { wru: op.wru / minutes, rru: op.rru / minutes }]));
    const sum = totalOf(usage);
    const billedListing = c.ledger.listing();
    const listing: Listing = { everyMs: safetyListingMs(c.ledger.liveMembers), dynamodbBytes: billedListing.dynamodb, jsonBytes: billedListing.json, units: billedListing.units };
    // Each worker's reads but its listings, and the listing at its interval.
    const withoutListings = c.workers.map((worker) => {
      const { listLeases: _listings, ...rest } = worker.storage.meter!.usage.byOp;
      return Object.values(rest).reduce(addOpUsage, emptyOpUsage());
    });
    const listedPerSecond = (backend: Backend): number => (backend === 'dynamodb' ? listing.dynamodbBytes : listing.jsonBytes) / (listing.everyMs / 1_000);
    const withListing = (backend: Backend): { mean: number; max: number } => {
      const read = perWorker((op) => op.read[backend], withoutListings);
      return { mean: read.mean + listedPerSecond(backend), max: read.max + listedPerSecond(backend) };
    };
    const memberJson = c.ledger.rosterJson() / c.ledger.liveMembers;
    const result: SteadyResult = {
      workers,
      leases,
      balancedAfterMs,
      windowMs,
      took: since(started),
      calls: total.calls,
      itemsReadBy: total.itemsReadBy,
      itemsReadPerLeaseMinute: perLeaseMinute(total.itemsRead),
      itemsWrittenPerLeaseMinute: perLeaseMinute(total.itemsWritten),
      memberWritesPerLeaseMinute: perLeaseMinute(total.memberWrites),
      leaseWritesPerLeaseMinute: perLeaseMinute(total.leaseWrites),
      digestWritesPerLeaseMinute: perLeaseMinute(total.digestWrites),
      measured: true,
      rosterQueryBytes: c.ledger.rosterQuery().bytes,
      meanMemberItemBytes: c.ledger.rosterQuery().bytes / c.ledger.liveMembers,
      meanLeaseItemBytes: billedListing.dynamodb / c.ledger.leases,
      meanMemberJsonBytes: memberJson,
      meanLeaseJsonBytes: billedListing.json / c.ledger.leases,
      perHeartbeat: {
        dynamodbBytes: perHeartbeat(heartbeats.written.dynamodb),
        wcu: perHeartbeat(heartbeats.wru),
        redisBytes: perHeartbeat(heartbeats.written.redis),
        postgresBytes: perHeartbeat(heartbeats.written.postgres),
      },
      hottest: { item: item?.item ?? '-', partition: item?.partition ?? '-', ...loadOf(item ?? ZERO_LOAD, seconds) },
      mostWritten: { item: written?.item ?? '-', partition: written?.partition ?? '-', ...loadOf(written ?? ZERO_LOAD, seconds) },
      hottestPartition: { partition: partition?.partition ?? '-', ...loadOf(partition?.load ?? ZERO_LOAD, seconds) },
      partitions: Object.fromEntries([...usage.byPartition].map(([name, load]) => [name, loadOf(load, seconds)])),
      byOp: usage.byOp,
      bytesReadPerWorkerSecond: {
        dynamodb: perWorker((op) => op.read.dynamodb),
        redis: perWorker((op) => op.read.redis),
        postgres: perWorker((op) => op.read.postgres),
      },
      ...(workers > WHOLE_ROSTER_UP_TO ? { wholeRosterReads: wholeRosterReadsOf(c.workers.map((worker) => worker.storage.meter!.usage.byOp), workerTotals, refreshMs(workers)) } : {}),
      listing,
      withListing: {
        bytesReadPerWorkerSecond: { dynamodb: withListing('dynamodb'), redis: withListing('redis'), postgres: withListing('postgres') },
        rruPerMinute: (sum.rru - (usage.byOp.listLeases?.rru ?? 0)) / minutes + (workers * listing.units) / (listing.everyMs / 60_000),
      },
      bytesWrittenPerWorkerSecond: {
        dynamodb: perWorker((op) => op.written.dynamodb).mean,
        redis: perWorker((op) => op.written.redis).mean,
        postgres: perWorker((op) => op.written.postgres).mean,
      },
      unitsPerMinute,
      wruPerMinute: sum.wru / minutes,
      rruPerMinute: sum.rru / minutes,
      stillBalanced: balanced(c),
      coldStart,
    };
    const crashed = now();
    result.crash = await crashOfAHundredth(c);
    console.log(`   (steady ${shapeName(workers, leases)}: a crash of ${result.crash.killed} after the window, ${tookText(since(crashed))})`);
    if (leases <= NEWS_UP_TO_LEASES) {
      result.news = await newsOfOneLease(c);
      for (const [what, news] of Object.entries(result.news)) {
        console.log(
          `   (steady ${shapeName(workers, leases)}: one lease ${what}: held ${news.heldAfterMs === null ? 'never' : `after ${fmt(news.heldAfterMs / 1_000, 2)} s`}; ` +
            `until then and five take ticks more, ${fmt(news.listingsPerMember, 2)} listings and ${fmt(news.rosterReadsPerMember, 2)} whole roster reads a member, ${news.itemsRead.toLocaleString('en')} items read by the group)`,
        );
      }
    }
    return result;
  } finally {
    dispose(c);
  }
}

const ZERO_LOAD = { writes: 0, wru: 0, reads: 0, rru: 0 };

/**
 * The partition keys each storage method's requests land on (DynamoDB's layout): a member's calls on the
 * four keys its members are spread over, evenly (the hash spreads them so), a roster read on each of them.
 */
function partitionsOf(name: string): string[] {
  if (name === 'getRosterDigest' || name === 'advanceRosterDigest') return [digestKey(GROUP)];
  if (name === 'getRoster' || name === 'getMembers' || name === 'putMember' || name === 'removeMember') return memberBucketKeys(GROUP);
  return [GROUP];
}

const scaleBytes = (bytes: Record<Backend, number>, by: number): Record<Backend, number> => ({ dynamodb: bytes.dynamodb * by, redis: bytes.redis * by, postgres: bytes.postgres * by });

/**
 * 1,000 x 100,000 from a measured run's per-worker rates, at 1,000 members' and 100,000 leases' sizes: NOT
 * MEASURED. Each worker's rates by the algorithm's rules: a digest read and a read of its watched members
 * and its own a take tick, a heartbeat an interval, whatever the group's size, so those keep the run's
 * rate and cost per worker; the whole roster every max(30, N / 20) take ticks (`refreshMs`), a Query of
 * N member items of the run's mean size; the safety-net listing every listIntervalMs x N / 10 (added at
 * that rate, as for a measured run). Any other call (the digest's advances) keeps its rate per worker.
 */
function scaleToFleet({ coldStart: _cold, crash: _crash, wholeRosterReads: _reads, news: _news, ...r }: SteadyResult): SteadyResult {
  const { workers, leases } = FLEET;
  const seconds = r.windowMs / 1_000;
  const minutes = seconds / 60;
  // A roster read is one Query per bucket, each of a quarter of the members.
  const bucketQueryUnits = Math.max(1, pagedReadUnits(Array.from({ length: Math.ceil(workers / MEMBER_BUCKETS) }, () => r.meanMemberItemBytes)));
  const rosterUnits = bucketQueryUnits * MEMBER_BUCKETS;
  const listing: Listing = {
    everyMs: safetyListingMs(workers),
    dynamodbBytes: r.meanLeaseItemBytes * leases,
    jsonBytes: r.meanLeaseJsonBytes * leases,
    units: pagedReadUnits(Array.from({ length: leases }, () => r.meanLeaseItemBytes)),
  };
  const byOp: Record<string, OpUsage> = {};
  const calls: Record<string, number> = {};
  const itemsReadBy: Record<string, number> = {};
  const partitions = new Map<string, { writes: number; wru: number; reads: number; rru: number }>();
  for (const [name, op] of Object.entries(r.byOp)) {
    // The window's listings are left out: the listing is added at its interval below.
    if (name === 'listLeases' || op.calls === 0) continue;
    const count = (op.calls / r.workers) * (name === 'getRoster' ? refreshMs(r.workers) / refreshMs(workers) : 1) * workers;
    const by = count / op.calls;
    const scaled: OpUsage =
      name === 'getRoster'
        ? { calls: count, rru: count * rosterUnits, wru: 0, read: { dynamodb: count * r.meanMemberItemBytes * workers, redis: count * r.meanMemberJsonBytes * workers, postgres: count * r.meanMemberJsonBytes * workers }, written: scaleBytes(op.written, 0) }
        : { calls: count, rru: op.rru * by, wru: op.wru * by, read: scaleBytes(op.read, by), written: scaleBytes(op.written, by) };
    byOp[name] = scaled;
    calls[name] = count;
    const items = name === 'getRoster' ? count * workers : (r.itemsReadBy[name] ?? 0) * by;
    if (items > 0) itemsReadBy[name] = items;
    const keys = partitionsOf(name);
    for (const partition of keys) {
      const key = partitions.get(partition) ?? { writes: 0, wru: 0, reads: 0, rru: 0 };
      // Each item of a BatchGetItem is a read of its own; a Query one request (a roster read one on each
      // bucket's key); a write one per call.
      const share = 1 / keys.length;
      if (scaled.wru > 0) key.writes += count * share;
      else key.reads += name === 'getMembers' ? items * share : name === 'getRoster' ? count : count * share;
      key.wru += scaled.wru * share;
      key.rru += scaled.rru * share;
      partitions.set(partition, key);
    }
  }
  const perSecond = (name: string): number => (calls[name] ?? 0) / seconds;
  // The two candidates for the hottest item: the digest (read by every worker each tick) and a member's
  // (its heartbeats, its watchers' and its own reads, and every whole roster read).
  const digestItem = { item: DIGEST_SORT_KEY, partition: digestKey(GROUP), writesPerSecond: perSecond('advanceRosterDigest'), readsPerSecond: perSecond('getRosterDigest') };
  const memberItem = {
    item: r.mostWritten.item,
    partition: membersKey(GROUP, r.mostWritten.item.slice(MEMBER_SORT_PREFIX.length)),
    writesPerSecond: perSecond('putMember') / workers,
    readsPerSecond: (itemsReadBy.getMembers ?? 0) / seconds / workers + perSecond('getRoster'),
  };
  // Every item here is under 4 KB: a read or a write is one unit.
  const itemLoad = (item: { item: string; partition: string; writesPerSecond: number; readsPerSecond: number }): HottestItem => ({
    ...item,
    wcuPerSecond: item.writesPerSecond,
    rcuPerSecond: item.readsPerSecond,
    shareOfPartition: partitionShare(item.writesPerSecond, item.readsPerSecond),
  });
  const requests = (item: { writesPerSecond: number; readsPerSecond: number }): number => item.writesPerSecond + item.readsPerSecond;
  const keyLoads = Object.fromEntries([...partitions].map(([name, load]) => [name, loadOf(load, seconds)]));
  const [hottestKey, hottestLoad] = Object.entries(keyLoads).reduce((a, b) => (b[1].shareOfPartition > a[1].shareOfPartition ? b : a));
  const total = Object.values(byOp).reduce(addOpUsage, emptyOpUsage());
  const readPerWorker = (backend: Backend): { mean: number; max: number } => {
    const mean = total.read[backend] / workers / seconds;
    // The run's spread between its mean worker and the one that read most, kept.
    const spread = r.bytesReadPerWorkerSecond[backend].max / r.bytesReadPerWorkerSecond[backend].mean;
    return { mean, max: mean * spread };
  };
  const bytesReadPerWorkerSecond = { dynamodb: readPerWorker('dynamodb'), redis: readPerWorker('redis'), postgres: readPerWorker('postgres') };
  const listedPerSecond = (backend: Backend): number => (backend === 'dynamodb' ? listing.dynamodbBytes : listing.jsonBytes) / (listing.everyMs / 1_000);
  const withListing = (backend: Backend): { mean: number; max: number } => ({ mean: bytesReadPerWorkerSecond[backend].mean + listedPerSecond(backend), max: bytesReadPerWorkerSecond[backend].max + listedPerSecond(backend) });
  const itemsRead = Object.values(itemsReadBy).reduce((sum, items) => sum + items, 0);
  return {
    ...r,
    workers,
    leases,
    measured: false,
    took: undefined,
    calls,
    itemsReadBy,
    itemsReadPerLeaseMinute: itemsRead / leases / minutes,
    rosterQueryBytes: r.meanMemberItemBytes * workers,
    hottest: itemLoad(requests(digestItem) >= requests(memberItem) ? digestItem : memberItem),
    mostWritten: itemLoad(digestItem.writesPerSecond > memberItem.writesPerSecond ? digestItem : memberItem),
    hottestPartition: { partition: hottestKey, ...hottestLoad },
    partitions: keyLoads,
    byOp,
    bytesReadPerWorkerSecond,
    listing,
    withListing: {
      bytesReadPerWorkerSecond: { dynamodb: withListing('dynamodb'), redis: withListing('redis'), postgres: withListing('postgres') },
      rruPerMinute: total.rru / minutes + (workers * listing.units) / (listing.everyMs / 60_000),
    },
    unitsPerMinute: Object.fromEntries(Object.entries(byOp).map(([name, op]) => [name, { wru: op.wru / minutes, rru: op.rru / minutes }])),
    wruPerMinute: total.wru / minutes,
    rruPerMinute: total.rru / minutes,
  };
}

/** Runs the steady shapes; 1,000 x 100,000 only when `fleetWindowMs` is given, otherwise scaled from 100 x 10,000. */
export async function steadySection(fleetWindowMs: number | null): Promise<SteadyResult[]> {
  const shapes: SteadyShape[] = [
    { workers: 10, leases: 1_000, windowMs: STEADY_WINDOW_MS },
    { workers: 100, leases: 10_000, windowMs: STEADY_WINDOW_MS },
  ];
  if (fleetWindowMs !== null) shapes.push({ ...FLEET, windowMs: fleetWindowMs });
  if (FLEET.workers > limits.maxMembers) throw new Error(`the fleet shape needs ${FLEET.workers} members; limits.maxMembers is ${limits.maxMembers}`);
  const results: SteadyResult[] = [];
  for (const shape of shapes) {
    const result = await steady(shape, 1);
    console.log(`   (steady ${shapeName(shape.workers, shape.leases)}, ${shape.windowMs / 60_000} simulated minutes measured: ${tookText(result.took!)})`);
    results.push(result);
  }
  if (fleetWindowMs === null) results.push(scaleToFleet(results[results.length - 1]!));
  const windows = results.map((r) => `${shapeName(r.workers, r.leases)} ${r.measured ? `${r.windowMs / 60_000} min` : NOT_MEASURED}`).join(', ');
  console.log(`\n1. steady state: per lease per minute over a window of simulated time (${windows}), from ${STEADY_AFTER_MS / 1_000} s after balancing; no checkpoints; worker ids of ${REAL_ID(0).length} bytes`);
  console.log('   items: getRoster and getMembers one per member read (one record in the one-record roster), getRosterDigest 1, listLeases 1 per lease, getLease 1; putMember 1, advanceRosterDigest 1, each lease of updateLeases 1, createLease 1.');
  console.log('   "renewals": the per-lease renewals the roster replaced; "one record": the roster as one record per group; "whole roster": member items read whole by every worker every tick; "watchers": now.');
  console.log('   items read have no target of their own: a group small enough to read its members whole reads them with a Query per member bucket, billed by bytes, not items; the read goals are in bytes and read units (section 4).');
  table(
    ['shape (workers x leases)', 'read: renewals', 'one record', 'whole roster', 'watchers', 'written: renewals', 'one record', 'watchers', 'of which digest', 'target (issue 28)', ''],
    results.map((r) => {
      const shape = shapeKey(r.workers, r.leases);
      return [
        rowName(r),
        fmt(RENEWALS.itemsReadPerLeaseMinute[shape] ?? NaN, 0),
        fmt(ONE_RECORD[shape]?.itemsReadPerLeaseMinute ?? NaN, 3),
        fmt(WHOLE_ROSTER[shape]?.itemsReadPerLeaseMinute ?? NaN, 3),
        fmt(r.itemsReadPerLeaseMinute, 3),
        fmt(RENEWALS.itemsWrittenPerLeaseMinute[shape] ?? NaN, 1),
        fmt(ONE_RECORD[shape]?.itemsWrittenPerLeaseMinute ?? NaN, 3),
        fmt(r.itemsWrittenPerLeaseMinute, 3),
        fmt(r.digestWritesPerLeaseMinute, 4),
        `<= ${GOALS.itemsWrittenPerLeaseMinute}`,
        verdict(r.itemsWrittenPerLeaseMinute <= GOALS.itemsWrittenPerLeaseMinute),
      ];
    }),
  );
  console.log('\n   what a heartbeat writes (one record -> member items) and what a worker reads (one record -> whole roster -> watchers), by backend (DynamoDB: billed item bytes; Redis and Postgres: stored JSON and keys)');
  console.log(`   "+ listing": the watchers' reads but the window's listings, plus each member's safety-net listing at its interval (listIntervalMs x members / 10): computed from the run`);
  table(
    ['shape', 'heartbeat: DynamoDB', 'WCU', 'Redis', 'Postgres', 'read/worker/s: DynamoDB mean', 'max', '+ listing: mean', 'max', 'Redis mean', 'Postgres mean', 'WRU/min', 'RRU/min', '+ listing'],
    results.map((r) => {
      const shape = shapeKey(r.workers, r.leases);
      const before = ONE_RECORD[shape];
      const whole = WHOLE_ROSTER[shape];
      const withListing = r.withListing.bytesReadPerWorkerSecond;
      return [
        rowName(r),
        pairOf(before?.perHeartbeat.dynamodbBytes, r.perHeartbeat.dynamodbBytes, kb),
        pairOf(before?.perHeartbeat.wcu, r.perHeartbeat.wcu, (value) => fmt(value, 1)),
        pairOf(before?.perHeartbeat.redisBytes, r.perHeartbeat.redisBytes, kb),
        pairOf(before?.perHeartbeat.postgresBytes, r.perHeartbeat.postgresBytes, kb),
        trioOf(before?.bytesReadPerWorkerSecond.dynamodb.mean, whole?.bytesReadPerWorkerSecond.dynamodb.mean, r.bytesReadPerWorkerSecond.dynamodb.mean, kb),
        kb(r.bytesReadPerWorkerSecond.dynamodb.max),
        kb(withListing.dynamodb.mean),
        kb(withListing.dynamodb.max),
        trioOf(before?.bytesReadPerWorkerSecond.redis.mean, whole?.bytesReadPerWorkerSecond.redis.mean, r.bytesReadPerWorkerSecond.redis.mean, kb),
        trioOf(before?.bytesReadPerWorkerSecond.postgres.mean, whole?.bytesReadPerWorkerSecond.postgres.mean, r.bytesReadPerWorkerSecond.postgres.mean, kb),
        pairOf(before?.wruPerMinute, r.wruPerMinute, (value) => fmt(value, 0)),
        trioOf(before?.rruPerMinute, whole?.rruPerMinute, r.rruPerMinute, (value) => fmt(value, 0)),
        fmt(r.withListing.rruPerMinute, 0),
      ];
    }),
  );
  for (const r of results) {
    const reads = r.wholeRosterReads;
    if (reads === undefined) continue;
    console.log(
      `   ${rowName(r)}: whole roster reads a worker in the window: mean ${fmt(reads.meanPerWorker, 2)}, most ${reads.mostPerWorker}, by the busiest reader ${reads.busiestReader} (one every ${fmt(reads.refreshMs / 1_000, 0)} s while the digest stands still)`,
    );
  }
  console.log(`\n   DynamoDB hot spots, each partition key's requests a second (each item of a BatchGetItem one read) and the share of a partition's ${PARTITION_WCU.toLocaleString('en')} WCU/s and ${PARTITION_RCU.toLocaleString('en')} RCU/s (goal: at most ${pct(GOALS.shareOfPartition)})`);
  table(
    ['shape', 'partition key / item', 'writes/s', 'WCU/s', 'reads/s', 'RCU/s', 'share', ''],
    results.flatMap((r) => {
      const row = (name: string, load: KeyLoad): string[] => [
        rowName(r),
        name,
        fmt(load.writesPerSecond, 3),
        fmt(load.wcuPerSecond, 3),
        fmt(load.readsPerSecond, 2),
        fmt(load.rcuPerSecond, 2),
        pct(load.shareOfPartition),
        verdict(load.shareOfPartition <= GOALS.shareOfPartition),
      ];
      const keys = Object.entries(r.partitions).sort(([, a], [, b]) => b.shareOfPartition - a.shareOfPartition);
      return [
        ...keys.map(([name, load]) => row(`key ${name}`, load)),
        row(`item ${shortItem(r.hottest.item)} (most requests)`, r.hottest),
        ...(r.mostWritten.item === r.hottest.item ? [] : [row(`item ${shortItem(r.mostWritten.item)} (most writes)`, r.mostWritten)]),
      ];
    }),
  );
  for (const r of results) {
    const listing = `the safety-net listing every ${fmt(r.listing.everyMs / 1_000, 0)} s a member, ${kb(r.listing.dynamodbBytes)} and ${r.listing.units.toLocaleString('en')} RCU on DynamoDB`;
    if (!r.measured) {
      console.log(`   ${shapeName(r.workers, r.leases)}: ${NOT_MEASURED} (--fleet runs it); a roster Query would read ${kb(r.rosterQueryBytes)}; ${listing}; n/a: the one-record roster ${notRun}`);
      continue;
    }
    console.log(`   ${shapeName(r.workers, r.leases)}: calls in the window ${JSON.stringify(r.calls)}; balanced ${fmt(r.balancedAfterMs / 1_000, 1)} s after the first start; still balanced at the end: ${r.stillBalanced}; a roster Query reads ${kb(r.rosterQueryBytes)}; ${listing}`);
  }
  const measured = results.filter((r) => r.coldStart !== undefined && r.crash !== undefined);
  console.log(`\n   the steady runs' own start (change feed, workers started within ${fmt(TAKE_MS / 2_000, 1)} s) and, after the window, a crash of a hundredth of the group (at least 2: a member, the first of its watchers, the rest at random), at a random moment; one run each, x leaseDuration`);
  table(
    ['shape', 'cold: take ticks after last join', 'acquisitions/lease', 'listings/worker', 'changes heard/worker', 'subscriptions/worker', 'crash: killed', 'their leases', 'each held elsewhere p50', 'p99', 'max', 'never', 'balanced again', 'acquisitions/lease', 'listings/survivor', 'changes heard/survivor'],
    measured.map((r) => {
      const cold = r.coldStart!;
      const crash = r.crash!;
      return [
        shapeName(r.workers, r.leases),
        fmt(cold.takeTicks, 2),
        fmt(cold.acquisitionsPerLease, 3),
        fmt(cold.listingsPerWorker, 2),
        fmt(cold.changesHeardPerWorker, 1),
        fmt(cold.subscriptionsPerWorker, 2),
        String(crash.killed),
        crash.leases.toLocaleString('en'),
        fmt(crash.each.p50 / LEASE_MS, 3),
        fmt(crash.each.p99 / LEASE_MS, 3),
        fmt(crash.each.max / LEASE_MS, 3),
        String(crash.each.failures),
        crash.balancedMs === null ? 'never' : fmt(crash.balancedMs / LEASE_MS, 3),
        fmt(crash.acquisitionsPerLease, 3),
        fmt(crash.listings, 2),
        fmt(crash.changesHeard, 1),
      ];
    }),
  );
  return results;
}
