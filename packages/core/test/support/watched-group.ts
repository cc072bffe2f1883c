/**
 * A group of coordinators on one memory store in virtual time, and what the watchers' tests read of it:
 * shared by the group's tests (joins, leaves, counts, digest reads) and its deaths' (declarations, deals).
 */
import { LeaseCoordinator, MemoryStorage, type LeaseCoordinatorOptions, type MemberState } from '../../src/index.js';
import { RECORD_FORMAT } from '../../src/adapter.js';
import { seededRandom, FaultyStorage, noFaults, VirtualScheduler, withUnsafe, type CoordinatorUnsafe } from '../../src/testing/index.js';
import { withoutRosterMoves } from '../../src/testing/without-watcher-reads.js';
import { run } from './virtual.js';

export const GROUP = 'orders';
export const TICK = 2_000;

export const keys = (n: number, prefix = 'shard-') => Array.from({ length: n }, (_, i) => `${prefix}${String(i).padStart(4, '0')}`);
export const ids = (n: number) => Array.from({ length: n }, (_, i) => `worker-${String(i).padStart(2, '0')}`);

export function member(incarnation: string, fields: Partial<MemberState> = {}): MemberState {
  return { format: RECORD_FORMAT, incarnation, leaseDurationMs: 10_000, status: 'alive', held: 0, changes: 0, requests: [], metadata: {}, ...fields };
}

/**
 * A group of coordinators on one memory store, each behind its own fault-free view, on virtual time;
 * `rosterMoves: false` hides the store's `getRosterMoves`, as the adapters without it present it.
 */
export function group(unsafe?: CoordinatorUnsafe, slow: { listingMs: number; declareMs?: Record<string, number> } = { listingMs: 0 }, rosterMoves = true) {
  const scheduler = new VirtualScheduler();
  const memory = new MemoryStorage();
  const storage = rosterMoves ? memory : withoutRosterMoves(memory);
  /** The listings of the leases each worker made so far. */
  const listings = new Map<string, number>();
  /** Every lease read by key (one by one or many in one call), by whom and when. */
  const reads: Array<{ workerId: string; leaseKey: string; at: number }> = [];
  /** Each worker's calls of the store, by method. */
  const calls = new Map<string, Map<string, number>>();
  /** The declarations `slow.declareMs` held back: by whom, of whom. */
  const slowDeclarations: Array<{ workerId: string; of: string }> = [];
  /** Each worker's clock: killing it crashes the worker (it never runs again). */
  const clocks = new Map<string, ReturnType<VirtualScheduler['clock']>>();
  let seed = 1;
  const start = async (workerId: string, options: Partial<LeaseCoordinatorOptions> = {}): Promise<LeaseCoordinator> => {
    const clock = scheduler.clock();
    clocks.set(workerId, clock);
    const faulty = new FaultyStorage(storage, clock, seededRandom(seed), noFaults());
    const view = new Proxy(faulty, {
      get: (target, name) => {
        const value: unknown = Reflect.get(target, name, target);
        if (typeof value !== 'function') return value;
        return (...args: unknown[]) => {
          const own = calls.get(workerId) ?? new Map<string, number>();
          calls.set(workerId, own.set(String(name), (own.get(String(name)) ?? 0) + 1));
          if (name === 'getLease') reads.push({ workerId, leaseKey: args[1] as string, at: scheduler.now });
          if (name === 'getLeases') for (const leaseKey of args[1] as string[]) reads.push({ workerId, leaseKey, at: scheduler.now });
          // A declaration of another member's death that takes its time to land, as on a busy connection pool.
          const declareMs = slow.declareMs?.[workerId] ?? 0;
          if (name === 'putMember' && declareMs > 0 && args[1] !== workerId && (args[3] as MemberState).status === 'dead') {
            slowDeclarations.push({ workerId, of: args[1] as string });
            return clock.sleep(declareMs).then(() => (value as (...args: unknown[]) => unknown).apply(target, args));
          }
          if (name === 'listLeases') {
            listings.set(workerId, (listings.get(workerId) ?? 0) + 1);
            // A listing that takes its time, as one of a large group on a busy machine does.
            if (slow.listingMs > 0) return clock.sleep(slow.listingMs).then(() => (value as (...args: unknown[]) => unknown).apply(target, args));
          }
          return (value as (...args: unknown[]) => unknown).apply(target, args);
        };
      },
    });
    const coordinator = new LeaseCoordinator(withUnsafe({ storage: view, group: GROUP, workerId, clock, random: seededRandom(seed++), useChangeFeed: false, wholeRosterUpTo: 0, ...options }, unsafe));
    await run(scheduler, coordinator.start());
    return coordinator;
  };
  return { scheduler, storage, start, listings, clocks, reads, calls, slowDeclarations };
}

/** Runs until `done` holds, in steps of 100 ms, for at most `limitMs`; returns how long it took, or `Infinity`. */
export async function until(scheduler: VirtualScheduler, done: () => boolean, limitMs: number): Promise<number> {
  const from = scheduler.now;
  while (!done()) {
    if (scheduler.now - from > limitMs) return Infinity;
    await scheduler.advance(100);
  }
  return scheduler.now - from;
}

/**
 * Starts `workerIds` with a change feed, one after another; `declaredAt()` is when the first of them
 * declared `dead` dead (`Infinity` until one did).
 */
export async function startFed(g: ReturnType<typeof group>, workerIds: readonly string[], dead: string) {
  const workers: LeaseCoordinator[] = [];
  let at = Infinity;
  for (const workerId of workerIds) {
    const coordinator = await g.start(workerId, { useChangeFeed: true });
    coordinator.on('member-dead', ({ workerId: declared }) => declared === dead && (at = Math.min(at, g.scheduler.now)));
    workers.push(coordinator);
  }
  return { workers, declaredAt: () => at };
}

/**
 * `ghost`, a member that never heartbeats, holding `ghostLeases` leases, `freeLeases` more free, and
 * `members` members with a change feed: runs until the first declaration of the ghost's death and until
 * the ghost's leases are all held. Returns who declared it, the listings each member had made by then,
 * and how long after the declaration the ghost's leases were all held.
 */
export async function ghostDealt(g: ReturnType<typeof group>, ghostLeases: number, freeLeases: number, members: number) {
  const { scheduler, storage, start, listings } = g;
  await storage.putMember(GROUP, 'ghost', null, member('inc-ghost', { held: ghostLeases }));
  for (const leaseKey of keys(ghostLeases, 'ghost-')) await storage.createLease({ group: GROUP, leaseKey, owner: 'ghost', incarnation: 'inc-ghost', epoch: 1 });
  for (const leaseKey of keys(freeLeases)) await storage.createLease({ group: GROUP, leaseKey });
  const workers: LeaseCoordinator[] = [];
  let declaredAt = Infinity;
  let declarer: string | undefined;
  let listedBefore = new Map<string, number>();
  for (const workerId of ids(members)) {
    const coordinator = await start(workerId, { useChangeFeed: true });
    coordinator.on('member-dead', ({ workerId: dead }) => {
      if (dead !== 'ghost' || declaredAt < Infinity) return;
      [declaredAt, declarer, listedBefore] = [scheduler.now, workerId, new Map(listings)];
    });
    workers.push(coordinator);
  }
  await until(scheduler, () => declaredAt < Infinity, 60_000);
  const ghostHeld = () => workers.reduce((sum, w) => sum + w.heldLeases().filter((lease) => lease.leaseKey.startsWith('ghost-')).length, 0);
  const took = await until(scheduler, () => ghostHeld() === ghostLeases, 60_000);
  /** The listings each member made since the declaration. */
  const listedSince = () => ids(members).map((workerId) => (listings.get(workerId) ?? 0) - (listedBefore.get(workerId) ?? 0));
  return { workers, declarer, took, listedSince };
}
