/**
 * Watchers (DESIGN section 4, "Watchers and the roster digest"): the live members stand on a ring ordered
 * by a hash of their worker ids, and each member is watched by the `watchers` members that follow it.
 * A watcher reads the members it watches every take tick and judges their expiry; every other member
 * learns of a death from the roster digest. The ring is a pure function of the live members a worker last
 * read whole, so two workers with the same view agree on it, and a member whose watchers all died gets new
 * ones at the first whole read after their deaths are declared. Where every member names a failure domain
 * (`failureDomain`: a host, a process, a zone) and there are several, each domain's members are spread
 * evenly round the ring, so that a member's watchers are of other domains and the loss of one domain
 * leaves none of its members without a watcher.
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

/** The member metadata field that names a member's failure domain (the coordinator's `failureDomain`). */
export const FAILURE_DOMAIN_FIELD = 'leasehold.failureDomain';

/** A member's failure domain, or `undefined` when it names none. */
export type DomainOf = (workerId: string) => string | undefined;

/**
 * The failure domains of `members` as a lookup, when every one of them names one: a single member without
 * a domain (a worker of an earlier release, or one not given the option) makes every worker order the
 * plain ring, so that all agree on it whatever each knows.
 */
export function domainsOf(members: Iterable<{ readonly workerId: string; readonly metadata: Readonly<Record<string, string>> }>): DomainOf | undefined {
  const domains = new Map<string, string>();
  for (const member of members) {
    const domain = member.metadata[FAILURE_DOMAIN_FIELD];
    if (domain === undefined || domain === '') return undefined;
    domains.set(member.workerId, domain);
  }
  return (workerId) => domains.get(workerId);
}

const byHashThenId = (a: { hash: number; workerId: string }, b: { hash: number; workerId: string }): number =>
  a.hash - b.hash || (a.workerId < b.workerId ? -1 : a.workerId > b.workerId ? 1 : 0);

/**
 * The worker ids in ring order: by hash, then by id (two ids with one hash still have one order). With
 * `domainOf` naming a domain for every id, and more than one domain among them, each domain's members
 * (in that order) are spread evenly round the ring: the i-th of a domain of n members stands at (i + 0.5) / n
 * of the way round, domains at one place ordered by the hash of their names. Domains of equal size then
 * alternate, so that the members after any member are of other domains while others have members left.
 */
export function ringOrder(workerIds: Iterable<string>, domainOf?: DomainOf): string[] {
  const plain = [...new Set(workerIds)].map((workerId) => ({ workerId, hash: hashOf(workerId) })).sort(byHashThenId);
  const domains = domainOf === undefined ? undefined : plain.map((entry) => domainOf(entry.workerId));
  if (domains === undefined || domains.some((domain) => domain === undefined) || new Set(domains).size < 2) return plain.map((entry) => entry.workerId);
  const sizes = new Map<string, number>();
  for (const domain of domains as string[]) sizes.set(domain, (sizes.get(domain) ?? 0) + 1);
  const ranks = new Map<string, number>();
  const placed = plain.map((entry, i) => {
    const domain = (domains as string[])[i] as string;
    const rank = ranks.get(domain) ?? 0;
    ranks.set(domain, rank + 1);
    return { workerId: entry.workerId, at: (rank + 0.5) / (sizes.get(domain) as number), domain, domainHash: hashOf(domain) };
  });
  return placed
    .sort((a, b) => a.at - b.at || a.domainHash - b.domainHash || (a.domain < b.domain ? -1 : a.domain > b.domain ? 1 : 0))
    .map((entry) => entry.workerId);
}

/**
 * The members `self` watches among the live `members`: the `watchers` members before it on the ring, each
 * of which has `self` among the `watchers` members after it. Every other member when the group is that
 * small. `self` is placed on the ring whether or not it is among `members`.
 */
export function watchedBy(self: string, members: Iterable<string>, watchers: number, domainOf?: DomainOf): string[] {
  const ring = ringOrder([...members, self], domainOf);
  const at = ring.indexOf(self);
  const count = Math.min(watchers, ring.length - 1);
  return Array.from({ length: count }, (_, i) => ring[(at - 1 - i + ring.length) % ring.length] as string);
}

/** The members that watch `watched` among the live `members`: the `watchers` members after it on the ring. */
export function watchersOf(watched: string, members: Iterable<string>, watchers: number, domainOf?: DomainOf): string[] {
  const ring = ringOrder([...members, watched], domainOf);
  const at = ring.indexOf(watched);
  const count = Math.min(watchers, ring.length - 1);
  return Array.from({ length: count }, (_, i) => ring[(at + 1 + i) % ring.length] as string);
}

/**
 * The first of the members that watch `watched` among the live `members` (`watchersOf` with one watcher),
 * found in one pass over the members rather than by ordering the ring: the member that follows it on the
 * ring (with failure domains, on the ring `ringOrder` spreads). `undefined` when no other member is alive.
 */
export function firstWatcherOf(watched: string, members: Iterable<string>, domainOf?: DomainOf): string | undefined {
  if (domainOf !== undefined) return watchersOf(watched, [...members].filter((workerId) => workerId !== watched), 1, domainOf)[0];
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
