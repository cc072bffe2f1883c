/**
 * The roster digest's moves (`getRosterMoves`, and the names an `advanceRosterDigest` keeps) as this adapter
 * keeps them: a ring of slots under `<group>#moves` (src/roster-moves.ts), beyond what the conformance
 * suite asks of every adapter (what a read costs, what a slot that is late, lost, overwritten or damaged
 * reads as).
 */
import { describe, expect, it } from 'vitest';
import { DeleteItemCommand, GetItemCommand, ProvisionedThroughputExceededException, PutItemCommand, UpdateItemCommand, type AttributeValue } from '@aws-sdk/client-dynamodb';
import { InvalidInputError, type WriteResult } from '@leasehold/core';
import { limits } from '@leasehold/core/adapter';
import { DynamoDBStorage } from '../src/index.js';
import { injectFaults, memberState, meter, useDynalite, type Injection } from './support.js';

const dynamo = useDynalite('moves');
let groupCount = 0;

function group(): string {
  return `moving-${process.pid}-${groupCount++}`;
}

function storage(inject?: Injection): DynamoDBStorage {
  const client = dynamo.client({ maxAttempts: 1 });
  return new DynamoDBStorage({ client: inject ? injectFaults(client, inject) : client, tableName: dynamo.tableName });
}

function applied<T>(outcome: WriteResult<T>): T {
  expect(outcome.status).toBe('applied');
  return (outcome as { record: T }).record;
}

function slotKey(g: string, slot: number): Record<string, AttributeValue> {
  return { pk: { S: `${g}#moves` }, sk: { S: `move:${String(slot).padStart(3, '0')}` } };
}

async function readSlot(g: string, slot: number): Promise<Record<string, AttributeValue> | undefined> {
  const { Item } = await dynamo.client().send(new GetItemCommand({ TableName: dynamo.tableName, Key: slotKey(g, slot), ConsistentRead: true }));
  return Item;
}

/** Writes a slot as another writer would: an advance `digest` naming `named`. */
async function writeSlot(g: string, slot: number, digest: number, named: string[]): Promise<void> {
  await dynamo.client().send(
    new PutItemCommand({ TableName: dynamo.tableName, Item: { ...slotKey(g, slot), digest: { N: String(digest) }, named: { L: named.map((name) => ({ S: name })) } } }),
  );
}

async function movesOf(s: DynamoDBStorage, g: string, since: number): Promise<{ digest: number; moved: string[] | null }> {
  const moves = await s.getRosterMoves(g, since);
  return { digest: moves.digest, moved: moves.moved === null ? null : [...moves.moved].sort() };
}

function throttle(): ProvisionedThroughputExceededException {
  return new ProvisionedThroughputExceededException({ message: 'injected throttle', $metadata: { httpStatusCode: 400 } });
}

describe('DynamoDBStorage roster moves', () => {
  it("an advance naming members writes its slot (digest modulo 256) beside the digest; a read of the moves is the digest's GetItem, and one Query of the slots only when the digest moved", async () => {
    const g = group();
    const metered = meter(dynamo.client());
    const s = new DynamoDBStorage({ client: metered.client, tableName: dynamo.tableName });
    expect(await s.advanceRosterDigest(g, ['w1'])).toBe(1);
    expect(await s.advanceRosterDigest(g, ['w2', 'w3', 'w2'])).toBe(2);
    expect(await readSlot(g, 2)).toEqual({ ...slotKey(g, 2), digest: { N: '2' }, named: { L: [{ S: 'w2' }, { S: 'w3' }] } });
    // An advance that names nobody writes no slot.
    expect(await s.advanceRosterDigest(g)).toBe(3);
    expect(await readSlot(g, 3)).toBeUndefined();
    expect(metered.log.map(({ command, units }) => [command, units])).toEqual([
      ['UpdateItemCommand', 1],
      ['PutItemCommand', 1],
      ['UpdateItemCommand', 1],
      ['PutItemCommand', 1],
      ['UpdateItemCommand', 1],
    ]);

    metered.log.length = 0;
    expect(await movesOf(s, g, 3)).toEqual({ digest: 3, moved: [] });
    expect(await movesOf(s, g, 1)).toEqual({ digest: 3, moved: null });
    expect(await s.advanceRosterDigest(g, ['w4'])).toBe(4);
    expect(await movesOf(s, g, 3)).toEqual({ digest: 4, moved: ['w4'] });
    expect(metered.log.map(({ command, units }) => [command, units])).toEqual([
      ['GetItemCommand', 1],
      ['GetItemCommand', 1],
      ['QueryCommand', 1],
      ['UpdateItemCommand', 1],
      ['PutItemCommand', 1],
      ['GetItemCommand', 1],
      ['QueryCommand', 1],
    ]);
    // A since further back than the ring holds reads null from the digest alone.
    metered.log.length = 0;
    expect(await movesOf(s, g, 0)).toEqual({ digest: 4, moved: null });
    expect(await movesOf(s, group(), 0)).toEqual({ digest: 0, moved: [] });
    expect(metered.log.map(({ command }) => command)).toEqual(['GetItemCommand', 'QueryCommand', 'GetItemCommand']);
  });

  it("names the moves only while reading them by key (a read unit each, one for the slots) costs no more than this client's last whole roster read: past that, null, and a worker reads the whole roster", async () => {
    const g = group();
    const writer = storage();
    const workerId = (i: number): string => `ip-10-0-0-${i}.eu-west-1.compute.internal-48213-${String(i).padStart(6, '0')}`;
    for (let i = 0; i < 20; i++) applied(await writer.putMember(g, workerId(i), null, memberState({ incarnation: '0b7d4c1e-93a2-4d8f-b6e1-5c2f7a9e3d10', held: 12 })));
    for (let i = 0; i < 4; i++) await writer.advanceRosterDigest(g, [workerId(i)]);
    const metered = meter(dynamo.client());
    const s = new DynamoDBStorage({ client: metered.client, tableName: dynamo.tableName });
    // Before this client read the roster whole, it names them all.
    expect((await movesOf(s, g, 0)).moved).toHaveLength(4);
    metered.log.length = 0;
    await s.getRoster(g);
    const whole = metered.log.reduce((sum, { units }) => sum + units, 0);
    // 20 members of about 290 bytes over four keys: one unit a key.
    expect(whole).toBe(4);
    expect(await movesOf(s, g, 1)).toEqual({ digest: 4, moved: [1, 2, 3].map(workerId).sort() });
    expect(await movesOf(s, g, 0)).toEqual({ digest: 4, moved: null });
  });

  it('a range of advances that wraps past slot 255 is read with two Queries, and names every advance in it', async () => {
    const g = group();
    const writer = storage();
    for (let i = 1; i <= limits.rosterMovesKept + 4; i++) await writer.advanceRosterDigest(g, [`w${i}`]);
    const metered = meter(dynamo.client());
    const s = new DynamoDBStorage({ client: metered.client, tableName: dynamo.tableName });
    const since = limits.rosterMovesKept - 3;
    expect(await movesOf(s, g, since)).toEqual({ digest: limits.rosterMovesKept + 4, moved: Array.from({ length: 7 }, (_, i) => `w${since + 1 + i}`).sort() });
    expect(metered.log.map(({ command }) => command)).toEqual(['GetItemCommand', 'QueryCommand', 'QueryCommand']);
    expect((await movesOf(s, g, 4)).moved).toHaveLength(limits.rosterMovesKept);
    expect((await movesOf(s, g, 3)).moved).toBeNull();
  });

  it('a slot whose write has not landed, or that an advance 256 later wrote, reads as an advance that named nobody: null, never another advance\'s names', async () => {
    const g = group();
    const s = storage();
    for (const name of ['a', 'b', 'c']) await s.advanceRosterDigest(g, [name]);
    // Advance 2's slot as an advance 256 later leaves it.
    await writeSlot(g, 2, 2 + limits.rosterMovesKept, ['later']);
    expect(await movesOf(s, g, 0)).toEqual({ digest: 3, moved: null });
    expect(await movesOf(s, g, 2)).toEqual({ digest: 3, moved: ['c'] });
    // Advance 3's slot not written yet.
    await dynamo.client().send(new DeleteItemCommand({ TableName: dynamo.tableName, Key: slotKey(g, 3) }));
    expect(await movesOf(s, g, 2)).toEqual({ digest: 3, moved: null });
    // Advance 4's slot holding advance 4 - 256 (an older ring's): read across it, null.
    await writeSlot(g, 4, 4, ['placeholder']);
    await writeSlot(g, 4, 4 + limits.rosterMovesKept * 2, ['much later']);
    expect(await s.advanceRosterDigest(g, ['d'])).toBe(4);
    expect(await movesOf(s, g, 3)).toEqual({ digest: 4, moved: null });
  });

  it('an advance never writes its slot back over a later advance: a slot write that lands late keeps the later names', async () => {
    const g = group();
    const s = storage();
    for (const name of ['a', 'b']) await s.advanceRosterDigest(g, [name]);
    await writeSlot(g, 3, 3 + limits.rosterMovesKept, ['later']);
    expect(await s.advanceRosterDigest(g, ['late'])).toBe(3);
    expect(await readSlot(g, 3)).toMatchObject({ digest: { N: String(3 + limits.rosterMovesKept) }, named: { L: [{ S: 'later' }] } });
    expect(await movesOf(s, g, 2)).toEqual({ digest: 3, moved: null });
  });

  it('a slot write that fails leaves the advance applied and returned; reads across it are null, and later advances name as before', async () => {
    const g = group();
    const failing = storage(async (command, send) => {
      if (command === 'PutItemCommand') throw throttle();
      return send();
    });
    const s = storage();
    expect(await s.advanceRosterDigest(g, ['a'])).toBe(1);
    expect(await failing.advanceRosterDigest(g, ['lost'])).toBe(2);
    expect(await s.getRosterDigest(g)).toBe(2);
    expect(await s.advanceRosterDigest(g, ['c'])).toBe(3);
    expect(await movesOf(s, g, 0)).toEqual({ digest: 3, moved: null });
    expect(await movesOf(s, g, 2)).toEqual({ digest: 3, moved: ['c'] });
  });

  it('a slot that cannot be read back (names of the wrong type, an empty name, a digest that is not a number) reads as naming nobody, and is left as it was', async () => {
    const g = group();
    const s = storage();
    for (const name of ['a', 'b', 'c', 'd']) await s.advanceRosterDigest(g, [name]);
    const damage = async (slot: number, expression: string, value: AttributeValue): Promise<void> => {
      await dynamo.client().send(
        new UpdateItemCommand({ TableName: dynamo.tableName, Key: slotKey(g, slot), UpdateExpression: expression, ExpressionAttributeValues: { ':bad': value } }),
      );
    };
    await damage(2, 'SET named = :bad', { S: 'b' });
    await damage(3, 'SET named = :bad', { L: [{ S: '' }] });
    await damage(4, 'SET digest = :bad', { S: '4' });
    for (const since of [1, 2, 3]) expect(await movesOf(s, g, since)).toEqual({ digest: 4, moved: null });
    expect(await movesOf(s, g, 0)).toEqual({ digest: 4, moved: null });
    expect((await readSlot(g, 2))?.named).toEqual({ S: 'b' });
    expect((await readSlot(g, 4))?.digest).toEqual({ S: '4' });
    // The next advance writes over a damaged slot only when it is its own: slot 5 is new, and reads back.
    expect(await s.advanceRosterDigest(g, ['e'])).toBe(5);
    expect(await movesOf(s, g, 4)).toEqual({ digest: 5, moved: ['e'] });
  });

  it("a group named <g>#moves keeps its leases, leader and members beside <g>'s slots, and no read of either group meets the other's items", async () => {
    const s = storage();
    const g = group();
    const h = `${g}#moves`;
    for (const leaseKey of ['move:001', 'move:002', 'digest']) applied(await s.createLease({ group: h, leaseKey }));
    const hMember = applied(await s.putMember(h, 'move:001', null, memberState()));
    await s.advanceRosterDigest(g, ['g-member']);
    await s.advanceRosterDigest(g, ['g-member-2']);
    await s.advanceRosterDigest(h, ['h-member']);
    expect(await movesOf(s, g, 0)).toEqual({ digest: 2, moved: ['g-member', 'g-member-2'] });
    expect(await movesOf(s, h, 0)).toEqual({ digest: 1, moved: ['h-member'] });
    expect((await s.listLeases(h)).leases.map((lease) => lease.leaseKey).sort()).toEqual(['digest', 'move:001', 'move:002']);
    expect((await s.listLeases(h)).corrupt).toEqual([]);
    expect((await s.getRoster(h)).members).toEqual([hMember]);
    expect((await s.listLeases(g)).leases).toEqual([]);
  });

  it(`a since that is not a digest, or an advance naming more than ${limits.maxWatchedMembers} members or a bad id, is an InvalidInputError before anything is sent`, async () => {
    let sent = 0;
    const counting = storage(async (_command, send) => {
      sent++;
      return send();
    });
    const g = group();
    await expect(counting.getRosterMoves(g, -1)).rejects.toThrow(InvalidInputError);
    await expect(counting.getRosterMoves(g, 1.5)).rejects.toThrow(InvalidInputError);
    await expect(counting.getRosterMoves('', 0)).rejects.toThrow(InvalidInputError);
    await expect(counting.advanceRosterDigest(g, Array.from({ length: limits.maxWatchedMembers + 1 }, (_, i) => `w${i}`))).rejects.toThrow(
      new InvalidInputError(`[storage-dynamodb] at most ${limits.maxWatchedMembers} worker ids may be read at once, got ${limits.maxWatchedMembers + 1}`),
    );
    await expect(counting.advanceRosterDigest(g, ['w', ''])).rejects.toThrow(InvalidInputError);
    expect(sent).toBe(0);
    expect(await counting.getRosterDigest(g)).toBe(0);
  });
});
