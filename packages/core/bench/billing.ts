/**
 * What each backend counts for the records of a group: the size models the bench bills its storage calls
 * with, and the on-demand prices it turns them into.
 *
 * DynamoDB, from the layout of `@leasehold/storage-dynamodb`:
 * - a lease is one item under the group's partition key: `pk` (the group), `sk` (`lease:<leaseKey>`),
 *   `version`, `epoch`, `state` (core's JSON document) and `writeId` (a random UUID, 36 characters); a
 *   deleted lease keeps `version`, `epoch`, `writeId` and `deleted` (a boolean) but loses `state`;
 * - a member is one item under the members' partition key `<group>#members` (see `roster-size.ts`), and a
 *   roster read is one Query of that key; a watcher's read of a few members by id (`getMembers`) is one
 *   BatchGetItem of strongly consistent reads, each item billed as a GetItem of its own;
 * - the group's roster digest is one small item under a partition key of its own, `<group>#digest`: one
 *   strongly consistent GetItem a read, one UpdateItem (an atomic ADD) an advance.
 * A write costs ceil(size / 1 KB) write request units (an UpdateItem is billed on the larger of the item
 * before and after, and a write whose condition fails still costs the units of the item it found); a
 * strongly consistent GetItem ceil(size / 4 KB) read request units, at least 1 even for no item; a Query
 * the sum of the sizes of the items it reads, rounded up to 4 KB per page of at most 1 MB.
 *
 * Redis and Postgres bill nothing per request: for them the bench counts the bytes of the stored JSON
 * documents and of the keys (lease key, worker id) beside them, read and written. Redis keeps a member as
 * one field of the roster hash and a lease as one field of the leases hash; Postgres keeps a member as one
 * row of the members table and a lease as one row of the leases table. On both a heartbeat writes one
 * member (its worker id and state JSON), a roster read reads every live member's and `getMembers` the
 * named ones'. The digest is a counter key of its own on Redis (`GET`, `INCR`) and a reserved row of the
 * members table on Postgres (its `version`, a bigint).
 */
import { type LeaseRecord, type MemberRecord } from '../src/index.js';
import { encodeLeaseState, encodeMemberState } from '../src/adapter.js';
import { memberItemBytes, memberTombstoneBytes, numberBytes, pagedReadUnits, QUERY_PAGE_BYTES, readUnits, rosterQuery, writeUnits } from './roster-size.js';

export { memberItemBytes, memberTombstoneBytes, pagedReadUnits, QUERY_PAGE_BYTES, readUnits, rosterQuery, writeUnits };

export const utf8Bytes = (text: string): number => Buffer.byteLength(text, 'utf8');

/** Length of a DynamoDB lease item's `writeId`: `randomUUID()`. */
const LEASE_WRITE_ID_LENGTH = 36;

/** A DynamoDB lease item's billed size, as `storage-dynamodb` stores it. */
export function leaseItemBytes(lease: LeaseRecord): number {
  return (
    utf8Bytes('pk') + utf8Bytes(lease.group) +
    utf8Bytes('sk') + utf8Bytes(`lease:${lease.leaseKey}`) +
    utf8Bytes('version') + numberBytes(lease.version) +
    utf8Bytes('epoch') + numberBytes(lease.epoch) +
    utf8Bytes('state') + utf8Bytes(encodeLeaseState(lease)) +
    utf8Bytes('writeId') + LEASE_WRITE_ID_LENGTH
  );
}

/** Bytes of a lease as the Redis adapter and the Postgres adapter store it: its key and its state JSON. */
export function leaseJsonBytes(lease: LeaseRecord): number {
  return utf8Bytes(lease.leaseKey) + utf8Bytes(encodeLeaseState(lease));
}

/**
 * Bytes of a member as the Redis adapter (a field of the roster hash) and the Postgres adapter (a row of the
 * members table) store it: its worker id and its state JSON.
 */
export function memberJsonBytes(member: MemberRecord): number {
  return utf8Bytes(member.workerId) + utf8Bytes(encodeMemberState(member));
}

// ------------------------------------------------------------------------------------------ the roster digest

/** The suffix of the digest's partition key, `<group>#digest`: its reads land on no key the members or leases use. */
export const DIGEST_KEY_SUFFIX = '#digest';
/** The digest item's sort key: the item is alone under its partition key. */
export const DIGEST_SORT_KEY = 'digest';
export const digestKey = (group: string): string => `${group}${DIGEST_KEY_SUFFIX}`;

/** The digest item DynamoDB bills: its keys and the counter (a number attribute `digest`). */
export function digestItemBytes(group: string, digest: number): number {
  return utf8Bytes('pk') + utf8Bytes(digestKey(group)) + utf8Bytes('sk') + utf8Bytes(DIGEST_SORT_KEY) + utf8Bytes('digest') + numberBytes(digest);
}

/**
 * The partition key of the digest's moves on DynamoDB, kept as a ring of 256 slot items: the design of commit
 * 928873b, measured and not kept (README, "Moves read by name on DynamoDB").
 */
export const movesKey = (group: string): string => `${group}#moves`;
/** How many slots that ring has: the advances a store keeps (`limits.rosterMovesKept`). */
export const MOVE_SLOTS = 256;

/** A slot of the digest's moves DynamoDB bills: its keys (`move:<three digits>`), the advance's digest, and the names (a list of strings). */
export function moveSlotBytes(group: string, digest: number, workerIds: readonly string[]): number {
  const names = workerIds.reduce((sum, workerId) => sum + 1 + utf8Bytes(workerId), 3);
  return utf8Bytes('pk') + utf8Bytes(movesKey(group)) + utf8Bytes('sk') + utf8Bytes('move:000') + utf8Bytes('digest') + numberBytes(digest) + utf8Bytes('named') + names;
}

/**
 * The digest as Redis moves it: its key (`leasehold:{<group in base64url>}:roster-digest`, the adapter's
 * default prefix) and the counter's decimal digits, which `GET` reads and `INCR` writes.
 */
export function digestRedisBytes(group: string, digest: number): number {
  return utf8Bytes(`leasehold:{${Buffer.from(group, 'utf8').toString('base64url')}}:roster-digest`) + String(digest).length;
}

/** The digest as Postgres keeps it: the `version` (a bigint) of the group's reserved member row, whose worker id is empty. */
export const DIGEST_POSTGRES_BYTES = 8;

// ------------------------------------------------------------------------------------------ KCL 2.x

/**
 * A KCL 2.x lease item as its `DynamoDBLeaseSerializer` writes it for a Kinesis shard before the first
 * checkpoint: lease key, owner (a worker id as long as the bench's real ones), counter, owner switches,
 * checkpoint (the `TRIM_HORIZON` sentinel) and sub-sequence number, the parent shard and the shard's hash
 * key range. Checkpoints are left out on both sides, so the lease carries none on either.
 */
export function kclLeaseItemBytes(shardIndex: number, owner: string): number {
  const shardId = `shardId-${String(shardIndex).padStart(12, '0')}`;
  const parent = `shardId-${String(Math.max(0, shardIndex - 1)).padStart(12, '0')}`;
  // A hash key range bound of the 128-bit space: up to 39 decimal digits.
  const hashKey = '170141183460469231731687303715884105728';
  return (
    utf8Bytes('leaseKey') + utf8Bytes(shardId) +
    utf8Bytes('leaseOwner') + utf8Bytes(owner) +
    utf8Bytes('leaseCounter') + numberBytes(123_456) +
    utf8Bytes('ownerSwitchesSinceCheckpoint') + numberBytes(1) +
    utf8Bytes('checkpoint') + utf8Bytes('TRIM_HORIZON') +
    utf8Bytes('checkpointSubSequenceNumber') + numberBytes(0) +
    utf8Bytes('parentShardId') + utf8Bytes(parent) +
    utf8Bytes('startingHashKey') + utf8Bytes(hashKey) +
    utf8Bytes('endingHashKey') + utf8Bytes(hashKey)
  );
}

/** KCL 2.x renews each lease every failoverTimeMillis / 3: 18 writes per lease per minute at 10 s. */
export const KCL_RENEWALS_PER_LEASE_MINUTE = 18;
/** KCL 2.x's taker scans the whole lease table every 2 x failoverTimeMillis: 3 scans per worker per minute at 10 s. */
export const KCL_SCANS_PER_WORKER_MINUTE = 3;

// ------------------------------------------------------------------------------------------ prices

/**
 * DynamoDB on-demand prices, us-east-1, Standard table class, from the AWS price list page "Amazon
 * DynamoDB pricing for on-demand capacity" (aws.amazon.com/dynamodb/pricing/on-demand/) as of the
 * November 2024 price cut: $0.625 per million write request units, $0.125 per million read request units.
 */
export const USD_PER_MILLION_WRU = 0.625;
export const USD_PER_MILLION_RRU = 0.125;
/** A 30-day month. */
export const MINUTES_PER_MONTH = 43_200;

/** Monthly on-demand dollars of a steady rate of request units per minute. */
export function monthlyUsd(wruPerMinute: number, rruPerMinute: number): number {
  return ((wruPerMinute * USD_PER_MILLION_WRU + rruPerMinute * USD_PER_MILLION_RRU) * MINUTES_PER_MONTH) / 1e6;
}

/** KCL 2.x's monthly coordination cost, checkpoints left out: renewals and every worker's scans. */
export function kclMonthly(workers: number, leases: number, ownerId: (index: number) => string): { writesUsd: number; scansUsd: number; wruPerMinute: number; rruPerMinute: number; tableBytes: number } {
  let tableBytes = 0;
  const sizes: number[] = [];
  for (let i = 0; i < leases; i++) {
    const size = kclLeaseItemBytes(i, ownerId(i % workers));
    sizes.push(size);
    tableBytes += size;
  }
  const wruPerMinute = sizes.reduce((sum, size) => sum + KCL_RENEWALS_PER_LEASE_MINUTE * writeUnits(size), 0);
  const rruPerMinute = workers * KCL_SCANS_PER_WORKER_MINUTE * pagedReadUnits(sizes);
  return { writesUsd: monthlyUsd(wruPerMinute, 0), scansUsd: monthlyUsd(0, rruPerMinute), wruPerMinute, rruPerMinute, tableBytes };
}
