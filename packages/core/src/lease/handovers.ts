/**
 * Leases moving between live members (DESIGN section 4, "Taking, on a listing", steps 4 and 5, "Announcing"
 * and "Releasing"): the steal requests this worker makes and follows, the requests and offers it answers by
 * draining a lease and writing it to its new owner, the leases the change feed announced handed to it, and
 * a stopping worker's handovers and releases. Who should give and receive is decided in taking (and its
 * pure plan in balance.ts); this module carries the moves out, and gives back through {@link HandoversHost}
 * what taking knows (the fair floor and this worker's share) and the coordinator's state.
 */
import { shuffled } from '../clock.js';
import { limits } from '../validation.js';
import { Checkpoint, RECORD_FORMAT, type LeaseRecord, type LeaseUpdate, type WriteResult } from '../storage.js';
import { capOf } from './balance.js';
import type { LeaseParts } from './parts.js';
import type { LeaseCoordinatorEvents } from './events.js';
import type { DrainReason, HandoffTarget, Held, HeldLease } from './held.js';
import { LEAVING_FIELD } from './membership.js';
import { readByKey, type KeyRead } from './reads-by-key.js';
import { stateWithoutResume, withResume } from './resume-hint.js';

/** The state core writes: every write drops a resume hint (it is for one tenure's first read only); a handover adds its own. */
const stateOf = stateWithoutResume;

/**
 * How many leases announced handed over a worker reads at once (a take tick waits for them): 16, as many
 * as the leader's creates, so that a few hundred announced between two ticks cost a few round trips.
 */
export const ANNOUNCED_READS_IN_FLIGHT = 16;

/**
 * How many leases announced handed to this worker by name it reads by key, `ANNOUNCED_READS_IN_FLIGHT` at
 * a time, before it lists instead: 128, eight rounds of reads. A lease announced by name is this worker's
 * to hold, so each read finds one; a listing reads the whole group to find them (10,000 leases at 100
 * workers). A mass crash deals a few dozen to each survivor (25 of 100 workers: 2,500 leases to 75, most
 * in a lease duration), more than one round of reads between two ticks.
 */
export const NAMED_READS_MAX = 128;

/** What handovers need back from the coordinator that owns them, and from taking. */
export interface HandoversHost {
  state(): 'new' | 'running' | 'stopping' | 'stopped';
  /** Aborts when the coordinator stops: a handover waiting out a timed-out drain goes with it. */
  readonly lifetime: AbortSignal;
  /** Lists the leases at the next take tick. */
  listingDue(): void;
  /** Sends a heartbeat now: the member record carries the requests and the count of leases held. */
  wakeRenew(): void;
  /** Announces a release user code asked for to the group. */
  noteLeasesChanged(): void;
  /** Writes free leases naming this incarnation that it will not hold. */
  giveBack(leases: readonly LeaseRecord[]): Promise<void>;
  /** The smallest fair share of the last listing: an owner never hands over below it. */
  fairFloor(): number;
  /** This worker's share at the last listing. */
  lastTarget(): number;
  /** Whether this worker waits for a cold start's deal (`ColdDealer`): it reads every lease the feed names it for, by key. */
  awaitsColdDeal(): boolean;
  emit<K extends keyof LeaseCoordinatorEvents>(name: K, event: LeaseCoordinatorEvents[K]): void;
  report(error: unknown, operation: string): void;
}

export interface HandoversOptions extends LeaseParts {
  readonly renewIntervalMs: number;
  readonly handoffTimeoutMs: number;
  readonly onDrain: ((lease: HeldLease, reason: DrainReason) => Promise<void>) | undefined;
  /** Unsafe: a release that conflicts with another client's same-tenure write (a rewind request) is taken for a loss. */
  readonly releaseWithoutRetry: boolean;
  /** Unsafe: a stopping worker's handover that leaves the lease its own is given up, the lease left to lapse. */
  readonly stopHandoverKeeps: boolean;
  /** Unsafe: a handover is written to its recipient even when its record says it is leaving. */
  readonly handoverToLeaving: boolean;
  readonly host: HandoversHost;
}

/** The requests this worker made and answers, and the handovers and releases it carries out. */
export class Handovers {
  readonly #renewIntervalMs: number;
  readonly #handoffTimeoutMs: number;
  readonly #onDrain: ((lease: HeldLease, reason: DrainReason) => Promise<void>) | undefined;
  /** The group, the store, the clock, the limits and the parts built before this one, as the coordinator gave them. */
  readonly #parts: LeaseParts;
  readonly #held: ReadonlyMap<string, Held>;
  readonly #letGo: Map<string, number>;
  readonly #releaseWithoutRetry: boolean;
  readonly #stopHandoverKeeps: boolean;
  readonly #handoverToLeaving: boolean;
  readonly #host: HandoversHost;
  /** Leases this worker asked for, by key: whom it asked, and when. */
  readonly requests = new Map<string, { from: string; at: number }>();
  /**
   * Leases this worker handed over, watched until their new owner has surely seen them: if it dies first,
   * the lease names a dead incarnation that nobody announced, and a listing finds it free.
   */
  readonly handed = new Map<string, { to: string; incarnation: string; epoch: number; until: number }>();
  /** Requests withdrawn whose leases are still watched, in case the owner's answer was already under way. */
  readonly watching = new Map<string, { from: string; at: number }>();
  /**
   * Leases the change feed announced handed over unasked, to this worker or to an owner it does not name:
   * read at the next tick, and held when handed to this worker.
   */
  readonly announced = new Set<string>();
  /** Those of {@link announced} whose change named this worker as the new owner (not only none). */
  readonly announcedByName = new Set<string>();
  /** Handovers waiting out a drain that timed out. */
  readonly transfers = new Set<Promise<void>>();
  /** Releases under way (their work stopped, their writes not yet answered): stop() waits for them. */
  readonly releasing = new Set<Promise<void>>();
  /** Handovers to a member that asked or was offered a lease, under way (draining, or their write not yet answered): stop() waits for them. */
  readonly handingOff = new Set<Promise<void>>();
  /**
   * Leases this worker wrote free, or began to: a stop's leave names its handovers as all it had only when
   * it wrote none free meanwhile (nobody would hear of those but by a listing).
   */
  freeWrites = 0;

  constructor(options: HandoversOptions) {
    this.#renewIntervalMs = options.renewIntervalMs;
    this.#handoffTimeoutMs = options.handoffTimeoutMs;
    this.#onDrain = options.onDrain;
    this.#parts = options;
    this.#held = options.hold.leases;
    this.#letGo = options.hold.letGo;
    this.#releaseWithoutRetry = options.releaseWithoutRetry;
    this.#stopHandoverKeeps = options.stopHandoverKeeps;
    this.#handoverToLeaving = options.handoverToLeaving;
    this.#host = options.host;
  }

  /** Drops every request and every lease watched: this worker was expelled, and asks as a new incarnation. */
  dropRequests(): void {
    this.requests.clear();
    this.watching.clear();
  }

  /**
   * A stopping worker asks for nothing more: a lease handed to it after it asked is written free, so that
   * nobody waits a lease duration for it. Its requests go with its membership when it leaves.
   */
  async withdraw(): Promise<void> {
    const asked = [...this.requests.keys(), ...this.watching.keys()];
    this.requests.clear();
    this.watching.clear();
    const current = this.#parts.members.current;
    const incarnation = current?.record ? current.incarnation : null;
    if (asked.length === 0 || incarnation === null) return;
    const updates: LeaseUpdate[] = [];
    for (const leaseKey of asked) {
      let lease: LeaseRecord | null;
      try {
        lease = await this.#parts.storage.getLease(this.#parts.group, leaseKey);
      } catch (error) {
        this.#host.report(error, 'get');
        continue;
      }
      if (lease && lease.format <= RECORD_FORMAT && lease.owner === this.#parts.workerId && lease.incarnation === incarnation && !this.#held.has(leaseKey)) {
        updates.push({ leaseKey, expectedVersion: lease.version, next: { ...stateOf(lease), owner: null, incarnation: null }, notify: 'released' });
      }
    }
    this.freeWrites += updates.length;
    if (updates.length > 0) await this.#parts.writes.update(updates, 'withdraw');
  }

  /**
   * A stopping worker's drained leases: each is handed straight to a live member that is not leaving, the
   * least loaded by the roster's counts (then by worker id) with room under its cap, in one conditional
   * write per lease (as a rebalance hands one over: the recipient's incarnation, epoch + 1), so that the
   * recipient holds it without taking it; the change feed tells it at once, and the leave names it
   * (`Membership.leave`). With no such member, or when a handover does not apply, the lease is written free
   * as before. Returns the leases handed, by recipient, and whether that is every lease of `leaseKeys`.
   */
  async handOverOrRelease(leaseKeys: readonly string[]): Promise<{ handed: Map<string, string[]>; complete: boolean }> {
    const before = new Map(this.handed);
    const load = new Map<string, number>();
    for (const member of this.#parts.view.values()) {
      if (member.workerId === this.#parts.workerId || member.status !== 'alive' || member.metadata[LEAVING_FIELD] !== undefined) continue;
      if (this.#parts.view.isCorrupt(member.workerId)) continue;
      load.set(member.workerId, member.held);
    }
    const free: string[] = [];
    const handovers: Promise<void>[] = [];
    for (const leaseKey of leaseKeys) {
      const held = this.#held.get(leaseKey);
      if (!held || !this.#parts.hold.isHeld(leaseKey)) continue;
      let to: string | undefined;
      for (const [workerId, count] of load) {
        if (count >= capOf(this.#parts.view.get(workerId))) continue;
        if (to === undefined || count < load.get(to)! || (count === load.get(to)! && workerId < to)) to = workerId;
      }
      const recipient = to === undefined ? undefined : this.#parts.view.get(to);
      if (recipient === undefined) {
        free.push(leaseKey);
        continue;
      }
      load.set(recipient.workerId, (load.get(recipient.workerId) ?? 0) + 1);
      this.#parts.hold.stopWork(leaseKey, held);
      handovers.push(
        this.#parts.writes
          .onLease(held, async () => {
            if (this.#held.get(leaseKey) !== held) return false;
            const to = { to: recipient.workerId, incarnation: recipient.incarnation, seenAt: this.#parts.clock.now() };
            return this.#transfer(leaseKey, held, to, true, !this.#stopHandoverKeeps);
          })
          // A handover that left the lease this worker's, as it was (the recipient left, or other clients'
          // writes kept moving its version), is written free instead: a stopping worker lists no more.
          .then((kept) => (kept ? this.#freeing([[leaseKey, held]]) : undefined))
          .catch((error: unknown) => this.#host.report(error, 'handoff')),
      );
    }
    await Promise.all([...handovers, this.release(free, false)]);
    const handed = new Map<string, string[]>();
    let count = 0;
    for (const leaseKey of leaseKeys) {
      const entry = this.handed.get(leaseKey);
      if (entry === undefined || entry === before.get(leaseKey)) continue;
      handed.set(entry.to, [...(handed.get(entry.to) ?? []), leaseKey]);
      count++;
    }
    return { handed, complete: count === leaseKeys.length };
  }

  /**
   * Hands a lease to the member that asked for it: drains it, then writes the new owner and its
   * incarnation in one conditional write. A drain that does not finish in time stops the work anyway; the
   * lease is then written over a lease duration later, the time a lapse would have taken.
   */
  handOff(leaseKey: string, held: Held): Promise<void> {
    const handover = this.#handOff(leaseKey, held).finally(() => this.handingOff.delete(handover));
    this.handingOff.add(handover);
    return handover;
  }

  async #handOff(leaseKey: string, held: Held): Promise<void> {
    const request = held.handoff;
    if (!request) return;
    const drained = await this.drain(leaseKey, held, 'handoff', this.#handoffTimeoutMs);
    if (this.#held.get(leaseKey) !== held) return;
    if (!drained) {
      this.#parts.hold.lose(leaseKey, held, 'handoff-timeout');
      const transfer = this.#parts.clock
        .sleep(this.#parts.leaseDurationMs, this.#host.lifetime)
        .then(async () => {
          await this.#transfer(leaseKey, held, request, false);
        })
        .catch(() => undefined)
        .finally(() => this.transfers.delete(transfer));
      this.transfers.add(transfer);
      return;
    }
    await this.#parts.writes.onLease(held, async () => {
      if (this.#held.get(leaseKey) !== held || !this.#parts.hold.isHeld(leaseKey)) return;
      this.#parts.hold.stopWork(leaseKey, held);
      await this.#transfer(leaseKey, held, request, true);
    }).catch((error: unknown) => this.#host.report(error, 'handoff'));
  }

  /**
   * Writes the lease to its recipient, if it is still the live incarnation that was chosen. With
   * `orFree` (a stopping worker's handover), a handover that leaves the lease this worker's as it was is
   * not given up: it returns `true`, the lease still held, for the caller to write it free.
   */
  async #transfer(leaseKey: string, held: Held, request: HandoffTarget, report: boolean, orFree = false): Promise<boolean> {
    const recipient = this.#parts.view.get(request.to);
    // A recipient that began to stop since it was chosen (its record now says it is leaving) takes nothing
    // more: it asked before its stop, or was chosen from a roster read before it, and a lease written to it
    // after its stop withdrew its requests would name a member gone, with nobody to hear of it but a listing.
    const gone =
      recipient?.status !== 'alive' ||
      recipient.incarnation !== request.incarnation ||
      (!this.#handoverToLeaving && recipient.metadata[LEAVING_FIELD] !== undefined);
    if (orFree && gone) return true;
    if (gone) {
      // It left, died or began to leave meanwhile: the lease stays this worker's in storage, and the next
      // listing takes it back.
      this.#parts.hold.forget(leaseKey, held);
      this.#host.listingDue();
      if (report) this.#host.emit('lost', { leaseKey, fencingToken: held.record.epoch, reason: 'handoff-timeout' });
      return false;
    }
    let record = held.record;
    let outcome: WriteResult<LeaseRecord> | undefined;
    for (let attempt = 0; attempt < 2; attempt++) {
      [outcome] = await this.#parts.writes.update(
        [
          {
            leaseKey,
            expectedVersion: record.version,
            // The reader's position token goes with the lease, bound to the tenure this write starts: the
            // recipient uses it only at the checkpoint it carries (DESIGN section 4, "Releasing").
            next: withResume({ ...stateOf(record), owner: request.to, incarnation: request.incarnation, epoch: record.epoch + 1 }, held.resume, this.#parts.clock.now()),
            notify: 'handed-off',
          },
        ],
        'handoff',
      );
      // A write of ours that finished after the work stopped (a checkpoint) moved the version: go on from it.
      if (outcome?.status !== 'conflict' || !this.#parts.hold.stillMine(held, outcome.current)) break;
      record = outcome.current;
    }
    if (orFree && outcome?.status === 'conflict' && this.#parts.hold.stillMine(held, outcome.current)) {
      held.record = outcome.current;
      return true;
    }
    this.#parts.hold.forget(leaseKey, held);
    // A lease still naming this incarnation is nobody else's to take: the next listing takes it back.
    if (outcome?.status !== 'applied') this.#host.listingDue();
    if (outcome?.status === 'applied') {
      // The members balance on each other's counts: publish the new one now, not a heartbeat later.
      this.#host.wakeRenew();
      this.handed.set(leaseKey, { to: request.to, incarnation: request.incarnation, epoch: outcome.record.epoch, until: this.#parts.clock.now() + this.#parts.leaseDurationMs * 3 });
    }
    if (!report) return false;
    if (outcome?.status === 'applied') this.#host.emit('handed-off', { leaseKey, to: request.to, durationMs: this.#parts.clock.now() - request.seenAt });
    else this.#host.emit('lost', { leaseKey, fencingToken: held.record.epoch, reason: 'handoff-timeout' });
    return false;
  }

  /** Runs `onDrain`, bounded by `timeoutMs`; true when it finished in time and the lease is still held. */
  async drain(leaseKey: string, held: Held, reason: DrainReason, timeoutMs: number): Promise<boolean> {
    if (!this.#onDrain) return this.#parts.hold.isHeld(leaseKey);
    const timer = new AbortController();
    try {
      const finished = await Promise.race([
        this.#onDrain(this.#parts.hold.handle(held), reason).then(
          () => true,
          (error: unknown) => {
            this.#host.report(error, 'drain');
            return true;
          },
        ),
        this.#parts.clock.sleep(timeoutMs, timer.signal).then(() => false, () => false),
      ]);
      return finished && this.#held.get(leaseKey) === held && this.#parts.hold.isHeld(leaseKey);
    } finally {
      timer.abort();
    }
  }

  /** Stops the work on the leases and writes them free; `announce` tells the group, for a release user code asked for. */
  async release(leaseKeys: readonly string[], announce: boolean): Promise<void> {
    const leaving = leaseKeys
      .map((leaseKey) => [leaseKey, this.#held.get(leaseKey)] as const)
      .filter((entry): entry is readonly [string, Held] => entry[1] !== undefined && this.#parts.hold.isHeld(entry[0]));
    if (leaving.length === 0) return;
    // Work stops first (signals fire, no new checkpoint is accepted), then the writes in flight finish.
    for (const [leaseKey, held] of leaving) this.#parts.hold.stopWork(leaseKey, held);
    await this.#freeing(leaving, announce);
  }

  /** Writes free leases whose work stopped, counted among the releases under way while it does. */
  async #freeing(leaving: ReadonlyArray<readonly [string, Held]>, announce = false): Promise<void> {
    const writing = this.#writeFree(leaving, announce);
    this.releasing.add(writing);
    try {
      await writing;
    } finally {
      this.releasing.delete(writing);
    }
  }

  /** Writes free the leases whose work `release` stopped, once their writes in flight finished. */
  async #writeFree(leaving: ReadonlyArray<readonly [string, Held]>, announce: boolean): Promise<void> {
    this.freeWrites += leaving.length;
    await this.#parts.writes.onLeases(leaving.map(([, held]) => held), async () => {
      let released = 0;
      let pending: ReadonlyArray<readonly [string, Held]> = leaving;
      for (let attempt = 1; pending.length > 0; attempt++) {
        const results = await this.#parts.writes.update(
          pending.map(([leaseKey, held]) => ({
            leaseKey,
            expectedVersion: held.record.version,
            next: { ...stateOf(held.record), owner: null, incarnation: null },
            notify: 'released' as const,
          })),
          'release',
        );
        const again: Array<readonly [string, Held]> = [];
        pending.forEach(([leaseKey, held], i) => {
          const outcome = results[i];
          // Another client's write that left the lease ours in the same tenure (an operator's rewind request
          // added to its metadata) moved its version: release the record it carries, within the hold.
          const retry =
            outcome?.status === 'conflict' &&
            this.#parts.hold.stillMine(held, outcome.current) &&
            attempt < 3 &&
            !this.#releaseWithoutRetry &&
            (this.#parts.skipSelfFencing || this.#parts.clock.now() < this.#parts.members.heldUntil);
          if (retry) {
            held.record = outcome.current;
            again.push([leaseKey, held]);
            return;
          }
          this.#parts.hold.forget(leaseKey, held);
          if (outcome?.status === 'applied') {
            released++;
            this.#host.emit('released', { leaseKey });
          } else {
            this.#host.listingDue();
            this.#host.emit('lost', { leaseKey, fencingToken: held.record.epoch, reason: 'taken' });
          }
        });
        pending = again;
      }
      if (announce && released > 0) this.#host.noteLeasesChanged();
    });
  }

  /** Answers other members' requests for leases this worker holds, while it holds two or more above them. */
  answerRequests(now: number): void {
    if (this.#host.state() !== 'running') return;
    let mine = [...this.#held.values()].filter((held) => !held.leaving && !held.handoff).length;
    const giving = new Map<string, number>();
    for (const held of this.#held.values()) if (held.handoff) giving.set(held.handoff.to, (giving.get(held.handoff.to) ?? 0) + 1);
    for (const member of this.#parts.view.values()) {
      if (member.status !== 'alive' || member.workerId === this.#parts.workerId) continue;
      // Not a member leaving: it takes nothing more, and its record carries its requests until it leaves
      // (what is handed to it after it asked, it can only write free, or leave for a listing to find).
      if (member.metadata[LEAVING_FIELD] !== undefined) continue;
      for (const request of member.requests) {
        if (request.from !== this.#parts.workerId) continue;
        const held = this.#held.get(request.leaseKey);
        if (!held || held.leaving || held.handoff || !this.#parts.hold.isHeld(request.leaseKey)) continue;
        const theirs = member.held + (giving.get(member.workerId) ?? 0);
        // Never below the smallest fair share of the last listing: several thieves answered at once
        // would otherwise leave this worker the one short of leases.
        if (mine < theirs + 2 || mine - 1 < this.#host.fairFloor()) continue;
        held.handoff = { to: member.workerId, incarnation: member.incarnation, seenAt: now };
        giving.set(member.workerId, (giving.get(member.workerId) ?? 0) + 1);
        mine--;
        this.#host.emit('handoff-requested', { leaseKey: request.leaseKey, to: member.workerId });
        void this.handOff(request.leaseKey, held);
      }
    }
  }

  /**
   * Looks up the leases this worker asked for: one handed to it is held from now, without a write. A
   * request the owner will not answer is withdrawn from the member record, but its lease is still watched
   * until an answer already under way could have landed: an owner may have begun the handover before it
   * saw the request withdrawn.
   */
  async followRequests(now: number): Promise<void> {
    if (this.requests.size === 0 && this.watching.size === 0) return;
    const membership = this.#parts.members.current;
    if (!membership?.record) return;
    // How long an answer can take: seen at the owner's next tick, drained, handed over (a lease duration
    // later if the drain timed out).
    const answerableMs = this.#handoffTimeoutMs + this.#parts.leaseDurationMs + this.#renewIntervalMs + 2 * this.#parts.takeIntervalMs;
    let changed = false;
    const entries = [...this.requests].map(([leaseKey, request]) => ({ leaseKey, request, open: true }))
      .concat([...this.watching].map(([leaseKey, request]) => ({ leaseKey, request, open: false })));
    for (const { leaseKey, request, open } of entries) {
      let lease: LeaseRecord | null;
      try {
        lease = await this.#parts.storage.getLease(this.#parts.group, leaseKey);
      } catch (error) {
        this.#host.report(error, 'get');
        continue;
      }
      if (this.#host.state() !== 'running' || this.#parts.members.current !== membership) return;
      const expired = now - request.at > answerableMs;
      if (lease && lease.owner === this.#parts.workerId && lease.incarnation === membership.incarnation && lease.format <= RECORD_FORMAT) {
        this.requests.delete(leaseKey);
        this.watching.delete(leaseKey);
        changed = true;
        if (this.#held.has(leaseKey)) continue;
        // Not an answer: a tenure this worker held and let go (it took the lease itself meanwhile, and
        // finished or lost it; a read that left before that may arrive after), or a finished lease. The
        // listings decide, as for a handover the change feed announced.
        if (lease.checkpoint === Checkpoint.SHARD_END || this.#letGo.get(leaseKey) === lease.epoch) {
          this.#host.listingDue();
          continue;
        }
        // Handed more than this worker may hold (an offer and an answer crossed): the rest goes back.
        if (this.#parts.hold.countHeld() >= this.#parts.maxLeases) await this.#host.giveBack([lease]);
        else this.#parts.hold.add(lease, 'handoff', this.#parts.clock.now());
      } else if (!lease || lease.owner !== request.from || expired) {
        this.requests.delete(leaseKey);
        this.watching.delete(leaseKey);
        changed ||= open;
        // Whatever became of it, the next listing shows it (and takes back one that names this worker).
        this.#host.listingDue();
      } else if (open && !this.#stillWorthAsking(request.from)) {
        this.requests.delete(leaseKey);
        this.watching.set(leaseKey, request);
        changed = true;
      }
    }
    if (changed) this.#host.wakeRenew();
  }

  /**
   * Reads the leases the change feed announced handed over unasked: one handed to this worker, in a tenure
   * it never held, is held from now without a write, as a listing would find and hold it. Anything else
   * (another member's, or one of a tenure this worker held and lost, which it takes back in a new tenure)
   * is left to the listings. Every worker hears every handover of the group, but only those announced to
   * it are here: ones whose change names it as the new owner, or names no owner (an adapter or an earlier
   * release that does not give it). The take tick waits for these reads before it lists and takes (the
   * next tick, which declares the dead, after it): they go `ANNOUNCED_READS_IN_FLIGHT` at once. When more
   * naming no owner were announced, or more than `NAMED_READS_MAX` naming this worker, the tick lists
   * instead, so that a rebalance announcing hundreds of handovers between two ticks makes the tick late by
   * a few round trips, not by one per handover.
   */
  async followAnnounced(): Promise<void> {
    if (this.announced.size === 0) return;
    const membership = this.#parts.members.current;
    const unheld = [...this.announced].filter((leaseKey) => !this.#held.has(leaseKey));
    let named = unheld.filter((leaseKey) => this.announcedByName.has(leaseKey));
    let unnamed = unheld.filter((leaseKey) => !this.announcedByName.has(leaseKey));
    this.announced.clear();
    this.announcedByName.clear();
    if (!membership?.record) return;
    // More announced to no one in particular than one round of reads (a rebalance, or a member stopping
    // with many leases, on an adapter whose feed names no owner): none of them is read. Leases go unasked
    // only to members below their share, so those list (one round trip finds every lease handed to them);
    // a stopping member's leases go to anyone, and its leave moves the roster digest, which brings
    // everyone's listing. At 100 workers, every worker reading every handover of a rebalance queued
    // heartbeats behind thousands of reads on a shared pool or pipeline, and every worker listing instead
    // did the same with listings: both lost leases to self-fencing.
    if (unnamed.length > ANNOUNCED_READS_IN_FLIGHT) {
      if (this.#parts.hold.countHeld() < this.#host.lastTarget()) this.#host.listingDue();
      unnamed = [];
    }
    // Leases announced by name are this worker's whatever its share (a declarer's deal of a dead member's
    // leases gives members above it too), each read finding one: read by key up to `NAMED_READS_MAX`,
    // listed for beyond (DESIGN section 4, "Why the declarer deals").
    if (named.length > NAMED_READS_MAX && !this.#host.awaitsColdDeal()) {
      this.#host.listingDue();
      named = [];
    }
    const keys = [...named, ...unnamed].filter((leaseKey) => !this.#held.has(leaseKey));
    if (keys.length === 0) return;
    // With the store's getLeases, up to 100 keys a call (`readByKey`).
    const reads = readByKey(this.#parts.storage, this.#parts.group, keys, ANNOUNCED_READS_IN_FLIGHT);
    for (const [i, leaseKey] of keys.entries()) {
      const read = (await reads[i]) as KeyRead;
      if (this.#held.has(leaseKey)) continue;
      if ('error' in read) {
        this.#host.report(read.error, 'get');
        this.#host.listingDue();
        continue;
      }
      if (this.#host.state() !== 'running' || this.#parts.members.current !== membership) return;
      const { lease } = read;
      if (!lease || lease.format > RECORD_FORMAT || lease.owner !== this.#parts.workerId || lease.incarnation !== membership.incarnation || this.#held.has(leaseKey)) continue;
      if (lease.checkpoint === Checkpoint.SHARD_END || this.#letGo.get(leaseKey) === lease.epoch || lease.epoch < (this.handed.get(leaseKey)?.epoch ?? -Infinity)) {
        this.#host.listingDue();
        continue;
      }
      // Handed more than this worker may hold (an offer and an answer crossed): the rest goes back.
      if (this.#parts.hold.countHeld() >= this.#parts.maxLeases) await this.#host.giveBack([lease]);
      else if (this.#parts.hold.add(lease, 'handoff', this.#parts.clock.now())) this.#host.wakeRenew();
    }
  }

  /**
   * Whether the member asked is, by its own latest count, still two or more above this worker: otherwise
   * it will not answer (it judges by the same counts), and waiting for it would hold back other requests.
   */
  #stillWorthAsking(from: string): boolean {
    const member = this.#parts.view.get(from);
    if (!member || member.status !== 'alive') return false;
    const mine = this.#parts.hold.countHeld();
    return member.held >= mine + 2 && member.held - 1 >= this.#host.fairFloor();
  }

  /**
   * Balances by cooperative handoff: asks the members due to hand this worker leases (`givers`, by the
   * plan every worker computes), then the most loaded members (above this one by two or more, so that
   * nobody ends below the thief), to hand over one lease each, up to `maxStealsPerTick`. The requests
   * travel in this worker's member record, written at once.
   */
  requestHandoffs(
    workable: readonly LeaseRecord[],
    counts: Map<string, number>,
    ownerOf: (lease: LeaseRecord) => string | null,
    mine: number,
    wanted: number,
    now: number,
    givers: Map<string, number>,
  ): void {
    let have = mine;
    let asked = 0;
    const room = limits.maxRequests - this.requests.size;
    for (let steals = 0; steals < Math.min(wanted, this.#parts.maxSteals, room); steals++) {
      let victim: string | null = null;
      for (const [workerId, count] of counts) {
        if (workerId === this.#parts.workerId || count < have + 2 || count - 1 < this.#host.fairFloor()) continue;
        // A member that by its own latest count is not two above would not answer (it judges by that count).
        if ((this.#parts.view.get(workerId)?.held ?? 0) < have + 2) continue;
        // The members due to hand leases to this worker are asked first, the most loaded of them.
        const due = (givers.get(workerId) ?? 0) > 0;
        const victimDue = victim !== null && (givers.get(victim) ?? 0) > 0;
        if (victim === null || (due && !victimDue) || (due === victimDue && count > (counts.get(victim) ?? 0))) victim = workerId;
      }
      if (victim !== null && (givers.get(victim) ?? 0) > 0) givers.set(victim, (givers.get(victim) ?? 0) - 1);
      if (victim === null) break;
      const chosen = shuffled(
        workable.filter((lease) => ownerOf(lease) === victim && !this.requests.has(lease.leaseKey) && !this.watching.has(lease.leaseKey)),
        this.#parts.random,
      )[0];
      if (!chosen) break;
      this.requests.set(chosen.leaseKey, { from: victim, at: now });
      counts.set(victim, (counts.get(victim) ?? 0) - 1);
      have++;
      asked++;
      this.#host.emit('steal-requested', { leaseKey: chosen.leaseKey, from: victim });
    }
    if (asked > 0) this.#host.wakeRenew();
  }
}
