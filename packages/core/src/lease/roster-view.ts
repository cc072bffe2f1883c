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
  /** The other live members (ids and incarnations) as last read, and when that set last changed. */
  #others: string | null = null;
  #othersChangedAt = -Infinity;

  constructor(options: RosterViewOptions) {
    this.#workerId = options.workerId;
    this.#expiryMs = options.expiryMs;
    this.#observations = new VersionWatch(options.now);
  }

  /**
   * Takes in a roster read at `now`: the members it holds replace those of the last read, and every live
   * member's write is observed. Returns the errors of the members that cannot be read back and were not
   * reported since they last could be, for the caller to report once.
   */
  read(roster: Roster, now: number): Error[] {
    this.#members = new Map(roster.members.map((member) => [member.workerId, member]));
    this.#corrupt = new Set(roster.corrupt.map((error) => (error as { workerId?: string }).workerId ?? ''));
    const fresh: Error[] = [];
    for (const error of roster.corrupt) {
      const workerId = (error as { workerId?: string }).workerId ?? '';
      if (!this.#reportedCorrupt.has(workerId)) fresh.push(error);
    }
    this.#reportedCorrupt = new Set(this.#corrupt);
    for (const member of roster.members) {
      if (member.status !== 'alive') this.#observations.forget(member.workerId);
      else this.#observations.see(member.workerId, writeOf(member), now);
    }
    this.#observations.retain((workerId) => this.#members.has(workerId));
    const others = roster.members
      .filter((member) => member.status === 'alive' && member.workerId !== this.#workerId)
      .map((member) => `${member.workerId}\u0000${member.incarnation}`)
      .sort()
      .join('\u0001');
    if (others !== this.#others) {
      this.#others = others;
      this.#othersChangedAt = now;
    }
    return fresh;
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
    this.#members.set(member.workerId, member);
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

  /** How many members this worker watches for expiry. */
  get observed(): number {
    return this.#observations.size;
  }

  /** When the set of other live members (ids and incarnations) last changed, on this worker's clock. */
  get othersChangedAt(): number {
    return this.#othersChangedAt;
  }

  /** Whether a member's record has not moved for the longer of both lease durations, on this worker's clock. */
  expired(member: MemberRecord, now: number): boolean {
    return this.#observations.expired(member.workerId, writeOf(member), this.#expiryMs(member), now);
  }

  /** The moment the first live member other than this worker would expire, if it stays still; `Infinity` when none is watched. */
  nextExpiry(): number {
    let earliest = Infinity;
    for (const member of this.#members.values()) {
      if (member.workerId === this.#workerId || member.status !== 'alive') continue;
      const at = this.#observations.expiresAt(member.workerId, writeOf(member), this.#expiryMs(member));
      if (at !== undefined) earliest = Math.min(earliest, at);
    }
    return earliest;
  }

  /** What, in the roster, calls for a new listing: who is alive in which incarnation, their change counters, and the corrupt. */
  signature(): string {
    const parts: string[] = [];
    for (const member of [...this.#members.values()].sort((a, b) => (a.workerId < b.workerId ? -1 : 1))) {
      parts.push(`${member.workerId}\u0000${member.incarnation}\u0000${member.status}\u0000${member.changes}`);
    }
    for (const workerId of [...this.#corrupt].sort()) parts.push(`${workerId}\u0000corrupt`);
    return parts.join('\u0001');
  }

  /** The live members (incarnation by worker id) as last read, the observer included while it is a member. */
  alive(): Map<string, string> {
    const alive = new Map<string, string>();
    for (const member of this.#members.values()) if (member.status === 'alive') alive.set(member.workerId, member.incarnation);
    return alive;
  }
}
