/**
 * Rewinding a live group (DESIGN section 4, "Rewinding"): an operator moves the checkpoints of some or all
 * of a group's leases back to a time, to the stream's start, to a position of one shard, or forward to
 * now, while the group's workers run. Nothing here writes a checkpoint that a worker may be moving at the
 * same time:
 *
 * - an unfinished lease nobody holds is moved directly, by one conditional write;
 * - a lease a live worker holds gets a request in its metadata (`leasehold.rewind`), which its owner
 *   applies between two batches, in its own tenure (the Consumer does it);
 * - a finished lease (`SHARD_END`) gets a request too, whoever holds it, and every lease that descends
 *   from it is reset (to the rewind's time, or to its start): its children must not be read before it
 *   again. It is moved once nobody reads any of them, by the tool or by the leader's shard sync.
 *
 * `planRewind` reads and decides, `applyRewind` writes, and `awaitRewind` follows the leases until each
 * moved, doing meanwhile what no owner can (see {@link settleRewinds}).
 */
import { systemClock, systemRandom, type Clock, type Random } from './clock.js';
import { describeValue, InvalidConfigError, InvalidInputError, LeaseholdError, RecordFormatError } from './errors.js';
import { limits } from './validation.js';
import { parseStreamLeaseKey } from './stream-keys.js';
import {
  Checkpoint,
  leaderStateOf,
  leaseStateOf,
  RECORD_FORMAT,
  type CheckpointStorage,
  type LeaderStore,
  type LeaseRecord,
  type LeaseUpdate,
  type Position,
} from './storage.js';

const PKG = 'core';

/** The lease metadata fields of a rewind. */
export const REWIND_FIELDS = {
  /** A request for the lease's owner: JSON `{"id","to","requestedAt"}` (see {@link RewindRequest}). */
  request: 'leasehold.rewind',
  /** The id of the last rewind applied to the lease. */
  rewound: 'leasehold.rewound',
} as const;

/**
 * The leader record metadata field that names the group's last rewind, and changes again each time the
 * rewind moves a finished lease back (`<id>` then `<id>/<n>`): workers whose storage has no change feed
 * see it change (every worker reads the leader record each renew interval), look at the leases they hold
 * for a request, and list the group's leases.
 */
export const REWIND_MARKER_FIELD = 'leasehold.rewind';

/** A rewind request as stored on a lease. */
export interface RewindRequest {
  /** Names one rewind; every lease it moves carries it (in `leasehold.rewound`) once moved. */
  readonly id: string;
  /** The checkpoint the lease moves to. */
  readonly to: Position;
  /** When the operator asked, as an ISO time of the tool's wall clock. */
  readonly requestedAt: string;
}

/**
 * Where a rewind moves the checkpoints: a time (records from that moment on are handed over again),
 * `trim-horizon` (the oldest record the stream holds), `latest` (skip to the moment of the request), or,
 * for one lease only, a position of it (the records after it, as a checkpoint at it means).
 */
export type RewindTarget = { readonly time: Date | number } | 'trim-horizon' | 'latest' | { readonly position: Position };

/** Which leases of a group a rewind moves. Default: every lease. */
export interface RewindSelection {
  /** Only the leases of this stream: keys `${streamId}:${shardId}` (split at their last `:`), in groups that read several streams. */
  readonly streamId?: string | undefined;
  /** Only these leases (keys, as the group's leases name them); each must exist. */
  readonly leaseKeys?: readonly string[] | undefined;
}

/**
 * How a lease moves: `direct` (nobody holds it: written now), `request` (its owner applies the request
 * between two batches), `after-descendants` (a finished lease, whoever holds it: marked now and moved once
 * nobody reads any lease that descends from it, so that those are never read before it again).
 */
export type RewindHow = 'direct' | 'request' | 'after-descendants';

/** One lease a rewind moves. */
export interface RewindMove {
  readonly leaseKey: string;
  /** The worker that holds it now, or `null` when nobody does. */
  readonly owner: string | null;
  /** Its checkpoint now. */
  readonly from: Position | null;
  /** Its checkpoint once moved. */
  readonly to: Position;
  readonly how: RewindHow;
  /**
   * Set for a lease that moves because it descends from a finished lease the rewind moves back (its
   * children read again after it): the key of that lease. Such a lease moves to the rewind's time, or to
   * its start.
   */
  readonly descendantOf: string | undefined;
}

/** A lease the rewind leaves as it is, or a part of the stream it cannot read again, and why. */
export interface RewindNote {
  readonly leaseKey: string;
  readonly reason: string;
}

/** What a rewind will do, as {@link planRewind} decided on the group as it was read. */
export interface RewindPlan {
  /** Names the rewind: written on every lease it moves. */
  readonly rewindId: string;
  readonly group: string;
  /** When it was asked for, by the tool's wall clock (ISO). */
  readonly requestedAt: string;
  /** The target as asked: `trim-horizon`, `latest`, an ISO time or a position. */
  readonly target: string;
  /** The checkpoint the selected leases move to (`latest` is pinned to `requestedAt`). */
  readonly to: Position;
  /** The leases selected, sorted. */
  readonly selected: readonly string[];
  /** Every lease that moves, ancestors before their descendants. */
  readonly moves: readonly RewindMove[];
  /** Selected leases left as they are. */
  readonly unchanged: readonly RewindNote[];
  /** What the rewind cannot read again: parents already cleaned up, leases that cannot be read back. */
  readonly notReplayable: readonly RewindNote[];
}

/** A rewind as {@link applyRewind} wrote it. */
export interface AppliedRewind extends RewindPlan {
  /** When the writes began, on the tool's monotonic clock: {@link awaitRewind} counts from it. */
  readonly startedAt: number;
  /**
   * `written` once the group-wide marker is on the leader record (workers without a change feed learn of
   * the rewind from it); `no-leader-record` when the group has none (no worker elects a leader).
   */
  readonly marker: 'written' | 'no-leader-record';
}

/** Options of {@link planRewind}. */
export interface PlanRewindOptions {
  readonly storage: CheckpointStorage;
  readonly group: string;
  readonly select?: RewindSelection | undefined;
  readonly to: RewindTarget;
  /** The wall clock of `requestedAt` and of `latest`. Default: the process's. */
  readonly clock?: Clock | undefined;
  /** The random part of the rewind's id. Default: `Math.random`. */
  readonly random?: Random | undefined;
}

/** Options of {@link applyRewind}. */
export interface ApplyRewindOptions {
  /** The group's leases and its leader record (for the marker). */
  readonly storage: CheckpointStorage & Partial<LeaderStore>;
  /**
   * How many times the writes are tried again on a fresh read of the group, after a short random pause,
   * when leases kept changing (each write is also sent again at once, a few times, on the record its
   * conflict carries). Default 5.
   */
  readonly maxAttempts?: number | undefined;
  readonly clock?: Clock | undefined;
  /** The pauses' jitter. Default: `Math.random`. */
  readonly random?: Random | undefined;
}

/** Where one lease of a rewind stands. */
export interface RewindLeaseProgress {
  readonly leaseKey: string;
  readonly how: RewindHow;
  /**
   * `pending` until it moved; `applied` once it carries the rewind's id and no request; `superseded` when
   * a later rewind replaced the request or moved it since; `gone` when its lease was deleted.
   */
  readonly state: 'pending' | 'applied' | 'superseded' | 'gone';
  /** From the start of {@link applyRewind} until it was seen moved (to within a poll), in ms; `undefined` while pending. */
  readonly appliedAfterMs: number | undefined;
}

/** The progress of a rewind, as {@link awaitRewind} reports it and returns it. */
export interface RewindProgress {
  readonly rewindId: string;
  readonly leases: readonly RewindLeaseProgress[];
  /** How many leases are no longer pending. */
  readonly done: number;
  readonly total: number;
  /** Whether no lease is pending. */
  readonly complete: boolean;
  /** Since the start of {@link applyRewind}, in ms. */
  readonly elapsedMs: number;
}

/** Options of {@link awaitRewind}. */
export interface AwaitRewindOptions {
  /** The group's leases, and its leader record (marked again when a finished lease is moved back). */
  readonly storage: CheckpointStorage & Partial<LeaderStore>;
  /** How long to wait, in ms from the call; the progress so far is returned then (`complete: false`). */
  readonly timeoutMs: number;
  /** The pause between two looks at the group. Default 500. */
  readonly pollIntervalMs?: number | undefined;
  /** Hears the progress whenever a lease moved, and once at the start. */
  readonly onProgress?: ((progress: RewindProgress) => void) | undefined;
  /** The clock `applyRewind` ran on. Default: the process's. */
  readonly clock?: Clock | undefined;
  /** Stops waiting; the progress so far is returned. */
  readonly signal?: AbortSignal | undefined;
}

// ---------------------------------------------------------------------------------------------------- reading requests

/** The rewind request a lease carries, or `undefined` when it carries none or one that cannot be read. */
export function rewindRequestOf(lease: Pick<LeaseRecord, 'metadata'>): RewindRequest | undefined {
  const value = lease.metadata[REWIND_FIELDS.request];
  if (value === undefined) return undefined;
  try {
    const parsed = JSON.parse(value) as Partial<RewindRequest>;
    if (typeof parsed.id !== 'string' || typeof parsed.to !== 'string' || typeof parsed.requestedAt !== 'string') return undefined;
    if (parsed.id.length === 0 || parsed.to.length === 0 || parsed.to === Checkpoint.SHARD_END) return undefined;
    return { id: parsed.id, to: parsed.to, requestedAt: parsed.requestedAt };
  } catch {
    return undefined;
  }
}

/**
 * Whether a lease carries a rewind request, readable or not. A parent that carries one is about to be read
 * again, so its children wait (see `parentsFinished`).
 */
export function hasRewindRequest(lease: Pick<LeaseRecord, 'metadata'>): boolean {
  return lease.metadata[REWIND_FIELDS.request] !== undefined;
}

/**
 * The state of a lease once `request` is applied: the checkpoint at its target, the request removed, its
 * id recorded. Owner, epoch, incarnation and every other field are kept.
 */
export function rewoundState(lease: LeaseRecord, request: Pick<RewindRequest, 'id' | 'to'>): ReturnType<typeof leaseStateOf> {
  const metadata: Record<string, string> = { ...lease.metadata, [REWIND_FIELDS.rewound]: request.id };
  delete metadata[REWIND_FIELDS.request];
  return { ...leaseStateOf(lease), checkpoint: request.to, metadata };
}

/**
 * Whether a parent of `lease` must be read (again) before it: the parent's lease is not finished, or
 * carries a rewind request. A parent without a lease finished long ago; one whose lease cannot be read is
 * not known to be finished. Used by an owner that applied a request before it reads on.
 */
export async function parentPending(storage: CheckpointStorage, group: string, lease: Pick<LeaseRecord, 'parentKeys'>): Promise<boolean> {
  for (const parentKey of lease.parentKeys) {
    let parent: LeaseRecord | null;
    try {
      parent = await storage.getLease(group, parentKey);
    } catch {
      return true;
    }
    if (parent !== null && (parent.checkpoint !== Checkpoint.SHARD_END || hasRewindRequest(parent))) return true;
  }
  return false;
}

// ---------------------------------------------------------------------------------------------------- targets

const ISO_TIME = /^(\d{4})-(\d{2})-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2}))?$/;
const NUMERIC_POSITION = /^\d{1,128}(?::\d{1,10})?$/;

/**
 * Reads a target as the command line writes it: `trim-horizon`, `latest`, an ISO time (`2024-05-01`,
 * `2024-05-01T10:00:00Z`, `2024-05-01T12:00:00.5+02:00`; a time of day needs its zone), `AT_TIMESTAMP:<ms>`,
 * or a position of one shard (`<sequence>` or `<sequence>:<subSequence>`). Anything else is an
 * `InvalidInputError` naming it.
 */
export function parseRewindTarget(text: string): RewindTarget {
  if (typeof text !== 'string' || text.length === 0) throw new InvalidInputError(`[${PKG}] a rewind target must be a non-empty string, got ${describeValue(text)}`);
  const lower = text.toLowerCase();
  if (lower === 'trim-horizon' || text === Checkpoint.TRIM_HORIZON) return 'trim-horizon';
  if (lower === 'latest' || text === Checkpoint.LATEST) return 'latest';
  const timestamp = Checkpoint.timestampOf(text);
  if (timestamp !== undefined) return { time: timestamp };
  if (/^\d{4}-/.test(text)) return { time: parseIsoTime(text) };
  if (NUMERIC_POSITION.test(text)) return { position: text };
  throw new InvalidInputError(
    `[${PKG}] rewind target ${describeValue(text)} is not trim-horizon, latest, an ISO time (2024-05-01T10:00:00Z) or a position of one shard (a sequence number)`,
  );
}

function parseIsoTime(text: string): number {
  const match = ISO_TIME.exec(text);
  const bad = (why: string): InvalidInputError => new InvalidInputError(`[${PKG}] rewind time ${describeValue(text)} is not a valid ISO time: ${why}`);
  if (!match) throw bad('write it as 2024-05-01, 2024-05-01T10:00:00Z or 2024-05-01T10:00:00+02:00 (a time of day needs its zone)');
  const [, year, month, day, hour, minute, second] = match.map((part) => (part === undefined ? undefined : Number(part)));
  const daysInMonth = new Date(Date.UTC(year as number, month as number, 0)).getUTCDate();
  if ((month as number) < 1 || (month as number) > 12 || (day as number) < 1 || (day as number) > daysInMonth) throw bad('no such day');
  if ((hour ?? 0) > 23 || (minute ?? 0) > 59 || (second ?? 0) > 59) throw bad('no such time of day');
  const ms = Date.parse(text);
  if (!Number.isFinite(ms)) throw bad('it does not parse');
  return ms;
}

/** The checkpoint a target means now, checked: a time not after `nowMs`, a position of one lease only. */
function checkpointOfTarget(to: RewindTarget, nowMs: number, selected: number): { to: Position; target: string } {
  if (to === 'trim-horizon') return { to: Checkpoint.TRIM_HORIZON, target: 'trim-horizon' };
  // Pinned to the moment of the request, as a group's birth pins LATEST: a lease taken later still skips
  // only what came before the request.
  if (to === 'latest') return { to: Checkpoint.atTimestamp(nowMs), target: 'latest' };
  if (typeof to === 'object' && to !== null && 'time' in to) {
    const ms = to.time instanceof Date ? to.time.getTime() : to.time;
    if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) throw new InvalidInputError(`[${PKG}] rewind time must be a valid Date or milliseconds since the epoch, got ${describeValue(to.time)}`);
    if (ms > nowMs) {
      throw new InvalidInputError(`[${PKG}] rewind time ${new Date(ms).toISOString()} is in the future (now ${new Date(nowMs).toISOString()}): to skip to now, rewind to latest`);
    }
    return { to: Checkpoint.atTimestamp(ms), target: new Date(ms).toISOString() };
  }
  if (typeof to === 'object' && to !== null && 'position' in to) {
    const position = to.position;
    if (typeof position !== 'string' || position.length === 0 || Buffer.byteLength(position, 'utf8') > limits.maxCheckpointBytes) {
      throw new InvalidInputError(`[${PKG}] rewind position must be a non-empty string of at most ${limits.maxCheckpointBytes} bytes, got ${describeValue(position)}`);
    }
    if (position === Checkpoint.SHARD_END || position === Checkpoint.LATEST) {
      throw new InvalidInputError(`[${PKG}] rewind position ${describeValue(position)} is not a place to read from: use latest to skip to now`);
    }
    if (selected !== 1) {
      throw new InvalidInputError(`[${PKG}] a rewind to position ${describeValue(position)} names a place in one shard: select exactly one lease, not ${selected === 0 ? 'every lease' : selected}`);
    }
    return { to: position, target: position };
  }
  throw new InvalidInputError(`[${PKG}] rewind target must be 'trim-horizon', 'latest', { time } or { position }, got ${describeValue(to)}`);
}

/** Where a lease that descends from a finished lease moves: to the rewind's time, or to its start. */
function descendantTarget(to: Position): Position {
  return Checkpoint.timestampOf(to) !== undefined ? to : Checkpoint.TRIM_HORIZON;
}

// ---------------------------------------------------------------------------------------------------- the group as read

interface GroupView {
  readonly leases: Map<string, LeaseRecord>;
  readonly corrupt: Set<string>;
  /** Children by parent key, from the leases' parent keys. */
  readonly children: Map<string, string[]>;
  /** The live owner of a lease, judged on a roster read after the listing; `null` when nobody holds it. */
  ownerOf(lease: LeaseRecord): string | null;
  /**
   * Whether the roster read says who holds a lease read after it (a conflict's current record): free,
   * alive in the roster, or of an incarnation the roster shows dead. An owner it does not know may have
   * joined since: only a fresh read of the roster can judge it.
   */
  judges(lease: LeaseRecord): boolean;
}

/**
 * Reads the group: its leases, then its roster. A lease listed with an owner was taken after that owner
 * joined, so an owner missing or dead in a roster read after the listing is dead now (the rule the
 * leader's cleanup uses); a member that cannot be read back may be alive.
 */
async function readView(storage: CheckpointStorage, group: string): Promise<GroupView> {
  const listing = await storage.listLeases(group);
  const roster = await storage.getRoster(group);
  return viewOf(listing.leases, listing.corrupt.map((error) => error.leaseKey ?? ''), roster.members, roster.corrupt.map((error) => error.workerId ?? ''));
}

function viewOf(
  leases: readonly LeaseRecord[],
  corrupt: readonly string[],
  members: readonly { workerId: string; incarnation: string; status: string }[],
  unreadableMembers: readonly string[],
): GroupView {
  const alive = new Map(members.filter((member) => member.status === 'alive').map((member) => [member.workerId, member.incarnation]));
  const dead = new Set(members.filter((member) => member.status !== 'alive').map((member) => `${member.workerId}\u0000${member.incarnation}`));
  const unreadable = new Set(unreadableMembers);
  const children = new Map<string, string[]>();
  for (const lease of leases) for (const parentKey of lease.parentKeys) children.set(parentKey, [...(children.get(parentKey) ?? []), lease.leaseKey]);
  return {
    leases: new Map(leases.map((lease) => [lease.leaseKey, lease])),
    corrupt: new Set(corrupt),
    children,
    ownerOf: (lease) => (lease.owner !== null && (unreadable.has(lease.owner) || alive.get(lease.owner) === lease.incarnation) ? lease.owner : null),
    judges: (lease) =>
      lease.owner === null || unreadable.has(lease.owner) || alive.get(lease.owner) === lease.incarnation || dead.has(`${lease.owner}\u0000${lease.incarnation}`),
  };
}

/** Every lease that descends from `leaseKey`, in any generation, each once. */
function descendantsOf(view: GroupView, leaseKey: string): string[] {
  const found: string[] = [];
  const seen = new Set<string>([leaseKey]);
  const stack = [...(view.children.get(leaseKey) ?? [])];
  while (stack.length > 0) {
    const key = stack.shift() as string;
    if (seen.has(key)) continue;
    seen.add(key);
    if (!view.leases.has(key)) continue;
    found.push(key);
    stack.push(...(view.children.get(key) ?? []));
  }
  return found;
}

/** The keys in an order that puts every parent before its children (by the leases' parent keys); ties by key. */
function ancestorsFirst(view: GroupView, keys: Iterable<string>): string[] {
  const wanted = new Set(keys);
  const depth = new Map<string, number>();
  const depthOf = (key: string, path: Set<string>): number => {
    const known = depth.get(key);
    if (known !== undefined) return known;
    if (path.has(key)) return 0; // a cycle, which no stream has
    path.add(key);
    const lease = view.leases.get(key);
    let d = 0;
    for (const parentKey of lease?.parentKeys ?? []) if (view.leases.has(parentKey)) d = Math.max(d, depthOf(parentKey, path) + 1);
    path.delete(key);
    depth.set(key, d);
    return d;
  };
  return [...wanted].sort((a, b) => depthOf(a, new Set()) - depthOf(b, new Set()) || (a < b ? -1 : a > b ? 1 : 0));
}

/** Whether `value` is an array; not a type guard, so that a checked `readonly` array keeps its element type. */
function isList(value: unknown): boolean {
  return Array.isArray(value);
}

function isFinished(lease: LeaseRecord): boolean {
  return lease.checkpoint === Checkpoint.SHARD_END;
}

function newerFormat(lease: LeaseRecord): RecordFormatError {
  return new RecordFormatError(
    `[${PKG}] lease ${describeValue(lease.leaseKey)} is in record format ${lease.format}, newer than the ${RECORD_FORMAT} this Leasehold knows: upgrade it to rewind this group`,
    lease.format,
  );
}

// ---------------------------------------------------------------------------------------------------- planning

/**
 * Reads the group and decides what a rewind to `to` moves, writing nothing: each lease that moves (its
 * owner, its checkpoint now and after, and how it moves), the selected leases left as they are, and what
 * cannot be read again. Every input is checked first, with an `InvalidInputError` naming the bad value: a
 * bad target, a position without exactly one lease, an unknown lease or stream.
 */
export async function planRewind(options: PlanRewindOptions): Promise<RewindPlan> {
  if (typeof options !== 'object' || options === null) throw new InvalidConfigError(`[${PKG}] planRewind options must be an object, got ${describeValue(options)}`);
  const { storage, group } = options;
  if (!storage || typeof storage.listLeases !== 'function' || typeof storage.getRoster !== 'function') {
    throw new InvalidConfigError(`[${PKG}] storage must implement CheckpointStorage, got ${describeValue(storage)}`);
  }
  if (typeof group !== 'string' || group.length === 0) throw new InvalidInputError(`[${PKG}] group must be a non-empty string, got ${describeValue(group)}`);
  const clock = options.clock ?? systemClock;
  const random = options.random ?? systemRandom;
  const select = checkSelection(options.select);
  const nowMs = clock.wallTime();
  const { to, target } = checkpointOfTarget(options.to, nowMs, select.leaseKeys?.length ?? 0);

  const view = await readView(storage, group);
  const selected = selectedKeys(view, group, select);
  const rewindId = `${Math.trunc(nowMs).toString(36)}-${Math.floor(random.next() * 36 ** 6).toString(36).padStart(6, '0')}`;
  const requestedAt = new Date(nowMs).toISOString();
  const decided = decide(view, selected, to, target === 'latest');
  const notReplayable: RewindNote[] = [...decided.notReplayable];
  if (select.leaseKeys === undefined) {
    for (const key of [...view.corrupt].sort()) {
      if (select.streamId === undefined || streamOf(key) === select.streamId) notReplayable.push({ leaseKey: key, reason: 'its lease cannot be read back, so it is not rewound (see leasehold doctor --group)' });
    }
  }
  return { rewindId, group, requestedAt, target, to, selected, moves: decided.moves, unchanged: decided.unchanged, notReplayable };
}

function checkSelection(select: RewindSelection | undefined): RewindSelection {
  if (select === undefined) return {};
  if (typeof select !== 'object' || select === null) throw new InvalidInputError(`[${PKG}] select must be { streamId?, leaseKeys? }, got ${describeValue(select)}`);
  const { streamId, leaseKeys } = select;
  if (streamId !== undefined && (typeof streamId !== 'string' || streamId.length === 0)) {
    throw new InvalidInputError(`[${PKG}] select.streamId must be a non-empty string, got ${describeValue(streamId)}`);
  }
  if (leaseKeys !== undefined) {
    if (!Array.isArray(leaseKeys) || leaseKeys.length === 0) throw new InvalidInputError(`[${PKG}] select.leaseKeys must be a non-empty array of lease keys, got ${describeValue(leaseKeys)}`);
    const seen = new Set<string>();
    for (const key of leaseKeys) {
      if (typeof key !== 'string' || key.length === 0) throw new InvalidInputError(`[${PKG}] select.leaseKeys holds ${describeValue(key)}, which is not a lease key`);
      if (seen.has(key)) throw new InvalidInputError(`[${PKG}] select.leaseKeys names lease ${describeValue(key)} twice`);
      seen.add(key);
      const keyStream = streamOf(key);
      if (streamId !== undefined && keyStream !== streamId) {
        const actual = keyStream === undefined ? 'its key names no stream' : `it is a lease of stream ${describeValue(keyStream)}`;
        throw new InvalidInputError(`[${PKG}] lease ${describeValue(key)} is not a lease of stream ${describeValue(streamId)} (${actual})`);
      }
    }
  }
  return { streamId, leaseKeys };
}

/**
 * The stream a lease key names: a multi-stream key is `<streamId>:<shardId>` split at its last `:`, since
 * stream ids may hold `:` and shard ids never do, so stream `orders` never selects `orders:eu:<shard>`.
 */
function streamOf(leaseKey: string): string | undefined {
  return parseStreamLeaseKey(leaseKey)?.streamId;
}

function selectedKeys(view: GroupView, group: string, select: RewindSelection): string[] {
  if (select.leaseKeys !== undefined) {
    for (const key of select.leaseKeys) {
      if (view.corrupt.has(key)) throw new InvalidInputError(`[${PKG}] lease ${describeValue(key)} of group ${describeValue(group)} cannot be read back, so it cannot be rewound (see leasehold doctor --group)`);
      if (!view.leases.has(key)) throw new InvalidInputError(`[${PKG}] group ${describeValue(group)} has no lease ${describeValue(key)}`);
    }
    return [...select.leaseKeys].sort();
  }
  const { streamId } = select;
  const keys = [...view.leases.keys()].filter((key) => streamId === undefined || streamOf(key) === streamId).sort();
  if (keys.length === 0) {
    throw new InvalidInputError(
      streamId === undefined ? `[${PKG}] group ${describeValue(group)} has no leases to rewind` : `[${PKG}] group ${describeValue(group)} has no lease of stream ${describeValue(select.streamId)}`,
    );
  }
  return keys;
}

/** The moves of a rewind on the group as `view` shows it, ancestors first. */
function decide(view: GroupView, selected: readonly string[], to: Position, latest: boolean): { moves: RewindMove[]; unchanged: RewindNote[]; notReplayable: RewindNote[] } {
  const unchanged: RewindNote[] = [];
  const notReplayable: RewindNote[] = [];
  const targets = new Map<string, { to: Position; descendantOf: string | undefined }>();
  for (const key of selected) {
    const lease = view.leases.get(key);
    if (!lease) continue; // deleted since it was selected: its shard finished and its children carry on
    if (lease.format > RECORD_FORMAT) throw newerFormat(lease);
    if (latest && isFinished(lease)) {
      unchanged.push({ leaseKey: key, reason: 'finished: nothing in it comes after the moment of the request' });
      continue;
    }
    targets.set(key, { to, descendantOf: undefined });
  }
  // A finished lease read again must be read before everything that continues it: every lease that
  // descends from it is reset, to the rewind's time (or its start), and waits for it.
  for (const key of ancestorsFirst(view, targets.keys())) {
    const lease = view.leases.get(key) as LeaseRecord;
    if (!isFinished(lease)) continue;
    for (const descendant of descendantsOf(view, key)) {
      const found = view.leases.get(descendant) as LeaseRecord;
      if (found.format > RECORD_FORMAT) throw newerFormat(found);
      const own = targets.get(descendant);
      targets.set(descendant, { to: descendantTarget(to), descendantOf: own?.descendantOf ?? key });
    }
  }
  const moves: RewindMove[] = [];
  for (const key of ancestorsFirst(view, targets.keys())) {
    const lease = view.leases.get(key) as LeaseRecord;
    const target = targets.get(key) as { to: Position; descendantOf: string | undefined };
    const owner = view.ownerOf(lease);
    // A descendant is written even where it stands already: a worker that listed the group before the
    // finished lease's request landed may take it, at the version it listed, and read it before its
    // parent is read again; a write of the rewind makes that take conflict.
    if (owner === null && !hasRewindRequest(lease) && lease.checkpoint === target.to && !isFinished(lease) && target.descendantOf === undefined) {
      unchanged.push({ leaseKey: key, reason: `already at ${target.to}, and nobody holds it` });
      continue;
    }
    // Never directly: a child may be created and taken between this listing and the write (a finished
    // lease's write is conditional on its own version only). Its request keeps every child from being
    // taken, and the lease moves once what continues it has stopped.
    const how: RewindHow = isFinished(lease) ? 'after-descendants' : owner === null ? 'direct' : 'request';
    moves.push({ leaseKey: key, owner, from: lease.checkpoint, to: target.to, how, descendantOf: target.descendantOf });
  }
  // A rewind to a time or to the stream's start asks for records a cleaned-up parent held too.
  if (to === Checkpoint.TRIM_HORIZON || Checkpoint.timestampOf(to) !== undefined) {
    const reported = new Set<string>();
    for (const move of moves) {
      if (move.descendantOf !== undefined) continue;
      for (const parentKey of (view.leases.get(move.leaseKey) as LeaseRecord).parentKeys) {
        if (view.leases.has(parentKey) || reported.has(parentKey)) continue;
        reported.add(parentKey);
        notReplayable.push({
          leaseKey: parentKey,
          reason: view.corrupt.has(parentKey)
            ? `parent of ${move.leaseKey}: its lease cannot be read back, so it is not read again`
            : `parent of ${move.leaseKey}: its lease was cleaned up after it finished, so its records after the target are not read again`,
        });
      }
    }
  }
  return { moves, unchanged, notReplayable };
}

// ---------------------------------------------------------------------------------------------------- applying

/** Whether a lease already carries this rewind: its request, or its id with no request left. */
function carries(lease: LeaseRecord, rewindId: string): boolean {
  const request = rewindRequestOf(lease);
  if (request !== undefined) return request.id === rewindId;
  return !hasRewindRequest(lease) && lease.metadata[REWIND_FIELDS.rewound] === rewindId;
}

function updateOf(lease: LeaseRecord, move: Pick<RewindMove, 'how' | 'to'>, rewindId: string, requestedAt: string): LeaseUpdate {
  if (move.how === 'direct') return { leaseKey: lease.leaseKey, expectedVersion: lease.version, next: rewoundState(lease, { id: rewindId, to: move.to }) };
  const request: RewindRequest = { id: rewindId, to: move.to, requestedAt };
  return {
    leaseKey: lease.leaseKey,
    expectedVersion: lease.version,
    // Only the request is added: owner, epoch, incarnation and checkpoint stay as they are.
    next: { ...leaseStateOf(lease), metadata: { ...lease.metadata, [REWIND_FIELDS.request]: JSON.stringify(request) } },
    notify: 'rewind',
  };
}

/** How many times one generation's refused writes are sent again at once, on the record each conflict carries. */
const QUICK_RETRIES = 10;

/**
 * Writes the leases of `moves` that do not carry the rewind yet, a generation at a time, ancestors first:
 * a finished lease carries its request before any lease that descends from it is reset, so that none of
 * those is taken and read before it. A write refused because the lease moved meanwhile (its owner
 * checkpointed) is sent again at once on the record the conflict carries, up to {@link QUICK_RETRIES}
 * times, as long as the roster read says who holds it: a busy owner checkpoints every batch, and a fresh
 * listing each time would lose the race to it for ever. Stops at the first generation left with a write
 * that did not apply, and returns its keys (the caller reads the group again).
 */
async function writeMoves(storage: CheckpointStorage, group: string, view: GroupView, moves: readonly RewindMove[], rewindId: string, requestedAt: string): Promise<string[]> {
  const due = moves.filter((move) => {
    const lease = view.leases.get(move.leaseKey);
    return lease !== undefined && !carries(lease, rewindId);
  });
  const dueKeys = new Set(due.map((move) => move.leaseKey));
  const generation = new Map<string, number>();
  const generationOf = (key: string): number => {
    const known = generation.get(key);
    if (known !== undefined) return known;
    generation.set(key, 0);
    const lease = view.leases.get(key);
    let g = 0;
    for (const parentKey of lease?.parentKeys ?? []) if (dueKeys.has(parentKey)) g = Math.max(g, generationOf(parentKey) + 1);
    generation.set(key, g);
    return g;
  };
  const byGeneration = new Map<number, RewindMove[]>();
  for (const move of due) byGeneration.set(generationOf(move.leaseKey), [...(byGeneration.get(generationOf(move.leaseKey)) ?? []), move]);
  for (const g of [...byGeneration.keys()].sort((a, b) => a - b)) {
    let batch = (byGeneration.get(g) as RewindMove[]).map((move) => ({ move, lease: view.leases.get(move.leaseKey) as LeaseRecord }));
    for (let attempt = 0; batch.length > 0; attempt++) {
      const results = await storage.updateLeases(group, batch.map(({ move, lease }) => updateOf(lease, move, rewindId, requestedAt)));
      const again: typeof batch = [];
      const failed: string[] = [];
      batch.forEach(({ move }, i) => {
        const outcome = results[i];
        if (outcome?.status === 'applied') return;
        const current = outcome?.status === 'conflict' ? outcome.current : null;
        if (outcome?.status === 'conflict' && current === null) return; // deleted meanwhile: its shard finished
        if (current !== null && carries(current, rewindId)) return;
        if (current === null || !view.judges(current) || attempt + 1 >= QUICK_RETRIES) {
          failed.push(move.leaseKey);
          return;
        }
        // A lease that finished meanwhile may have children reading already: a request, never directly.
        const how: RewindHow = isFinished(current) ? 'after-descendants' : view.ownerOf(current) === null ? 'direct' : 'request';
        again.push({ move: { ...move, how }, lease: current });
      });
      if (failed.length > 0) return [...failed, ...again.map(({ move }) => move.leaseKey)];
      batch = again;
    }
  }
  return [];
}

/**
 * Writes a planned rewind: every lease it moves (re-read first, so that the decisions hold for the group as
 * it is now, and read again and written again, up to `maxAttempts` times, when a lease changed meanwhile),
 * then the group-wide marker on the leader record, then what can be settled at once (see
 * {@link settleRewinds}). Returns the rewind as written, for {@link awaitRewind}.
 */
export async function applyRewind(plan: RewindPlan, options: ApplyRewindOptions): Promise<AppliedRewind> {
  if (typeof plan !== 'object' || plan === null || typeof plan.rewindId !== 'string' || !isList(plan.selected)) {
    throw new InvalidInputError(`[${PKG}] applyRewind needs a plan made by planRewind, got ${describeValue(plan)}`);
  }
  const { storage } = options;
  if (!storage || typeof storage.updateLeases !== 'function') throw new InvalidConfigError(`[${PKG}] storage must implement CheckpointStorage, got ${describeValue(storage)}`);
  const maxAttempts = options.maxAttempts ?? 5;
  if (!Number.isSafeInteger(maxAttempts) || maxAttempts < 1) throw new InvalidConfigError(`[${PKG}] maxAttempts must be a positive integer, got ${describeValue(maxAttempts)}`);
  const clock = options.clock ?? systemClock;
  const random = options.random ?? systemRandom;
  const startedAt = clock.now();
  const latest = plan.target === 'latest';
  const moves = new Map<string, RewindMove>();
  let failed: string[] = [];
  for (let attempt = 0; attempt < maxAttempts; attempt++) {
    // Out of step with owners that checkpoint at a steady pace, as their batches come.
    if (attempt > 0) await clock.sleep((50 + random.next() * 200) * attempt);
    const view = await readView(storage, plan.group);
    const decided = decide(view, plan.selected, plan.to, latest);
    // The first sight of each lease is the one reported: a later read shows it moved already.
    for (const move of decided.moves) if (!moves.has(move.leaseKey)) moves.set(move.leaseKey, move);
    failed = await writeMoves(storage, plan.group, view, decided.moves, plan.rewindId, plan.requestedAt);
    if (failed.length === 0) break;
  }
  if (failed.length > 0) {
    throw new LeaseholdError(
      'ERR_REWIND_CONFLICT',
      `[${PKG}] rewind ${plan.rewindId} of group ${describeValue(plan.group)} could not be written to ${failed.map((key) => describeValue(key)).join(', ')} after ${maxAttempts} attempts: they kept changing. What was written is safe as it is; run the rewind again`,
    );
  }
  const marker = await markGroup(storage, plan.group, plan.rewindId, maxAttempts);
  const view = await readView(storage, plan.group);
  await settleAndMark(storage, plan, view);
  const ordered = ancestorsFirst(viewOf([...view.leases.values()], [], [], []), moves.keys()).map((key) => moves.get(key) as RewindMove);
  return { ...plan, moves: ordered, startedAt, marker };
}

/**
 * Names the rewind on the leader record, keeping its holder and term (the leader adopts a write that
 * keeps them, and every worker reads the record each renew interval): workers without a change feed look
 * at their leases when it changes.
 */
async function markGroup(storage: Partial<LeaderStore>, group: string, rewindId: string, attempts: number): Promise<AppliedRewind['marker']> {
  return mark(storage, group, rewindId, rewindId, attempts);
}

async function mark(storage: Partial<LeaderStore>, group: string, rewindId: string, value: string, attempts: number): Promise<AppliedRewind['marker']> {
  if (typeof storage.getLeader !== 'function' || typeof storage.updateLeader !== 'function') return 'no-leader-record';
  for (let attempt = 0; attempt < attempts; attempt++) {
    const leader = await storage.getLeader(group);
    if (leader === null) return 'no-leader-record';
    if (leader.format > RECORD_FORMAT) {
      throw new RecordFormatError(`[${PKG}] the leader record of group ${describeValue(group)} is in record format ${leader.format}, newer than the ${RECORD_FORMAT} this Leasehold knows: upgrade it`, leader.format);
    }
    if (leader.metadata[REWIND_MARKER_FIELD] === value) return 'written';
    const outcome = await storage.updateLeader(group, leader.version, { ...leaderStateOf(leader), metadata: { ...leader.metadata, [REWIND_MARKER_FIELD]: value } });
    if (outcome.status === 'applied') return 'written';
  }
  throw new LeaseholdError(
    'ERR_REWIND_NOT_ANNOUNCED',
    `[${PKG}] rewind ${rewindId} of group ${describeValue(group)} is written on its leases, but its mark on the leader record could not be written after ${attempts} attempts: owners without a change feed may not see it; run the rewind again`,
  );
}

// ---------------------------------------------------------------------------------------------------- settling

/** Options of {@link settleRewinds}. */
export interface SettleRewindsOptions {
  readonly storage: Pick<CheckpointStorage, 'updateLeases' | 'getLease'>;
  readonly group: string;
  /** The group's leases as listed. */
  readonly leases: readonly LeaseRecord[];
  /** Whether a live worker holds the lease, judged on a roster read after the listing. */
  readonly heldByAnyone: (lease: LeaseRecord) => boolean;
  /**
   * Keys of the group's leases that the listing could not read back. While there is one, no finished lease
   * is moved back: its parents cannot be read, so it may descend from that lease and be read by its owner.
   */
  readonly unreadable?: readonly string[] | undefined;
  /** Asked right before each write (the leader: whether it still leads). Default: always. */
  readonly mayWrite?: (() => boolean) | undefined;
}

/**
 * Does what no owner does for a rewind, each a write conditional on the listed version and harmless if
 * done twice (the leader's shard sync runs it each round, `awaitRewind` each poll):
 *
 * 1. a lease that descends from a finished lease carrying a request, and does not carry that rewind yet
 *    (created meanwhile, or a write of the tool's did not land), is reset as the tool resets one: a
 *    request when someone holds it, directly otherwise;
 * 2. a request on a lease nobody holds (its owner died, or it was never taken since) is applied directly;
 * 3. a finished lease's request is applied once nobody holds it and every lease that descends from it
 *    carries the rewind with no request left (it is reset, and its owner, if any, gave it back without
 *    reading: a parent carrying a request is not finished) or nobody holds it and it never started, and
 *    every lease of the group can be read back (one that cannot may descend from it).
 *
 * Descendants are settled before their ancestors, so that a whole line settles in one call. Returns the
 * leases written.
 */
export async function settleRewinds(options: SettleRewindsOptions): Promise<LeaseRecord[]> {
  const { storage, group, heldByAnyone } = options;
  const mayWrite = options.mayWrite ?? (() => true);
  if (!options.leases.some(hasRewindRequest)) return [];
  const view = viewOf(options.leases, [], [], []);
  const held = (lease: LeaseRecord): boolean => heldByAnyone(lease);
  const written: LeaseRecord[] = [];
  const write = async (update: LeaseUpdate): Promise<boolean> => {
    if (!mayWrite()) return false;
    const [outcome] = await storage.updateLeases(group, [update]);
    if (outcome?.status !== 'applied') return false;
    view.leases.set(outcome.record.leaseKey, outcome.record);
    written.push(outcome.record);
    return true;
  };
  // 1. Lines under finished leases carrying a request are covered by it.
  for (const key of ancestorsFirst(view, view.leases.keys())) {
    const lease = view.leases.get(key) as LeaseRecord;
    const request = rewindRequestOf(lease);
    if (!request || !isFinished(lease) || lease.format > RECORD_FORMAT) continue;
    for (const descendant of ancestorsFirst(view, descendantsOf(view, key))) {
      const found = view.leases.get(descendant) as LeaseRecord;
      if (found.format > RECORD_FORMAT || carries(found, request.id) || (!held(found) && !hasRewindRequest(found) && neverStarted(found))) continue;
      const how: RewindHow = held(found) || isFinished(found) ? 'request' : 'direct';
      if (!(await write(updateOf(found, { how, to: descendantTarget(request.to) }, request.id, request.requestedAt)))) return written;
    }
  }
  // 2 and 3, descendants first.
  for (const key of ancestorsFirst(view, view.leases.keys()).reverse()) {
    const lease = view.leases.get(key) as LeaseRecord;
    const request = rewindRequestOf(lease);
    if (!request || lease.format > RECORD_FORMAT || held(lease)) continue;
    if (isFinished(lease)) {
      if ((options.unreadable?.length ?? 0) > 0) continue;
      const stopped = descendantsOf(view, key).every((descendant) => {
        const found = view.leases.get(descendant) as LeaseRecord;
        if (hasRewindRequest(found)) return false;
        return found.metadata[REWIND_FIELDS.rewound] === request.id || (!held(found) && neverStarted(found));
      });
      if (!stopped) continue;
    }
    // Published as a release: the lease nobody holds may be taken now (a finished one could not before).
    await write({ leaseKey: key, expectedVersion: lease.version, next: rewoundState(lease, request), notify: 'released' });
  }
  return written;
}

/**
 * Settles what no owner can on the group as `view` shows it; when that moved a finished lease back (it can
 * be taken now), marks the leader record again, so that workers without a change feed list the group.
 */
async function settleAndMark(storage: CheckpointStorage & Partial<LeaderStore>, rewind: Pick<RewindPlan, 'group' | 'rewindId'>, view: GroupView): Promise<LeaseRecord[]> {
  const settled = await settleRewinds({
    storage,
    group: rewind.group,
    leases: [...view.leases.values()],
    heldByAnyone: (lease) => view.ownerOf(lease) !== null,
    unreadable: [...view.corrupt],
  });
  const reopened = settled.find((record) => view.leases.get(record.leaseKey)?.checkpoint === Checkpoint.SHARD_END && record.checkpoint !== Checkpoint.SHARD_END);
  // A request written on a lease a worker holds (a descendant of a finished lease, reached once it could be
  // read) is news to that owner too: without a change feed it hears of it only from a new mark.
  const asked = settled.find((record) => hasRewindRequest(record) && view.ownerOf(record) !== null);
  if (reopened) await mark(storage, rewind.group, rewind.rewindId, `${rewind.rewindId}/${reopened.leaseKey}`, 5);
  else if (asked) await mark(storage, rewind.group, rewind.rewindId, `${rewind.rewindId}/asked/${asked.leaseKey}/${asked.version}`, 5);
  return settled;
}

/** A lease at its start, never checkpointed: nobody read it yet. */
function neverStarted(lease: LeaseRecord): boolean {
  return lease.checkpoint === null || lease.checkpoint === Checkpoint.TRIM_HORIZON;
}

// ---------------------------------------------------------------------------------------------------- waiting

/**
 * Follows a rewind until every lease it moves moved (it carries the rewind's id and no request), or was
 * replaced by a later rewind, or deleted; or until `timeoutMs`. Each look lists the group and settles what
 * no owner can (see {@link settleRewinds}). Returns the progress: per lease, the time from the start of
 * `applyRewind` until it was seen moved.
 */
export async function awaitRewind(rewind: AppliedRewind, options: AwaitRewindOptions): Promise<RewindProgress> {
  if (typeof rewind !== 'object' || rewind === null || typeof rewind.rewindId !== 'string' || !isList(rewind.moves)) {
    throw new InvalidInputError(`[${PKG}] awaitRewind needs a rewind returned by applyRewind, got ${describeValue(rewind)}`);
  }
  const { storage, timeoutMs } = options;
  if (!storage || typeof storage.listLeases !== 'function') throw new InvalidConfigError(`[${PKG}] storage must implement CheckpointStorage, got ${describeValue(storage)}`);
  if (typeof timeoutMs !== 'number' || !(timeoutMs >= 0)) throw new InvalidConfigError(`[${PKG}] timeoutMs must be a non-negative number of milliseconds, got ${describeValue(timeoutMs)}`);
  const pollIntervalMs = options.pollIntervalMs ?? 500;
  if (typeof pollIntervalMs !== 'number' || !(pollIntervalMs > 0) || !Number.isFinite(pollIntervalMs)) {
    throw new InvalidConfigError(`[${PKG}] pollIntervalMs must be a positive number of milliseconds, got ${describeValue(pollIntervalMs)}`);
  }
  const clock = options.clock ?? systemClock;
  const deadline = clock.now() + timeoutMs;
  const states = new Map<string, RewindLeaseProgress>(
    rewind.moves.map((move) => [move.leaseKey, { leaseKey: move.leaseKey, how: move.how, state: 'pending', appliedAfterMs: undefined }]),
  );
  let reported = false;
  for (;;) {
    const view = await readView(storage, rewind.group);
    for (const record of await settleAndMark(storage, rewind, view)) view.leases.set(record.leaseKey, record);
    const now = clock.now();
    let changed = false;
    for (const [leaseKey, progress] of states) {
      if (progress.state !== 'pending') continue;
      const state = stateOf(view.leases.get(leaseKey), rewind.rewindId);
      if (state === 'pending') continue;
      states.set(leaseKey, { ...progress, state, appliedAfterMs: now - rewind.startedAt });
      changed = true;
    }
    const progress = progressOf(rewind, states, now);
    if (changed || !reported) options.onProgress?.(progress);
    reported = true;
    const remaining = deadline - clock.now();
    if (progress.complete || remaining <= 0 || options.signal?.aborted) return progress;
    try {
      await clock.sleep(Math.min(pollIntervalMs, remaining), options.signal);
    } catch {
      return progressOf(rewind, states, clock.now());
    }
  }
}

function stateOf(lease: LeaseRecord | undefined, rewindId: string): RewindLeaseProgress['state'] {
  if (lease === undefined) return 'gone';
  const request = rewindRequestOf(lease);
  if (request !== undefined) return request.id === rewindId ? 'pending' : 'superseded';
  if (hasRewindRequest(lease)) return 'pending';
  return lease.metadata[REWIND_FIELDS.rewound] === rewindId ? 'applied' : 'superseded';
}

function progressOf(rewind: AppliedRewind, states: ReadonlyMap<string, RewindLeaseProgress>, now: number): RewindProgress {
  const leases = rewind.moves.map((move) => states.get(move.leaseKey) as RewindLeaseProgress);
  const done = leases.filter((lease) => lease.state !== 'pending').length;
  return { rewindId: rewind.rewindId, leases, done, total: leases.length, complete: done === leases.length, elapsedMs: now - rewind.startedAt };
}
