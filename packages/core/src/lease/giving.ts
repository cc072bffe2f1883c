/**
 * What a worker gives and asks for beside the deal (DESIGN section 4, "Taking, on a listing", the moves
 * of the plan, and "A join that names its givers"): the handovers it offers to members below their share,
 * the asks of newcomers it answers, its own asks of its givers by name while it is a newcomer, and its
 * steal requests. The plan itself (the moves between members) is computed by taking.ts on its listing,
 * with balance.ts; the asks' format is in join-asks.ts; the handovers and requests are carried out by
 * handovers.ts.
 */
import { shuffled } from '../clock.js';
import type { LeaseRecord } from '../storage.js';
import type { Counts } from './counts.js';
import type { Handovers } from './handovers.js';
import type { Held } from './held.js';
import { AsksRead, ASKED_TICKS, ASKS_TICKS } from './join-asks.js';
import { LEAVING_FIELD, type Incarnation } from './membership.js';
import type { LeaseParts } from './parts.js';
import type { TakingHost } from './taking.js';

/** How many times a newcomer asks its givers by name, and for how many take ticks after its join. */
const MAX_ASK_ROUNDS = 3;
const NEWCOMER_TICKS = 10;

export interface GivingOptions {
  readonly parts: LeaseParts;
  readonly handovers: Handovers;
  readonly counts: Counts;
  readonly asks: AsksRead;
  readonly host: Pick<TakingHost, 'state' | 'emit' | 'subscribed' | 'wakeRenew'>;
  /** The smallest fair share of the last listing: an owner never hands over below it. */
  readonly fairFloor: () => number;
  /** Recomputes the shares after a join that brought no listing (`Taking`'s floor and share). */
  readonly reshare: () => void;
}

/** What a listing's plan asks of this worker once the leases it dealt are taken (`Giving.plan`). */
export interface Planned {
  /** The plan's moves between the members, computed on the listing's counts with the leases just dealt. */
  readonly moves: readonly { readonly from: string; readonly to: string }[];
  /** Whether a take now would count as held (a heartbeat applied lately). */
  readonly holding: boolean;
  readonly now: number;
  readonly membership: Incarnation;
  /** Whether the listing left no lease without a live owner once this worker's takes were made. */
  readonly allHeld: boolean;
  /** What this worker holds once its takes were made. */
  readonly held: number;
  /** How many leases this worker is short of its share. */
  readonly wanted: number;
  /** The listing's workable leases, the members' counts on it, and who owns a lease as this worker judges. */
  readonly workable: readonly LeaseRecord[];
  readonly counts: Map<string, number>;
  readonly ownerOf: (lease: LeaseRecord) => string | null;
}

/** The offers, answers to asks, asks and steal requests of one worker. */
export class Giving {
  readonly #parts: LeaseParts;
  readonly #held: ReadonlyMap<string, Held>;
  readonly #handovers: Handovers;
  readonly #counts: Counts;
  readonly #asks: AsksRead;
  readonly #host: GivingOptions['host'];
  readonly #fairFloor: () => number;
  readonly #reshare: () => void;
  /** This worker's own asks while they stand: of which incarnation, until when. */
  #asked: { incarnation: string; until: number } | null = null;
  /**
   * How many times this incarnation asked its givers by name, and what it held at the last asks. Only an
   * incarnation whose first listing found every lease held asks (it joined a running group): one that found
   * leases to deal (a cold start, a crash) takes its portion instead.
   */
  #askRounds = { incarnation: '', askable: false, rounds: 0, heldAtAsk: 0 };

  constructor(options: GivingOptions) {
    this.#parts = options.parts;
    this.#held = options.parts.hold.leases;
    this.#handovers = options.handovers;
    this.#counts = options.counts;
    this.#asks = options.asks;
    this.#host = options.host;
    this.#fairFloor = options.fairFloor;
    this.#reshare = options.reshare;
  }

  /** Whether this worker's own asks of its givers stand. */
  get asking(): boolean {
    return this.#asked !== null;
  }

  /** Withdraws this worker's asks once their time is up, or once they are of an earlier incarnation. */
  expireAsks(membership: Incarnation, now: number): void {
    if (this.#asked !== null && (this.#asked.incarnation !== membership.incarnation || now >= this.#asked.until)) {
      this.#asked = null;
      this.#parts.members.unask();
    }
  }

  /** This incarnation's first listing was a cold start's deal it was dealt: it asks no giver later (`Taking`'s `#dealtBy`). */
  dealt(membership: Incarnation): void {
    this.#askRounds = { incarnation: membership.incarnation, askable: false, rounds: 0, heldAtAsk: 0 };
  }

  /**
   * What this worker does on a listing's plan once the leases it dealt are taken: offers its moves, asks
   * its givers by name while it is a newcomer, and asks the most loaded members for what it still lacks.
   */
  plan({ moves, holding, now, membership, allHeld, held, wanted, workable, counts, ownerOf }: Planned): void {
    // With a change feed, not to a newcomer whose asks named this worker lately: it had what it asked of
    // this worker, and the listing shows it short only of what its other givers are still handing it.
    // Offered more on that listing's counts (a member that answered one newcomer of several and was still
    // above another), the first of three newcomers a second apart was handed up to 16 leases over its
    // share, to hand on again; what it still lacks it asks again, or steals. (Without a feed a newcomer
    // waiting for its asks lists every tick and finds such an offer at once, where its own asks again wait
    // a tick for their answers: the offer stands, 6.5 against 7.2 s to balance over 24 seeds.)
    const answered = (workerId: string): boolean => this.#host.subscribed() && this.#asks.askedMeLately(workerId, now, ASKS_TICKS * this.#parts.takeIntervalMs);
    if (holding) this.offer(moves.filter((move) => move.from === this.#parts.workerId && !answered(move.to)).map((move) => move.to), now);
    // A member due to hand this worker leases is the one asked for them: an owner answers a request and
    // its own offer with the same lease count, so that a lease never moves twice for one place.
    const givers = new Map<string, number>();
    for (const move of moves) if (move.to === this.#parts.workerId) givers.set(move.from, (givers.get(move.from) ?? 0) + 1);
    // A newcomer's first listing asks its givers by name, each for what the plan says it hands over: the
    // members already there list nothing for the join (DESIGN section 4, "A join that names its givers").
    // Givers that refused (their plan had moved on: another newcomer asked them first) leave it two or more
    // short: it asks again, of the givers of a new plan, up to three times in its first ten ticks. (Not when
    // nobody answered: its givers do not read asks, an earlier release's, and it asks the usual way.)
    if (this.#askRounds.incarnation !== membership.incarnation) this.#askRounds = { incarnation: membership.incarnation, askable: allHeld, rounds: 0, heldAtAsk: 0 };
    let due = 0;
    for (const count of givers.values()) due += count;
    const first =
      this.#asked === null && this.#askRounds.askable && this.#askRounds.rounds < MAX_ASK_ROUNDS && now - membership.joinedAt < NEWCOMER_TICKS * this.#parts.takeIntervalMs && (this.#askRounds.rounds === 0 ? due >= 1 : due >= 2 && held > this.#askRounds.heldAtAsk);
    if (first && holding && givers.size > 0 && allHeld && this.#parts.members.ask(givers)) {
      this.#asked = { incarnation: membership.incarnation, until: now + ASKED_TICKS * this.#parts.takeIntervalMs };
      this.#askRounds.rounds++;
      this.#askRounds.heldAtAsk = held;
      this.#host.wakeRenew();
    }
    const asked = this.#handovers.requests.size;
    if (holding && this.#asked === null && wanted - asked > 0 && this.#parts.maxSteals > 0 && allHeld) {
      this.#handovers.requestHandoffs(workable, counts, ownerOf, held + asked, wanted - asked, now, givers);
    }
  }

  /**
   * Answers the asks of newcomers read this tick: hands each what it asked of this worker, from the leases
   * this worker holds, never below the group's smallest share (asks computed on a listing older than
   * another join, or answered already by an offer, ask for more than the plan now says).
   */
  answerAsks(now: number, membership: Incarnation): void {
    const asks = this.#asks.read(this.#parts.view, now, new Set(this.#parts.members.joined));
    if (asks.length === 0) return;
    const holding = this.#parts.skipSelfFencing || now < this.#parts.members.heldUntil;
    if (!holding || this.#parts.members.current !== membership) return;
    this.#reshare();
    let mine = [...this.#held.values()].filter((held) => !held.leaving && !held.handoff).length;
    const recipients: string[] = [];
    for (const { to, count } of asks) {
      // Not to a member leaving: it takes nothing more, as the plan and the deals leave it out. (Before, a
      // stopping member's leaving heartbeat still carried the asks of its last tick, and its giver answered
      // them with the very lease the stop had just handed it: written to it after its stop had handed its
      // leases on, the lease was left named for a member gone, for a listing to find; consumer simulation,
      // multi-stream seed 157896.) A stopping member writes no asks now; one of an earlier release may.
      if (to.metadata[LEAVING_FIELD] !== undefined) continue;
      const give = Math.min(count, mine - this.#fairFloor());
      if (give <= 0) continue;
      for (let i = 0; i < give; i++) recipients.push(to.workerId);
      mine -= give;
    }
    // Less only what is under way to the newcomers already (an offer of a listing that saw them): the
    // handovers under way to others are not part of what they asked.
    this.offer(recipients, now, false);
  }

  /**
   * Hands leases to members below their share without being asked, one per entry of `recipients`: the
   * moves this worker's part of the plan calls for, less the handovers already under way (answered
   * requests and earlier offers), to those members first. Each is drained and written to its recipient as
   * an answered request is. The recipients did not ask: they see the members' counts fall short of the
   * leases (see `Counts.unheld`), list, and hold them; nobody else lists for it.
   */
  offer(recipients: readonly string[], now: number, lessOthersUnderWay = true): void {
    if (this.#host.state() !== 'running' || recipients.length === 0) return;
    const underWay = new Map<string, number>();
    let others = 0;
    for (const held of this.#held.values()) if (held.handoff) underWay.set(held.handoff.to, (underWay.get(held.handoff.to) ?? 0) + 1);
    const due: string[] = [];
    for (const to of recipients) {
      const pending = underWay.get(to) ?? 0;
      if (pending > 0) underWay.set(to, pending - 1);
      else due.push(to);
    }
    if (lessOthersUnderWay) for (const pending of underWay.values()) others += pending;
    const free = shuffled(
      [...this.#held.entries()].filter(([leaseKey, held]) => !held.leaving && !held.handoff && this.#parts.hold.isHeld(leaseKey)),
      this.#parts.random,
    );
    // Not to a member that may have died: in a crash, the plan's moves are made before its deaths are all declared.
    const dying = this.#counts.dyingLately(now);
    for (const to of due.slice(others)) {
      const member = this.#parts.view.get(to);
      if (member !== undefined && member.status === 'alive' && !this.#parts.members.answers.mayBeOffered(member, dying)) continue;
      const entry = free.pop();
      if (!entry || member?.status !== 'alive') break;
      const [leaseKey, held] = entry;
      held.handoff = { to, incarnation: member.incarnation, seenAt: now };
      this.#host.emit('handoff-offered', { leaseKey, to });
      void this.#handovers.handOff(leaseKey, held);
    }
  }
}
