/**
 * The events a lease coordinator emits, apart from the coordinator so that its parts (membership) name
 * them without importing it.
 */
import type { Position } from '../storage.js';

/** Why a lease was lost. */
export type LossReason =
  | 'taken' // another worker owns it now
  | 'deleted' // the lease is gone from storage
  | 'self-fenced' // no successful heartbeat within the hold; stopped whether or not storage answered
  | 'expelled' // this worker's membership was declared dead (or replaced): it dropped everything and joins again
  | 'handoff-timeout' // a requested handoff did not drain in time; the work stopped and the lease is handed over later
  | 'shutdown-timeout'; // stop() could not drain it in time; the lease lapses

/** The events of a {@link LeaseCoordinator}. */
export interface LeaseCoordinatorEvents {
  /**
   * A lease is held from now: taken free, taken from a dead member (`expired`), or written to this worker
   * by another (`handoff`: by an owner handing it over, or by the member that declared its owner dead and
   * dealt its leases, DESIGN section 4).
   */
  acquired: { leaseKey: string; fencingToken: number; how: 'free' | 'expired' | 'handoff'; checkpoint: Position | null };
  /** A heartbeat applied: every lease in `leaseKeys` is held for another hold. */
  renewed: { leaseKeys: string[]; durationMs: number };
  lost: { leaseKey: string; fencingToken: number; reason: LossReason };
  /** This worker joined the group's roster as a new incarnation. */
  joined: { incarnation: string };
  /** This worker declared a member dead (its heartbeat stopped for its lease duration): its leases are free to take. */
  'member-dead': { workerId: string; incarnation: string };
  /** Another worker asked for a lease this worker holds. */
  'handoff-requested': { leaseKey: string; to: string };
  /**
   * The change feed says a lease this worker holds carries a rewind request now (see `applyRewind`): the
   * runtime applies it with {@link LeaseCoordinator.moveCheckpoint} once its batch in flight is done.
   */
  'rewind-requested': { leaseKey: string };
  /**
   * This worker, two or more above the least loaded member, hands a lease to a member below its share
   * without being asked (a join or a crash left the group unbalanced).
   */
  'handoff-offered': { leaseKey: string; to: string };
  /** This worker asked another to hand a lease over (a cooperative steal). */
  'steal-requested': { leaseKey: string; from: string };
  /** A lease moved to the worker that asked for it; `durationMs` since the request was seen. */
  'handed-off': { leaseKey: string; to: string; durationMs: number };
  released: { leaseKey: string };
  /** A checkpoint was stored; `durationMs` includes waiting for earlier writes on the lease. */
  checkpointed: { leaseKey: string; position: Position; durationMs: number };
  /**
   * A lease of the group cannot be read back (reported once per key until it is readable again): it is
   * neither taken, written nor deleted, and its children wait. An operator must repair or delete it.
   */
  'corrupt-lease': { leaseKey: string; error: Error };
  /**
   * The coordinator met a record of a newer format (a rolling upgrade): it never writes such a record, and
   * stops. The error is a `RecordFormatError`.
   */
  fatal: { error: Error };
  /** The outcome of one storage write call (a batch counts each of its leases). */
  storage: { operation: string; applied: number; conflict: number; unknown: number };
  error: { error: Error; operation: string };
}
