/**
 * The group's roster as one worker last read it, and what that worker judges of each member (DESIGN
 * section 4, "Membership"): who is alive in which incarnation, which member stood still long enough to be
 * declared dead, and what in the roster calls for a new listing. Expiry is observed, never computed from
 * timestamps: a member is expired once its record has not moved for the longer of the observer's and the
 * member's own lease duration, on the observer's own monotonic clock, from the moment the observer first
 * saw that write. The coordinator reads the roster, hands each read to this view, and acts on its
 * judgements; this view writes nothing.
 */
import { VersionWatch } from '../observed-expiry.js';
import type { MemberRecord, Roster } from '../storage.js';

/** One write of a member record, as observed expiry watches it: a new incarnation or version is a move. */
const writeOf = (member: MemberRecord): string => `${member.incarnation}\u0000${member.version}`;

/** What the roster's signature holds of one member: a heartbeat (a new version only) leaves it as it was. */
const signaturePart = (member: MemberRecord): string => `${member.workerId}\u0000${member.incarnation}\u0000${member.status}\u0000${member.changes}`;

/** What the roster's signature holds, member by member: each member as read, or `corrupt` for one that cannot be read back. */
export type SignatureMembers = ReadonlyMap<string, MemberRecord | 'corrupt'>;

/**
 * Whether the signature moved from `before` to `after` only by live members turning dead (the same
 * incarnation and change counter: a declaration of death or a leave) and dead members removed: changes
 * after which a member that did not declare the death has nothing to list for, when the declarer deals
 * the dead member's leases (DESIGN section 4, "Why the declarer deals"). A join, a new incarnation, a
 * change counter's move or a record that cannot be read back is another change.
 */
export function movedByDeathsOnly(before: SignatureMembers, after: SignatureMembers): boolean {
  for (const [workerId, now] of after) {
    const was = before.get(workerId);
    if (was === undefined || was === 'corrupt' || now === 'corrupt') {
      if (was !== now) return false;
      continue;
    }
    if (signaturePart(was) === signaturePart(now)) continue;
    if (!(was.status === 'alive' && now.status === 'dead' && was.incarnation === now.incarnation && was.changes === now.changes)) return false;
  }
  for (const [workerId, was] of before) if (!after.has(workerId) && (was === 'corrupt' || was.status !== 'dead')) return false;
  return true;
}

/**
 * Whether the signature moved from `before` to `after` only by members joining: worker ids it did not
 * hold, or held dead, now alive (and dead members removed). The members already there then have nothing to
 * list for when the newcomers ask for their shares by name (DESIGN section 4, "A join that names its givers").
 */
export function movedByJoinsOnly(before: SignatureMembers, after: SignatureMembers): boolean {
  for (const [workerId, now] of after) {
    const was = before.get(workerId);
    if (was !== undefined && was !== 'corrupt' && now !== 'corrupt' && signaturePart(was) === signaturePart(now)) continue;
    if (now === 'corrupt' || now.status !== 'alive' || was === 'corrupt' || (was !== undefined && was.status !== 'dead')) return false;
  }
  for (const [workerId, was] of before) if (!after.has(workerId) && (was === 'corrupt' || was.status !== 'dead')) return false;
  return true;
}

/**
 * Whether the signature moved from `before` to `after` only by members joining (as {@link movedByJoinsOnly}
 * has them), live members turning dead in the same incarnation and change counter (as
 * {@link movedByDeathsOnly} has them) and dead members removed: what a rolling restart brings, a worker
 * stopping while another starts. Each part is then handled as it would be alone (the newcomers ask their
 * givers by name; a leave's note names its recipients, or a death's declarer deals its leases), and
 * neither brings a listing by every member (DESIGN section 4, "A join that names its givers").
 */
export function movedByJoinsAndDeaths(before: SignatureMembers, after: SignatureMembers): boolean {
  for (const [workerId, now] of after) {
    const was = before.get(workerId);
    if (was !== undefined && was !== 'corrupt' && now !== 'corrupt' && signaturePart(was) === signaturePart(now)) continue;
    if (now === 'corrupt' || was === 'corrupt') return false;
    if (now.status === 'alive' && (was === undefined || was.status === 'dead')) continue;
    if (was !== undefined && was.status === 'alive' && now.status === 'dead' && was.incarnation === now.incarnation && was.changes === now.changes) continue;
    return false;
  }
  for (const [workerId, was] of before) if (!after.has(workerId) && (was === 'corrupt' || was.status !== 'dead')) return false;
  return true;
}

/** The worker ids alive in `after` that `before` did not hold alive in the same incarnation: newcomers. */
export function joinedBetween(before: SignatureMembers, after: SignatureMembers): string[] {
  const joined: string[] = [];
  for (const [workerId, now] of after) {
    const was = before.get(workerId);
    if (now !== 'corrupt' && now.status === 'alive' && (was === undefined || was === 'corrupt' || was.status !== 'alive' || was.incarnation !== now.incarnation)) joined.push(workerId);
  }
  return joined;
}

/** The members live in `before` that `after` shows dead in the same incarnation: deaths and leaves. */
export function turnedDead(before: SignatureMembers, after: SignatureMembers): MemberRecord[] {
  const dead: MemberRecord[] = [];
  for (const [workerId, now] of after) {
    const was = before.get(workerId);
    if (was === undefined || was === 'corrupt' || now === 'corrupt') continue;
    if (was.status === 'alive' && now.status === 'dead' && was.incarnation === now.incarnation) dead.push(now);
  }
  return dead;
}

/** Whether two reads of a member (or its absence) leave the roster's signature as it was. */
const sameInSignature = (a: MemberRecord | undefined, b: MemberRecord | undefined): boolean =>
  a === undefined || b === undefined ? a === b : signaturePart(a) === signaturePart(b);

/** The worker id a roster's `CorruptRecordError` names. */
const workerIdOf = (error: Error): string => (error as { workerId?: string }).workerId ?? '';

export interface RosterViewOptions {
  /** The observing worker: it never judges itself expired, and its own member is not one of "the others". */
  readonly workerId: string;
  /** The observer's monotonic clock, in milliseconds. */
  readonly now: () => number;
  /** How long a member's record must stand still before it is expired, as this observer judges it. */
  readonly expiryMs: (member: MemberRecord) => number;
}

export class RosterView {
  readonly #workerId: string;
  readonly #expiryMs: (member: MemberRecord) => number;
  readonly #observations: VersionWatch;
  /** The members as last read, by worker id. */
  #members = new Map<string, MemberRecord>();
  /** The worker ids of the members the last read could not read back. */
  #corrupt = new Set<string>();
  #reportedCorrupt = new Set<string>();
  /** When each member (or its unreadable record) was last read, on the observer's clock. */
  #readAt = new Map<string, number>();
  /**
   * For each live member whose current write this observer saw replace an earlier one: when it last read
   * the earlier one, so that the write came between that read and the first read that showed it.
   */
  #seenAfter = new Map<string, number>();
  /** How many member records a read took in older than the view held (see {@link staleReads}). */
  #staleReads = 0;
  /**
   * The other live members (incarnation by worker id) as of the last read, and when that set last changed.
   * Kept up to date by the members each read names and each {@link set} touched, so that a watcher's read
   * of a few members costs a few lookups, not a sort of the whole roster.
   */
  #others: Map<string, string> | null = null;
  #othersChangedAt = -Infinity;
  /** Whether any read showed another live member. */
  #othersSeen = false;
  /** The members {@link set} replaced since the last read: the next read checks them against `#others`. */
  #touched = new Set<string>();
  /** {@link signature}, until a member or a corrupt record it names changes. */
  #signature: string | null = null;

  constructor(options: RosterViewOptions) {
    this.#workerId = options.workerId;
    this.#expiryMs = options.expiryMs;
    this.#observations = new VersionWatch(options.now);
  }

  /**
   * Takes in a whole roster read at `now`: the members it holds replace those of the last read, and every
   * live member's write is observed. Returns the errors of the members that cannot be read back and were
   * not reported since they last could be, for the caller to report once.
   */
  read(roster: Roster, now: number): Error[] {
    this.#signature = null;
    for (const member of roster.members) this.#countStale(this.#members.get(member.workerId), member);
    this.#members = new Map(roster.members.map((member) => [member.workerId, member]));
    this.#corrupt = new Set(roster.corrupt.map(workerIdOf));
    const readBefore = this.#readAt;
    this.#readAt = new Map([...this.#members.keys(), ...this.#corrupt].map((workerId) => [workerId, now]));
    for (const member of roster.members) this.#observe(member, now, readBefore.get(member.workerId));
    this.#observations.retain((workerId) => this.#members.has(workerId));
    for (const workerId of this.#seenAfter.keys()) if (!this.#members.has(workerId)) this.#seenAfter.delete(workerId);
    return this.#settle(roster.corrupt, now);
  }

  /**
   * Takes in a read of some members only (a watcher's), at `now`: each named member is replaced by what
   * the read holds of it, or removed if the read found none; every other member stays as last read, and
   * its expiry is not judged again until a read that includes it (see {@link expired}).
   */
  readSome(roster: Roster, workerIds: readonly string[], now: number): Error[] {
    const found = new Map(roster.members.map((member) => [member.workerId, member]));
    const corrupt = new Set(roster.corrupt.map(workerIdOf));
    for (const workerId of workerIds) {
      const readBefore = this.#readAt.get(workerId);
      this.#readAt.set(workerId, now);
      const member = found.get(workerId);
      if (this.#corrupt.has(workerId) !== corrupt.has(workerId) || !sameInSignature(this.#members.get(workerId), member)) this.#signature = null;
      if (corrupt.has(workerId)) this.#corrupt.add(workerId);
      else this.#corrupt.delete(workerId);
      if (member) {
        this.#countStale(this.#members.get(workerId), member);
        this.#members.set(workerId, member);
        this.#observe(member, now, readBefore);
      } else {
        this.#members.delete(workerId);
        this.#observations.forget(workerId);
        this.#seenAfter.delete(workerId);
        if (!corrupt.has(workerId)) this.#readAt.delete(workerId);
      }
    }
    return this.#settle(roster.corrupt, now, workerIds);
  }

  /** Observes one member's write at `now`; `readBefore`: when the member was last read before. */
  #observe(member: MemberRecord, now: number, readBefore: number | undefined): void {
    const workerId = member.workerId;
    if (member.status !== 'alive') {
      this.#observations.forget(workerId);
      this.#seenAfter.delete(workerId);
      return;
    }
    const before = this.#observations.get(workerId);
    const sighting = this.#observations.see(workerId, writeOf(member), now);
    if (sighting === before) return;
    if (sighting.moved && readBefore !== undefined) this.#seenAfter.set(workerId, readBefore);
    else this.#seenAfter.delete(workerId);
  }

  /** Reports the corrupt members not reported since they last read back, and notes a change of the other live members. */
  #settle(corrupt: readonly Error[], now: number, readOnly?: readonly string[]): Error[] {
    const fresh: Error[] = [];
    for (const error of corrupt) if (!this.#reportedCorrupt.has(workerIdOf(error))) fresh.push(error);
    if (readOnly === undefined) this.#reportedCorrupt = new Set(this.#corrupt);
    else {
      for (const workerId of readOnly) {
        if (this.#corrupt.has(workerId)) this.#reportedCorrupt.add(workerId);
        else this.#reportedCorrupt.delete(workerId);
      }
    }
    if (this.#othersMoved(readOnly)) this.#othersChangedAt = now;
    if (!this.#othersSeen && (this.#others?.size ?? 0) > 0) this.#othersSeen = true;
    this.#touched.clear();
    return fresh;
  }

  /** Whether the other live members (ids and incarnations) differ from those of the last read, which they replace. */
  #othersMoved(readOnly: readonly string[] | undefined): boolean {
    const previous = this.#others;
    if (previous === null || readOnly === undefined) {
      const others = new Map<string, string>();
      for (const member of this.#members.values()) {
        if (member.status === 'alive' && member.workerId !== this.#workerId) others.set(member.workerId, member.incarnation);
      }
      this.#others = others;
      if (previous === null || previous.size !== others.size) return true;
      for (const [workerId, incarnation] of others) if (previous.get(workerId) !== incarnation) return true;
      return false;
    }
    let moved = false;
    for (const workerId of [...readOnly, ...this.#touched]) {
      const member = this.#members.get(workerId);
      const incarnation = member?.status === 'alive' && workerId !== this.#workerId ? member.incarnation : undefined;
      if (previous.get(workerId) === incarnation) continue;
      moved = true;
      if (incarnation === undefined) previous.delete(workerId);
      else previous.set(workerId, incarnation);
    }
    return moved;
  }

  /** A member as last read (or as a write of this worker left it), if the roster holds it. */
  get(workerId: string): MemberRecord | undefined {
    return this.#members.get(workerId);
  }

  has(workerId: string): boolean {
    return this.#members.has(workerId);
  }

  /** Records a member as this worker's own write of it left it (a declaration of death, applied or met). */
  set(member: MemberRecord): void {
    if (!sameInSignature(this.#members.get(member.workerId), member)) this.#signature = null;
    this.#members.set(member.workerId, member);
    this.#touched.add(member.workerId);
  }

  values(): IterableIterator<MemberRecord> {
    return this.#members.values();
  }

  /** How many readable members the roster held. */
  get size(): number {
    return this.#members.size;
  }

  /** Whether the member of `workerId` could not be read back at the last read. */
  isCorrupt(workerId: string): boolean {
    return this.#corrupt.has(workerId);
  }

  /** How many members could not be read back at the last read. */
  get corruptCount(): number {
    return this.#corrupt.size;
  }

  /** Counts a read's `member` that is older than the record of the same incarnation the view `held`. */
  #countStale(held: MemberRecord | undefined, member: MemberRecord): void {
    if (held !== undefined && held.incarnation === member.incarnation && member.version < held.version) this.#staleReads++;
  }

  /**
   * How many member records the reads took in that were older than the record of the same incarnation
   * the view held: a read answered after one sent later. The membership's reads take effect in the order
   * they were sent, so on a store whose reads are strongly consistent this stays 0.
   */
  get staleReads(): number {
    return this.#staleReads;
  }

  /** How many members this worker watches for expiry. */
  get observed(): number {
    return this.#observations.size;
  }

  /** When the set of other live members (ids and incarnations) last changed, on this worker's clock. */
  get othersChangedAt(): number {
    return this.#othersChangedAt;
  }

  /** Whether any read so far showed another live member: a worker that never saw one started alone. */
  get othersSeen(): boolean {
    return this.#othersSeen;
  }

  /**
   * Whether a member's record has not moved for the longer of both lease durations on this worker's clock:
   * between the first read that showed its write and the last read of it. A member this worker stopped
   * reading (a watcher reads only a few) is judged on its last read, never on how long ago that was:
   * not having looked is not having seen it stand still.
   */
  expired(member: MemberRecord, now: number): boolean {
    const readAt = this.#readAt.get(member.workerId);
    return readAt !== undefined && this.#observations.expired(member.workerId, writeOf(member), this.#expiryMs(member), Math.min(now, readAt));
  }

  /**
   * How long this worker has seen a member's record stand still: from the first read that showed its
   * current write to the last read of it; 0 when no read showed that write twice. Like {@link expired},
   * never how long ago that read was: a member this worker stopped reading is judged on its reads.
   */
  stillFor(member: MemberRecord): number {
    const readAt = this.#readAt.get(member.workerId);
    const seen = this.#observations.get(member.workerId);
    if (readAt === undefined || seen === undefined || seen.version !== String(writeOf(member))) return 0;
    return Math.max(0, readAt - seen.seenAt);
  }

  /**
   * Between which reads the write of `member` this worker sees was made: after `after`, the last read that
   * showed the write before it (`undefined` when no read did: its first sight), and by `seenAt`, the first
   * read that showed it; `undefined` when no read showed that write (a member not alive, or not read).
   */
  writeWindow(member: MemberRecord): { readonly after: number | undefined; readonly seenAt: number } | undefined {
    const seen = this.#observations.get(member.workerId);
    if (seen === undefined || seen.version !== writeOf(member)) return undefined;
    return { after: this.#seenAfter.get(member.workerId), seenAt: seen.seenAt };
  }

  /** When this worker last read `workerId`'s record, if it read it. */
  readAt(workerId: string): number | undefined {
    return this.#readAt.get(workerId);
  }

  /**
   * The moment a member, still at the write this worker sees, will have stood still for `durationMs` since
   * this worker first saw that write; `undefined` when no read showed it.
   */
  stillUntil(member: MemberRecord, durationMs: number): number | undefined {
    return this.#observations.expiresAt(member.workerId, writeOf(member), durationMs);
  }

  /**
   * The moment the first live member other than this worker, among `watched` (default: every member),
   * would expire if it stays still; `Infinity` when none is watched.
   */
  nextExpiry(watched?: ReadonlySet<string>): number {
    let earliest = Infinity;
    for (const member of this.#members.values()) {
      if (member.workerId === this.#workerId || member.status !== 'alive' || (watched && !watched.has(member.workerId))) continue;
      const at = this.#observations.expiresAt(member.workerId, writeOf(member), this.#expiryMs(member));
      if (at !== undefined) earliest = Math.min(earliest, at);
    }
    return earliest;
  }

  /** What, in the roster, calls for a new listing: who is alive in which incarnation, their change counters, and the corrupt. */
  signature(): string {
    if (this.#signature !== null) return this.#signature;
    const parts: string[] = [];
    for (const member of [...this.#members.values()].sort((a, b) => (a.workerId < b.workerId ? -1 : 1))) parts.push(signaturePart(member));
    for (const workerId of [...this.#corrupt].sort()) parts.push(`${workerId}\u0000corrupt`);
    this.#signature = parts.join('\u0001');
    return this.#signature;
  }

  /** The members and unreadable records the signature is made of, as a copy that later reads leave as it is. */
  signatureMembers(): SignatureMembers {
    const members = new Map<string, MemberRecord | 'corrupt'>(this.#members);
    for (const workerId of this.#corrupt) members.set(workerId, 'corrupt');
    return members;
  }

  /** The live members (incarnation by worker id) as last read, the observer included while it is a member. */
  alive(): Map<string, string> {
    const alive = new Map<string, string>();
    for (const member of this.#members.values()) if (member.status === 'alive') alive.set(member.workerId, member.incarnation);
    return alive;
  }
}
