/**
 * The storage contract: what a backend must provide so that core can build leases, checkpoints and
 * leader election on it. Every write is a compare-and-set on the record's `version`; core builds renew,
 * take, steal, hand off, release, checkpoint and delete from that one primitive (DESIGN section 3).
 *
 * An adapter holds no timing and no policy. It validates its input with the helpers of `./limits.js`,
 * stores each record whole (every field, including ones core adds later), and reports each write's
 * outcome exactly.
 */
import type { CorruptRecordError, LeaseholdError } from './errors.js';

/** A position in a partition: opaque to core, or one of the {@link Checkpoint} sentinels. */
export type Position = string;

/** The checkpoint sentinels core understands, and helpers to build and recognise them. */
export const Checkpoint = {
  /** Start from the oldest record the stream still holds. */
  TRIM_HORIZON: 'TRIM_HORIZON',
  /** Start from the records written after the reader starts. */
  LATEST: 'LATEST',
  /** The partition is closed and every record in it was processed. */
  SHARD_END: 'SHARD_END',
  /** Start from the first record written at or after `timestampMs` (milliseconds since the epoch). */
  atTimestamp(timestampMs: number): Position {
    return `AT_TIMESTAMP:${Math.trunc(timestampMs)}`;
  },
  /** The timestamp of an `AT_TIMESTAMP:<ms>` position, or `undefined` for any other position. */
  timestampOf(position: Position): number | undefined {
    const match = /^AT_TIMESTAMP:(\d+)$/.exec(position);
    return match ? Number(match[1]) : undefined;
  },
  /** Whether the position is a sentinel rather than a position inside the partition. */
  isSentinel(position: Position): boolean {
    return (
      position === 'TRIM_HORIZON' ||
      position === 'LATEST' ||
      position === 'SHARD_END' ||
      position.startsWith('AT_TIMESTAMP:')
    );
  },
} as const;

/**
 * The record format this version of core writes. A record of a newer format was written by a newer core
 * whose rules this one does not know: core never writes such a record (it stops with a
 * `RecordFormatError`), and an adapter stores and returns it like any other.
 */
export const RECORD_FORMAT = 1;

/**
 * The fields of a lease that core writes; an adapter stores them whole and gives them back unchanged.
 *
 * A state may also carry fields this version of core does not name (added by a later core without a
 * change of {@link RECORD_FORMAT}): their values are JSON values. An adapter stores every field of the
 * state it is given and returns it unchanged, and core carries such fields into its own writes, so a
 * rolling upgrade never wipes them.
 */
export interface LeaseState {
  /** The record format (see {@link RECORD_FORMAT}). */
  readonly format: number;
  /** The `workerId` that holds the lease, or `null` when the lease is free. */
  readonly owner: string | null;
  /**
   * The ownership epoch: incremented by core on every change of owner, never lowered. Handed to user code
   * as the fencing token.
   */
  readonly epoch: number;
  /** The position up to which the partition was processed, or `null` before the first checkpoint. */
  readonly checkpoint: Position | null;
  /** The lease keys of the partitions this one was split or merged from (parents finish first). */
  readonly parentKeys: readonly string[];
  /** The `workerId` that asked the owner to hand the lease over (a cooperative steal), or `null`. */
  readonly pendingOwner: string | null;
  /** Free-form string fields that adapters round-trip without interpreting. */
  readonly metadata: Readonly<Record<string, string>>;
}

/** A lease as stored: one partition's owner, checkpoint and lineage in one group. */
export interface LeaseRecord extends LeaseState {
  /** The consuming application the lease belongs to. */
  readonly group: string;
  /** The partition the lease is for (for Kinesis, the shard id). */
  readonly leaseKey: string;
  /**
   * Incremented by the store on every successful write. It never goes backwards for a key, not even
   * when the key is deleted and created again.
   */
  readonly version: number;
}

/** The input of {@link CheckpointStorage.createLease}: the key and its initial state. */
export interface NewLease extends Partial<LeaseState> {
  readonly group: string;
  readonly leaseKey: string;
}

/** What a lease change means to workers that wait for free leases; carried by the change feed. */
export type LeaseChangeKind = 'released' | 'handoff-requested' | 'handed-off' | 'created';

/** One conditional write in a {@link CheckpointStorage.updateLeases} batch. */
export interface LeaseUpdate {
  /** The lease to write. */
  readonly leaseKey: string;
  /** The version the caller read; the write applies only if the stored version still equals it. */
  readonly expectedVersion: number;
  /** The whole new state; the stored version becomes `expectedVersion + 1`. */
  readonly next: LeaseState;
  /**
   * When set and the write applies, the adapter publishes this change on its change feed (if it has
   * one), ideally in the same round trip as the write.
   */
  readonly notify?: LeaseChangeKind | undefined;
}

/** The write applied; `record` is what is stored now. */
export interface Applied<T> {
  readonly status: 'applied';
  readonly record: T;
}

/** The condition failed and nothing changed; `current` is the stored record, or `null` if there is none. */
export interface Conflict<T> {
  readonly status: 'conflict';
  readonly current: T | null;
}

/**
 * The outcome is not known: an error happened after the request may have reached the backend, or the
 * outcome could not be read back. Core never counts it as success and re-reads before acting.
 */
export interface Unknown {
  readonly status: 'unknown';
  readonly error: LeaseholdError;
}

/** The exact outcome of one conditional write. */
export type WriteResult<T> = Applied<T> | Conflict<T> | Unknown;

/** The outcome of a conditional delete: `applied` carries no record, since none is left. */
export type DeleteResult = { readonly status: 'applied' } | Conflict<LeaseRecord> | Unknown;

/**
 * What {@link CheckpointStorage.listLeases} returns: every lease of the group that reads back as a valid
 * record, and one `CorruptRecordError` (naming the key) for each stored lease that does not, so that one
 * bad record never hides the others. Core neither takes, writes nor deletes a corrupt lease; it reports it.
 */
export interface LeaseListing {
  readonly leases: LeaseRecord[];
  readonly corrupt: CorruptRecordError[];
}

/** Options of {@link CheckpointStorage.createLease}. */
export interface CreateLeaseOptions {
  /**
   * Create the lease even if the key had a lease that was deleted since (an operator restoring a lease,
   * a copy between backends). Without it such a key is never created again (a `conflict` with
   * `current: null`): a lease is deleted only when its partition is finished or gone, and creating it
   * again would read the partition again.
   */
  readonly recreate?: boolean;
}

/** A change published on the feed of a group. */
export interface LeaseChange {
  readonly group: string;
  readonly leaseKey: string;
  readonly kind: LeaseChangeKind;
}

/** An open subscription to a change feed; close it (or `await using` it) to stop listening. */
export interface ChangeSubscription extends AsyncDisposable {
  close(): Promise<void>;
}

/**
 * Where the leases and checkpoints of every group live. All operations are atomic per record; listing
 * is strongly consistent.
 *
 * How failures surface:
 * - invalid input: an `InvalidInputError` is thrown before anything is sent;
 * - a read that fails: a `StorageUnavailableError` is thrown; a stored record that cannot be read back
 *   throws a `CorruptRecordError` naming it;
 * - a write the backend certainly did not receive (no connection could be had): a
 *   `StorageUnavailableError` may be thrown, since nothing was written;
 * - a write that may have reached the backend (a timeout, a reset connection, a server restart): its
 *   result is `unknown`, carrying a `StorageOutcomeUnknownError` or the adapter's typed error; never a
 *   guess at `conflict` or `applied`;
 * - a conflict whose current record is corrupt: `unknown` carrying the `CorruptRecordError`, so that one
 *   bad record cannot fail the other updates of a batch; a write decides on the version alone, so a write
 *   at the stored version replaces even a record that could not be read back (a bad writer that damages a
 *   record without moving its version has its damage overwritten, as on every backend);
 * - a listing with corrupt records: the valid ones in `leases`, one `CorruptRecordError` per corrupt one
 *   in `corrupt`; the listing itself throws only when it cannot be read at all.
 */
export interface CheckpointStorage {
  /**
   * Every lease of the group, in any order, complete however many there are (pages are the adapter's
   * business); a stored lease that cannot be read back is in `corrupt`, not in `leases`.
   */
  listLeases(group: string): Promise<LeaseListing>;

  /** One lease, or `null` when the group has no live lease with that key. */
  getLease(group: string, leaseKey: string): Promise<LeaseRecord | null>;

  /**
   * Creates the lease if the key never had one; otherwise a conflict with the current lease, or with
   * `current: null` when the key had a lease that was deleted. With `recreate` a deleted key is created
   * again: the new record's version is greater than any the key ever had and its epoch at least the
   * greatest it ever had, so that fencing tokens never repeat after delete-then-recreate. A new key
   * starts at version 1.
   */
  createLease(lease: NewLease, options?: CreateLeaseOptions): Promise<WriteResult<LeaseRecord>>;

  /**
   * Writes many leases of one group, each conditionally on its version, in as few round trips as the
   * backend allows. Returns one result per update, in the order given. A key that appears twice in one
   * batch is invalid input.
   */
  updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]>;

  /** Deletes the lease if its stored version equals `expectedVersion`. */
  deleteLease(group: string, leaseKey: string, expectedVersion: number): Promise<DeleteResult>;

  /**
   * Optional change feed: calls `listener` when another worker releases or hands over a lease of the
   * group, so that waiting workers can act at once instead of at their next tick. Delivery is best
   * effort; core never depends on it for safety.
   */
  subscribe?(group: string, listener: (change: LeaseChange) => void): Promise<ChangeSubscription>;
}

/** The fields of a leader record that core writes; like a lease's, it may carry fields core does not name. */
export interface LeaderState {
  /** The record format (see {@link RECORD_FORMAT}). */
  readonly format: number;
  /** The `workerId` of the leader, or `null` when nobody leads. */
  readonly holder: string | null;
  /** The term: incremented by core on every change of leader, never lowered; the leader's fencing token. */
  readonly term: number;
  /** Free-form string fields that adapters round-trip without interpreting. */
  readonly metadata: Readonly<Record<string, string>>;
}

/** The leader record of a group. */
export interface LeaderRecord extends LeaderState {
  readonly group: string;
  /** Incremented by the store on every successful write; never goes backwards. */
  readonly version: number;
}

/** The input of {@link LeaderStore.createLeader}. */
export interface NewLeader extends Partial<LeaderState> {
  readonly group: string;
}

/** Where each group's leader record lives: one record per group, written only conditionally. */
export interface LeaderStore {
  /** The group's leader record, or `null` if none was ever created. */
  getLeader(group: string): Promise<LeaderRecord | null>;
  /** Creates the group's leader record if it has none; otherwise a conflict with the current one. */
  createLeader(leader: NewLeader): Promise<WriteResult<LeaderRecord>>;
  /** Replaces the leader record if its stored version equals `expectedVersion`; the version becomes `expectedVersion + 1`. */
  updateLeader(group: string, expectedVersion: number, next: LeaderState): Promise<WriteResult<LeaderRecord>>;
}

/** A store that keeps both leases and leader records, as every adapter shipped with Leasehold does. */
export type Storage = CheckpointStorage & LeaderStore;

const LEASE_NAMED = new Set(['group', 'leaseKey', 'version', 'format', 'owner', 'epoch', 'checkpoint', 'parentKeys', 'pendingOwner', 'metadata']);
const LEADER_NAMED = new Set(['group', 'version', 'format', 'holder', 'term', 'metadata']);

/** Copies the fields of `value` that `named` does not hold (fields a later core added), one level deep. */
function copyUnnamed(value: object, named: ReadonlySet<string>, into: Record<string, unknown>): void {
  for (const name in value) {
    if (named.has(name) || !Object.prototype.hasOwnProperty.call(value, name)) continue;
    const field = (value as Record<string, unknown>)[name];
    if (field === undefined) continue;
    into[name] = Array.isArray(field) ? [...(field as unknown[])] : typeof field === 'object' && field !== null ? { ...field } : field;
  }
}

/**
 * The full state of a lease: every field of `lease` except its identity (group, key, version), including
 * fields this core does not name, with defaults for the fields it left out. Use it to write a lease you
 * read: `{ ...leaseStateOf(record), owner: null }` keeps what a newer core added.
 */
export function leaseStateOf(lease: Partial<LeaseState>): LeaseState {
  const state: LeaseState = {
    format: lease.format ?? RECORD_FORMAT,
    owner: lease.owner ?? null,
    epoch: lease.epoch ?? 0,
    checkpoint: lease.checkpoint ?? null,
    parentKeys: lease.parentKeys ? [...lease.parentKeys] : [],
    pendingOwner: lease.pendingOwner ?? null,
    metadata: lease.metadata ? { ...lease.metadata } : {},
  };
  copyUnnamed(lease, LEASE_NAMED, state as unknown as Record<string, unknown>);
  return state;
}

/** The full state of a leader record, every field but its identity, with defaults for what it left out. */
export function leaderStateOf(leader: Partial<LeaderState>): LeaderState {
  const state: LeaderState = {
    format: leader.format ?? RECORD_FORMAT,
    holder: leader.holder ?? null,
    term: leader.term ?? 0,
    metadata: leader.metadata ? { ...leader.metadata } : {},
  };
  copyUnnamed(leader, LEADER_NAMED, state as unknown as Record<string, unknown>);
  return state;
}

/** Helpers that build write results. */
export const result = {
  applied<T>(record: T): Applied<T> {
    return { status: 'applied', record };
  },
  conflict<T>(current: T | null): Conflict<T> {
    return { status: 'conflict', current };
  },
  unknown(error: LeaseholdError): Unknown {
    return { status: 'unknown', error };
  },
} as const;
