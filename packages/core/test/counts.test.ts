import { describe, expect, it } from 'vitest';
import { RECORD_FORMAT, type MemberRecord } from '../src/storage.js';
import { Counts } from '../src/lease/counts.js';
import { AsksRead } from '../src/lease/join-asks.js';
import { NotesRead } from '../src/lease/leave-notes.js';
import { RosterView } from '../src/lease/roster-view.js';
import type { LeaseParts } from '../src/lease/parts.js';
import type { Handovers } from '../src/lease/handovers.js';
import type { DeclarerDeal } from '../src/lease/declarer-deal.js';
import { LEAVING_FIELD } from '../src/lease/membership.js';

const TICK = 2_000;

function member(workerId: string, held: number): MemberRecord {
  return { group: 'g', workerId, version: 1, format: RECORD_FORMAT, incarnation: `inc-${workerId}`, leaseDurationMs: 10_000, status: 'alive', held, changes: 0, requests: [], metadata: {} };
}

/** This worker ('me', holding `mine`) and the others (`w0`, `w1`, ...), as the last whole read showed them, after a listing of `workable` leases of which its share is `target`. */
function counts(
  mine: number,
  others: readonly number[],
  workable: number,
  target: number,
  { subscribed = false, belowIgnored = false, coldDealTrusted = false, leaving = [] as readonly number[], dead = [] as readonly number[], dealsHere = true, gone = [] as readonly string[] } = {},
): Counts {
  const view = new RosterView({ workerId: 'me', now: () => 0, expiryMs: () => 10_000 });
  const leavers = leaving.map((held, i) => ({ ...member(`leaver${i}`, held), metadata: { [LEAVING_FIELD]: '1' } }));
  const deadMembers = dead.map((held, i) => ({ ...member(`dead${i}`, held), status: 'dead' as const }));
  view.read({ group: 'g', members: [member('me', mine), ...others.map((held, i) => member(`w${i}`, held)), ...leavers, ...deadMembers], corrupt: [] }, 0);
  const parts = {
    workerId: 'me',
    view,
    takeIntervalMs: TICK,
    leaseDurationMs: 10_000,
    maxLeases: Infinity,
    hold: { countHeld: () => mine, leases: new Map(Array.from({ length: mine }, (_, i) => [`lease-${i}`, {}])) },
    // `gone`: the members that look gone to this worker (stood still, or did not answer a suspect).
    members: { answers: { looksGone: (m: MemberRecord) => gone.includes(m.workerId), mayBeOffered: (m: MemberRecord) => !gone.includes(m.workerId) } },
  } as unknown as LeaseParts;
  const result = new Counts({
    parts,
    handovers: { requests: new Map() } as unknown as Handovers,
    notes: new NotesRead('me', false),
    asks: new AsksRead('me', false),
    deal: { dealsHere: () => dealsHere } as unknown as DeclarerDeal,
    capOf: () => Infinity,
    subscribed: () => subscribed,
    shortfallIgnored: false,
    belowIgnored,
    coldDealTrusted,
  });
  result.listed(workable, target);
  return result;
}

describe('the members\' counts between listings', () => {
  it('have a member below its share list at once for counts short of the last listing\'s leases', () => {
    expect(counts(9, [10, 10], 30, 10).unheld(0)).toBe(true);
  });

  it('have a member at its share list for a shortfall at its second take tick after it first saw it, however the ticks\' jitter (0.95-1.05 of the interval) spaced them', () => {
    const c = counts(10, [10, 9], 30, 10);
    expect(c.unheld(0)).toBe(false);
    expect(c.unheld(0.95 * TICK)).toBe(false);
    // Two ticks 0.95 of the interval apart: the second (a wait for two intervals listed only at a third).
    expect(c.unheld(1.9 * TICK)).toBe(true);
  });

  it('forget a shortfall once the counts add up again, and wait again from the next one', () => {
    const c = counts(10, [10, 9], 30, 10);
    expect(c.unheld(0)).toBe(false);
    c.listed(29, 10);
    expect(c.unheld(TICK)).toBe(false);
    c.listed(30, 10);
    expect(c.unheld(2 * TICK)).toBe(false);
    expect(c.unheld(3 * TICK)).toBe(false);
    expect(c.unheld(3.9 * TICK)).toBe(true);
  });

  it('say this worker is two or more above another member with room, and not one above', () => {
    expect(counts(12, [10, 11], 33, 11).above(0)).toBe(true);
    expect(counts(11, [10, 11], 32, 11).above(0)).toBe(false);
  });

  it('say this worker is two or more below the most loaded member without a change feed, whatever its share: it lists to find leases handed to it unasked', () => {
    expect(counts(10, [12, 8], 30, 10).below(false)).toBe(true);
    expect(counts(10, [11, 9], 30, 10).below(false)).toBe(false);
  });

  it('with a change feed, say this worker is two below another only while it holds fewer than its share: at its share, the member above owes its surplus to a member below its share, and offers it on its own counts', () => {
    expect(counts(10, [12, 8], 30, 10, { subscribed: true }).below(false)).toBe(false);
    expect(counts(9, [12, 9], 30, 10, { subscribed: true }).below(false)).toBe(true);
    // The share is of the last listing's leases among the members alive now, not the one that listing gave
    // this worker: after leaves that brought no listing, 15 each of 30 for the two left, not 10.
    expect(counts(13, [15], 30, 10, { subscribed: true }).below(false)).toBe(true);
  });

  it('with a change feed, leave the members leaving out of the share: their leases are on their way to the others', () => {
    // Three staying members share 30 leases: 10 each; with the leaver counted the share would be 7 or 8.
    expect(counts(9, [11, 10], 30, 10, { subscribed: true, leaving: [0] }).below(false)).toBe(true);
    expect(counts(8, [11, 11], 30, 10, { subscribed: true, leaving: [10] }).below(false)).toBe(true);
  });

  it('after a cold start\'s deal, count the portion of a member still holding nothing as on its way for five take ticks, and its own count once it holds anything', () => {
    // This worker took its 10 of 30; w0 took its own, w1 is still waiting for its listing.
    const c = counts(10, [10, 0], 30, 10);
    c.coldDealt(new Map([['w0', { incarnation: 'inc-w0', count: 10 }], ['w1', { incarnation: 'inc-w1', count: 10 }]]), 0);
    expect(c.above(TICK)).toBe(false);
    expect(c.unheld(TICK)).toBe(false);
    expect(c.unheld(4.9 * TICK)).toBe(false);
    // Five ticks on, w1's portion is no longer counted: ten below, and the counts short of the listing.
    expect(c.above(5 * TICK)).toBe(true);
    expect(c.unheld(5 * TICK)).toBe(false);
    expect(c.unheld(6.8 * TICK)).toBe(true);
    // A portion dealt at another incarnation of the member is not its.
    const other = counts(10, [10, 0], 30, 10);
    other.coldDealt(new Map([['w1', { incarnation: 'inc-before', count: 10 }]]), 0);
    expect(other.above(TICK)).toBe(true);
    // A member holding anything took its portion: its own count says what it holds.
    const partly = counts(10, [10, 2], 30, 10);
    partly.coldDealt(new Map([['w1', { incarnation: 'inc-w1', count: 10 }]]), 0);
    expect(partly.above(TICK)).toBe(true);
    // Nor to a member leaving: it takes nothing more.
    const leaving = counts(10, [10], 30, 10, { leaving: [0] });
    leaving.coldDealt(new Map([['leaver0', { incarnation: 'inc-leaver0', count: 10 }]]), 0);
    expect(leaving.unheld(0)).toBe(false);
    expect(leaving.unheld(1.8 * TICK)).toBe(true);
    // The next listing tells afresh.
    const listed = counts(10, [10, 0], 30, 10);
    listed.coldDealt(new Map([['w1', { incarnation: 'inc-w1', count: 10 }]]), 0);
    listed.listed(30, 10);
    expect(listed.above(TICK)).toBe(true);
  });

  it('with coldDealTrusted (unsafe), count a cold start\'s portion as on its way until the next listing, however long it waits', () => {
    const c = counts(10, [10, 0], 30, 10, { coldDealTrusted: true });
    c.coldDealt(new Map([['w1', { incarnation: 'inc-w1', count: 10 }]]), 0);
    expect(c.above(60 * TICK)).toBe(false);
    expect(c.unheld(60 * TICK)).toBe(false);
    expect(c.unheld(120 * TICK)).toBe(false);
  });

  it('with belowIgnored (unsafe), never say so with a change feed, below its share or not', () => {
    expect(counts(9, [12, 9], 30, 10, { subscribed: true, belowIgnored: true }).below(false)).toBe(false);
  });

  it('with the declarers dealing, say the counts are a crash\'s being dealt from a death seen until 1.8 take ticks after it, while they fall short of the last listing\'s leases: two below or above another member then brings no listing', () => {
    // Three members were dealt a dead member's 30 leases unevenly as far as this worker's counts go: it reads
    // two above one whose portion is on its way, and below the survivors' share.
    const c = counts(12, [10, 13], 45, 10, { subscribed: true, dead: [10] });
    expect(c.dealingDeaths(0)).toBe(false);
    c.seeDeaths(1_000);
    expect(c.dealingDeaths(1_000)).toBe(true);
    expect(c.dealingDeaths(1_000 + 1.75 * TICK)).toBe(true);
    expect(c.dealingDeaths(1_000 + 1.8 * TICK)).toBe(false);
    // The death stays in the roster: it is not seen again, and the window does not start anew.
    c.seeDeaths(1_000 + 2 * TICK);
    expect(c.dealingDeaths(1_000 + 2 * TICK)).toBe(false);
  });

  it('say the counts are the group\'s again once they add up to the last listing\'s leases: the deals have landed, and what they left uneven is balanced at once', () => {
    // The dead member's 10 leases dealt, read by their recipients and in their heartbeats: 17 + 15 + 13.
    const c = counts(17, [15, 13], 45, 10, { subscribed: true, dead: [10] });
    c.seeDeaths(1_000);
    expect(c.dealingDeaths(1_000)).toBe(false);
    expect(c.above(1_000)).toBe(true);
  });

  it('say nothing of being two above a member that may have died in the crash: no offer would go to it, and its declarer deals what it held', () => {
    // w0 stands still at its count before the crash, 13 below the survivors' counts after the first deaths' deals.
    expect(counts(23, [10, 23], 56, 10, { subscribed: true, dead: [10] }).above(0)).toBe(true);
    expect(counts(23, [10, 23], 56, 10, { subscribed: true, dead: [10], gone: ['w0'] }).above(0)).toBe(false);
    // A member two below that does not look gone is still offered to.
    expect(counts(23, [10, 20, 23], 76, 10, { subscribed: true, dead: [10], gone: ['w0'] }).above(0)).toBe(true);
  });

  it('with the declarers dealing, say the counts are still a crash\'s while a member that looks gone awaits its declaration, within a lease duration of the last death seen: neither counts nor a shortfall list meanwhile', () => {
    // The leases dealt to w0 before it died are not in its count: the counts fall short by them.
    const c = counts(12, [10, 13], 45, 10, { subscribed: true, dead: [5], gone: ['w0'] });
    c.seeDeaths(1_000);
    // Past the 1.8 take ticks after the death, the crash is still being dealt: w0's declaration is to come.
    expect(c.dealingDeaths(1_000 + 3 * TICK)).toBe(true);
    expect(c.unheld(1_000 + 3 * TICK)).toBe(false);
    expect(c.unheld(1_000 + 4.5 * TICK)).toBe(false);
    expect(c.unheld(10_900)).toBe(false);
    // A lease duration after the death, whatever w0 looks like, the crash is over: the shortfall lists 1.8
    // ticks after the last moment a declaration was still to come.
    expect(c.dealingDeaths(11_000)).toBe(false);
    expect(c.unheld(11_000)).toBe(false);
    expect(c.unheld(10_900 + 1.75 * TICK)).toBe(false);
    expect(c.unheld(10_900 + 1.8 * TICK)).toBe(true);
  });

  it('say the counts are the group\'s, and list for a shortfall after 1.8 ticks, when a member looks gone but no death was seen lately: it may be slow, and nobody is dealing', () => {
    const c = counts(12, [10, 13], 45, 10, { subscribed: true, gone: ['w0'] });
    expect(c.dealingDeaths(1_000)).toBe(false);
    expect(c.unheld(1_000)).toBe(false);
    expect(c.unheld(1_000 + 1.8 * TICK)).toBe(true);
  });

  it('where nobody deals a death at its declaration (no change feed), never say the counts are being dealt: every member lists for the death', () => {
    const c = counts(12, [10, 13], 45, 10, { dead: [10], dealsHere: false });
    c.seeDeaths(1_000);
    expect(c.dealingDeaths(1_000)).toBe(false);
  });
});
