/**
 * One group, one roster, across the layouts before this one: what a join of this release checks before it
 * writes its member (see `earlier-roster.ts`, the one roster item, and `single-members-key.ts`, the member
 * items under one partition key). Each check reads the layout's place; unless it holds that layout's
 * marker, marks it, so that a worker of that release stops, now or whenever it starts; and throws a
 * `RecordFormatError` naming the members still alive there. Once both are marked, a join pays one
 * GetItem and one Query.
 */
import { PutItemCommand, UpdateItemCommand, type AttributeValue, type DynamoDBClient, type QueryCommandInput } from '@aws-sdk/client-dynamodb';
import { randomBytes } from 'node:crypto';
import { describeValue } from '@leasehold/core/adapter';
import { blockingMembers, earlierMembersError, earlierRosterKey, isMarked, markingUpdate } from './earlier-roster.js';
import { holdsMarker, markerPut, oldKeyBlockers, oldKeyMembersError, singleKeyQuery } from './single-members-key.js';

type Item = Record<string, AttributeValue>;

/** What the checks need of the storage: its table, its reads and its marking writes, each with its errors. */
export interface JoinCheckIo {
  readonly tableName: string;
  /** A strongly consistent GetItem; a failure is a `StorageUnavailableError` naming `what`. */
  getItem(what: string, key: Item): Promise<Item | undefined>;
  /** Every item of a Query, page after page; a failure is a `StorageUnavailableError` naming `what`. */
  queryAll(what: string, input: (startKey: Item | undefined) => QueryCommandInput): Promise<Item[]>;
  /**
   * Sends a marking write: the item after it (applied) or as its condition found it, when the backend
   * returns either. A write that failed throws a `StorageUnavailableError` that says the join was not sent.
   */
  mark(what: string, request: (client: DynamoDBClient) => Promise<unknown>): Promise<Item | undefined>;
}

/** Throws unless a join of `group` may run beside what the layouts before keep of it (marking them first). */
export async function refuseBesideEarlierLayouts(group: string, io: JoinCheckIo): Promise<void> {
  await refuseBesideEarlierRoster(group, io);
  await refuseBesideSingleMembersKey(group, io);
}

async function refuseBesideEarlierRoster(group: string, io: JoinCheckIo): Promise<void> {
  const key = earlierRosterKey(group);
  const what = `read the roster item of an earlier release of group ${describeValue(group)}`;
  let item = await io.getItem(what, key);
  if (item === undefined || !isMarked(item)) {
    const marking = markingUpdate(io.tableName, group, randomBytes(12).toString('base64url'));
    // Applied: the item after the marking. Refused: another join marked it first, and the item as it was
    // refused holds the marker too. A backend that returns neither gets a read, which is later still.
    const marked = await io.mark(`marking of the roster item of an earlier release of group ${describeValue(group)}`, (client) => client.send(new UpdateItemCommand(marking)));
    item = marked ?? (await io.getItem(what, key));
    if (item === undefined) return;
  }
  const error = earlierMembersError(group, blockingMembers(group, item));
  if (error !== undefined) throw error;
}

async function refuseBesideSingleMembersKey(group: string, io: JoinCheckIo): Promise<void> {
  const what = `read the members of an earlier release of group ${describeValue(group)}`;
  const read = (): Promise<Item[]> => io.queryAll(what, (startKey) => singleKeyQuery(io.tableName, group, startKey));
  let items = await read();
  if (!holdsMarker(items)) {
    const marker = markerPut(io.tableName, group, randomBytes(12).toString('base64url'));
    await io.mark(`marking of the members' key of an earlier release of group ${describeValue(group)}`, (client) => client.send(new PutItemCommand(marker)));
    // Applied, or another join marked the key first: either way the key is read again, after the marking.
    items = await read();
  }
  const error = oldKeyMembersError(group, oldKeyBlockers(group, items));
  if (error !== undefined) throw error;
}
