/**
 * Section 5: the monthly DynamoDB on-demand bill of coordination, from section 1's steady request units,
 * beside the one-record roster's, the whole roster reads' (`before.ts`) and KCL 2.x's, computed from its
 * published behaviour (`billing.ts`).
 */
import { kclMonthly, KCL_RENEWALS_PER_LEASE_MINUTE, KCL_SCANS_PER_WORKER_MINUTE, MINUTES_PER_MONTH, monthlyUsd, USD_PER_MILLION_RRU, USD_PER_MILLION_WRU } from './billing.js';
import { ONE_RECORD, ONE_RECORD_FLEET_UNITS, WHOLE_ROSTER } from './before.js';
import { REAL_ID, type SteadyResult } from './steady.js';
import { fmt, NOT_MEASURED, rowName, shapeKey, table } from './shared.js';

interface CostRow {
  workers: number;
  leases: number;
  kcl: ReturnType<typeof kclMonthly>;
  /** With the roster as one record: measured, or (1,000 x 100,000) 128 x 12,800 scaled. */
  oneRecord: { wruPerMinute: number; rruPerMinute: number; usd: number; measured: boolean };
  /** Member items read whole every tick: measured, or (1,000 x 100,000) 100 x 10,000 scaled. */
  wholeRoster: { wruPerMinute: number; rruPerMinute: number; usd: number; measured: boolean } | undefined;
  /** Watchers: this run's steady window. */
  wruPerMinute: number;
  rruPerMinute: number;
  /** The window's read units but its listings, plus each member's safety-net listing at its interval. */
  rruPerMinuteWithListing: number;
  writesUsd: number;
  /** With the listing at its interval. */
  readsUsd: number;
  windowMs: number;
  /** False where scaled from 100 x 10,000 (`scaleToFleet`). */
  measured: boolean;
}

export function costSection(steadyResults: readonly SteadyResult[]): CostRow[] {
  const rows: CostRow[] = steadyResults.map((run) => {
    const before = ONE_RECORD[shapeKey(run.workers, run.leases)] ?? ONE_RECORD_FLEET_UNITS;
    const whole = WHOLE_ROSTER[shapeKey(run.workers, run.leases)];
    return {
      workers: run.workers,
      leases: run.leases,
      kcl: kclMonthly(run.workers, run.leases, REAL_ID),
      oneRecord: { wruPerMinute: before.wruPerMinute, rruPerMinute: before.rruPerMinute, usd: monthlyUsd(before.wruPerMinute, before.rruPerMinute), measured: before.measured },
      wholeRoster: whole && { wruPerMinute: whole.wruPerMinute, rruPerMinute: whole.rruPerMinute, usd: monthlyUsd(whole.wruPerMinute, whole.rruPerMinute), measured: whole.measured },
      wruPerMinute: run.wruPerMinute,
      rruPerMinute: run.rruPerMinute,
      rruPerMinuteWithListing: run.withListing.rruPerMinute,
      writesUsd: monthlyUsd(run.wruPerMinute, 0),
      readsUsd: monthlyUsd(0, run.withListing.rruPerMinute),
      windowMs: run.windowMs,
      measured: run.measured,
    };
  });
  const usd = (value: number): string => `$${Math.round(value).toLocaleString('en')}`;
  console.log(`\n5. coordination on DynamoDB on demand, a month ($${USD_PER_MILLION_WRU} per million WRU, $${USD_PER_MILLION_RRU} per million RRU, ${MINUTES_PER_MONTH.toLocaleString('en')} minutes); checkpoints left out of both sides`);
  console.log(`   KCL 2.x: every lease renewed ${KCL_RENEWALS_PER_LEASE_MINUTE} times a minute, every worker scans the lease table ${KCL_SCANS_PER_WORKER_MINUTE} times a minute (a scan bills the table's size; lease items of ${kclMonthly(1, 1, REAL_ID).tableBytes} bytes, no checkpoint)`);
  console.log("   Leasehold: the steady window's request units a minute, with the roster as one record and as member items read whole every tick (before), and with watchers (now);");
  console.log("   the watchers' reads count each member's safety-net listing at its interval (listIntervalMs x members / 10, computed from the run), not the window's listings");
  table(
    ['group', 'KCL writes', 'KCL scans', 'KCL total', 'one record: total', 'whole roster: total', 'watchers: WRU/min', 'RRU/min (window)', 'RRU/min + listing', 'writes', 'reads', 'total'],
    rows.map((row) => [
      rowName(row),
      usd(row.kcl.writesUsd),
      usd(row.kcl.scansUsd),
      usd(row.kcl.writesUsd + row.kcl.scansUsd),
      usd(row.oneRecord.usd) + (row.oneRecord.measured ? '' : ' (NOT MEASURED: 128 x 12,800 scaled)'),
      row.wholeRoster === undefined ? 'n/a' : usd(row.wholeRoster.usd) + (row.wholeRoster.measured ? '' : ' (NOT MEASURED: 100 x 10,000 scaled)'),
      fmt(row.wruPerMinute, 0),
      fmt(row.rruPerMinute, 0),
      fmt(row.rruPerMinuteWithListing, 0),
      usd(row.writesUsd),
      usd(row.readsUsd),
      usd(row.writesUsd + row.readsUsd),
    ]),
  );
  if (rows.some((row) => !row.measured)) console.log(`   (NOT MEASURED) rows: ${NOT_MEASURED} (see scaleToFleet; --fleet runs the shape)`);
  return rows;
}
