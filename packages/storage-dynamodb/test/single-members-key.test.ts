/**
 * One group, one roster with the release before, which kept a group's members under one partition key
 * (`<group>#members`, sk `member:<workerId>`). The items here are written with that release's own
 * requests, attribute for attribute: its join (an UpdateItem that sets `version` from the tombstone's or
 * 1, `state` and `writeId`, and removes `removed`) and its removal (the tombstone: `removed`, no state).
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { QueryCommand, UpdateItemCommand, type AttributeValue, type DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { RecordFormatError, StorageUnavailableError, type MemberRecord, type MemberState } from '@leasehold/core';
import { decodeMember, encodeMemberState, RECORD_FORMAT } from '@leasehold/core/adapter';
import { DynamoDBStorage } from '../src/index.js';
import { MEMBER_VERSION_SPAN } from '../src/schema.js';
import { SPREAD_MARKER_WORKER_ID } from '../src/single-members-key.js';
import { loggedStorage as logged, memberState, useDynalite } from './support.js';

type Item = Record<string, AttributeValue>;

const dynamo = useDynalite('single-members-key');
const { tableName } = dynamo;
const client = (): DynamoDBClient => dynamo.client();
let groupCount = 0;

function group(): string {
  return `group-${process.pid}-${groupCount++}`;
}


const oldKey = (g: string, workerId: string): Item => ({ pk: { S: `${g}#members` }, sk: { S: `member:${workerId}` } });

/** The release before's join, request for request: over no item (version 1) or over the worker id's tombstone. */
async function previousJoin(g: string, workerId: string, state: MemberState): Promise<number> {
  const output = await client().send(
    new UpdateItemCommand({
      TableName: tableName,
      Key: oldKey(g, workerId),
      UpdateExpression: 'SET #version = if_not_exists(#version, :zero) + :one, #state = :state, #writeId = :writeId REMOVE #removed',
      ConditionExpression: 'attribute_not_exists(#pk) OR (attribute_exists(#removed) AND attribute_type(#version, :number))',
      ExpressionAttributeNames: { '#pk': 'pk', '#version': 'version', '#state': 'state', '#writeId': 'writeId', '#removed': 'removed' },
      ExpressionAttributeValues: {
        ':state': { S: encodeMemberState(state) },
        ':writeId': { S: randomBytes(12).toString('base64url') },
        ':zero': { N: '0' },
        ':one': { N: '1' },
        ':number': { S: 'N' },
      },
      ReturnValues: 'UPDATED_NEW',
    }),
  );
  return Number(output.Attributes?.version?.N);
}

/** The release before's removal: the member becomes a tombstone that keeps its version. */
async function previousRemove(g: string, workerId: string, version: number): Promise<void> {
  await client().send(
    new UpdateItemCommand({
      TableName: tableName,
      Key: oldKey(g, workerId),
      UpdateExpression: 'SET #removed = :true REMOVE #state, #writeId',
      ConditionExpression: '#version = :expected AND attribute_not_exists(#removed)',
      ExpressionAttributeNames: { '#version': 'version', '#state': 'state', '#writeId': 'writeId', '#removed': 'removed' },
      ExpressionAttributeValues: { ':expected': { N: String(version) }, ':true': { BOOL: true } },
    }),
  );
}

/** The release before's roster read: one Query of `<group>#members`, tombstones left out, each member through core's decodeMember. */
async function previousRoster(g: string): Promise<MemberRecord[]> {
  const { Items } = await client().send(
    new QueryCommand({
      TableName: tableName,
      KeyConditionExpression: 'pk = :pk AND begins_with(sk, :member)',
      ExpressionAttributeValues: { ':pk': { S: `${g}#members` }, ':member': { S: 'member:' } },
      ConsistentRead: true,
    }),
  );
  return (Items ?? [])
    .filter((item) => item.removed === undefined)
    .map((item) => decodeMember(g, (item.sk?.S ?? '').slice('member:'.length), Number(item.version?.N), item.state?.S, 'storage-dynamodb'));
}

/** A storage whose requests are logged as `<command> <sort key>`. */
function loggedStorage(): { storage: DynamoDBStorage; sent: string[] } {
  return logged(client(), tableName);
}

describe('DynamoDBStorage beside the members of the release before, under one partition key', () => {
  it("a group's first join puts a member of format 2 under the old key, so that every worker of the release before reads it and stops", async () => {
    const g = group();
    const { storage, sent } = loggedStorage();
    const joined = (await storage.putMember(g, 'w', null, memberState())) as { status: string; record: MemberRecord };
    expect(joined.status).toBe('applied');
    // Then the join counter's move (a join over no item takes its first version from it), and the join.
    expect(sent).toEqual(['GetItemCommand roster', 'UpdateItemCommand roster', 'QueryCommand', 'PutItemCommand', 'QueryCommand', 'UpdateItemCommand digest', 'UpdateItemCommand member:w']);
    // Its roster read finds the marker, a member of format 2: the first thing its core checks, and stops on.
    const roster = await previousRoster(g);
    expect(roster).toEqual([expect.objectContaining({ group: g, workerId: SPREAD_MARKER_WORKER_ID, version: 1, format: 2, status: 'dead' })]);
    expect(roster.find((member) => member.format > RECORD_FORMAT)?.workerId).toBe(SPREAD_MARKER_WORKER_ID);
    // This release's roster holds its own members only.
    expect(await storage.getRoster(g)).toEqual({ group: g, members: [joined.record], corrupt: [] });

    // Once marked, a join reads the old key and writes nothing more to it.
    sent.length = 0;
    const other = (await storage.putMember(g, 'other', null, memberState())) as { record: MemberRecord };
    expect(sent).toEqual(['GetItemCommand roster', 'QueryCommand', 'UpdateItemCommand digest', 'UpdateItemCommand member:other']);
    // Heartbeats and removals never read it.
    sent.length = 0;
    appliedOf(await storage.putMember(g, 'w', joined.record.version, memberState({ held: 1 })));
    expect(await storage.removeMember(g, 'other', other.record.version)).toEqual({ status: 'applied' });
    expect(sent).toEqual(['UpdateItemCommand member:w', 'DeleteItemCommand member:other']);
  });

  it('a join beside a live member under the old key marks the key and throws a RecordFormatError naming the member, the group and what to do; nothing of the join is written', async () => {
    const g = group();
    await previousJoin(g, 'old-alive', memberState({ incarnation: 'old-1' }));
    await previousJoin(g, 'old-dead', memberState({ incarnation: 'old-2', status: 'dead' }));
    const storage = new DynamoDBStorage({ client: client(), tableName });

    const refused = await storage.putMember(g, 'new', null, memberState()).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(RecordFormatError);
    expect(refused).toMatchObject({ code: 'ERR_RECORD_FORMAT', format: 1 });
    expect((refused as Error).message).toBe(
      `[storage-dynamodb] group "${g}" still has members under the one members' partition key of the release before of @leasehold/storage-dynamodb (pk "${g}#members"), alive: "old-alive". ` +
        'This release spreads the members over four partition keys, and joining beside them would split the group in two, so it did not join. ' +
        `Stop the release before's workers (each stops by itself at its next roster read, now that the key holds the member "${SPREAD_MARKER_WORKER_ID}" of record format 2), ` +
        "or remove the members of workers that no longer run with the release before's `leasehold member remove`; then start this worker again",
    );
    // The live worker of the release before now reads a member of format 2, and its coordinator stops on it.
    const roster = await previousRoster(g);
    expect(roster.map((member) => [member.workerId, member.format, member.status]).sort()).toEqual([
      [SPREAD_MARKER_WORKER_ID, 2, 'dead'],
      ['old-alive', 1, 'alive'],
      ['old-dead', 1, 'dead'],
    ]);
    expect(await storage.getRoster(g)).toEqual({ group: g, members: [], corrupt: [] });
    // Refused again, marking nothing again, until the old member is gone; then the join applies.
    await expect(storage.putMember(g, 'new', null, memberState())).rejects.toThrow(RecordFormatError);
    expect(await previousRoster(g)).toEqual(roster);
    await previousRemove(g, 'old-alive', 1);
    expect(appliedOf(await storage.putMember(g, 'new', null, memberState())).version % MEMBER_VERSION_SPAN).toBe(0);
  });

  it('a member under the old key that cannot be read back may be alive: the join is refused naming it as unreadable', async () => {
    const g = group();
    const version = await previousJoin(g, 'damaged', memberState());
    await client().send(
      new UpdateItemCommand({
        TableName: tableName,
        Key: oldKey(g, 'damaged'),
        UpdateExpression: 'SET #state = :bad, #version = :next',
        ExpressionAttributeNames: { '#state': 'state', '#version': 'version' },
        ExpressionAttributeValues: { ':bad': { S: '{"status":' }, ':next': { N: String(version + 1) } },
      }),
    );
    const refused = await new DynamoDBStorage({ client: client(), tableName }).putMember(g, 'new', null, memberState()).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(RecordFormatError);
    expect((refused as Error).message).toContain(`(pk "${g}#members"), unreadable (so maybe alive): "damaged". `);
  });

  it('a worker of the release before that joins between the read and the marking is seen: the check reads the key again after marking it', async () => {
    const g = group();
    await previousJoin(g, 'old-dead', memberState({ status: 'dead' }));
    const made = client();
    let late = false;
    type Add = (middleware: unknown, options: { step: 'initialize'; name: string }) => void;
    const lateJoin = (next: (args: { input: unknown }) => Promise<unknown>, context: { commandName?: string }) => async (args: { input: unknown }) => {
      const answer = await next(args);
      // The release before's worker joins right after this join first read the old key, before it marks it.
      if (context.commandName === 'QueryCommand' && !late) {
        late = true;
        await previousJoin(g, 'old-late', memberState());
      }
      return answer;
    };
    (made.middlewareStack.add as Add).call(made.middlewareStack, lateJoin, { step: 'initialize', name: 'lateJoin' });
    const refused = await new DynamoDBStorage({ client: made, tableName }).putMember(g, 'new', null, memberState()).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(RecordFormatError);
    expect((refused as Error).message).toContain('alive: "old-late"');
    expect((await previousRoster(g)).map((member) => member.workerId).sort()).toEqual([SPREAD_MARKER_WORKER_ID, 'old-dead', 'old-late']);
  });

  it('joins racing on a fresh group mark the old key once, and every join applies', async () => {
    const g = group();
    const outcomes = await Promise.all(Array.from({ length: 16 }, (_, i) => new DynamoDBStorage({ client: client(), tableName }).putMember(g, `new-${i}`, null, memberState())));
    expect(outcomes.map((outcome) => outcome.status)).toEqual(Array(16).fill('applied'));
    expect((await previousRoster(g)).map((member) => member.workerId)).toEqual([SPREAD_MARKER_WORKER_ID]);
    expect((await new DynamoDBStorage({ client: client(), tableName }).getRoster(g)).members).toHaveLength(16);
  });

  it('an old key that cannot be read is a StorageUnavailableError, and the join is not sent', async () => {
    const g = group();
    const sent: string[] = [];
    const made = client();
    type Add = (middleware: unknown, options: { step: 'initialize'; name: string }) => void;
    const failing = (next: (args: { input: unknown }) => Promise<unknown>, context: { commandName?: string }) => async (args: { input: unknown }) => {
      sent.push(context.commandName ?? '');
      if (context.commandName === 'QueryCommand') throw Object.assign(new Error('injected: connection refused'), { name: 'ECONNREFUSED' });
      return next(args);
    };
    (made.middlewareStack.add as Add).call(made.middlewareStack, failing, { step: 'initialize', name: 'failQueries' });
    const refused = await new DynamoDBStorage({ client: made, tableName }).putMember(g, 'w', null, memberState()).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(StorageUnavailableError);
    expect((refused as Error).message).toContain(`could not read the members of an earlier release of group "${g}"`);
    expect(sent).toEqual(['GetItemCommand', 'UpdateItemCommand', 'QueryCommand']);
    expect(await new DynamoDBStorage({ client: client(), tableName }).getRoster(g)).toEqual({ group: g, members: [], corrupt: [] });
  });
});

function appliedOf(outcome: { status: string }): MemberRecord {
  expect(outcome.status).toBe('applied');
  return (outcome as unknown as { record: MemberRecord }).record;
}
