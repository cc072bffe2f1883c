/**
 * Where each record lives in the table and how it is written and read back: the item keys of leases,
 * leaders, members and the roster digest, the attributes a write stores, and the decoding of an item into
 * the contract's record, a tombstone or a corrupt record. The storage class decides what to send; this
 * file knows the items' shape, which `schema.ts` describes.
 */
import type { AttributeValue } from '@aws-sdk/client-dynamodb';
import {
  CorruptRecordError,
  StorageOutcomeUnknownError,
  type LeaderRecord,
  type LeaderState,
  type LeaseRecord,
  type LeaseState,
  type MemberRecord,
  type Unknown,
  type WriteResult,
} from '@leasehold/core';
import { decodeLeader, decodeLease, decodeMember, describeValue, encodeLeaderState, encodeLeaseState, keyBucket, result } from '@leasehold/core/adapter';
import { DIGEST_PARTITION_SUFFIX, DIGEST_SORT_KEY, LEADER_SORT_KEY, LEASE_PREFIX, MEMBER_BUCKETS, MEMBERS_PARTITION_SUFFIX, MEMBER_PREFIX, PKG, attr } from './schema.js';

export type Item = Record<string, AttributeValue>;

/** The value of a flag attribute that is present (`deleted`, `removed`, `fresh`). */
export const TRUE: AttributeValue = { BOOL: true };

export function leaseItemKey(group: string, leaseKey: string): Item {
  return { [attr.pk]: { S: group }, [attr.sk]: { S: `${LEASE_PREFIX}${leaseKey}` } };
}

export function leaderItemKey(group: string): Item {
  return { [attr.pk]: { S: group }, [attr.sk]: { S: LEADER_SORT_KEY } };
}

/**
 * The bucket of a worker id, 0 to `MEMBER_BUCKETS - 1`: core's `keyBucket`, a hash of the id's UTF-8 bytes
 * that never changes between releases. Part of the table's layout: a member is only ever found under its
 * bucket's key.
 */
export function memberBucket(workerId: string): number {
  return keyBucket(workerId, MEMBER_BUCKETS);
}

/**
 * The partition key of one bucket of a group's members, `<group>#members#<bucket>`: see `schema.ts` for
 * why it never collides with another group's.
 */
export function memberBucketKey(group: string, bucket: number): string {
  return `${group}${MEMBERS_PARTITION_SUFFIX}#${bucket}`;
}

/** The partition key every bucket of a group's members has, in bucket order: what a roster read queries. */
export function memberBucketKeys(group: string): string[] {
  return Array.from({ length: MEMBER_BUCKETS }, (_, bucket) => memberBucketKey(group, bucket));
}

export function memberItemKey(group: string, workerId: string): Item {
  return { [attr.pk]: { S: memberBucketKey(group, memberBucket(workerId)) }, [attr.sk]: { S: `${MEMBER_PREFIX}${workerId}` } };
}

/** The roster digest's item: a partition key of its own (see `schema.ts`). */
export function digestItemKey(group: string): Item {
  return { [attr.pk]: { S: `${group}${DIGEST_PARTITION_SUFFIX}` }, [attr.sk]: { S: DIGEST_SORT_KEY } };
}

export function digestOf(group: string, item: Item): number {
  const digest = numberOf(item[attr.digest]);
  if (typeof digest === 'number' && Number.isSafeInteger(digest) && digest >= 0) return digest;
  throw corruptDigest(group, item[attr.digest]);
}

export function corruptDigest(group: string, value: AttributeValue | undefined): CorruptRecordError {
  return new CorruptRecordError(`[${PKG}] stored roster digest of group ${describeValue(group)} is corrupt: digest is ${describeValue(value)}`, { group });
}

export function leaseAttributes(version: number, state: LeaseState, writeId: string): Item {
  return {
    [attr.version]: { N: String(version) },
    [attr.epoch]: { N: String(state.epoch) },
    [attr.state]: { S: encodeLeaseState(state) },
    [attr.writeId]: { S: writeId },
  };
}

export function leaderAttributes(version: number, state: LeaderState, writeId: string): Item {
  return {
    [attr.version]: { N: String(version) },
    [attr.term]: { N: String(state.term) },
    [attr.state]: { S: encodeLeaderState(state) },
    [attr.writeId]: { S: writeId },
  };
}

export function isTombstone(item: Item): boolean {
  return item[attr.deleted] !== undefined;
}

export function leaseKeyOf(group: string, item: Item): string {
  const sortKey = item[attr.sk]?.S;
  if (sortKey === undefined || !sortKey.startsWith(LEASE_PREFIX)) {
    throw new CorruptRecordError(`[${PKG}] an item of group ${describeValue(group)} has sort key ${describeValue(sortKey)}, not a lease's`, { group });
  }
  return sortKey.slice(LEASE_PREFIX.length);
}

export function numberOf(value: AttributeValue | undefined): unknown {
  return value?.N === undefined ? value : Number(value.N);
}

export function leaseOf(group: string, leaseKey: string, item: Item): LeaseRecord {
  return decodeLease(group, leaseKey, numberOf(item[attr.version]), item[attr.state]?.S, 'storage-dynamodb');
}

export function leaderOf(group: string, item: Item): LeaderRecord {
  return decodeLeader(group, numberOf(item[attr.version]), item[attr.state]?.S, 'storage-dynamodb');
}

export function isRemoved(item: Item): boolean {
  return item[attr.removed] !== undefined;
}

/** The worker id of a member item; its sort key starts with `member:`, as the roster's query asks. */
export function workerIdOf(item: Item): string {
  return (item[attr.sk]?.S ?? '').slice(MEMBER_PREFIX.length);
}

export function memberOf(group: string, workerId: string, item: Item): MemberRecord {
  return decodeMember(group, workerId, numberOf(item[attr.version]), item[attr.state]?.S, PKG);
}

/**
 * A conflict carrying the member as its item holds it: none for a missing item or a tombstone. A corrupt
 * member, or a tombstone whose version is not one, makes it `unknown`.
 */
export function memberConflict(group: string, workerId: string, item: Item | undefined): WriteResult<MemberRecord> {
  if (item === undefined) return result.conflict(null);
  if (isRemoved(item)) {
    const version = numberOf(item[attr.version]);
    if (isVersion(version)) return result.conflict(null);
    return result.unknown(
      new CorruptRecordError(
        `[${PKG}] stored tombstone of member ${describeValue(workerId)} of group ${describeValue(group)} is corrupt: version is ${describeValue(item[attr.version])}`,
        { group, workerId },
      ),
    );
  }
  try {
    return result.conflict(memberOf(group, workerId, item));
  } catch (error) {
    return corruptOutcome(error);
  }
}

export function isVersion(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 1;
}

export function counterOf(item: Item, name: string, group: string, leaseKey: string): number {
  const value = numberOf(item[name]);
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new CorruptRecordError(
      `[${PKG}] stored tombstone of lease ${describeValue(leaseKey)} of group ${describeValue(group)} is corrupt: ${name} is ${describeValue(item[name])}`,
      { group, leaseKey },
    );
  }
  return value;
}

/** `unknown` carrying the `CorruptRecordError` of a record a write met; any other error is thrown. */
export function corruptOutcome(error: unknown): Unknown {
  if (error instanceof CorruptRecordError) return result.unknown(error);
  throw error;
}

/** What one conditional write came back with, before its conflict is interpreted. */
export type Sent =
  | { readonly kind: 'applied'; readonly attributes?: Item | undefined }
  | { readonly kind: 'condition-failed'; readonly item: Item | undefined; readonly attempts: number | undefined }
  | { readonly kind: 'failed'; readonly error: unknown };

/** A write the SDK retried that met a record moved on since: its first attempt may have applied. */
export function ambiguous(what: string): StorageOutcomeUnknownError {
  return new StorageOutcomeUnknownError(
    `[${PKG}] ${what} was retried and the record has moved on since; its first attempt may have applied`,
  );
}

/** A write that failed its condition when the record it met could not be read. */
export function unreadConflict(what: string): StorageOutcomeUnknownError {
  return new StorageOutcomeUnknownError(`[${PKG}] ${what} failed its condition and the current record could not be read`);
}
