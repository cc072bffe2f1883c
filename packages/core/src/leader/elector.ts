import { systemClock, systemRandom, type Clock, type Random } from '../clock.js';
import { AbortedError, describeValue, InvalidConfigError, LeaseholdError, RecordFormatError, StorageUnavailableError } from '../errors.js';
import { TypedEmitter } from '../events.js';
import { checkContractVersion } from '../contract-version.js';
import { holdMs, resolveHoldTiming, resolveIdentity } from '../lease/timing.js';
import { VersionWatch } from '../observed-expiry.js';
import { leaderStateOf, RECORD_FORMAT, type LeaderRecord, type LeaderStore, type WriteResult } from '../storage.js';
import { unsafeOf } from '../unsafe.js';
import { optionKeys, refuseUnknownOptions } from '../known-options.js';

const PKG = 'core';
/** The one record an elector watches. */
const LEADER = 'leader';

/** Options of {@link LeaderElector}. Durations are in milliseconds of the injected clock. */
export interface LeaderElectorOptions {
  /** Where the group's leader record lives. */
  store: LeaderStore;
  /** The group (or service) whose leader is elected. */
  group: string;
  /** This candidate's id, unique among live candidates. Default: host name, pid and a random suffix. */
  workerId?: string;
  /** How long the leader record lasts without renewal, as observed by candidates. Default 10,000. */
  leaseDurationMs?: number;
  /** How often the leader renews and candidates look. Default a third of the lease duration. */
  renewIntervalMs?: number;
  /** The bound ρ on clock-rate error. Default 0.01. */
  maxClockDrift?: number;
  /** Subtracted from the time a leader counts on after a renewal. Default min(500, leaseDurationMs / 20). */
  safetyMarginMs?: number;
  /**
   * Called when this candidate becomes leader for `term`. `signal` fires when it stops being leader (lost
   * the record, could not renew in time, or stopped): stop the leader's work then. Errors go to the `error` event.
   */
  onElected?: (term: number, signal: AbortSignal) => void | Promise<void>;
  /** Called when leadership of `term` ends. */
  onDemoted?: (term: number, reason: DemotionReason) => void;
  /** The monotonic clock. Default: the process's. */
  clock?: Clock;
  /** The random source. Default: `Math.random`. */
  random?: Random;
}

const ELECTOR_KEYS = optionKeys<LeaderElectorOptions>({
  store: true,
  group: true,
  workerId: true,
  leaseDurationMs: true,
  renewIntervalMs: true,
  maxClockDrift: true,
  safetyMarginMs: true,
  onElected: true,
  onDemoted: true,
  clock: true,
  random: true,
});

/** Why leadership ended. */
export type DemotionReason = 'replaced' | 'self-fenced' | 'stepped-down';

/** The events of a {@link LeaderElector}. */
export interface LeaderElectorEvents {
  elected: { term: number };
  demoted: { term: number; reason: DemotionReason };
  /** The leader record is in a newer record format than this worker knows: it never writes it, and stops campaigning. */
  fatal: { error: Error };
  error: { error: Error; operation: string };
}

interface Leadership {
  record: LeaderRecord;
  heldUntil: number;
  controller: AbortController;
}

/**
 * Elects one leader per group over any `LeaderStore` (DESIGN section 5), with the same observed-expiry
 * rule and self-fencing as leases. The term is the leader's fencing token. Usable on its own by any service.
 */
export class LeaderElector extends TypedEmitter<LeaderElectorEvents> implements AsyncDisposable {
  /** This candidate's id: the holder written into the leader record while it leads. */
  readonly workerId: string;
  /** The group (or service) whose leader is elected. */
  readonly group: string;
  /** How long the leader record lasts without renewal, as candidates observe it. */
  readonly leaseDurationMs: number;
  /** How often the leader renews and candidates look. */
  readonly renewIntervalMs: number;
  /** How long after sending a successful renewal the leader counts on its leadership. */
  readonly holdMs: number;

  readonly #store: LeaderStore;
  readonly #clock: Clock;
  readonly #random: Random;
  readonly #onElected: LeaderElectorOptions['onElected'];
  readonly #onDemoted: LeaderElectorOptions['onDemoted'];
  readonly #skipSelfFencing: boolean;
  #leadership: Leadership | null = null;
  #lastSeen: LeaderRecord | null = null;
  /** The leader record's version as last read while campaigning, and since when: observed expiry. */
  readonly #observation = new VersionWatch(() => this.#clock.now());
  #state: 'new' | 'running' | 'stopped' = 'new';
  readonly #lifetime = new AbortController();
  #loop: Promise<void> = Promise.resolve();
  #watchdog: { at: number; controller: AbortController } | null = null;
  #chain: Promise<unknown> = Promise.resolve();

  constructor(options: LeaderElectorOptions) {
    super();
    if (typeof options !== 'object' || options === null) {
      throw new InvalidConfigError(`[${PKG}] LeaderElector options must be an object, got ${describeValue(options)}`);
    }
    refuseUnknownOptions(PKG, 'LeaderElector', options, ELECTOR_KEYS);
    if (!options.store || typeof options.store.updateLeader !== 'function') {
      throw new InvalidConfigError(`[${PKG}] store must implement LeaderStore, got ${describeValue(options.store)}`);
    }
    checkContractVersion(options.store, "LeaderElector's store", PKG);
    const timing = resolveHoldTiming(PKG, options, { leaseDurationMs: 'leaseDurationMs', renewIntervalMs: 'renewIntervalMs' });
    this.#store = options.store;
    this.#clock = options.clock ?? systemClock;
    this.#random = options.random ?? systemRandom;
    ({ group: this.group, workerId: this.workerId } = resolveIdentity(options, this.#random));
    this.leaseDurationMs = timing.leaseDurationMs;
    this.renewIntervalMs = timing.renewIntervalMs;
    this.holdMs = holdMs(timing);
    this.#onElected = options.onElected;
    this.#onDemoted = options.onDemoted;
    this.#skipSelfFencing = unsafeOf(options).skipSelfFencing ?? false;
  }

  /** Starts campaigning (and leading, once elected); resolves after the first attempt. */
  async start(): Promise<void> {
    if (this.#state !== 'new') throw new InvalidConfigError(`[${PKG}] a LeaderElector starts once; this one is ${this.#state}`);
    this.#state = 'running';
    await this.#serialized(() => this.#tick());
    this.#loop = this.#run();
  }

  /** Stops campaigning; a leader steps down (its signal fires first) so that another can lead at once. */
  async stop(): Promise<void> {
    if (this.#state === 'stopped') return this.#loop;
    this.#state = 'stopped';
    this.#lifetime.abort(new AbortedError(`[${PKG}] leader elector ${this.workerId} stopped`));
    this.#watchdog?.controller.abort();
    this.#watchdog = null;
    await this.#loop;
    await this.#serialized(async () => {
      const leadership = this.#leadership;
      if (!leadership) return;
      this.#demote('stepped-down');
      const { record } = leadership;
      const outcome = await this.#write(() => this.#store.updateLeader(this.group, record.version, { ...leaderStateOf(record), holder: null }), 'step-down');
      if (outcome.status === 'unknown') this.#report(outcome.error, 'step-down');
    });
  }

  /** `await using elector = ...`: stops it (stepping down if it leads) at the end of the scope. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  /** The group's leader record as this candidate last read or wrote it, or `null` before it has seen one. */
  get record(): LeaderRecord | null {
    return this.#leadership?.record ?? this.#lastSeen;
  }

  /**
   * While leading, writes metadata fields on the leader record (a field set to `null` is removed),
   * conditionally on the record being this leader's term at the version it last wrote; a successful write
   * also renews. For facts the group learns from its leader (for example that the first shard sync is
   * done). Returns whether it applied; no-op (true) when nothing changes.
   */
  async annotate(fields: Readonly<Record<string, string | null>>): Promise<boolean> {
    return this.#serialized(async () => {
      const leadership = this.#leadership;
      if (!leadership || !this.isLeader()) return false;
      if (withFields(leadership.record.metadata, fields) === null) return true;
      return this.#renew(leadership, fields);
    });
  }

  /** Whether this candidate is the leader now (within the hold of its last successful renewal). */
  isLeader(): boolean {
    const leadership = this.#leadership;
    return leadership !== null && (this.#skipSelfFencing || this.#clock.now() < leadership.heldUntil);
  }

  /** The term this candidate leads, or `undefined` when it does not lead. */
  get term(): number | undefined {
    return this.isLeader() ? this.#leadership?.record.term : undefined;
  }

  async #run(): Promise<void> {
    while (this.#state === 'running') {
      const jitter = 1 + (this.#random.next() - 0.5) * 0.1;
      try {
        await this.#clock.sleep(this.renewIntervalMs * jitter, this.#lifetime.signal);
      } catch {
        return;
      }
      if (this.#state !== 'running') return;
      await this.#serialized(() => this.#tick()).catch((error: unknown) => this.#report(error, 'tick'));
    }
  }

  async #tick(): Promise<void> {
    this.#fence();
    if (this.#leadership) await this.#renew(this.#leadership);
    else await this.#campaign();
  }

  #failFormat(format: number): void {
    const error = new RecordFormatError(
      `[${PKG}] the leader record of group ${describeValue(this.group)} is in record format ${format}, newer than the ${RECORD_FORMAT} this worker knows: upgrade it`,
      format,
    );
    this.#report(error, 'format');
    this.emit('fatal', { error });
    this.#demote('stepped-down');
    this.#state = 'stopped';
    this.#lifetime.abort(error);
  }

  /**
   * Renews (optionally setting metadata fields); returns whether a write applied. A conflict that still
   * shows this leader's own holder and term (a renewal whose outcome was unknown but applied, or another
   * client's write that kept them, such as an operator's note) is adopted and retried once, not taken for
   * a replacement; the fields are set on the record adopted, so that the other client's fields are kept.
   */
  async #renew(leadership: Leadership, fields?: Readonly<Record<string, string | null>>): Promise<boolean> {
    for (let attempt = 0; attempt < 2; attempt++) {
      const { record } = leadership;
      if (record.format > RECORD_FORMAT) {
        this.#failFormat(record.format);
        return false;
      }
      const sentAt = this.#clock.now();
      const metadata = fields ? withFields(record.metadata, fields) : null;
      const next = { ...leaderStateOf(record), ...(metadata ? { metadata } : {}) };
      const outcome = await this.#write(() => this.#store.updateLeader(this.group, record.version, next), 'renew');
      if (this.#leadership !== leadership) return false;
      if (outcome.status === 'applied') {
        leadership.record = outcome.record;
        leadership.heldUntil = sentAt + this.holdMs;
        this.#armWatchdog();
        return true;
      }
      if (outcome.status === 'unknown') return false; // not extended; the next renewal or the watchdog decides
      const current = outcome.current;
      if (current === null || current.holder !== this.workerId || current.term !== record.term) {
        this.#demote('replaced');
        return false;
      }
      leadership.record = current; // our own earlier write: still ours, the hold is not extended by it
    }
    return false;
  }

  async #campaign(): Promise<void> {
    let current: LeaderRecord | null;
    try {
      current = await this.#store.getLeader(this.group);
    } catch (error) {
      this.#report(error, 'read');
      return;
    }
    const now = this.#clock.now();
    this.#lastSeen = current;
    if (current !== null && current.format > RECORD_FORMAT) {
      this.#failFormat(current.format);
      return;
    }
    if (current === null) {
      await this.#claim(() => this.#store.createLeader({ group: this.group, holder: this.workerId, term: 1 }));
      return;
    }
    this.#observation.see(LEADER, current.version, now);
    const expired = this.#observation.expired(LEADER, current.version, this.leaseDurationMs, now);
    if (current.holder === null || expired) {
      const record = current;
      await this.#claim(() =>
        this.#store.updateLeader(this.group, record.version, { ...leaderStateOf(record), holder: this.workerId, term: record.term + 1 }),
      );
    }
  }

  async #claim(write: () => Promise<WriteResult<LeaderRecord>>): Promise<void> {
    if (this.#state !== 'running') return;
    const sentAt = this.#clock.now();
    const outcome = await this.#write(write, 'elect');
    if (outcome.status !== 'applied' || this.#state !== 'running') return;
    const heldUntil = sentAt + this.holdMs;
    if (heldUntil <= this.#clock.now() && !this.#skipSelfFencing) return;
    const leadership: Leadership = { record: outcome.record, heldUntil, controller: new AbortController() };
    this.#lastSeen = outcome.record;
    this.#leadership = leadership;
    this.#observation.clear();
    this.#armWatchdog();
    const term = outcome.record.term;
    this.emit('elected', { term });
    if (this.#onElected) {
      try {
        void Promise.resolve(this.#onElected(term, leadership.controller.signal)).catch((error: unknown) => this.#report(error, 'onElected'));
      } catch (error) {
        this.#report(error, 'onElected');
      }
    }
  }

  #fence(): void {
    const leadership = this.#leadership;
    if (leadership && !this.#skipSelfFencing && this.#clock.now() >= leadership.heldUntil) this.#demote('self-fenced');
  }

  /** One timer at the end of the hold; a renewal only pushes the end later, so the timer re-arms when it fires early. */
  #armWatchdog(): void {
    const leadership = this.#leadership;
    if (!leadership || this.#skipSelfFencing || this.#state !== 'running') return;
    if (this.#watchdog !== null && this.#watchdog.at <= leadership.heldUntil) return;
    this.#watchdog?.controller.abort();
    const watchdog = { at: leadership.heldUntil, controller: new AbortController() };
    this.#watchdog = watchdog;
    this.#clock.sleep(Math.max(0, watchdog.at - this.#clock.now()), watchdog.controller.signal).then(
      () => {
        if (this.#watchdog !== watchdog) return;
        this.#watchdog = null;
        this.#fence();
        this.#armWatchdog();
      },
      () => undefined,
    );
  }

  #demote(reason: DemotionReason): void {
    const leadership = this.#leadership;
    if (!leadership) return;
    this.#leadership = null;
    this.#watchdog?.controller.abort();
    this.#watchdog = null;
    const term = leadership.record.term;
    leadership.controller.abort(new AbortedError(`[${PKG}] leadership of term ${term} ended: ${reason}`));
    this.emit('demoted', { term, reason });
    try {
      this.#onDemoted?.(term, reason);
    } catch (error) {
      this.#report(error, 'onDemoted');
    }
  }

  async #write(write: () => Promise<WriteResult<LeaderRecord>>, operation: string): Promise<WriteResult<LeaderRecord>> {
    try {
      const outcome = await write();
      if (outcome.status === 'unknown') this.#report(outcome.error, operation);
      return outcome;
    } catch (error) {
      this.#report(error, operation);
      const unknown = error instanceof LeaseholdError ? error : new StorageUnavailableError(`[${PKG}] ${operation} failed`, { cause: error });
      return { status: 'unknown', error: unknown };
    }
  }

  #serialized<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#chain.then(fn, fn);
    this.#chain = run.catch(() => undefined);
    return run;
  }

  #report(error: unknown, operation: string): void {
    this.emit('error', { error: error instanceof Error ? error : new Error(String(error)), operation });
  }
}

/** `metadata` with `fields` set (a `null` field removed), or `null` when that changes nothing. */
function withFields(metadata: Readonly<Record<string, string>>, fields: Readonly<Record<string, string | null>>): Record<string, string> | null {
  const next: Record<string, string> = { ...metadata };
  let changed = false;
  for (const [name, value] of Object.entries(fields)) {
    if (value === null ? name in next : next[name] !== value) changed = true;
    if (value === null) delete next[name];
    else next[name] = value;
  }
  return changed ? next : null;
}
