/**
 * The rows the statements of `schema.ts` return, and how they become the records of the contract and back:
 * the one place that knows pg's shapes (a bigint column comes back as a string, a JSON column parsed), so
 * that the storage class reads as the contract's operations.
 */
import type { LeaseholdError, LeaseUpdate, MemberRecord, Roster } from '@leasehold/core';
import { decodeMember, rosterOf } from '@leasehold/core/adapter';
import type { QueryResultRow } from 'pg';
import { ownerBucket } from './owner-buckets.js';
import { PKG, type TableNames } from './schema.js';

export interface OutcomeRow extends QueryResultRow {
  applied_version: string | null;
  current_found: boolean;
  current_version: string | null;
  current_state: string | null;
}

export interface CreateLeaseRow extends QueryResultRow {
  applied_version: string | null;
  applied_epoch: string | null;
  current_version: string | null;
  current_state: string | null;
  current_live: boolean | null;
}

export interface LeaseRow extends QueryResultRow {
  lease_key: string;
  version: string | null;
  state: string | null;
}

export interface VersionRow extends QueryResultRow {
  version: string | null;
  state: string | null;
}

export interface MemberOutcomeRow extends QueryResultRow {
  applied_version: string | null;
  /** The member as stored when the write was refused: `{"v": version, "s": state}`, parsed by pg. */
  current: unknown;
  /** Of a join: the group's roster-table row is not known clear of the earlier release yet, and nothing was written. */
  earlier_roster?: boolean;
}

export interface MemberRow extends QueryResultRow {
  worker_id: string;
  version: string;
  state: string | null;
}

/** What a write statement came to: its rows, or an outcome that may or may not have applied. */
export type WriteOutcome<R> = { rows: R[] } | { unknown: LeaseholdError };

/** A bigint column as pg returns it (a string), as the number the contract uses; `null` stays `null`. */
export function toNumber(value: string | number | null | undefined): number | null {
  if (value === null || value === undefined) return null;
  return Number(value);
}

/** The members of a group's rows as `getRoster` and `getMembers` read them; a row that cannot be decoded is in `corrupt`. */
export function rosterOfRows(group: string, rows: readonly MemberRow[]): Roster {
  return rosterOf(group, rows, (row) => decodeMember(group, row.worker_id, toNumber(row.version), row.state, PKG));
}

/** A member as `{"v": version, "s": state}`, as statements return it and the earlier roster row stores it; anything else is corrupt. */
export function decodeStoredMember(group: string, workerId: string, stored: unknown): MemberRecord {
  const entry = typeof stored === 'object' && stored !== null && !Array.isArray(stored) ? (stored as { v?: unknown; s?: unknown }) : {};
  return decodeMember(group, workerId, entry.v, entry.s, PKG);
}

/** Joins the JSON states of a batch: JSON text never holds a raw control character, so none can be split. */
const STATE_SEPARATOR = '\u001e';

/**
 * The largest owner, as JSON text, a change's NOTIFY payload names. A group and a key of 512 bytes each
 * take up to 3,074 bytes of JSON apiece (a control character is escaped in six), which leaves 1,700 of
 * PostgreSQL's 8,000-byte payload limit for the owner with room to spare.
 */
const OWNER_PAYLOAD_BYTES = 1700;

/**
 * The owner a change's payload names, as JSON text (`null` for a write that leaves the lease free), or
 * `null` to leave it out: an owner too long for the payload (only a worker id of control characters gets
 * there) is heard as unknown, never as free. Taken from the state the write stores, never read back.
 */
export function ownerPayload(owner: string | null): string | null {
  const json = JSON.stringify(owner);
  return Buffer.byteLength(json) <= OWNER_PAYLOAD_BYTES ? json : null;
}

/**
 * The owner bucket a change is published on (owner-buckets.ts), or `null` for the table channel: a
 * handover whose payload names its new owner goes to that owner's bucket; everything else (a create, a
 * release, a rewind, a handover that left the lease free or whose owner the payload leaves out, heard as
 * unknown) stays on the table channel, which every subscriber hears. `owner` is the write's
 * {@link ownerPayload}.
 */
export function changeBucket(group: string, update: LeaseUpdate, owner: string | null): number | null {
  return update.notify === 'handed-off' && owner !== null && typeof update.next.owner === 'string' ? ownerBucket(group, update.next.owner) : null;
}

/** The channel a single update's change is published on: the table channel or its owner channel (see {@link changeBucket}). */
export function changeChannel(names: TableNames, group: string, update: LeaseUpdate, owner: string | null): string {
  const bucket = changeBucket(group, update, owner);
  return bucket === null ? names.channel : (names.ownerChannels[bucket] as string);
}

/** The parameters of the `updateLeases` statement of schema.ts, one column per field of the batch. */
export function batchValues(group: string, updates: readonly LeaseUpdate[], states: readonly string[], names: TableNames): unknown[] {
  const keys: string[] = [];
  const expected: number[] = [];
  const epochs: number[] = [];
  const notify: Array<string | null> = [];
  const owners: Array<string | null> = [];
  const buckets: Array<number | null> = [];
  for (const update of updates) {
    keys.push(update.leaseKey);
    expected.push(update.expectedVersion);
    epochs.push(update.next.epoch);
    notify.push(update.notify ?? null);
    const owner = update.notify === undefined ? null : ownerPayload(update.next.owner);
    owners.push(owner);
    buckets.push(changeBucket(group, update, owner));
  }
  return [
    group,
    JSON.stringify(keys),
    expected.join(','),
    states.join(STATE_SEPARATOR),
    epochs.join(','),
    JSON.stringify(notify),
    names.channel,
    JSON.stringify(owners),
    JSON.stringify(buckets),
    names.ownerChannelPrefix,
  ];
}
