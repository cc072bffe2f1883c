/**
 * The figures of the three earlier designs this bench measured, by the same method, and prints beside
 * this run's: the per-lease renewals the roster replaced (`RENEWALS`), the roster as one record per group
 * (`ONE_RECORD`) and member items read whole by every worker every take tick (`WHOLE_ROSTER`). Constants:
 * nothing here runs.
 */
import type { Backend } from './meter.js';
import type { PerHeartbeat } from './steady.js';

/** Figures of the per-lease renewals the roster replaced, measured by the same method. */
export const RENEWALS = {
  itemsReadPerLeaseMinute: { '10x1000': 299, '50x1000': 1_501, '100x10000': 3_006 } as Record<string, number>,
  itemsWrittenPerLeaseMinute: { '10x1000': 18.0, '50x1000': 18.0, '100x10000': 19.2 } as Record<string, number>,
  coldStart10x1000: { seconds: 202, acquisitions: 1_900 },
};

/** The steady figures of one shape with the roster kept as ONE record per group, as this bench measured them. */
export interface OneRecordFigures {
  /** The roster item (every member on it). */
  rosterItemBytes: number;
  perHeartbeat: PerHeartbeat;
  /** The roster item: every heartbeat wrote it and every roster read read it. */
  hottest: { item: string; writesPerSecond: number; wcuPerSecond: number; readsPerSecond: number; rcuPerSecond: number };
  itemsReadPerLeaseMinute: number;
  itemsWrittenPerLeaseMinute: number;
  bytesReadPerWorkerSecond: Record<Backend, { mean: number; max: number }>;
  /** Group-wide, every request on the group's one partition key (roster and leases). */
  wruPerMinute: number;
  rruPerMinute: number;
  /** Whether the shape ran; 1,000 x 100,000 did not (at most 128 members): its units are 128 x 12,800's, scaled. */
  measured: boolean;
}

/**
 * The "before" of member items: the same bench when a group's roster was ONE record (one DynamoDB item
 * holding every member, written whole by every heartbeat; one Postgres row whose members document every
 * heartbeat rewrote; Redis as now, a hash field per member), capped at 128 members. One run each, 20
 * simulated minutes, seed 1. 1,000 x 100,000 could not run: its units a minute are the 128 x 12,800 run's
 * scaled by how each operation grew with the roster (member writes and roster reads x (1,000 / 128)^2,
 * listings x (1,000 / 128) x (100,000 / 12,800)).
 */
export const ONE_RECORD: Record<string, OneRecordFigures> = {
  '10x1000': {
    rosterItemBytes: 2_710,
    perHeartbeat: { dynamodbBytes: 2_709.9, wcu: 3, redisBytes: 185, postgresBytes: 2_257.2 },
    hottest: { item: 'roster', writesPerSecond: 1.539, wcuPerSecond: 4.618, readsPerSecond: 5.018, rcuPerSecond: 5.018 },
    itemsReadPerLeaseMinute: 1.301,
    itemsWrittenPerLeaseMinute: 0.09235,
    bytesReadPerWorkerSecond: { dynamodb: { mean: 1_781.6, max: 1_792.4 }, redis: { mean: 1_218.4, max: 1_225.8 }, postgres: { mean: 1_422.7, max: 1_431.7 } },
    wruPerMinute: 277.05,
    rruPerMinute: 363.1,
    measured: true,
  },
  '100x10000': {
    rosterItemBytes: 27_020,
    perHeartbeat: { dynamodbBytes: 26_971.0, wcu: 27, redisBytes: 185, postgresBytes: 22_653.4 },
    hottest: { item: 'roster', writesPerSecond: 15.355, wcuPerSecond: 414.585, readsPerSecond: 50.115, rcuPerSecond: 350.805 },
    itemsReadPerLeaseMinute: 10.301,
    itemsWrittenPerLeaseMinute: 0.092135,
    bytesReadPerWorkerSecond: { dynamodb: { mean: 17_733.1, max: 17_904.4 }, redis: { mean: 12_171.3, max: 12_288.8 }, postgres: { mean: 14_252.7, max: 14_396.6 } },
    wruPerMinute: 24_875.1,
    rruPerMinute: 27_228.3,
    measured: true,
  },
  '128x12800': {
    rosterItemBytes: 34_579,
    perHeartbeat: { dynamodbBytes: 34_532.5, wcu: 34, redisBytes: 185, postgresBytes: 29_011.1 },
    hottest: { item: 'roster', writesPerSecond: 19.684, wcuPerSecond: 669.262, readsPerSecond: 64.197, rcuPerSecond: 577.77 },
    itemsReadPerLeaseMinute: 13.101,
    itemsWrittenPerLeaseMinute: 0.09227,
    bytesReadPerWorkerSecond: { dynamodb: { mean: 22_716.7, max: 22_922.6 }, redis: { mean: 15_588.4, max: 15_729.6 }, postgres: { mean: 18_262.2, max: 18_435.1 } },
    wruPerMinute: 40_155.7,
    rruPerMinute: 44_791,
    measured: true,
  },
};
/** 1,000 x 100,000 with one roster record: NOT MEASURED (the roster held 128 members), 128 x 12,800 scaled. */
export const ONE_RECORD_FLEET_UNITS = { wruPerMinute: 2_450_909.4, rruPerMinute: 2_733_825.7, measured: false };

/** The read side of member items when every worker read the whole roster every take tick, as this bench measured it. */
export interface WholeRosterFigures {
  itemsReadPerLeaseMinute: number;
  bytesReadPerWorkerSecond: Record<Backend, { mean: number; max: number }>;
  /** A member's item: its heartbeats, and every roster Query, which read it. */
  hottestItem: { writesPerSecond: number; readsPerSecond: number };
  /** The members' partition key: every heartbeat and every roster Query. */
  membersKey: { wcuPerSecond: number; rcuPerSecond: number; shareOfPartition: number };
  wruPerMinute: number;
  rruPerMinute: number;
  /** False for 1,000 x 100,000: 100 x 10,000 scaled (every worker's roster read of 1,000 members every tick). */
  measured: boolean;
}

/**
 * The "before" of watchers: member items (one per member, as now) read whole by every worker every take
 * tick, with every member listing the leases every 600 s. One run each, 20 simulated minutes, seed 1, by
 * this bench before the digest and the watchers; 1,000 x 100,000 is 100 x 10,000 scaled (NOT MEASURED).
 */
export const WHOLE_ROSTER: Record<string, WholeRosterFigures> = {
  '10x1000': {
    itemsReadPerLeaseMinute: 4.011,
    bytesReadPerWorkerSecond: { dynamodb: { mean: 1_661.1, max: 1_671.0 }, redis: { mean: 1_218.4, max: 1_225.8 }, postgres: { mean: 1_218.4, max: 1_225.8 } },
    hottestItem: { writesPerSecond: 0.155, readsPerSecond: 5.018 },
    membersKey: { wcuPerSecond: 1.539, rcuPerSecond: 5.018, shareOfPartition: 0.0017 },
    wruPerMinute: 92.35,
    rruPerMinute: 363.1,
    measured: true,
  },
  '100x10000': {
    itemsReadPerLeaseMinute: 40.069,
    bytesReadPerWorkerSecond: { dynamodb: { mean: 16_620.3, max: 16_777.5 }, redis: { mean: 12_171.3, max: 12_288.8 }, postgres: { mean: 12_171.3, max: 12_288.8 } },
    hottestItem: { writesPerSecond: 0.156, readsPerSecond: 50.115 },
    membersKey: { wcuPerSecond: 15.355, rcuPerSecond: 350.805, shareOfPartition: 0.117 },
    wruPerMinute: 921.3,
    rruPerMinute: 27_228.3,
    measured: true,
  },
  '1000x100000': {
    itemsReadPerLeaseMinute: 400.695,
    bytesReadPerWorkerSecond: { dynamodb: { mean: 166_203.2, max: 167_775.1 }, redis: { mean: 121_712.8, max: 122_887.5 }, postgres: { mean: 121_712.8, max: 122_887.5 } },
    hottestItem: { writesPerSecond: 0.156, readsPerSecond: 501.15 },
    membersKey: { wcuPerSecond: 153.558, rcuPerSecond: 30_570.658, shareOfPartition: 10.19 },
    wruPerMinute: 9_213.5,
    rruPerMinute: 2_452_039.5,
    measured: false,
  },
};
