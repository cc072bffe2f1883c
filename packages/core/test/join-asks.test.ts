import { deflateRawSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { RECORD_FORMAT } from '../src/adapter.js';
import type { MemberRecord } from '../src/storage.js';
import { ASKS_FIELD, AsksRead, readAsks, writeAsks } from '../src/lease/join-asks.js';
import { recipientTag } from '../src/lease/leave-notes.js';
import { joinedBetween, movedByJoinsAndDeaths, movedByJoinsOnly, type SignatureMembers } from '../src/lease/roster-view.js';

function alive(workerId: string, fields: Partial<MemberRecord> = {}): MemberRecord {
  return { group: 'g', workerId, version: 1, format: RECORD_FORMAT, incarnation: `inc-${workerId}`, leaseDurationMs: 10_000, status: 'alive', held: 0, changes: 0, requests: [], metadata: {}, ...fields };
}

const roster = (members: MemberRecord[]) => ({ values: () => members, has: (workerId: string) => members.some((member) => member.workerId === workerId) });
const deflated = (document: unknown) => deflateRawSync(Buffer.from(JSON.stringify(document), 'utf8')).toString('base64');

describe('a newcomer\'s asks', () => {
  it('name each giver by tag with its count, and read back as the counts and their total', () => {
    const value = writeAsks(new Map([['worker-01', 2], ['worker-02', 1], ['worker-03', 0]]), () => true);
    const asks = readAsks(value);
    expect(asks?.total).toBe(3);
    expect(asks?.byTag.get(recipientTag('worker-01'))).toBe(2);
    expect(asks?.byTag.get(recipientTag('worker-02'))).toBe(1);
    // A giver asked for nothing is not named.
    expect(asks?.byTag.has(recipientTag('worker-03'))).toBe(false);
  });

  it('for 99 givers of one lease each, as a join at 100 x 10,000 asks, take under 1 KB', () => {
    const value = writeAsks(new Map(Array.from({ length: 99 }, (_, i) => [`worker-${String(i).padStart(4, '0')}-abcdef`, 1] as [string, number])), () => true);
    expect(Buffer.byteLength(value ?? '', 'utf8')).toBeLessThan(1_024);
    expect(readAsks(value)?.total).toBe(99);
  });

  it('leave out the givers that do not fit, and are nothing when not one fits', () => {
    const givers = new Map(Array.from({ length: 400 }, (_, i) => [`worker-${i}`, 1] as [string, number]));
    const value = writeAsks(givers, (candidate) => candidate.length <= 1_000);
    expect(value!.length).toBeLessThanOrEqual(1_000);
    expect(readAsks(value)!.total).toBeLessThan(400);
    expect(writeAsks(givers, () => false)).toBeUndefined();
  });

  it('are nothing when unreadable: not deflated, a count that is not a positive whole number, another writer\'s document', () => {
    expect(readAsks('not base64 of anything deflated')).toBeUndefined();
    expect(readAsks(deflated({ c: 1, h: [['abc', '0']] }))).toBeUndefined();
    expect(readAsks(deflated({ c: 1, h: [['abc', '-2']] }))).toBeUndefined();
    expect(readAsks(deflated({ c: 1, h: [['abc', '1.5']] }))).toBeUndefined();
    expect(readAsks(deflated({ c: 1, h: [['abc', '1e3']] }))).toBeUndefined();
    expect(readAsks(deflated({ something: 'else' }))).toBeUndefined();
    expect(readAsks(undefined)).toBeUndefined();
  });
});

describe('the asks a worker reads', () => {
  const value = writeAsks(new Map([['me', 2], ['other', 3]]), () => true)!;

  it('returns what a live newcomer asks of this worker, once per incarnation and asks', () => {
    const read = new AsksRead('me', false);
    const newcomer = alive('new', { metadata: { [ASKS_FIELD]: value } });
    expect(read.read(roster([newcomer]), 0, new Set())).toEqual([{ to: newcomer, count: 2 }]);
    expect(read.read(roster([newcomer]), 100, new Set())).toEqual([]);
    // Asked again (its givers refused some): answered again.
    const again = alive('new', { metadata: { [ASKS_FIELD]: writeAsks(new Map([['me', 1]]), () => true)! } });
    expect(read.read(roster([again]), 200, new Set())).toEqual([{ to: again, count: 1 }]);
    // The same asks in a new incarnation: a new newcomer.
    const rejoined = alive('new', { incarnation: 'inc-2', metadata: { [ASKS_FIELD]: value } });
    expect(read.read(roster([rejoined]), 300, new Set())).toEqual([{ to: rejoined, count: 2 }]);
  });

  it('ignores the asks of a dead member and this worker\'s own', () => {
    const read = new AsksRead('me', false);
    expect(read.read(roster([alive('new', { status: 'dead', metadata: { [ASKS_FIELD]: value } }), alive('me', { metadata: { [ASKS_FIELD]: value } })]), 0, new Set())).toEqual([]);
  });

  it('counts what a newcomer asked for beyond its count as on its way for the window only, or for as long as read with the unsafe trust', () => {
    for (const trusted of [false, true]) {
      const read = new AsksRead('me', trusted);
      read.read(roster([alive('new', { held: 1, metadata: { [ASKS_FIELD]: value } })]), 1_000, new Set());
      // Asked for 5 on top of the 1 it held when read: 4 more held since, 1 still on its way.
      expect(read.onTheirWayTo(alive('new', { held: 5 }), 2_000, 8_000)).toBe(1);
      expect(read.onTheirWayTo(alive('new', { held: 6 }), 2_000, 8_000)).toBe(0);
      expect(read.onTheirWayTo(alive('new', { held: 1 }), 9_000, 8_000)).toBe(trusted ? 5 : 0);
      // Another incarnation of that worker asked nothing.
      expect(read.onTheirWayTo(alive('new', { incarnation: 'inc-2' }), 2_000, 8_000)).toBe(0);
    }
  });

  it('counts nothing on its way to a newcomer once it dropped its asks (what did not come was refused), unless the unsafe trust keeps them', () => {
    for (const trusted of [false, true]) {
      const read = new AsksRead('me', trusted);
      read.read(roster([alive('new', { held: 0, metadata: { [ASKS_FIELD]: value } })]), 1_000, new Set());
      expect(read.onTheirWayTo(alive('new', { held: 3 }), 2_000, 8_000)).toBe(2);
      // Its next heartbeat drops the asks: 3 of 5 came, the givers refused the other 2.
      read.read(roster([alive('new', { held: 3 })]), 3_000, new Set());
      expect(read.onTheirWayTo(alive('new', { held: 3 }), 3_000, 8_000)).toBe(trusted ? 2 : 0);
      // Asked again, of other givers: counted again, from what it holds now.
      const again = alive('new', { held: 3, metadata: { [ASKS_FIELD]: writeAsks(new Map([['me', 1], ['third', 1]]), () => true)! } });
      expect(read.read(roster([again]), 4_000, new Set())).toEqual([{ to: again, count: 1 }]);
      expect(read.onTheirWayTo(alive('new', { held: 3 }), 4_000, 8_000)).toBe(2);
    }
  });

  it('remembers, for the asks\' window, the newcomers whose asks named this worker: it offers them nothing more from a listing meanwhile', () => {
    const read = new AsksRead('me', false);
    const askingMe = alive('new', { metadata: { [ASKS_FIELD]: writeAsks(new Map([['me', 1], ['other', 2]]), () => true)! } });
    const askingOthers = alive('newer', { metadata: { [ASKS_FIELD]: writeAsks(new Map([['other', 3]]), () => true)! } });
    read.read(roster([askingMe, askingOthers]), 1_000, new Set());
    expect(read.askedMeLately('new', 2_000, 8_000)).toBe(true);
    expect(read.askedMeLately('newer', 2_000, 8_000)).toBe(false);
    expect(read.askedMeLately('new', 9_000, 8_000)).toBe(false);
    // Gone from the roster: forgotten.
    read.read(roster([askingOthers]), 3_000, new Set());
    expect(read.askedMeLately('new', 3_000, 8_000)).toBe(false);
  });

  it('says a member that joined may still ask until it asked or the window passed', () => {
    const read = new AsksRead('me', false);
    const newcomer = alive('new');
    read.read(roster([newcomer]), 1_000, new Set(['new']));
    expect(read.mayStillAsk(newcomer, 2_000, 8_000)).toBe(true);
    expect(read.mayStillAsk(newcomer, 9_000, 8_000)).toBe(false);
    read.read(roster([alive('new', { metadata: { [ASKS_FIELD]: value } })]), 3_000, new Set());
    expect(read.mayStillAsk(newcomer, 3_000, 8_000)).toBe(false);
    // A member seen without joining (there before this worker looked) is not a newcomer.
    expect(read.mayStillAsk(alive('old'), 3_000, 8_000)).toBe(false);
  });
});

describe('a move of the roster made of joins', () => {
  const members = (...records: MemberRecord[]): SignatureMembers => new Map(records.map((record) => [record.workerId, record]));

  it('is new ids alive, dead ids alive again, and dead members removed; anything else is another move', () => {
    const a = alive('a');
    const b = alive('b');
    const gone = alive('gone', { status: 'dead' });
    expect(movedByJoinsOnly(members(a, gone), members(a, b))).toBe(true);
    expect(joinedBetween(members(a, gone), members(a, b))).toEqual(['b']);
    expect(movedByJoinsOnly(members(a, gone), members(a, alive('gone', { incarnation: 'inc-new' })))).toBe(true);
    // A death, a live member's new incarnation, a change counter's move, a live member removed: no.
    expect(movedByJoinsOnly(members(a, b), members(a, alive('b', { status: 'dead' })))).toBe(false);
    expect(movedByJoinsOnly(members(a, b), members(a, alive('b', { incarnation: 'inc-new' })))).toBe(false);
    expect(movedByJoinsOnly(members(a, b), members(a, alive('b', { changes: 1 })))).toBe(false);
    expect(movedByJoinsOnly(members(a, b), members(a, alive('c')))).toBe(false);
    expect(movedByJoinsOnly(members(a), members(a, 'corrupt' as unknown as MemberRecord))).toBe(false);
  });

  it('of joins and deaths together, as a rolling restart reads them, is joins, live members turned dead in the same incarnation and change counter, and dead members removed', () => {
    const a = alive('a');
    const b = alive('b');
    const gone = alive('gone', { status: 'dead' });
    // b stops (turns dead) as c starts, and a member long dead is removed, all read in one move.
    expect(movedByJoinsAndDeaths(members(a, b, gone), members(a, alive('b', { status: 'dead' }), alive('c')))).toBe(true);
    expect(movedByJoinsAndDeaths(members(a, b), members(a, alive('b', { status: 'dead' })))).toBe(true);
    expect(movedByJoinsAndDeaths(members(a, gone), members(a, alive('gone', { incarnation: 'inc-new' }), alive('c')))).toBe(true);
    // Anything else is another move: a death with the change counter moved, a live member's new
    // incarnation, a live member removed, a member that cannot be read back, a member first seen dead.
    expect(movedByJoinsAndDeaths(members(a, b), members(a, alive('b', { status: 'dead', changes: 1 }), alive('c')))).toBe(false);
    expect(movedByJoinsAndDeaths(members(a, b), members(alive('a', { incarnation: 'inc-new' }), alive('c')))).toBe(false);
    expect(movedByJoinsAndDeaths(members(a, b), members(a, alive('c')))).toBe(false);
    expect(movedByJoinsAndDeaths(members(a, b), members(a, b, 'corrupt' as unknown as MemberRecord))).toBe(false);
    expect(movedByJoinsAndDeaths(members(a), members(a, alive('c'), alive('d', { status: 'dead' })))).toBe(false);
  });
});
