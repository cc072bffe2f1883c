/**
 * Section 4: issue 28's goal table, from the figures sections 1-3 measured (steady, cold start, crash),
 * beside the one-record roster's and the whole roster reads' (`before.ts`): each goal's target and
 * whether this run meets it.
 */
import { GROUP, LEASE_MS, TAKE_MS } from './cluster.js';
import { MEMBER_BUCKETS, memberBucketKey, memberBucketKeys } from './roster-size.js';
import { digestKey } from './billing.js';
import { PARTITION_RCU, PARTITION_WCU, partitionShare } from './meter.js';
import { ONE_RECORD, WHOLE_ROSTER, type OneRecordFigures, type WholeRosterFigures } from './before.js';
import type { ColdResult } from './cold.js';
import type { HottestItem, HottestPartition, KeyLoad, SteadyResult } from './steady.js';
import { fmt, HEARTBEAT_MS, kb, NOT_MEASURED, notRun, pairOf, pct, rowName, shapeKey, shapeName, shortItem, table, trioOf, verdict } from './shared.js';

/** Issue 28's goals (docs/proposals/membership-at-scale.md), at any group size. */
export const GOALS = {
  wcuPerHeartbeat: 1,
  /** The most written item is a member's own: its heartbeats, one per heartbeat interval (clock drift and retries allowed for). */
  hottestItemWritesPerSecond: (1_000 / HEARTBEAT_MS) * 1.05,
  itemsWrittenPerLeaseMinute: 0.1,
  bytesReadPerWorkerSecond: 4 * 1024,
  /** No item and no partition key over a third of what one DynamoDB partition serves (333 WCU/s, 1,000 RCU/s). */
  shareOfPartition: 1 / 3,
  coldTakeTicks: 3,
  coldAcquisitionsPerLease: 1.05,
  crashP99InLeases: 1.2,
};

interface GoalRow {
  workers: number;
  leases: number;
  /** False for 1,000 x 100,000 scaled from 100 x 10,000 (`scaleToFleet`). */
  measured: boolean;
  windowMs: number;
  wcuPerHeartbeat: number;
  bytesPerHeartbeat: number;
  /** The item with the most requests, and the one written most. */
  hottest: HottestItem;
  mostWritten: HottestItem;
  hottestPartition: HottestPartition;
  /** The busiest of the members' partition keys, and the digest's. */
  membersKey: KeyLoad | undefined;
  digestKey: KeyLoad | undefined;
  itemsWrittenPerLeaseMinute: number;
  bytesReadPerWorkerSecond: { mean: number; max: number };
  /** With each member's safety-net listing at its interval (computed from the run). */
  bytesReadWithListing: { mean: number; max: number };
  coldTakeTicksMax?: number;
  coldAcquisitionsPerLeaseMax?: number;
  /** `steady` where the cold figures are the steady run's own start rather than the cold section's. */
  coldFrom?: 'steady';
  crashP99InLeases?: number;
  /** `steady` where the crash figure is the steady run's crash of a hundredth rather than the crash section's. */
  crashFrom?: 'steady';
  /** The write side's goals: 1 WCU a heartbeat, the most written item a member's, items written per lease per minute. */
  writesMeetGoals: boolean;
  /**
   * The read side's: bytes read per worker per second (the window's and with the listing), and the
   * hottest item and partition key within a third of a partition's limits.
   */
  readsMeetGoals: boolean;
  /** The same figures with the roster as one record, where that shape ran. */
  oneRecord?: {
    wcuPerHeartbeat: number;
    bytesPerHeartbeat: number;
    hottest: OneRecordFigures['hottest'];
    /** The group's one partition key: the roster item and the leases. */
    partition: { wcuPerSecond: number; rcuPerSecond: number; shareOfPartition: number };
    itemsWrittenPerLeaseMinute: number;
    bytesReadPerWorkerSecond: { mean: number; max: number };
  };
  /** The read side of member items read whole every tick. */
  wholeRoster?: WholeRosterFigures;
}

/** The load nearest a partition's limits among `loads`. */
function hottestOf(loads: readonly (KeyLoad | undefined)[]): KeyLoad | undefined {
  return loads.reduce<KeyLoad | undefined>((a, b) => (b !== undefined && (a === undefined || b.shareOfPartition > a.shareOfPartition) ? b : a), undefined);
}

export function goalSection(steadyResults: readonly SteadyResult[], cold: readonly ColdResult[] | undefined, crashLarge: { workers: number; leases: number; p99InLeases: number } | undefined): GoalRow[] {
  const rows: GoalRow[] = steadyResults.map((r) => {
    const coldRuns = cold?.filter((c) => c.workers === r.workers && c.leases === r.leases) ?? [];
    const shape = shapeKey(r.workers, r.leases);
    const before = ONE_RECORD[shape];
    const whole = WHOLE_ROSTER[shape];
    const withListing = r.withListing.bytesReadPerWorkerSecond.dynamodb;
    return {
      workers: r.workers,
      leases: r.leases,
      measured: r.measured,
      windowMs: r.windowMs,
      wcuPerHeartbeat: r.perHeartbeat.wcu,
      bytesPerHeartbeat: r.perHeartbeat.dynamodbBytes,
      hottest: r.hottest,
      mostWritten: r.mostWritten,
      hottestPartition: r.hottestPartition,
      membersKey: hottestOf(memberBucketKeys(GROUP).map((key) => r.partitions[key])),
      digestKey: r.partitions[digestKey(GROUP)],
      itemsWrittenPerLeaseMinute: r.itemsWrittenPerLeaseMinute,
      bytesReadPerWorkerSecond: r.bytesReadPerWorkerSecond.dynamodb,
      bytesReadWithListing: withListing,
      // The worst over the start spreads the cold section runs; where it ran none at the shape, the steady
      // run's own start (with the change feed).
      ...(coldRuns.length > 0
        ? {
            coldTakeTicksMax: Math.max(...coldRuns.map((c) => c.fromLastJoin.max / TAKE_MS)),
            coldAcquisitionsPerLeaseMax: Math.max(...coldRuns.map((c) => c.acquisitions.max / c.leases)),
          }
        : r.coldStart === undefined
          ? {}
          : { coldTakeTicksMax: r.coldStart.takeTicks, coldAcquisitionsPerLeaseMax: r.coldStart.acquisitionsPerLease, coldFrom: 'steady' as const }),
      // The crash section's many phases where it ran the shape; otherwise the steady run's crash of a hundredth.
      ...(crashLarge !== undefined && crashLarge.workers === r.workers && crashLarge.leases === r.leases
        ? { crashP99InLeases: crashLarge.p99InLeases }
        : r.crash === undefined
          ? {}
          : { crashP99InLeases: r.crash.each.failures > 0 ? Infinity : r.crash.each.p99 / LEASE_MS, crashFrom: 'steady' as const }),
      writesMeetGoals:
        r.perHeartbeat.wcu <= GOALS.wcuPerHeartbeat && r.mostWritten.writesPerSecond <= GOALS.hottestItemWritesPerSecond && r.itemsWrittenPerLeaseMinute <= GOALS.itemsWrittenPerLeaseMinute,
      readsMeetGoals:
        Math.max(r.bytesReadPerWorkerSecond.dynamodb.max, withListing.max) <= GOALS.bytesReadPerWorkerSecond &&
        r.hottestPartition.shareOfPartition <= GOALS.shareOfPartition &&
        r.hottest.shareOfPartition <= GOALS.shareOfPartition,
      ...(before === undefined
        ? {}
        : {
            oneRecord: {
              wcuPerHeartbeat: before.perHeartbeat.wcu,
              bytesPerHeartbeat: before.perHeartbeat.dynamodbBytes,
              hottest: before.hottest,
              partition: { wcuPerSecond: before.wruPerMinute / 60, rcuPerSecond: before.rruPerMinute / 60, shareOfPartition: partitionShare(before.wruPerMinute / 60, before.rruPerMinute / 60) },
              itemsWrittenPerLeaseMinute: before.itemsWrittenPerLeaseMinute,
              bytesReadPerWorkerSecond: before.bytesReadPerWorkerSecond.dynamodb,
            },
          }),
      ...(whole === undefined ? {} : { wholeRoster: whole }),
    };
  });
  const rate = (value: number): string => fmt(value, value < 10 ? 3 : 0);
  console.log(`\n4. issue 28's goal table: one record -> whole roster -> watchers, DynamoDB's billing, steady figures of section 1 (one run each, seed 1)`);
  console.log('   "one record": the roster as one item holding every member; "whole roster": member items, every worker reading all of them every tick (both measured before, 20 simulated minutes); "watchers": this run');
  console.log('\n   write side: one record -> watchers');
  table(
    ['shape', `WCU/heartbeat (goal ${GOALS.wcuPerHeartbeat})`, 'bytes/heartbeat', 'most written item (now)', `its writes/s (goal ${fmt(GOALS.hottestItemWritesPerSecond, 2)})`, 'its WCU/s', `items written/lease/min (goal ${GOALS.itemsWrittenPerLeaseMinute})`, ''],
    rows.map((row) => [
      rowName(row),
      pairOf(row.oneRecord?.wcuPerHeartbeat, row.wcuPerHeartbeat, (value) => fmt(value, 1)),
      pairOf(row.oneRecord?.bytesPerHeartbeat, row.bytesPerHeartbeat, kb),
      shortItem(row.mostWritten.item),
      pairOf(row.oneRecord?.hottest.writesPerSecond, row.mostWritten.writesPerSecond, (value) => fmt(value, 3)),
      pairOf(row.oneRecord?.hottest.wcuPerSecond, row.mostWritten.wcuPerSecond, rate),
      pairOf(row.oneRecord?.itemsWrittenPerLeaseMinute, row.itemsWrittenPerLeaseMinute, (value) => fmt(value, 4)),
      verdict(row.writesMeetGoals),
    ]),
  );
  console.log(`\n   read side: one record -> whole roster -> watchers; "+ listing" adds each member's safety-net listing at its interval (computed from the run); a partition serves ${PARTITION_WCU.toLocaleString('en')} WCU/s and ${PARTITION_RCU.toLocaleString('en')} RCU/s (goal: a third)`);
  table(
    ['shape', `bytes read/worker/s mean (goal ${kb(GOALS.bytesReadPerWorkerSecond)})`, 'max', '+ listing: mean', 'max', 'hottest item (now)', 'its reads/s', 'share', 'hottest partition key (now)', 'its WCU/s', 'its RCU/s', 'share of a partition', ''],
    rows.map((row) => [
      rowName(row),
      trioOf(row.oneRecord?.bytesReadPerWorkerSecond.mean, row.wholeRoster?.bytesReadPerWorkerSecond.dynamodb.mean, row.bytesReadPerWorkerSecond.mean, kb),
      trioOf(row.oneRecord?.bytesReadPerWorkerSecond.max, row.wholeRoster?.bytesReadPerWorkerSecond.dynamodb.max, row.bytesReadPerWorkerSecond.max, kb),
      kb(row.bytesReadWithListing.mean),
      kb(row.bytesReadWithListing.max),
      shortItem(row.hottest.item),
      trioOf(row.oneRecord?.hottest.readsPerSecond, row.wholeRoster?.hottestItem.readsPerSecond, row.hottest.readsPerSecond, (value) => fmt(value, 1)),
      pct(row.hottest.shareOfPartition),
      row.hottestPartition.partition,
      trioOf(row.oneRecord?.partition.wcuPerSecond, row.wholeRoster?.membersKey.wcuPerSecond, row.hottestPartition.wcuPerSecond, rate),
      trioOf(row.oneRecord?.partition.rcuPerSecond, row.wholeRoster?.membersKey.rcuPerSecond, row.hottestPartition.rcuPerSecond, rate),
      trioOf(row.oneRecord?.partition.shareOfPartition, row.wholeRoster?.membersKey.shareOfPartition, row.hottestPartition.shareOfPartition, pct),
      verdict(row.readsMeetGoals),
    ]),
  );
  console.log('   (one record: the group\'s one key held the roster item and the leases; whole roster: the members\' key)');
  console.log('\n   the members\' key and the digest\'s, requests a second now: writes/s (WCU/s), reads/s (RCU/s)');
  const keyText = (load: KeyLoad | undefined): string => (load === undefined ? '-' : `${rate(load.writesPerSecond)} (${rate(load.wcuPerSecond)}), ${fmt(load.readsPerSecond, 1)} (${fmt(load.rcuPerSecond, 1)}), ${pct(load.shareOfPartition)}`);
  table(
    ['shape', `the busiest of ${memberBucketKey(GROUP, 0)} to #${MEMBER_BUCKETS - 1}: writes/s (WCU/s), reads/s (RCU/s), share`, `${digestKey(GROUP)}: writes/s (WCU/s), reads/s (RCU/s), share`],
    rows.map((row) => [rowName(row), keyText(row.membersKey), keyText(row.digestKey)]),
  );
  console.log('\n   moving leases (sections 2 and 3 of this run where they ran the shape, otherwise the steady run\'s own, marked "*"): "-" where not measured at that shape');
  table(
    ['shape', `cold: take ticks after last join (goal ${GOALS.coldTakeTicks})`, `acquisitions/leases (goal ${GOALS.coldAcquisitionsPerLease})`, `crash take-over p99 x leaseDuration (goal ${GOALS.crashP99InLeases})`],
    rows.map((row) => [
      shapeName(row.workers, row.leases),
      fmt(row.coldTakeTicksMax ?? NaN, 2) + (row.coldTakeTicksMax === undefined ? '' : ` ${verdict(row.coldTakeTicksMax <= GOALS.coldTakeTicks)}`) + (row.coldFrom === 'steady' ? ' *' : ''),
      fmt(row.coldAcquisitionsPerLeaseMax ?? NaN, 3) + (row.coldAcquisitionsPerLeaseMax === undefined ? '' : ` ${verdict(row.coldAcquisitionsPerLeaseMax <= GOALS.coldAcquisitionsPerLease)}`) + (row.coldFrom === 'steady' ? ' *' : ''),
      fmt(row.crashP99InLeases ?? NaN, 3) + (row.crashP99InLeases === undefined ? '' : ` ${verdict(row.crashP99InLeases <= GOALS.crashP99InLeases)}`) + (row.crashFrom === 'steady' ? ' *' : ''),
    ]),
  );
  console.log('   cold start: the cold section (no change feed, the worst of its start spreads) where it ran the shape; marked "*", the steady run\'s own start (change feed, started within half a take interval)');
  console.log('   crash: the p99 of the crash section\'s many phases where it ran the shape; marked "*", each lease of the steady run\'s crash of a hundredth of the group after its window (one run)');
  if (rows.some((row) => !row.measured)) console.log(`   (NOT MEASURED) rows: ${NOT_MEASURED} (see scaleToFleet; --fleet runs the shape). n/a: the one-record roster ${notRun}.`);
  return rows;
}
