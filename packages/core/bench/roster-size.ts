/**
 * The sizes DynamoDB bills for a group's members, computed from the layout of `@leasehold/storage-dynamodb`
 * (its `schema.ts` and `members.ts`): each member is an item of its own under one of four
 * partition keys, `<group>#members#<bucket>` (the bucket is core's `keyBucket` of the worker id), sort key
 * `member:<workerId>`, with `version` (a number), `state` (the member state
 * JSON of `encodeMemberState`) and `writeId` (16 random base64url characters per write attempt). A removed
 * member keeps its item as a tombstone: its last `version` and `removed` (a boolean), without `state` and
 * `writeId`, so that its worker id's next version continues above it. A worker reads the roster with one
 * strongly consistent Query of each bucket's partition key, which reads (and bills) the tombstones too:
 * the adapter drops them after the read.
 *
 * DynamoDB's item size rules: an attribute counts its name's UTF-8 bytes plus its value; a string its
 * UTF-8 bytes; a number one byte per two significant digits plus 1 (see `numberBytes`); a boolean 1 byte.
 * A write of an item costs ceil(size / 1 KB) write units (an UpdateItem is billed on the larger of the item
 * before and after); a strongly consistent GetItem ceil(size / 4 KB) read units; a Query the sum of the
 * sizes of the items it reads, rounded up to 4 KB per page of at most 1 MB.
 */
import { type MemberRecord } from '../src/index.js';
import { encodeMemberState, keyBucket } from '../src/adapter.js';

const bytes = (text: string): number => Buffer.byteLength(text, 'utf8');

/**
 * The suffix that makes a group's members' partition keys, `<group>#members#<bucket>`, and the one key of
 * the release before, `<group>#members`: the leases stay under the group's own.
 */
export const MEMBERS_KEY_SUFFIX = '#members';
/** How many partition keys the members are spread over, as `@leasehold/storage-dynamodb` spreads them. */
export const MEMBER_BUCKETS = 4;
/** Prefix of a member item's sort key, `member:<workerId>`. */
export const MEMBER_SORT_PREFIX = 'member:';
/** Length of a member item's `writeId`: 12 random bytes in base64url. */
export const MEMBER_WRITE_ID_LENGTH = 16;
/** The largest page a DynamoDB Query reads before it returns (and bills) what it read. */
export const QUERY_PAGE_BYTES = 1024 * 1024;

/** The partition key of a bucket of a group's member items. */
export const memberBucketKey = (group: string, bucket: number): string => `${group}${MEMBERS_KEY_SUFFIX}#${bucket}`;
/** The partition key a member's item is under. */
export const membersKey = (group: string, workerId: string): string => memberBucketKey(group, keyBucket(workerId, MEMBER_BUCKETS));
/** Every bucket's partition key, in bucket order. */
export const memberBucketKeys = (group: string): string[] => Array.from({ length: MEMBER_BUCKETS }, (_, bucket) => memberBucketKey(group, bucket));
/** The one members' key of the release before, `<group>#members`, which a join of this release reads. */
export const singleMembersKey = (group: string): string => `${group}${MEMBERS_KEY_SUFFIX}`;

/**
 * A DynamoDB number's billed bytes: one byte per two digits, the digits paired from the decimal point (a
 * base-100 digit each) with the pairs of zeros at either end trimmed, plus one byte. 12 and 100,000 are 2
 * bytes, 123 and 12,345 are 3 and 4.
 */
export function numberBytes(value: number): number {
  const [integer = '', fraction = ''] = String(Math.abs(value)).split('.');
  const pairs = `${integer.length % 2 === 1 ? '0' : ''}${integer}${fraction}${fraction.length % 2 === 1 ? '0' : ''}`.match(/../g) ?? [];
  while (pairs[0] === '00') pairs.shift();
  while (pairs[pairs.length - 1] === '00') pairs.pop();
  return Math.max(1, pairs.length) + 1 + (value < 0 ? 1 : 0);
}

/** The bytes every member item has, live or removed: its keys and `version`. */
function memberKeyBytes(group: string, workerId: string, version: number): number {
  return bytes('pk') + bytes(membersKey(group, workerId)) + bytes('sk') + bytes(`${MEMBER_SORT_PREFIX}${workerId}`) + bytes('version') + numberBytes(version);
}

/** A live member's item: keys, `version`, `state` and `writeId`; `id` models another worker id's length. */
export function memberItemBytes(member: MemberRecord, id: string = member.workerId): number {
  return memberKeyBytes(member.group, id, member.version) + bytes('state') + bytes(encodeMemberState(member)) + bytes('writeId') + MEMBER_WRITE_ID_LENGTH;
}

/** A removed member's tombstone: keys, its last `version` and `removed` (a boolean, 1 byte); no `state`, no `writeId`. */
export function memberTombstoneBytes(group: string, workerId: string, version: number): number {
  return memberKeyBytes(group, workerId, version) + bytes('removed') + 1;
}

/** Write units of one write of an item of `size` bytes. */
export const writeUnits = (size: number): number => Math.ceil(size / 1024);
/** Read units of one strongly consistent read of an item of `size` bytes. */
export const readUnits = (size: number): number => Math.ceil(size / 4096);

/** Read request units of one strongly consistent Query or Scan that reads items of these sizes, in key order. */
export function pagedReadUnits(itemSizes: Iterable<number>): number {
  let units = 0;
  let page = 0;
  for (const size of itemSizes) {
    // An item that would take the page past 1 MB starts the next page, as DynamoDB stops a page there.
    if (page > 0 && page + size > QUERY_PAGE_BYTES) {
      units += readUnits(page);
      page = 0;
    }
    page += size;
  }
  return units + (page > 0 ? readUnits(page) : 0);
}

/** Strings in the order DynamoDB keeps string sort keys: by their UTF-8 bytes. */
export function byUtf8<T>(items: Iterable<T>, keyOf: (item: T) => string): T[] {
  return [...items]
    .map((item) => ({ item, key: Buffer.from(keyOf(item), 'utf8') }))
    .sort((a, b) => Buffer.compare(a.key, b.key))
    .map(({ item }) => item);
}

/** What a roster read bills: its bytes, its read units, and the units of each bucket's Query by partition key. */
export interface RosterQuery {
  bytes: number;
  units: number;
  byKey: Map<string, number>;
}

/**
 * What one roster read bills: one Query per bucket, each of the bucket's items (tombstones included) in
 * sort key order, paged. `items` are each item's worker id and size (`sorted`: already in the worker ids'
 * UTF-8 order); a Query that finds nothing still costs one read unit.
 */
export function rosterQuery(group: string, items: Iterable<{ workerId: string; bytes: number }>, sorted = false): RosterQuery {
  const buckets = new Map(memberBucketKeys(group).map((key) => [key, [] as number[]]));
  let bytes = 0;
  // The sort keys share the `member:` prefix, so the worker ids' order is theirs.
  for (const item of sorted ? items : byUtf8(items, (entry) => entry.workerId)) {
    buckets.get(membersKey(group, item.workerId))!.push(item.bytes);
    bytes += item.bytes;
  }
  const byKey = new Map([...buckets].map(([key, sizes]) => [key, Math.max(1, pagedReadUnits(sizes))]));
  return { bytes, units: [...byKey.values()].reduce((sum, units) => sum + units, 0), byKey };
}
