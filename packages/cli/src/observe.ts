/**
 * Lease age and liveness as this process observes them, the way core observes expiry: wall clocks of
 * workers are never compared. Per lease, the version last seen and the local monotonic time it was first
 * seen; "age" is the time since the version last changed, as far as this process can tell.
 */
import type { CorruptRecordError, LeaseRecord, Storage } from '@leasehold/core';

/** A monotonic clock in milliseconds. */
export type Now = () => number;

/** `performance.now()`: monotonic, unaffected by changes of the wall clock. */
export const monotonicNow: Now = () => performance.now();

interface Sighting {
  readonly version: number;
  /** When this version was first seen; `null` on the first listing, since it may be older than that. */
  readonly since: number | null;
  /** When this lease was first seen at all. */
  readonly firstSeen: number;
}

/** What an observer knows about one lease's age. */
export interface Age {
  /** Milliseconds since the version was seen to change, or `null` when it has not been seen to change yet. */
  readonly ageMs: number | null;
  /** When `ageMs` is `null`: the version is at least this old (the time since it was first seen). */
  readonly atLeastMs: number;
}

/** What an observer needs of a record: its key and version. */
export interface Versioned {
  readonly leaseKey: string;
  readonly version: number;
}

/** Remembers versions across listings of one group. */
export class Observer {
  readonly #now: Now;
  readonly #seen = new Map<string, Sighting>();

  constructor(now: Now = monotonicNow) {
    this.#now = now;
  }

  /** Records a listing (of leases, or of anything keyed and versioned) and returns each one's age, by key. */
  observe(leases: readonly Versioned[]): Map<string, Age> {
    const now = this.#now();
    const ages = new Map<string, Age>();
    const present = new Set<string>();
    for (const lease of leases) {
      present.add(lease.leaseKey);
      const before = this.#seen.get(lease.leaseKey);
      let sighting: Sighting;
      if (before === undefined) sighting = { version: lease.version, since: null, firstSeen: now };
      else if (before.version !== lease.version) sighting = { version: lease.version, since: now, firstSeen: before.firstSeen };
      else sighting = before;
      this.#seen.set(lease.leaseKey, sighting);
      ages.set(lease.leaseKey, {
        ageMs: sighting.since === null ? null : now - sighting.since,
        atLeastMs: now - (sighting.since ?? sighting.firstSeen),
      });
    }
    // A lease deleted and created again starts over: its new version is not comparable with a gap in between.
    for (const key of this.#seen.keys()) if (!present.has(key)) this.#seen.delete(key);
    return ages;
  }

  /** Whether the lease's version has been seen to change since this observer first saw it. */
  changed(leaseKey: string): boolean {
    return (this.#seen.get(leaseKey)?.since ?? null) !== null;
  }
}

/** Why a group was judged live or not. */
export interface Liveness {
  readonly live: boolean;
  /** Leases with an owner whose version changed while watched: someone is renewing them. */
  readonly renewed: readonly LeaseRecord[];
  /** How many leases had an owner at the first listing. */
  readonly owned: number;
  /** The listing the verdict is based on (the last one). */
  readonly leases: readonly LeaseRecord[];
  /** The leases of that listing that cannot be read back. */
  readonly corrupt: readonly CorruptRecordError[];
}

/** Options of {@link observeLiveness}. */
export interface LivenessOptions {
  /** How long to watch, in milliseconds: longer than the group's `leaseDurationMs`. */
  readonly observeMs: number;
  /** The pause between listings, in milliseconds. */
  readonly pollMs: number;
  readonly now?: Now;
  readonly sleep?: (ms: number) => Promise<void>;
}

const defaultSleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Watches a group for `observeMs` and tells whether it is live: whether a lease with an owner changed
 * version meanwhile (a worker renewed it). A group none of whose leases has an owner is not live, and is
 * decided at once. A live group is decided as soon as one renewal is seen. Corrupt leases have no owner
 * or version that can be read: they count for neither.
 */
export async function observeLiveness(storage: Storage, group: string, options: LivenessOptions): Promise<Liveness> {
  const now = options.now ?? monotonicNow;
  const sleep = options.sleep ?? defaultSleep;
  const observer = new Observer(now);
  let { leases, corrupt } = await storage.listLeases(group);
  observer.observe(leases);
  const owned = leases.filter((lease) => lease.owner !== null).length;
  if (owned === 0) return { live: false, renewed: [], owned, leases, corrupt };
  const started = now();
  for (;;) {
    const elapsed = now() - started;
    if (elapsed >= options.observeMs) return { live: false, renewed: [], owned, leases, corrupt };
    await sleep(Math.min(options.pollMs, options.observeMs - elapsed));
    ({ leases, corrupt } = await storage.listLeases(group));
    observer.observe(leases);
    const renewed = leases.filter((lease) => lease.owner !== null && observer.changed(lease.leaseKey));
    if (renewed.length > 0) return { live: true, renewed, owned, leases, corrupt };
  }
}
