import { describe, expect, it } from 'vitest';
import { CorruptRecordError } from '../src/errors.js';
import { movedByDeathsOnly, RosterView } from '../src/lease/roster-view.js';
import { RECORD_FORMAT, type MemberRecord, type Roster } from '../src/storage.js';

const GROUP = 'orders';

function member(workerId: string, version: number, fields: Partial<MemberRecord> = {}): MemberRecord {
  return { group: GROUP, workerId, version, format: RECORD_FORMAT, incarnation: `${workerId}-1`, leaseDurationMs: 10_000, status: 'alive', held: 0, changes: 0, requests: [], metadata: {}, ...fields };
}

function roster(members: MemberRecord[], corrupt: string[] = []): Roster {
  return { group: GROUP, members, corrupt: corrupt.map((workerId) => Object.assign(new CorruptRecordError(`member ${workerId} cannot be read`, { group: GROUP }), { workerId })) };
}

function view(expiryMs = 10_000) {
  let now = 0;
  const rosterView = new RosterView({ workerId: 'me', now: () => now, expiryMs: () => expiryMs });
  return { rosterView, at: (ms: number) => (now = ms) };
}

describe('RosterView', () => {
  it('judges a member expired only once its write stood still for the expiry on the observer\'s clock, from the first sight of that write', () => {
    const { rosterView } = view();
    rosterView.read(roster([member('me', 1), member('a', 5)]), 1_000);
    rosterView.read(roster([member('me', 1), member('a', 5)]), 10_999);
    expect(rosterView.expired(member('a', 5), 10_999)).toBe(false);
    rosterView.read(roster([member('me', 1), member('a', 5)]), 11_000);
    expect(rosterView.expired(member('a', 5), 11_000)).toBe(true);
    rosterView.read(roster([member('me', 2), member('a', 6)]), 11_500);
    expect(rosterView.expired(member('a', 6), 21_499)).toBe(false);
    expect(rosterView.nextExpiry()).toBe(21_500);
  });

  it('never judges a member it stopped reading expired by time alone: only a read that shows its write still there after the expiry does', () => {
    const { rosterView } = view();
    rosterView.read(roster([member('me', 1), member('a', 5), member('b', 7)]), 0);
    // The watcher reads only b from now on; a is left as last read.
    rosterView.readSome(roster([member('b', 7)]), ['b'], 10_000);
    expect(rosterView.expired(member('a', 5), 60_000)).toBe(false);
    expect(rosterView.expired(member('b', 7), 10_000)).toBe(true);
    expect(rosterView.nextExpiry(new Set(['b']))).toBe(10_000);
    // A later whole read that shows a's write unmoved judges it on the time between the two reads.
    rosterView.read(roster([member('me', 2), member('a', 5), member('b', 8)]), 60_000);
    expect(rosterView.expired(member('a', 5), 60_000)).toBe(true);
    expect(rosterView.expired(member('b', 8), 60_000)).toBe(false);
  });

  it('takes in a read of some members: each named member replaced or removed, the others kept as last read', () => {
    const { rosterView } = view();
    rosterView.read(roster([member('me', 1), member('a', 5), member('b', 7), member('c', 9)]), 0);
    const fresh = rosterView.readSome(roster([member('a', 6, { status: 'dead' })], ['c']), ['a', 'b', 'c'], 2_000);
    expect(rosterView.get('a')?.status).toBe('dead');
    expect(rosterView.has('b')).toBe(false);
    expect(rosterView.isCorrupt('c')).toBe(true);
    expect(fresh).toHaveLength(1);
    expect(rosterView.get('me')?.version).toBe(1);
    expect([...rosterView.alive().keys()]).toEqual(['me']);
    expect(rosterView.othersChangedAt).toBe(2_000);
  });

  it('counts a new incarnation at the same version as a move, so a worker that joined again is never judged on its old write', () => {
    const { rosterView } = view();
    rosterView.read(roster([member('a', 5)]), 0);
    rosterView.read(roster([member('a', 5, { incarnation: 'a-2' })]), 9_000);
    expect(rosterView.expired(member('a', 5, { incarnation: 'a-2' }), 12_000)).toBe(false);
  });

  it('forgets a member that died or left, and watches it from scratch when it comes back', () => {
    const { rosterView } = view();
    rosterView.read(roster([member('a', 5)]), 0);
    rosterView.read(roster([member('a', 6, { status: 'dead' })]), 1_000);
    expect(rosterView.observed).toBe(0);
    rosterView.read(roster([]), 2_000);
    rosterView.read(roster([member('a', 7, { incarnation: 'a-2' })]), 3_000);
    expect(rosterView.expired(member('a', 7, { incarnation: 'a-2' }), 12_999)).toBe(false);
    expect(rosterView.nextExpiry()).toBe(13_000);
  });

  it('reports a corrupt member once, and again only after it read back in between', () => {
    const { rosterView } = view();
    expect(rosterView.read(roster([member('a', 1)], ['b']), 0)).toHaveLength(1);
    expect(rosterView.read(roster([member('a', 2)], ['b']), 1_000)).toHaveLength(0);
    expect(rosterView.isCorrupt('b')).toBe(true);
    expect(rosterView.signature()).toContain('b\u0000corrupt');
    rosterView.read(roster([member('a', 3), member('b', 4)]), 2_000);
    expect(rosterView.isCorrupt('b')).toBe(false);
    expect(rosterView.read(roster([member('a', 4)], ['b']), 3_000)).toHaveLength(1);
  });

  it('notes when the set of other live members changed, and not when they only heartbeat', () => {
    const { rosterView } = view();
    rosterView.read(roster([member('me', 1), member('a', 1)]), 1_000);
    rosterView.read(roster([member('me', 2), member('a', 2)]), 3_000);
    expect(rosterView.othersChangedAt).toBe(1_000);
    rosterView.read(roster([member('me', 3), member('a', 3), member('b', 1)]), 5_000);
    expect(rosterView.othersChangedAt).toBe(5_000);
    rosterView.read(roster([member('me', 4), member('a', 4), member('b', 2, { status: 'dead' })]), 7_000);
    expect(rosterView.othersChangedAt).toBe(7_000);
    expect([...rosterView.alive().keys()].sort()).toEqual(['a', 'me']);
  });

  it('tells how long it saw a member\'s write stand still, between the first read that showed it and the last, never by time alone', () => {
    const { rosterView } = view();
    rosterView.read(roster([member('me', 1), member('a', 5)]), 1_000);
    expect(rosterView.stillFor(member('a', 5))).toBe(0);
    rosterView.read(roster([member('me', 1), member('a', 5)]), 8_500);
    expect(rosterView.stillFor(member('a', 5))).toBe(7_500);
    // Not read since: the same, however late it is asked.
    rosterView.readSome(roster([member('me', 2)]), ['me'], 30_000);
    expect(rosterView.stillFor(member('a', 5))).toBe(7_500);
    // A heartbeat starts it over, and a write this worker has not read is not known to stand still.
    rosterView.read(roster([member('me', 2), member('a', 6)]), 31_000);
    expect(rosterView.stillFor(member('a', 6))).toBe(0);
    expect(rosterView.stillFor(member('a', 7))).toBe(0);
  });

  it('tells a roster that moved only by deaths and removals of the dead from one that moved otherwise', () => {
    const { rosterView } = view();
    rosterView.read(roster([member('a', 1), member('b', 1), member('c', 1, { status: 'dead' })]), 0);
    const before = rosterView.signatureMembers();
    // b declared dead (same incarnation and change counter), c removed: deaths only.
    rosterView.read(roster([member('a', 2), member('b', 2, { status: 'dead' })]), 2_000);
    expect(movedByDeathsOnly(before, rosterView.signatureMembers())).toBe(true);
    // A join, a new incarnation, a change counter's move, a live member gone or a corrupt record is another change.
    for (const after of [
      roster([member('a', 1), member('b', 1), member('c', 1, { status: 'dead' }), member('d', 1)]),
      roster([member('a', 2, { incarnation: 'a-2' }), member('b', 1), member('c', 1, { status: 'dead' })]),
      roster([member('a', 2, { changes: 1 }), member('b', 1), member('c', 1, { status: 'dead' })]),
      roster([member('a', 2, { status: 'dead', changes: 1 }), member('b', 1), member('c', 1, { status: 'dead' })]),
      roster([member('a', 1), member('c', 1, { status: 'dead' })]),
      roster([member('a', 1), member('b', 1)], ['c']),
    ]) {
      rosterView.read(after, 4_000);
      expect(movedByDeathsOnly(before, rosterView.signatureMembers())).toBe(false);
    }
  });

  it('signs the roster by who is alive in which incarnation and their change counters, not by heartbeats', () => {
    const { rosterView } = view();
    rosterView.read(roster([member('a', 1)]), 0);
    const first = rosterView.signature();
    rosterView.read(roster([member('a', 2, { held: 7 })]), 2_000);
    expect(rosterView.signature()).toBe(first);
    rosterView.read(roster([member('a', 3, { changes: 1 })]), 4_000);
    expect(rosterView.signature()).not.toBe(first);
  });

  it('keeps both judgements true across reads of a few members and its own writes: a watcher\'s heartbeat read moves neither, a death it wrote moves both', () => {
    const { rosterView } = view();
    rosterView.read(roster([member('me', 1), member('a', 1), member('b', 1), member('c', 1)]), 1_000);
    const first = rosterView.signature();
    rosterView.readSome(roster([member('a', 2), member('b', 2)]), ['a', 'b'], 3_000);
    expect(rosterView.othersChangedAt).toBe(1_000);
    expect(rosterView.signature()).toBe(first);
    rosterView.readSome(roster([member('a', 1, { incarnation: 'a-2' })]), ['a'], 5_000);
    expect(rosterView.othersChangedAt).toBe(5_000);
    const rejoined = rosterView.signature();
    expect(rejoined).not.toBe(first);
    // This worker declared c dead: the next read, of other members only, notes the change it wrote.
    rosterView.set(member('c', 2, { status: 'dead' }));
    expect(rosterView.signature()).not.toBe(rejoined);
    const declared = rosterView.signature();
    rosterView.readSome(roster([member('b', 3)]), ['b'], 7_000);
    expect(rosterView.othersChangedAt).toBe(7_000);
    rosterView.readSome(roster([member('b', 4, { changes: 1 })]), ['b'], 9_000);
    expect(rosterView.othersChangedAt).toBe(7_000);
    expect(rosterView.signature()).not.toBe(declared);
    const counted = rosterView.signature();
    rosterView.readSome(roster([], ['b']), ['b'], 11_000);
    expect(rosterView.othersChangedAt).toBe(11_000);
    expect(rosterView.signature()).toContain('b\u0000corrupt');
    expect(rosterView.signature()).not.toBe(counted);
    // The same members read whole give the same signature as the reads of a few built up.
    const whole = view().rosterView;
    whole.read(roster([member('me', 1), member('a', 1, { incarnation: 'a-2' }), member('c', 2, { status: 'dead' })], ['b']), 0);
    expect(rosterView.signature()).toBe(whole.signature());
  });
});
