/**
 * The watchers' reads: a few members by id (`getMembers`) and the group's roster digest
 * (`getRosterDigest`, `advanceRosterDigest`), beyond what the conformance suite asks of every adapter.
 */
import { describe, expect, it } from 'vitest';
import {
  GetItemCommand,
  ProvisionedThroughputExceededException,
  QueryCommand,
  UpdateItemCommand,
  type AttributeValue,
  type BatchGetItemCommandOutput,
} from '@aws-sdk/client-dynamodb';
import { CorruptRecordError, InvalidInputError, StorageOutcomeUnknownError, StorageSchemaError, StorageUnavailableError, type MemberRecord, type WriteResult } from '@leasehold/core';
import { limits } from '@leasehold/core/adapter';
import { DynamoDBStorage } from '../src/index.js';
import { memberItemKey } from '../src/items.js';
import { itemBytes } from '../src/schema.js';
import { injectFaults, memberState, meter, useDynalite, type Injection } from './support.js';

const dynamo = useDynalite('watchers');
let groupCount = 0;

function group(): string {
  return `watched-${process.pid}-${groupCount++}`;
}

function storage(inject?: Injection, config: Parameters<typeof dynamo.client>[0] = {}): DynamoDBStorage {
  const client = dynamo.client(config);
  return new DynamoDBStorage({ client: inject ? injectFaults(client, inject) : client, tableName: dynamo.tableName });
}

function applied<T>(outcome: WriteResult<T>): T {
  expect(outcome.status).toBe('applied');
  return (outcome as { record: T }).record;
}

/** Damages a member as another program would, moving its version as a writer does. */
async function corruptMember(g: string, workerId: string): Promise<void> {
  await dynamo.client().send(
    new UpdateItemCommand({
      TableName: dynamo.tableName,
      Key: memberItemKey(g, workerId),
      UpdateExpression: 'SET #v = #v + :one, #s = :bad',
      ExpressionAttributeNames: { '#v': 'version', '#s': 'state' },
      ExpressionAttributeValues: { ':one': { N: '1' }, ':bad': { S: '{"status":' } },
    }),
  );
}

async function readItem(pk: string, sk: string): Promise<Record<string, AttributeValue> | undefined> {
  const { Item } = await dynamo.client().send(new GetItemCommand({ TableName: dynamo.tableName, Key: { pk: { S: pk }, sk: { S: sk } }, ConsistentRead: true }));
  return Item;
}

function throttle(): ProvisionedThroughputExceededException {
  return new ProvisionedThroughputExceededException({ message: 'injected throttle', $metadata: { httpStatusCode: 400 } });
}

describe('DynamoDBStorage getMembers', () => {
  it('gives each named member as getRoster does, leaves out ids with no member and removed members, puts an unreadable one in corrupt, and reads a repeated id once, in one BatchGetItem', async () => {
    const batches: number[] = [];
    const reader = storage(async (command, send, input) => {
      if (command === 'BatchGetItemCommand') batches.push(Object.values((input as { RequestItems: Record<string, { Keys: unknown[] }> }).RequestItems)[0]?.Keys.length ?? 0);
      return send();
    });
    const writer = storage();
    const g = group();
    for (const workerId of ['a', 'b', 'c', 'gone', 'bad']) applied(await writer.putMember(g, workerId, null, memberState({ incarnation: `${workerId}-1` })));
    const gone = (await writer.getRoster(g)).members.find((member) => member.workerId === 'gone') as MemberRecord;
    expect(await writer.removeMember(g, 'gone', gone.version)).toEqual({ status: 'applied' });
    await corruptMember(g, 'bad');
    const roster = await writer.getRoster(g);
    const byId = new Map(roster.members.map((member) => [member.workerId, member]));

    const read = await reader.getMembers(g, ['c', 'nobody', 'a', 'gone', 'bad', 'c', 'a', 'b']);

    expect(read.group).toBe(g);
    expect(read.members).toEqual([byId.get('c'), byId.get('a'), byId.get('b')]);
    expect(read.corrupt).toHaveLength(1);
    expect(read.corrupt[0]).toBeInstanceOf(CorruptRecordError);
    expect(read.corrupt[0]).toMatchObject({ group: g, workerId: 'bad', leaseKey: undefined, message: roster.corrupt[0]?.message });
    expect(read.corrupt[0]?.message).toContain(`[storage-dynamodb] stored member "bad" of group "${g}" is corrupt`);
    expect(batches).toEqual([6]);
    expect(await reader.getMembers(g, ['nobody'])).toEqual({ group: g, members: [], corrupt: [] });
    expect(await reader.getMembers(group(), ['a'])).toEqual({ group: expect.any(String), members: [], corrupt: [] });
  });

  it(`reads up to ${limits.maxWatchedMembers} ids; ${limits.maxWatchedMembers + 1}, or a bad one, is an InvalidInputError before anything is sent, and none is an empty roster read without sending`, async () => {
    let sent = 0;
    const counting = storage(async (_command, send) => {
      sent++;
      return send();
    });
    const g = group();
    const ids = Array.from({ length: limits.maxWatchedMembers + 1 }, (_, i) => `w${i}`);
    await expect(counting.getMembers(g, ids)).rejects.toThrow(new InvalidInputError(`[storage-dynamodb] at most 16 worker ids may be read at once, got 17`));
    await expect(counting.getMembers(g, ['w', ''])).rejects.toThrow(InvalidInputError);
    await expect(counting.getMembers(g, 'w' as never)).rejects.toThrow(InvalidInputError);
    await expect(counting.getMembers('', ['w'])).rejects.toThrow(InvalidInputError);
    await expect(counting.getRosterDigest('')).rejects.toThrow(InvalidInputError);
    await expect(counting.advanceRosterDigest('')).rejects.toThrow(InvalidInputError);
    expect(await counting.getMembers(g, [])).toEqual({ group: g, members: [], corrupt: [] });
    expect(sent).toBe(0);

    const writer = storage();
    const joined = await Promise.all(ids.slice(0, limits.maxWatchedMembers).map(async (workerId) => applied(await writer.putMember(g, workerId, null, memberState()))));
    expect((await counting.getMembers(g, ids.slice(0, limits.maxWatchedMembers))).members).toEqual(joined);
    expect(sent).toBe(1);
  });

  it('keys DynamoDB leaves unprocessed are sent again, and the members come back whole', async () => {
    const sentKeys: number[] = [];
    const reader = storage(async (command, send, input) => {
      if (command !== 'BatchGetItemCommand') return send();
      const request = Object.values((input as { RequestItems: Record<string, { Keys: Record<string, AttributeValue>[] }> }).RequestItems)[0];
      sentKeys.push(request?.Keys.length ?? 0);
      const answer = (await send()) as { output: BatchGetItemCommandOutput };
      // The first two answers keep one item back each, as a throttled partition would.
      if (sentKeys.length <= 2) {
        const [table, items] = Object.entries(answer.output.Responses ?? {})[0] ?? [];
        const held = items?.pop();
        if (table !== undefined && held !== undefined) {
          answer.output.UnprocessedKeys = { [table]: { Keys: [{ pk: held.pk as AttributeValue, sk: held.sk as AttributeValue }], ConsistentRead: true } };
        }
      }
      return answer;
    });
    const writer = storage();
    const g = group();
    const joined = [];
    for (const workerId of ['a', 'b', 'c']) joined.push(applied(await writer.putMember(g, workerId, null, memberState())));

    const read = await reader.getMembers(g, ['a', 'b', 'c']);

    expect(read).toEqual({ group: g, members: joined, corrupt: [] });
    expect(sentKeys).toEqual([3, 1, 1]);
  });

  it('keys still unprocessed after five attempts, and a batch the SDK gave up on, are a StorageUnavailableError naming the group', async () => {
    let attempts = 0;
    const starved = storage(async (command, send) => {
      if (command !== 'BatchGetItemCommand') return send();
      attempts++;
      const answer = (await send()) as { output: BatchGetItemCommandOutput };
      const [table, items] = Object.entries(answer.output.Responses ?? {})[0] ?? [];
      if (table !== undefined && items !== undefined) {
        answer.output.UnprocessedKeys = { [table]: { Keys: items.map((item) => ({ pk: item.pk as AttributeValue, sk: item.sk as AttributeValue })), ConsistentRead: true } };
        answer.output.Responses = { [table]: [] };
      }
      return answer;
    });
    const g = group();
    applied(await storage().putMember(g, 'a', null, memberState()));
    await expect(starved.getMembers(g, ['a', 'b'])).rejects.toThrow(
      new StorageUnavailableError(`[storage-dynamodb] could not read 2 member(s) of group "${g}": UnprocessedKeys: 1 of 2 keys were still unprocessed after 5 BatchGetItem attempts`),
    );
    expect(attempts).toBe(5);

    const throttled = storage(async (command, send) => {
      if (command === 'BatchGetItemCommand') throw throttle();
      return send();
    }, { maxAttempts: 2 });
    await expect(throttled.getMembers(g, ['a'])).rejects.toThrow(
      new StorageUnavailableError(`[storage-dynamodb] could not read 1 member(s) of group "${g}": ProvisionedThroughputExceededException: injected throttle`),
    );
  });
});

describe('DynamoDBStorage roster digest', () => {
  it('is 0 for a group never advanced; each advance adds one and returns the value it wrote, which every client then reads', async () => {
    const [one, other] = [storage(), storage()];
    const g = group();
    expect(await one.getRosterDigest(g)).toBe(0);
    expect(await one.advanceRosterDigest(g)).toBe(1);
    expect(await other.getRosterDigest(g)).toBe(1);
    expect(await other.advanceRosterDigest(g)).toBe(2);
    expect(await one.advanceRosterDigest(g)).toBe(3);
    expect(await one.getRosterDigest(g)).toBe(3);
    expect(await other.getRosterDigest(g)).toBe(3);
    // One item under a partition key of its own, moved by ADD alone.
    expect(await readItem(`${g}#digest`, 'digest')).toEqual({ pk: { S: `${g}#digest` }, sk: { S: 'digest' }, digest: { N: '3' } });
  });

  it('50 advances at once from 5 clients lose none: they return 1 to 50, each once, and the digest ends at 50', async () => {
    const clients = Array.from({ length: 5 }, () => storage());
    const g = group();
    const written = await Promise.all(Array.from({ length: 50 }, (_, i) => (clients[i % clients.length] as DynamoDBStorage).advanceRosterDigest(g)));
    expect([...written].sort((a, b) => a - b)).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
    expect(await (clients[0] as DynamoDBStorage).getRosterDigest(g)).toBe(50);
  });

  it('each group has its own digest, groups whose names are prefixes of one another included', async () => {
    const reader = storage();
    const g = group();
    const names = [g, `${g}x`, `${g}#`, `${g}#members`, `${g}#members#0`, `${g}-digest`];
    for (const [i, name] of names.entries()) for (let n = 0; n <= i; n++) await reader.advanceRosterDigest(name);
    expect(await Promise.all(names.map((name) => reader.getRosterDigest(name)))).toEqual([1, 2, 3, 4, 5, 6]);
    expect(await reader.getRosterDigest(`${g}y`)).toBe(0);
  });

  it("a group named <g>#digest keeps its leases, leader and members beside <g>'s digest, and no read or write of either group meets the other's items", async () => {
    const s = storage();
    const g = group();
    const h = `${g}#digest`;
    const hLeases = ['digest', 'member:w1', 'leader'];
    for (const leaseKey of hLeases) applied(await s.createLease({ group: h, leaseKey }));
    const hLeader = applied(await s.createLeader({ group: h, holder: 'h-leader', term: 2 }));
    const hMember = applied(await s.putMember(h, 'digest', null, memberState({ incarnation: 'of-h' })));
    const gMember = applied(await s.putMember(g, 'w1', null, memberState({ incarnation: 'of-g' })));
    expect(await s.advanceRosterDigest(g)).toBe(1);
    expect(await s.advanceRosterDigest(g)).toBe(2);

    // g's digest shares h's partition key with h's leases, leader and earlier-release roster item.
    const { Items } = await dynamo.client().send(
      new QueryCommand({ TableName: dynamo.tableName, KeyConditionExpression: 'pk = :pk', ExpressionAttributeValues: { ':pk': { S: h } }, ConsistentRead: true }),
    );
    expect((Items ?? []).map((item) => item.sk?.S).sort()).toEqual(['digest', 'leader', 'lease:digest', 'lease:leader', 'lease:member:w1', 'roster']);

    expect(await s.getRosterDigest(h)).toBe(0);
    expect(await s.advanceRosterDigest(h)).toBe(1);
    expect(await s.getRosterDigest(g)).toBe(2);
    const listing = await s.listLeases(h);
    expect(listing.leases.map((lease) => [lease.leaseKey, lease.version]).sort()).toEqual([['digest', 1], ['leader', 1], ['member:w1', 1]]);
    expect(listing.corrupt).toEqual([]);
    expect(await s.getLeader(h)).toEqual(hLeader);
    expect(await s.getRoster(h)).toEqual({ group: h, members: [hMember], corrupt: [] });
    expect(await s.getRoster(g)).toEqual({ group: g, members: [gMember], corrupt: [] });
    expect(await s.getMembers(h, ['digest', 'w1'])).toEqual({ group: h, members: [hMember], corrupt: [] });
    expect(await s.getMembers(g, ['digest', 'w1'])).toEqual({ group: g, members: [gMember], corrupt: [] });
    expect((await s.listLeases(g)).leases).toEqual([]);
    expect(await s.getLeader(g)).toBeNull();
  });

  it('a read that fails is a StorageUnavailableError; an advance whose answer is lost throws a StorageOutcomeUnknownError, and applied', async () => {
    const g = group();
    const throttled = storage(async (command, send) => {
      if (command === 'GetItemCommand') throw throttle();
      return send();
    }, { maxAttempts: 2 });
    await expect(throttled.getRosterDigest(g)).rejects.toThrow(
      new StorageUnavailableError(`[storage-dynamodb] could not read the roster digest of group "${g}": ProvisionedThroughputExceededException: injected throttle`),
    );
    const lost = storage(async (command, send) => {
      if (command !== 'UpdateItemCommand') return send();
      await send();
      throw Object.assign(new Error('injected: the response was lost after the request was sent'), { name: 'TimeoutError' });
    }, { maxAttempts: 1 });
    const error = await lost.advanceRosterDigest(g).catch((thrown: unknown) => thrown);
    expect(error).toBeInstanceOf(StorageOutcomeUnknownError);
    expect((error as Error).message).toBe(
      `[storage-dynamodb] advance of the roster digest of group "${g}" failed after 1 attempt(s) with TimeoutError: injected: the response was lost after the request was sent; it may or may not have applied`,
    );
    expect(await storage().getRosterDigest(g)).toBe(1);
  });

  it('a digest item whose digest is not a number is a CorruptRecordError naming the group, for reads and advances, and is left as it was', async () => {
    const s = storage();
    const g = group();
    expect(await s.advanceRosterDigest(g)).toBe(1);
    await dynamo.client().send(
      new UpdateItemCommand({
        TableName: dynamo.tableName,
        Key: { pk: { S: `${g}#digest` }, sk: { S: 'digest' } },
        UpdateExpression: 'SET #d = :bad',
        ExpressionAttributeNames: { '#d': 'digest' },
        ExpressionAttributeValues: { ':bad': { S: 'one' } },
      }),
    );
    const message = `[storage-dynamodb] stored roster digest of group "${g}" is corrupt: digest is {"S":"one"}`;
    for (const error of [await s.getRosterDigest(g).catch((thrown: unknown) => thrown), await s.advanceRosterDigest(g).catch((thrown: unknown) => thrown)]) {
      expect(error).toBeInstanceOf(CorruptRecordError);
      expect(error).toMatchObject({ message, group: g, leaseKey: undefined, workerId: undefined });
    }
    expect((await readItem(`${g}#digest`, 'digest'))?.digest).toEqual({ S: 'one' });
  });

  it('a missing table is a StorageSchemaError for the three', async () => {
    const s = new DynamoDBStorage({ client: dynamo.client(), tableName: 'no-such-table' });
    const message = '[storage-dynamodb] table "no-such-table" does not exist: create it with createTable()';
    await expect(s.getMembers('g', ['w'])).rejects.toThrow(new StorageSchemaError(message));
    await expect(s.getRosterDigest('g')).rejects.toThrow(new StorageSchemaError(message));
    await expect(s.advanceRosterDigest('g')).rejects.toThrow(new StorageSchemaError(message));
  });
});

describe('DynamoDBStorage watchers: what they cost', () => {
  it('a digest read is 1 read unit and an advance 1 write unit; getMembers of 3 typical members is 3 read units, one per item, as 3 GetItems would be', async () => {
    const g = group();
    const workerId = (i: number): string => `ip-10-0-0-${i}.eu-west-1.compute.internal-48213-${String(i).padStart(6, '0')}`;
    const state = memberState({ incarnation: '0b7d4c1e-93a2-4d8f-b6e1-5c2f7a9e3d10', held: 12, changes: 41 });
    const writer = storage();
    for (const i of [1, 2, 3]) applied(await writer.putMember(g, workerId(i), null, state));
    const metered = meter(dynamo.client());
    const s = new DynamoDBStorage({ client: metered.client, tableName: dynamo.tableName });

    await s.advanceRosterDigest(g);
    await s.getRosterDigest(g);
    await s.getMembers(g, [1, 2, 3].map(workerId));

    expect(metered.log.map(({ command, units }) => [command, units])).toEqual([
      ['UpdateItemCommand', 1],
      ['GetItemCommand', 1],
      ['BatchGetItemCommand', 3],
    ]);
    const digestBytes = itemBytes((await readItem(`${g}#digest`, 'digest')) ?? {});
    const memberBytes = itemBytes((await readItem(memberItemKey(g, workerId(1)).pk?.S ?? '', `member:${workerId(1)}`)) ?? {});
    expect(digestBytes).toBeLessThan(100);
    expect(memberBytes).toBeGreaterThan(250);
    expect(memberBytes).toBeLessThan(350);
    // A group that was never advanced still pays for the read of no item.
    metered.log.length = 0;
    await s.getRosterDigest(group());
    expect(metered.log.map(({ units }) => units)).toEqual([1]);
  });
});
