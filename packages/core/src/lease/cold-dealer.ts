/**
 * A large group's cold start dealt by one member (DESIGN section 4, taking, step 3, "One member deals a
 * cold start"). With a change feed, in a group that reads as watchers, the member first by worker id lists
 * the group once the members stop joining, takes its portion and writes every other member's portion to
 * it, each lease announced `handed-off` with its new owner, as a declarer deals a dead member's leases;
 * then its member record says how many leases it dealt. The other members do not list: each reads the
 * leases the feed names it for, by key, and once it holds its share of the leases the note counts, it takes
 * the note and the roster for its first listing. Every member listing the group at once was what bounded a
 * cold start on real backends (100 listings of 10,000 leases: 4.4-6.9 take ticks after the last join on
 * Redis and PostgreSQL).
 *
 * A member the deal missed, or whose dealer never deals (it died, its listing failed, it was slow), lists
 * as before: one that holds nothing a take tick after it read the note (written once the deal was), and
 * any that waited `COLD_DEALER_WAIT_TICKS` take ticks with no lease of the deal coming in. Portions over
 * `COLD_DEAL_MAX_PORTION` are not dealt: the dealer's note, written at once, sends the members to list, each
 * taking its own portion as before.
 */
import { shares } from './balance.js';
import { COLD_DEALT_FIELD, readColdDealt } from './cold-deal-note.js';
import { LEAVING_FIELD, type Incarnation } from './membership.js';
import type { LeaseParts } from './parts.js';

/**
 * How long, in take ticks from the moment it would have listed or from the last lease of the deal it
 * received, a cold start's member waits for the dealer's deal before it lists the group itself: the
 * dealer lists once (a fraction of a second for 10,000 leases when nobody else lists), takes its portion
 * and writes the rest, a lease of every portion in each batch.
 */
export const COLD_DEALER_WAIT_TICKS = 3;

/**
 * How long, in take ticks, the dealer's note stays in its record: the members it dealt to read it at their
 * next roster read (the note's heartbeat moves the digest), within a quarter of a tick while they wait.
 */
export const COLD_DEALT_NOTE_TICKS = 5;

/**
 * The largest portion a cold start's dealer deals: a member waiting for its portion reads it by key, 16
 * at once, which for 1,000 leases is about as long as a listing of the group takes under load. Beyond it the
 * dealer deals nothing, and its note sends the members to list, each taking its own portion as before.
 */
export const COLD_DEAL_MAX_PORTION = 1_000;

export interface ColdDealerOptions {
  readonly parts: LeaseParts;
  /** Whether a dealer writes what it deals to the members (a change feed tells them), and this worker reads as a watcher. */
  readonly dealsHere: () => boolean;
  /** The most leases a member may hold. */
  readonly capOf: (workerId: string) => number;
  /** Unsafe: a member waits for the dealer's deal however long it takes, and lists only when it is the dealer. */
  readonly awaited: boolean;
}

/** What a member does at a take tick before its first listing: wait for the deal, list, or take the deal's note for its listing. */
export type ColdDealAnswer = 'wait' | 'list' | { readonly total: number; readonly news: boolean };

/** Who deals a cold start, and a member's wait for the deal. */
export class ColdDealer {
  readonly #parts: LeaseParts;
  readonly #dealsHere: () => boolean;
  readonly #capOf: (workerId: string) => number;
  readonly #awaited: boolean;
  /** This incarnation's wait for the deal: since when, since when it read the note, and whether it gave up. */
  #wait: { readonly incarnation: string; since: number; held: number; readonly news: number; noteSeenAt: number | null; over: boolean; forNote: boolean } | null = null;
  /** When this worker wrote its own note, for its drop. */
  #notedAt: number | null = null;

  constructor(options: ColdDealerOptions) {
    this.#parts = options.parts;
    this.#dealsHere = options.dealsHere;
    this.#capOf = options.capOf;
    this.#awaited = options.awaited;
  }

  /** Whether one member deals a cold start here: a change feed, and a group read as watchers. */
  dealsHere(): boolean {
    return this.#dealsHere();
  }

  /** Whether this worker lists for its cold start: no one member deals here, or it is that member. */
  listsItself(): boolean {
    if (!this.#dealsHere()) return true;
    const dealer = this.#dealer();
    return dealer === null || dealer === this.#parts.workerId;
  }

  /** Whether this worker, in `membership`, waits for a cold start's deal. */
  waiting(membership: Incarnation): boolean {
    return this.#wait?.incarnation === membership.incarnation && !this.#wait.over;
  }

  /** Whether this worker, in `membership`, lists because a cold start's note said the portions were too large to deal: its listing is a cold start's. */
  listsForNote(membership: Incarnation): boolean {
    return this.#wait?.incarnation === membership.incarnation && this.#wait.forNote;
  }

  /** This worker dealt a cold start of `total` leases to the group: its record says so for a few ticks. */
  dealt(total: number, now: number): void {
    this.#parts.members.noteColdDeal(total);
    this.#notedAt = now;
  }

  /** At each take tick: drops this worker's note once the members it dealt to have read it. */
  atTick(now: number): void {
    if (this.#notedAt !== null && now - this.#notedAt >= COLD_DEALT_NOTE_TICKS * this.#parts.takeIntervalMs) {
      this.#parts.members.unnoteColdDeal();
      this.#notedAt = null;
    }
  }

  /**
   * At a take tick before this worker's first listing, once the members stopped joining: whether it waits
   * for the dealer's deal, lists, or takes the note of a deal of `total` leases for its first listing (it
   * holds its share of them). It starts waiting only in a cold start: no other live member holds anything,
   * or this worker holds leases it never listed for (they came from the deal). `news`: this worker's count of the lease changes it heard of; the answer
   * says whether it moved while this worker waited.
   */
  answer(now: number, membership: Incarnation, news: number): ColdDealAnswer {
    if (!this.#dealsHere()) return 'list';
    let wait = this.#wait?.incarnation === membership.incarnation ? this.#wait : null;
    if (wait?.over) return 'list';
    const dealer = this.#dealer();
    const note = this.#note();
    if (wait === null) {
      const dealtHere = this.#parts.hold.countHeld() > 0;
      // (Not for a note alone: a member that joins a group whose dealer's note still stands was not in the
      // deal, and waiting would hold back the asks of its first listing while the members offer it leases.)
      if (dealer === null || dealer === this.#parts.workerId || (!dealtHere && !this.#othersHoldNothing())) return 'list';
      wait = this.#wait = { incarnation: membership.incarnation, since: now, held: 0, news, noteSeenAt: null, over: false, forNote: false };
    }
    // Leases of the deal coming in: it is under way, however long its batches take.
    const held = this.#parts.hold.countHeld();
    if (held > wait.held) [wait.held, wait.since] = [held, now];
    const giveUp = (): 'list' => {
      (wait as { over: boolean }).over = true;
      return 'list';
    };
    // The dealer gone or leaving, this worker first now: it lists, and deals what is still free.
    if (dealer === this.#parts.workerId) return giveUp();
    if (note !== null) {
      wait.noteSeenAt ??= now;
      const share = shares(this.#members(), note, this.#capOf).get(this.#parts.workerId) ?? 0;
      if (share > COLD_DEAL_MAX_PORTION) {
        wait.forNote = true;
        return giveUp();
      }
      if (held >= share) return { total: note, news: news !== wait.news };
      // Dealt nothing a tick after the note, written once the deal was: a member that joined after the
      // deal, or one whose leases the deal wrote to another incarnation of it.
      if (held === 0 && now - wait.noteSeenAt >= this.#parts.takeIntervalMs && !this.#awaited) return giveUp();
    }
    if (!this.#awaited && now - wait.since >= COLD_DEALER_WAIT_TICKS * this.#parts.takeIntervalMs) return giveUp();
    return 'wait';
  }

  /** The live members not leaving (this worker whatever it says), sorted: those a deal is dealt to. */
  #members(): string[] {
    const members: string[] = [];
    for (const member of this.#parts.view.values()) {
      if (member.status === 'alive' && (member.workerId === this.#parts.workerId || member.metadata[LEAVING_FIELD] === undefined)) members.push(member.workerId);
    }
    return members.sort();
  }

  /** The member that deals a cold start: the first by worker id of the live members not leaving. */
  #dealer(): string | null {
    return this.#members()[0] ?? null;
  }

  /** Whether no live member other than this worker says it holds anything. */
  #othersHoldNothing(): boolean {
    for (const member of this.#parts.view.values()) if (member.status === 'alive' && member.workerId !== this.#parts.workerId && member.held > 0) return false;
    return true;
  }

  /** The count of the leases a live member other than this worker says it dealt in a cold start, the largest if several did. */
  #note(): number | null {
    let total: number | null = null;
    for (const member of this.#parts.view.values()) {
      if (member.status !== 'alive' || member.workerId === this.#parts.workerId) continue;
      const dealt = readColdDealt(member.metadata[COLD_DEALT_FIELD]);
      if (dealt !== undefined) total = Math.max(total ?? 0, dealt);
    }
    return total;
  }
}
