/**
 * The roster as the earlier release kept it, and what a join of this release does about it: one group,
 * one roster (see `putMember` in core's `storage.ts`).
 *
 * The earlier release kept every member of a group in ONE item, `pk` = the group, `sk` = `roster`: `hv`
 * (N, the greatest version any member of the group ever had) and, per member, `v:<workerId>` (N, its
 * version) and `m:<workerId>` (M: `s`, its state JSON, and `w`, the id of the write that stored it). This
 * release never keeps members there. A join reads that item, and only a join:
 * 1. unless the item holds the marker already, the join adds it (once per group), written exactly as the
 *    earlier release wrote a join, creating the item for a group the earlier release never ran: a worker
 *    of the earlier release started later on a group of this release would otherwise find no roster,
 *    start one of its own, see none of this release's members, and take their leases as its own (two
 *    rosters, one group). Its record format is 2: every earlier core checks the format of each member it
 *    reads before anything else, finds one above its `RECORD_FORMAT` (1), and stops with a
 *    `RecordFormatError` whose message carries the marker's worker id;
 * 2. then, on the item as it stands after the marking, the join is refused with a `RecordFormatError`
 *    while any member but the marker is alive, or cannot be read (and so may be alive). A worker of the
 *    earlier release that joined before the marking is in that item; one that joins after it reads the
 *    marker at its next roster read and stops.
 * The item is left in place for good: deleting it would let a worker of the earlier release start the
 * group's old roster afresh without ever reading the marker.
 */
import type { AttributeValue, UpdateItemCommandInput } from '@aws-sdk/client-dynamodb';
import { type MemberState, type RecordFormatError } from '@leasehold/core';
import { encodeMemberState } from '@leasehold/core/adapter';
import { blockingMembersError, blockingMembersOf, type BlockingMembers } from './layout-guard.js';
import { attr } from './schema.js';

type Item = Record<string, AttributeValue>;

/** The earlier release's sort key of a group's roster item, under `pk` = the group. */
export const EARLIER_ROSTER_SORT_KEY = 'roster';
/** Attribute names of the earlier release's roster item. */
export const earlierAttr = {
  /** The group's version counter. */
  highVersion: 'hv',
  /** Prefix of a member's version: `v:<workerId>`. */
  versionPrefix: 'v:',
  /** Prefix of a member's map: `m:<workerId>`. */
  memberPrefix: 'm:',
  /** Inside a member's map: its state JSON. */
  state: 's',
  /** Inside a member's map: the id of the write that stored it. */
  writeId: 'w',
} as const;

/** The greatest record format any core of the earlier release knows. */
const EARLIER_RECORD_FORMAT = 1;

/**
 * The marker's worker id: an earlier core's error names it ("member "(leasehold) members moved to one
 * item each: upgrade" of group ... is in record format 2, newer than the 1 this worker knows: upgrade
 * it"), so that the operator of a stopped worker of the earlier release reads what happened.
 */
export const MOVED_MARKER_WORKER_ID = '(leasehold) members moved to one item each: upgrade';

/**
 * The marker's state. Format 2 stops every earlier core. Status `dead`: the marker is no worker, so
 * nothing of the earlier release that looks at live members only (its leader's shard sync, its command
 * line) takes it for one holding leases, and it is never one of the live members this check refuses to
 * join beside. The earlier core stops on the format alone, whatever the status. Every field the earlier
 * `decodeMember` requires is present and valid, so the marker is read as a member of format 2, never
 * reported corrupt (a corrupt member would not stop an earlier worker).
 */
export const MOVED_MARKER_STATE: MemberState = {
  format: EARLIER_RECORD_FORMAT + 1,
  incarnation: 'members-moved',
  leaseDurationMs: 1,
  status: 'dead',
  held: 0,
  changes: 0,
  requests: [],
  metadata: { moved: 'each member is now an item of its own (pk "<group>#members", sk "member:<workerId>"); this item is not read any more' },
};

/** The key of a group's roster item of the earlier release. */
export function earlierRosterKey(group: string): Item {
  return { [attr.pk]: { S: group }, [attr.sk]: { S: EARLIER_ROSTER_SORT_KEY } };
}

/** Whether the item holds the marker already. */
export function isMarked(item: Item): boolean {
  return item[`${earlierAttr.versionPrefix}${MOVED_MARKER_WORKER_ID}`] !== undefined;
}

/**
 * The update that adds the marker: the earlier release's own join (the marker's version and `hv` from
 * the old `hv`, on condition that the marker is absent), which creates the item when the group has none.
 * It returns the whole item after the marking, which the check then reads.
 */
export function markingUpdate(tableName: string, group: string, writeId: string): UpdateItemCommandInput {
  return {
    TableName: tableName,
    Key: earlierRosterKey(group),
    UpdateExpression: 'SET #hv = if_not_exists(#hv, :zero) + :one, #v = if_not_exists(#hv, :zero) + :one, #m = :member',
    ConditionExpression: 'attribute_not_exists(#v)',
    ExpressionAttributeNames: {
      '#hv': earlierAttr.highVersion,
      '#v': `${earlierAttr.versionPrefix}${MOVED_MARKER_WORKER_ID}`,
      '#m': `${earlierAttr.memberPrefix}${MOVED_MARKER_WORKER_ID}`,
    },
    ExpressionAttributeValues: {
      ':zero': { N: '0' },
      ':one': { N: '1' },
      ':member': { M: { [earlierAttr.state]: { S: encodeMemberState(MOVED_MARKER_STATE) }, [earlierAttr.writeId]: { S: writeId } } },
    },
    ReturnValues: 'ALL_NEW',
    ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
  };
}

/** Sorts the members of the earlier item, the marker aside, into those a join must not run beside. */
export function blockingMembers(group: string, item: Item): BlockingMembers {
  const members = earlierMemberIds(item).map((workerId) => ({
    workerId,
    version: numberOf(item[`${earlierAttr.versionPrefix}${workerId}`]),
    state: item[`${earlierAttr.memberPrefix}${workerId}`]?.M?.[earlierAttr.state]?.S,
  }));
  return blockingMembersOf(group, members, MOVED_MARKER_WORKER_ID, EARLIER_RECORD_FORMAT);
}

/** The error that refuses a join beside members of the earlier layout; `undefined` when there are none. */
export function earlierMembersError(group: string, members: BlockingMembers): RecordFormatError | undefined {
  return blockingMembersError(group, members, {
    where: `in the roster item of an earlier release of @leasehold/storage-dynamodb (sk "${EARLIER_ROSTER_SORT_KEY}")`,
    now: 'keeps each member in an item of its own',
    release: "the earlier release's",
    holder: 'the item',
    markerWorkerId: MOVED_MARKER_WORKER_ID,
    markerFormat: MOVED_MARKER_STATE.format,
  });
}

/** The worker id of every member the earlier item holds, readable or not. */
function earlierMemberIds(item: Item): string[] {
  const ids = new Set<string>();
  for (const name of Object.keys(item)) {
    if (name.startsWith(earlierAttr.versionPrefix)) ids.add(name.slice(earlierAttr.versionPrefix.length));
    else if (name.startsWith(earlierAttr.memberPrefix)) ids.add(name.slice(earlierAttr.memberPrefix.length));
  }
  return [...ids];
}

function numberOf(value: AttributeValue | undefined): unknown {
  return value?.N === undefined ? value : Number(value.N);
}
