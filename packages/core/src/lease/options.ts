/**
 * What a lease coordinator can be told (DESIGN section 4, the timing and the rules it names), and the
 * option names it accepts: a misspelt option is refused rather than silently ignored. The coordinator
 * exports them; they live here so that its file holds what it does, not what it can be told.
 */
import type { Clock, Random } from '../clock.js';
import { optionKeys } from '../known-options.js';
import type { CheckpointStorage, Position } from '../storage.js';
import type { DrainReason, HeldLease } from './held.js';
import type { EligibilityPredicate } from './taking.js';

/** Options of `LeaseCoordinator`. Durations are in milliseconds of the injected clock. */
export interface LeaseCoordinatorOptions {
  /** Where the leases and the group's roster live. */
  storage: CheckpointStorage;
  /** The group (consuming application) whose leases this worker shares. */
  group: string;
  /** This worker's id, unique among the group's live processes. Default: host name, pid and a random suffix. */
  workerId?: string;
  /**
   * How long this worker's membership lasts without a heartbeat, as others observe it; others wait the
   * longer of theirs and this one before declaring it dead. Default 10,000 (KCL's failoverTimeMillis).
   */
  leaseDurationMs?: number;
  /**
   * How often this worker heartbeats its member record: one conditional write, whatever it holds.
   * Default 0.65 × the lease duration.
   */
  renewIntervalMs?: number;
  /** How often the roster is read, to see members join, die and ask for leases. Default 2,000. */
  takeIntervalMs?: number;
  /**
   * How often the group's leases are listed when nothing signalled a change (a safety net: membership
   * changes, the members' change counters and the change feed prompt a listing at once). Default 600,000.
   */
  listIntervalMs?: number;
  /** The most leases this worker holds. Default: no limit. */
  maxLeasesPerWorker?: number;
  /** The most handoffs this worker requests per take tick (four may be open at once). Default 2. */
  maxStealsPerTick?: number;
  /** The bound ρ on clock-rate error (rates in [1 - ρ, 1 + ρ]). Default 0.01. */
  maxClockDrift?: number;
  /** Subtracted from the time a holder counts on after a heartbeat. Default min(500, leaseDurationMs / 20). */
  safetyMarginMs?: number;
  /**
   * How long an owner waits for a lease someone asked for to drain before it stops the work anyway; the
   * lease is then handed over a lease duration later. Default half the lease duration.
   */
  handoffTimeoutMs?: number;
  /** Which leases may be taken. Default `parentsFinished`. */
  isEligible?: EligibilityPredicate;
  /**
   * Orders two checkpoints of the lease `leaseKey`; checkpoints only move forward. Default
   * `compareNumericPositions`.
   */
  comparePositions?: (a: Position, b: Position, leaseKey: string) => number;
  /**
   * Called before a held lease is given away, to finish the work in flight and checkpoint. The lease is
   * still held meanwhile. A handoff waits at most `handoffTimeoutMs` for it.
   */
  onDrain?: (lease: HeldLease, reason: DrainReason) => Promise<void>;
  /** Listen to the store's change feed (if it has one) to act on releases, handoffs and new leases at once. Default true. */
  useChangeFeed?: boolean;
  /**
   * How many members watch each member's liveness (DESIGN section 4, "Watchers and the roster digest"):
   * each reads the few members it watches every take tick and the rest only when the group's roster digest
   * moves. A member is taken over within the liveness bound as long as one of its watchers outlives it; a
   * member that dies together with all of them is taken over a lease duration and two take ticks later.
   * From 1 to 15. Default 3. Used when the store has the watchers' reads (`getMembers` and the digest);
   * without them every member reads the whole roster every take tick.
   */
  watchers?: number;
  /**
   * Groups of up to this many members read the whole roster every take tick, as on a store without the
   * watchers' reads: every member then judges every other's expiry at once (the fastest take-over), and a
   * roster of up to about 16 members of 300 bytes costs DynamoDB fewer read units whole than the digest
   * and a few members by id. Larger groups use the watchers and the digest. Default 16; 0 always watches.
   */
  wholeRosterUpTo?: number;
  /**
   * This worker's failure domain: what fails together with it (a host, a process holding several
   * coordinators, a zone), written into its member record. When every member of the group names one and
   * there are several, each domain's members are spread round the watchers' ring, so that a member's
   * watchers are of other domains while others have members, and a domain lost at once leaves none of its
   * members watched by nobody (which is taken over a lease duration and two take ticks later). 1 to 512
   * UTF-8 bytes. Default none: the ring orders members by the hash of their ids alone, as it does whenever
   * any member names no domain (a worker of an earlier release).
   */
  failureDomain?: string;
  /** The monotonic clock every timing decision is made on. Default: the process's. */
  clock?: Clock;
  /** The random source for shuffling, jitter and incarnations. Default: `Math.random`. */
  random?: Random;
}

export const COORDINATOR_KEYS = optionKeys<LeaseCoordinatorOptions>({
  storage: true,
  group: true,
  workerId: true,
  leaseDurationMs: true,
  renewIntervalMs: true,
  takeIntervalMs: true,
  listIntervalMs: true,
  maxLeasesPerWorker: true,
  maxStealsPerTick: true,
  maxClockDrift: true,
  safetyMarginMs: true,
  handoffTimeoutMs: true,
  isEligible: true,
  comparePositions: true,
  onDrain: true,
  watchers: true,
  wholeRosterUpTo: true,
  failureDomain: true,
  useChangeFeed: true,
  clock: true,
  random: true,
});
