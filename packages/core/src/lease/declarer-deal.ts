/**
 * The declarer's deal (DESIGN section 4, "Why the declarer deals" and "Why the declarer deals before it
 * lists"): the leases each watched member held at the last listing, kept so that whoever declares that
 * member dead deals them at once; the deal itself, which keeps a dead member's leases from members seen
 * standing still; the writes that hand each lease to the member the deal gave it; and, without a change
 * feed, the dead member's leases the declarer takes beyond its portion. Taking (taking.ts) runs it from
 * its take tick and its listings.
 */
import { type LeaseRecord } from '../storage.js';
import { concurrencyLimit } from '../concurrency.js';
import { dealOut, shares } from './balance.js';
import { ANNOUNCED_READS_IN_FLIGHT, NAMED_READS_MAX } from './handovers.js';
import type { Held } from './held.js';
import { LEAVING_FIELD, type Incarnation } from './membership.js';
import type { LeaseParts } from './parts.js';
import { stateWithoutResume } from './resume-hint.js';

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
  /**
   * The leases the last listing showed each watched member holding, or its deal gave it, by worker id,
   * with the incarnation: what this worker deals at once if it declares that member dead (`dealAtDeclaration`).
   * `dealt`: the keys only the deal gave it, kept as listed (free), read back by key when the member is
   * named a suspect, or at its declaration.
   */
  readonly #watchedHeld = new Map<string, WatchedHeld>();

  constructor(options: DeclarerDealOptions) {
    this.#parts = options.parts;
    this.#host = options.host;
    this.#held = options.parts.hold.leases;
    this.#capOf = options.capOf;
    this.#take = options.take;
    this.#freeRetryIgnoresOwner = options.freeRetryIgnoresOwner;
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

  /** The deal of `sorted` by {@link dealOut}, leases this worker declared dead kept from members seen standing still; and this worker's portion. */
  dealOut(
    sorted: readonly LeaseRecord[],
    members: readonly string[],
    counts: ReadonlyMap<string, number>,
    target: (rank: number) => number,
    declared: ReadonlyMap<string, string> | null,
  ): { recipients: Map<string, string>; portion: LeaseRecord[]; dealtTo: Map<string, number> } {
    const self = this.#parts.workerId;
    // A member that may have died in the same crash as the members this worker declared dead: a lease of
    // theirs dealt to it would wait for its own declaration.
    const standingStill = (workerId: string): boolean => {
      const member = this.#parts.view.get(workerId);
      return member === undefined || this.#parts.members.answers.looksGone(member);
    };
    const away = declared !== null && this.dealsHere() ? { ofDead: (lease: LeaseRecord) => lease.owner !== null && declared.get(lease.owner) === lease.incarnation, standingStill } : null;
    const { recipients, dealtTo } = dealOut(sorted, members, counts, target, this.#capOf, self, away);
    return { recipients, portion: sorted.filter((lease) => recipients.get(lease.leaseKey) === self), dealtTo };
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
    const known = this.#watchedHeld.get(dead);
    this.#watchedHeld.delete(dead);
    if (known === undefined || known.incarnation !== incarnation || !this.dealsHere()) return;
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
    const unread = known.leases.filter((lease) => known.dealt.has(lease.leaseKey));
    if (unread.length === 0 || unread.length > NAMED_READS_MAX) return Promise.resolve();
    const limit = concurrencyLimit(ANNOUNCED_READS_IN_FLIGHT);
    known.reading = Promise.all(
      unread.map((lease) =>
        limit(() => this.#parts.storage.getLease(this.#parts.group, lease.leaseKey)).then(
          (record) => record,
          () => null,
        ),
      ),
    ).then((reads) => {
      const read = new Map(reads.filter((record): record is LeaseRecord => record !== null && record.owner === workerId && record.incarnation === known.incarnation).map((record) => [record.leaseKey, record]));
      known.leases = known.leases.flatMap((lease) => (!known.dealt.has(lease.leaseKey) ? [lease] : read.has(lease.leaseKey) ? [read.get(lease.leaseKey) as LeaseRecord] : []));
      known.dealt.clear();
      known.reading = null;
    });
    return known.reading;
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
