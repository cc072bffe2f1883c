/**
 * Taking and dealing (DESIGN section 4, "Taking, on a listing", and the declarer's frees of "Watchers and
 * the roster digest"): the take tick that reads the roster and decides when to list, the deal of the leases
 * without a live owner (the same split on every worker that read the same records), the takes themselves,
 * the leases given back or freed for the group, and the plan of the moves between members. The offers,
 * the answers to newcomers' asks, a newcomer's own asks and the steal requests are in giving.ts; the pure
 * policy (fair shares, the moves between members) is in balance.ts; what the members' counts say between
 * listings (below or above another, a shortfall) in counts.ts; the deal of the members this worker
 * declares dead in declarer-deal.ts; a large group's early cold-start listing in cold-listing.ts; the asks'
 * format and what a worker read of them in join-asks.ts; the removal of members long dead in departed.ts;
 * the handovers themselves and the steal requests are carried out by handovers.ts; the hold decides
 * whether a lease taken counts.
 */
import { shuffled, unlessAborted } from '../clock.js';
import { describeValue, type LeaseholdError, RecordFormatError } from '../errors.js';
import { hasRewindRequest } from '../rewind.js';
import { Checkpoint, RECORD_FORMAT, type LeaseListing, type LeaseRecord, type WriteResult } from '../storage.js';
import { capOf, planMoves, shares } from './balance.js';
import { COLD_DEAL_MAX_PORTION, ColdDealer } from './cold-dealer.js';
import { ColdListing } from './cold-listing.js';
import { Counts } from './counts.js';
import { DeclarerDeal } from './declarer-deal.js';
import type { LeaseParts } from './parts.js';
import type { LeaseCoordinatorEvents } from './events.js';
import type { Handovers } from './handovers.js';
import type { Held } from './held.js';
import { NotesRead } from './leave-notes.js';
import { Departed } from './departed.js';
import { AsksRead } from './join-asks.js';
import { Giving } from './giving.js';
import { LEAVING_FIELD, type Incarnation } from './membership.js';
import { stateWithoutResume } from './resume-hint.js';

/** The state core writes: a take or a free drops a resume hint (it is for the tenure a handover started only). */
const stateOf = stateWithoutResume;

/**
 * How long, in take ticks, a lease without a live owner waits for the member dealt it (or, for a dead
 * member's lease, for its declarer's deal) before it is anyone's.
 */
const ANYONES_AFTER_TICKS = 1.5;

/** How long, in take ticks, a cold start waits for a view of the members that has seen others to stand still. */
const COLD_QUIET_TICKS = 1.4;
/** The same for a worker that has seen no other member yet. */
const COLD_QUIET_TICKS_ALONE = 0.9;

/**
 * Decides whether a lease may be taken now; the default lets a child start only after its parents ended.
 * `all` holds every readable lease of the group, `corrupt` the keys of those that cannot be read.
 */
export type EligibilityPredicate = (lease: LeaseRecord, all: ReadonlyMap<string, LeaseRecord>, corrupt: ReadonlySet<string>) => boolean;

/**
 * A lease whose parents have all reached `SHARD_END`, or whose leases are gone, is eligible (DESIGN
 * section 4, taking, rule 1). A parent's lease is deleted only once the parent finished or left the stream, and a
 * child's lease is created only while each parent has a lease or is retired (DESIGN section 5), so a
 * missing parent is a finished one. A parent whose lease cannot be read is not known to be finished, nor
 * is one that carries a rewind request: it is about to be read again, before its children.
 */
export const parentsFinished: EligibilityPredicate = (lease, all, corrupt) =>
  lease.parentKeys.every((parentKey) => {
    if (corrupt.has(parentKey)) return false;
    const parent = all.get(parentKey);
    return parent === undefined || (parent.checkpoint === Checkpoint.SHARD_END && !hasRewindRequest(parent));
  });

/** What taking needs back from the coordinator that owns it. */
export interface TakingHost {
  state(): 'new' | 'running' | 'stopping' | 'stopped';
  /** Aborts when the coordinator stops: a retry after a contended take goes with it. */
  readonly lifetime: AbortSignal;
  /** Aborts when the coordinator's stop begins: a listing in flight is given up, so that the stop need not wait for it. */
  readonly stopping: AbortSignal;
  /** Sends a heartbeat now: the members balance on each other's counts. */
  wakeRenew(): void;
  /** Runs a take tick now. */
  wakeTake(): void;
  /** Whether the coordinator listens to the store's change feed. */
  subscribed(): boolean;
  emit<K extends keyof LeaseCoordinatorEvents>(name: K, event: LeaseCoordinatorEvents[K]): void;
  report(error: unknown, operation: string): void;
  /** A record this worker must not write was met: stop. */
  fail(error: LeaseholdError): void;
  /** The error for a record of a newer format than this worker knows. */
  formatError(what: string, format: number): RecordFormatError;
}

export interface TakingOptions extends LeaseParts {
  readonly listIntervalMs: number;
  readonly isEligible: EligibilityPredicate;
  readonly handovers: Handovers;
  /** Unsafe: a dead member's lease whose deal or free conflicted is written again on the current record, whoever it names now. */
  readonly freeRetryIgnoresOwner: boolean;
  /** Unsafe: a lease written to a member this worker declared dead a moment before is not dealt again (see `DeclarerDeal.dealLate`). */
  readonly lateDealIgnored: boolean;
  /** Unsafe: a dead member's leases are dealt to the other members of its failure domain, however many of them are doubted too (see `DeclarerDeal`). */
  readonly lostDomainsDealt: boolean;
  /** Unsafe: without a change feed, the declarer takes the dead member's leases whatever its `maxLeasesPerWorker`. */
  readonly adoptionIgnoresCap: boolean;
  /** Unsafe: the leases a listing names this worker for count as its own in the plan of moves, the ones it gives back beyond its cap too. */
  readonly givenBackPlanned: boolean;
  /** Unsafe: counts falling short of the last listing never bring a listing. */
  readonly shortfallIgnored: boolean;
  /** Unsafe: with a change feed, being two below another member never brings a listing. */
  readonly belowIgnored: boolean;
  /** Unsafe: see `Counts.coldDealt`; its portions count as on their way until the next listing. */
  readonly coldDealTrusted: boolean;
  /** Unsafe: a listing that cannot read a lease (corrupt) forgets the tenure this worker let go of it. */
  readonly letGoForgetsUnreadable: boolean;
  /** Unsafe: the listed owners are judged on a roster read before the listing. */
  readonly rosterBeforeListing: boolean;
  /** Unsafe: a stop waits for a take tick's listing in flight, however long the store takes to answer. */
  readonly stopWaitsForListing: boolean;
  /** Unsafe: a cold start deals from the listing it read while the members were joining, whatever changed in the group's leases since. */
  readonly coldListingIgnoresNews: boolean;
  /** Unsafe: a cold start's member waits for the dealer's deal however long it takes (see `ColdDealer`). */
  readonly coldDealerAwaited: boolean;
  /** Unsafe: a leave's note stands for leases on their way for as long as it is read. */
  readonly noteTrusted: boolean;
  /** Unsafe: a newcomer's asks stand for leases on their way for as long as they are read. */
  readonly asksTrusted: boolean;
  readonly host: TakingHost;
}

/** The take tick, and who takes which lease without a live owner. */
export class Taking {
  readonly #listIntervalMs: number;
  readonly #isEligible: EligibilityPredicate;
  /** The group, the store, the clock, the limits and the parts built before this one, as the coordinator gave them. */
  readonly #parts: LeaseParts;
  readonly #held: ReadonlyMap<string, Held>;
  readonly #letGo: Map<string, number>;
  readonly #handovers: Handovers;
  readonly #adoptionIgnoresCap: boolean;
  readonly #givenBackPlanned: boolean;
  readonly #letGoForgetsUnreadable: boolean;
  readonly #rosterBeforeListing: boolean;
  readonly #stopWaitsForListing: boolean;
  readonly #host: TakingHost;
  /** Whether the next take tick lists the leases, whatever the roster says. */
  listingDue = true;
  /** When the leases were last listed; `null` before the first listing. */
  #listedAt: number | null = null;
  /** Keys first seen without a live owner, and when: a lease left unowned past a tick is anyone's to take. */
  readonly #unownedSince = new Map<string, number>();
  /** Keys reported as corrupt, so that each is reported once while it stays corrupt. */
  readonly #corrupt = new Set<string>();
  /** Whether the last listing found the group cold (nobody holds anything) and this worker waits to deal. */
  #coldWait = false;
  /** A large group's cold start: the listing read while the members were joining, for the deal once they stop. */
  readonly #coldListing: ColdListing;
  /** A large group's cold start with a change feed: who deals it to the group, and the others' wait for it. */
  readonly #coldDealer: ColdDealer;
  /** This worker's count of the lease changes it heard of (`leasesChanged`), for a wait for the cold start's deal. */
  #news = 0;
  /** The members long dead, and their removal. */
  readonly #departed: Departed;
  /** The smallest fair share of the last listing: an owner never hands over below it. */
  #fairFloor = 0;
  /** What the members' counts say between listings, and what the last listing found. */
  readonly #counts: Counts;
  /** The most leases a member may hold: this worker's `maxLeasesPerWorker`, or the cap another publishes. */
  readonly #capOf = (workerId: string): number => (workerId === this.#parts.workerId ? this.#parts.maxLeases : capOf(this.#parts.view.get(workerId)));
  /** The deal of the members this worker declares dead. */
  readonly #deal: DeclarerDeal;
  /** The notes of the leaves read: the leases a stopping member handed over, named for their recipients. */
  readonly #notes: NotesRead;
  /** The offers, the answers to newcomers' asks, this worker's own asks and its steal requests. */
  readonly #giving: Giving;

  constructor(options: TakingOptions) {
    this.#listIntervalMs = options.listIntervalMs;
    this.#isEligible = options.isEligible;
    this.#parts = options;
    this.#held = options.hold.leases;
    this.#letGo = options.hold.letGo;
    this.#handovers = options.handovers;
    this.#adoptionIgnoresCap = options.adoptionIgnoresCap;
    this.#givenBackPlanned = options.givenBackPlanned;
    this.#letGoForgetsUnreadable = options.letGoForgetsUnreadable;
    this.#rosterBeforeListing = options.rosterBeforeListing;
    this.#stopWaitsForListing = options.stopWaitsForListing;
    this.#coldListing = new ColdListing({ parts: options, report: (error, operation) => options.host.report(error, operation), stopping: options.host.stopping, ignoresNews: options.coldListingIgnoresNews });
    this.#host = options.host;
    this.#notes = new NotesRead(options.workerId, options.noteTrusted);
    this.#departed = new Departed({
      parts: options,
      host: options.host,
      noteTrusted: options.noteTrusted,
      list: () => {
        this.listingDue = true;
      },
    });
    const asks = new AsksRead(options.workerId, options.asksTrusted);
    this.#deal = new DeclarerDeal({
      parts: options,
      host: options.host,
      capOf: this.#capOf,
      take: (leases, membership, dead) => this.#take(leases, membership, dead),
      freeRetryIgnoresOwner: options.freeRetryIgnoresOwner,
      lateDealIgnored: options.lateDealIgnored,
      lostDomainsDealt: options.lostDomainsDealt,
    });
    this.#coldDealer = new ColdDealer({ parts: options, dealsHere: () => this.#deal.dealsHere(), capOf: this.#capOf, awaited: options.coldDealerAwaited });
    this.#counts = new Counts({
      parts: options,
      handovers: options.handovers,
      notes: this.#notes,
      asks,
      deal: this.#deal,
      capOf: this.#capOf,
      subscribed: () => options.host.subscribed(),
      shortfallIgnored: options.shortfallIgnored,
      belowIgnored: options.belowIgnored,
      coldDealTrusted: options.coldDealTrusted,
    });
    this.#giving = new Giving({
      parts: options,
      handovers: options.handovers,
      counts: this.#counts,
      asks,
      host: options.host,
      fairFloor: () => this.#fairFloor,
      reshare: () => this.#reshare(),
    });
  }

  /**
   * The group's leases changed in a way this worker heard of (a lease created or released on the change
   * feed, a change this worker made or was told of): the next take tick lists them.
   */
  leasesChanged(): void {
    this.#coldListing.heardOfChange();
    this.#news++;
    this.listingDue = true;
  }

  /** The change feed announced `leaseKey` handed to `workerId`: kept if this worker watches that member (`DeclarerDeal.heardHanded`). */
  heardHanded(workerId: string, leaseKey: string): void {
    this.#deal.heardHanded(workerId, leaseKey);
  }

  /** The members this worker declared dead in the last lease duration (`DeclarerDeal.declaredLately`). */
  declaredLately(): Iterable<string> {
    return this.#deal.declaredLately();
  }

  /** Watched members about to be named as suspects: what this worker would deal at their declaration is read back now (see `DeclarerDeal.readBack`). */
  suspected(members: readonly { workerId: string; incarnation: string }[]): void {
    for (const member of members) this.#deal.readBack(member.workerId, member.incarnation);
  }

  /** When the leases were last listed; `null` before the first listing. */
  get listedAt(): number | null {
    return this.#listedAt;
  }

  /** Whether a cold start waits for the members to stop joining before it deals. */
  get coldWait(): boolean {
    return this.#coldWait;
  }

  /** Whether this worker waits for a cold start's deal instead of its first listing. */
  get awaitsColdDeal(): boolean {
    const membership = this.#parts.members.current;
    return this.#listedAt === null && membership !== null && this.#coldDealer.waiting(membership);
  }

  /** The smallest fair share of the last listing: an owner never hands over below it. */
  get fairFloor(): number {
    return this.#fairFloor;
  }

  /** This worker's share at the last listing. */
  get lastTarget(): number {
    return this.#counts.target;
  }

  /** The sizes of taking's bookkeeping, for the coordinator's diagnostics. */
  diagnostics(): { unownedSince: number; corrupt: number; deadSince: number } {
    return { unownedSince: this.#unownedSince.size, corrupt: this.#corrupt.size, deadSince: this.#departed.size };
  }

  /**
   * One take tick: reads the roster (declaring the expired dead), follows the handovers under way, and,
   * when something changed or the safety interval passed, lists the leases and balances on them.
   */
  async tick(): Promise<void> {
    if (this.#host.state() !== 'running') return;
    try {
      if (!(await this.#parts.members.readMembers())) return;
    } catch (error) {
      if (error instanceof RecordFormatError) this.#host.fail(error);
      else this.#host.report(error, 'roster');
      return;
    }
    if (this.#host.state() !== 'running') return;
    let now = this.#parts.clock.now();
    const membership = this.#parts.members.current;
    if (membership === null) {
      // A new member takes nothing in the tick it joins: the workers started with it join meanwhile.
      await this.#parts.members.join(now);
      return;
    }
    if (!this.#parts.members.checkOwnMember(membership)) return;
    for (const member of this.#parts.view.values()) {
      if (member.workerId !== this.#parts.workerId && member.status === 'alive' && this.#parts.view.expired(member, now)) {
        const dead = await this.#parts.members.declareDead(member);
        if (this.#host.state() !== 'running') return;
        const declaredHere = this.#parts.members.declaredHere(member.workerId, member.incarnation);
        // A member whose declaration lost the race to another's lists only where nobody deals: the winner
        // deals the leases, as it does for the members that did not watch the dead one.
        if (dead && (declaredHere || !this.#deal.dealsHere())) this.listingDue = true;
        if (declaredHere) await this.#deal.dealAtDeclaration(member.workerId, member.incarnation, membership);
        if (this.#host.state() !== 'running') return;
      }
    }
    await this.#deal.dealLate(membership);
    if (this.#host.state() !== 'running') return;
    this.#counts.seeDeaths(now);
    for (const [leaseKey, handed] of this.#handovers.handed) {
      const member = this.#parts.view.get(handed.to);
      if (member?.status === 'alive' && member.incarnation === handed.incarnation && now < handed.until) continue;
      // A recipient gone since (removed, or back in a new incarnation) may have left the lease unread: list
      // to take it back. One dead at the incarnation it was handed to is not listed for: its leases, this one
      // among them, are its declarer's to deal (without a change feed every member lists for the death), and
      // a lease left without a live owner after that brings a listing of its own (`Counts.unheld`). In a crash
      // of many, every member that had handed a lease to one of the dead listed for it: 28-37% of the
      // survivors' listings (core bench, 25 of 100 x 10,000).
      const deadAsHanded = member?.status === 'dead' && member.incarnation === handed.incarnation;
      if (now < handed.until && !deadAsHanded) this.listingDue = true;
      this.#handovers.handed.delete(leaseKey);
    }
    // The leases a leave names for this worker are read by key, as the change feed's announcements by name.
    for (const leaseKey of this.#notes.read(this.#parts.view, now)) {
      this.#handovers.announced.add(leaseKey);
      this.#handovers.announcedByName.add(leaseKey);
    }
    this.#handovers.answerRequests(now);
    await this.#handovers.followRequests(now);
    if (this.#host.state() !== 'running') return;
    await this.#handovers.followAnnounced();
    if (this.#host.state() !== 'running') return;

    // A death (or a dead member's removal) alone brings no listing where the declarer deals the dead
    // member's leases: the members it deals them to hear so from the change feed. Nor does a leave whose
    // note names every lease the member handed over: its recipients read them by key. Any other move does.
    // A move made of joins and deaths together (a rolling restart) is each part handled as it would be alone.
    const moved = this.#parts.members.signatureMoved();
    const deaths = moved === 'deaths' || moved === 'joins-and-deaths';
    if (moved === 'other' || (deaths && !this.#deal.dealsHere())) this.listingDue = true;
    this.#giving.answerAsks(now, membership);
    // A join brings no listing where the newcomers ask their givers by name: they list, the others answer
    // (before this worker's first listing, it lists as for any move). Members' counts that fall short of
    // the last listing's leases meanwhile (a handover under way) list by the shortfall rule below, at once
    // for a member below its share and after two ticks for the others, not at once for all: in a rolling
    // restart with a change feed (100 x 10,000, a restart every 6 s), a leave's handovers still on their way
    // at the next join had every member list about four times a minute for that alone.
    if (moved === 'joins' || moved === 'joins-and-deaths' || moved === 'joins-and-handed-leaves') {
      if (this.#listedAt === null) this.listingDue = true;
      else this.#reshare();
    }
    this.#giving.expireAsks(membership, now);
    this.#coldDealer.atTick(now);
    await this.#departed.atTick(now);
    if (this.#host.state() !== 'running') return;
    // A corrupt lease is looked at every tick until it reads back: its repair is announced by nobody.
    if (this.#corrupt.size > 0) this.listingDue = true;
    if (!this.listingDue && this.#listedAt !== null && now - this.#listedAt < this.#parts.members.safetyListingMs(this.#listIntervalMs)) {
      // Nothing changed: balance on the members' own counts, and list only when a steal needs keys.
      const counted = !this.#counts.dealingDeaths(now) && (this.#counts.below(this.#giving.asking) || this.#counts.above(now));
      if (counted || this.#counts.unheld(now)) this.listingDue = now - this.#listedAt >= this.#parts.takeIntervalMs * 0.9;
      if (!this.listingDue) return;
    }
    // A cold start waiting for the members to stop joining reads only the roster meanwhile: listing the
    // whole group every tick of the wait would cost every worker the group's size each tick. A worker that
    // has not listed yet, in a group whose members all say they hold nothing, waits the same way before its
    // first listing: it would only learn from it that the group is cold, and list again once it settled.
    // A large group's cold start asks for that listing at once, and deals from it once the members stop
    // joining: a listing of a large group, which every member makes at the same moment, takes seconds,
    // and it then runs while the members join instead of after.
    if ((this.#coldWait || (this.#listedAt === null && this.#counts.holdNothing())) && this.#settling(now, membership)) {
      if (this.#listedAt === null && this.#parts.members.readsWatched() && this.#coldDealer.listsItself()) this.#coldListing.ask(now, membership);
      this.listingDue = true;
      return;
    }
    // With a change feed one member deals a large group's cold start: the others wait for their portions
    // instead of listing, and take the dealer's note for their first listing once they hold their share.
    if (this.#listedAt === null) {
      const answer = this.#coldDealer.answer(now, membership, this.#news);
      if (answer === 'wait') return;
      if (answer !== 'list') {
        this.#dealtBy(answer.total, now, answer.news, membership);
        return;
      }
    }
    let listing: LeaseListing | null = null;
    let listedAt = now;
    let early = false;
    try {
      this.listingDue = false;
      // Owners judged on a roster read after the listing, as below; and the group's lease changes since it was asked for.
      const kept = await this.#coldListing.take(
        membership,
        (read) => this.#unlessStopping(read),
        async () => this.#parts.members.readRoster(await this.#unlessStopping(this.#parts.storage.getRoster(this.#parts.group))),
      );
      if (kept === 'roster-unread') return;
      if (kept !== null) [listing, listedAt, early] = [kept.listing, kept.at, true];
      // Sent to list by a cold start's note (its portions too large to deal): a cold start's listing too.
      else if (this.#coldDealer.listsForNote(membership)) early = true;
      if (listing === null) {
        const rosterFirst = this.#rosterBeforeListing ? await this.#unlessStopping(this.#parts.storage.getRoster(this.#parts.group)) : undefined;
        listing = await this.#unlessStopping(this.#parts.storage.listLeases(this.#parts.group));
        // Judge owners on a roster read after the listing: a lease listed with an owner was taken after
        // its owner joined, so a member missing or dead in this roster is not alive now.
        if (!this.#parts.members.readRoster(rosterFirst ?? (await this.#unlessStopping(this.#parts.storage.getRoster(this.#parts.group))))) return;
        listedAt = this.#parts.clock.now();
      }
    } catch (error) {
      this.listingDue = true;
      if (!this.#host.stopping.aborted) this.#host.report(error, 'list');
      return;
    }
    if (this.#host.state() !== 'running' || this.#parts.members.current !== membership || !this.#parts.members.checkOwnMember(membership)) return;
    now = this.#parts.clock.now();
    this.#listedAt = listedAt;
    // The signature stays the one read before the listing: a change the roster shows after it (a note of
    // a lease handed over while the listing was on its way) may be missing from the listing, so the next
    // tick lists again rather than taking the later roster as seen.
    const newer = listing.leases.find((lease) => lease.format > RECORD_FORMAT);
    if (newer) {
      this.#host.fail(this.#host.formatError(`lease ${describeValue(newer.leaseKey)}`, newer.format));
      return;
    }
    await this.#balance(listing, now, membership, early);
    await this.#departed.atListing(listing, now);
  }

  /**
   * A read of the take tick, given up once the coordinator's stop begins: the stop awaits the tick before
   * it drains (so that a lease the tick takes is handed over with the rest), and a listing the store is
   * slow to answer (a large group, a stalled connection) would spend the stop's time for nothing, since a
   * stopping worker takes nothing more.
   */
  #unlessStopping<T>(read: Promise<T>): Promise<T> {
    return this.#stopWaitsForListing ? read : unlessAborted(read, this.#host.stopping);
  }

  /**
   * This worker's first listing is a cold start's deal it was dealt (`ColdDealer`): `total` leases over the
   * members its view shows, as the dealer's listing showed them, and this worker holds its share. Its
   * share and floor are the note's, and each other member's portion counts as on its way to it for a few
   * ticks (`Counts.coldDealt`), as for the dealer. A lease created or released while it waited (`news`) is
   * listed for at the next tick, as it would have been. It asks no giver later: it took its portion, as a
   * member whose first listing found leases to deal (otherwise its first listing, within ten ticks of its
   * join, would ask givers as a newcomer's does, and the members hand leases to and fro).
   */
  #dealtBy(total: number, now: number, news: boolean, membership: Incarnation): void {
    this.#giving.dealt(membership);
    this.#listedAt = now;
    this.#coldWait = false;
    this.listingDue = news;
    this.#counts.listed(total, 0);
    this.#reshare();
    const alive = this.#parts.view.alive();
    const holding = new Map<string, { incarnation: string; count: number }>();
    for (const [workerId, count] of this.#counts.sharesNow().targets) {
      const incarnation = alive.get(workerId);
      if (workerId !== this.#parts.workerId && incarnation !== undefined && count > 0) holding.set(workerId, { incarnation, count });
    }
    if (holding.size > 0) this.#counts.coldDealt(holding, now);
  }

  /**
   * In a cold start: whether the members may still be joining, up to three ticks after this worker joined.
   * A worker that has seen no other member waits until its view stood still for 0.9 of a take tick; one
   * that has seen others join (a group starting together, or spread over seconds) waits for 1.4 ticks
   * of stillness, so that a lull of more than a tick between two joins does not split the deal between
   * the workers started before it and those started after (DESIGN section 4, taking, step 3).
   */
  #settling(now: number, membership: Incarnation): boolean {
    const quiet = (this.#parts.view.othersSeen ? COLD_QUIET_TICKS : COLD_QUIET_TICKS_ALONE) * this.#parts.takeIntervalMs;
    return now - this.#parts.view.othersChangedAt < quiet && now - membership.joinedAt < 3 * this.#parts.takeIntervalMs;
  }

  /**
   * Balances on a fresh listing: takes this worker's fair share of the leases without a live owner (the
   * same split on every worker, from the sorted members and keys), holds the leases handed to it, hands
   * its own excess to members below their share, and asks the most loaded members for leases when none
   * is left to take and none is on its way. `early`: the listing is a cold start's, read while the members
   * were joining.
   */
  async #balance(listing: LeaseListing, now: number, membership: Incarnation, early = false): Promise<void> {
    const corrupt = this.#noticeCorrupt(listing.corrupt);
    // Without a hold (no heartbeat has applied lately) a take could not be counted as held: it would only
    // move the lease's epoch and strand it, naming an incarnation others still see alive.
    const holding = this.#parts.skipSelfFencing || this.#parts.clock.now() < this.#parts.members.heldUntil;
    const leases = listing.leases;
    const all = new Map(leases.map((lease) => [lease.leaseKey, lease]));
    this.#parts.hold.noticeLosses(all, corrupt, membership.incarnation);
    const alive = this.#parts.view.alive();
    const isMine = (lease: LeaseRecord): boolean => lease.owner === this.#parts.workerId && lease.incarnation === membership.incarnation;
    // A tenure let go is forgotten once its lease is gone or moved on; not while the lease cannot be read:
    // repaired, it may still name this incarnation in that tenure, which must then be taken back in a new
    // one, not held as a lease handed to it (the let-go tenure's work, or its deferred handover, would
    // still write under it).
    for (const [leaseKey, epoch] of this.#letGo) {
      if (corrupt.has(leaseKey) && !this.#letGoForgetsUnreadable) continue;
      const lease = all.get(leaseKey);
      if (!lease || !isMine(lease) || lease.epoch !== epoch) this.#letGo.delete(leaseKey);
    }
    const ownerOf = (lease: LeaseRecord): string | null => {
      if (lease.owner === null) return null;
      if (lease.owner === this.#parts.workerId) return isMine(lease) && this.#held.has(lease.leaseKey) ? this.#parts.workerId : null;
      // A member whose record cannot be read may be alive: its leases wait for an operator.
      if (this.#parts.view.isCorrupt(lease.owner)) return lease.owner;
      return alive.get(lease.owner) === lease.incarnation ? lease.owner : null;
    };
    // A finished lease still naming this incarnation that it no longer holds (a release whose outcome was
    // lost) is given back, so that the leader may clean it up: nobody else may judge it free. So is one
    // this worker may not take (not eligible here: a stream of a multi-stream group it no longer reads),
    // which it would never take back: named by a live incarnation, nobody could take or delete it.
    const leftovers = leases.filter(
      (lease) => isMine(lease) && !this.#held.has(lease.leaseKey) && (lease.checkpoint === Checkpoint.SHARD_END || !this.#isEligible(lease, all, corrupt)),
    );
    if (leftovers.length > 0) await this.giveBack(leftovers);
    const workable = leases.filter((lease) => lease.checkpoint !== Checkpoint.SHARD_END && this.#isEligible(lease, all, corrupt));
    // Leases are dealt to the live members that are not leaving, this one included while it runs.
    const members = [...alive.keys()].filter((workerId) => workerId === this.#parts.workerId || this.#parts.view.get(workerId)?.metadata[LEAVING_FIELD] === undefined).sort();
    const counts = new Map<string, number>(members.map((workerId) => [workerId, 0]));
    const unowned: LeaseRecord[] = [];
    for (const lease of workable) {
      const owner = ownerOf(lease);
      if (owner === null) unowned.push(lease);
      else if (counts.has(owner)) counts.set(owner, (counts.get(owner) ?? 0) + 1);
    }
    // The leases of the members this worker watches, for it to deal at once should it declare one dead.
    this.#deal.clearWatched();
    if (this.#deal.dealsHere()) {
      const watched = this.#parts.members.watchedMembers();
      for (const lease of workable) {
        const owner = lease.owner;
        if (owner !== null && lease.incarnation !== null && watched.has(owner) && ownerOf(lease) === owner) this.#deal.keepWatched(owner, lease.incarnation, lease);
      }
    }
    // A group's cold start (nobody holds anything) waits until the members stop joining for a take tick,
    // at most three ticks after this worker joined: workers started over a few seconds then each take their
    // share once, instead of the first taking everything and handing most of it on.
    // A cold start's listing read while the members joined may show nothing held where members that dealt
    // a moment earlier hold their portions already: their own counts say the deal has begun.
    this.#coldWait = unowned.length > 0 && [...counts.values()].every((count) => count === 0) && !unowned.some(isMine) && (!early || this.#counts.holdNothing());
    if (this.#coldWait && this.#settling(now, membership)) {
      this.listingDue = true;
      return;
    }
    this.#coldWait = false;
    const unownedKeys = new Set(unowned.map((lease) => lease.leaseKey));
    for (const leaseKey of this.#unownedSince.keys()) if (!unownedKeys.has(leaseKey)) this.#unownedSince.delete(leaseKey);
    for (const lease of unowned) if (!this.#unownedSince.has(lease.leaseKey)) this.#unownedSince.set(lease.leaseKey, now);
    // The members this worker declared dead since its last listing: it deals, frees or adopts their leases.
    const declared = this.#parts.members.takeDeclared();
    // A lease of a member another worker declared dead lately is that worker's to deal: the members its
    // deal names hear of their leases from the change feed, so none takes it here (a take would only race
    // the deal's write). Left undealt for a take tick and a half (its declarer stopped, its write failed),
    // it is anyone's, as any lease left without a live owner is.
    const dealsElsewhere = (lease: LeaseRecord): boolean => {
      if (!this.#deal.dealsHere() || lease.owner === null || declared?.get(lease.owner) === lease.incarnation) return false;
      const owner = this.#parts.view.get(lease.owner);
      return owner?.status === 'dead' && owner.incarnation === lease.incarnation && now - (this.#unownedSince.get(lease.leaseKey) ?? now) < this.#parts.takeIntervalMs * ANYONES_AFTER_TICKS;
    };
    // Those leases are counted as dealt already: the shares are of the rest, which this deal is of.
    const inFlight = new Set(unowned.filter(dealsElsewhere));
    const mine = counts.get(this.#parts.workerId) ?? 0;
    const n = Math.max(1, members.length);
    // Each member's share, by rank, with the caps members publish: the same on every worker.
    const capOfMember = this.#capOf;
    const targets = shares(members, workable.length - inFlight.size, capOfMember);
    // An owner never hands over below the smallest share of a member its cap does not hold back.
    const even = members.filter((workerId) => (targets.get(workerId) ?? 0) < capOfMember(workerId)).map((workerId) => targets.get(workerId) ?? 0);
    this.#fairFloor = Math.min(this.#parts.maxLeases, even.length > 0 ? Math.min(...even) : Math.floor(workable.length / n));
    const target = (rank: number): number => targets.get(members[rank] as string) ?? 0;
    this.#counts.listed(workable.length, targets.get(this.#parts.workerId) ?? 0);

    // Leases storage names this incarnation for, not held: every other worker sees them as this worker's,
    // so only this worker may take them. Handed to it (a tenure it never held), it holds them as they are;
    // lost by it (self-fencing, a handover that did not land), it takes them back in a new tenure.
    // (Not the ones it just handed over, which a listing read before the handover still shows as its own.)
    const before = (lease: LeaseRecord): boolean => lease.epoch < (this.#handovers.handed.get(lease.leaseKey)?.epoch ?? -Infinity);
    const named = unowned.filter((lease) => isMine(lease) && !before(lease));
    const handed = named.filter((lease) => this.#letGo.get(lease.leaseKey) !== lease.epoch);
    const takeBack = named.filter((lease) => this.#letGo.get(lease.leaseKey) === lease.epoch);

    // The same split on every worker that read the same records: sorted keys, dealt to the sorted
    // members by how far each is below its target, the rest round-robin.
    const sorted = unowned.filter((lease) => !isMine(lease) && !inFlight.has(lease)).sort((a, b) => (a.leaseKey < b.leaseKey ? -1 : a.leaseKey > b.leaseKey ? 1 : 0));
    const { recipients, portion, dealtTo } = this.#deal.dealOut(sorted, members, counts, target, declared);
    // A cold start's deal: each member takes its portion from its own listing, or the dealer writes it to
    // them (`ColdDealer`), and counts it as on its way meanwhile.
    const cold = [...counts.values()].every((count) => count === 0);
    if (cold) {
      const holding = new Map<string, { incarnation: string; count: number }>();
      for (const [workerId, count] of dealtTo) {
        const incarnation = alive.get(workerId);
        if (workerId !== this.#parts.workerId && incarnation !== undefined) holding.set(workerId, { incarnation, count });
      }
      if (holding.size > 0) this.#counts.coldDealt(holding, now);
    }
    // What this deal gives the members this worker watches counts as theirs too (every member computes the
    // same deal, and takes its portion): after a cold start, no listing showed anyone holding anything. Kept
    // as listed (free), they are read back by key when the member is named a suspect (or at its
    // declaration): whether it took them, and at which version.
    if (this.#deal.dealsHere()) {
      const watched = this.#parts.members.watchedMembers();
      for (const lease of sorted) {
        const to = recipients.get(lease.leaseKey);
        const incarnation = to === undefined ? undefined : alive.get(to);
        if (to !== undefined && incarnation !== undefined && watched.has(to)) this.#deal.keepWatched(to, incarnation, lease, true);
      }
    }
    // A lease left without a live owner for a take tick and a half is anyone's: a member that did not take its
    // portion (stopping, stuck, or not yet aware of the lease) never keeps it waiting.
    const dealt = new Set(portion);
    const stale = sorted.filter((lease) => now - (this.#unownedSince.get(lease.leaseKey) ?? now) >= this.#parts.takeIntervalMs * ANYONES_AFTER_TICKS && !dealt.has(lease));
    const extra = shuffled(stale, this.#parts.random).slice(0, Math.ceil(stale.length / n));
    const room = Math.max(0, this.#parts.maxLeases - mine);
    const adopted = this.#deal.adoptable(sorted, declared, new Set([...portion, ...extra]), this.#counts.target);
    const keep = holding ? handed.slice(0, room) : [];
    let kept = 0;
    for (const lease of keep) if (this.#parts.hold.add(lease, 'handoff', this.#parts.clock.now())) kept++;
    // Handed more than this worker may hold, or more of its own to take back than it has room for (lost to
    // self-fencing while its cap filled up with others): the rest goes back to the group, which sees them as
    // this worker's until then. Without a change feed to announce the release, the next heartbeat says the
    // leases changed, so that the members list at their next tick rather than when their counts have
    // fallen short for two.
    const takenBack = holding ? Math.min(takeBack.length, Math.max(0, room - keep.length)) : 0;
    const overflow = holding ? [...handed.slice(keep.length), ...takeBack.slice(takenBack)] : [];
    if (overflow.length > 0) {
      await this.giveBack(overflow);
      if (!this.#host.subscribed()) {
        this.#parts.members.noteChanged();
        this.#host.wakeRenew();
      }
    }
    if (this.#host.state() !== 'running') return;
    const ordinary = [...takeBack, ...portion, ...extra];
    const takeable = !holding ? [] : this.#adoptionIgnoresCap ? [...ordinary.slice(0, Math.max(0, room - keep.length)), ...adopted] : [...ordinary, ...adopted].slice(0, Math.max(0, room - keep.length));
    // With a change feed the cold start's dealer writes the others' portions to them, then says in its
    // record how many leases it dealt: a member that reads the note holding nothing was dealt nothing.
    // (Only the dealer: the others list only when its deal did not come, each then taking its own portion.)
    // Portions larger than `COLD_DEAL_MAX_PORTION` are not dealt: the note, at once, sends the members to
    // list, as they did before.
    const dealsCold = cold && sorted.length > 0 && this.#coldDealer.dealsHere() && this.#coldDealer.listsItself();
    const dealtCold = dealsCold && Math.max(0, ...dealtTo.values()) <= COLD_DEAL_MAX_PORTION;
    if (dealsCold && !dealtCold) {
      this.#coldDealer.dealt(workable.length - inFlight.size, now);
      this.#host.wakeRenew();
    }
    const taken = (await this.#take(takeable, membership)) + kept;
    if (this.#host.state() !== 'running') return;
    if (dealtCold) {
      await this.#deal.dealColdStart(sorted, recipients);
      if (this.#host.state() !== 'running') return;
      this.#coldDealer.dealt(workable.length - inFlight.size, this.#parts.clock.now());
      this.#host.wakeRenew();
    }
    await this.#deal.dealForTheGroup(sorted, declared, recipients);
    if (this.#host.state() !== 'running') return;
    // Members balance on each other's counts: publish the new one now, not a heartbeat later.
    if (taken > 0) this.#host.wakeRenew();
    // Leases still without a live owner are looked at again next tick, until somebody holds them.
    // (Not those another declarer deals: their recipients hear of them. Nor, after a large group's cold
    // start, the portions of the others: every member listing the group again a tick after the deal would
    // double the cold start's reads; their counts tell whether they took them, and a shortfall lists.)
    if (unowned.length - inFlight.size > taken && mine + taken < this.#parts.maxLeases && !early && !dealtCold) this.listingDue = true;
    if (taken < takeable.length + keep.length) {
      // Workers with different views picked the same leases: look again shortly, not at the next tick.
      this.listingDue = true;
      this.#parts.clock.sleep(this.#parts.random.next() * 200, this.#host.lifetime).then(() => this.#host.wakeTake(), () => undefined);
    }

    // What every member will hold once the leases just dealt are taken: the same on every worker that
    // read the same records, so that members above their share and members below it agree on the moves.
    const load = new Map(members.map((workerId) => [workerId, (counts.get(workerId) ?? 0) + (dealtTo.get(workerId) ?? 0)]));
    // Of the leases storage names this worker for, only those it holds from this listing: the rest, beyond its
    // cap, went back to the group above. Counted as its own, they had it offer one of its held leases to
    // make room for a lease it did not keep; when that member asked for one back and was handed it with the
    // lease it gave back (an offer and an answer crossing), it was over its cap again, and gave one more
    // away: a capped member and the least loaded one passed a lease to and fro for tens of seconds (lease
    // simulation seed 145900, without a change feed).
    load.set(this.#parts.workerId, (load.get(this.#parts.workerId) ?? 0) + (this.#givenBackPlanned ? named.length : keep.length + takenBack));
    // A handover of this worker's that landed after the listing was read is its recipient's already.
    for (const [leaseKey, handed] of this.#handovers.handed) {
      const listed = all.get(leaseKey);
      if (!listed || !isMine(listed) || !before(listed) || this.#held.has(leaseKey) || !load.has(handed.to)) continue;
      load.set(handed.to, (load.get(handed.to) ?? 0) + 1);
    }
    const moves = planMoves(members, load, capOfMember);
    const rank = members.indexOf(this.#parts.workerId);
    this.#giving.plan({
      moves,
      holding,
      now,
      membership,
      allHeld: unowned.length <= taken,
      held: mine + taken,
      wanted: (rank < 0 ? 0 : target(rank)) - mine - taken,
      workable,
      counts,
      ownerOf,
    });
  }

  /**
   * Writes free the leases that name this incarnation but that it will not hold, so that others may take
   * them. One that was not written free is looked at again at the next listing, at its next tick: nothing
   * else would list again for it.
   */
  async giveBack(leases: readonly LeaseRecord[]): Promise<void> {
    const results = await this.#parts.writes.update(
      leases.map((lease) => ({ leaseKey: lease.leaseKey, expectedVersion: lease.version, next: { ...stateOf(lease), owner: null, incarnation: null }, notify: 'released' as const })),
      'release',
    );
    if (results.some((result) => result.status !== 'applied')) this.listingDue = true;
  }

  /**
   * The shares after a join that brought no listing: the last listing's leases over the members now alive
   * and not leaving, so that this worker's floor and share are the group's as it is now.
   */
  #reshare(): void {
    const { targets, smallest } = this.#counts.sharesNow();
    this.#fairFloor = Math.min(this.#parts.maxLeases, smallest);
    this.#counts.reshared(targets.get(this.#parts.workerId) ?? 0);
  }

  /** Reports each newly corrupt lease once; returns the keys of every corrupt lease now. */
  #noticeCorrupt(errors: readonly Error[]): Set<string> {
    const keys = new Set<string>();
    for (const error of errors) {
      const leaseKey = (error as { leaseKey?: unknown }).leaseKey;
      if (typeof leaseKey !== 'string') continue;
      keys.add(leaseKey);
      if (!this.#corrupt.has(leaseKey)) {
        this.#host.emit('corrupt-lease', { leaseKey, error });
        this.#host.report(error, 'list');
      }
    }
    for (const leaseKey of this.#corrupt) if (!keys.has(leaseKey)) this.#corrupt.delete(leaseKey);
    for (const leaseKey of keys) this.#corrupt.add(leaseKey);
    return keys;
  }

  /** Takes leases without a live owner (free, or their owner's membership dead) in one batched write. */
  async #take(leases: readonly LeaseRecord[], membership: Incarnation, dead?: { workerId: string; incarnation: string }): Promise<number> {
    let taken = 0;
    let pending: LeaseRecord[] = [...leases];
    for (let attempt = 1; pending.length > 0 && attempt <= (dead === undefined ? 1 : 2); attempt++) {
      const sentAt = this.#parts.clock.now();
      const tried = pending;
      const results = await this.#parts.writes.update(
        tried.map((lease) => ({
          leaseKey: lease.leaseKey,
          expectedVersion: lease.version,
          next: { ...stateOf(lease), owner: this.#parts.workerId, incarnation: membership.incarnation, epoch: lease.epoch + 1 },
        })),
        'take',
      );
      pending = [];
      tried.forEach((lease, i) => {
        const outcome = results[i] as WriteResult<LeaseRecord>;
        if (outcome.status === 'applied') {
          if (this.#parts.hold.add(outcome.record, lease.owner === null ? 'free' : 'expired', sentAt)) taken++;
          return;
        }
        // A dead member's lease whose record moved since it was read (its last checkpoints) and still names
        // it is taken on the record the conflict carries.
        const current = outcome.status === 'conflict' ? outcome.current : null;
        if (dead !== undefined && attempt === 1 && current !== null && current.owner === dead.workerId && current.incarnation === dead.incarnation) pending.push(current);
        // Any other conflict or an unknown outcome grants nothing: the next listing tells the truth.
        else this.listingDue = true;
      });
      if (this.#host.state() !== 'running') break;
    }
    return taken;
  }
}
