/**
 * Liveness as this process observes it, the way core's workers observe each other: per worker, never per
 * lease. A member of a group's roster is alive while its record keeps moving (every heartbeat moves its
 * version); it is expired once its version has not moved for its own lease duration, as measured on this
 * process's monotonic clock from the moment it first saw that version; it is dead once declared dead.
 * Wall clocks of workers are never compared, and a lease's version says nothing about its owner: leases
 * are written only when their owner or checkpoint changes.
 */
import type { CorruptRecordError, LeaseRecord, MemberRecord, Roster, Storage } from '@leasehold/core';
import { VersionWatch } from '@leasehold/core/adapter';

/** A monotonic clock in milliseconds. */
export type Now = () => number;

/** `performance.now()`: monotonic, unaffected by changes of the wall clock. */
export const monotonicNow: Now = () => performance.now();

/** What an observer knows about how long a record has not moved. */
export interface Age {
  /** Milliseconds since the version was seen to change, or `null` when it has not been seen to change yet. */
  readonly ageMs: number | null;
  /** The version is at least this old: the time since this observer first saw it. */
  readonly atLeastMs: number;
}

/** What an observer needs of a record: a key and a version. */
export interface Versioned {
  readonly key: string;
  readonly version: number;
}

/** Remembers versions across reads of one group, by core's observed-expiry rule (`VersionWatch`). */
export class Observer {
  readonly #now: Now;
  readonly #watch: VersionWatch;

  constructor(now: Now = monotonicNow) {
    this.#now = now;
    this.#watch = new VersionWatch(now);
  }

  /** Records a read (of members, or of anything keyed and versioned) and returns each one's age, by key. */
  observe(records: readonly Versioned[]): Map<string, Age> {
    const now = this.#now();
    const ages = new Map<string, Age>();
    const present = new Set<string>();
    for (const record of records) {
      present.add(record.key);
      const sighting = this.#watch.see(record.key, record.version, now);
      // A first sighting says nothing of how long the version stood before: only a lower bound.
      ages.set(record.key, { ageMs: sighting.moved ? now - sighting.seenAt : null, atLeastMs: now - sighting.seenAt });
    }
    // A record removed and written again starts over: its new version is not comparable with a gap in between.
    this.#watch.retain((key) => present.has(key));
    return ages;
  }

  /** Whether the record's version has been seen to change since this observer first saw it. */
  changed(key: string): boolean {
    return this.#watch.get(key)?.moved ?? false;
  }
}

/** A member as judged by an observer: `alive` (its record moves, or has not been watched for its lease duration yet), `expired`, or `dead`. */
export type MemberLiveness = 'alive' | 'expired' | 'dead';

/**
 * Judges a member from its record and its observed age: dead when declared dead, expired when its version
 * was watched not moving for its lease duration (and at least `minimumMs`), alive otherwise.
 */
export function memberLiveness(member: Pick<MemberRecord, 'status' | 'leaseDurationMs'>, age: Age | undefined, minimumMs = 0): MemberLiveness {
  if (member.status === 'dead') return 'dead';
  return age !== undefined && age.atLeastMs >= Math.max(member.leaseDurationMs, minimumMs) ? 'expired' : 'alive';
}

/**
 * Whom a lease's owner is to the group:
 * - `alive`: the owner is an alive member in the incarnation the lease names, so it holds the lease;
 * - `expired`: that member's record was watched not moving for its lease duration: it holds the lease no more;
 * - `dead`: that member was declared dead (or left);
 * - `other-incarnation`: the owner is a member, but in another incarnation than the lease names (it joined again);
 * - `not-a-member`: the roster has no member of that worker id;
 * - `unreadable`: the owner's member record cannot be read back: whether it is alive cannot be told.
 * A free lease has no owner: `null`. Every lease whose owner is not `alive` (or `unreadable`) is free to take.
 */
export type OwnerLiveness = 'alive' | 'expired' | 'dead' | 'other-incarnation' | 'not-a-member' | 'unreadable';

/** The liveness of a lease's owner, judged from its member (see {@link OwnerLiveness}); `null` for a free lease. */
export function ownerLiveness(
  lease: Pick<LeaseRecord, 'owner' | 'incarnation'>,
  members: ReadonlyMap<string, MemberRecord>,
  liveness: ReadonlyMap<string, MemberLiveness>,
  unreadable: ReadonlySet<string>,
): OwnerLiveness | null {
  if (lease.owner === null) return null;
  if (unreadable.has(lease.owner)) return 'unreadable';
  const member = members.get(lease.owner);
  if (member === undefined) return 'not-a-member';
  if (member.incarnation !== lease.incarnation) return 'other-incarnation';
  return liveness.get(lease.owner) ?? (member.status === 'dead' ? 'dead' : 'alive');
}

/** The worker ids of a roster's corrupt members. */
export function unreadableMembers(corrupt: readonly CorruptRecordError[]): Set<string> {
  return new Set(corrupt.map((error) => error.workerId ?? '?'));
}

/** What watching a roster showed. */
export interface RosterVerdict {
  /** Whether an alive member's record moved while watched, or a member that could not be read back became readable. */
  readonly live: boolean;
  /** The members whose record moved while watched (a heartbeat). */
  readonly moved: readonly MemberRecord[];
  /** Members that could not be read back at first and were readable later (a heartbeat replaced the damage). */
  readonly repaired: readonly string[];
  /** The alive members watched until they expired. */
  readonly expired: readonly MemberRecord[];
  /** How long the watch lasted, in milliseconds. */
  readonly watchedMs: number;
  /** The last roster read. */
  readonly roster: Roster;
}

/** Options of {@link watchRoster}. */
export interface WatchOptions {
  /**
   * Watch each alive member at least this long (above its own lease duration only when larger), and each
   * member that cannot be read back this long: its lease duration cannot be read.
   */
  readonly minimumMs: number;
  /** How long to watch a member that cannot be read back when `minimumMs` is 0. */
  readonly unreadableMs: number;
  /** The pause between reads of the roster, in milliseconds. */
  readonly pollMs: number;
  /** Watch only these worker ids (default: every member). */
  readonly only?: ReadonlySet<string>;
  readonly now?: Now;
  readonly sleep?: (ms: number) => Promise<void>;
}

const defaultSleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Watches a group's roster as core's workers watch each other, and tells whether the group is live: live
 * as soon as an alive member's record moves (it heartbeats), or a member that could not be read back
 * becomes readable (its worker's heartbeat replaced the damage); not live once every alive member was
 * watched not moving for its lease duration, and every unreadable member stayed unreadable for
 * `unreadableMs` (a worker whose member cannot be read back cannot heartbeat, and holds nothing once its
 * last heartbeat's hold ran out). Dead members are not watched. A roster with no alive and no unreadable
 * member is decided at once.
 */
export async function watchRoster(storage: Storage, group: string, options: WatchOptions): Promise<RosterVerdict> {
  const now = options.now ?? monotonicNow;
  const sleep = options.sleep ?? defaultSleep;
  const watched = (workerId: string): boolean => options.only === undefined || options.only.has(workerId);
  const observer = new Observer(now);
  let roster = await storage.getRoster(group);
  // Counted from the first read's answer, when members were first seen: a slow first read must not
  // shorten the watch of a member that cannot be read back.
  const started = now();
  const firstUnreadable = new Set([...unreadableMembers(roster.corrupt)].filter(watched));
  const unreadableFor = options.minimumMs > 0 ? options.minimumMs : options.unreadableMs;
  for (;;) {
    const ages = observer.observe(roster.members.filter((member) => watched(member.workerId)).map((member) => ({ key: member.workerId, version: member.version })));
    const alive = roster.members.filter((member) => watched(member.workerId) && member.status === 'alive');
    const watchedMs = now() - started;
    const moved = alive.filter((member) => observer.changed(member.workerId));
    const readable = new Set(roster.members.map((member) => member.workerId));
    const repaired = [...firstUnreadable].filter((workerId) => readable.has(workerId));
    if (moved.length > 0 || repaired.length > 0) return { live: true, moved, repaired, expired: [], watchedMs, roster };
    const pending = alive.filter((member) => memberLiveness(member, ages.get(member.workerId), options.minimumMs) === 'alive');
    const unreadable = [...unreadableMembers(roster.corrupt)].filter(watched);
    const waitUnreadable = unreadable.length > 0 ? Math.max(0, unreadableFor - watchedMs) : 0;
    if (pending.length === 0 && waitUnreadable === 0) {
      return { live: false, moved: [], repaired: [], expired: alive, watchedMs, roster };
    }
    // Sleep no longer than until the next member could expire, and re-read then.
    const untilExpiry = pending.map((member) => Math.max(member.leaseDurationMs, options.minimumMs) - (ages.get(member.workerId)?.atLeastMs ?? 0));
    const next = Math.min(options.pollMs, ...untilExpiry.map((ms) => Math.max(1, ms)), ...(waitUnreadable > 0 ? [waitUnreadable] : []));
    await sleep(next);
    roster = await storage.getRoster(group);
  }
}
