/**
 * How records are stored. A lease is one hash field whose value is `version:epoch:write token:state
 * JSON`, the JSON holding every field of the state but the epoch (the record format and any field a later
 * core adds included); the header is what the scripts compare and raise without parsing JSON. A leader
 * record, and a member of a group's roster, are `version:write token:state JSON`. The write token identifies the call that wrote the value, so
 * that a command the client resent after a reconnect is recognised as the adapter's own write.
 */
import {
  CorruptRecordError,
  StorageUnavailableError,
  type RosterMoves,
  type LeaderRecord,
  type LeaderState,
  type LeaseRecord,
  type LeaseState,
  type MemberRecord,
} from '@leasehold/core';
import {
  corruptRecord,
  decodeLeader,
  decodeMember,
  decodeLease,
  describeValue,
  leaderStateOf,
  leaseStateOf,
  rosterMovesOf,
  type KeptAdvance,
} from '@leasehold/core/adapter';
import { PKG } from './keys.js';

/**
 * The state of a lease as stored in JSON: every field but the epoch, which lives in the header, and but
 * the identity, should the caller have spread a record into the state. `state` was validated, so it has
 * every field core names; fields a later core added are kept.
 */
export function encodeLeaseBody(state: LeaseState): string {
  const { epoch: _epoch, ...body } = leaseStateOf(state);
  return JSON.stringify(body);
}

/** The whole stored value of a lease, as the update script writes it. */
export function encodeLeaseValue(version: number, state: LeaseState, token: string): string {
  return `${version}:${state.epoch}:${token}:${encodeLeaseBody(state)}`;
}

export function encodeLeaderBody(state: LeaderState): string {
  return JSON.stringify(leaderStateOf(state));
}

export interface StoredLease {
  readonly record: LeaseRecord;
  readonly token: string;
}

export interface StoredLeader {
  readonly record: LeaderRecord;
  readonly token: string;
}

export interface StoredMember {
  readonly record: MemberRecord;
  readonly token: string;
}

/**
 * The roster's counter: the greatest version any member of the group ever had, and the write token of
 * the last removal (empty if none).
 */
export interface RosterCounter {
  readonly high: number;
  readonly removal: string;
}

export interface Tombstone {
  readonly version: number;
  readonly highEpoch: number;
  readonly token: string;
}

/** Splits `count` decimal fields and a token off the front of a stored value. */
function splitHeader(raw: string, count: number): { numbers: number[]; token: string; rest: string } | null {
  const numbers: number[] = [];
  let start = 0;
  for (let i = 0; i < count; i++) {
    const end = raw.indexOf(':', start);
    if (end < 0) return null;
    const text = raw.slice(start, end);
    if (!/^\d{1,16}$/.test(text)) return null;
    numbers.push(Number(text));
    start = end + 1;
  }
  const tokenEnd = raw.indexOf(':', start);
  if (tokenEnd < 0) return null;
  return { numbers, token: raw.slice(start, tokenEnd), rest: raw.slice(tokenEnd + 1) };
}

function parseBody(text: string): Record<string, unknown> | null {
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/** Reads a stored lease back, checking every field; a bad one throws a `CorruptRecordError` naming it. */
export function decodeStoredLease(group: string, leaseKey: string, raw: unknown): StoredLease {
  if (typeof raw !== 'string') throw corruptRecord({ group, leaseKey }, `expected a string, found ${describeValue(raw)}`, { pkg: PKG });
  const header = splitHeader(raw, 2);
  if (!header) throw corruptRecord({ group, leaseKey }, `malformed header in ${describeValue(raw)}`, { pkg: PKG });
  const [version, epoch] = header.numbers as [number, number];
  const body = parseBody(header.rest);
  // An unparsable body goes to core's decoder as text, which names exactly what is wrong with it.
  // The body was parsed here: the epoch goes into it, not into a copy (a listing decodes every lease).
  if (body !== null) body.epoch = epoch;
  const record = decodeLease(group, leaseKey, version, body ?? header.rest, 'storage-redis');
  return { record, token: header.token };
}

/** Reads a stored leader record back, checking every field. */
export function decodeStoredLeader(group: string, raw: unknown): StoredLeader {
  if (typeof raw !== 'string') throw corruptRecord({ group }, `expected a string, found ${describeValue(raw)}`, { pkg: PKG });
  const header = splitHeader(raw, 1);
  if (!header) throw corruptRecord({ group }, `malformed header in ${describeValue(raw)}`, { pkg: PKG });
  return { record: decodeLeader(group, header.numbers[0], header.rest, 'storage-redis'), token: header.token };
}

/** Reads a tombstone (`version:highest epoch:write token`), or `null` when there is none. */
export function decodeTombstone(group: string, leaseKey: string, raw: unknown): Tombstone | null {
  if (raw === null || raw === undefined) return null;
  const match = typeof raw === 'string' ? /^(\d{1,16}):(\d{1,16}):(.*)$/s.exec(raw) : null;
  if (!match) throw corruptRecord({ group, leaseKey }, `malformed tombstone ${describeValue(raw)}`, { pkg: PKG });
  return { version: Number(match[1]), highEpoch: Number(match[2]), token: match[3] as string };
}

/** Reads a stored member back, checking every field; a bad one throws a `CorruptRecordError` naming the member. */
export function decodeStoredMember(group: string, workerId: string, raw: unknown): StoredMember {
  if (typeof raw !== 'string') throw corruptRecord({ group, workerId }, `expected a string, found ${describeValue(raw)}`, { pkg: PKG });
  const header = splitHeader(raw, 1);
  if (!header) throw corruptRecord({ group, workerId }, `malformed header in ${describeValue(raw)}`, { pkg: PKG });
  return { record: decodeMember(group, workerId, header.numbers[0], header.rest, PKG), token: header.token };
}

/**
 * Reads the roster's counter (`high version` or `high version:write token of the last removal`), or
 * `null` when the roster has none (nobody ever joined).
 */
export function decodeRosterCounter(group: string, raw: unknown): RosterCounter | null {
  if (raw === null || raw === undefined) return null;
  const match = typeof raw === 'string' ? /^(\d{1,16})(?::(.*))?$/s.exec(raw) : null;
  if (!match) {
    throw new CorruptRecordError(`[${PKG}] stored version counter of the roster of group ${describeValue(group)} is corrupt: ${describeValue(raw)}`, { group });
  }
  return { high: Number(match[1]), removal: match[2] ?? '' };
}

/** Reads the group's roster digest (a decimal counter), or 0 when it was never advanced. */
export function decodeRosterDigest(group: string, raw: unknown): number {
  if (raw === null || raw === undefined) return 0;
  if (typeof raw !== 'string' || !/^\d{1,16}$/.test(raw)) {
    throw new CorruptRecordError(`[${PKG}] stored roster digest of group ${describeValue(group)} is corrupt: ${describeValue(raw)}`, { group });
  }
  return Number(raw);
}

/**
 * The reply of the moves script (`get-roster-moves.lua`): the digest, then each advance's names after
 * `since` in order. An advance whose names are not kept (no entry: an earlier release's bare `INCR`, or
 * one dropped) or cannot be read back (an entry that is no JSON array of worker ids) reads as naming
 * nobody: the reader then reads the whole roster, which is always right. A digest that is not a number is
 * a `CorruptRecordError`; a reply of another shape, a `StorageUnavailableError`.
 */
export function decodeRosterMoves(group: string, since: number, reply: unknown): RosterMoves {
  if (!Array.isArray(reply) || reply.length === 0) throw new StorageUnavailableError(`[${PKG}] reading the roster moves of group ${describeValue(group)} answered ${describeValue(reply)}`);
  const [raw, ...entries] = reply as unknown[];
  const digest = decodeRosterDigest(group, raw);
  const kept: KeptAdvance[] = [];
  for (const [i, value] of entries.entries()) {
    const workerIds = moveNames(value);
    if (workerIds !== null) kept.push({ digest: since + 1 + i, workerIds });
  }
  return rosterMovesOf(since, digest, kept);
}

function moveNames(raw: unknown): string[] | null {
  if (typeof raw !== 'string') return null;
  let names: unknown;
  try {
    names = JSON.parse(raw);
  } catch {
    return null;
  }
  return Array.isArray(names) && names.every((name) => typeof name === 'string' && name !== '') ? (names as string[]) : null;
}
