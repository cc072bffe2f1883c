/**
 * The members' counts as this worker judges them between listings (DESIGN section 4, the listing
 * triggers): whether it is two or more below or above another member, whether the counts fall short of
 * the leases the last listing found, and the plan of moves on them. Counts lag the leases: a leave's note
 * and a newcomer's asks name leases on their way that their recipients' counts do not show yet, and they
 * count as held here. Taking asks these at each take tick that nothing else brings a listing to, and tells
 * this part what each listing found.
 */
import type { MemberRecord } from '../storage.js';
import { capOf, planMoves, shares } from './balance.js';
import type { DeclarerDeal } from './declarer-deal.js';
import type { Handovers } from './handovers.js';
import { type AsksRead, ASKS_TICKS } from './join-asks.js';
import type { NotesRead } from './leave-notes.js';
import { LEAVING_FIELD } from './membership.js';
import type { LeaseParts } from './parts.js';

export interface CountsOptions {
  readonly parts: LeaseParts;
  readonly handovers: Handovers;
  readonly notes: NotesRead;
  readonly asks: AsksRead;
  readonly deal: DeclarerDeal;
  /** The most leases a member may hold. */
  readonly capOf: (workerId: string) => number;
  /** Whether the coordinator listens to the store's change feed. */
  readonly subscribed: () => boolean;
  /** Unsafe: counts falling short of the last listing never bring a listing. */
  readonly shortfallIgnored: boolean;
  /** Unsafe: with a change feed, being two below another member never brings a listing. */
  readonly belowIgnored: boolean;
  /** Unsafe: a cold start's portions count as on their way to their members until the next listing, however long they wait. */
  readonly coldDealTrusted: boolean;
}

/**
 * How long, in take ticks, a shortfall lasts before every member lists for it: two ticks, which the ticks'
 * jitter (each 0.95-1.05 of the interval) may make as short as 1.9 intervals. At 2 intervals the second tick
 * came too early about half the time, and the listing waited for a third: a lease handed to a member at its
 * share, without a change feed, stayed unread a tick longer.
 */
const SHORTFALL_TICKS = 1.8;

/**
 * How long, in take ticks, the portion a cold start's deal gave a member that still holds nothing counts as
 * on its way to it (`coldDealt`): each member takes its own when its own listing of the group comes back,
 * and the listings a cold start's members make at once came back over five to six seconds at 100 x 10,000
 * on two cores (the first and the last member's first take after the last join, Redis and PostgreSQL).
 */
const COLD_DEAL_TICKS = 5;

/** What the members' counts say between two listings. */
export class Counts {
  readonly #parts: LeaseParts;
  readonly #handovers: Handovers;
  readonly #notes: NotesRead;
  readonly #asks: AsksRead;
  readonly #deal: DeclarerDeal;
  readonly #capOf: (workerId: string) => number;
  readonly #subscribed: () => boolean;
  readonly #shortfallIgnored: boolean;
  readonly #belowIgnored: boolean;
  /** The eligible leases at the last listing. */
  #workable = 0;
  /** This worker's share of them (recomputed at a join that brought no listing). */
  #target = 0;
  /** Since when the counts fall short of the last listing's leases. */
  #unheldSince: number | null = null;
  /** The members this worker has seen dead, at which incarnation, and since when: a death's declarer deals its leases meanwhile. */
  readonly #deathsSeen = new Map<string, { incarnation: string; at: number }>();
  /** When the shortfall rule last saw a declaration of a crash still to come (`#declarationsPending`). */
  #pendingSeenAt = -Infinity;
  /** What a cold start's deal left each other member holding, at which incarnation, and when this worker dealt it. */
  #coldDeal: { readonly at: number; readonly holding: ReadonlyMap<string, { readonly incarnation: string; readonly count: number }> } | null = null;
  readonly #coldDealTrusted: boolean;

  constructor(options: CountsOptions) {
    this.#parts = options.parts;
    this.#handovers = options.handovers;
    this.#notes = options.notes;
    this.#asks = options.asks;
    this.#deal = options.deal;
    this.#capOf = options.capOf;
    this.#subscribed = options.subscribed;
    this.#shortfallIgnored = options.shortfallIgnored;
    this.#belowIgnored = options.belowIgnored;
    this.#coldDealTrusted = options.coldDealTrusted;
  }

  /** The eligible leases at the last listing. */
  get workable(): number {
    return this.#workable;
  }

  /** This worker's share of the last listing's eligible leases, among the members as it last counted them. */
  get target(): number {
    return this.#target;
  }

  /** A listing found `workable` eligible leases, of which this worker's share is `target`. */
  listed(workable: number, target: number): void {
    this.#workable = workable;
    this.#target = target;
    this.#unheldSince = null;
    this.#coldDeal = null;
  }

  /**
   * This worker's listing found the group cold (nobody held anything) and dealt it: each other member,
   * alive at `incarnation`, holds `count` once it took its portion (`holding`), which it does from its own
   * listing. While its count says it holds nothing, for `COLD_DEAL_TICKS`, its portion counts as on its way
   * to it: a member that took its portion first would otherwise see the others, still waiting for their
   * listings, a whole portion below it (once their asks' window has passed), and list the group to offer
   * them leases they are about to take, or for the counts' shortfall. In cold starts of 100 x 10,000 on
   * Redis (four processes on two cores) 87 of the 100 members did so, each listing 10,000 leases while the
   * others' listings were still on their way, and the listings' conflicts brought 60 more.
   */
  coldDealt(holding: ReadonlyMap<string, { readonly incarnation: string; readonly count: number }>, now: number): void {
    this.#coldDeal = { at: now, holding };
  }

  /** The leases a cold start's deal gave `member` that its count does not show yet. */
  #coldOnTheirWay(member: MemberRecord, now: number): number {
    const deal = this.#coldDeal;
    if (deal === null || (!this.#coldDealTrusted && now - deal.at >= COLD_DEAL_TICKS * this.#parts.takeIntervalMs)) return 0;
    const dealt = deal.holding.get(member.workerId);
    // A member leaving takes nothing more: nothing is on its way to it.
    return dealt === undefined || dealt.incarnation !== member.incarnation || member.held > 0 || member.metadata[LEAVING_FIELD] !== undefined ? 0 : dealt.count;
  }

  /** A join that brought no listing: this worker's share of the same leases, among the members now alive. */
  reshared(target: number): void {
    this.#target = target;
  }

  /** Notes the deaths the roster just read shows, and forgets the members alive again or removed. */
  seeDeaths(now: number): void {
    const view = this.#parts.view;
    for (const member of view.values()) {
      const seen = this.#deathsSeen.get(member.workerId);
      if (member.status !== 'dead') this.#deathsSeen.delete(member.workerId);
      else if (seen?.incarnation !== member.incarnation) this.#deathsSeen.set(member.workerId, { incarnation: member.incarnation, at: now });
    }
    for (const workerId of this.#deathsSeen.keys()) if (!view.has(workerId)) this.#deathsSeen.delete(workerId);
  }

  /** Whether a member was seen dead within the last lease duration: others may have died in the same crash. */
  dyingLately(now: number): boolean {
    for (const death of this.#deathsSeen.values()) if (now - death.at < this.#parts.leaseDurationMs) return true;
    return false;
  }

  /**
   * Whether the members' counts are a crash's still being dealt: the declarers deal (a change feed), a
   * death was seen less than `SHORTFALL_TICKS` take ticks ago or a declaration of the crash is still to
   * come (`#declarationsPending`), and the counts fall short of the last listing's leases. Meanwhile the
   * counts say nothing about balance: a member dealt its portion of a
   * death reads itself two above one whose portion is on its way (dealt and not yet read by its recipient,
   * or read and not yet in a heartbeat this worker has read), and every member is below the smallest
   * share of the survivors until its portions come. Being two below or above another member brings no
   * listing meanwhile (a shortfall still does, as `unheld` says); once the counts add up again the deals
   * have landed, and balance goes on as before. In a crash of 25 of 100 x 10,000 on Redis (four
   * processes), 190 of the 284 listings the 75 survivors made were for counts read while the deals
   * landed, 66 of them within a second of the first death; each listing took 2 s on two cores, and held
   * back the deals' recipients, which hear of their leases between two ticks.
   */
  dealingDeaths(now: number): boolean {
    if (!this.#deal.dealsHere()) return false;
    const lately = [...this.#deathsSeen.values()].some((death) => now - death.at < SHORTFALL_TICKS * this.#parts.takeIntervalMs);
    return (lately || this.#declarationsPending(now)) && this.#countedHeld(now) < this.#workable;
  }

  /**
   * Whether a declaration of the crash under way is still to come: where declarers deal, a death was seen
   * within the last lease duration and a member alive in this worker's view looks gone (`Answers.looksGone`:
   * its record stood still for most of its lease duration, or it did not answer a suspect in time). The
   * leases dealt to it before its death are not in its count, and its declarer deals them: the shortfall
   * they make is the crash's, and a listing would find them named by a member still alive as far as the
   * roster goes, for nobody to take. A crash's deaths are declared over a heartbeat interval (its members'
   * last heartbeats before it, up to 0.65 of a lease duration apart), longer than the 1.8 take ticks of
   * the window that follows each death seen.
   */
  #declarationsPending(now: number): boolean {
    if (!this.#deal.dealsHere() || !this.dyingLately(now)) return false;
    for (const member of this.#parts.view.values()) {
      if (member.status === 'alive' && member.workerId !== this.#parts.workerId && this.#parts.members.answers.looksGone(member)) return true;
    }
    return false;
  }

  /** Whether this worker and every live member it knows of say they hold no lease: what a cold start looks like before a listing. */
  holdNothing(): boolean {
    if (this.#parts.hold.countHeld() > 0) return false;
    for (const member of this.#parts.view.values()) if (member.status === 'alive' && member.workerId !== this.#parts.workerId && member.held > 0) return false;
    return true;
  }

  /**
   * Whether, by the members' own counts, this worker is two or more below the most loaded member: it then
   * lists every tick, to ask for leases and to find the ones handed to it unasked. With a change feed, only
   * while it holds fewer than the smallest share (of the last listing's leases, among the members alive now
   * and not leaving): a member holding that is within one of its own share whatever its rank, the member
   * two above it is above its own and offers its surplus on its counts (`above`), and the feed tells the
   * recipient. In a rolling restart faster than a take tick some member is always above its share (a
   * newcomer handed more than it asked for, on its way to the next), and every member two below it listed
   * for nothing: 100 x 10,000 with a restart every second, 1,945 such listings in a simulated minute, one
   * of which found a member to ask for a lease. (Not this worker's own share by rank: a newcomer its view had not
   * read yet left it one short of that 0.67 times a minute a member at 150 x 15,000, a restart every 2 s.)
   * `asking`: this worker's asks stand, and it waits for its givers: with a change feed it hears of each
   * handover; without one it lists every tick to find them (nobody else lists for them).
   */
  below(asking: boolean): boolean {
    if (asking) return !this.#subscribed();
    // Leases asked for count as on their way: a thief keeps asking, one per tick, without waiting for each.
    const mine = this.#parts.hold.countHeld() + this.#handovers.requests.size;
    if (mine >= this.#parts.maxLeases) return false;
    let most = 0;
    for (const member of this.#parts.view.values()) if (member.status === 'alive' && member.workerId !== this.#parts.workerId) most = Math.max(most, member.held);
    if (most < mine + 2) return false;
    if (!this.#subscribed()) return true;
    if (this.#belowIgnored) return false;
    return mine < this.sharesNow().smallest;
  }

  /**
   * Whether, by the members' own counts, this worker is two or more above a member with room: it then
   * lists, to hand that member leases unasked. A member's count includes the leases a leave read in the last
   * two ticks names for it: after a stop each recipient takes its own at its own tick, and one that took
   * five would otherwise see the others, whose new counts it has not read yet, five below it (20 x 2,000
   * without a feed: every survivor listed for a stop).
   */
  above(now: number): boolean {
    const mine = [...this.#parts.hold.leases.values()].filter((held) => !held.leaving && !held.handoff).length;
    if (mine < 2) return false;
    const asksWindow = ASKS_TICKS * this.#parts.takeIntervalMs;
    // A newcomer counts the leases it asked for; one that may still ask is not offered any meanwhile.
    let below = false;
    const dying = this.dyingLately(now);
    for (const member of this.#parts.view.values()) {
      if (member.workerId === this.#parts.workerId || member.status !== 'alive' || member.metadata[LEAVING_FIELD] !== undefined) continue;
      if (this.#asks.mayStillAsk(member, now, asksWindow)) continue;
      // Nor, with a change feed, a member that may have died in this crash: no offer would go to it
      // (`Answers.mayBeOffered`). (Without one a listing also finds the leases handed to this worker.)
      if (this.#subscribed() && !this.#parts.members.answers.mayBeOffered(member, dying)) continue;
      if (this.#countOf(member, now) + 2 <= mine && member.held < capOf(member)) below = true;
    }
    if (!below) return false;
    // With a change feed, only the members the plan of moves takes leases from list for it: the most loaded
    // first. In a group of a hundred, one member two below the rest would otherwise bring a listing of the
    // whole group from every member above it, of which one or two hand it anything. (Without a feed the
    // recipient learns of a handover at its next tick only: every member above offering at once balances
    // the declarer's adoption a tick sooner, 1.19 against 1.43 lease durations at 24 x 1,000.)
    if (!this.#subscribed()) return true;
    return this.#movesOnCounts(now, mine, dying).some((move) => move.from === this.#parts.workerId);
  }

  /**
   * Whether the members' counts fall short of the leases the last listing found, so that some lease is
   * held by nobody: handed to a member that has not seen it yet, released, or its owner gone. A member
   * below its share lists at once (it is the one a lease was most likely handed to); every member lists
   * once the shortfall has lasted two take ticks, so that a lease handed to a member above its share (an
   * owner with another view) is never left unread. Members at their share otherwise list nothing.
   */
  unheld(now: number): boolean {
    if (this.#shortfallIgnored) return false;
    if (this.#countedHeld(now) >= this.#workable) {
      this.#unheldSince = null;
      return false;
    }
    this.#unheldSince ??= now;
    // While members are dying, declarers deal their leases, some to members that died in the same crash
    // and are declared in turn: a shortfall then is the crash's, and every member listing for it, each
    // listing slower for the others', is what would hold the deals back. The wait for the members that
    // are not below their share runs from the last death seen.
    let since = this.#unheldSince;
    if (this.#deal.dealsHere()) for (const death of this.#deathsSeen.values()) since = Math.max(since, death.at);
    // So does it while a declaration of the crash is still to come, and from the last moment one was: the
    // leases dealt to that member wait for it.
    if (this.#declarationsPending(now)) this.#pendingSeenAt = now;
    since = Math.max(since, this.#pendingSeenAt);
    return this.#parts.hold.countHeld() < this.#target || now - since >= SHORTFALL_TICKS * this.#parts.takeIntervalMs;
  }

  /**
   * The shares of the last listing's eligible leases among the members alive now and not leaving (this
   * worker, as its view shows it, whether leaving or not), and the smallest of those below their member's cap: the group's shares differ by
   * one, so a member holding the smallest is within one of every share, and any member two above it is
   * above its own.
   */
  sharesNow(): { targets: Map<string, number>; smallest: number } {
    const members: string[] = [];
    for (const member of this.#parts.view.values()) {
      if (member.status === 'alive' && (member.workerId === this.#parts.workerId || member.metadata[LEAVING_FIELD] === undefined)) members.push(member.workerId);
    }
    members.sort();
    const targets = shares(members, this.#workable, this.#capOf);
    let smallest = Infinity;
    for (const [workerId, share] of targets) if (share < this.#capOf(workerId)) smallest = Math.min(smallest, share);
    return { targets, smallest: smallest === Infinity ? Math.floor(this.#workable / Math.max(1, members.length)) : smallest };
  }

  /**
   * The plan of moves on the members' own counts (those of leaves and newcomers' asks read lately
   * included), this worker's being `mine`; the members leaving left out, and those that may have died in a
   * crash (`dying`: a death seen lately), which no offer would go to. Nothing when this worker is not one
   * of the members it would deal to.
   */
  #movesOnCounts(now: number, mine: number, dying: boolean): { from: string; to: string }[] {
    const members: string[] = [];
    const load = new Map<string, number>();
    for (const member of this.#parts.view.values()) {
      if (member.status !== 'alive' || (member.workerId !== this.#parts.workerId && member.metadata[LEAVING_FIELD] !== undefined)) continue;
      if (member.workerId !== this.#parts.workerId && !this.#parts.members.answers.mayBeOffered(member, dying)) continue;
      members.push(member.workerId);
      load.set(member.workerId, member.workerId === this.#parts.workerId ? mine : this.#countOf(member, now));
    }
    if (!load.has(this.#parts.workerId)) return [];
    members.sort();
    return planMoves(members, load, this.#capOf);
  }

  /** A member's count, with the leases a leave read in the last two ticks names for it and those it asked for, read in the last four, on their way. */
  #countOf(member: MemberRecord, now: number): number {
    return member.held + this.#coldOnTheirWay(member, now) + this.#notes.namedFor(member.workerId, now, 2 * this.#parts.takeIntervalMs) + this.#asks.onTheirWayTo(member, now, ASKS_TICKS * this.#parts.takeIntervalMs);
  }

  /**
   * The leases the members' counts say are held, this worker's own included. The leases the notes of leaves
   * read in the last two ticks name are on their way to their recipients, whose counts do not show them yet;
   * so are those a newcomer asked for, from members whose counts show them gone already.
   */
  #countedHeld(now: number): number {
    const asksWindow = ASKS_TICKS * this.#parts.takeIntervalMs;
    let held = this.#parts.hold.countHeld() + this.#notes.onTheirWay(now, 2 * this.#parts.takeIntervalMs);
    for (const member of this.#parts.view.values()) {
      if (member.status === 'alive' && member.workerId !== this.#parts.workerId) held += member.held + this.#coldOnTheirWay(member, now) + this.#asks.onTheirWayTo(member, now, asksWindow);
    }
    return held;
  }
}
