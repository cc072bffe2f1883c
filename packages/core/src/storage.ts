/**
 * The storage contract: what a backend must provide so that core can build leases, checkpoints and
 * leader election on it. Every write is a compare-and-set on the record's `version`; core builds join,
 * heartbeat, declare dead, take, hand off, release, checkpoint and delete from that one primitive (DESIGN
 * sections 3 and 4).
 *
 * An adapter holds no timing and no policy. It validates its input with the helpers of `@leasehold/core/adapter`,
 * stores each record whole (every field, including ones core adds later), and reports each write's
 * outcome exactly. The conformance suite (`@leasehold/core/testing`) checks every rule written here;
 * its test titles use the same words.
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
 * The version of the storage contract this core implements: the rules of this file and of DESIGN section 3,
 * as the conformance suite checks them. It moves by one with every change that an adapter written for the
 * version before must follow (a new operation, a new rule, a changed record type); `UPGRADING.md` has a
 * section for each ("Contract version N"). An adapter declares the version it was written for as its
 * `contractVersion`, a number written in its own code (never this constant, which would follow core without
 * the adapter following the contract), and core refuses a storage of any other version when it is handed
 * one, with a `ContractVersionError`.
 */
export const STORAGE_CONTRACT_VERSION = 8;

/**
 * The fields of a lease that core writes; an adapter stores them whole and gives them back unchanged.
 *
 * A state may also carry fields this version of core does not name (added by a later core without a
 * change of {@link RECORD_FORMAT}): their values are JSON values. An adapter stores every field of the
 * state it is given and returns it unchanged, and core carries such fields into its own writes, so a
 * rolling upgrade never wipes them.
 *
 * Every value the contract allows round-trips exactly, through create, update, get, list and a
 * conflict's current record: the format as given, any string (NUL and lone surrogates included) in a
 * checkpoint, metadata or a field core does not name, metadata keys such as `__proto__` or `a.b`, numbers
 * of fields core does not name as JavaScript reads them (`0.1`, `1e21`, `5e-324`), and every field at
 * its largest allowed value (see `limits`), with epochs, terms and formats up to
 * `Number.MAX_SAFE_INTEGER`.
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
  /**
   * The incarnation of the owner's membership (see {@link MemberState}) the lease was taken in, or `null`
   * when the lease is free. The owner holds the lease only while that incarnation is alive in the roster.
   */
  readonly incarnation: string | null;
  /** Free-form string fields that adapters round-trip without interpreting. */
  readonly metadata: Readonly<Record<string, string>>;
}

/**
 * A lease as stored: one partition's owner, checkpoint and lineage in one group.
 *
 * Names (groups, lease keys) are compared byte for byte: names that differ only in case, Unicode
 * normalization or trailing spaces are different names, and a name of up to 512 bytes is stored whole.
 * Groups side by side never see each other, even when one name is a prefix of another.
 */
export interface LeaseRecord extends LeaseState {
  /** The consuming application the lease belongs to. */
  readonly group: string;
  /** The partition the lease is for (for Kinesis, the shard id). */
  readonly leaseKey: string;
  /**
   * A new key starts at version 1, and the store increments the version by one on every update that
   * applies: every one, even an update that writes exactly the stored state or changes only the
   * checkpoint (a checkpoint's fencing relies on it). It never goes backwards for a key, not even when the
   * key is deleted and created again.
   */
  readonly version: number;
}

/** The input of {@link CheckpointStorage.createLease}: the key and its initial state. */
export interface NewLease extends Partial<LeaseState> {
  readonly group: string;
  readonly leaseKey: string;
}

/**
 * What a lease change means to workers; carried by the change feed. `created` is published by the adapter
 * itself whenever `createLease` applies; the others by the `notify` of an update: `released` and
 * `handed-off` to workers that wait for free leases, `rewind` to the owner of a lease an operator asked to
 * rewind (see `applyRewind`).
 */
export type LeaseChangeKind = 'released' | 'handed-off' | 'created' | 'rewind';

/** One conditional write in a {@link CheckpointStorage.updateLeases} batch. */
export interface LeaseUpdate {
  /** The lease to write. */
  readonly leaseKey: string;
  /**
   * The version the caller read; the write applies only if the stored version still equals it. Nothing
   * else is compared: a write at a stale version is a conflict even when it names the current owner and
   * epoch (a delayed checkpoint of the owner must not move the checkpoint back).
   */
  readonly expectedVersion: number;
  /**
   * The whole new state; the stored version becomes `expectedVersion + 1`. It replaces the stored state
   * entirely: a field it leaves out is gone.
   */
  readonly next: LeaseState;
  /**
   * When set and the write applies, the adapter publishes this change, with this kind, on its change feed
   * (if it has one), ideally in the same round trip as the write. An update without `notify` (a take, a
   * checkpoint) and an update that did not apply publish nothing.
   */
  readonly notify?: LeaseChangeKind | undefined;
}

/** The write applied; `record` is what is stored now. */
export interface Applied<T> {
  readonly status: 'applied';
  readonly record: T;
}

/**
 * The condition failed and nothing changed; `current` is the record as stored when the write was refused
 * (not as the adapter or its statement first read it), or `null` if there is none.
 */
export interface Conflict<T> {
  readonly status: 'conflict';
  readonly current: T | null;
}

/**
 * The outcome is not known: an error happened after the request may have reached the backend (a write
 * whose connection is cut after the backend received it is unknown, never thrown nor a conflict), or the
 * outcome could not be read back (a corrupt record). `error` is a `LeaseholdError`. Core never counts it
 * as success and re-reads before acting. An adapter may return `applied` instead only when it has proved
 * the write applied; it never sends a conditional write again on its own (a second answer describes the
 * first attempt's effect, not the write's).
 */
export interface Unknown {
  readonly status: 'unknown';
  readonly error: LeaseholdError;
}

/** The exact outcome of one conditional write. */
export type WriteResult<T> = Applied<T> | Conflict<T> | Unknown;

/** The outcome of a conditional delete: `applied` carries no record, since none is left. */
export type DeleteResult<T = LeaseRecord> = { readonly status: 'applied' } | Conflict<T> | Unknown;

/**
 * What {@link CheckpointStorage.listLeases} returns: every lease of the group that reads back as a valid
 * record, and one `CorruptRecordError` (naming the key) for each stored lease that does not, so that one
 * bad record never hides the others. Core neither takes, writes nor deletes a corrupt lease; it reports it.
 */
export interface LeaseListing {
  readonly leases: LeaseRecord[];
  readonly corrupt: CorruptRecordError[];
}

/**
 * A worker's request that another member hand it one lease (a cooperative steal), kept in its member state.
 * Like the member, it may carry fields core does not name (JSON values a later core adds): adapters
 * round-trip them, they count towards the member's size limit, and core keeps them in its own writes of
 * the request, so a newer core may add fields to a request without a new record format.
 */
export interface HandoffRequest {
  /** The lease asked for. */
  readonly leaseKey: string;
  /** The worker id of the member that holds it. */
  readonly from: string;
}

/**
 * The fields of a member of a group's roster (DESIGN section 4): one worker's liveness, written only by
 * that worker (a heartbeat) and by a worker that declares it dead. Like a lease's state, it may carry
 * fields core does not name, and every value the contract allows round-trips exactly.
 */
export interface MemberState {
  /** The record format (see {@link RECORD_FORMAT}). */
  readonly format: number;
  /**
   * Names one membership of the worker: chosen at random when it joins, new each time it joins again.
   * Leases name the incarnation they were taken in.
   */
  readonly incarnation: string;
  /** The lease duration the member runs with: others wait at least this long before declaring it dead. */
  readonly leaseDurationMs: number;
  /** `alive` while the member heartbeats; `dead` once it left or was declared dead (its leases are free to take). */
  readonly status: 'alive' | 'dead';
  /** How many leases the member holds, as of its last write: what others balance against. */
  readonly held: number;
  /** Incremented by the member when it changed leases in a way others should look at (a listing is due). */
  readonly changes: number;
  /**
   * The leases this member asked others to hand over, at most {@link limits}.maxRequests; each request
   * round-trips the fields core does not name, as the member does.
   */
  readonly requests: readonly HandoffRequest[];
  /** Free-form string fields that adapters round-trip without interpreting. */
  readonly metadata: Readonly<Record<string, string>>;
}

/** A member as stored in a group's roster. */
export interface MemberRecord extends MemberState {
  readonly group: string;
  /** The worker's id: the `owner` it writes into leases. */
  readonly workerId: string;
  /**
   * Moves on every write of the member that applies, even one that writes the stored state (a heartbeat:
   * others see the member alive only by its version moving). Each applied write gives the member a version
   * greater than every version its worker id ever had in the group, so a version never repeats for a worker
   * id, not even when the member is removed and joins again (a writer still holding an old version can
   * never write the new member). The adapter keeps, per worker id, the greatest version it ever had, in the
   * backend and for good (a tombstone of a removed member, or one counter per group): members of one group
   * share no record that every heartbeat writes. Versions of different members may be equal.
   */
  readonly version: number;
}

/**
 * Every member of a group, read in one operation (one query of the members' records, paginated inside the
 * adapter where the backend needs it), and one `CorruptRecordError` (naming the worker id) for each member
 * that cannot be read back.
 */
export interface Roster {
  readonly group: string;
  readonly members: MemberRecord[];
  readonly corrupt: CorruptRecordError[];
}

/** What {@link CheckpointStorage.getRosterMoves} returns: the digest, and who the advances up to it named. */
export interface RosterMoves {
  /** The group's roster digest, as {@link CheckpointStorage.getRosterDigest} would read it at the same moment. */
  readonly digest: number;
  /**
   * The worker ids the advances after `since` up to `digest` named, each once, in any order (empty when
   * `digest` equals `since`); `null` when the store cannot say: one of those advances named nobody, the
   * store no longer keeps them, or `since` is above `digest`.
   */
  readonly moved: readonly string[] | null;
}

/** Options of {@link CheckpointStorage.createLease}. */
export interface CreateLeaseOptions {
  /**
   * Create the lease even if the key had a lease that was deleted since (an operator restoring a lease,
   * a copy between backends). Without it such a key is never created again (a `conflict` with
   * `current: null`): a lease is deleted only when its partition is finished or gone, and creating it
   * again would read the partition again. With it, the version continues above every version the key
   * ever had and the epoch is at least its highest; a key never used is created like any new key, at
   * version 1. It never replaces a live lease.
   */
  readonly recreate?: boolean;
}

/** A change published on the feed of a group. */
export interface LeaseChange {
  readonly group: string;
  readonly leaseKey: string;
  readonly kind: LeaseChangeKind;
  /**
   * Optional: the worker id the lease names as its owner after the write that published this change
   * (`null` when that write left it free), so that a worker can tell a handover to another member from one
   * to itself without reading the lease. When an adapter gives it, it MUST be the `owner` of the state the
   * applied write set (for `created`, the owner the lease was created with), never a guess or a later
   * owner's. When it is absent (`undefined`: an adapter that does not give it, or a message written by an
   * earlier release of one that does), readers must assume the lease could now name anyone. It is a hint,
   * like the whole feed: core never depends on it for safety, and a worker that skips a handover it names
   * for another member still finds any lease of its own at a listing.
   */
  readonly owner?: string | null | undefined;
}

/** What a subscription to a change feed asks for (`Storage.subscribe`). */
export interface SubscribeOptions {
  /**
   * The worker ids whose handovers the subscriber wants (its own, and the members it watches): at most
   * {@link limits}.maxWatchedMembers, each a valid worker id. With it, the adapter MAY leave out the
   * `handed-off` changes whose write named another owner, so that a worker of a large group is not told of
   * every handover to find its own; it never leaves out anything else (every `created`, `released` and
   * `rewind`, and a `handed-off` that left the lease free or names one of these owners). An adapter that
   * does not address handovers ignores it and delivers everything, as without it. Without it (or empty)
   * the subscriber hears every change. Fixed for the subscription's life: a subscriber whose set changes
   * opens a new subscription before it closes the old one, and may hear a change on both meanwhile.
   */
  readonly addressedTo?: readonly string[];
}

/** An open subscription to a change feed; close it (or `await using` it) to stop listening. */
export interface ChangeSubscription extends AsyncDisposable {
  /** Stops delivery to this subscription (and to no other) once it resolves. */
  close(): Promise<void>;
}

/**
 * Where the leases and checkpoints of every group live. All operations are atomic per record, between
 * clients and between processes (a lock held in one process's memory, or the one thread of a synchronous
 * driver, is not enough); listing is strongly consistent. Every client reads what any client wrote at
 * once: no read is served from a cache of its own.
 *
 * The checks each operation runs before sending anything, with the helpers of `@leasehold/core/adapter`: every
 * operation checks its group (`validateGroup`); those that name a lease check its key
 * (`validateLeaseKey`); those with an expected version check it (`validateVersion`); `createLease` checks
 * the whole new lease (`validateNewLease`), `updateLeases` the whole batch (`validateLeaseUpdates`: one
 * bad update refuses the batch, a key twice is invalid, `notify` must be a change kind), and the leader
 * operations their record (`validateNewLeader`, `validateLeaderState`), `putMember` its arguments
 * (`validateMemberWrite`) and `removeMember` its group, worker id and version. A state's checks include
 * every name it holds (owner, incarnation, parent keys, requests), the format, and fields core does not
 * name. A member is stored whole as `encodeMemberState` gives it and read back with `decodeMember`.
 *
 * How failures surface:
 * - invalid input: an `InvalidInputError` is thrown before anything is sent;
 * - a read that fails: a `StorageUnavailableError` is thrown (never a partial listing, never `null` for
 *   a record the read did not see); a stored record that cannot be read back throws a
 *   `CorruptRecordError` naming it;
 * - a write the backend certainly did not receive (no connection could be had): a
 *   `StorageUnavailableError` may be thrown, since nothing was written;
 * - a write that may have reached the backend (a timeout, a reset connection, a server restart): its
 *   result is `unknown`, carrying a `StorageOutcomeUnknownError` or the adapter's typed error; never a
 *   guess at `conflict` or `applied`, and never thrown; in a batch, item by item;
 * - a conflict whose current record is corrupt (a write or delete at another version than the stored
 *   one, a create over it): `unknown` carrying the `CorruptRecordError`, for that item only, so that one
 *   bad record cannot fail the other updates of a batch; the corrupt record stays as it is. A write
 *   decides on the version alone, so a write at the stored version replaces even a record that could not
 *   be read back (a bad writer that damages a record without moving its version has its damage
 *   overwritten, as on every backend);
 * - a listing with corrupt records: the valid ones in `leases`, one `CorruptRecordError` per corrupt one
 *   in `corrupt`; the listing itself throws only when it cannot be read at all;
 * - a value that only grows going backwards: when the adapter sees in an answer of the backend a
 *   version, epoch or term lower than one it already returned for the same record (comparing only with
 *   what it knew before that request was sent), the backend lost acknowledged writes (a restart without
 *   durable persistence, a failover to a lagging replica). The adapter raises a `RegressionError` (thrown
 *   by a read, carried by an `unknown` write result) instead of returning the record, and keeps refusing
 *   that group until an operator acts. An adapter whose backend cannot lose acknowledged writes (a
 *   database with synchronous commit) needs no such tracking. The suite cannot make a backend lose
 *   writes, so this rule is the one it does not check.
 *
 * A client whose connection was cut works again for the next call, once the backend is reachable.
 */
export interface CheckpointStorage {
  /**
   * The version of the storage contract the adapter was written for ({@link STORAGE_CONTRACT_VERSION} of
   * the core it was written against), as a number in the adapter's own code: `readonly contractVersion = 8`.
   * Core refuses a storage of another version, or of none, with a `ContractVersionError` when it is handed
   * one (`UPGRADING.md` says what each version changed).
   */
  readonly contractVersion: typeof STORAGE_CONTRACT_VERSION;

  /**
   * Every lease of the group, in any order, complete however many there are (pages are the adapter's
   * business); a stored lease that cannot be read back is in `corrupt`, not in `leases`. A lease that
   * exists throughout the listing is listed exactly once however other clients delete and create leases
   * meanwhile: pages follow a key or a server's cursor, never an offset.
   */
  listLeases(group: string): Promise<LeaseListing>;

  /** One lease, or `null` when the group has no live lease with that key. */
  getLease(group: string, leaseKey: string): Promise<LeaseRecord | null>;

  /**
   * The named leases of the group, in one call, each at most once, in any order: what a worker reads for
   * the leases the change feed announced handed to it (a dealt cold start hands each member its whole
   * portion at once), instead of one `getLease` per lease. Each lease is as `getLease` would give it at
   * the moment of its read, strongly consistent: a lease written before the call started is read at that
   * write or a later one, whole, as one write left it (never fields of two writes), and never at a version
   * or epoch lower than an earlier call read, even while that write is still on its way (a store that
   * answers calls from copies that apply writes at different moments breaks it). The keys need not be read
   * at one instant together. A key with no live lease is left out; a lease that cannot be read back is in
   * `corrupt`, naming its key, and every other lease named is still in `leases`. Up to
   * {@link limits}.maxLeasesPerRead keys per call; a key repeated is read once. A read that fails throws a
   * `StorageUnavailableError`: never a part of the answer (an adapter whose backend answers a batch in
   * parts reads the rest itself, or throws).
   *
   * Optional: without it core reads each lease with `getLease`, a round trip each.
   */
  getLeases?(group: string, leaseKeys: readonly string[]): Promise<LeaseListing>;

  /**
   * Creates the lease if the key never had one; otherwise a conflict with the current lease (even when
   * that lease is free: its checkpoint is kept), or with `current: null` when the key had a lease that was
   * deleted. With `recreate` a deleted key is created again: the new record's version is greater than
   * any the key ever had and its epoch at least the greatest it ever had, so that fencing tokens never
   * repeat after delete-then-recreate. A new key starts at version 1. Fields the lease leaves out get
   * their defaults; every field it gives, including fields core does not name, is stored as given.
   *
   * The adapter remembers, per key, the greatest version and epoch it ever had (a tombstone kept on
   * delete, or a counter beside the record), in the backend itself, so that every client and every
   * restart sees them. When it applies, an adapter with a change feed publishes `created` for the lease:
   * a worker waiting for new leases (of a resharded stream) hears of them at once.
   */
  createLease(lease: NewLease, options?: CreateLeaseOptions): Promise<WriteResult<LeaseRecord>>;

  /**
   * Writes many leases of one group, each conditionally on its version, in as few round trips as the
   * backend allows. Returns one exact result per update, in the order given, mixing applied and
   * conflicts. A batch of any size works (a worker takes its whole share at a cold start, or releases all
   * it holds, in one call; the suite sends thousands); an adapter splits it inside if its backend needs. A key that appears twice in one batch is
   * invalid input.
   */
  updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]>;

  /**
   * Deletes the lease if its stored version equals `expectedVersion`; at a stale version, or for a key
   * with no lease, it is a conflict. The key's greatest version and epoch outlive the delete.
   */
  deleteLease(group: string, leaseKey: string, expectedVersion: number): Promise<DeleteResult>;

  /**
   * Optional change feed, so that waiting workers act at once instead of at their next tick. Once the
   * returned promise resolves, `listener` hears every change of the group that applied: `created` for
   * each lease `createLease` created, and the `notify` kind of each update that applied, written by any
   * client, the subscriber's own client included (coordinators of one process may share one client).
   * It hears nothing of other groups, nothing for updates without `notify`, and nothing for writes that
   * did not apply. Changes written by one client arrive in the order they were written; a change
   * written just before the subscription may be heard too (a cluster forwards publishes between nodes).
   * Delivery is best effort under faults (a dropped connection may lose changes); core never depends on
   * it for safety. A client that has `subscribe()` has a working feed: the suite checks it whenever it
   * exists. With {@link SubscribeOptions.addressedTo}, handovers to other owners may be left out (the
   * adapter then delivers each handover to its new owner's subscribers and to every subscriber without an
   * address, not to the whole group); options that are not valid are refused with an `InvalidInputError`.
   */
  subscribe?(group: string, listener: (change: LeaseChange) => void, options?: SubscribeOptions): Promise<ChangeSubscription>;

  /**
   * The group's roster: every member, strongly consistent, in any order (empty for a group nobody
   * joined). A roster holds up to {@link limits}.maxMembers members, each of any size the contract allows,
   * and reads back whole, in one call. A member that cannot be read back is in `corrupt`, naming its
   * worker id, and every other member is still in `members`. A read that fails throws a
   * `StorageUnavailableError`: never part of a roster. A client sees a member another client wrote at
   * once: no client serves the roster from a cache of its own. A member that exists throughout the read is
   * in it exactly once however members heartbeat, join and leave meanwhile (a missing member counts as
   * dead): a roster read in pages never pages by version, which every heartbeat moves.
   */
  getRoster(group: string): Promise<Roster>;

  /**
   * Writes one member's state, conditionally: with `expectedVersion` `null` only if the worker id has no
   * member (a join), otherwise only if the member's stored version equals it. Nothing else is compared,
   * and no other member is touched or compared: writes to different members never conflict with each
   * other, however the others move, join or leave. A second join is a conflict carrying the stored
   * member; a put at a stale version is a conflict carrying the member as stored when the write was
   * refused (not as the statement first saw it); a put of an absent member at a version is a conflict
   * with `null`, and creates nothing. A put replaces the whole state, and every put that applies moves
   * the version (see {@link MemberRecord.version}), even a heartbeat that writes exactly the stored state.
   * A join, or a put at another version, over a member that cannot be read back is `unknown` carrying its
   * `CorruptRecordError`, and leaves it as it is; a put at the version it is stored at replaces it. Member
   * writes publish nothing on the change feed.
   *
   * One group, one roster: an adapter whose earlier release kept members in another layout (one record
   * per group, before members got records of their own) marks that layout on a join, with a member of a
   * format above every earlier core's {@link RECORD_FORMAT}, so that a worker of the earlier release stops
   * with its `RecordFormatError` at its next roster read; and refuses the join with a `RecordFormatError`
   * naming the members still alive in the old layout (the marking comes first, so that a worker of the
   * earlier release that joins meanwhile is either seen by the check or stops itself).
   */
  putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>>;

  /**
   * Removes the member if its stored version equals `expectedVersion`; at a stale version it is a conflict
   * carrying the stored member, and of an absent member a conflict with `null`. The greatest version the
   * worker id had outlives the remove. A remove at another version of a member that cannot be read back is
   * `unknown` carrying its `CorruptRecordError`; at the version it is stored at, it removes it.
   */
  removeMember(group: string, workerId: string, expectedVersion: number): Promise<DeleteResult<MemberRecord>>;

  /**
   * The named members of the group, strongly consistent, each at most once, in any order: what a watcher
   * reads each take tick instead of the whole roster (DESIGN section 4, "Watchers and the roster digest").
   * A worker id with no member is left out; a member that cannot be read back is in `corrupt`, naming its
   * worker id. Each member read is as {@link getRoster} would give it at the moment of the read. Up to
   * {@link limits}.maxWatchedMembers ids per call; an id repeated is read once. A read that fails throws a
   * `StorageUnavailableError`.
   *
   * Optional, with {@link getRosterDigest} and {@link advanceRosterDigest}: an adapter has all three or
   * none. Without them every worker reads the whole roster every take tick, and a group's read cost grows
   * with its size squared.
   */
  getMembers?(group: string, workerIds: readonly string[]): Promise<Roster>;

  /**
   * The group's roster digest: a counter that core advances after every member write others must look at
   * (a join, a leave, a declaration of death, a change of the held count, the change counter or the
   * requests), never after a heartbeat that changes nothing else. Strongly consistent: a read that starts
   * after an advance returned sees it. 0 for a group whose digest was never advanced. A read that fails
   * throws a `StorageUnavailableError`.
   */
  getRosterDigest?(group: string): Promise<number>;

  /**
   * Adds one to the group's roster digest, atomically (an advance is never lost to another that runs at
   * the same time), creating it at 1 if the group has none, and returns the value it wrote. Unconditional:
   * an advance sent twice advances twice, which is harmless (readers only compare the digest with the
   * value they last read). Publishes nothing on the change feed. An advance whose outcome is unknown
   * throws; core advances again. `workerIds` (at most {@link limits}.maxWatchedMembers) name the members
   * whose write the advance announces, for {@link getRosterMoves}; none, or omitted, names nobody (a reader
   * then reads the whole roster). A store without `getRosterMoves` ignores them.
   */
  advanceRosterDigest?(group: string, workerIds?: readonly string[]): Promise<number>;

  /**
   * The group's roster digest and the worker ids named by the advances after `since` (the `workerIds` each
   * {@link advanceRosterDigest} was given: the members whose write it announces), from one consistent
   * moment: every advance that returned before the read started is counted in `digest`, and every advance
   * counted in `digest` and after `since` has its names in `moved`. A reader whose roster was up to date
   * at `since` is up to date again once it reads the members `moved` names (a write is announced after it
   * applied). `moved` is `null` when any of those advances named nobody, or `since` is older than the
   * advances the store keeps: at least the last {@link limits}.rosterMovesKept. A read that fails throws a
   * `StorageUnavailableError`.
   *
   * Optional, and only with the watchers' reads ({@link getMembers}): without it a worker that sees the
   * digest move reads the whole roster, and during a rolling restart, when some member's held count moves
   * nearly every take tick, every worker reads the whole roster nearly every tick.
   */
  getRosterMoves?(group: string, since: number): Promise<RosterMoves>;
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

/**
 * Where each group's leader record lives: one record per group, written only conditionally, under the
 * same rules as leases (a new record starts at version 1, every update that applies increments it,
 * every field round-trips, failures surface the same way). The leader record is not a lease: it never
 * lists, and a lease may have any key. Leader writes publish nothing on the change feed.
 */
export interface LeaderStore {
  /**
   * The version of the storage contract the adapter was written for ({@link STORAGE_CONTRACT_VERSION} of
   * the core it was written against), as a number in the adapter's own code: `readonly contractVersion = 8`.
   * Core refuses a storage of another version, or of none, with a `ContractVersionError` when it is handed
   * one (`UPGRADING.md` says what each version changed).
   */
  readonly contractVersion: typeof STORAGE_CONTRACT_VERSION;

  /** The group's leader record, or `null` if none was ever created. */
  getLeader(group: string): Promise<LeaderRecord | null>;
  /** Creates the group's leader record if it has none; otherwise a conflict with the current one. */
  createLeader(leader: NewLeader): Promise<WriteResult<LeaderRecord>>;
  /**
   * Replaces the leader record if its stored version equals `expectedVersion`; the version becomes
   * `expectedVersion + 1`, even when `next` is exactly the stored record (a renewal).
   */
  updateLeader(group: string, expectedVersion: number, next: LeaderState): Promise<WriteResult<LeaderRecord>>;
}

/** A store that keeps both leases and leader records, as every adapter shipped with Leasehold does. */
export type Storage = CheckpointStorage & LeaderStore;

const LEASE_NAMED = new Set(['group', 'leaseKey', 'version', 'format', 'owner', 'epoch', 'checkpoint', 'parentKeys', 'incarnation', 'metadata']);
const LEADER_NAMED = new Set(['group', 'version', 'format', 'holder', 'term', 'metadata']);
const MEMBER_NAMED = new Set(['group', 'workerId', 'version', 'format', 'incarnation', 'leaseDurationMs', 'status', 'held', 'changes', 'requests', 'metadata']);
const REQUEST_NAMED = new Set(['leaseKey', 'from']);

/** Copies the fields of `value` that `named` does not hold (fields a later core added), one level deep. */
function copyUnnamed(value: object, named: ReadonlySet<string>, into: Record<string, unknown>): void {
  // Own enumerable string keys, as `for...in` with `hasOwnProperty` gives them, without walking the
  // prototype chain: this runs for every lease of every listing.
  const names = Object.keys(value);
  for (let i = 0; i < names.length; i++) {
    const name = names[i] as string;
    if (named.has(name)) continue;
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
  return withLeaseState({}, lease);
}

/**
 * A lease record: its identity and {@link leaseStateOf} its state, built as one object (a listing builds
 * one per lease; `{ group, leaseKey, version, ...leaseStateOf(state) }` would build two).
 */
export function leaseRecordOf(group: string, leaseKey: string, version: number, lease: Partial<LeaseState>): LeaseRecord {
  return withLeaseState({ group, leaseKey, version }, lease);
}

/** Writes the fields of {@link leaseStateOf} into `into`, and returns it. */
function withLeaseState<T extends object>(into: T, lease: Partial<LeaseState>): T & LeaseState {
  const state = into as T & { -readonly [K in keyof LeaseState]: LeaseState[K] };
  state.format = lease.format ?? RECORD_FORMAT;
  state.owner = lease.owner ?? null;
  state.epoch = lease.epoch ?? 0;
  state.checkpoint = lease.checkpoint ?? null;
  state.parentKeys = lease.parentKeys ? [...lease.parentKeys] : [];
  state.incarnation = lease.incarnation ?? null;
  state.metadata = lease.metadata ? { ...lease.metadata } : {};
  copyUnnamed(lease, LEASE_NAMED, state);
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

/** A handoff request with every field it holds, including fields this core does not name. */
function handoffRequestOf(request: HandoffRequest): HandoffRequest {
  const copy: HandoffRequest = { leaseKey: request.leaseKey, from: request.from };
  copyUnnamed(request, REQUEST_NAMED, copy as unknown as Record<string, unknown>);
  return copy;
}

/** The full state of a member, every field but its identity (group, worker id, version), its requests' included. */
export function memberStateOf(member: MemberState): MemberState {
  const state: MemberState = {
    format: member.format ?? RECORD_FORMAT,
    incarnation: member.incarnation,
    leaseDurationMs: member.leaseDurationMs,
    status: member.status,
    held: member.held ?? 0,
    changes: member.changes ?? 0,
    requests: member.requests ? member.requests.map((request) => handoffRequestOf(request)) : [],
    metadata: member.metadata ? { ...member.metadata } : {},
  };
  copyUnnamed(member, MEMBER_NAMED, state as unknown as Record<string, unknown>);
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
