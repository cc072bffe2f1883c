/**
 * The declarer's deal (DESIGN section 4, "Why the declarer deals" and "Why the declarer deals before it
 * lists"): the leases each watched member held at the last listing, kept so that whoever declares that
 * member dead deals them at once; the deal itself, which keeps a dead member's leases from members seen
 * standing still; the writes that hand each lease to the member the deal gave it; and, without a change
 * feed, the dead member's leases the declarer takes beyond its portion. Taking (taking.ts) runs it from
 * its take tick and its listings.
 */
import { type LeaseRecord, type LeaseUpdate } from '../storage.js';
import { concurrencyLimit } from '../concurrency.js';
import { dealOut, shares } from './balance.js';
import { ANNOUNCED_READS_IN_FLIGHT, NAMED_READS_MAX } from './handovers.js';
import type { Held } from './held.js';
import { LEAVING_FIELD, type Incarnation } from './membership.js';
import type { LeaseParts } from './parts.js';
import { readByKey } from './reads-by-key.js';
import { stateWithoutResume } from './resume-hint.js';
import { SUSPECT_PREFIX } from './answers.js';
import { domainsOf, FAILURE_DOMAIN_FIELD } from './watchers.js';

/**
 * How many leases a cold start's dealer writes in one batch: a deal of 99,900 leases (1,000 x 100,000) in
 * one batch would be one statement of PostgreSQL's that commits, and tells the feed, only at its end.
 */
export const COLD_DEAL_BATCH = 1_000;
/** How many of a cold start's deal batches are in flight at once. */
export const COLD_DEAL_BATCHES_IN_FLIGHT = 8;

/** How many leases announced handed to a watched member a worker keeps by key until its next listing (`heardHanded`). */
const HEARD_KEPT_MAX = 4 * NAMED_READS_MAX;

/** The state core writes: a deal drops a resume hint (it is for the tenure a handover started only). */
const stateOf = stateWithoutResume;

export interface DeclarerDealOptions {
  readonly parts: LeaseParts;
  readonly host: {
    state(): 'new' | 'running' | 'stopping' | 'stopped';
    /** Whether the coordinator listens to the store's change feed. */
    subscribed(): boolean;
    /** Sends a heartbeat now: the members balance on each other's counts. */
    wakeRenew(): void;
  };
  /** The most leases a member may hold. */
  readonly capOf: (workerId: string) => number;
  /**
   * Takes leases without a live owner in one batched write; how many it holds now. With `dead`, a take
   * that conflicts is tried again once on the record the conflict carries, if that still names `dead`.
   */
  readonly take: (leases: readonly LeaseRecord[], membership: Incarnation, dead?: { workerId: string; incarnation: string }) => Promise<number>;
  /** Unsafe: a dead member's lease whose deal or free conflicted is written again on the current record, whoever it names now. */
  readonly freeRetryIgnoresOwner: boolean;
  /** Unsafe: a lease written to a member this worker declared dead a moment before is not dealt again. */
  readonly lateDealIgnored: boolean;
  /** Unsafe: a dead member's leases are dealt to the other members of its failure domain, however many of them are doubted too. */
  readonly lostDomainsDealt: boolean;
}

/** What a watched member held at the last listing, or that listing's deal gave it (`dealt`: listed free, not read back yet). */
interface WatchedHeld {
  readonly incarnation: string;
  leases: LeaseRecord[];
  readonly dealt: Set<string>;
  /** A read-back of the dealt leases under way. */
  reading: Promise<void> | null;
}

/** What this worker deals of the members it declares dead. */
export class DeclarerDeal {
  readonly #parts: LeaseParts;
  readonly #host: DeclarerDealOptions['host'];
  readonly #held: ReadonlyMap<string, Held>;
  readonly #capOf: (workerId: string) => number;
  readonly #take: DeclarerDealOptions['take'];
  readonly #freeRetryIgnoresOwner: boolean;
  readonly #lateDealIgnored: boolean;
  readonly #lostDomainsDealt: boolean;
  /**
   * The leases the last listing showed each watched member holding, or its deal gave it, by worker id,
   * with the incarnation: what this worker deals at once if it declares that member dead (`dealAtDeclaration`).
   * `dealt`: the keys only the deal gave it, kept as listed (free), read back by key when the member is
   * named a suspect, or at its declaration.
   */
  readonly #watchedHeld = new Map<string, WatchedHeld>();
  /** The members this worker declared dead in the last lease duration, at which incarnation and when. */
  readonly #declaredLately = new Map<string, { incarnation: string; at: number }>();
  /** Leases the feed announced written to one of those since its declaration, by key, to deal (`dealLate`). */
  readonly #late = new Map<string, WatchedHeld>();

  constructor(options: DeclarerDealOptions) {
    this.#parts = options.parts;
    this.#host = options.host;
    this.#held = options.parts.hold.leases;
    this.#capOf = options.capOf;
    this.#take = options.take;
    this.#freeRetryIgnoresOwner = options.freeRetryIgnoresOwner;
    this.#lateDealIgnored = options.lateDealIgnored;
    this.#lostDomainsDealt = options.lostDomainsDealt;
  }

  /** Forgets what the watched members held: a listing is about to tell again. */
  clearWatched(): void {
    this.#watchedHeld.clear();
  }

  /**
   * Without a change feed, the leases of the members this worker declared dead beyond its portion, which it
   * takes as well (DESIGN section 4, "Watchers and the roster digest"): nothing would wake the members that
   * do not watch the dead one before their next take tick, up to a tick later, while the declarer is awake
   * and has just listed. At most its own share more (`share`, its target at the last listing: so that a declarer of several members at once does
   * not take a crowd's leases), and its cap still holds (the caller's slice); the plan of moves hands the
   * excess on at its next ticks, each lease drained and handed over without a lapse. Only while this worker
   * reads as a watcher: in a group whose members all read the whole roster, each judges the expiry itself.
   */
  adoptable(unowned: readonly LeaseRecord[], declared: ReadonlyMap<string, string> | null, dealt: ReadonlySet<LeaseRecord>, share: number): LeaseRecord[] {
    if (declared === null || this.#host.subscribed() || !this.#parts.members.readsWatched()) return [];
    return unowned.filter((lease) => !dealt.has(lease) && !this.#held.has(lease.leaseKey) && lease.owner !== null && declared.get(lease.owner) === lease.incarnation).slice(0, Math.max(1, share));
  }

  /**
   * Whether the declarer of a death deals the dead member's leases to the members (DESIGN section 4, "Why
   * the declarer deals"): with a change feed, to tell them, and while this worker reads as a watcher (every
   * member of a group that reads the whole roster judges expiry itself, at the same moment, and takes its
   * own portion). Members that do not declare a death then have nothing to list for it.
   */
  dealsHere(): boolean {
    return this.#host.subscribed() && this.#parts.members.readsWatched();
  }

  /**
   * Keeps `lease` as one `workerId` holds at `incarnation`, for a deal at its declaration; `dealt` when a
   * listing showed it free and the deal gave it to that member, which takes it itself.
   */
  keepWatched(workerId: string, incarnation: string, lease: LeaseRecord, dealt = false): void {
    let known = this.#watchedHeld.get(workerId);
    if (known === undefined) this.#watchedHeld.set(workerId, (known = { incarnation, leases: [], dealt: new Set(), reading: null }));
    if (known.incarnation !== incarnation) return;
    known.leases.push(lease);
    if (dealt) known.dealt.add(lease.leaseKey);
  }

  /**
   * The change feed announced `leaseKey` handed to `workerId` (a cold start's deal, a declarer's, a
   * handover): when this worker watches that member, the lease is kept as one it holds, by key only, to be
   * read back when the member is named a suspect, or at its declaration, as a lease a listing's deal gave
   * it. After a cold start its dealer dealt, no other member has listed: without this, the declarer of a
   * death would know none of the dead member's leases, and list the group to find them.
   */
  /** The members this worker declared dead in the last lease duration: a lease written to one of them since is dealt again (`dealLate`). */
  declaredLately(): Iterable<string> {
    return this.#declaredLately.keys();
  }

  heardHanded(workerId: string, leaseKey: string): void {
    if (!this.dealsHere()) return;
    const declared = this.#declaredLately.get(workerId);
    if (declared !== undefined) {
      if (this.#lateDealIgnored) return;
      let late = this.#late.get(workerId);
      if (late === undefined || late.incarnation !== declared.incarnation) this.#late.set(workerId, (late = { incarnation: declared.incarnation, leases: [], dealt: new Set(), reading: null }));
      if (late.dealt.size < HEARD_KEPT_MAX) late.dealt.add(leaseKey);
      return;
    }
    if (!this.#parts.members.watchedMembers().has(workerId)) return;
    const member = this.#parts.view.get(workerId);
    if (member?.status !== 'alive') return;
    let known = this.#watchedHeld.get(workerId);
    if (known === undefined || known.incarnation !== member.incarnation) this.#watchedHeld.set(workerId, (known = { incarnation: member.incarnation, leases: [], dealt: new Set(), reading: null }));
    if (known.dealt.size < HEARD_KEPT_MAX && !known.leases.some((lease) => lease.leaseKey === leaseKey)) known.dealt.add(leaseKey);
  }

  /** The deal of `sorted` by {@link dealOut}, leases this worker declared dead kept from members seen standing still; and this worker's portion. */
  dealOut(
    sorted: readonly LeaseRecord[],
    members: readonly string[],
    counts: ReadonlyMap<string, number>,
    target: (rank: number) => number,
    declared: ReadonlyMap<string, string> | null,
  ): { recipients: Map<string, string>; portion: LeaseRecord[]; dealtTo: Map<string, number> } {
    const self = this.#parts.workerId;
    const lost = declared !== null && this.dealsHere() ? this.#lostDomains(declared) : null;
    // A member that may have died in the same crash as the members this worker declared dead: a lease of
    // theirs dealt to it would wait for its own declaration.
    const standingStill = (workerId: string): boolean => {
      const member = this.#parts.view.get(workerId);
      if (member === undefined || this.#parts.members.answers.looksGone(member)) return true;
      const domain = member.metadata[FAILURE_DOMAIN_FIELD];
      return lost !== null && domain !== undefined && lost.has(domain);
    };
    const away = declared !== null && this.dealsHere() ? { ofDead: (lease: LeaseRecord) => lease.owner !== null && declared.get(lease.owner) === lease.incarnation, standingStill } : null;
    const { recipients, dealtTo } = dealOut(sorted, members, counts, target, this.#capOf, self, away);
    return { recipients, portion: sorted.filter((lease) => recipients.get(lease.leaseKey) === self), dealtTo };
  }

  /**
   * The failure domains of the members `declared` dead that look lost whole (DESIGN section 4, "A domain
   * lost whole is dealt none of its members' leases"): a domain that holds, besides one of them, another member this worker has cause to doubt
   * (declared dead here in the last lease duration, named a suspect in a record this worker read, or
   * standing still). A host lost at once stops its members' heartbeats together, but their last heartbeats
   * fell apart by up to a heartbeat interval, and while the others wait for their own declarations a
   * declarer whose view still shows them alive, and that did not read their silence to the digest's
   * suspects yet, would deal them the first one's leases: those then wait for a second declaration. So a
   * lost domain's other members are dealt none of them. One member dead alone leaves its domain dealt to as
   * any other: its leases are not kept from members that are well. `null` when not every live member names
   * a domain (the plain ring's rule, `domainsOf`), or when no member outside the lost domains could take them.
   */
  #lostDomains(declared: ReadonlyMap<string, string>): ReadonlySet<string> | null {
    if (this.#lostDomainsDealt) return null;
    const view = this.#parts.view;
    const alive = [...view.values()].filter((member) => member.status === 'alive');
    if (domainsOf(alive) === undefined) return null;
    const domainOf = (workerId: string): string | undefined => view.get(workerId)?.metadata[FAILURE_DOMAIN_FIELD];
    const doubted = new Set([...declared.keys(), ...this.#declaredLately.keys()]);
    for (const member of alive) {
      if (member.workerId !== this.#parts.workerId && this.#parts.members.answers.looksGone(member)) doubted.add(member.workerId);
      for (const key of Object.keys(member.metadata)) if (key.startsWith(SUSPECT_PREFIX)) doubted.add(key.slice(SUSPECT_PREFIX.length));
    }
    const doubtedIn = new Map<string, number>();
    for (const workerId of doubted) {
      const domain = domainOf(workerId);
      if (domain !== undefined) doubtedIn.set(domain, (doubtedIn.get(domain) ?? 0) + 1);
    }
    const lost = new Set<string>();
    for (const dead of declared.keys()) {
      const domain = domainOf(dead);
      if (domain !== undefined && (doubtedIn.get(domain) ?? 0) >= 2) lost.add(domain);
    }
    if (lost.size === 0) return null;
    const elsewhere = alive.some((member) => member.workerId !== this.#parts.workerId && !lost.has(member.metadata[FAILURE_DOMAIN_FIELD] as string) && !this.#parts.members.answers.looksGone(member));
    return elsewhere ? lost : null;
  }

  /**
   * Deals the leases a member this worker just declared dead held at this worker's last listing (or that
   * listing's deal gave it), at once, before the listing its declaration brings (DESIGN section 4, "Why the
   * declarer deals before it lists"): under load a listing of the whole group takes seconds, and the leases
   * would wait for it. The deal is the listing's
   * (`dealOut`) on the members' own counts; this worker takes its own portion, and writes the rest to
   * their members as the listing's deal does. The records are as listed, maybe long ago: each write is
   * conditional on the listed version, and one that conflicts is written again on the current record only
   * if it still names the dead incarnation. What the dead member took since that listing, and whatever did
   * not land, the listing that follows finds and deals.
   */
  async dealAtDeclaration(dead: string, incarnation: string, membership: Incarnation): Promise<void> {
    if (this.dealsHere()) this.#declaredLately.set(dead, { incarnation, at: this.#parts.clock.now() });
    const known = this.#watchedHeld.get(dead);
    this.#watchedHeld.delete(dead);
    if (known === undefined || known.incarnation !== incarnation) return;
    await this.#dealKnown(dead, incarnation, known, membership);
  }

  /**
   * Deals the leases another declarer wrote to a member this worker declared dead a moment before (its
   * view still showed that member alive): announced by the feed since the declaration, they are read by
   * key and dealt as at the declaration. Nobody else deals them: the member's declarer had listed for its
   * death before they came, and without this they waited for the counts' shortfall, a few take ticks
   * (a quarter of 40 workers over 4,000 leases crashing at once: every lease held elsewhere up to 1.8
   * lease durations after the crash, against 1.1).
   */
  async dealLate(membership: Incarnation): Promise<void> {
    const now = this.#parts.clock.now();
    for (const [dead, declared] of this.#declaredLately) if (now - declared.at >= this.#parts.leaseDurationMs) this.#declaredLately.delete(dead);
    for (const [dead, known] of this.#late) {
      this.#late.delete(dead);
      if (this.#host.state() !== 'running') return;
      if (this.#declaredLately.get(dead)?.incarnation === known.incarnation) await this.#dealKnown(dead, known.incarnation, known, membership);
    }
  }

  async #dealKnown(dead: string, incarnation: string, known: WatchedHeld, membership: Incarnation): Promise<void> {
    if (!this.dealsHere()) return;
    // The leases only a deal gave the dead member, read back when it was named a suspect, or now.
    await this.#readBack(known, dead);
    if (this.#host.state() !== 'running') return;
    // Beyond what a read-back reads, the listing the declaration brings finds them.
    const leases = known.leases.filter((lease) => !this.#held.has(lease.leaseKey) && !known.dealt.has(lease.leaseKey));
    leases.sort((a, b) => (a.leaseKey < b.leaseKey ? -1 : a.leaseKey > b.leaseKey ? 1 : 0));
    if (leases.length === 0) return;
    // The listing's deal, on the roster's counts: the leases the group holds and these.
    const self = this.#parts.workerId;
    const members = [...this.#parts.view.alive().keys()].filter((workerId) => workerId === self || this.#parts.view.get(workerId)?.metadata[LEAVING_FIELD] === undefined).sort();
    const counts = new Map(members.map((workerId) => [workerId, workerId === self ? this.#parts.hold.countHeld() : (this.#parts.view.get(workerId)?.held ?? 0)]));
    let total = leases.length;
    for (const count of counts.values()) total += count;
    const targets = shares(members, total, this.#capOf);
    const { recipients, portion } = this.dealOut(leases, members, counts, (rank) => targets.get(members[rank] as string) ?? 0, new Map([[dead, incarnation]]));
    const holding = this.#parts.skipSelfFencing || this.#parts.clock.now() < this.#parts.members.heldUntil;
    // Taken on the record a conflict carries while it still names the dead incarnation: its checkpoints
    // moved the versions since the listing, and the listing that follows takes seconds under load.
    if (holding && (await this.#take(portion, membership, { workerId: dead, incarnation })) > 0) this.#host.wakeRenew();
    if (this.#host.state() !== 'running') return;
    await this.dealForTheGroup(
      leases.filter((lease) => recipients.has(lease.leaseKey) && recipients.get(lease.leaseKey) !== self),
      new Map([[dead, incarnation]]),
      recipients,
    );
  }

  /**
   * Reads back, without waiting, the leases only a deal gave `workerId` at `incarnation`: it is about to be
   * named a suspect, and its declaration, if it comes, deals them at once instead of reading them then.
   */
  readBack(workerId: string, incarnation: string): void {
    const known = this.#watchedHeld.get(workerId);
    if (known !== undefined && known.incarnation === incarnation && this.dealsHere()) void this.#readBack(known, workerId);
  }

  /**
   * The leases only a deal gave a watched member were listed free: whether it took them, and at which
   * version, only their records say (a free record names nobody: neither a take nor the deal's write would
   * apply to it). Read by key, `ANNOUNCED_READS_IN_FLIGHT` at a time and as many as a member dealt leases by
   * name reads (`NAMED_READS_MAX`; a cold start's deal is all most members hold until the group lists
   * again); those that name the member at its incarnation are kept as read, the rest dropped. A read that
   * fails leaves its lease to the listing.
   */
  #readBack(known: WatchedHeld, workerId: string): Promise<void> {
    if (known.reading !== null) return known.reading;
    const unread = [...known.dealt];
    if (unread.length === 0 || unread.length > NAMED_READS_MAX) return Promise.resolve();
    known.reading = Promise.all(readByKey(this.#parts.storage, this.#parts.group, unread, ANNOUNCED_READS_IN_FLIGHT).map((read) => read.then((answer) => ('lease' in answer ? answer.lease : null)))).then((reads) => {
      const read = new Map(reads.filter((record): record is LeaseRecord => record !== null && record.owner === workerId && record.incarnation === known.incarnation).map((record) => [record.leaseKey, record]));
      // (Keys announced while the reads were on their way stay to be read.)
      const done = new Set(unread);
      known.leases = [...known.leases.filter((lease) => !done.has(lease.leaseKey)), ...read.values()];
      for (const leaseKey of done) known.dealt.delete(leaseKey);
      known.reading = null;
    });
    return known.reading;
  }

  /**
   * Writes the free leases a cold start's deal gave other members to them, in batches of `COLD_DEAL_BATCH`,
   * each lease announced `handed-off` with its new owner (DESIGN section 4, taking, step 3, "One member deals a cold start"):
   * the member the feed names reads it by key and holds it, as a lease handed over unasked, and nobody
   * else lists the group for its first listing. Each write is conditional on the listed version: a lease
   * taken or written since is left as it is. A lease the deal gives nobody stays free. How many applied.
   */
  async dealColdStart(sorted: readonly LeaseRecord[], recipients: ReadonlyMap<string, string>): Promise<number> {
    if (!this.dealsHere()) return 0;
    // Each member's portion, in key order.
    const portions = new Map<string, LeaseUpdate[]>();
    for (const lease of sorted) {
      const to = recipients.get(lease.leaseKey);
      const member = to === undefined || to === this.#parts.workerId || this.#held.has(lease.leaseKey) ? undefined : this.#parts.view.get(to);
      if (member?.status !== 'alive' || lease.owner !== null) continue;
      const next = { ...stateOf(lease), owner: member.workerId, incarnation: member.incarnation, epoch: lease.epoch + 1 };
      let portion = portions.get(member.workerId);
      if (portion === undefined) portions.set(member.workerId, (portion = []));
      portion.push({ leaseKey: lease.leaseKey, expectedVersion: lease.version, next, notify: 'handed-off' });
    }
    // One lease of each portion in turn, so that every member's first leases are in the first batch: a
    // member waiting for its portion sees the deal under way (`ColdDealer`), however large the group.
    const updates: LeaseUpdate[] = [];
    const queues = [...portions.values()];
    for (let i = 0; updates.length < sorted.length && queues.some((queue) => i < queue.length); i++) {
      for (const queue of queues) if (i < queue.length) updates.push(queue[i] as LeaseUpdate);
    }
    // The batches go `COLD_DEAL_BATCHES_IN_FLIGHT` at once (their leases are disjoint), so that the deal
    // takes about as long as one batch of all of them would, and its first leases land first.
    const limit = concurrencyLimit(COLD_DEAL_BATCHES_IN_FLIGHT);
    const batches: Promise<number>[] = [];
    for (let from = 0; from < updates.length; from += COLD_DEAL_BATCH) {
      const batch = updates.slice(from, from + COLD_DEAL_BATCH);
      batches.push(
        limit(async () => {
          if (this.#host.state() !== 'running') return 0;
          const results = await this.#parts.writes.update(batch, 'deal-cold');
          return results.filter((outcome) => outcome.status === 'applied').length;
        }),
      );
    }
    let applied = 0;
    for (const batch of batches) applied += await batch;
    return applied;
  }

  /**
   * Writes the leases of the members this worker declared dead that it did not take itself to the members
   * its deal gives them to, in one batch, each announced `handed-off` with its new owner (DESIGN section 4,
   * "Why the declarer deals"). In a group of watchers only the dead member's few watchers were woken at its
   * expiry; the rest would each list to find their portion. The recipient hears the change that names it
   * and holds the lease from the record it reads, as it holds a lease handed over unasked; nobody else
   * lists for the death. A lease the deal gives nobody (no member has room) or gives this worker beyond
   * its room is written free, with the feed's `released`, for whoever has room. Each write is conditional
   * on the listed version, as a take is: a lease taken or written since is left as it is, and a new
   * tenure's epoch fences the dead member's writes.
   */
  async dealForTheGroup(unowned: readonly LeaseRecord[], declared: ReadonlyMap<string, string> | null, recipients: ReadonlyMap<string, string>): Promise<void> {
    if (declared === null || !this.dealsHere()) return;
    const namesTheDead = (lease: LeaseRecord | null): lease is LeaseRecord => lease !== null && lease.owner !== null && declared.get(lease.owner) === lease.incarnation;
    const orphans = unowned.filter((lease) => namesTheDead(lease) && !this.#held.has(lease.leaseKey));
    if (orphans.length === 0) return;
    // Those it wakes read the whole roster first: the digest's advance for the death goes out before the deal.
    await this.#parts.members.advancing;
    // Each to the member the deal gave it, at that member's incarnation as this worker read it.
    const dealt = new Map<string, { owner: string | null; incarnation: string | null }>();
    for (const lease of orphans) {
      const to = recipients.get(lease.leaseKey);
      const member = to === undefined || to === this.#parts.workerId ? undefined : this.#parts.view.get(to);
      dealt.set(lease.leaseKey, member?.status === 'alive' ? { owner: member.workerId, incarnation: member.incarnation } : { owner: null, incarnation: null });
    }
    let pending = orphans;
    for (let attempt = 1; pending.length > 0 && attempt <= 2 && this.#host.state() === 'running'; attempt++) {
      const results = await this.#parts.writes.update(
        pending.map((lease) => {
          const { owner, incarnation } = dealt.get(lease.leaseKey) as { owner: string | null; incarnation: string | null };
          return owner === null
            ? { leaseKey: lease.leaseKey, expectedVersion: lease.version, next: { ...stateOf(lease), owner: null, incarnation: null }, notify: 'released' as const }
            : { leaseKey: lease.leaseKey, expectedVersion: lease.version, next: { ...stateOf(lease), owner, incarnation, epoch: lease.epoch + 1 }, notify: 'handed-off' as const };
        }),
        'deal-dead',
      );
      // A lease written since the listing without being taken (an operator's rewind request in its
      // metadata) still names the dead: written again on the record the conflict carries. One taken is left be.
      pending = results.flatMap((outcome) =>
        outcome.status === 'conflict' && outcome.current !== null && (this.#freeRetryIgnoresOwner || namesTheDead(outcome.current)) ? [outcome.current] : [],
      );
    }
  }
}
