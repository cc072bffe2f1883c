/**
 * Members that leave nothing behind (README, "Why removed members leave nothing behind"). A worker id's
 * versions must only grow, so that a writer holding a version of an earlier membership never writes a
 * later one. A tombstone keeping the version did that, and every roster read paid for it: the members'
 * `Query` bills the tombstones it reads, and each restart under a new worker id left one. Instead, a join
 * over no item takes its first version from the group's count of such joins (on the roster digest's item)
 * times MEMBER_VERSION_SPAN, above every version an earlier member of its worker id had, and is written
 * `fresh`; a fresh member is deleted when removed. A member that joined over a tombstone keeps the
 * tombstone's way (members.ts): a worker of an earlier release, whose joins over no item start at
 * version 1, may join under that worker id again and must continue above it.
 */
import { DeleteItemCommand, UpdateItemCommand, type DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { CorruptRecordError, type DeleteResult, type MemberRecord, type MemberState, type Unknown, type WriteResult } from '@leasehold/core';
import { describeValue, result } from '@leasehold/core/adapter';
import { ambiguous, corruptDigest, digestItemKey, isRemoved, isVersion, memberConflict, numberOf, TRUE, unreadConflict, type Item, type Sent } from './items.js';
import { MAX_FRESH_JOINS, MEMBER_VERSION_SPAN, PKG, attr } from './schema.js';


/** What the fresh members' writes need of the storage: its table, its conditional writes and their errors. */
export interface FreshMembersIo {
  readonly tableName: string;
  /** Sends a conditional write: applied (with what it returned), failed its condition (with the item, when the backend returns it), or failed. */
  send(request: (client: DynamoDBClient) => Promise<unknown>): Promise<Sent>;
  /** The member item a failed condition met (read when the backend did not return it), and whether the SDK retried; `undefined` when unreadable. */
  met(sent: Sent & { kind: 'condition-failed' }, key: Item): Promise<{ item: Item | undefined; retried: boolean } | undefined>;
  /** The result of a write that failed with something other than its condition. */
  failed(error: unknown, what: string): Promise<Unknown>;
  /** A strongly consistent GetItem. */
  getItem(key: Item): Promise<Item | undefined>;
}

/**
 * A join over no item: its first version is the group's join counter, moved first, times
 * MEMBER_VERSION_SPAN, above every version a worker id whose fresh member was deleted ever had; the
 * member is written `fresh`. `undefined` when the worker id has a tombstone instead (a member of an
 * earlier release, or one past its span, was removed): that join continues above the tombstone.
 */
export async function freshJoin(
  io: FreshMembersIo,
  group: string,
  workerId: string,
  key: Item,
  values: Item,
  state: MemberState,
  writeId: string,
  what: string,
): Promise<WriteResult<MemberRecord> | undefined> {
  const base = await freshJoinBase(io, group, what);
  if (typeof base !== 'number') return base;
  const sent = await io.send((client) =>
    client.send(
      new UpdateItemCommand({
        TableName: io.tableName,
        Key: key,
        UpdateExpression: 'SET #version = :base, #state = :state, #writeId = :writeId, #fresh = :true',
        ConditionExpression: 'attribute_not_exists(#pk)',
        ExpressionAttributeNames: { '#pk': attr.pk, '#version': attr.version, '#state': attr.state, '#writeId': attr.writeId, '#fresh': attr.fresh },
        ExpressionAttributeValues: { ...values, ':base': { N: String(base) }, ':true': TRUE },
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
    ),
  );
  if (sent.kind === 'applied') return result.applied({ group, workerId, version: base, ...state });
  if (sent.kind === 'failed') return io.failed(sent.error, what);
  const met = await io.met(sent, key);
  if (met === undefined) return result.unknown(unreadConflict(what));
  // The SDK retried, and its first attempt applied: the member holds this write's id.
  if (met.item !== undefined && !isRemoved(met.item) && met.item[attr.writeId]?.S === writeId) return result.applied({ group, workerId, version: base, ...state });
  // A tombstone: this attempt did not apply (the member it wrote, removed since, would be gone, not a tombstone).
  if (met.item !== undefined && isRemoved(met.item)) return undefined;
  if (met.retried) return result.unknown(ambiguous(what));
  return memberConflict(group, workerId, met.item);
}

/**
 * Moves the group's join counter (on its digest item) and gives the first version of the join it counts,
 * or the join's result when it could not. The digest is added 0, so that an item this creates holds a
 * digest never advanced, as a worker of an earlier release expects to read it, not a counter alone.
 */
async function freshJoinBase(io: FreshMembersIo, group: string, what: string): Promise<number | WriteResult<MemberRecord>> {
  const key = digestItemKey(group);
  const sent = await io.send((client) =>
    client.send(
      new UpdateItemCommand({
        TableName: io.tableName,
        Key: key,
        UpdateExpression: 'ADD #joins :one, #digest :zero',
        ConditionExpression: '(attribute_not_exists(#joins) OR attribute_type(#joins, :number)) AND (attribute_not_exists(#digest) OR attribute_type(#digest, :number))',
        ExpressionAttributeNames: { '#joins': attr.joins, '#digest': attr.digest },
        ExpressionAttributeValues: { ':one': { N: '1' }, ':zero': { N: '0' }, ':number': { S: 'N' } },
        ReturnValues: 'UPDATED_NEW',
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
    ),
  );
  // The member was not written: a failed count leaves the join undone, as a failed join would.
  if (sent.kind === 'failed') return io.failed(sent.error, `${what} (counting it among the group's joins)`);
  const joins = sent.kind === 'applied' ? numberOf(sent.attributes?.[attr.joins]) : undefined;
  if (isVersion(joins) && joins <= MAX_FRESH_JOINS) return joins * MEMBER_VERSION_SPAN;
  const item = sent.kind === 'condition-failed' ? (sent.item ?? (await io.getItem(key).catch(() => undefined))) : sent.attributes;
  if (item?.[attr.digest] !== undefined && item[attr.digest]?.N === undefined) return result.unknown(corruptDigest(group, item[attr.digest]));
  return result.unknown(
    new CorruptRecordError(
      `[${PKG}] the join counter of group ${describeValue(group)} is ${describeValue(item?.[attr.joins])}: a number from 1 to ${MAX_FRESH_JOINS} was expected; the ${what} was not written`,
      { group },
    ),
  );
}

/**
 * Removes a fresh member at `expectedVersion` with one `DeleteItem`: every version its worker id ever had
 * is below the next join's over no item, and nothing of it is left for a roster read to pay for.
 * `'not-fresh'` when the member at that version is another (it becomes a tombstone instead).
 */
export async function deleteFresh(
  io: FreshMembersIo,
  group: string,
  workerId: string,
  key: Item,
  expectedVersion: number,
  what: string,
): Promise<DeleteResult<MemberRecord> | 'not-fresh'> {
  const deleted = await io.send((client) =>
    client.send(
      new DeleteItemCommand({
        TableName: io.tableName,
        Key: key,
        ConditionExpression: '#version = :expected AND attribute_not_exists(#removed) AND attribute_exists(#fresh)',
        ExpressionAttributeNames: { '#version': attr.version, '#removed': attr.removed, '#fresh': attr.fresh },
        ExpressionAttributeValues: { ':expected': { N: String(expectedVersion) } },
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
    ),
  );
  if (deleted.kind === 'applied') return { status: 'applied' };
  if (deleted.kind === 'failed') return io.failed(deleted.error, what);
  const found = await io.met(deleted, key);
  if (found === undefined) return result.unknown(unreadConflict(what));
  const item = found.item;
  // Not the member at that version, or already gone (a retried delete whose first attempt applied).
  if (item === undefined || isRemoved(item) || item[attr.fresh] !== undefined || numberOf(item[attr.version]) !== expectedVersion) {
    if (found.retried) return result.unknown(ambiguous(what));
    return memberConflict(group, workerId, item);
  }
  return 'not-fresh';
}
