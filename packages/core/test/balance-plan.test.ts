import { describe, expect, it } from 'vitest';
import { planMoves, shares } from '../src/lease/balance.js';

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
