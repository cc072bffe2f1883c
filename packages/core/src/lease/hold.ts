/**
 * The leases this worker holds, and the self-fencing that drops them (DESIGN section 4, "Self-fencing"): a
 * lease counts as held only while the last successful heartbeat's hold lasts, and a watchdog at the hold's
 * end (and every look at a lease's signal past it) drops them all, whether or not anybody answered. It also
 * keeps the tenures this incarnation let go, so that a lease storage still names it for is taken back in a
 * new tenure rather than held as it is. The coordinator owns one; taking, handovers and the fenced writes
 * add, give up and lose leases through it, and it asks back through {@link HoldHost} only for the
 * coordinator's state, a listing and its events.
 */
import type { Clock } from '../clock.js';
import { AbortedError, describeValue, LeaseLostError } from '../errors.js';
import { REWIND_FIELDS } from '../rewind.js';
import type { LeaseRecord } from '../storage.js';
import type { LeaseCoordinatorEvents, LossReason } from './events.js';
import type { Held, HeldLease } from './held.js';
import type { Membership } from './membership.js';

const PKG = 'core';

/** What the hold needs back from the coordinator that owns it. */
export interface HoldHost {
  /** The coordinator's state: nothing is held once stopped, and every lease drains while stopping. */
  state(): 'new' | 'running' | 'stopping' | 'stopped';
  /** Lists the leases at the next take tick: a lease lost may still name this worker in storage. */
  listingDue(): void;
  emit<K extends keyof LeaseCoordinatorEvents>(name: K, event: LeaseCoordinatorEvents[K]): void;
}

export interface HoldOptions {
  readonly workerId: string;
  readonly clock: Clock;
  /** The member record whose heartbeats buy the hold. */
  readonly members: Membership;
  /** Unsafe: leases are held whatever the hold says. */
  readonly skipSelfFencing: boolean;
  /** Unsafe: a newer record of a held lease that carries an operator's rewind request is adopted without a word to the owner's runtime. */
  readonly adoptedRequestIgnored?: boolean;
  readonly host: HoldHost;
}

/** The held leases by key, the tenures let go, and the watchdog at the hold's end. */
export class Hold {
  readonly #workerId: string;
  readonly #clock: Clock;
  readonly #members: Membership;
  readonly #skipSelfFencing: boolean;
  readonly #adoptedRequestIgnored: boolean;
  readonly #host: HoldHost;
  readonly #held = new Map<string, Held>();
  /**
   * The tenure (epoch) in which this incarnation last held each lease it let go. A lease storage still
   * names this incarnation for in that tenure (lost to self-fencing, a handover that did not land) is
   * taken back in a new tenure, so that work of the old one cannot write into it; one in a tenure this
   * worker never held was handed to it, and is held as it is.
   */
  readonly #letGo = new Map<string, number>();
  #watchdog: { at: number; controller: AbortController } | null = null;

  constructor(options: HoldOptions) {
    this.#workerId = options.workerId;
    this.#clock = options.clock;
    this.#members = options.members;
    this.#skipSelfFencing = options.skipSelfFencing;
    this.#adoptedRequestIgnored = options.adoptedRequestIgnored ?? false;
    this.#host = options.host;
  }

  /** Every lease this worker took and has not let go, given away or not; only the hold changes it. */
  get leases(): ReadonlyMap<string, Held> {
    return this.#held;
  }

  /** The tenures let go, by lease key; a listing drops those storage no longer shows as this worker's. */
  get letGo(): Map<string, number> {
    return this.#letGo;
  }

  /** Whether this worker holds the lease now: it took it, its last heartbeat still holds, and it has not given it away. */
  isHeld(leaseKey: string): boolean {
    const held = this.#held.get(leaseKey);
    return held !== undefined && !held.leaving && (this.#skipSelfFencing || this.#clock.now() < this.#members.heldUntil);
  }

  /** Stops the watchdog: the coordinator stopped. */
  disarm(): void {
    this.#watchdog?.controller.abort();
    this.#watchdog = null;
  }

  /**
   * Makes the lease's signal judge the hold itself whenever it is looked at. The watchdog timer fires at
   * the hold's end, but a process that was paused past it may run user code (an I/O completion, an earlier
   * timer) before that timer: reading `signal.aborted`, `signal.reason` or `signal.throwIfAborted()` then
   * fences the lease first, so user code never sees a lease as held past its hold.
   */
  #guardSignal(leaseKey: string, held: Held): void {
    const signal = held.controller.signal;
    const proto = AbortSignal.prototype;
    // The prototype's getters, read with this signal as the receiver (the own properties below shadow them).
    const aborted = (): boolean => Reflect.get<AbortSignal, 'aborted'>(proto, 'aborted', signal);
    const reason = (): unknown => Reflect.get(proto, 'reason', signal);
    const check = (): void => {
      if (aborted() || held.leaving || this.#skipSelfFencing || this.#held.get(leaseKey) !== held) return;
      if (this.#clock.now() >= this.#members.heldUntil) this.lose(leaseKey, held, 'self-fenced');
    };
    Object.defineProperties(signal, {
      aborted: { configurable: true, get: () => (check(), aborted()) },
      reason: { configurable: true, get: (): unknown => (check(), reason()) },
      throwIfAborted: {
        configurable: true,
        value: () => {
          check();
          if (aborted()) throw reason();
        },
      },
    });
  }

  /** Drops every lease once the hold has passed: past it, this worker must not act on them, answered or not. */
  fenceExpired(): void {
    if (this.#skipSelfFencing) return;
    if (this.#clock.now() < this.#members.heldUntil) return;
    for (const [leaseKey, held] of this.#held) {
      if (held.leaving) continue;
      this.lose(leaseKey, held, 'self-fenced');
      // Storage still names this incarnation: once a heartbeat holds again, the next listing takes it back.
      this.#host.listingDue();
    }
  }

  /** Keeps one timer at the hold's end while anything is held; heartbeats only push it later. */
  armWatchdog(): void {
    if (this.#skipSelfFencing || this.#host.state() === 'stopped' || ![...this.#held.values()].some((held) => !held.leaving)) return;
    const at = this.#members.heldUntil;
    if (this.#watchdog !== null && this.#watchdog.at <= at) return;
    this.#watchdog?.controller.abort();
    const watchdog = { at, controller: new AbortController() };
    this.#watchdog = watchdog;
    this.#clock.sleep(Math.max(0, at - this.#clock.now()), watchdog.controller.signal).then(
      () => {
        if (this.#watchdog !== watchdog) return;
        this.#watchdog = null;
        this.fenceExpired();
        this.armWatchdog();
      },
      () => undefined,
    );
  }

  /**
   * Counts a lease naming this worker's incarnation as held, if the membership it was written under still
   * holds (its last heartbeat's hold has not run out); otherwise it is taken again at a later listing.
   */
  add(record: LeaseRecord, how: 'free' | 'expired' | 'handoff', sentAt: number): boolean {
    const membership = this.#members.current;
    if (this.#host.state() === 'stopped' || !membership || record.incarnation !== membership.incarnation) return false;
    if (!this.#skipSelfFencing && (this.#clock.now() >= this.#members.heldUntil || sentAt >= this.#members.heldUntil)) {
      this.#host.listingDue();
      return false;
    }
    const held: Held = { record, controller: new AbortController(), handoff: null, leaving: false, chain: Promise.resolve(), busy: 0, readAt: sentAt, resume: null };
    this.#guardSignal(record.leaseKey, held);
    this.#held.set(record.leaseKey, held);
    this.#host.emit('acquired', { leaseKey: record.leaseKey, fencingToken: record.epoch, how, checkpoint: record.checkpoint });
    this.armWatchdog();
    return true;
  }

  /**
   * Takes `record`, a newer record of the same tenure, as the lease's: one that carries an operator's rewind
   * request the held record did not is announced (`rewind-requested`) as the change feed announces it. A
   * record the hold started from may be older than the request (a listing read before it was written, the
   * request's mark on the leader record seen before the lease was held), and without a change feed the
   * owner would otherwise not learn of it: the conflict its next write meets, or a later listing, brings it.
   */
  adopt(held: Held, record: LeaseRecord): void {
    const before = held.record.metadata[REWIND_FIELDS.request];
    held.record = record;
    const request = record.metadata[REWIND_FIELDS.request];
    if (request !== undefined && request !== before && !this.#adoptedRequestIgnored && this.#held.get(record.leaseKey) === held) {
      this.#host.emit('rewind-requested', { leaseKey: record.leaseKey });
    }
  }

  /** How many leases this worker holds and is not giving away. */
  countHeld(): number {
    let count = 0;
    for (const held of this.#held.values()) if (!held.leaving) count++;
    return count;
  }

  /** The error a write on a lease this worker does not hold fails with. */
  lostError(leaseKey: string): LeaseLostError {
    return new LeaseLostError(`[${PKG}] worker ${describeValue(this.#workerId)} does not hold lease ${describeValue(leaseKey)}`, leaseKey);
  }

  /** Stops user work on a lease this worker is about to give away. */
  stopWork(leaseKey: string, held: Held): void {
    held.leaving = true;
    held.controller.abort(new AbortedError(`[${PKG}] lease ${describeValue(leaseKey)} is being given away`));
  }

  /** Lets go of a lease given away (handed over or released): no loss to report. */
  forget(leaseKey: string, held: Held): void {
    if (this.#held.get(leaseKey) !== held) return;
    this.#held.delete(leaseKey);
    this.#letGo.set(leaseKey, held.record.epoch);
  }

  /**
   * This worker was expelled from the roster: whatever its hold says, others may own its leases now. It
   * drops every lease (its requests go first, with the handovers), and joins again as a new incarnation.
   */
  loseEverything(): void {
    for (const [leaseKey, held] of this.#held) this.lose(leaseKey, held, 'expelled');
    // Leases naming the old incarnation are not this worker's any more, whatever their tenure.
    this.#letGo.clear();
  }

  /** The lease is not this worker's any more: its work stops, and the next listing tells who has it. */
  lose(leaseKey: string, held: Held, reason: LossReason): void {
    if (this.#held.get(leaseKey) !== held) return;
    this.#held.delete(leaseKey);
    this.#letGo.set(leaseKey, held.record.epoch);
    held.leaving = true;
    held.controller.abort(this.lostError(leaseKey));
    // Whoever has it now (or nobody, if a write's outcome was lost), the next listing tells.
    this.#host.listingDue();
    this.#host.emit('lost', { leaseKey, fencingToken: held.record.epoch, reason });
  }

  /**
   * What a listing says of the leases held (`all`, the readable ones by key; `corrupt`, the keys that
   * cannot be read): one shown with another owner, incarnation or epoch, or not at all, is lost; a newer
   * record of the same tenure and incarnation is adopted.
   */
  noticeLosses(all: ReadonlyMap<string, LeaseRecord>, corrupt: ReadonlySet<string>, incarnation: string): void {
    for (const [leaseKey, held] of this.#held) {
      if (held.leaving || corrupt.has(leaseKey)) continue;
      const stored = all.get(leaseKey);
      if (stored === undefined) this.lose(leaseKey, held, 'deleted');
      else if (stored.version > held.record.version) {
        if (this.stillMine(held, stored) && stored.incarnation === incarnation) this.adopt(held, stored);
        else this.lose(leaseKey, held, 'taken');
      }
    }
  }

  /** Whether `current` is still the lease in the tenure and incarnation this worker holds it in. */
  stillMine(held: Held, current: LeaseRecord | null): current is LeaseRecord {
    return current !== null && current.owner === this.#workerId && current.epoch === held.record.epoch && current.incarnation === held.record.incarnation;
  }

  /** The lease as user code sees it. */
  handle(held: Held): HeldLease {
    const record = held.record;
    return {
      leaseKey: record.leaseKey,
      fencingToken: record.epoch,
      signal: held.controller.signal,
      checkpoint: record.checkpoint,
      parentKeys: record.parentKeys,
      metadata: record.metadata,
      draining: held.handoff !== null || this.#host.state() === 'stopping',
    };
  }
}
