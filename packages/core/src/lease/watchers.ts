/**
 * Watchers (DESIGN section 4, "Watchers and the roster digest"): the live members stand on a ring ordered
 * by a hash of their worker ids, and each member is watched by the `watchers` members that follow it.
 * A watcher reads the members it watches every take tick and judges their expiry; every other member
 * learns of a death from the roster digest. The ring is a pure function of the live members a worker last
 * read whole, so two workers with the same view agree on it, and a member whose watchers all died gets new
 * ones at the first whole read after their deaths are declared.
 */
import { mixed } from '../key-bucket.js';

/**
 * FNV-1a over the id's UTF-16 code units, then MurmurHash3's finalizer, so that ids that differ only in
 * their last characters (`host-1`, `host-2`, ...) land far apart: cheap, stable across processes and releases.
 */
export function hashOf(workerId: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < workerId.length; i++) {
    hash ^= workerId.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return mixed(hash);
}

/** The worker ids in ring order: by hash, then by id (two ids with one hash still have one order). */
export function ringOrder(workerIds: Iterable<string>): string[] {
  return [...new Set(workerIds)]
    .map((workerId) => ({ workerId, hash: hashOf(workerId) }))
    .sort((a, b) => a.hash - b.hash || (a.workerId < b.workerId ? -1 : a.workerId > b.workerId ? 1 : 0))
    .map((entry) => entry.workerId);
}

/**
 * The members `self` watches among the live `members`: the `watchers` members before it on the ring, each
 * of which has `self` among the `watchers` members after it. Every other member when the group is that
 * small. `self` is placed on the ring whether or not it is among `members`.
 */
export function watchedBy(self: string, members: Iterable<string>, watchers: number): string[] {
  const ring = ringOrder([...members, self]);
  const at = ring.indexOf(self);
  const count = Math.min(watchers, ring.length - 1);
  return Array.from({ length: count }, (_, i) => ring[(at - 1 - i + ring.length) % ring.length] as string);
}

/** The members that watch `watched` among the live `members`: the `watchers` members after it on the ring. */
export function watchersOf(watched: string, members: Iterable<string>, watchers: number): string[] {
  const ring = ringOrder([...members, watched]);
  const at = ring.indexOf(watched);
  const count = Math.min(watchers, ring.length - 1);
  return Array.from({ length: count }, (_, i) => ring[(at + 1 + i) % ring.length] as string);
}

/**
 * The first of the members that watch `watched` among the live `members` (`watchersOf` with one watcher),
 * found in one pass over the members rather than by ordering the ring: the member that follows it on the
 * ring. `undefined` when no other member is alive.
 */
export function firstWatcherOf(watched: string, members: Iterable<string>): string | undefined {
  const at = hashOf(watched);
  const after = (hash: number, workerId: string, than: { hash: number; workerId: string }): boolean => hash > than.hash || (hash === than.hash && workerId > than.workerId);
  const self = { hash: at, workerId: watched };
  let next: { hash: number; workerId: string } | undefined;
  let lowest: { hash: number; workerId: string } | undefined;
  for (const workerId of members) {
    if (workerId === watched) continue;
    const hash = hashOf(workerId);
    if (lowest === undefined || !after(hash, workerId, lowest)) lowest = { hash, workerId };
    if (after(hash, workerId, self) && (next === undefined || !after(hash, workerId, next))) next = { hash, workerId };
  }
  return (next ?? lowest)?.workerId;
}
