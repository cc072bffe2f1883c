/**
 * One group, one roster with the earlier release, which kept a group's members in one item (pk = group,
 * sk = `roster`). The items here are written with the earlier release's own requests, attribute for
 * attribute: its join (`hv` and `v:<id>` from the old `hv`, `m:<id>` = { s: state JSON, w: write id }) and
 * its removal (`REMOVE v:<id>, m:<id>`).
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { GetItemCommand, UpdateItemCommand, type AttributeValue, type DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { RecordFormatError, StorageUnavailableError, type MemberRecord, type MemberState } from '@leasehold/core';
import { decodeMember, encodeMemberState, RECORD_FORMAT } from '@leasehold/core/adapter';
import { DynamoDBStorage } from '../src/index.js';
import { MOVED_MARKER_WORKER_ID } from '../src/earlier-roster.js';
import { MEMBER_VERSION_SPAN } from '../src/schema.js';
import { loggedStorage as logged, memberState, useDynalite } from './support.js';

type Item = Record<string, AttributeValue>;

const dynamo = useDynalite('earlier-roster');
const { tableName } = dynamo;
const client = (): DynamoDBClient => dynamo.client();
let groupCount = 0;

function group(): string {
  return `group-${process.pid}-${groupCount++}`;
}


/** The earlier release's join, request for request: the member's version and `hv` from the old `hv`. */
async function earlierJoin(g: string, workerId: string, state: MemberState): Promise<number> {
  const output = await client().send(
    new UpdateItemCommand({
      TableName: tableName,
      Key: { pk: { S: g }, sk: { S: 'roster' } },
      UpdateExpression: 'SET #hv = if_not_exists(#hv, :zero) + :one, #v = if_not_exists(#hv, :zero) + :one, #m = :member',
      ConditionExpression: 'attribute_not_exists(#v)',
      ExpressionAttributeNames: { '#hv': 'hv', '#v': `v:${workerId}`, '#m': `m:${workerId}` },
      ExpressionAttributeValues: {
        ':zero': { N: '0' },
        ':one': { N: '1' },
        ':member': { M: { s: { S: encodeMemberState(state) }, w: { S: randomBytes(12).toString('base64url') } } },
      },
      ReturnValues: 'UPDATED_NEW',
      ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
    }),
  );
  return Number(output.Attributes?.[`v:${workerId}`]?.N);
}

/** The earlier release's removal: the member's attributes go, `hv` stays. */
async function earlierRemove(g: string, workerId: string, version: number): Promise<void> {
  await client().send(
    new UpdateItemCommand({
      TableName: tableName,
      Key: { pk: { S: g }, sk: { S: 'roster' } },
      UpdateExpression: 'REMOVE #v, #m',
      ConditionExpression: '#v = :expected',
      ExpressionAttributeNames: { '#v': `v:${workerId}`, '#m': `m:${workerId}` },
      ExpressionAttributeValues: { ':expected': { N: String(version) } },
    }),
  );
}

async function earlierItem(g: string): Promise<Item | undefined> {
  const { Item } = await client().send(new GetItemCommand({ TableName: tableName, Key: { pk: { S: g }, sk: { S: 'roster' } }, ConsistentRead: true }));
  return Item;
}

/** The earlier release's roster read: every `v:`/`m:` member of the item through core's decodeMember. */
function earlierRoster(g: string, item: Item): MemberRecord[] {
  const ids = new Set(Object.keys(item).filter((name) => name.startsWith('v:') || name.startsWith('m:')).map((name) => name.slice(2)));
  return [...ids].map((workerId) => decodeMember(g, workerId, Number(item[`v:${workerId}`]?.N), item[`m:${workerId}`]?.M?.s?.S, 'storage-dynamodb'));
}

/** A storage whose requests are logged as `<command> <sort key>`. */
function loggedStorage(): { storage: DynamoDBStorage; sent: string[] } {
  return logged(client(), tableName);
}

describe('DynamoDBStorage beside the roster item of an earlier release', () => {
  it('a join beside a live member of the earlier roster item marks the item with a member of format 2 and throws a RecordFormatError naming the live member, the group and what to do', async () => {
    const g = group();
    await earlierJoin(g, 'old-alive', memberState({ incarnation: 'old-1' }));
    await earlierJoin(g, 'old-dead', memberState({ incarnation: 'old-2', status: 'dead' }));
    const storage = new DynamoDBStorage({ client: client(), tableName });

    const refused = await storage.putMember(g, 'new', null, memberState()).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(RecordFormatError);
    expect(refused).toMatchObject({ code: 'ERR_RECORD_FORMAT', format: 1 });
    const message = (refused as Error).message;
    expect(message).toBe(
      `[storage-dynamodb] group "${g}" still has members in the roster item of an earlier release of @leasehold/storage-dynamodb (sk "roster"), alive: "old-alive". ` +
        'This release keeps each member in an item of its own, and joining beside them would split the group in two, so it did not join. ' +
        `Stop the earlier release's workers (each stops by itself at its next roster read, now that the item holds the member "${MOVED_MARKER_WORKER_ID}" of record format 2), ` +
        "or remove the members of workers that no longer run with the earlier release's `leasehold member remove`; then start this worker again",
    );

    // The earlier release reads the marker as a member of format 2, and its coordinator stops on it.
    const item = (await earlierItem(g)) as Item;
    const roster = earlierRoster(g, item);
    const marker = roster.find((member) => member.workerId === MOVED_MARKER_WORKER_ID);
    expect(marker).toMatchObject({ group: g, workerId: MOVED_MARKER_WORKER_ID, version: 3, format: 2, status: 'dead' });
    expect(roster.find((member) => member.format > RECORD_FORMAT)).toEqual(marker);
    expect(item.hv).toEqual({ N: '3' });
    expect(roster.map((member) => [member.workerId, member.version, member.status]).sort()).toEqual([
      [MOVED_MARKER_WORKER_ID, 3, 'dead'],
      ['old-alive', 1, 'alive'],
      ['old-dead', 2, 'dead'],
    ]);
    // Nothing of the join was written.
    expect(await storage.getRoster(g)).toEqual({ group: g, members: [], corrupt: [] });

    // A second join is refused the same way, and marks nothing again.
    await expect(storage.putMember(g, 'new', null, memberState())).rejects.toThrow(RecordFormatError);
    expect(await earlierItem(g)).toEqual(item);
  });

  it('a join beside only dead or removed members of the earlier roster item applies, after marking it', async () => {
    const g = group();
    await earlierJoin(g, 'old-dead', memberState({ status: 'dead' }));
    const left = await earlierJoin(g, 'old-left', memberState());
    await earlierRemove(g, 'old-left', left);
    const { storage, sent } = loggedStorage();

    const joined = (await storage.putMember(g, 'new', null, memberState())) as { status: string; record: MemberRecord };
    expect(joined.status).toBe('applied');
    expect(joined.record.version % MEMBER_VERSION_SPAN).toBe(0);
    // The earlier roster item's marking, then the members' key of the release before (single-members-key.test.ts),
    // then the join counter's move and the join.
    expect(sent).toEqual(['GetItemCommand roster', 'UpdateItemCommand roster', 'QueryCommand', 'PutItemCommand', 'QueryCommand', 'UpdateItemCommand digest', 'UpdateItemCommand member:new']);
    expect(await storage.getRoster(g)).toEqual({ group: g, members: [joined.record], corrupt: [] });
    const roster = earlierRoster(g, (await earlierItem(g)) as Item);
    expect(roster.map((member) => [member.workerId, member.format]).sort()).toEqual([
      [MOVED_MARKER_WORKER_ID, 2],
      ['old-dead', 1],
    ]);

    // Once marked, a join reads the item and writes nothing more to it; heartbeats and removals never read it.
    sent.length = 0;
    const other = (await storage.putMember(g, 'other', null, memberState())) as { record: MemberRecord };
    const beat = (await storage.putMember(g, 'new', joined.record.version, memberState({ held: 1 }))) as { record: MemberRecord };
    expect(await storage.removeMember(g, 'other', other.record.version)).toEqual({ status: 'applied' });
    expect(beat.record.version).toBe(joined.record.version + 1);
    expect(sent).toEqual(['GetItemCommand roster', 'QueryCommand', 'UpdateItemCommand digest', 'UpdateItemCommand member:other', 'UpdateItemCommand member:new', 'DeleteItemCommand member:other']);
  });

  it('a group the earlier release never ran: its first join creates the earlier roster item holding the marker alone, so that a worker of the earlier release started later stops', async () => {
    const g = group();
    const { storage, sent } = loggedStorage();
    const joined = (await storage.putMember(g, 'w', null, memberState())) as { record: MemberRecord };
    expect(sent).toEqual(['GetItemCommand roster', 'UpdateItemCommand roster', 'QueryCommand', 'PutItemCommand', 'QueryCommand', 'UpdateItemCommand digest', 'UpdateItemCommand member:w']);
    const marked = earlierRoster(g, (await earlierItem(g)) as Item);
    expect(marked.map((member) => [member.workerId, member.format, member.status])).toEqual([[MOVED_MARKER_WORKER_ID, 2, 'dead']]);
    // A worker of the earlier release joins as it always did, on the same item, and its roster read then
    // holds a member of format 2: the first thing its core checks, and stops on.
    await earlierJoin(g, 'old-late', memberState());
    const seenByEarlier = earlierRoster(g, (await earlierItem(g)) as Item);
    expect(seenByEarlier.some((member) => member.format > 1)).toBe(true);
    sent.length = 0;
    await storage.putMember(g, 'w', joined.record.version, memberState());
    await storage.getRoster(g);
    expect(sent).toEqual(['UpdateItemCommand member:w', ...Array(4).fill('QueryCommand')]);
    // Its live member now refuses the next join of this release.
    const refused = await storage.putMember(g, 'w2', null, memberState()).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(RecordFormatError);
    expect((refused as Error).message).toContain('"old-late"');
  });

  it('a member of the earlier roster item that cannot be read back may be alive: the join is refused naming it as unreadable', async () => {
    const g = group();
    await earlierJoin(g, 'old-dead', memberState({ status: 'dead' }));
    await client().send(
      new UpdateItemCommand({
        TableName: tableName,
        Key: { pk: { S: g }, sk: { S: 'roster' } },
        UpdateExpression: 'SET #v = :version, #m = :member',
        ExpressionAttributeNames: { '#v': 'v:damaged', '#m': 'm:damaged' },
        ExpressionAttributeValues: { ':version': { N: '7' }, ':member': { M: { s: { S: '{"status":' } } } },
      }),
    );
    const storage = new DynamoDBStorage({ client: client(), tableName });
    const refused = await storage.putMember(g, 'new', null, memberState()).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(RecordFormatError);
    expect((refused as Error).message).toContain(`group "${g}" still has members in the roster item of an earlier release of @leasehold/storage-dynamodb (sk "roster"), unreadable (so maybe alive): "damaged". `);
    const item = (await earlierItem(g)) as Item;
    expect(item['m:damaged']).toEqual({ M: { s: { S: '{"status":' } } });
    expect(item[`v:${MOVED_MARKER_WORKER_ID}`]).toBeDefined();
  });

  it('a worker of the earlier release that joins between the read and the marking is seen: the check reads the item as the marking left it', async () => {
    const g = group();
    await earlierJoin(g, 'old-dead', memberState({ status: 'dead' }));
    const made = client();
    type Add = (middleware: unknown, options: { step: 'initialize'; name: string }) => void;
    const lateJoin = (next: (args: { input: { Key?: Item } }) => Promise<unknown>, context: { commandName?: string }) => async (args: { input: { Key?: Item } }) => {
      const answer = await next(args);
      // The earlier release's worker joins right after this join read the item, before it marks it.
      if (context.commandName === 'GetItemCommand' && args.input.Key?.sk?.S === 'roster') await earlierJoin(g, 'old-late', memberState());
      return answer;
    };
    (made.middlewareStack.add as Add).call(made.middlewareStack, lateJoin, { step: 'initialize', name: 'lateJoin' });
    const storage = new DynamoDBStorage({ client: made, tableName });
    const refused = await storage.putMember(g, 'new', null, memberState()).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(RecordFormatError);
    expect((refused as Error).message).toContain('alive: "old-late"');
    expect(earlierRoster(g, (await earlierItem(g)) as Item).map((member) => member.workerId).sort()).toEqual([MOVED_MARKER_WORKER_ID, 'old-dead', 'old-late']);
  });

  it('joins racing beside one earlier roster item mark it once, and each applies or is refused on the item as marked', async () => {
    const g = group();
    const dead = await earlierJoin(g, 'old-dead', memberState({ status: 'dead' }));
    const outcomes = await Promise.all(Array.from({ length: 16 }, (_, i) => new DynamoDBStorage({ client: client(), tableName }).putMember(g, `new-${i}`, null, memberState())));
    expect(outcomes.map((outcome) => outcome.status)).toEqual(Array(16).fill('applied'));
    const item = (await earlierItem(g)) as Item;
    expect(item.hv).toEqual({ N: String(dead + 1) });
    expect(earlierRoster(g, item).map((member) => member.workerId).sort()).toEqual([MOVED_MARKER_WORKER_ID, 'old-dead']);
  });

  it('an earlier roster item that cannot be read is a StorageUnavailableError, and the join is not sent', async () => {
    const g = group();
    const sent: string[] = [];
    const made = client();
    type Add = (middleware: unknown, options: { step: 'initialize'; name: string }) => void;
    const failing = (next: (args: { input: { Key?: Item } }) => Promise<unknown>, context: { commandName?: string }) => async (args: { input: { Key?: Item } }) => {
      sent.push(context.commandName ?? '');
      if (context.commandName === 'GetItemCommand') throw Object.assign(new Error('injected: connection refused'), { name: 'ECONNREFUSED' });
      return next(args);
    };
    (made.middlewareStack.add as Add).call(made.middlewareStack, failing, { step: 'initialize', name: 'failReads' });
    const storage = new DynamoDBStorage({ client: made, tableName });
    await expect(storage.putMember(g, 'w', null, memberState())).rejects.toThrow(StorageUnavailableError);
    expect(sent).toEqual(['GetItemCommand']);
    expect(await new DynamoDBStorage({ client: client(), tableName }).getRoster(g)).toEqual({ group: g, members: [], corrupt: [] });
  });
});
