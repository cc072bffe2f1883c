/**
 * The table: one for many groups. A group's leases, leader record and (in the earlier release) roster
 * live under partition key `pk` = the group, with sort key `sk` = `lease:<leaseKey>` for a lease,
 * `leader` for the leader record and `roster` for the earlier release's roster item (see
 * `earlier-roster.ts`). Every lease sort key starts with `lease:` and the other two do not, so no lease key
 * can collide with them, and a `begins_with` key condition lists a group's leases without reading either.
 *
 * Each member is an item of its own: `pk` = `<group>#members#<bucket>`, `sk` = `member:<workerId>`, holding
 * its `version`, its state JSON `state`, the `writeId` of the write that stored it, and `removed` once it
 * is a tombstone. The bucket, 0 to 3, is a hash of the worker id (`memberBucket` in `items.ts`). A
 * heartbeat writes that one item (a few hundred bytes: one write unit at any group size), a watcher's read
 * of a few members is one `BatchGetItem` of their keys, and `getRoster` is one strongly consistent `Query`
 * per bucket, the four sent together. The members have partition keys of their own so that heartbeats
 * and roster reads never land on the key every lease renewal and listing uses.
 *
 * Why four keys and not one (the layout of the release before, `<group>#members`, which
 * `single-members-key.ts` keeps apart): DynamoDB serves at most 1,000 write units and 3,000 read units a
 * second from one partition, and one partition key's traffic starts on one partition. At 1,000 workers
 * with the default timing every worker reads its 3 watched members and itself every 2 s take tick (about
 * 2,000 item reads a second, 1 read unit each), the whole roster reads (one every 100 s per worker, about
 * 60 read units each) add about 600, and heartbeats write about 154 units a second: about 2,600 read units
 * a second, 86% of a partition on one key, against about 650 (22%) on each of four. A hash of the worker
 * id spreads the members evenly whatever their names. The cost: a roster read is four Queries, each billed
 * at least 1 read unit, where one Query of a group under 4 KB (about 16 members) billed 1. A group of up
 * to 16 members reads its whole roster every take tick (core's `wholeRosterUpTo`), so at 10 workers the
 * group reads 20 units a second instead of 5 (about $6 a month on demand instead of $1.60); larger groups
 * read it whole only when the roster digest moved or every refresh interval. Eight keys would hold a
 * third of a partition up to about 3,000 workers instead of 1,500, at twice that cost for every small
 * group. Four is part of the layout: changing it moves every member, a change of format.
 *
 * Why no item of one group is ever read as another group's, although `x#members#3` is a valid group name
 * whose leases share a partition key with the members of group `x` in bucket 3:
 * - members of two groups never share a partition key: `<group>#members#<bucket>` is the group followed
 *   by a suffix of fixed length (`#members#` and one digit), so two different groups, or two buckets of
 *   one group, give two different keys;
 * - every read names a sort key or a sort-key prefix of one kind: a member is `member:<workerId>` and is
 *   only ever read by that key or by `begins_with(sk, "member:")`; a lease, the leader record and the
 *   earlier roster item are `lease:...`, `leader` and `roster`, none of which starts with `member:`, and
 *   `member:...` neither starts with `lease:` nor equals `leader` or `roster`. So on the one partition key
 *   `x#members#3`, group `x#members#3`'s leases and leader and group `x`'s members of bucket 3 sit side by
 *   side and no read of one finds the other. (They do share that key's throughput: a group named
 *   `<other>#members#<digit>` is the one case where heartbeats land beside leases.)
 * - a bucket's key never equals the members' key of the release before (`<group>#members`, which ends in
 *   `#members`, not in a digit) nor a digest's key (which ends in `#digest`).
 *
 * A removed member is a tombstone (`removed`, its last `version`, no state) rather than nothing, so that
 * the worker id's next join continues above every version it had: versions grow per worker id, and no
 * record is shared by the members of a group.
 *
 * The roster digest is one item under a partition key of its own: `pk` = `<group>#digest`, `sk` =
 * `digest`, holding the counter `digest` (N), moved by `ADD` alone. Why a key of its own: every worker
 * reads it every take tick, strongly consistently, so at 1,000 workers and a 2 s tick it takes 500 reads
 * a second of 1 read unit each (the item is its keys and a number: 40 bytes for a 17-byte group name). On
 * the members' keys it would add those 500 to one bucket's watchers' reads and heartbeats; on the group's
 * key, to every listing and leader read. Alone it is a sixth of a partition's 3,000 read units a second, and
 * nothing else waits behind it. An advance writes 1 unit, once per membership change, not per heartbeat.
 *
 * Why the digest never meets another group's item: its partition key is the group followed by `#digest`,
 * so two groups' digests never share a key, and it never equals a members' key, which ends in a digit (or,
 * in the release before, in `#members`).
 * It may equal the partition key of a group named `<g>#digest` (whose leases, leader and earlier roster
 * item live there), and its sort key `digest` is none of theirs (`lease:...`, `leader`, `roster`) and is
 * not `member:...`: it is only ever read by its exact key, and the listings' `begins_with("lease:")` and
 * `begins_with("member:")` never match it.
 */
import {
  CreateTableCommand,
  DescribeTableCommand,
  waitUntilTableExists,
  type AttributeValue,
  type DescribeTableCommandOutput,
  type DynamoDBClient,
} from '@aws-sdk/client-dynamodb';
import {
  InvalidConfigError,
  InvalidInputError,
  StorageSchemaError,
  StorageUnavailableError,
} from '@leasehold/core';
import { describeValue } from '@leasehold/core/adapter';

export const PKG = 'storage-dynamodb';

/** Attribute names of every item. */
export const attr = {
  /** Partition key: the group, `<group>#members#<bucket>` for its members, `<group>#digest` for its roster digest. */
  pk: 'pk',
  /** Sort key: `lease:<leaseKey>`, `leader`, `member:<workerId>`, or `digest`. */
  sk: 'sk',
  /** The record's version, incremented on every write, tombstones included. */
  version: 'version',
  /** A lease's epoch, kept outside the state document so that a tombstone keeps it. */
  epoch: 'epoch',
  /** A leader record's term, beside the state document for people reading the table. */
  term: 'term',
  /** The record's state as one JSON document (core's codec), so fields core adds later round-trip. */
  state: 'state',
  /** A random id per write attempt: how a write retried by the SDK recognises its own first attempt. */
  writeId: 'writeId',
  /** Present (true) on a deleted lease: the tombstone that keeps version and epoch from going back. */
  deleted: 'deleted',
  /** Present (true) on a removed member: the tombstone that keeps the worker id's version from going back. */
  removed: 'removed',
  /** The group's roster digest: a counter, only ever moved by `ADD`. */
  digest: 'digest',
  /**
   * On the digest item: the group's joins over no member item, a counter only ever moved by `ADD`. Such a
   * join's first version is its value times {@link MEMBER_VERSION_SPAN}.
   */
  joins: 'joins',
  /**
   * Present (true) on a member that joined over no item and whose versions are all within its join's
   * span: its removal deletes the item, as every version its worker id ever had is below the next such
   * join's first.
   */
  fresh: 'fresh',
} as const;

/**
 * How many versions a member that joined over no item may take before its versions run into the next such
 * join's: 2^26, seven years of heartbeats every 3.3 s. A write past them leaves the member `fresh` no more.
 */
export const MEMBER_VERSION_SPAN = 2 ** 26;

/** The most joins over no item a group may count: their first versions stay JavaScript safe integers. */
export const MAX_FRESH_JOINS = 2 ** 27 - 1;

export const LEASE_PREFIX = 'lease:';
export const LEADER_SORT_KEY = 'leader';
/**
 * Suffix of the group that makes the members' partition keys: `<group>#members#<bucket>` (and the one
 * key of the release before, `<group>#members`).
 */
export const MEMBERS_PARTITION_SUFFIX = '#members';
/** How many partition keys a group's members are spread over (see above): part of the layout. */
export const MEMBER_BUCKETS = 4;
/** Prefix of a member's sort key: `member:<workerId>`. */
export const MEMBER_PREFIX = 'member:';
/** Suffix of the group that makes the roster digest's partition key: `<group>#digest`. */
export const DIGEST_PARTITION_SUFFIX = '#digest';
/** The roster digest's sort key. */
export const DIGEST_SORT_KEY = 'digest';

/** DynamoDB's item size limit, 400 KB. */
export const MAX_ITEM_BYTES = 400 * 1024;

const TABLE_NAME = /^[a-zA-Z0-9_.-]{3,255}$/;

/** Throws an `InvalidConfigError` unless `tableName` is a valid DynamoDB table name. */
export function validateTableName(tableName: unknown): asserts tableName is string {
  if (typeof tableName !== 'string' || !TABLE_NAME.test(tableName)) {
    throw new InvalidConfigError(
      `[${PKG}] table name ${describeValue(tableName)} is not valid: use 3 to 255 of the characters a-z, A-Z, 0-9, '_', '-' and '.'`,
    );
  }
}

/** Options of {@link createTable}. */
export interface CreateTableOptions {
  /** How long to wait for the table to become active, in milliseconds. Default 300,000. */
  maxWaitMs?: number;
}

/**
 * Creates the table (on-demand billing) and waits until it is active. Harmless when the table exists
 * with the right key schema; a table of the same name with another key schema is a `StorageSchemaError`.
 */
export async function createTable(client: DynamoDBClient, tableName: string, options: CreateTableOptions = {}): Promise<void> {
  validateTableName(tableName);
  const maxWaitMs = options.maxWaitMs ?? 300_000;
  if (!Number.isFinite(maxWaitMs) || maxWaitMs < 1000) {
    throw new InvalidConfigError(`[${PKG}] maxWaitMs must be a number of at least 1000, got ${describeValue(maxWaitMs)}`);
  }
  try {
    await client.send(
      new CreateTableCommand({
        TableName: tableName,
        BillingMode: 'PAY_PER_REQUEST',
        AttributeDefinitions: [
          { AttributeName: attr.pk, AttributeType: 'S' },
          { AttributeName: attr.sk, AttributeType: 'S' },
        ],
        KeySchema: [
          { AttributeName: attr.pk, KeyType: 'HASH' },
          { AttributeName: attr.sk, KeyType: 'RANGE' },
        ],
      }),
    );
  } catch (error) {
    if (errorName(error) !== 'ResourceInUseException') {
      throw new StorageUnavailableError(`[${PKG}] could not create table ${describeValue(tableName)}: ${errorText(error)}`, { cause: error });
    }
  }
  try {
    await waitUntilTableExists({ client, maxWaitTime: Math.ceil(maxWaitMs / 1000), minDelay: 1, maxDelay: 5 }, { TableName: tableName });
  } catch (error) {
    throw new StorageUnavailableError(`[${PKG}] table ${describeValue(tableName)} did not become active: ${errorText(error)}`, { cause: error });
  }
  await checkTable(client, tableName);
}

/**
 * Reads the table's description and throws a `StorageSchemaError` when the table is missing or its key
 * schema is not `pk` (HASH, string) and `sk` (RANGE, string).
 */
export async function checkTable(client: DynamoDBClient, tableName: string): Promise<void> {
  validateTableName(tableName);
  let description: DescribeTableCommandOutput;
  try {
    description = await client.send(new DescribeTableCommand({ TableName: tableName }));
  } catch (error) {
    if (errorName(error) === 'ResourceNotFoundException') throw missingTable(tableName, error);
    throw new StorageUnavailableError(`[${PKG}] could not describe table ${describeValue(tableName)}: ${errorText(error)}`, { cause: error });
  }
  const table = description.Table;
  const types = new Map((table?.AttributeDefinitions ?? []).map((definition) => [definition.AttributeName, definition.AttributeType]));
  const found = (table?.KeySchema ?? []).map((key) => `${key.AttributeName ?? '?'} (${key.KeyType ?? '?'}, ${types.get(key.AttributeName) ?? '?'})`);
  const expected = [`${attr.pk} (HASH, S)`, `${attr.sk} (RANGE, S)`];
  if (found.join(', ') !== expected.join(', ')) {
    throw new StorageSchemaError(
      `[${PKG}] table ${describeValue(tableName)} has key schema ${found.join(', ') || '(none)'}; expected ${expected.join(', ')}: use another table or create this one with createTable()`,
    );
  }
}

/** The error for a table that does not exist. */
export function missingTable(tableName: string, cause: unknown): StorageSchemaError {
  return new StorageSchemaError(`[${PKG}] table ${describeValue(tableName)} does not exist: create it with createTable()`, { cause });
}

/**
 * The size DynamoDB counts for an item: attribute names plus values (strings in UTF-8 bytes, numbers at
 * most one byte per digit plus one, which over-counts a little and so errs on the safe side).
 */
export function itemBytes(item: Record<string, AttributeValue>): number {
  let bytes = 0;
  for (const [name, value] of Object.entries(item)) bytes += Buffer.byteLength(name) + valueBytes(value);
  return bytes;
}

function valueBytes(value: AttributeValue): number {
  if (value.S !== undefined) return Buffer.byteLength(value.S);
  if (value.N !== undefined) return value.N.length + 1;
  if (value.BOOL !== undefined || value.NULL !== undefined) return 1;
  if (value.B !== undefined) return value.B.byteLength;
  if (value.M !== undefined) return 3 + itemBytes(value.M);
  if (value.L !== undefined) return 3 + value.L.reduce((sum, entry) => sum + 1 + valueBytes(entry), 0);
  if (value.SS !== undefined) return value.SS.reduce((sum, entry) => sum + Buffer.byteLength(entry), 0);
  if (value.NS !== undefined) return value.NS.reduce((sum, entry) => sum + entry.length + 1, 0);
  if (value.BS !== undefined) return value.BS.reduce((sum, entry) => sum + entry.byteLength, 0);
  return 0;
}

/** Throws an `InvalidInputError` naming the record when the item would exceed DynamoDB's 400 KB limit. */
export function checkItemSize(item: Record<string, AttributeValue>, what: string): void {
  const bytes = itemBytes(item);
  if (bytes > MAX_ITEM_BYTES) {
    throw new InvalidInputError(`[${PKG}] ${what} would be an item of ${bytes} bytes; DynamoDB's limit is ${MAX_ITEM_BYTES}`);
  }
}

/** The error's name (the DynamoDB error code for service errors). */
export function errorName(error: unknown): string {
  return error instanceof Error ? error.name : typeof error;
}

/** The error's name and message, for messages of the errors this package throws. */
export function errorText(error: unknown): string {
  if (error instanceof Error) return error.message ? `${error.name}: ${error.message}` : error.name;
  return String(error);
}
