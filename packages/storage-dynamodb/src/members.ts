/**
 * A group's members and its roster digest: the roster read (one `Query` per member bucket, sent together,
 * each paged to its end), the reads of named members and of the digest, the digest's advance, and the
 * member writes, each a conditional write of the member's own item. A join checks the layouts before first
 * (`join-check.ts`); a join over no item and the removal of a fresh member are `fresh-members.ts`'s. The
 * storage's methods of the same names call these with what they need of it, and document them.
 */
import { randomBytes } from 'node:crypto';
import { QueryCommand, UpdateItemCommand, type DynamoDBClient, type QueryCommandInput } from '@aws-sdk/client-dynamodb';
import {
  StorageOutcomeUnknownError,
  StorageUnavailableError,
  type DeleteResult,
  type MemberRecord,
  type MemberState,
  type Roster,
  type Unknown,
  type WriteResult,
} from '@leasehold/core';
import {
  describeValue,
  encodeMemberState,
  memberStateOf,
  result,
  rosterOf,
  validateGroup,
  validateMemberWrite,
  validateVersion,
  validateWorkerId,
  validateWorkerIds,
} from '@leasehold/core/adapter';
import { batchGetItems } from './batch-get.js';
import { deleteFresh, freshJoin, type FreshMembersIo } from './fresh-members.js';
import { refuseBesideEarlierLayouts, type JoinCheckIo } from './join-check.js';
import {
  ambiguous,
  corruptDigest,
  digestItemKey,
  digestOf,
  isRemoved,
  isVersion,
  memberConflict,
  memberItemKey,
  memberOf,
  memberBucketKeys,
  numberOf,
  TRUE,
  unreadConflict,
  workerIdOf,
  type Item,
  type Sent,
} from './items.js';
import { MEMBER_PREFIX, MEMBER_VERSION_SPAN, PKG, attr } from './schema.js';

/** What the members' reads and writes need of the storage: its client and table, its requests and their errors. */
export interface MembersIo {
  readonly client: DynamoDBClient;
  readonly tableName: string;
  /** Sends one conditional write and sorts its outcome; it never throws. */
  send(request: () => Promise<unknown>): Promise<Sent>;
  /** Sends a read; a failure is a `StorageUnavailableError` naming `what` (or the table's own error). */
  read<T>(what: string, request: () => Promise<T>): Promise<T>;
  /** The result of a write that failed with something other than its condition. */
  failed(error: unknown, what: string): Promise<Unknown>;
  /** A strongly consistent GetItem. */
  getItem(key: Item): Promise<Item | undefined>;
}

export async function getRoster(io: MembersIo, group: string): Promise<Roster> {
  validateGroup(group, PKG);
  // One Query per bucket, sent together; the members come back in sort key order, as one Query of one
  // key returned them.
  const buckets = await Promise.all(memberBucketKeys(group).map((key) => membersUnder(io, group, key)));
  const items = buckets
    .flat()
    .map((item) => ({ item, order: Buffer.from(item[attr.sk]?.S ?? '', 'utf8') }))
    .sort((a, b) => Buffer.compare(a.order, b.order))
    .map(({ item }) => item);
  // A member that cannot be read back is reported by its worker id and never hides the others.
  return rosterOf(group, items, (item) => memberOf(group, workerIdOf(item), item));
}

/** Every member item under one bucket's partition key, tombstones left out. */
async function membersUnder(io: MembersIo, group: string, partitionKey: string): Promise<Item[]> {
  // Pages follow the sort key (`member:<workerId>`), which no write moves: a member present throughout
  // the read is on exactly one page, however the others heartbeat, join and leave.
  const items = await queryAll(io, `read the roster of group ${describeValue(group)}`, (startKey) => ({
    TableName: io.tableName,
    KeyConditionExpression: '#pk = :pk AND begins_with(#sk, :member)',
    ExpressionAttributeNames: { '#pk': attr.pk, '#sk': attr.sk },
    ExpressionAttributeValues: { ':pk': { S: partitionKey }, ':member': { S: MEMBER_PREFIX } },
    ConsistentRead: true,
    ExclusiveStartKey: startKey,
  }));
  return items.filter((item) => !isRemoved(item));
}

/** Every item of a Query, page after page until `LastEvaluatedKey` is empty. */
async function queryAll(io: MembersIo, what: string, input: (startKey: Item | undefined) => QueryCommandInput): Promise<Item[]> {
  const items: Item[] = [];
  let startKey: Item | undefined;
  do {
    const page = await io.read(what, () => io.client.send(new QueryCommand(input(startKey))));
    items.push(...(page.Items ?? []));
    startKey = page.LastEvaluatedKey;
  } while (startKey !== undefined && Object.keys(startKey).length > 0);
  return items;
}

/** What a join or a removal over a member's tombstone needs (`fresh-members.ts`). */
function freshIo(io: MembersIo): FreshMembersIo {
  return {
    tableName: io.tableName,
    send: (request) => io.send(() => request(io.client)),
    met: (sent, key) => memberMet(io, sent, key),
    failed: (error, what) => io.failed(error, what),
    getItem: (key) => io.getItem(key),
  };
}

/** What the join's checks of the layouts before use need (`join-check.ts`). */
function joinCheckIo(io: MembersIo): JoinCheckIo {
  return {
    tableName: io.tableName,
    getItem: (what, key) => io.read(what, () => io.getItem(key)),
    queryAll: (what, input) => queryAll(io, what, input),
    mark: async (what, request) => {
      const sent = await io.send(() => request(io.client));
      if (sent.kind === 'failed') {
        const outcome = await io.failed(sent.error, what);
        // Nothing of the join was sent: no record of it can have changed.
        throw new StorageUnavailableError(`${outcome.error.message}; the join was not sent`, { cause: outcome.error });
      }
      return sent.kind === 'applied' ? sent.attributes : sent.item;
    },
  };
}

export async function getMembers(io: MembersIo, group: string, workerIds: readonly string[]): Promise<Roster> {
  validateGroup(group, PKG);
  validateWorkerIds(workerIds, PKG);
  // DynamoDB refuses a batch that names a key twice, and one that names none.
  const ids = [...new Set(workerIds)];
  if (ids.length === 0) return { group, members: [], corrupt: [] };
  const what = `read ${ids.length} member(s) of group ${describeValue(group)}`;
  const items = await io.read(what, () => batchGetItems(io.client, io.tableName, ids.map((workerId) => memberItemKey(group, workerId))));
  const byWorkerId = new Map(items.map((item) => [workerIdOf(item), item]));
  const found = ids.flatMap((workerId) => {
    const item = byWorkerId.get(workerId);
    return item === undefined || isRemoved(item) ? [] : [item];
  });
  return rosterOf(group, found, (item) => memberOf(group, workerIdOf(item), item));
}

export async function getRosterDigest(io: MembersIo, group: string): Promise<number> {
  validateGroup(group, PKG);
  const item = await io.read(`read the roster digest of group ${describeValue(group)}`, () => io.getItem(digestItemKey(group)));
  return item === undefined ? 0 : digestOf(group, item);
}

export async function advanceRosterDigest(io: MembersIo, group: string): Promise<number> {
  validateGroup(group, PKG);
  const what = `advance of the roster digest of group ${describeValue(group)}`;
  const key = digestItemKey(group);
  const sent = await io.send(() =>
    io.client.send(
      new UpdateItemCommand({
        TableName: io.tableName,
        Key: key,
        UpdateExpression: 'ADD #digest :one',
        ConditionExpression: 'attribute_not_exists(#digest) OR attribute_type(#digest, :number)',
        ExpressionAttributeNames: { '#digest': attr.digest },
        ExpressionAttributeValues: { ':one': { N: '1' }, ':number': { S: 'N' } },
        ReturnValues: 'UPDATED_NEW',
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
    ),
  );
  if (sent.kind === 'failed') throw (await io.failed(sent.error, what)).error;
  if (sent.kind === 'condition-failed') {
    // DynamoDB returns the item with ALL_OLD; backends that ignore it (dynalite) need a read.
    const item = sent.item ?? (await io.read(`read the roster digest of group ${describeValue(group)}`, () => io.getItem(key)));
    throw corruptDigest(group, item?.[attr.digest]);
  }
  const written = numberOf(sent.attributes?.[attr.digest]);
  if (!isVersion(written)) {
    throw new StorageOutcomeUnknownError(`[${PKG}] ${what} applied, but DynamoDB gave back the digest ${describeValue(written)}`);
  }
  return written;
}

export async function putMember(io: MembersIo, group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
  validateMemberWrite(group, workerId, expectedVersion, next, PKG);
  const what =
    expectedVersion === null
      ? `join of member ${describeValue(workerId)} in group ${describeValue(group)}`
      : `write of member ${describeValue(workerId)} at version ${expectedVersion} in group ${describeValue(group)}`;
  if (expectedVersion === null) await refuseBesideEarlierLayouts(group, joinCheckIo(io));
  const state = memberStateOf(next);
  const key = memberItemKey(group, workerId);
  const writeId = randomBytes(12).toString('base64url');
  const values: Item = { ':state': { S: encodeMemberState(state) }, ':writeId': { S: writeId } };
  if (expectedVersion === null) {
    const fresh = await freshJoin(freshIo(io), group, workerId, key, values, state, writeId, what);
    if (fresh !== undefined) return fresh;
  }
  // One UpdateItem of the member's own item. A join here applies over the worker id's tombstone (the
  // version after the tombstone's, which every operand reads as it was before the update), so the worker
  // id's versions only grow; one over no item is `freshJoin`'s (fresh-members.ts). A put applies at the stored version of a
  // member that is not removed; the put that would take a fresh member's versions past its span (see
  // MEMBER_VERSION_SPAN) makes it fresh no more. Nothing another member writes is read or compared.
  const leavesSpan = expectedVersion !== null && (expectedVersion + 1) % MEMBER_VERSION_SPAN === 0;
  const sent = await io.send(() =>
    io.client.send(
      new UpdateItemCommand(
        expectedVersion === null
          ? {
              TableName: io.tableName,
              Key: key,
              UpdateExpression: 'SET #version = if_not_exists(#version, :zero) + :one, #state = :state, #writeId = :writeId REMOVE #removed',
              // A tombstone whose version is not a number is corrupt: the join fails its condition and
              // reports it, rather than failing on the arithmetic.
              ConditionExpression: 'attribute_not_exists(#pk) OR (attribute_exists(#removed) AND attribute_type(#version, :number))',
              ExpressionAttributeNames: { '#pk': attr.pk, '#version': attr.version, '#state': attr.state, '#writeId': attr.writeId, '#removed': attr.removed },
              ExpressionAttributeValues: { ...values, ':zero': { N: '0' }, ':one': { N: '1' }, ':number': { S: 'N' } },
              ReturnValues: 'UPDATED_NEW',
              ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
            }
          : {
              TableName: io.tableName,
              Key: key,
              UpdateExpression: `SET #version = :version, #state = :state, #writeId = :writeId${leavesSpan ? ' REMOVE #fresh' : ''}`,
              ConditionExpression: '#version = :expected AND attribute_not_exists(#removed)',
              ExpressionAttributeNames: { '#version': attr.version, '#state': attr.state, '#writeId': attr.writeId, '#removed': attr.removed, ...(leavesSpan ? { '#fresh': attr.fresh } : {}) },
              ExpressionAttributeValues: { ...values, ':version': { N: String(expectedVersion + 1) }, ':expected': { N: String(expectedVersion) } },
              ReturnValues: 'UPDATED_NEW',
              ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
            },
      ),
    ),
  );
  const applied = (version: unknown): WriteResult<MemberRecord> =>
    isVersion(version)
      ? result.applied({ group, workerId, version, ...state })
      : result.unknown(new StorageOutcomeUnknownError(`[${PKG}] ${what} applied, but DynamoDB gave back the version ${describeValue(version)}`));
  if (sent.kind === 'applied') return applied(numberOf(sent.attributes?.[attr.version]));
  if (sent.kind === 'failed') return io.failed(sent.error, what);
  const met = await memberMet(io, sent, key);
  if (met === undefined) return result.unknown(unreadConflict(what));
  // The SDK retried, and its first attempt applied: the member holds this write's id.
  if (met.item !== undefined && !isRemoved(met.item) && met.item[attr.writeId]?.S === writeId) return applied(numberOf(met.item[attr.version]));
  if (met.retried) return result.unknown(ambiguous(what));
  return memberConflict(group, workerId, met.item);
}

export async function removeMember(io: MembersIo, group: string, workerId: string, expectedVersion: number): Promise<DeleteResult<MemberRecord>> {
  validateGroup(group, PKG);
  validateWorkerId(workerId, PKG);
  validateVersion(expectedVersion, PKG);
  const what = `removal of member ${describeValue(workerId)} at version ${expectedVersion} from group ${describeValue(group)}`;
  const key = memberItemKey(group, workerId);
  const fresh = await deleteFresh(freshIo(io), group, workerId, key, expectedVersion, what);
  if (fresh !== 'not-fresh') return fresh;
  // Any other member becomes a tombstone that keeps its version: a worker of an earlier release joining
  // again under its id continues above it (its joins start at 1 over no item).
  const sent = await io.send(() =>
    io.client.send(
      new UpdateItemCommand({
        TableName: io.tableName,
        Key: key,
        UpdateExpression: 'SET #removed = :true REMOVE #state, #writeId',
        ConditionExpression: '#version = :expected AND attribute_not_exists(#removed)',
        ExpressionAttributeNames: { '#version': attr.version, '#state': attr.state, '#writeId': attr.writeId, '#removed': attr.removed },
        ExpressionAttributeValues: { ':expected': { N: String(expectedVersion) }, ':true': TRUE },
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
    ),
  );
  if (sent.kind === 'applied') return { status: 'applied' };
  if (sent.kind === 'failed') return io.failed(sent.error, what);
  const met = await memberMet(io, sent, key);
  if (met === undefined) return result.unknown(unreadConflict(what));
  // A removal leaves nothing to recognise it by: after a retry, a tombstone or a moved member may be
  // this removal's own first attempt (followed by a join).
  if (met.retried) return result.unknown(ambiguous(what));
  return memberConflict(group, workerId, met.item);
}

/**
 * The member item a member write's failed condition met, and whether the SDK sent the write more than
 * once. `undefined`: the item could not be read. DynamoDB returns the item with ALL_OLD; backends that
 * ignore it (dynalite) need a consistent read, which may see a later write than the one that refused.
 */
async function memberMet(io: MembersIo, sent: Sent & { kind: 'condition-failed' }, key: Item): Promise<{ item: Item | undefined; retried: boolean } | undefined> {
  let item = sent.item;
  if (item === undefined) {
    try {
      item = await io.getItem(key);
    } catch {
      return undefined;
    }
  }
  return { item, retried: sent.attempts === undefined || sent.attempts > 1 };
}
