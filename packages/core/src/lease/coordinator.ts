/**
 * The lease coordinator (DESIGN section 4): it starts and stops a worker's part in its group, runs the
 * heartbeat and take loops, and wires together the parts that do the work, each in a file of its own:
 * membership.ts (the member record and the roster's reads), hold.ts (the leases held and self-fencing),
 * fenced-writes.ts (checkpoints and every lease write), taking.ts (the take tick and who takes which
 * lease) and handovers.ts (steal requests, handovers and releases). The public surface (the class, its
 * options and events, and the types user code names) is exported from here.
 */
import { setMaxListeners } from 'node:events';
import { systemClock, systemRandom, type Clock, type Random } from '../clock.js';
import { AbortedError, describeValue, InvalidConfigError, LeaseholdError, RecordFormatError } from '../errors.js';
import { TypedEmitter } from '../events.js';
import { LEAVING_FIELD, Membership } from './membership.js';
import type { RosterView } from './roster-view.js';
import { compareNumericPositions } from '../position.js';
import { limits } from '../validation.js';
import { checkRosterMoves, checkWatcherReads } from '../watcher-reads.js';
import { checkContractVersion } from '../contract-version.js';
import { unsafeOf } from '../unsafe.js';
import { refuseUnknownOptions } from '../known-options.js';
import { RECORD_FORMAT, type CheckpointStorage, type LeaseChange, type LeaseRecord, type Position } from '../storage.js';
import { holdMs, nonNegative, positive, positiveInteger, resolveHoldTiming, resolveIdentity, TICK_JITTER } from './timing.js';
import { AddressedFeed, type Addressing } from './addressed-feed.js';
import { FencedWrites, type CheckpointWrite } from './fenced-writes.js';
import { Handovers } from './handovers.js';
import type { DrainReason, Held, HeldLease, LeaseTenure } from './held.js';
import { Hold } from './hold.js';
import { judgeResume, type ResumeOffer, type ResumeVerdict } from './resume-hint.js';
import { COORDINATOR_KEYS, type LeaseCoordinatorOptions } from './options.js';
import { parentsFinished, Taking, type EligibilityPredicate } from './taking.js';
import type { LeaseCoordinatorEvents, LossReason } from './events.js';

const PKG = 'core';

export type { CheckpointWrite, DrainReason, EligibilityPredicate, HeldLease, LeaseCoordinatorOptions, LeaseTenure };
export type { LeaseCoordinatorEvents, LossReason, ResumeOffer, ResumeVerdict };
export { parentsFinished };

/** Member metadata of a worker that is stopping; defined with the membership, still exported from here. */
export { LEAVING_FIELD };

/** The reason a loop's sleep ends early: one instance, since nobody reads it (the loop catches and goes on). */
const WOKEN = new AbortedError(`[${PKG}] woken early`);

function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}

/**
 * Shares the leases of one group among workers (DESIGN section 4). Liveness is per worker: each worker
 * heartbeats its member record in the group's roster, and holds every lease naming its incarnation for as
 * long as its last successful heartbeat allows. A member whose heartbeat stops is declared dead by a
 * conditional write, after which its leases are taken; leases change only when ownership or checkpoints
 * do. Balances by cooperative handoff requested through the roster, fences itself by its own clock, and
 * checkpoints only while it holds the lease. Usable on its own for any set of keys.
 */
export class LeaseCoordinator extends TypedEmitter<LeaseCoordinatorEvents> implements AsyncDisposable {
  /** This worker's id in the group: the owner written into the leases it holds. */
  readonly workerId: string;
  /** The group whose leases this coordinator shares. */
  readonly group: string;
  /** How long this worker's membership lasts without a heartbeat, as others observe it. */
  readonly leaseDurationMs: number;
  /** How often this worker heartbeats. */
  readonly renewIntervalMs: number;
  /** How often the roster is read. */
  readonly takeIntervalMs: number;
  /** How often the leases are listed when nothing signalled a change. */
  readonly listIntervalMs: number;
  /** How long after sending a successful heartbeat this worker counts its leases as held. */
  readonly holdMs: number;

  readonly #storage: CheckpointStorage;
  readonly #clock: Clock;
  readonly #random: Random;
  readonly #handoffTimeoutMs: number;
  readonly #useChangeFeed: boolean;
  /** How the feed's subscription is addressed: to the watched few, or (the unsafe switches) to this worker alone or to everyone. */
  readonly #addressing: Addressing;
  /** This worker's member record, the hold its heartbeats buy, and its reads of the roster. */
  readonly #members: Membership;
  /** The roster as membership last read it: dealing and balancing judge on it, and never write it. */
  readonly #view: RosterView;
  /** The leases held, and the self-fencing that drops them when the hold runs out. */
  readonly #hold: Hold;
  /** The conditional writes on held leases: checkpoints, annotations, and every lease write's tally. */
  readonly #writes: FencedWrites;
  /** Steal requests, handovers and releases. */
  readonly #handovers: Handovers;
  /** The take tick: when to list, and who takes which lease. */
  readonly #taking: Taking;
  #stopping: Promise<void> | null = null;
  /** How many times this worker's parts asked for a listing: a stop that asked for one meanwhile (a lease it lost track of) leaves with a note that is not complete. */
  #listingsAsked = 0;
  #state: 'new' | 'running' | 'stopping' | 'stopped' = 'new';
  /**
   * Aborts when the coordinator stops. Every sleep of its parts listens to it (a handover waiting a lease
   * duration after its drain timed out, one per lease; a take retried after a conflict), so it has no
   * listener limit: Node's warning at eleven would report a paused worker's handovers as a leak.
   */
  readonly #lifetime = withoutListenerLimit(new AbortController());
  /** Aborts when stop() begins: a take tick abandons the listing it waits for (a read has no effect to await). */
  readonly #winding = new AbortController();
  #wakeTake: (() => void) | null = null;
  #wakeRenew: (() => void) | null = null;
  /** Sends a heartbeat now without moving the heartbeats' pace: the answer to a move of the roster digest. */
  #answerRenew: (() => void) | null = null;
  #loops: Promise<void>[] = [];
  #takeInFlight: Promise<void> = Promise.resolve();
  /** The simulation's unsafe switch: a stop drains its leases only once the take tick in flight is done. */
  readonly #drainAfterTakeTick: boolean;
  /** The simulation's unsafe switch: a stop returns without waiting for the handovers under way. */
  readonly #stopSkipsHandoffs: boolean;
  /** The change feed's subscription, addressed to this worker's handovers and its watched members' (null without a feed). */
  #feed: AddressedFeed | null = null;

  constructor(options: LeaseCoordinatorOptions) {
    super();
    if (typeof options !== 'object' || options === null) {
      throw new InvalidConfigError(`[${PKG}] LeaseCoordinator options must be an object, got ${describeValue(options)}`);
    }
    refuseUnknownOptions(PKG, 'LeaseCoordinator', options, COORDINATOR_KEYS);
    if (!options.storage || typeof options.storage.updateLeases !== 'function' || typeof options.storage.putMember !== 'function') {
      throw new InvalidConfigError(`[${PKG}] storage must implement CheckpointStorage (leases and roster), got ${describeValue(options.storage)}`);
    }
    checkContractVersion(options.storage, "LeaseCoordinator's storage", PKG);
    const leaseDurationMs = positive(PKG, 'leaseDurationMs', options.leaseDurationMs ?? 10_000);
    const timing = resolveHoldTiming(
      PKG,
      { ...options, leaseDurationMs, renewIntervalMs: options.renewIntervalMs ?? Math.round(leaseDurationMs * 0.65) },
      { leaseDurationMs: 'leaseDurationMs', renewIntervalMs: 'renewIntervalMs' },
    );
    this.#storage = options.storage;
    this.#clock = options.clock ?? systemClock;
    this.#random = options.random ?? systemRandom;
    ({ group: this.group, workerId: this.workerId } = resolveIdentity(options, this.#random));
    this.leaseDurationMs = timing.leaseDurationMs;
    this.renewIntervalMs = timing.renewIntervalMs;
    this.takeIntervalMs = positive(PKG, 'takeIntervalMs', options.takeIntervalMs ?? 2_000);
    this.listIntervalMs = positive(PKG, 'listIntervalMs', options.listIntervalMs ?? 600_000);
    this.holdMs = holdMs(timing);
    const maxLeases = positiveInteger(PKG, 'maxLeasesPerWorker', options.maxLeasesPerWorker ?? Infinity);
    const maxSteals = options.maxStealsPerTick === 0 ? 0 : positiveInteger(PKG, 'maxStealsPerTick', options.maxStealsPerTick ?? 2);
    this.#handoffTimeoutMs = nonNegative(PKG, 'handoffTimeoutMs', options.handoffTimeoutMs ?? timing.leaseDurationMs / 2);
    if (this.#handoffTimeoutMs >= this.holdMs) {
      throw new InvalidConfigError(
        `[${PKG}] handoffTimeoutMs (${this.#handoffTimeoutMs}) must be below the time a heartbeat holds the leases (${this.holdMs.toFixed(0)} ms)`,
      );
    }
    if (!Number.isSafeInteger(timing.leaseDurationMs)) {
      throw new InvalidConfigError(`[${PKG}] leaseDurationMs must be a whole number of milliseconds, got ${timing.leaseDurationMs}`);
    }
    this.#useChangeFeed = options.useChangeFeed ?? true;
    // (Validated with the identity: a name, as a worker id is.)
    const failureDomain = options.failureDomain;
    const watchers = positiveInteger(PKG, 'watchers', options.watchers ?? 3);
    if (watchers > limits.maxWatchedMembers - 1) {
      throw new InvalidConfigError(`[${PKG}] watchers must be at most ${limits.maxWatchedMembers - 1}, got ${watchers}`);
    }
    const watcherReads = checkWatcherReads(options.storage, PKG);
    const rosterMoves = checkRosterMoves(options.storage, PKG);
    const wholeRosterUpTo = options.wholeRosterUpTo === 0 ? 0 : positiveInteger(PKG, 'wholeRosterUpTo', options.wholeRosterUpTo ?? 16);
    const unsafe = unsafeOf(options);
    this.#addressing = unsafe.feedUnaddressed ? 'everyone' : unsafe.feedAddressedToSelf ? 'self-only' : 'watched';
    const skipRosterDigest = unsafe.skipRosterDigest ?? false;
    const ringKeepsTheDead = unsafe.ringKeepsTheDead ?? false;
    const domainsIgnored = unsafe.domainsIgnored ?? false;
    const skipSelfFencing = unsafe.skipSelfFencing ?? false;
    const listingDue = (): void => {
      this.#listingsAsked++;
      this.#taking.listingDue = true;
    };
    const wakeTake = (): void => this.#wakeTake?.();
    const emit = <K extends keyof LeaseCoordinatorEvents>(name: K, event: LeaseCoordinatorEvents[K]): void => this.emit(name, event);
    const report = (error: unknown, operation: string): void => this.#report(error, operation);
    const fail = (error: LeaseholdError): void => this.#fail(error);
    // Membership is made first (the other parts judge on its roster view); it reads the requests, which are
    // the handovers', only once it runs.
    const handovers = (): Handovers => this.#handovers;
    this.#members = new Membership({
      storage: this.#storage,
      group: this.group,
      workerId: this.workerId,
      leaseDurationMs: this.leaseDurationMs,
      takeIntervalMs: this.takeIntervalMs,
      renewIntervalMs: this.renewIntervalMs,
      holdMs: this.holdMs,
      maxLeases,
      clock: this.#clock,
      random: this.#random,
      watchers,
      failureDomain,
      watcherReads,
      wholeRosterUpTo,
      skipRosterDigest,
      rosterMoves,
      movesUnread: unsafe.movesUnread ?? false,
      ringKeepsTheDead,
      domainsIgnored,
      ownDurationOnly: unsafe.ownDurationOnly ?? false,
      expiryFactor: unsafe.expiryFactor ?? 1,
      unansweredDealt: unsafe.unansweredDealt ?? false,
      noteTrusted: unsafe.noteTrusted ?? false,
      dueReadsSkipped: unsafe.dueReadsSkipped ?? false,
      readsOutOfTurn: unsafe.readsOutOfTurn ?? false,
      host: {
        state: () => this.#state,
        lifetime: this.#lifetime.signal,
        get requests() {
          return handovers().requests;
        },
        countHeld: () => this.#hold.countHeld(),
        heldKeys: () => [...this.#hold.leases.keys()],
        isHeld: (leaseKey) => this.isHeld(leaseKey),
        fenceExpired: () => this.#hold.fenceExpired(),
        holdExtended: () => this.#hold.armWatchdog(),
        loseEverything: () => this.#loseEverything(),
        listingDue,
        wakeTake,
        answer: () => this.#answerRenew?.(),
        suspected: (members) => this.#taking.suspected(members),
        watchedChanged: () => this.#readdressFeed(),
        emit,
        report,
        fail,
        refuseFormat: (what, format) => this.#fail(this.#formatError(what, format)),
        inTurn: (read) => this.#inTurn(read),
      },
    });
    this.#view = this.#members.view;
    const state = (): 'new' | 'running' | 'stopping' | 'stopped' => this.#state;
    const wakeRenew = (): void => this.#wakeRenew?.();
    const noteLeasesChanged = (): void => this.noteLeasesChanged();
    const formatError = (what: string, format: number): RecordFormatError => this.#formatError(what, format);
    const common = { storage: this.#storage, group: this.group, workerId: this.workerId, clock: this.#clock };
    this.#hold = new Hold({ ...common, members: this.#members, skipSelfFencing, adoptedRequestIgnored: unsafe.adoptedRequestIgnored ?? false, host: { state, listingDue, emit } });
    this.#drainAfterTakeTick = unsafe.drainAfterTakeTick ?? false;
    this.#stopSkipsHandoffs = unsafe.stopSkipsHandoffs ?? false;
    this.#writes = new FencedWrites({
      ...common,
      hold: this.#hold,
      compare: options.comparePositions ?? compareNumericPositions,
      checkpointPerKey: unsafe.checkpointPerKey ?? false,
      host: { noteLeasesChanged, emit, report, fail, formatError },
    });
    const parts = { members: this.#members, view: this.#view, hold: this.#hold, writes: this.#writes, random: this.#random, skipSelfFencing };
    const limitsOf = { leaseDurationMs: this.leaseDurationMs, takeIntervalMs: this.takeIntervalMs, maxLeases, maxSteals };
    this.#handovers = new Handovers({
      ...common,
      ...parts,
      ...limitsOf,
      renewIntervalMs: this.renewIntervalMs,
      handoffTimeoutMs: this.#handoffTimeoutMs,
      onDrain: options.onDrain,
      releaseWithoutRetry: unsafe.releaseWithoutRetry ?? false,
      stopHandoverKeeps: unsafe.stopHandoverKeeps ?? false,
      handoverToLeaving: unsafe.handoverToLeaving ?? false,
      host: {
        state,
        lifetime: this.#lifetime.signal,
        listingDue,
        wakeRenew,
        noteLeasesChanged,
        giveBack: (leases) => this.#taking.giveBack(leases),
        fairFloor: () => this.#taking.fairFloor,
        lastTarget: () => this.#taking.lastTarget,
        awaitsColdDeal: () => this.#taking.awaitsColdDeal,
        emit,
        report,
      },
    });
    this.#taking = new Taking({
      ...common,
      ...parts,
      ...limitsOf,
      listIntervalMs: this.listIntervalMs,
      isEligible: options.isEligible ?? parentsFinished,
      handovers: this.#handovers,
      freeRetryIgnoresOwner: unsafe.freeRetryIgnoresOwner ?? false,
      lateDealIgnored: unsafe.lateDealIgnored ?? false,
      lostDomainsDealt: unsafe.lostDomainsDealt ?? false,
      adoptionIgnoresCap: unsafe.adoptionIgnoresCap ?? false,
      givenBackPlanned: unsafe.givenBackPlanned ?? false,
      shortfallIgnored: unsafe.shortfallIgnored ?? false,
      belowIgnored: unsafe.belowIgnored ?? false,
      coldDealTrusted: unsafe.coldDealTrusted ?? false,
      letGoForgetsUnreadable: unsafe.letGoForgetsUnreadable ?? false,
      rosterBeforeListing: unsafe.rosterBeforeListing ?? false,
      stopWaitsForListing: unsafe.stopWaitsForListing ?? false,
      coldListingIgnoresNews: unsafe.coldListingIgnoresNews ?? false,
      coldDealerAwaited: unsafe.coldDealerAwaited ?? false,
      noteTrusted: unsafe.noteTrusted ?? false,
      asksTrusted: unsafe.asksTrusted ?? false,
      host: { state, lifetime: this.#lifetime.signal, stopping: this.#winding.signal, wakeRenew, wakeTake, subscribed: () => this.#feed?.open === true, emit, report, fail, formatError },
    });
  }


  /** This worker's current incarnation in the roster, or `null` while it is not a member. */
  get incarnation(): string | null {
    const current = this.#members.current;
    return current?.record ? current.incarnation : null;
  }

  /**
   * Joins the group's roster and starts heartbeating, reading the roster and taking; resolves once the
   * first take tick has run. A new member takes nothing in that first tick: it first lets every worker
   * started with it join, so that a cold start goes straight to fair shares.
   */
  async start(): Promise<void> {
    if (this.#state !== 'new') throw new InvalidConfigError(`[${PKG}] a LeaseCoordinator starts once; this one is ${this.#state}`);
    this.#state = 'running';
    const storage = this.#storage;
    if (this.#useChangeFeed && storage.subscribe) {
      const feed = new AddressedFeed({
        storage: { subscribe: storage.subscribe.bind(storage) },
        group: this.group,
        listener: (change) => this.#onChange(change),
        addressing: this.#addressing,
        report: (error, operation) => this.#report(error, operation),
        running: () => this.#state === 'running',
      });
      try {
        await feed.subscribe(this.#feedAddress(feed));
        this.#feed = feed;
      } catch (error) {
        this.#report(error, 'subscribe');
      }
    }
    await this.#takeTick();
    this.#loops = [
      this.#loop('take', this.takeIntervalMs, () => this.#takeTick()),
      this.#loop('renew', this.renewIntervalMs, () => this.#renewTick()),
    ];
  }

  /**
   * Stops taking, drains every held lease (through `onDrain`), releases it so that others can take it at
   * once, and leaves the roster; a lease handed to this worker meanwhile is released too. Returns within
   * `timeoutMs` (default `handoffTimeoutMs`) whatever user code or storage does: a lease that did not
   * drain in time is not released; its work was told to stop, and this worker's membership lapses (it
   * stops heartbeating), after which others take the lease. A second call waits for the first.
   */
  stop(options: { timeoutMs?: number } = {}): Promise<void> {
    this.#stopping ??= this.#stop(options.timeoutMs ?? this.#handoffTimeoutMs);
    return this.#stopping;
  }

  async #stop(timeoutMs: number): Promise<void> {
    const deadline = this.#clock.now() + nonNegative(PKG, 'timeoutMs', timeoutMs);
    // Drains may use most of the time, not all: the releases after them need a round trip.
    const drainDeadline = deadline - Math.min(timeoutMs / 5, 2_000);
    const wasRunning = this.#state === 'running';
    const freeWritesAtStop = this.#handovers.freeWrites;
    const listingsAskedAtStop = this.#listingsAsked;
    const releasesAtStop = this.#handovers.releasing.size;
    this.#state = 'stopping';
    if (wasRunning) {
      this.#wakeTake?.();
      // A tick in its listing gives it up at once; one in its writes is awaited, so that a lease it takes
      // is in the hold before the leases are drained and handed over.
      this.#winding.abort(new AbortedError(`[${PKG}] lease coordinator ${this.workerId} is stopping`));
      // The leases held now drain at once: their readers take no new batch while the tick finishes (a
      // stopping worker no longer learns of a stream leaving its list, say). Those the tick takes drain
      // after it.
      const drains = new Map<Held, Promise<{ leaseKey: string; done: boolean }>>();
      const drainHeld = (): void => {
        for (const [leaseKey, held] of this.#hold.leases) {
          if (drains.has(held)) continue;
          drains.set(held, this.#handovers.drain(leaseKey, held, 'shutdown', Math.max(0, drainDeadline - this.#clock.now())).then((done) => ({ leaseKey, done })));
        }
      };
      // (`drainAfterTakeTick` is the simulation's unsafe switch that waits for the tick first, as before.)
      if (!this.#drainAfterTakeTick) drainHeld();
      await this.#until(deadline, this.#takeInFlight);
      drainHeld();
      // The heartbeat that says this worker is leaving goes out while its leases drain: the releases wait
      // for both, so nobody deals a released lease back to it, and the round trip costs the handoff nothing.
      const leaving = this.#hold.leases.size > 0 ? this.#until(drainDeadline, this.#members.heartbeat()) : Promise.resolve();
      // The roster is read again meanwhile, so that the leases go to members alive and staying now.
      const roster = this.#hold.leases.size > 0 ? this.#until(drainDeadline, this.#storage.getRoster(this.group).then((read) => void this.#members.readRoster(read))) : Promise.resolve();
      const drained = await Promise.all(drains.values());
      await Promise.all([leaving, roster]);
      const releasable = drained.filter((entry) => entry.done).map((entry) => entry.leaseKey);
      // What the leave will name: the leases handed over, and whether they were all this worker had.
      let handedOver: { handed: Map<string, string[]>; complete: boolean } = { handed: new Map(), complete: false };
      await this.#until(
        deadline,
        this.#handovers.handOverOrRelease(releasable).then((outcome) => {
          handedOver = outcome;
        }),
      );
      await this.#until(deadline, this.#handovers.withdraw());
      // A release begun before the stop (a stream that left the list, user code's release()) stopped its
      // lease's work, so the stop neither drained nor handed it over: its write decides, not a lapse.
      await this.#until(deadline, Promise.all(this.#handovers.releasing));
      // So does a handover to a member that asked or was offered the lease, begun before the stop: the stop
      // does not hand that lease over again (its work stopped), and returning before its write is answered
      // let a process that exits then lose the write, and the lease lapse (consumer simulation, rewind seed
      // 175353: a stop 31 ms long, the lease taken 12 s later; unsafe switch `stopSkipsHandoffs`).
      if (!this.#stopSkipsHandoffs) await this.#until(deadline, Promise.all(this.#handovers.handingOff));
      const lapsing = this.#hold.leases.size;
      for (const [leaseKey, held] of this.#hold.leases) this.#hold.lose(leaseKey, held, 'shutdown-timeout');
      // With nothing left to lapse, leaving the roster lets others act at once; otherwise the membership
      // lapses a lease duration after the last heartbeat, and the leases with it.
      // A leave that names every lease handed over, none written free meanwhile nor lost track of (a handover
      // that did not apply asks for a listing), needs nobody to list for it.
      const complete =
        handedOver.complete &&
        drained.length === releasable.length &&
        releasesAtStop === 0 &&
        this.#handovers.freeWrites === freeWritesAtStop &&
        this.#listingsAsked === listingsAskedAtStop;
      if (lapsing === 0) await this.#until(deadline, this.#members.leave(handedOver.handed, complete));
    }
    this.#state = 'stopped';
    this.#lifetime.abort(new AbortedError(`[${PKG}] lease coordinator ${this.workerId} stopped`));
    this.#hold.disarm();
    await this.#until(deadline, Promise.all([...this.#loops, ...[...this.#hold.leases.values()].map((held) => held.chain)]));
    const feed = this.#feed;
    this.#feed = null;
    if (feed) await this.#until(deadline, feed.close().catch((error: unknown) => this.#report(error, 'unsubscribe')));
  }

  /** Waits for `work`, but not past `deadline` of this worker's clock; the work goes on unawaited. */
  async #until(deadline: number, work: Promise<unknown>): Promise<void> {
    work.catch((error: unknown) => this.#report(error, 'stop'));
    const remaining = deadline - this.#clock.now();
    if (remaining <= 0) return;
    const timer = new AbortController();
    try {
      await Promise.race([work.then(() => undefined, () => undefined), this.#clock.sleep(remaining, timer.signal).catch(() => undefined)]);
    } finally {
      timer.abort();
    }
  }

  /**
   * A stopping worker asks for nothing more: a lease handed to it after it asked is written free, so that
   * nobody waits a lease duration for it. Its requests go with its membership when it leaves.

  /** `await using coordinator = ...`: stops it (and releases its leases) at the end of the scope. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  /** Whether this worker holds the lease now: it took it, its last heartbeat still holds, and it has not given it away. */
  isHeld(leaseKey: string): boolean {
    return this.#hold.isHeld(leaseKey);
  }

  /** The lease if this worker holds it now. */
  lease(leaseKey: string): HeldLease | undefined {
    const held = this.#hold.leases.get(leaseKey);
    return held && this.isHeld(leaseKey) ? this.#hold.handle(held) : undefined;
  }

  /** Every lease this worker holds now. */
  heldLeases(): HeldLease[] {
    return [...this.#hold.leases.keys()].filter((leaseKey) => this.isHeld(leaseKey)).map((leaseKey) => this.#hold.handle(this.#hold.leases.get(leaseKey) as Held));
  }

  /**
   * The sizes of this coordinator's bookkeeping (leases held, let go, handed over, asked for, members
   * watched...), cheap to read at any time: for soak tests and diagnostics that check it stays bounded.
   * The names may change between versions; the values are counts.
   */
  diagnostics(): Readonly<Record<string, number>> {
    const taking = this.#taking.diagnostics();
    return {
      held: this.#hold.leases.size,
      letGo: this.#hold.letGo.size,
      requests: this.#handovers.requests.size,
      handed: this.#handovers.handed.size,
      watching: this.#handovers.watching.size,
      unownedSince: taking.unownedSince,
      corrupt: taking.corrupt,
      transfers: this.#handovers.transfers.size,
      roster: this.#view.size,
      deadSince: taking.deadSince,
      observedMembers: this.#view.observed,
      staleRosterReads: this.#view.staleReads,
      loops: this.#loops.length,
      listeners: this.countListeners(),
    };
  }

  /**
   * Tells the group that its leases changed in a way other workers should look at (leases created or
   * deleted by the leader, a partition finished): the next heartbeat, sent now, carries it, and every
   * worker lists the leases at its next take tick. Without a change feed this is how others learn of it.
   */
  noteLeasesChanged(): void {
    this.#members.noteChanged();
    this.#taking.leasesChanged();
    this.#wakeRenew?.();
  }

  /**
   * Lists the group's leases now and at the next take tick, on this worker, whatever the roster says:
   * for a change this worker learned of by other means (the group's rewind marker on the leader record:
   * a finished lease moved back can be taken again), or that only its own view depends on (its
   * eligibility rule now accepts leases it refused, as when a multi-stream consumer learns of a stream).
   */
  listSoon(): void {
    this.#taking.leasesChanged();
    this.#wakeTake?.();
  }

  /**
   * Moves the lease's checkpoint forward, conditionally on this worker still holding it in the same
   * tenure (`lease.fencingToken`) at the version it last wrote: a handler of an earlier tenure can never
   * write into a later one. Refuses a position behind the stored one (`CheckpointBehindError`, checked
   * again on every retry) and any write after loss (`LeaseLostError`); an unknown outcome is re-read and
   * retried, never assumed. A partition's end is announced to the group (its children become takeable).
   */
  checkpoint(lease: LeaseTenure, position: Position): Promise<void> {
    return this.#writes.checkpoint(lease, position);
  }

  /**
   * Moves the lease's checkpoint forward through `write`, a conditional write of the lease made elsewhere
   * in one atomic step with the caller's own writes (a transaction on the lease's database; see
   * `PostgresStorage.transaction`). `write` is given the lease as this worker holds it and the state to
   * store, must apply it only if the stored lease still has that version, owner, incarnation and epoch,
   * and must report the exact outcome. It runs at most once per call, after every write already queued on
   * the lease, and only while the lease is held in `lease`'s tenure; `position` must be ahead of the
   * stored checkpoint (`CheckpointBehindError` otherwise: what led up to it was applied already). A
   * conflict drops the lease (`LeaseLostError`); an unknown outcome is read back and adopted when it
   * applied, or thrown as a `StorageOutcomeUnknownError` when it did not or cannot be told. The lease
   * record written is adopted, so this worker's next write on the lease follows it.
   */
  checkpointThrough(lease: LeaseTenure, position: Position, write: CheckpointWrite): Promise<void> {
    return this.#writes.checkpointThrough(lease, position, write);
  }

  /**
   * Writes metadata fields on a lease this worker holds in `lease`'s tenure (a field set to `null` is
   * removed), conditionally like a checkpoint; for facts the owner publishes about its lease, such as a
   * stall. A no-op when nothing changes.
   */
  annotate(lease: LeaseTenure, fields: Readonly<Record<string, string | null>>): Promise<void> {
    return this.#writes.annotate(lease, fields);
  }

  /**
   * Sets the checkpoint of a lease this worker holds in `lease`'s tenure to any position, behind the stored
   * one included, with metadata fields in the same conditional write (a field set to `null` is removed):
   * an operator's rewind, applied by the owner once its work in flight is done (DESIGN section 4,
   * "Rewinding"). The lease is read first, and a newer record of the same tenure adopted, so that `decide`
   * sees what another writer added (the request itself); `decide` is given the stored record on each
   * attempt and returns the checkpoint and fields, or `null` when there is nothing to write. Returns the
   * record written, or `null`. Refused once the lease is lost (`LeaseLostError`), as every write.
   */
  moveCheckpoint(
    lease: LeaseTenure,
    decide: (stored: LeaseRecord) => { checkpoint: Position; metadata: Readonly<Record<string, string | null>> } | null,
  ): Promise<LeaseRecord | null> {
    return this.#writes.moveCheckpoint(lease, decide);
  }


  /**
   * Offers the source's resume hint of the lease's reader (the token after the last batch it handed to
   * the handler) for the lease's handover, in `lease`'s tenure only: the handover's write carries it to the
   * recipient, which judges it (DESIGN section 4, "Releasing"). A release writes none.
   */
  offerResume(lease: LeaseTenure, offer: ResumeOffer): void {
    const held = this.#hold.leases.get(lease.leaseKey);
    if (held && held.record.epoch === lease.fencingToken) held.resume = offer;
  }

  /**
   * Judges the resume hint `lease` carries for a reader starting at its checkpoint in its tenure: the token
   * when it was written for exactly this tenure and checkpoint and is younger than `maxAgeMs` (its age at
   * the handover, plus this worker's own clock since it found the lease), else why not.
   * `anyCheckpoint` is the simulation's unsafe switch: the checkpoint is not compared.
   */
  resumeHint(lease: HeldLease, maxAgeMs: number, anyCheckpoint = false): ResumeVerdict {
    const held = this.#hold.leases.get(lease.leaseKey);
    if (!held || held.record.epoch !== lease.fencingToken) return { refused: 'epoch' };
    return judgeResume(lease, this.#clock.now() - held.readAt, maxAgeMs, anyCheckpoint);
  }

  /** Gives up one lease now: stops its work (its signal fires) and writes it free for others. */
  async release(leaseKey: string): Promise<void> {
    await this.#handovers.release([leaseKey], true);
  }

  // ---------------------------------------------------------------- loops

  async #loop(kind: 'take' | 'renew', intervalMs: number, tick: () => Promise<void>): Promise<void> {
    // Taking stops as soon as stop() begins; heartbeats go on while held leases drain.
    const active = (): boolean => this.#state === 'running' || (kind === 'renew' && this.#state === 'stopping');
    // A wake-up that comes while a tick runs is kept for the next sleep: a note of change made during a
    // heartbeat is sent at once after it, not an interval later.
    let woken = false;
    // Whether every wake-up since the last tick asked to keep the loop's pace: a heartbeat that answers a
    // move of the roster digest is sent on top of the regular ones, which come when they would have. Every
    // member answers a move at once; were the answers to set the pace, the whole group would heartbeat in
    // step after each move, and a crash soon after would have all its deaths declared late together.
    let keepPace = false;
    let tickStartedAt = this.#clock.now();
    while (active()) {
      const waker = new AbortController();
      // One reason for every wake-up, and none built for a loop already woken: `abort()` without a reason
      // builds an error with its stack each call, and a worker taking 100 dealt leases wakes its heartbeat
      // once per lease (a sixteenth of a process's CPU at a dealt cold start, in the scale bench's profile).
      const rouse = (): void => {
        if (!waker.signal.aborted) waker.abort(WOKEN);
      };
      this.#lifetime.signal.addEventListener('abort', rouse, { once: true });
      const wake = (keep = false): void => {
        keepPace = woken ? keepPace && keep : keep;
        woken = true;
        rouse();
      };
      if (kind === 'take') this.#wakeTake = () => wake();
      else {
        this.#wakeRenew = () => wake();
        this.#answerRenew = () => wake(true);
      }
      const jitter = 1 + (this.#random.next() - 0.5) * (2 * TICK_JITTER);
      // A heartbeat whose outcome is not known is sent again soon: the hold runs out meanwhile. The period
      // runs from the start of the previous tick: a slow round trip must not push the next heartbeat past
      // the hold the previous one bought.
      // From its join to its first listing, and while a cold start waits for the members to stop joining,
      // the roster is read every quarter tick: workers started together then see the last join, and deal,
      // within a fraction of a tick of each other rather than each at its own tick.
      const quarter = kind === 'take' && (this.#taking.coldWait || (this.#members.current !== null && this.#taking.listedAt === null));
      const period = kind === 'renew' && this.#members.heartbeatFailed ? Math.min(intervalMs / 4, 1_000) : quarter ? (intervalMs / 4) * jitter : intervalMs * jitter;
      const wait = Math.max(0, period - (this.#clock.now() - tickStartedAt));
      if (woken) rouse();
      try {
        await this.#clock.sleep(wait, waker.signal);
      } catch {
        // Woken early: by the change feed, by a note of change, or by stop().
      } finally {
        this.#lifetime.signal.removeEventListener('abort', rouse);
      }
      const answering = woken && keepPace;
      woken = false;
      keepPace = false;
      if (this.#lifetime.signal.aborted || !active()) return;
      if (!answering) tickStartedAt = this.#clock.now();
      await tick().catch((error: unknown) => this.#report(error, kind));
    }
  }

  #onChange(change: LeaseChange): void {
    if (this.#state !== 'running') return;
    if (change.kind === 'rewind') {
      // For the owner alone, and nothing to list: the lease's ownership did not change.
      if (this.#hold.leases.has(change.leaseKey)) this.emit('rewind-requested', { leaseKey: change.leaseKey });
      return;
    }
    if (change.kind === 'created' || change.kind === 'released') this.#taking.leasesChanged();
    if (change.kind === 'handed-off' && !this.#handovers.requests.has(change.leaseKey) && !this.#handovers.watching.has(change.leaseKey)) {
      // A lease handed over unasked (a rebalance, or an owner leaving) is read at once: it may be this
      // worker's. A change that names its new owner is for that owner alone: any other worker would read a
      // lease that is not its own (at 100 workers, 99 reads per handover) and wake its take loop for
      // nothing. A change that names none could be anyone's. Either way a lease missed here is found at a
      // listing, as one whose announcement was lost.
      // (Kept by key when it names a member this worker watches: the lease is then that member's, to deal at its declaration.)
      if (typeof change.owner === 'string' && change.owner !== this.workerId) {
        this.#taking.heardHanded(change.owner, change.leaseKey);
        return;
      }
      this.#handovers.announced.add(change.leaseKey);
      if (change.owner === this.workerId) this.#handovers.announcedByName.add(change.leaseKey);
    }
    this.#wakeTake?.();
  }

  // ---------------------------------------------------------------- the loops' ticks
  // The member record, its writes and the roster's reads are in membership.ts; the hold they buy fences
  // the leases in hold.ts; what a take tick does is in taking.ts.

  /** The renew loop's tick: one heartbeat, its failure reported, never thrown into the loop. */
  async #renewTick(): Promise<void> {
    try {
      await this.#members.heartbeat();
    } catch (error) {
      this.#report(error, 'heartbeat');
    }
  }

  /** The take loop's tick, kept so that stop() can wait for the one in flight before it drains. */
  #takeTick(): Promise<void> {
    // The last tick may have declared a member dead, or forgotten one declared a lease duration ago: the
    // feed follows their handovers. (Before the tick, not chained after it: the loops' timing stays as it was.)
    this.#readdressFeed();
    const tick = this.#inTurn(() => this.#taking.tick());
    this.#takeInFlight = tick;
    return tick;
  }

  /** Moves the feed's subscription to the owners whose handovers this worker acts on now, if they changed. */
  #readdressFeed(): void {
    const feed = this.#feed;
    if (feed && this.#state === 'running') feed.readdress(this.#feedAddress(feed));
  }

  /** The owners whose handovers this worker acts on: its own, its watched members' and those it declared dead lately. */
  #feedAddress(feed: AddressedFeed): readonly string[] | null {
    return feed.addressFor(this.workerId, this.#members.watchedMembers(), this.#taking.declaredLately());
  }

  /** The take ticks and the membership's reads between them, one after another, in the order they came. */
  #turns: Promise<unknown> = Promise.resolve();

  /** Runs `work` once the take tick or read before it is done (see `MembershipHost.inTurn`). */
  #inTurn<T>(work: () => Promise<T>): Promise<T> {
    const run = this.#turns.then(work);
    this.#turns = run.catch(() => undefined);
    return run;
  }

  /**
   * This worker was expelled from the roster: whatever its hold says, others may own its leases now. It
   * drops every lease and request, and joins again as a new incarnation.
   */
  #loseEverything(): void {
    this.#handovers.dropRequests();
    this.#hold.loseEverything();
  }

  #report(error: unknown, operation: string): void {
    this.emit('error', { error: asError(error), operation });
  }

  #formatError(what: string, format: number): RecordFormatError {
    return new RecordFormatError(
      `[${PKG}] ${what} of group ${describeValue(this.group)} is in record format ${format}, newer than the ${RECORD_FORMAT} this worker knows: upgrade it`,
      format,
    );
  }

  /** A record this worker must not write was met: report it once and stop (releasing what it can). */
  #fail(error: LeaseholdError): void {
    if (this.#state !== 'running') return;
    this.#report(error, 'format');
    this.emit('fatal', { error });
    void this.stop();
  }
}

function withoutListenerLimit(controller: AbortController): AbortController {
  setMaxListeners(0, controller.signal);
  return controller;
}
