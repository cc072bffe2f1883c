/**
 * The table: one for many groups. Partition key `pk` holds the group; sort key `sk` holds
 * `lease:<leaseKey>` for a lease, `leader` for the group's leader record and `roster` for the group's
 * roster. Every lease sort key starts with `lease:` and the other two do not, so no lease key can ever
 * collide with the leader record or the roster, and a `begins_with` key condition lists a group's leases
 * without reading either.
 *
 * The roster is ONE item per group, so that a worker reads every member in one strongly consistent
 * `GetItem`. Besides its key it holds `hv`, the greatest version any member of the group ever had, and two
 * top-level attributes per member: `v:<workerId>` (its version) and `m:<workerId>` (a map of its state
 * JSON `s` and the id `w` of the write that stored it). Top-level attributes rather than one map of
 * members, so that a write never needs a map to exist first (the group's first join creates the item like
 * any other join), and so that one `UpdateItem` sets `hv` and the member's version from the same old `hv`
 * without overlapping document paths. No member attribute name can be `pk`, `sk` or `hv`: each starts with
 * `v:` or `m:`.
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
  /** Partition key: the group. */
  pk: 'pk',
  /** Sort key: `lease:<leaseKey>` or `leader`. */
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
  /** On the roster item: the greatest version any member of the group ever had (one counter per group). */
  highVersion: 'hv',
  /** Inside a member's `m:<workerId>` map: the member's state as one JSON document. */
  memberState: 's',
  /** Inside a member's `m:<workerId>` map: the id of the write that stored it. */
  memberWriteId: 'w',
} as const;

export const LEASE_PREFIX = 'lease:';
export const LEADER_SORT_KEY = 'leader';
export const ROSTER_SORT_KEY = 'roster';
/** Prefix of a member's version attribute on the roster item: `v:<workerId>`. */
export const MEMBER_VERSION_PREFIX = 'v:';
/** Prefix of a member's state attribute on the roster item: `m:<workerId>`. */
export const MEMBER_PREFIX = 'm:';

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
