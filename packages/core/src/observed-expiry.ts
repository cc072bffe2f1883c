/**
 * Observed expiry (DESIGN section 4): a record is expired once its version has not moved for a duration
 * measured on the observer's own monotonic clock, from the moment the observer first saw that version.
 * Wall clocks are never compared, so only clock *rates* matter (bounded by `maxClockDrift`). The lease
 * coordinator watches members this way, the leader elector the leader record, and `leasehold status` and
 * its guards judge liveness with the same rule, so that a tool never calls alive what a worker would take.
 */

/** What is known of one watched record. */
export interface Sighting {
  /** The version (with whatever else identifies one write of the record, such as an incarnation) last seen. */
  readonly version: string;
  /** When this observer first saw that version. */
  readonly seenAt: number;
  /** Whether this observer saw the record move (a version after the first it saw). */
  readonly moved: boolean;
  /** When this observer first saw the record at all. */
  readonly firstSeenAt: number;
}

/** Remembers, per key, the version last seen and since when, on one monotonic clock. */
export class VersionWatch {
  readonly #now: () => number;
  readonly #seen = new Map<string, Sighting>();

  /** `now` is the observer's monotonic clock in milliseconds. */
  constructor(now: () => number) {
    this.#now = now;
  }

  /**
   * Records that `key` was read at `version` (a string or number; give a combined string when more than
   * the version identifies a write, as an incarnation does); returns what is known of it now.
   */
  see(key: string, version: string | number, now: number = this.#now()): Sighting {
    const identity = String(version);
    const before = this.#seen.get(key);
    let sighting: Sighting;
    if (before === undefined) sighting = { version: identity, seenAt: now, moved: false, firstSeenAt: now };
    else if (before.version !== identity) sighting = { version: identity, seenAt: now, moved: true, firstSeenAt: before.firstSeenAt };
    else return before;
    this.#seen.set(key, sighting);
    return sighting;
  }

  /** How many keys are watched. */
  get size(): number {
    return this.#seen.size;
  }

  /** What is known of `key`, if it is watched. */
  get(key: string): Sighting | undefined {
    return this.#seen.get(key);
  }

  /** Stops watching `key` (a record removed and written again starts over). */
  forget(key: string): void {
    this.#seen.delete(key);
  }

  /** Stops watching every key `keep` refuses. */
  retain(keep: (key: string) => boolean): void {
    for (const key of this.#seen.keys()) if (!keep(key)) this.#seen.delete(key);
  }

  /** Forgets everything. */
  clear(): void {
    this.#seen.clear();
  }

  /**
   * When `key`, still at `version`, expires for a duration of `durationMs`: the moment its version was
   * first seen plus the duration; `undefined` when it is not watched at that version.
   */
  expiresAt(key: string, version: string | number, durationMs: number): number | undefined {
    const seen = this.#seen.get(key);
    if (!seen || seen.version !== String(version)) return undefined;
    return seen.seenAt + durationMs;
  }

  /** Whether `key`, still at `version`, has not moved for `durationMs` on this clock. */
  expired(key: string, version: string | number, durationMs: number, now: number = this.#now()): boolean {
    const at = this.expiresAt(key, version, durationMs);
    return at !== undefined && now >= at;
  }
}
