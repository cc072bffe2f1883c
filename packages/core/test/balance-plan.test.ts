import { describe, expect, it } from 'vitest';
import { dealOut, planMoves, shares } from '../src/lease/balance.js';

/** Applies the moves to the loads and returns the final loads, in member order. */
function apply(members: string[], loads: number[], moves: { from: string; to: string }[]): number[] {
  const load = new Map(members.map((workerId, i) => [workerId, loads[i] ?? 0]));
  for (const { from, to } of moves) {
    load.set(from, (load.get(from) ?? 0) - 1);
    load.set(to, (load.get(to) ?? 0) + 1);
  }
  return members.map((workerId) => load.get(workerId) ?? 0);
}

const noCap = (): number => Infinity;

describe('planMoves: the moves every worker computes alike from the same loads', () => {
  const cases: { name: string; loads: number[]; caps?: number[]; end: number[]; moves: number }[] = [
    { name: 'a balanced group moves nothing', loads: [10, 10, 10], end: [10, 10, 10], moves: 0 },
    { name: 'loads one apart move nothing', loads: [11, 10, 10, 11], end: [11, 10, 10, 11], moves: 0 },
    { name: 'one member holding everything hands each newcomer its share', loads: [40, 0], end: [20, 20], moves: 20 },
    { name: 'a joiner takes one lease from each of nine members, the one left above keeps its extra', loads: [10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 0], end: [10, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9], moves: 9 },
    { name: 'the remainder stays with the most loaded, so that nothing moves that need not', loads: [5, 3, 0], end: [3, 3, 2], moves: 2 },
    { name: 'several givers and several receivers are matched most loaded to least loaded', loads: [30, 25, 0, 5], end: [15, 15, 15, 15], moves: 25 },
    { name: 'a capped member ends at its cap and the others share the rest', loads: [30, 0, 0], caps: [Infinity, 3, Infinity], end: [14, 3, 13], moves: 16 },
    { name: 'a member above its cap hands the excess on', loads: [2, 8], caps: [Infinity, 5], end: [5, 5], moves: 3 },
    { name: 'when every member is capped below the total, what nobody may take stays where it is', loads: [10, 0], caps: [2, 2], end: [8, 2], moves: 2 },
  ];
  for (const { name, loads, caps, end, moves } of cases) {
    it(name, () => {
      const members = loads.map((_, i) => `w${String(i).padStart(2, '0')}`);
      const capOf = caps ? (workerId: string): number => caps[members.indexOf(workerId)] ?? Infinity : noCap;
      const plan = planMoves(members, new Map(members.map((workerId, i) => [workerId, loads[i] ?? 0])), capOf);
      expect(plan).toHaveLength(moves);
      expect(apply(members, loads, plan)).toEqual(end);
    });
  }

  it('every move goes from a member two or more above its recipient, or above its cap, and never overshoots', () => {
    for (let seed = 1; seed <= 500; seed++) {
      let state = seed;
      const next = (): number => ((state = (state * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
      const members = Array.from({ length: 1 + Math.floor(next() * 12) }, (_, i) => `w${i}`);
      const loads = members.map(() => Math.floor(next() * 50));
      const caps = members.map(() => (next() < 0.2 ? 1 + Math.floor(next() * 20) : Infinity));
      const capOf = (workerId: string): number => caps[members.indexOf(workerId)] ?? Infinity;
      const load = new Map(members.map((workerId, i) => [workerId, loads[i] ?? 0]));
      const plan = planMoves(members, load, capOf);
      const now = new Map(load);
      for (const { from, to } of plan) {
        const giver = now.get(from) ?? 0;
        const receiver = now.get(to) ?? 0;
        expect(giver >= receiver + 2 || giver > capOf(from)).toBe(true);
        expect(receiver).toBeLessThan(capOf(to));
        now.set(from, giver - 1);
        now.set(to, receiver + 1);
      }
      // Among the members not held back by a cap, the group ends balanced.
      const free = members.filter((workerId) => (now.get(workerId) ?? 0) < capOf(workerId));
      const ends = free.map((workerId) => now.get(workerId) ?? 0);
      if (ends.length > 0 && members.every((workerId) => (now.get(workerId) ?? 0) <= capOf(workerId))) {
        const most = Math.max(...members.map((workerId) => now.get(workerId) ?? 0));
        expect(most - Math.min(...ends)).toBeLessThanOrEqual(1);
      }
      // Computed again from the end state, the plan moves nothing.
      expect(planMoves(members, now, capOf)).toEqual([]);
    }
  });
});

describe('shares: how many leases each member should hold', () => {
  const uncapped = (): number => Infinity;
  it.each([
    { members: ['a', 'b', 'c'], total: 10, caps: {}, expected: { a: 4, b: 3, c: 3 } },
    { members: ['a', 'b', 'c'], total: 9, caps: {}, expected: { a: 3, b: 3, c: 3 } },
    { members: ['a', 'b', 'c'], total: 10, caps: { b: 1 }, expected: { a: 5, b: 1, c: 4 } },
    { members: ['a', 'b'], total: 10, caps: { a: 2, b: 3 }, expected: { a: 2, b: 3 } },
    { members: ['a'], total: 0, caps: {}, expected: { a: 0 } },
    { members: [], total: 5, caps: {}, expected: {} },
  ])('$total leases over $members with caps $caps: $expected', ({ members, total, caps, expected }) => {
    const capOf = (workerId: string): number => (caps as Record<string, number>)[workerId] ?? uncapped();
    expect(Object.fromEntries(shares(members, total, capOf))).toEqual(expected);
  });
});

describe('dealOut: who each lease without a live owner is dealt to, alike on every worker with the same counts', () => {
  const members = ['w0', 'w1', 'w2', 'w3'];
  const leasesOf = (n: number, owner: string | null = null) => Array.from({ length: n }, (_, i) => ({ leaseKey: `k${String(i).padStart(2, '0')}`, owner }));
  const counted = (recipients: Map<string, string>) => members.map((workerId) => [...recipients.values()].filter((to) => to === workerId).length);
  const targetsOf = (counts: Map<string, number>, dealt: number) => {
    let total = dealt;
    for (const count of counts.values()) total += count;
    const targets = shares(members, total, noCap);
    return (rank: number) => targets.get(members[rank]!) ?? 0;
  };

  it('fills each member up to its share by rank, the extra lease to the first ranks, in key order', () => {
    const counts = new Map([['w0', 10], ['w1', 10], ['w2', 8], ['w3', 10]]);
    const { recipients } = dealOut(leasesOf(6), members, counts, targetsOf(counts, 6), noCap, 'w0', null);
    // 44 over four: 11 each; w2 is dealt three, the rest one each.
    expect(counted(recipients)).toEqual([1, 1, 3, 1]);
    expect(recipients.get('k00')).toBe('w0');
    expect([...recipients.keys()]).toHaveLength(6);
  });

  it('deals what is left past every share round robin to the members with room, none past its cap', () => {
    const counts = new Map([['w0', 0], ['w1', 0], ['w2', 0], ['w3', 0]]);
    const caps = (workerId: string) => (workerId === 'w1' ? 1 : Infinity);
    const { recipients } = dealOut(leasesOf(9), members, counts, () => 0, caps, 'w0', null);
    // w1 leaves the round at its cap: w0, w1, w2, w3, w0, then w3, w0, w2, w3.
    expect(counted(recipients)).toEqual([3, 1, 2, 3]);
  });

  it('gives a dead member\'s lease dealt to a member standing still to the least loaded of the others, and never moves this worker\'s own portion', () => {
    const counts = new Map([['w0', 10], ['w1', 10], ['w2', 10], ['w3', 10]]);
    const leases = leasesOf(8, 'dead');
    const plain = dealOut(leases, members, counts, targetsOf(counts, 8), noCap, 'w0', null);
    expect(counted(plain.recipients)).toEqual([2, 2, 2, 2]);
    const away = { ofDead: (lease: { owner: string | null }) => lease.owner === 'dead', standingStill: (workerId: string) => workerId === 'w2' || workerId === 'w0' };
    const { recipients, dealtTo } = dealOut(leases, members, counts, targetsOf(counts, 8), noCap, 'w0', away);
    // w2's two go to w1 and w3 (one each: the least loaded, then a tie broken by a hash); w0 is this worker.
    expect(counted(recipients)).toEqual([2, 3, 0, 3]);
    expect([...dealtTo.entries()].filter(([, n]) => n > 0).map(([workerId, n]) => `${workerId}:${n}`).sort()).toEqual(['w0:2', 'w1:3', 'w3:3']);
    // A lease of a live member is never moved: only the dead's.
    const live = dealOut(leasesOf(8, 'alive'), members, counts, targetsOf(counts, 8), noCap, 'w0', away);
    expect(counted(live.recipients)).toEqual([2, 2, 2, 2]);
  });
});
