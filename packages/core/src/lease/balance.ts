/**
 * The balancing policy (DESIGN section 4, balancing), as pure functions of the members and their loads,
 * so that every worker computes the same plan from the same roster and the rules are tested with tables
 * (test/balance-plan.test.ts). The coordinator decides when to act and carries the moves out.
 */
import type { MemberRecord } from '../storage.js';
import { hashOf } from './watchers.js';

/** Member metadata of a worker with `maxLeasesPerWorker` set: others hand it no more than that. */
export const MAX_LEASES_FIELD = 'leasehold.maxLeases';

/** The most leases a member says it holds (`maxLeasesPerWorker`, published in its metadata); no limit when it says nothing. */
export function capOf(member: MemberRecord | undefined): number {
  const value = member?.metadata[MAX_LEASES_FIELD];
  const cap = value === undefined ? NaN : Number(value);
  return Number.isSafeInteger(cap) && cap > 0 ? cap : Infinity;
}

/**
 * How many of `total` leases each member should hold: a member whose cap is below an even share holds its
 * cap, and the others share the rest, the first of them in `members`' order holding one more when it does
 * not divide evenly.
 */
export function shares(members: readonly string[], total: number, capOf: (workerId: string) => number): Map<string, number> {
  const end = new Map<string, number>();
  let rest = [...members];
  let remaining = total;
  for (;;) {
    const share = Math.ceil(remaining / Math.max(1, rest.length));
    const capped = rest.filter((workerId) => capOf(workerId) < share);
    if (capped.length === 0) break;
    for (const workerId of capped) {
      end.set(workerId, capOf(workerId));
      remaining -= capOf(workerId);
    }
    rest = rest.filter((workerId) => !end.has(workerId));
  }
  const base = rest.length > 0 ? Math.floor(remaining / rest.length) : 0;
  rest.forEach((workerId, i) => end.set(workerId, base + (i < remaining - base * rest.length ? 1 : 0)));
  return end;
}

/**
 * The moves that balance the members' loads, the same on every worker that computes them from the same
 * loads: a member whose cap is below an even share ends at its cap, and the others share the rest, each
 * ending with the floor of its share or one more (the most loaded keep the one more, so that nothing
 * moves that need not); the members above their end hand the difference, the most loaded first, to the
 * members below theirs, the least loaded first. A move always goes from a member two or more above its
 * recipient (or above its cap), so a balanced group (max - min <= 1) moves nothing.
 */
export function planMoves(members: readonly string[], load: ReadonlyMap<string, number>, capOf: (workerId: string) => number): { from: string; to: string }[] {
  if (members.length < 2) return [];
  const of = (workerId: string): number => load.get(workerId) ?? 0;
  const byId = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);
  const mostFirst = [...members].sort((a, b) => of(b) - of(a) || byId(a, b));
  const end = shares(mostFirst, mostFirst.reduce((sum, workerId) => sum + of(workerId), 0), capOf);
  const givers = mostFirst.filter((workerId) => of(workerId) > (end.get(workerId) ?? 0));
  const receivers = [...members].sort((a, b) => of(a) - of(b) || byId(a, b)).filter((workerId) => of(workerId) < (end.get(workerId) ?? 0));
  const moves: { from: string; to: string }[] = [];
  let g = 0;
  let r = 0;
  let excess = givers.length > 0 ? of(givers[0] as string) - (end.get(givers[0] as string) ?? 0) : 0;
  let deficit = receivers.length > 0 ? (end.get(receivers[0] as string) ?? 0) - of(receivers[0] as string) : 0;
  while (g < givers.length && r < receivers.length) {
    const count = Math.min(excess, deficit);
    for (let i = 0; i < count; i++) moves.push({ from: givers[g] as string, to: receivers[r] as string });
    excess -= count;
    deficit -= count;
    if (excess === 0 && ++g < givers.length) excess = of(givers[g] as string) - (end.get(givers[g] as string) ?? 0);
    if (deficit === 0 && ++r < receivers.length) deficit = (end.get(receivers[r] as string) ?? 0) - of(receivers[r] as string);
  }
  return moves;
}

/**
 * The deal of `sorted` (leases without a live owner, by key) to `members` (sorted, with their `counts`):
 * the same on every worker that read the same counts. Each member below its target by rank is dealt up to
 * it, and what is left goes round robin to those with room. With `away`, a lease `away.ofDead` names that
 * was dealt to a member other than `self` that `away.standingStill` names goes instead to the least loaded
 * of the others (by the counts and this deal), ties broken by a hash of the lease key and the member, so
 * that declarers dealing at once do not all favour the same members. Returns who each lease is dealt to,
 * and how many each member was dealt.
 */
export function dealOut<L extends { readonly leaseKey: string }>(
  sorted: readonly L[],
  members: readonly string[],
  counts: ReadonlyMap<string, number>,
  target: (rank: number) => number,
  capOf: (workerId: string) => number,
  self: string,
  away: { ofDead: (lease: L) => boolean; standingStill: (workerId: string) => boolean } | null,
): { recipients: Map<string, string>; dealtTo: Map<string, number> } {
  const dealtTo = new Map<string, number>();
  const recipients = new Map<string, string>();
  let next = 0;
  const deal = (workerId: string): void => {
    dealtTo.set(workerId, (dealtTo.get(workerId) ?? 0) + 1);
    recipients.set((sorted[next] as L).leaseKey, workerId);
    next++;
  };
  members.forEach((workerId, rank) => {
    const deficit = Math.max(0, target(rank) - (counts.get(workerId) ?? 0));
    for (let i = 0; i < deficit && next < sorted.length; i++) deal(workerId);
  });
  // What is left (members above their share hold the rest) goes round robin to those with room, each
  // leaving the round once its cap is reached.
  const roomy = members.filter((workerId) => (counts.get(workerId) ?? 0) + (dealtTo.get(workerId) ?? 0) < capOf(workerId));
  for (let turn = 0; next < sorted.length && roomy.length > 0; ) {
    const at = turn % roomy.length;
    const workerId = roomy[at] as string;
    if ((counts.get(workerId) ?? 0) + (dealtTo.get(workerId) ?? 0) >= capOf(workerId)) {
      roomy.splice(at, 1);
      continue;
    }
    deal(workerId);
    turn++;
  }
  if (away === null) return { recipients, dealtTo };
  const healthy = members.filter((workerId) => workerId !== self && !away.standingStill(workerId));
  for (const lease of sorted) {
    const to = recipients.get(lease.leaseKey);
    if (to === undefined || to === self || !away.ofDead(lease) || !away.standingStill(to)) continue;
    let best: string | undefined;
    let bestLoad = Infinity;
    let bestTie = Infinity;
    for (const workerId of healthy) {
      const load = (counts.get(workerId) ?? 0) + (dealtTo.get(workerId) ?? 0);
      if (load >= capOf(workerId)) continue;
      const tie = hashOf(`${lease.leaseKey}\u0000${workerId}`);
      if (load < bestLoad || (load === bestLoad && tie < bestTie)) [best, bestLoad, bestTie] = [workerId, load, tie];
    }
    dealtTo.set(to, (dealtTo.get(to) ?? 1) - 1);
    if (best === undefined) recipients.delete(lease.leaseKey);
    else {
      recipients.set(lease.leaseKey, best);
      dealtTo.set(best, (dealtTo.get(best) ?? 0) + 1);
    }
  }
  return { recipients, dealtTo };
}
