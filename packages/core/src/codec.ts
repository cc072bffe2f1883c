/**
 * A codec for adapters that store a record's state as one JSON document, and the helpers that turn what
 * a backend returned into records, listings and rosters: a stored record that does not read back as a
 * valid one becomes a `CorruptRecordError` naming it, so one bad record never hides the others.
 */
import { CorruptRecordError, describeValue } from './errors.js';
import type { LeaderRecord, LeaderState, LeaseListing, LeaseRecord, LeaseState, MemberRecord, MemberState, Roster } from './storage.js';
import { leaderStateOf, leaseRecordOf, leaseStateOf, memberStateOf } from './storage.js';
import { validateLeaderState, validateLeaseState, validateMemberState } from './validation.js';

/** Which record a message names. */
type Where = { readonly group: string; readonly leaseKey?: string | undefined; readonly workerId?: string | undefined };

/** Serialises a member state as one JSON document (every field but the identity). */
export function encodeMemberState(state: MemberState): string {
  return JSON.stringify(memberStateOf(state));
}

/**
 * Rebuilds a stored member from its parts, checking every field; a bad one throws a `CorruptRecordError`
 * naming the member. `state` is the JSON document of {@link encodeMemberState} or an object.
 */
export function decodeMember(group: string, workerId: string, version: unknown, state: unknown, pkg = 'core'): MemberRecord {
  const stored = decodeStored<MemberState>({ group, workerId }, version, state, MEMBER_REQUIRED, validateMemberState, pkg);
  return { group, workerId, version: stored.version, ...memberStateOf(stored.state) };
}

/**
 * Builds a {@link Roster} from stored members: each is decoded by `decode` (typically with
 * {@link decodeMember}); one that throws a `CorruptRecordError` is listed in `corrupt`.
 */
export function rosterOf<Row>(group: string, rows: Iterable<Row>, decode: (row: Row) => MemberRecord): Roster {
  const { records: members, corrupt } = decodeAll(rows, decode);
  return { group, members, corrupt };
}

/** Serialises a lease state as one JSON document (every field but the identity), for adapters that store it that way. */
export function encodeLeaseState(state: LeaseState): string {
  return JSON.stringify(leaseStateOf(state));
}

/** Serialises a leader state as one JSON document. */
export function encodeLeaderState(state: LeaderState): string {
  return JSON.stringify(leaderStateOf(state));
}

/**
 * Builds a {@link LeaseListing} from stored rows: each row is decoded by `decode` (typically with
 * {@link decodeLease}); a row that throws a `CorruptRecordError` is listed in `corrupt`, so one bad row
 * never hides the others. Any other error is thrown.
 */
export function listingOf<Row>(rows: Iterable<Row>, decode: (row: Row) => LeaseRecord): LeaseListing {
  const { records: leases, corrupt } = decodeAll(rows, decode);
  return { leases, corrupt };
}

/** A `CorruptRecordError` naming the record, for adapters that check stored fields of their own too. */
export function corruptRecord(
  where: { group: string; leaseKey?: string | undefined; workerId?: string | undefined },
  detail: string,
  options: { pkg?: string; cause?: unknown } = {},
): CorruptRecordError {
  const name = where.workerId !== undefined
    ? `member ${describeValue(where.workerId)} of group ${describeValue(where.group)}`
    : where.leaseKey === undefined
      ? `leader record of group ${describeValue(where.group)}`
      : `lease ${describeValue(where.leaseKey)} of group ${describeValue(where.group)}`;
  return new CorruptRecordError(`[${options.pkg ?? 'core'}] stored ${name} is corrupt: ${detail}`, where, { cause: options.cause });
}

function parseJson(text: unknown, where: Where, pkg: string): Record<string, unknown> {
  if (typeof text !== 'string') throw corruptRecord(where, `expected a JSON document, found ${describeValue(text)}`, { pkg });
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw corruptRecord(where, `state is not valid JSON (${describeValue(text)})`, { pkg, cause: error });
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw corruptRecord(where, `state is not a JSON object (${describeValue(text)})`, { pkg });
  }
  return value as Record<string, unknown>;
}

function requireFields(fields: object, names: readonly string[], where: Where, pkg: string): void {
  for (const name of names) {
    if (name in fields) continue;
    const missing = names.filter((each) => !(each in fields));
    throw corruptRecord(where, `state lacks ${missing.join(', ')}`, { pkg });
  }
}

function checkStoredVersion(version: unknown, where: Where, pkg: string): number {
  if (typeof version !== 'number' || !Number.isSafeInteger(version) || version < 1) {
    throw corruptRecord(where, `version must be a positive integer, found ${describeValue(version)}`, { pkg });
  }
  return version;
}

/** The fields a stored record must have (core's own; fields a later core added may be there too). */
const LEASE_REQUIRED = ['format', 'owner', 'epoch', 'checkpoint', 'parentKeys', 'incarnation', 'metadata'] as const;
const LEADER_REQUIRED = ['format', 'holder', 'term', 'metadata'] as const;
const MEMBER_REQUIRED = ['format', 'incarnation', 'leaseDurationMs', 'status', 'held', 'changes', 'requests', 'metadata'] as const;

/**
 * A stored record's version and state, every field checked by `validate`: anything wrong throws a
 * `CorruptRecordError` naming the record (`where`), never the `InvalidInputError` of a bad write.
 */
function decodeStored<S>(where: Where, version: unknown, state: unknown, required: readonly string[], validate: (state: S) => void, pkg: string): { version: number; state: S } {
  const storedVersion = checkStoredVersion(version, where, pkg);
  const fields = typeof state === 'string' ? parseJson(state, where, pkg) : (state as Record<string, unknown>);
  if (typeof fields !== 'object' || fields === null) throw corruptRecord(where, `state is ${describeValue(state)}`, { pkg });
  requireFields(fields, required, where, pkg);
  const candidate = fields as unknown as S;
  try {
    validate(candidate);
  } catch (error) {
    throw corruptRecord(where, (error as Error).message.replace(/^\[core\] /, ''), { pkg, cause: error });
  }
  return { version: storedVersion, state: candidate };
}

/** Decodes every row; a row whose decoding throws a `CorruptRecordError` is reported, any other error thrown. */
function decodeAll<Row, R>(rows: Iterable<Row>, decode: (row: Row) => R): { records: R[]; corrupt: CorruptRecordError[] } {
  const records: R[] = [];
  const corrupt: CorruptRecordError[] = [];
  for (const row of rows) {
    try {
      records.push(decode(row));
    } catch (error) {
      if (!(error instanceof CorruptRecordError)) throw error;
      corrupt.push(error);
    }
  }
  return { records, corrupt };
}

/**
 * Rebuilds a stored lease from its parts, checking every field; a bad one throws a `CorruptRecordError`
 * that names the record. `state` is the JSON document of {@link encodeLeaseState} or an object.
 */
export function decodeLease(group: string, leaseKey: string, version: unknown, state: unknown, pkg = 'core'): LeaseRecord {
  const stored = decodeStored<LeaseState>({ group, leaseKey }, version, state, LEASE_REQUIRED, validateLeaseState, pkg);
  return leaseRecordOf(group, leaseKey, stored.version, stored.state);
}

/** Rebuilds a stored leader record from its parts, checking every field. */
export function decodeLeader(group: string, version: unknown, state: unknown, pkg = 'core'): LeaderRecord {
  const stored = decodeStored<LeaderState>({ group }, version, state, LEADER_REQUIRED, validateLeaderState, pkg);
  return { group, version: stored.version, ...leaderStateOf(stored.state) };
}
