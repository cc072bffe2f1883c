/**
 * Deciding a rewind, writing nothing: what a target (a time, the stream's start, now, a position) means
 * as a checkpoint, which leases a selection names, and for each lease whether it moves directly, by a
 * request to its owner, or after the leases that descend from it.
 */
import { systemClock, systemRandom } from '../clock.js';
import { describeValue, InvalidConfigError, InvalidInputError } from '../errors.js';
import { checkContractVersion } from '../contract-version.js';
import { unsafeOf } from '../unsafe.js';
import { limits } from '../validation.js';
import { parseStreamLeaseKey } from '../stream-keys.js';
import { Checkpoint, RECORD_FORMAT, type LeaseRecord, type Position } from '../storage.js';
import { hasRewindRequest } from './request.js';
import type { PlanRewindOptions, RewindHow, RewindMove, RewindNote, RewindPlan, RewindSelection, RewindTarget } from './types.js';
import { ancestorsFirst, descendantsOf, isFinished, newerFormat, readView, type GroupView } from './view.js';

const PKG = 'core';

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

/** The first lease in the line `lease` descends from that cannot be read back, or `undefined`. */
function unreadableAncestor(view: GroupView, lease: LeaseRecord, seen = new Set<string>()): string | undefined {
  for (const parentKey of lease.parentKeys) {
    if (view.corrupt.has(parentKey)) return parentKey;
    const parent = view.leases.get(parentKey);
    if (parent === undefined || seen.has(parentKey)) continue;
    seen.add(parentKey);
    const found = unreadableAncestor(view, parent, seen);
    if (found !== undefined) return found;
  }
  return undefined;
}

/** Where a lease that descends from a finished lease moves: to the rewind's time, or to its start. */
export function descendantTarget(to: Position): Position {
  return Checkpoint.timestampOf(to) !== undefined ? to : Checkpoint.TRIM_HORIZON;
}

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
  checkContractVersion(storage, "planRewind's storage", PKG);
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
  const decided = decide(view, selected, to, target === 'latest', unsafeOf(options).rewindBehindUnreadable === true);
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
export function decide(
  view: GroupView,
  selected: readonly string[],
  to: Position,
  latest: boolean,
  behindUnreadableMoved = false,
): { moves: RewindMove[]; unchanged: RewindNote[]; notReplayable: RewindNote[] } {
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
  // A lease whose line runs through a lease that cannot be read back may descend from a finished lease
  // read again here: moved now, before that lease carries the request, it could be taken and read before
  // it. It is left as it is; once the lease can be read, settling resets it, ancestors first, if it does.
  // `behindUnreadableMoved` is the simulation's unsafe switch that moves it anyway (seed 103304).
  const readAgain = !behindUnreadableMoved && [...targets.keys()].some((key) => isFinished(view.leases.get(key) as LeaseRecord));
  const moves: RewindMove[] = [];
  for (const key of ancestorsFirst(view, targets.keys())) {
    const lease = view.leases.get(key) as LeaseRecord;
    const target = targets.get(key) as { to: Position; descendantOf: string | undefined };
    const unreadable = readAgain ? unreadableAncestor(view, lease) : undefined;
    if (unreadable !== undefined) {
      unchanged.push({
        leaseKey: key,
        reason: `it descends from ${unreadable}, whose lease cannot be read back (see leasehold doctor --group): once it can, the rewind resets it if it descends from a finished lease read again; rewind it again otherwise`,
      });
      continue;
    }
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
