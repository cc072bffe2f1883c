/**
 * Who answered the digest (DESIGN section 4, "Who answered the digest"): the suspects this worker names in
 * its own member record, the suspects it reads in others', and, from the digest each member says it read,
 * which members may have died in the same crash as a member being declared: a declarer deals them none of
 * the dead member's leases, and no member offers them its own. Membership (membership.ts) writes the
 * record, and its watcher's suspects (still-prompts.ts) decide when to name one; this is the bookkeeping
 * both sides of a deal judge on.
 */
import type { MemberRecord, MemberState } from '../storage.js';
import type { RosterView } from './roster-view.js';

/**
 * Member metadata: the roster digest the member had read when it wrote its record. Written by members that
 * read the digest; a heartbeat that changes only this field advances nothing.
 */
export const DIGEST_SEEN_FIELD = 'leasehold.digest';

/**
 * Member metadata, one key per suspect: `leasehold.suspect.<workerId>` = the digest the writer advanced to
 * when it saw that watched member stand still for 0.7 of its expiry. Every member that reads it answers
 * with a heartbeat saying it read that digest or a later one, so that a declarer can tell the members alive
 * since from those that died with the suspect. The writer drops it at a later write; dropping it advances nothing.
 */
export const SUSPECT_PREFIX = 'leasehold.suspect.';

/** A member whose record stood still for this part of its lease duration may be dead: it is dealt and offered no lease (a heartbeat comes every 0.65). */
const SUSPECT_STILL = 0.75;

/** How long, in take ticks, every live member has to answer a suspect with a heartbeat: its next tick, and its write. */
export const ANSWER_TICKS = 1.25;

/** One write of a member, as a watcher tells its writes apart. */
export const writeIdentity = (member: MemberRecord): string => `${member.incarnation}\u0000${member.version}`;

/** The member state as others compare it: without the digest this member had read, nor its suspects. */
export function othersLookAt(state: MemberState): string {
  const metadata: Record<string, string> = {};
  for (const [key, value] of Object.entries(state.metadata)) if (key !== DIGEST_SEEN_FIELD && !key.startsWith(SUSPECT_PREFIX)) metadata[key] = value;
  return JSON.stringify({ ...state, metadata });
}

/** Whether `next` names a suspect `before` did not (at that digest): others must read it, and answer. */
export function addsSuspect(before: MemberState, next: MemberState): boolean {
  for (const [key, value] of Object.entries(next.metadata)) if (key.startsWith(SUSPECT_PREFIX) && before.metadata[key] !== value) return true;
  return false;
}

export interface AnswersOptions {
  readonly workerId: string;
  readonly takeIntervalMs: number;
  readonly leaseDurationMs: number;
  /** The roster as this worker last read it. */
  readonly view: RosterView;
  /** Whether this worker reads the digest (a group of watchers): only then do members say which digest they read. */
  readonly readsWatched: () => boolean;
  /** Unsafe: a member that did not answer a suspect is dealt and offered leases all the same. */
  readonly unansweredDealt: boolean;
}

/** The suspects named (by this worker and the others), and each member's answer to them. */
export class Answers {
  readonly #workerId: string;
  readonly #takeIntervalMs: number;
  readonly #leaseDurationMs: number;
  readonly #view: RosterView;
  readonly #readsWatched: () => boolean;
  readonly #unansweredDealt: boolean;
  /** The suspects named in the roster (by this worker or others), by the digest named, and when this worker first read each. */
  #named: { digest: number; at: number; key: string }[] = [];
  /** The watched members this worker names as suspects: the write it saw standing still, and the digest it advanced to. */
  readonly #suspects = new Map<string, { identity: string; digest: number }>();

  constructor(options: AnswersOptions) {
    this.#workerId = options.workerId;
    this.#takeIntervalMs = options.takeIntervalMs;
    this.#leaseDurationMs = options.leaseDurationMs;
    this.#view = options.view;
    this.#readsWatched = options.readsWatched;
    this.#unansweredDealt = options.unansweredDealt;
  }

  /** Names `members`, each still at the write this worker read, as suspects at `digest`, which this worker advanced to at `at`. */
  name(members: readonly MemberRecord[], digest: number, at: number): void {
    for (const member of members) this.#suspects.set(member.workerId, { identity: writeIdentity(member), digest });
    this.#note(digest, at, `${this.#workerId}\u0000own\u0000${digest}`);
  }

  /**
   * Writes into `metadata` (this worker's record) the digest it read and the suspects it names, those still
   * alive at the write it saw standing still.
   */
  writeInto(metadata: Record<string, string>, digestSeen: number | null): void {
    if (digestSeen !== null && this.#readsWatched()) metadata[DIGEST_SEEN_FIELD] = String(digestSeen);
    else delete metadata[DIGEST_SEEN_FIELD];
    for (const key of Object.keys(metadata)) if (key.startsWith(SUSPECT_PREFIX)) delete metadata[key];
    for (const [workerId, suspect] of this.#suspects) {
      const member = this.#view.get(workerId);
      if (member?.status === 'alive' && writeIdentity(member) === suspect.identity) metadata[`${SUSPECT_PREFIX}${workerId}`] = String(suspect.digest);
      else this.#suspects.delete(workerId);
    }
  }

  /**
   * Notes the suspects the roster just read (at `digest`) names; true when one is new, to be answered with a
   * heartbeat (which says it read `digest`, at least the suspect's). A suspect named at a digest this worker
   * has not read yet is noted at its next read, which that move brings.
   */
  read(digest: number, now: number): boolean {
    let fresh = false;
    for (const member of this.#view.values()) {
      if (member.status !== 'alive' || member.workerId === this.#workerId) continue;
      for (const [key, value] of Object.entries(member.metadata)) {
        if (!key.startsWith(SUSPECT_PREFIX)) continue;
        const named = Number(value);
        const id = `${member.workerId}\u0000${key}\u0000${value}`;
        if (!Number.isSafeInteger(named) || named > digest || this.#named.some((entry) => entry.key === id)) continue;
        this.#note(named, now, id);
        fresh = true;
      }
    }
    return fresh;
  }

  /** Whether a suspect was named (by this worker, or first read in another's record) at `since` or later. */
  namedSince(since: number): boolean {
    return this.#named.some((entry) => entry.at >= since);
  }

  #note(digest: number, at: number, key: string): void {
    this.#named.push({ digest, at, key });
    // A suspect is looked at for a lease duration or so: a few ticks' worth of names is plenty.
    if (this.#named.length > 64) this.#named = this.#named.slice(-32);
  }

  /**
   * Whether `member` may have died without being declared yet: its record stood still for 0.75 of its lease
   * duration as this worker read it, or it did not answer a suspect in time ({@link unanswered}). A
   * declarer deals it none of a dead member's leases, and no member offers it one of its own: either would
   * wait for its declaration.
   */
  looksGone(member: MemberRecord): boolean {
    return this.#view.stillFor(member) >= SUSPECT_STILL * member.leaseDurationMs || this.unanswered(member);
  }

  /**
   * Whether `member` may be offered a lease of this worker's: it does not {@link looksGone}, and, while
   * members are dying (`dying`: this worker saw a death lately), it answered a suspect this worker read in
   * the last lease duration, the earliest: it lived after the crash began. One that has not answered it yet
   * is offered nothing yet, unless this worker first saw its current write at that suspect's read or later
   * (a member that just joined). A handover drains the lease first, and one to a member that died would
   * wait for its declaration; an offer can wait a tick. (Not otherwise: a member may be named on its own, a
   * false alarm, and the offers would wait for nothing.)
   */
  mayBeOffered(member: MemberRecord, dying: boolean): boolean {
    if (this.looksGone(member)) return false;
    const answered = this.#digestAnswered(member);
    const readAt = this.#view.readAt(member.workerId);
    if (!dying || answered === undefined || readAt === undefined) return true;
    let first: { digest: number; at: number } | undefined;
    for (const entry of this.#named) if (entry.at >= readAt - this.#leaseDurationMs && entry.at <= readAt && (first === undefined || entry.digest < first.digest)) first = entry;
    if (first === undefined || answered >= first.digest) return true;
    const seenAt = this.#view.stillUntil(member, 0);
    return seenAt !== undefined && seenAt >= first.at;
  }

  /**
   * Whether `member` has not answered a suspect it had a take tick and a quarter to answer: its record, read
   * after that time, says it read an older digest than the suspect's. It may have died before the suspect
   * was named, in the same crash as the suspect. False for a member that does not say which digest it read
   * (it reads the whole roster, or runs an earlier release), for this worker, and while no suspect is that old.
   */
  unanswered(member: MemberRecord): boolean {
    const answered = this.#digestAnswered(member);
    const readAt = this.#view.readAt(member.workerId);
    if (answered === undefined || readAt === undefined) return false;
    const answerMs = ANSWER_TICKS * this.#takeIntervalMs;
    let latest: number | undefined;
    for (const entry of this.#named) if (entry.at + answerMs <= readAt && (latest === undefined || entry.digest > latest)) latest = entry.digest;
    return latest !== undefined && answered < latest;
  }

  /** The digest `member`'s record says it read; `undefined` for this worker, when it does not say, and while this worker reads the whole roster. */
  #digestAnswered(member: MemberRecord): number | undefined {
    if (this.#unansweredDealt || member.workerId === this.#workerId || !this.#readsWatched()) return undefined;
    const said = member.metadata[DIGEST_SEEN_FIELD];
    const answered = said === undefined ? NaN : Number(said);
    return Number.isSafeInteger(answered) ? answered : undefined;
  }
}
