/**
 * What the scale benchmarks count: every storage call a coordinator makes and the items it reads and
 * writes (as the core bench counts them: getRoster 1, each listed lease 1, getLease 1; putMember 1, each
 * lease of updateLeases 1, createLease 1), and the event loop's delay. Shared by `scale.ts` (every
 * coordinator in one process) and `scale-child.ts` (a quarter of them in each of several processes).
 */
import type { LeaseChange, Storage, SubscribeOptions } from '@leasehold/core';
import type { monitorEventLoopDelay } from 'node:perf_hooks';

export interface Tally {
  calls: Record<string, number>;
  itemsRead: number;
  /** Items read, by storage method. */
  itemsReadBy: Record<string, number>;
  itemsWritten: number;
  /** Changes the change feed delivered to the coordinators' listeners (each worker's own subscription). */
  changesHeard: number;
  /** Subscriptions opened (a coordinator opens one at its start, and one each time its feed's address moves). */
  subscriptions: number;
}

export const emptyTally = (): Tally => ({ calls: {}, itemsRead: 0, itemsReadBy: {}, itemsWritten: 0, changesHeard: 0, subscriptions: 0 });

/** The sum of several processes' tallies. */
export function addTallies(tallies: readonly Tally[]): Tally {
  const sum = emptyTally();
  for (const tally of tallies) {
    for (const [name, n] of Object.entries(tally.calls)) sum.calls[name] = (sum.calls[name] ?? 0) + n;
    for (const [name, n] of Object.entries(tally.itemsReadBy ?? {})) sum.itemsReadBy[name] = (sum.itemsReadBy[name] ?? 0) + n;
    sum.itemsRead += tally.itemsRead;
    sum.itemsWritten += tally.itemsWritten;
    sum.changesHeard += tally.changesHeard ?? 0;
    sum.subscriptions += tally.subscriptions ?? 0;
  }
  return sum;
}

/** Wraps a storage so that every call and item is counted in `tally()`'s current tally. */
export function counting(inner: Storage, tally: () => Tally): Storage {
  const count = (name: string, read: number, written: number): void => {
    const t = tally();
    t.calls[name] = (t.calls[name] ?? 0) + 1;
    t.itemsRead += read;
    if (read > 0) t.itemsReadBy[name] = (t.itemsReadBy[name] ?? 0) + read;
    t.itemsWritten += written;
  };
  return {
    contractVersion: inner.contractVersion,
    listLeases: async (group) => {
      const listing = await inner.listLeases(group);
      count('listLeases', listing.leases.length + listing.corrupt.length, 0);
      return listing;
    },
    getLease: (group, leaseKey) => (count('getLease', 1, 0), inner.getLease(group, leaseKey)),
    // Many leases by key in one call (one item per key named), when the adapter has it, unless
    // BENCH_NO_LEASE_READS=1 hides it to measure the reads one by one it replaces, in the same build.
    ...(inner.getLeases && process.env.BENCH_NO_LEASE_READS !== '1'
      ? {
          getLeases: (group: string, leaseKeys: readonly string[]) => (
            count('getLeases', new Set(leaseKeys).size, 0), (inner.getLeases as NonNullable<Storage['getLeases']>)(group, leaseKeys)
          ),
        }
      : {}),
    createLease: (lease, options) => (count('createLease', 0, 1), inner.createLease(lease, options)),
    updateLeases: (group, updates) => (count('updateLeases', 0, updates.length), inner.updateLeases(group, updates)),
    deleteLease: (group, leaseKey, version) => (count('deleteLease', 0, 1), inner.deleteLease(group, leaseKey, version)),
    // A member is a record of its own: a whole roster read reads every member.
    getRoster: async (group) => {
      const roster = await inner.getRoster(group);
      count('getRoster', roster.members.length + roster.corrupt.length, 0);
      return roster;
    },
    putMember: (group, workerId, version, next) => (count('putMember', 0, 1), inner.putMember(group, workerId, version, next)),
    removeMember: (group, workerId, version) => (count('removeMember', 0, 1), inner.removeMember(group, workerId, version)),
    // The watchers' reads, when the adapter has them: without them core reads the whole roster every tick.
    ...(inner.getMembers && inner.getRosterDigest && inner.advanceRosterDigest
      ? {
          getMembers: async (group: string, workerIds: readonly string[]) => {
            const roster = await (inner.getMembers as NonNullable<Storage['getMembers']>)(group, workerIds);
            count('getMembers', roster.members.length + roster.corrupt.length, 0);
            return roster;
          },
          getRosterDigest: (group: string) => (count('getRosterDigest', 1, 0), (inner.getRosterDigest as NonNullable<Storage['getRosterDigest']>)(group)),
          advanceRosterDigest: (group: string, workerIds?: readonly string[]) => (
            count('advanceRosterDigest', 0, 1),
            workerIds === undefined ? (inner.advanceRosterDigest as NonNullable<Storage['advanceRosterDigest']>)(group) : (inner.advanceRosterDigest as NonNullable<Storage['advanceRosterDigest']>)(group, workerIds)
          ),
        }
      : {}),
    // The digest with the names of its moves (one record read: the digest's, with the names kept beside
    // it), when the adapter has it, unless BENCH_NO_ROSTER_MOVES=1 hides it to measure the whole reads
    // it replaces, in the same build.
    ...(inner.getRosterMoves && process.env.BENCH_NO_ROSTER_MOVES !== '1'
      ? { getRosterMoves: (group: string, since: number) => (count('getRosterMoves', 1, 0), (inner.getRosterMoves as NonNullable<Storage['getRosterMoves']>)(group, since)) }
      : {}),
    // The feed's deliveries, counted in the tally current when each arrives, and the subscriptions opened.
    ...(inner.subscribe
      ? {
          subscribe: (group: string, listener: (change: LeaseChange) => void, options?: SubscribeOptions) => {
            tally().subscriptions++;
            const heard = (change: LeaseChange): void => {
              tally().changesHeard++;
              listener(change);
            };
            return (inner.subscribe as NonNullable<Storage['subscribe']>).call(inner, group, heard, options);
          },
        }
      : {}),
    getLeader: (group) => inner.getLeader(group),
    createLeader: (leader) => inner.createLeader(leader),
    updateLeader: (group, version, next) => inner.updateLeader(group, version, next),
  };
}

export interface LoopDelay {
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  meanMs: number;
}

/** The sampling interval of the event-loop delay histogram; each sample includes it, so it is subtracted. */
export const LOOP_RESOLUTION_MS = 10;

/** The event loop's delay beyond the sampling interval, in ms. */
export function loopDelay(histogram: ReturnType<typeof monitorEventLoopDelay>): LoopDelay {
  const beyond = (ns: number): number => Math.max(0, ns / 1e6 - LOOP_RESOLUTION_MS);
  return { p50Ms: beyond(histogram.percentile(50)), p99Ms: beyond(histogram.percentile(99)), maxMs: beyond(histogram.max), meanMs: beyond(histogram.mean) };
}

export interface Balance {
  /** Every lease held by exactly one worker, and max - min <= 1 leases per worker. */
  ok: boolean;
  held: number;
  most: number;
  fewest: number;
}

/** How `leases` leases stand among workers holding `heldPerWorker` (each worker's lease keys). */
export function balance(heldPerWorker: Iterable<Iterable<string>>, leases: number): Balance {
  let held = 0;
  let most = 0;
  let fewest = Infinity;
  const seen = new Set<string>();
  for (const keys of heldPerWorker) {
    let count = 0;
    for (const key of keys) {
      count++;
      seen.add(key);
    }
    held += count;
    most = Math.max(most, count);
    fewest = Math.min(fewest, count);
  }
  return { ok: held === leases && seen.size === held && most - fewest <= 1, held, most, fewest: fewest === Infinity ? 0 : fewest };
}
