import { describe, expect, it } from 'vitest';
import { MemoryStorage, type LeaseRecord, type MemberRecord } from '../src/index.js';
import { RECORD_FORMAT } from '../src/adapter.js';
import { noFaults, seededRandom, VirtualClock, VirtualScheduler } from '../src/testing/index.js';
import { CountingStorage } from '../bench/cluster.js';
import { run } from './support/virtual.js';
import {
  digestItemBytes,
  moveSlotBytes,
  digestRedisBytes,
  kclLeaseItemBytes,
  kclMonthly,
  leaseItemBytes,
  leaseJsonBytes,
  memberItemBytes,
  memberJsonBytes,
  memberTombstoneBytes,
  monthlyUsd,
  pagedReadUnits,
  readUnits,
  rosterQuery,
  writeUnits,
} from '../bench/billing.js';
import { byUtf8, membersKey, numberBytes } from '../bench/roster-size.js';
import { emptyUsage, hottestItem, hottestPartition, Ledger, Meter, mostWrittenItem } from '../bench/meter.js';

/** A worker id as long as a cloud host's default one: 54 bytes. */
const REAL_ID = 'ip-10-0-000-45.eu-west-1.compute.internal-12345-k3j9x2';

const lease: LeaseRecord = {
  group: 'bench',
  leaseKey: 'shard-000001',
  version: 3,
  format: RECORD_FORMAT,
  owner: 'w1',
  epoch: 2,
  checkpoint: null,
  parentKeys: [],
  incarnation: 'abcd',
  metadata: {},
};
const leaseJson = JSON.stringify({ format: RECORD_FORMAT, owner: 'w1', epoch: 2, checkpoint: null, parentKeys: [], incarnation: 'abcd', metadata: {} });

const member: MemberRecord = {
  group: 'bench',
  workerId: 'w1',
  version: 7,
  format: RECORD_FORMAT,
  incarnation: 'abcd',
  leaseDurationMs: 10_000,
  status: 'alive',
  held: 100,
  changes: 1,
  requests: [],
  metadata: {},
};
const memberJson = JSON.stringify({ format: RECORD_FORMAT, incarnation: 'abcd', leaseDurationMs: 10_000, status: 'alive', held: 100, changes: 1, requests: [], metadata: {} });

describe('DynamoDB item sizes and units, by the rules AWS documents', () => {
  it.each([
    [1, 2],
    [7, 2],
    [12, 2],
    [123, 3],
    [12_345, 4],
    [100_000, 2],
    [123_456, 4],
    [1_234_567, 5],
    [10.5, 3],
  ])('the number %d is billed as %d bytes (a byte per two digits paired from the decimal point, plus one)', (value, size) => {
    expect(numberBytes(value)).toBe(size);
  });

  it.each([
    [1, 1],
    [1_024, 1],
    [1_025, 2],
    [27_020, 27],
  ])('a write of an item of %d bytes costs %d write units (1 KB each)', (size, units) => {
    expect(writeUnits(size)).toBe(units);
  });

  it.each([
    [1, 1],
    [4_096, 1],
    [4_097, 2],
    [27_020, 7],
  ])('a strongly consistent read of an item of %d bytes costs %d read units (4 KB each)', (size, units) => {
    expect(readUnits(size)).toBe(units);
  });

  it.each([
    { items: [] as number[], units: 0 },
    { items: [100, 100], units: 1 },
    { items: [3_000, 3_000], units: 2 },
    // 262 items fill the first 1 MB page (1,048,000 bytes: 256 units), the other 38 the second (38 units);
    // billed as one sum it would be 293.
    { items: Array.from({ length: 300 }, () => 4_000), units: 294 },
  ])('a query of $items.length items costs $units read units: their sizes summed and rounded up per 4 KB, per page', ({ items, units }) => {
    expect(pagedReadUnits(items)).toBe(units);
  });

  it('a lease item is its key, version, epoch, state JSON and a 36-character write id', () => {
    // pk bench, sk lease:shard-000001, version 3, epoch 2, state, writeId.
    expect(leaseItemBytes(lease)).toBe(2 + 5 + 2 + 18 + 7 + 2 + 5 + 2 + 5 + Buffer.byteLength(leaseJson) + 7 + 36);
    expect(Buffer.byteLength(leaseJson)).toBe(leaseJsonBytes(lease) - 'shard-000001'.length);
  });

  it("a member is an item of its own: pk <group>#members#<its worker id's bucket>, sk member:<workerId>, version, state JSON and a 16-character write id", () => {
    // pk bench#members#3 (w1's bucket), sk member:w1, version 7, state, writeId.
    expect(membersKey('bench', 'w1')).toBe('bench#members#3');
    expect(memberItemBytes(member)).toBe(2 + 15 + 2 + 9 + 7 + 2 + 5 + Buffer.byteLength(memberJson) + 7 + 16);
    expect(memberItemBytes(member, REAL_ID) - memberItemBytes(member)).toBe(REAL_ID.length - 2);
  });

  it.each([
    { what: 'with a 2-byte worker id', id: 'w1', bytes: 190, wcu: 1 },
    { what: "with a cloud host's 54-byte worker id", id: REAL_ID, bytes: 242, wcu: 1 },
  ])('a heartbeat of a member $what writes a $bytes-byte item: $wcu write unit at any group size', ({ id, bytes, wcu }) => {
    expect(memberItemBytes(member, id)).toBe(bytes);
    expect(writeUnits(memberItemBytes(member, id))).toBe(wcu);
  });

  it("a removed member's tombstone keeps its keys and last version, and removed, without its state and write id", () => {
    // pk bench#members#3, sk member:w1, version 8, removed (a boolean, 1 byte).
    expect(memberTombstoneBytes('bench', 'w1', 8)).toBe(2 + 15 + 2 + 9 + 7 + 2 + 7 + 1);
  });

  it.each([
    { what: 'no member', sizes: [] as number[], bytes: 0, byBucket: [1, 1, 1, 1] },
    // w0 to w9 fall 0, 4, 3 and 3 to the buckets: each Query under 4 KB, the empty one too, 1 unit.
    { what: '10 members of 300 bytes', sizes: Array.from({ length: 10 }, () => 300), bytes: 3_000, byBucket: [1, 1, 1, 1] },
    // 241, 239, 263 and 257 members: 72,300 bytes (18 units), 71,700 (18), 78,900 (20), 77,100 (19).
    { what: '1,000 members of 300 bytes', sizes: Array.from({ length: 1_000 }, () => 300), bytes: 300_000, byBucket: [18, 18, 20, 19] },
    // 1,026, 970, 989 and 1,015 members, each bucket one page under 1 MB (in one Query: two pages, 293 units).
    { what: '4,000 members of 300 bytes', sizes: Array.from({ length: 4_000 }, () => 300), bytes: 1_200_000, byBucket: [76, 72, 73, 75] },
  ])("a roster read of $what is one Query per bucket: $bytes bytes, each bucket's units at least 1", ({ sizes, bytes, byBucket }) => {
    const read = rosterQuery('bench', sizes.map((size, i) => ({ workerId: `w${i}`, bytes: size })));
    expect(read).toEqual({ bytes, units: byBucket.reduce((sum, units) => sum + units, 0), byKey: new Map(byBucket.map((units, bucket) => [`bench#members#${bucket}`, units])) });
  });

  it('a Query of more than 1 MB is paged: 3,495 items of 300 bytes fill the first page (1,048,500 bytes: 256 units), the other 505 the second (151,500: 37)', () => {
    expect(pagedReadUnits(Array.from({ length: 4_000 }, () => 300))).toBe(293);
  });

  it('sort keys are in the order of their UTF-8 bytes, as DynamoDB keeps them', () => {
    // JavaScript's < compares UTF-16 units and puts U+1F600 (D83D DE00) before U+FF5E; UTF-8 puts U+FF5E (EF BD 9E) first.
    expect(byUtf8(['\u{1F600}', '\uFF5E', 'b', 'a'], (id) => id)).toEqual(['a', 'b', '\uFF5E', '\u{1F600}']);
  });
});

describe('Redis and Postgres: the bytes of the stored JSON', () => {
  it('Redis keeps a member as a field of the roster hash: its worker id and its state JSON', () => {
    expect(memberJsonBytes(member)).toBe(2 + Buffer.byteLength(memberJson));
  });

  it('Postgres keeps a member as a row of the members table: the same worker id and state JSON', () => {
    expect(memberJsonBytes({ ...member, workerId: REAL_ID })).toBe(REAL_ID.length + Buffer.byteLength(memberJson));
  });
});

describe('the meter, on the layout of member items', () => {
  const memberOf = (workerId: string, version: number): MemberRecord => ({ ...member, workerId, version });
  const applied = (record: MemberRecord) => ({ status: 'applied', record }) as const;

  it("bills a heartbeat as one UpdateItem of the member's own item, a join also as reads of the layouts before, and the group's first join their markings", () => {
    const meter = new Meter(new Ledger('bench'));
    meter.putMember('w1', null, applied(memberOf('w1', 1)));
    meter.putMember('w1', 1, applied(memberOf('w1', 2)));
    // The join: its item (1), the earlier roster item read (1) and marked (1), the old members' key
    // queried (1), marked (1) and queried again (1); the heartbeat: its item (1).
    expect(meter.usage.byOp.putMember).toMatchObject({ calls: 2, wru: 4, rru: 3, written: { dynamodb: 2 * memberItemBytes(memberOf('w1', 2)), redis: 2 * memberJsonBytes(member), postgres: 2 * memberJsonBytes(member) } });
    expect(meter.usage.byItem.get('member:w1')).toMatchObject({ partition: 'bench#members#3', writes: 2, wru: 2 });
    expect(meter.usage.byPartition.get('bench#members#3')).toMatchObject({ writes: 2, wru: 2, reads: 0 });
    expect(meter.usage.byPartition.get('bench')).toMatchObject({ writes: 1, wru: 1, reads: 1, rru: 1 });
    expect(meter.usage.byPartition.get('bench#members')).toMatchObject({ writes: 1, wru: 1, reads: 2, queries: 2, rru: 2 });
    // A later join only reads each: the earlier roster item once, the old members' key once.
    meter.putMember('w2', null, applied(memberOf('w2', 1)));
    expect(meter.usage.byPartition.get('bench')).toMatchObject({ writes: 1, reads: 2 });
    expect(meter.usage.byPartition.get('bench#members')).toMatchObject({ writes: 1, reads: 3, queries: 3 });
  });

  it("bills a write whose condition failed on the item it found, and one that found nothing as 1 write unit", () => {
    const meter = new Meter(new Ledger('bench'));
    const current = { ...memberOf('w1', 5), metadata: { note: 'x'.repeat(1_500) } };
    meter.putMember('w1', 4, { status: 'conflict', current });
    meter.putMember('w2', 4, { status: 'conflict', current: null });
    expect(meter.usage.byOp.putMember).toMatchObject({ wru: writeUnits(memberItemBytes(current)) + 1, written: { redis: 0, postgres: 0 } });
    expect(writeUnits(memberItemBytes(current))).toBe(2);
  });

  it("bills a roster read as one Query of each bucket's member items, the tombstones of removed members included", () => {
    const ledger = new Ledger('bench');
    const meter = new Meter(ledger);
    for (const [i, workerId] of ['w1', 'w2', 'w3'].entries()) meter.putMember(workerId, null, applied(memberOf(workerId, i + 1)));
    meter.removeMember('w3', 3, { status: 'applied' });
    meter.usage = emptyUsage();
    meter.getRoster([memberOf('w1', 1), memberOf('w2', 2)]);
    const items = [memberItemBytes(memberOf('w1', 1)), memberItemBytes(memberOf('w2', 2)), memberTombstoneBytes('bench', 'w3', 3)];
    const expected = rosterQuery('bench', items.map((bytes, i) => ({ workerId: `w${i + 1}`, bytes })));
    // w1 and w2 in bucket 3, w3's tombstone in bucket 1, buckets 0 and 2 empty: 1 unit each.
    expect(expected.units).toBe(4);
    expect(meter.usage.byOp.getRoster).toMatchObject({ rru: expected.units, read: { dynamodb: expected.bytes, redis: 2 * memberJsonBytes(member), postgres: 2 * memberJsonBytes(member) } });
    for (const bucket of [0, 1, 2, 3]) expect(meter.usage.byPartition.get(`bench#members#${bucket}`)).toMatchObject({ reads: 1, queries: 1, rru: 1 });
  });

  it("bills a read that returns other members than the ledger knows by what it returned, and learns them", () => {
    const ledger = new Ledger('bench');
    const meter = new Meter(ledger);
    meter.putMember('w1', null, applied(memberOf('w1', 1)));
    // w2 joined through a client the ledger did not see; the next read finds it.
    meter.getRoster([memberOf('w1', 1), memberOf('w2', 2)]);
    const both = rosterQuery('bench', [{ workerId: 'w1', bytes: memberItemBytes(memberOf('w1', 1)) }, { workerId: 'w2', bytes: memberItemBytes(memberOf('w2', 2)) }]);
    expect(meter.usage.byOp.getRoster).toMatchObject({ read: { dynamodb: both.bytes, redis: 2 * memberJsonBytes(member) } });
    expect(ledger.liveMembers).toBe(2);
    expect(ledger.rosterQuery()).toEqual(both);
  });

  it('finds the hottest item (writes and the Queries that read it) and the partition key nearest its limits', () => {
    const meter = new Meter(new Ledger('bench'));
    meter.putMember('w1', null, applied(memberOf('w1', 1)));
    meter.putMember('w2', null, applied(memberOf('w2', 2)));
    meter.putMember('w1', 1, applied(memberOf('w1', 3)));
    for (let i = 0; i < 3; i++) meter.getRoster([memberOf('w1', 3), memberOf('w2', 2)]);
    expect(hottestItem(meter.usage)).toEqual({ item: 'member:w1', partition: 'bench#members#3', writes: 2, wru: 2, reads: 3, rru: 3 });
    // bench#members#3 (w1 and w2): 3 WCU in a second, 0.3% of a partition's 1,000 WCU; bench#members (the
    // key of the release before): the marker and the joins' 3 Queries, 0.1%; bench: the joins' reads.
    expect(hottestPartition(meter.usage, 1)).toMatchObject({ partition: 'bench#members#3', share: 3 / 1_000 });
  });
});

describe("the meter, on the watchers' reads and the roster digest", () => {
  const memberOf = (workerId: string, version: number): MemberRecord => ({ ...member, workerId, version });
  const applied = (record: MemberRecord) => ({ status: 'applied', record }) as const;

  it("bills a watcher's read of its members as one BatchGetItem: each item a strongly consistent GetItem of its own, a tombstone on its size and an id with no item 1 unit", () => {
    const ledger = new Ledger('bench');
    const meter = new Meter(ledger);
    const big = { ...memberOf('w2', 2), metadata: { note: 'x'.repeat(5_000) } };
    meter.putMember('w1', null, applied(memberOf('w1', 1)));
    meter.putMember('w2', null, applied(big));
    meter.putMember('w3', null, applied(memberOf('w3', 3)));
    meter.removeMember('w3', 3, { status: 'applied' });
    meter.usage = emptyUsage();
    // w1 twice (read once), w2 of two 4 KB units, w3 a tombstone, w4 never joined.
    meter.getMembers(['w1', 'w2', 'w3', 'w4', 'w1'], [memberOf('w1', 1), big]);
    expect(readUnits(memberItemBytes(big))).toBe(2);
    const bytes = memberItemBytes(memberOf('w1', 1)) + memberItemBytes(big) + memberTombstoneBytes('bench', 'w3', 3);
    const json = memberJsonBytes(memberOf('w1', 1)) + memberJsonBytes(big);
    expect(meter.usage.byOp.getMembers).toMatchObject({ calls: 1, rru: 1 + 2 + 1 + 1, read: { dynamodb: bytes, redis: json, postgres: json } });
    expect(meter.usage.byItem.get('member:w2')).toMatchObject({ partition: 'bench#members#3', reads: 1, rru: 2 });
    // w1 and w2 in bucket 3, w3 in bucket 1, w4 in bucket 2.
    expect(meter.usage.byPartition.get('bench#members#3')).toMatchObject({ reads: 2, queries: 0, rru: 3 });
    expect(meter.usage.byPartition.get('bench#members#1')).toMatchObject({ reads: 1, queries: 0, rru: 1 });
    expect(meter.usage.byPartition.get('bench#members#2')).toMatchObject({ reads: 1, queries: 0, rru: 1 });
  });

  it('bills the digest as one small item under a partition key of its own: a read 1 read unit, an advance 1 write unit', () => {
    const meter = new Meter(new Ledger('bench'));
    meter.advanceRosterDigest(1);
    meter.getRosterDigest(1);
    meter.getRosterDigest(1);
    expect(meter.usage.byOp.getRosterDigest).toMatchObject({ calls: 2, rru: 2, read: { dynamodb: 2 * digestItemBytes('bench', 1), redis: 2 * digestRedisBytes('bench', 1), postgres: 16 } });
    expect(meter.usage.byOp.advanceRosterDigest).toMatchObject({ calls: 1, wru: 1, written: { dynamodb: digestItemBytes('bench', 1), postgres: 8 } });
    expect(meter.usage.byItem.get('digest')).toMatchObject({ partition: 'bench#digest', reads: 2, rru: 2, writes: 1, wru: 1 });
    expect(meter.usage.byPartition.get('bench#digest')).toMatchObject({ reads: 2, rru: 2, writes: 1, wru: 1 });
  });

  it("bills the digest's moves as the DynamoDB adapter keeps them: an advance naming members also puts its slot under <group>#moves; a read of moved advances is one Query of their slots, two where the range wraps", () => {
    const meter = new Meter(new Ledger('bench'));
    meter.advanceRosterDigest(1, ['w1', 'w1']);
    meter.advanceRosterDigest(2, []);
    meter.advanceRosterDigest(3);
    expect(meter.usage.byOp.advanceRosterDigest).toMatchObject({ calls: 3, wru: 4 });
    expect(meter.usage.byPartition.get('bench#moves')).toMatchObject({ writes: 1, wru: 1 });
    expect(moveSlotBytes('bench', 1, ['w1'])).toBe(2 + 11 + 2 + 8 + 6 + 2 + 5 + 3 + 1 + 2);

    meter.getRosterMoves(3, 3, []);
    expect(meter.usage.byPartition.get('bench#moves')?.reads ?? 0).toBe(0);
    meter.getRosterMoves(3, 1, ['w1', 'w2']);
    expect(meter.usage.byOp.getRosterMoves).toMatchObject({ calls: 2, rru: 1 });
    meter.getRosterMoves(258, 250, ['w1']);
    expect(meter.usage.byOp.getRosterMoves).toMatchObject({ calls: 3, rru: 3 });
    // Further back than the 256 slots: the digest alone.
    meter.getRosterMoves(300, 1, null);
    expect(meter.usage.byOp.getRosterMoves).toMatchObject({ calls: 4, rru: 3 });
    expect(meter.usage.byOp.getRosterDigest).toMatchObject({ calls: 4, rru: 4 });
    expect(meter.usage.byPartition.get('bench#moves')).toMatchObject({ reads: 3, queries: 3, rru: 3 });
  });

  it('bills a read of a digest never advanced as 1 read unit of no item', () => {
    const meter = new Meter(new Ledger('bench'));
    meter.getRosterDigest(0);
    expect(meter.usage.byOp.getRosterDigest).toMatchObject({ rru: 1, read: { dynamodb: 0, redis: 0, postgres: 0 } });
  });

  it('sizes the digest item as its keys and a number: pk bench#digest, sk digest, digest', () => {
    expect(digestItemBytes('bench', 7)).toBe(2 + 12 + 2 + 6 + 6 + 2);
    expect(digestRedisBytes('bench', 123)).toBe('leasehold:{YmVuY2g}:roster-digest'.length + 3);
  });

  it('tells the item with the most requests from the item written most', () => {
    const meter = new Meter(new Ledger('bench'));
    meter.putMember('w1', null, applied(memberOf('w1', 1)));
    meter.putMember('w1', 1, applied(memberOf('w1', 2)));
    for (let i = 0; i < 5; i++) meter.getRosterDigest(1);
    expect(hottestItem(meter.usage)).toMatchObject({ item: 'digest', reads: 5, writes: 0 });
    expect(mostWrittenItem(meter.usage)).toMatchObject({ item: 'member:w1', writes: 2 });
  });
});

describe("the bench's counting store", () => {
  it("counts and bills the watchers' reads and the digest's advances, which the fault-injecting store holds as properties", async () => {
    const scheduler = new VirtualScheduler();
    const inner = new MemoryStorage();
    const storage = new CountingStorage(inner, new VirtualClock(scheduler), seededRandom(1), noFaults());
    storage.meter = new Meter(new Ledger('bench'));
    await inner.putMember('bench', 'w1', null, { ...memberOf('w1') });
    await run(scheduler, storage.advanceRosterDigest!('bench'));
    expect(await run(scheduler, storage.getRosterDigest!('bench'))).toBe(1);
    const roster = await run(scheduler, storage.getMembers!('bench', ['w1', 'w2']));
    expect(roster.members.map((read) => read.workerId)).toEqual(['w1']);
    expect(storage.counts).toMatchObject({
      calls: { advanceRosterDigest: 1, getRosterDigest: 1, getMembers: 1 },
      itemsRead: 2,
      itemsReadBy: { getRosterDigest: 1, getMembers: 1 },
      itemsWritten: 1,
      digestWrites: 1,
    });
    expect(storage.meter.usage.byOp).toMatchObject({ getMembers: { calls: 1, rru: 2 }, getRosterDigest: { rru: 1 }, advanceRosterDigest: { wru: 1 } });
  });

  function memberOf(workerId: string): Omit<MemberRecord, 'group' | 'workerId' | 'version'> {
    const { group: _group, workerId: _workerId, version: _version, ...state } = { ...member, workerId };
    return state;
  }
});

describe("KCL 2.x's lease table and the monthly bill", () => {
  it('a KCL lease item before its first checkpoint, owned by a 54-byte worker id, is 328 bytes', () => {
    expect(kclLeaseItemBytes(0, REAL_ID)).toBe(328);
  });

  it.each([
    { wru: 1_000, rru: 0, usd: 27 },
    { wru: 0, rru: 1_000, usd: 5.4 },
    { wru: 18_000, rru: 0, usd: 486 },
  ])('$wru write and $rru read units a minute cost $usd dollars a month on demand', ({ wru, rru, usd }) => {
    expect(monthlyUsd(wru, rru)).toBeCloseTo(usd, 6);
  });

  it('KCL at 10 x 1,000: 18,000 renewals a minute, and 10 workers scanning 81 read units 3 times a minute', () => {
    const kcl = kclMonthly(10, 1_000, () => REAL_ID);
    expect(kcl.wruPerMinute).toBe(18_000);
    expect(kcl.tableBytes).toBeGreaterThan(327_000);
    expect(kcl.rruPerMinute).toBe(10 * 3 * pagedReadUnits(Array.from({ length: 1_000 }, (_, i) => kclLeaseItemBytes(i, REAL_ID))));
    expect(kcl.writesUsd).toBeCloseTo(486, 6);
  });
});
