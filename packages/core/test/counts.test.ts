import { describe, expect, it } from 'vitest';
import { RECORD_FORMAT, type MemberRecord } from '../src/storage.js';
import { Counts } from '../src/lease/counts.js';
import { AsksRead } from '../src/lease/join-asks.js';
import { NotesRead } from '../src/lease/leave-notes.js';
import { RosterView } from '../src/lease/roster-view.js';
import type { LeaseParts } from '../src/lease/parts.js';
import type { Handovers } from '../src/lease/handovers.js';
import type { DeclarerDeal } from '../src/lease/declarer-deal.js';

const TICK = 2_000;

function member(workerId: string, held: number): MemberRecord {
  return { group: 'g', workerId, version: 1, format: RECORD_FORMAT, incarnation: `inc-${workerId}`, leaseDurationMs: 10_000, status: 'alive', held, changes: 0, requests: [], metadata: {} };
}

/** This worker ('me', holding `mine`) and two others, as the last whole read showed them, after a listing of `workable` leases of which its share is `target`. */
function counts(mine: number, others: readonly number[], workable: number, target: number): Counts {
  const view = new RosterView({ workerId: 'me', now: () => 0, expiryMs: () => 10_000 });
  view.read({ group: 'g', members: [member('me', mine), ...others.map((held, i) => member(`w${i}`, held))], corrupt: [] }, 0);
  const parts = {
    workerId: 'me',
    view,
    takeIntervalMs: TICK,
    leaseDurationMs: 10_000,
    maxLeases: Infinity,
    hold: { countHeld: () => mine, leases: new Map(Array.from({ length: mine }, (_, i) => [`lease-${i}`, {}])) },
  } as unknown as LeaseParts;
  const result = new Counts({
    parts,
    handovers: { requests: new Map() } as unknown as Handovers,
    notes: new NotesRead('me', false),
    asks: new AsksRead('me', false),
    deal: { dealsHere: () => true } as unknown as DeclarerDeal,
    capOf: () => Infinity,
    subscribed: () => false,
    shortfallIgnored: false,
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
});
