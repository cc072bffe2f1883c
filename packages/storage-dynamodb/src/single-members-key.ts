/**
 * The members as the release before kept them, and what a join of this release does about them: one
 * group, one roster (see `putMember` in core's `storage.ts`).
 *
 * The release before kept each member in an item of its own under ONE partition key, `pk` =
 * `<group>#members`, `sk` = `member:<workerId>` (`version`, `state`, `writeId`, `removed` on a tombstone),
 * and read the roster with one Query of that key. This release spreads the members over four keys
 * (`schema.ts`) and never reads that key for the group's roster. A join reads it, and only a join:
 * 1. unless the key holds the marker already, the join puts it there (once per group): a member item of
 *    record format 2, written as the release before wrote a join. Every core of the release before checks
 *    the format of each member its roster reads return before anything else, finds one above its
 *    `RECORD_FORMAT` (1) and stops with a `RecordFormatError` naming the marker's worker id. Its running
 *    workers read the whole roster when the roster digest moves, which the join of this release moves
 *    once it applied (core announces every join), or at their periodic whole read. Without the marker a
 *    worker of the release before would see none of this release's members and take their leases as its
 *    own (two rosters, one group);
 * 2. then, on the key as it stands after the marking, the join is refused with a `RecordFormatError`
 *    while any member but the marker is alive, or cannot be read (and so may be alive). A worker of the
 *    release before that joined before the marking is found by this read; one that joins after it reads
 *    the marker at its first roster read and stops.
 * The marker is left in place for good: deleting it would let a worker of the release before start the
 * group's old roster afresh without ever reading the marker. Once marked, a join pays one Query of the key
 * (the marker and the old members' tombstones: one read unit for a few dozen).
 */
import type { AttributeValue, PutItemCommandInput, QueryCommandInput } from '@aws-sdk/client-dynamodb';
import { type MemberState, type RecordFormatError } from '@leasehold/core';
import { describeValue, encodeMemberState } from '@leasehold/core/adapter';
import { blockingMembersError, blockingMembersOf, type BlockingMembers } from './layout-guard.js';
import { MEMBERS_PARTITION_SUFFIX, MEMBER_PREFIX, attr } from './schema.js';

type Item = Record<string, AttributeValue>;

/** The greatest record format any core of the release before knows. */
const PREVIOUS_RECORD_FORMAT = 1;

/**
 * The marker's worker id: a stopped core of the release before names it in its error ("member "(leasehold)
 * members moved to four keys: upgrade" of group ... is in record format 2, newer than the 1 this worker
 * knows: upgrade it"), so that its operator reads what happened.
 */
export const SPREAD_MARKER_WORKER_ID = '(leasehold) members moved to four keys: upgrade';

/**
 * The marker's state: format 2 stops every core of the release before; status `dead`, so that nothing of
 * that release which looks at live members only (its leader's shard sync, its command line) takes it for
 * a worker holding leases. Every field that release's `decodeMember` requires is present and valid, so the
 * marker is read as a member of format 2, never reported corrupt (a corrupt member would not stop it).
 */
export const SPREAD_MARKER_STATE: MemberState = {
  format: PREVIOUS_RECORD_FORMAT + 1,
  incarnation: 'members-spread',
  leaseDurationMs: 1,
  status: 'dead',
  held: 0,
  changes: 0,
  requests: [],
  metadata: { moved: 'the members are now under four partition keys (pk "<group>#members#0" to "#3"); this key is not read any more' },
};

/** The one members' partition key of the release before: `<group>#members`. */
export function singleMembersKey(group: string): string {
  return `${group}${MEMBERS_PARTITION_SUFFIX}`;
}

/** One page of the Query that reads every member item under the key of the release before. */
export function singleKeyQuery(tableName: string, group: string, startKey: Item | undefined): QueryCommandInput {
  return {
    TableName: tableName,
    KeyConditionExpression: '#pk = :pk AND begins_with(#sk, :member)',
    ExpressionAttributeNames: { '#pk': attr.pk, '#sk': attr.sk },
    ExpressionAttributeValues: { ':pk': { S: singleMembersKey(group) }, ':member': { S: MEMBER_PREFIX } },
    ConsistentRead: true,
    ExclusiveStartKey: startKey,
  };
}

/** Whether the items of the key hold the marker already. */
export function holdsMarker(items: readonly Item[]): boolean {
  return items.some((item) => item[attr.sk]?.S === `${MEMBER_PREFIX}${SPREAD_MARKER_WORKER_ID}`);
}

/** The marker's put: the release before's own join of a new worker id (version 1, on condition that no item is there). */
export function markerPut(tableName: string, group: string, writeId: string): PutItemCommandInput {
  return {
    TableName: tableName,
    Item: {
      [attr.pk]: { S: singleMembersKey(group) },
      [attr.sk]: { S: `${MEMBER_PREFIX}${SPREAD_MARKER_WORKER_ID}` },
      [attr.version]: { N: '1' },
      [attr.state]: { S: encodeMemberState(SPREAD_MARKER_STATE) },
      [attr.writeId]: { S: writeId },
    },
    ConditionExpression: 'attribute_not_exists(#pk)',
    ExpressionAttributeNames: { '#pk': attr.pk },
  };
}

/** Sorts the member items under the old key, the marker and tombstones aside, into those a join must not run beside. */
export function oldKeyBlockers(group: string, items: readonly Item[]): BlockingMembers {
  const members = items
    .filter((item) => item[attr.removed] === undefined)
    .map((item) => ({
      workerId: (item[attr.sk]?.S ?? '').slice(MEMBER_PREFIX.length),
      version: item[attr.version]?.N === undefined ? item[attr.version] : Number(item[attr.version]?.N),
      state: item[attr.state]?.S,
    }));
  return blockingMembersOf(group, members, SPREAD_MARKER_WORKER_ID, PREVIOUS_RECORD_FORMAT);
}

/** The error that refuses a join beside members under the old key; `undefined` when there are none. */
export function oldKeyMembersError(group: string, members: BlockingMembers): RecordFormatError | undefined {
  return blockingMembersError(group, members, {
    where: `under the one members' partition key of the release before of @leasehold/storage-dynamodb (pk ${describeValue(singleMembersKey(group))})`,
    now: 'spreads the members over four partition keys',
    release: "the release before's",
    holder: 'the key',
    markerWorkerId: SPREAD_MARKER_WORKER_ID,
    markerFormat: SPREAD_MARKER_STATE.format,
  });
}
