/**
 * This worker's membership of its group's roster (DESIGN section 4, "Membership" and "Watchers and the
 * roster digest"): its own member record (join, heartbeat, leave, expulsion), the hold its heartbeats buy,
 * the declarations of death it writes, and its reads of the roster (the digest, the members it watches,
 * the whole roster when the digest moved). The coordinator owns one, deals and balances on the roster it
 * reads, and gives it back, through {@link MembershipHost}, the little it needs of the leases: how many are
 * held, what is asked for, and dropping them all on expulsion.
 */
import type { Clock, Random } from '../clock.js';
import { describeValue, InvalidConfigError, LeaseholdError, MemberExpelledError, RecordFormatError, StorageUnavailableError } from '../errors.js';
import { limits } from '../validation.js';
import { memberStateOf, RECORD_FORMAT, type CheckpointStorage, type MemberRecord, type MemberState, type Roster, type RosterMoves, type WriteResult } from '../storage.js';
import { joinedBetween, movedByDeathsOnly, movedByJoinsAndDeaths, movedByJoinsOnly, RosterView, turnedDead, type SignatureMembers } from './roster-view.js';
import { domainsOf, FAILURE_DOMAIN_FIELD, watchedBy } from './watchers.js';
import { HANDED_FIELD, readNote, writeNote } from './leave-notes.js';
import { ASKS_FIELD } from './join-asks.js';
import { COLD_DEALT_FIELD } from './cold-deal-note.js';
import { OwnRecord } from './own-record.js';
import { addsSuspect, Answers, othersLookAt } from './answers.js';
import { StillPrompts } from './still-prompts.js';
import { DueReads } from './due-reads.js';
import { DigestAdvances } from './digest-advances.js';
import { wakeAt, type WakeParts, type WakeTimer } from './wake-timer.js';
import type { LeaseCoordinatorEvents } from './events.js';

const PKG = 'core';

export { LEAVING_FIELD } from './own-record.js';

/** The fields a heartbeat drops without moving the digest: a newcomer's asks, a cold start's deal note. */
const DROPPED_QUIETLY = [ASKS_FIELD, COLD_DEALT_FIELD] as const;

const withoutQuietDrops = (state: MemberState): MemberState => {
  if (DROPPED_QUIETLY.every((field) => state.metadata[field] === undefined)) return state;
  const metadata = { ...state.metadata };
  for (const field of DROPPED_QUIETLY) delete metadata[field];
  return { ...state, metadata };
};

/** Whether `next` carries asks or a deal note `before` did not: the members they concern must read them. */
const addsNews = (before: MemberState, next: MemberState): boolean =>
  DROPPED_QUIETLY.some((field) => next.metadata[field] !== undefined && next.metadata[field] !== before.metadata[field]);

/** One incarnation of this worker in the roster, from its join to its leave or expulsion. */
export interface Incarnation {
  readonly incarnation: string;
  record: MemberRecord | null;
  /** When the first join was sent: a new member takes nothing before its first full take tick. */
  readonly joinedAt: number;
}

/** What membership needs back from the coordinator that owns it: the leases are the coordinator's. */
export interface MembershipHost {
  /** The coordinator's state: a stopping member says so in its record, and nothing is written once stopped. */
  state(): 'new' | 'running' | 'stopping' | 'stopped';
  /** Aborts when the coordinator stops: the expiry timer goes with it. */
  readonly lifetime: AbortSignal;
  /** The leases this worker asked for, by key: written into its member record. */
  readonly requests: ReadonlyMap<string, { from: string; at: number }>;
  /** How many leases this worker holds and is not giving away: published in its member record. */
  countHeld(): number;
  /** The keys of the leases this worker holds, given away or not. */
  heldKeys(): string[];
  /** Whether this worker holds the lease now. */
  isHeld(leaseKey: string): boolean;
  /** Drops every lease once the hold has passed: a heartbeat is sent only after that. */
  fenceExpired(): void;
  /** The hold was extended: the watchdog moves to its new end. */
  holdExtended(): void;
  /** Expelled: drops every lease, request and tenure let go, whatever the hold says. */
  loseEverything(): void;
  /** Lists the leases at the next take tick. */
  listingDue(): void;
  /** Wakes the take loop now. */
  wakeTake(): void;
  /** Sends a heartbeat now, on top of the regular ones (their pace is kept): to answer a suspect named in the roster, or to name one. */
  answer(): void;
  /** Watched members this worker is about to name as suspects: their declaration may come in a third of a lease duration. */
  suspected(members: readonly MemberRecord[]): void;
  /** The members this worker watches changed (the change feed follows their handovers). */
  watchedChanged(): void;
  emit<K extends keyof LeaseCoordinatorEvents>(name: K, event: LeaseCoordinatorEvents[K]): void;
  report(error: unknown, operation: string): void;
  /** A record this worker must not write was met: stop. */
  fail(error: LeaseholdError): void;
  /** A record of a newer format than this worker knows was met: stop. */
  refuseFormat(what: string, format: number): void;
  /**
   * Runs a read of the roster after the take tick or read under way, and before the next: the reads of the
   * roster take effect in the order they were sent, so that a read answered late never leaves the view
   * older than one sent after it (owners are judged on a roster read after the listing).
   */
  inTurn<T>(read: () => Promise<T>): Promise<T>;
}

/** How the roster's signature moved since the last take tick that asked (see `Membership.signatureMoved`). */
export type RosterMove = 'none' | 'deaths' | 'handed-leaves' | 'joins' | 'joins-and-deaths' | 'joins-and-handed-leaves' | 'other';

export interface MembershipOptions {
  readonly storage: CheckpointStorage;
  readonly group: string;
  readonly workerId: string;
  readonly leaseDurationMs: number;
  readonly takeIntervalMs: number;
  /** How often this worker heartbeats: a watched member is not suspected before it has missed one. */
  readonly renewIntervalMs: number;
  readonly holdMs: number;
  readonly maxLeases: number;
  readonly clock: Clock;
  readonly random: Random;
  /** How many members watch each member's liveness. */
  readonly watchers: number;
  /** This worker's failure domain (the coordinator's `failureDomain`), written into its member record; `undefined` for none. */
  readonly failureDomain: string | undefined;
  /** Whether the store has the watchers' reads: without them the whole roster is read every take tick. */
  readonly watcherReads: boolean;
  /** Groups of up to this many members read the whole roster every tick. */
  readonly wholeRosterUpTo: number;
  /** Unsafe: member writes never advance the roster digest. */
  readonly skipRosterDigest: boolean;
  /** Whether the store has `getRosterMoves`: a move of the digest is read as the members it names, not as a whole roster. */
  readonly rosterMoves: boolean;
  /** Unsafe: a read of the digest's moves takes them for read without reading the members they name. */
  readonly movesUnread: boolean;
  /** Unsafe: the watchers' ring keeps the members declared dead. */
  readonly ringKeepsTheDead: boolean;
  /** Unsafe: the ring ignores the members' failure domains. */
  readonly domainsIgnored: boolean;
  /** Unsafe: a member expires after this worker's own lease duration, whatever its own. */
  readonly ownDurationOnly: boolean;
  /** Unsafe: expiry is judged after this multiple of the lease duration. */
  readonly expiryFactor: number;
  /** Unsafe: a member that did not answer a suspect is dealt and offered leases all the same. */
  readonly unansweredDealt: boolean;
  /** Unsafe: a leave's note is taken for one naming every lease the member had, whatever it says. */
  readonly noteTrusted: boolean;
  /** Unsafe: watched members are read at the take ticks only, never when their heartbeat is due. */
  readonly dueReadsSkipped: boolean;
  /** Unsafe: the reads between the ticks (at a heartbeat's moment, or a suspect's) run beside the tick's, and may take effect out of order. */
  readonly readsOutOfTurn: boolean;
  readonly host: MembershipHost;
}

/**
 * This worker's member record and its reads of the roster. Its writes run one after another; its reads
 * run in the coordinator's take tick, which acts on the {@link view} they leave.
 */
export class Membership {
  readonly #storage: CheckpointStorage;
  readonly #group: string;
  readonly #workerId: string;
  readonly #leaseDurationMs: number;
  readonly #takeIntervalMs: number;
  readonly #renewIntervalMs: number;
  readonly #holdMs: number;
  readonly #clock: Clock;
  readonly #random: Random;
  readonly #host: MembershipHost;
  readonly #ownDurationOnly: boolean;
  readonly #expiryFactor: number;
  readonly #failureDomain: string | undefined;
  /** The suspects named, by this worker and the others, and the members' answers to them. */
  readonly answers: Answers;
  /** The watched members it names as suspects when they stand still (still-prompts.ts). */
  readonly #still: StillPrompts;
  /** The watched members it reads when their heartbeat is due (due-reads.ts). */
  readonly #due: DueReads;
  /** Unsafe: the reads between the ticks run beside the tick's. */
  readonly #readsOutOfTurn: boolean;
  /** What this worker's wake-ups before the next tick need (wake-timer.ts). */
  readonly #wakeParts: WakeParts;
  /** Whether the store has `getRosterMoves`. */
  readonly #rosterMoves: boolean;
  /** Unsafe: a read of the digest's moves takes them for read without reading the members they name. */
  readonly #movesUnread: boolean;
  /** Unsafe: the watchers' ring keeps the members declared dead. */
  readonly #ringKeepsTheDead: boolean;
  readonly #domainsIgnored: boolean;
  /** Unsafe: a leave's note is taken for one naming every lease the member had, whatever it says. */
  readonly #noteTrusted: boolean;
  /** How many members watch each member's liveness. */
  readonly #watchers: number;
  /** Whether the store has the watchers' reads: without them the whole roster is read every take tick. */
  readonly #watcherReads: boolean;
  /** Groups of up to this many members read the whole roster every tick. */
  readonly #wholeRosterUpTo: number;
  /** The roster digest read just before the last whole roster read; `null` before the first. */
  #digestSeen: number | null = null;
  /** When the roster was last read whole, on this worker's clock. */
  #wholeReadAt = -Infinity;
  /** This worker's advances of the roster digest (digest-advances.ts). */
  readonly #digest: DigestAdvances;
  /** A change that a watcher's read showed (a watched member died, left or moved) and the digest did not: announced a tick later if still unshown. */
  #unannouncedSince: number | null = null;
  /** The members this worker watches: those whose expiry it judges every tick. */
  #watched: ReadonlySet<string> = new Set();
  /** Until when this worker's last successful heartbeat lets it count its leases as held. */
  #heldUntil = -Infinity;
  #current: Incarnation | null = null;
  /** Member writes run one after another: each needs the version the previous one made. */
  #memberChain: Promise<unknown> = Promise.resolve();
  /** The roster as last read, and each member as this worker judges it (observed expiry). */
  readonly view: RosterView;
  /** The roster's signature at the last take tick: a move brings a listing. */
  #rosterSignature = '';
  /** The members that signature was made of. */
  #signatureMembers: SignatureMembers = new Map();
  /** What this worker writes in its member record (own-record.ts). */
  readonly #own: OwnRecord;
  #heartbeatFailed = false;
  #incarnations = 0;

  constructor(options: MembershipOptions) {
    this.#storage = options.storage;
    this.#group = options.group;
    this.#workerId = options.workerId;
    this.#leaseDurationMs = options.leaseDurationMs;
    this.#takeIntervalMs = options.takeIntervalMs;
    this.#renewIntervalMs = options.renewIntervalMs;
    this.#holdMs = options.holdMs;
    this.#clock = options.clock;
    this.#random = options.random;
    this.#host = options.host;
    this.#watchers = options.watchers;
    this.#watcherReads = options.watcherReads;
    this.#wholeRosterUpTo = options.wholeRosterUpTo;
    this.#rosterMoves = options.rosterMoves;
    this.#movesUnread = options.movesUnread;
    this.#ringKeepsTheDead = options.ringKeepsTheDead;
    this.#domainsIgnored = options.domainsIgnored;
    this.#noteTrusted = options.noteTrusted;
    this.#ownDurationOnly = options.ownDurationOnly;
    this.#expiryFactor = options.expiryFactor;
    this.#failureDomain = options.failureDomain;
    this.#readsOutOfTurn = options.readsOutOfTurn;
    this.#digest = new DigestAdvances({
      storage: options.storage,
      group: options.group,
      watcherReads: options.watcherReads,
      rosterMoves: options.rosterMoves,
      skipRosterDigest: options.skipRosterDigest,
      emit: (name, event) => this.#host.emit(name, event),
      report: (error, operation) => this.#host.report(error, operation),
    });
    this.view = new RosterView({ workerId: this.#workerId, now: () => this.#clock.now(), expiryMs: (member) => this.#expiryMs(member) });
    this.answers = new Answers({
      workerId: this.#workerId,
      takeIntervalMs: this.#takeIntervalMs,
      leaseDurationMs: this.#leaseDurationMs,
      view: this.view,
      readsWatched: () => this.readsWatched(),
      unansweredDealt: options.unansweredDealt,
    });
    this.#own = new OwnRecord({
      leaseDurationMs: this.#leaseDurationMs,
      maxLeases: options.maxLeases,
      failureDomain: options.failureDomain,
      answers: this.answers,
      host: this.#host,
      digestSeen: () => this.#digestSeen,
    });
    this.#wakeParts = {
      clock: this.#clock,
      takeIntervalMs: this.#takeIntervalMs,
      running: () => this.#host.state() === 'running',
      lifetime: () => this.#host.lifetime,
    };
    this.#still = new StillPrompts({
      ...this.#wakeParts,
      renewIntervalMs: this.#renewIntervalMs,
      view: this.view,
      answers: this.answers,
      watched: () => this.#watched,
      readsWatched: () => this.readsWatched(),
      isMember: () => this.#current !== null,
      expiryMs: (member) => this.#expiryMs(member),
      advanceDigest: () => this.#digest.afterThoseOnTheirWay(),
      read: (workerIds) => this.#readBetweenTicks(workerIds),
      suspected: (members) => this.#host.suspected(members),
      answer: () => this.#host.answer(),
      report: (error, operation) => this.#host.report(error, operation),
    });
    this.#due = new DueReads(
      {
        ...this.#wakeParts,
        renewIntervalMs: this.#renewIntervalMs,
        view: this.view,
        watched: () => this.#watched,
        readsWatched: () => this.readsWatched(),
        isMember: () => this.#current !== null,
        read: (workerIds) => this.#readBetweenTicks(workerIds),
        report: (error, operation) => this.#host.report(error, operation),
      },
      options.dueReadsSkipped,
    );
  }

  /**
   * Reads the named watched members between two ticks (when their heartbeat is due, or their moment to be
   * named a suspect came), in turn with the tick's reads; true when the read was taken into the view.
   */
  async #readBetweenTicks(workerIds: readonly string[]): Promise<boolean> {
    const read = async (): Promise<boolean> => {
      if (this.#current === null || this.#host.state() !== 'running') return false;
      const roster = await this.#getMembers(workerIds);
      return this.#host.state() === 'running' && this.readRoster(roster, workerIds);
    };
    return this.#readsOutOfTurn ? read() : this.#host.inTurn(read);
  }

  /** This worker's incarnation in the roster since its last join, or `null` while it is not a member. */
  get current(): Incarnation | null {
    return this.#current;
  }

  /** Until when this worker's last successful heartbeat lets it count its leases as held. */
  get heldUntil(): number {
    return this.#heldUntil;
  }

  /** Whether the last heartbeat's outcome is unknown: the next one is sent soon. */
  get heartbeatFailed(): boolean {
    return this.#heartbeatFailed;
  }

  /** The advances of the digest sent after member writes, one after another. */
  get advancing(): Promise<void> {
    return this.#digest.advancing;
  }

  /** The members that joined in the last move `signatureMoved` reported. */
  joined: readonly string[] = [];

  /** A change other workers must list for: the next heartbeat carries it in the change counter. */
  noteChanged(): void {
    this.#own.noteChanged();
  }

  /**
   * How the roster's signature moved since the last take tick that asked (members, incarnations, statuses
   * and change counters, what calls for a listing): not at all, only by live members turning dead and dead
   * members removed (`deaths`: the dead member's declarer deals its leases, section 4, "Why the declarer
   * deals"), only by members leaving with a note that names every lease they handed over and dead members
   * removed (`handed-leaves`: each recipient reads its own by key, section 4, "A leave that names its
   * handovers"), only by members joining (`joins`: each newcomer asks its givers by name, section 4, "A join
   * that names its givers"), only by both joins and deaths (`joins-and-deaths`, `joins-and-handed-leaves`:
   * a rolling restart, each part handled as it would be alone), or otherwise. The members that joined in
   * the move are in `joined` until the next.
   */
  signatureMoved(): RosterMove {
    const signature = this.view.signature();
    this.joined = [];
    if (signature === this.#rosterSignature) return 'none';
    const before = this.#signatureMembers;
    this.#rosterSignature = signature;
    this.#signatureMembers = this.view.signatureMembers();
    this.joined = joinedBetween(before, this.#signatureMembers);
    if (before.size > 0 && movedByJoinsOnly(before, this.#signatureMembers)) return 'joins';
    const deathsOnly = movedByDeathsOnly(before, this.#signatureMembers);
    // (Before, a join and a leave read in one move were another change: in a rolling restart of 100 x 10,000,
    // a stop and a start every 6 s, every member listed the group 13 times a minute.)
    const withJoins = !deathsOnly && before.size > 0 && movedByJoinsAndDeaths(before, this.#signatureMembers);
    if (!deathsOnly && !withJoins) return 'other';
    const dead = turnedDead(before, this.#signatureMembers);
    const handedLeaves = dead.length > 0 && dead.every((member) => this.#noteTrusted || readNote(member.metadata[HANDED_FIELD])?.complete === true);
    if (withJoins) return handedLeaves ? 'joins-and-handed-leaves' : 'joins-and-deaths';
    return handedLeaves ? 'handed-leaves' : 'deaths';
  }

  /**
   * Asks the members named in `givers` for that many leases each, in this incarnation's member record,
   * written at the next heartbeat (DESIGN section 4, "A join that names its givers"). As many givers as fit
   * three quarters of the member's size (the rest is room for steal requests). False when none fits, or
   * the record is not this worker's to write.
   */
  ask(givers: ReadonlyMap<string, number>): boolean {
    const membership = this.#current;
    return membership?.record ? this.#own.ask(membership, givers) : false;
  }

  /** Drops the asks at the next heartbeat, which does not move the digest for it. */
  unask(): void {
    this.#own.unask();
  }

  /**
   * Says in this incarnation's member record, from the next heartbeat, that it dealt a cold start's
   * `total` leases to the group (DESIGN section 4, taking, step 3, "One member deals a cold start").
   */
  noteColdDeal(total: number): void {
    const membership = this.#current;
    if (membership?.record) this.#own.noteColdDeal(membership, total);
  }

  /** Drops the cold start's deal note at the next heartbeat, which does not move the digest for it. */
  unnoteColdDeal(): void {
    this.#own.unnoteColdDeal();
  }

  /** One heartbeat: the member record written at the version this worker last wrote. */
  async heartbeat(): Promise<void> {
    await this.#onMember(async () => {
      const membership = this.#current;
      if (!membership?.record || this.#host.state() === 'stopped') return;
      this.#host.fenceExpired();
      const sentAt = this.#clock.now();
      const keys = this.#host.heldKeys();
      let outcome = await this.#putMember(membership.record.version, this.#own.state(membership), 'heartbeat');
      if (outcome.status === 'conflict' && this.#isOurs(membership, outcome.current)) {
        // An earlier write of ours whose outcome was unknown applied after all: write again on it.
        membership.record = outcome.current;
        outcome = await this.#putMember(membership.record.version, this.#own.state(membership), 'heartbeat');
      }
      if (this.#current !== membership) return;
      if (outcome.status === 'applied') {
        this.#heartbeatFailed = false;
        membership.record = outcome.record;
        this.#extendHold(sentAt);
        this.#host.emit('renewed', { leaseKeys: keys.filter((leaseKey) => this.#host.isHeld(leaseKey)), durationMs: this.#clock.now() - sentAt });
      } else if (outcome.status === 'conflict') {
        this.#expel(outcome.current);
      } else {
        this.#heartbeatFailed = true;
      }
    });
  }

  #isOurs(membership: Incarnation, member: MemberRecord | null): member is MemberRecord {
    return member !== null && member.incarnation === membership.incarnation && member.status === 'alive';
  }

  #extendHold(sentAt: number): void {
    this.#heldUntil = Math.max(this.#heldUntil, sentAt + this.#holdMs);
    this.#host.holdExtended();
  }

  /**
   * This worker's membership was declared dead or replaced: whatever its hold says, others may own its
   * leases now. It drops everything and joins again as a new incarnation at its next take tick.
   */
  #expel(current: MemberRecord | null): void {
    if (this.#current === null) return;
    this.#current = null;
    this.#heldUntil = -Infinity;
    this.#host.loseEverything();
    this.#host.report(
      new MemberExpelledError(
        `[${PKG}] worker ${describeValue(this.#workerId)} was ${current === null ? 'removed from' : current.status === 'dead' ? 'declared dead in' : 'replaced in'} the roster of group ${describeValue(this.#group)}; it dropped its leases and joins again`,
        this.#workerId,
      ),
      'heartbeat',
    );
  }

  /**
   * Joins as a new incarnation. A member of the same worker id that is alive (an earlier process of this
   * id, or a duplicate) is replaced only once it was seen not to heartbeat for its lease duration, as any
   * dead member is declared dead: its leases are then free to take, and never while it could hold them.
   */
  async join(now: number): Promise<void> {
    await this.#onMember(async () => {
      if (this.#current !== null || this.#host.state() !== 'running') return;
      const roster = this.view;
      const existing = roster.get(this.#workerId) ?? null;
      if (existing && existing.status === 'alive' && !roster.expired(existing, now)) return;
      if (existing === null && roster.size + roster.corruptCount >= limits.maxMembers) {
        // Dead members are removed after a while; until then a full roster takes nobody new.
        this.#host.report(
          new InvalidConfigError(`[${PKG}] the roster of group ${describeValue(this.#group)} has ${roster.size} members, the limit of ${limits.maxMembers}: worker ${describeValue(this.#workerId)} cannot join`),
          'join',
        );
        return;
      }
      const incarnation = this.#newIncarnation();
      const membership: Incarnation = { incarnation, record: null, joinedAt: now };
      const sentAt = this.#clock.now();
      const outcome = await this.#putMember(existing?.version ?? null, this.#own.state(membership), 'join');
      if (outcome.status !== 'applied' || this.#host.state() !== 'running') return;
      membership.record = outcome.record;
      this.#current = membership;
      this.#heartbeatFailed = false;
      this.#host.listingDue();
      this.#extendHold(sentAt);
      this.#host.emit('joined', { incarnation });
    });
  }

  /**
   * Marks this worker's membership dead itself, so that others take what it leaves at once. The leave names
   * the leases the stop handed over (`handed`, by recipient), as many as fit the record, and says whether
   * they are all it had (`complete`): each recipient then reads its own by key, and nobody lists for the
   * leave (DESIGN section 4, "A leave that names its handovers").
   */
  async leave(handed: ReadonlyMap<string, readonly string[]> = new Map(), complete = false): Promise<void> {
    await this.#onMember(async () => {
      const membership = this.#current;
      if (!membership?.record) return;
      const state: MemberState = { ...memberStateOf(membership.record), status: 'dead', held: 0, requests: [] };
      const withNote = (note: string): MemberState => ({ ...state, metadata: { ...state.metadata, [HANDED_FIELD]: note } });
      const note = writeNote(handed, complete, (value) => Buffer.byteLength(JSON.stringify(withNote(value)), 'utf8') <= limits.maxMemberBytes);
      const outcome = await this.#putMember(membership.record.version, note === undefined ? state : withNote(note), 'leave');
      if (outcome.status === 'applied') membership.record = null;
    });
    // Others learn of the leave from the digest: its advance goes out before the worker is gone.
    await this.#digest.advancing;
  }

  #newIncarnation(): string {
    this.#incarnations++;
    return `${Math.floor(this.#random.next() * 36 ** 8).toString(36).padStart(8, '0')}-${this.#incarnations}`;
  }

  /** How long a member's record must stand still before it is expired: the longer of both lease durations. */
  #expiryMs(member: MemberRecord): number {
    const duration = this.#ownDurationOnly ? this.#leaseDurationMs : Math.max(this.#leaseDurationMs, member.leaseDurationMs);
    return duration * this.#expiryFactor;
  }

  /** Declares an expired member dead, at the version this worker watched; true once it is dead (by this worker or another): its leases are free to take. */
  async declareDead(member: MemberRecord): Promise<boolean> {
    const outcome = await this.#putMember(member.version, { ...memberStateOf(member), status: 'dead', requests: [] }, 'declare-dead', member.workerId);
    if (outcome.status === 'conflict' && outcome.current?.status === 'dead' && outcome.current.incarnation === member.incarnation) {
      // Another worker declared it first: it is dead all the same. Where nobody deals, this worker lists
      // now, not a tick later, to take its portion of the leases (the take tick decides).
      this.view.set(outcome.current);
      return true;
    }
    if (outcome.status !== 'applied') return false;
    this.view.set(outcome.record);
    this.#declared.set(member.workerId, member.incarnation);
    this.#host.emit('member-dead', { workerId: member.workerId, incarnation: member.incarnation });
    return true;
  }

  /**
   * The members this worker declared dead itself (its conditional write applied), by incarnation: at its
   * next listing the coordinator frees the leases they held that it does not take, with a change feed, or
   * takes them as well, without one (`Taking`).
   */
  readonly #declared = new Map<string, string>();

  /** Whether this worker's own declaration of `workerId` at `incarnation` applied since its last listing. */
  declaredHere(workerId: string, incarnation: string): boolean {
    return this.#declared.get(workerId) === incarnation;
  }

  /** The members this worker watches (chosen from the ring at its last whole read). */
  watchedMembers(): ReadonlySet<string> {
    return this.#watched;
  }

  /** The members declared dead by this worker since the last call, by incarnation; `null` when none were. */
  takeDeclared(): Map<string, string> | null {
    if (this.#declared.size === 0) return null;
    const declared = new Map(this.#declared);
    this.#declared.clear();
    return declared;
  }

  async #putMember(expectedVersion: number | null, next: MemberState, operation: string, workerId = this.#workerId): Promise<WriteResult<MemberRecord>> {
    // Only a heartbeat that writes the state as stored is not for others to look at: every other member
    // write advances the digest once it applied, or may have.
    const before = operation === 'heartbeat' ? this.#current?.record : undefined;
    // (Nor one that changes only the digest it read or drops a suspect's name: answers are heartbeats of
    // every member. A write that names a new suspect is for everyone to read.)
    // Nor one that drops its asks (the givers answered them, and each answers an incarnation's asks once)
    // or its cold start's deal note (the members it dealt to have read it, or listed).
    const announces =
      !before || othersLookAt(withoutQuietDrops(memberStateOf(before))) !== othersLookAt(withoutQuietDrops(next)) || addsSuspect(memberStateOf(before), next) || addsNews(memberStateOf(before), next);
    try {
      const outcome = await this.#storage.putMember(this.#group, workerId, expectedVersion, next);
      this.#host.emit('storage', { operation, applied: outcome.status === 'applied' ? 1 : 0, conflict: outcome.status === 'conflict' ? 1 : 0, unknown: outcome.status === 'unknown' ? 1 : 0 });
      if (outcome.status === 'unknown') this.#host.report(outcome.error, operation);
      if (outcome.status !== 'conflict' && announces) this.announce([workerId]);
      return outcome;
    } catch (error) {
      this.#host.emit('storage', { operation, applied: 0, conflict: 0, unknown: 1 });
      // The group's members are kept in a layout this worker cannot share (an earlier release's, still
      // in use): nothing to retry, and joining anyway would split the group.
      if (error instanceof RecordFormatError) this.#host.fail(error);
      else {
        this.#host.report(error, operation);
        if (announces) this.announce([workerId]);
      }
      return { status: 'unknown', error: error instanceof LeaseholdError ? error : new StorageUnavailableError(`[${PKG}] ${operation} failed`, { cause: error }) };
    }
  }

  /** Runs member writes of this worker one after another. */
  #onMember(fn: () => Promise<void>): Promise<void> {
    const run = this.#memberChain.then(fn);
    this.#memberChain = run.catch(() => undefined);
    return run;
  }

  /** Checks this worker's own member in the roster just read; false (and expelled) when it is no longer its own. */
  checkOwnMember(membership: Incarnation): boolean {
    const own = this.view.get(this.#workerId) ?? null;
    if (this.view.isCorrupt(this.#workerId)) return true; // unreadable: the next heartbeat tells
    if (!this.#isOurs(membership, own)) {
      this.#expel(own);
      return false;
    }
    if (membership.record && own.version > membership.record.version) membership.record = own;
    return true;
  }

  // ---------------------------------------------------------------- reading the roster

  /**
   * The take tick's read of the members (DESIGN section 4, "Watchers and the roster digest"): the whole
   * roster when the digest moved since the last whole read, when that read is older than the refresh
   * interval, or before this worker is a member; otherwise only the members it watches and its own. A
   * store that says which members the digest's moves named (`getRosterMoves`) has a move read as those
   * members instead of the whole roster, while they are few and no suspect was named lately ("Reading
   * the digest's moves"). False when the coordinator must stop.
   */
  async readMembers(): Promise<boolean> {
    const storage = this.#storage;
    if (this.#digest.owes) await this.#digest.payOwed();
    if (!this.readsWatched()) return this.readRoster(await storage.getRoster(this.#group));
    const since = this.#digestSeen;
    const moves: RosterMoves =
      this.#rosterMoves && since !== null && this.#current !== null
        ? await (storage.getRosterMoves as (group: string, since: number) => Promise<RosterMoves>)(this.#group, since)
        : { digest: await (storage.getRosterDigest as (group: string) => Promise<number>)(this.#group), moved: null };
    const digest = moves.digest;
    if (this.#host.state() !== 'running') return false;
    const now = this.#clock.now();
    const refreshDue = now - this.#wholeReadAt >= this.#refreshMs();
    if (this.#current !== null && digest !== this.#digestSeen && !refreshDue && moves.moved !== null && this.#readsMoves(moves.moved, now)) {
      return this.#readMoves(moves.moved, digest, now);
    }
    if (this.#current === null || digest !== this.#digestSeen || refreshDue) {
      const roster = await storage.getRoster(this.#group);
      this.#digestSeen = digest;
      this.#wholeReadAt = now;
      this.#unannouncedSince = null;
      if (!this.readRoster(roster)) return false;
      // A suspect named that this worker has not answered: a heartbeat now says it read the digest.
      if (this.answers.read(digest, now) && this.#current !== null) this.#host.answer();
      // Not awaited: the tick's declarations and deals must not wait for the digest's advance.
      void this.#still.prompt();
      return true;
    }
    // A watched member whose new write a read between the ticks showed in the last half tick (its heartbeat
    // was due) is not read again: it is a lease duration from expiring, and what it writes meanwhile that
    // others must look at moves the digest.
    const ids = [...[...this.#watched].filter((workerId) => !this.#seenLately(workerId, now)), this.#workerId];
    const roster = await this.#getMembers(ids);
    if (!this.readRoster(roster, ids)) return false;
    void this.#still.prompt();
    await this.#watchUnannounced(this.view.signature() !== this.#rosterSignature, now);
    return true;
  }

  /** Whether a read in the last half tick showed the watched member `workerId` at a write it had not shown before. */
  #seenLately(workerId: string, now: number): boolean {
    const member = this.view.get(workerId);
    const seenAt = member === undefined ? undefined : this.view.writeWindow(member)?.seenAt;
    return seenAt !== undefined && seenAt > now - this.#takeIntervalMs / 2;
  }

  /**
   * Whether a move of the digest naming `moved` is read as those members: they are at most
   * {@link #movesUpTo}, and no suspect was named in the last two lease durations (a declarer judges who
   * answered on every member's record read after the naming, which only a whole read gives it).
   */
  #readsMoves(moved: readonly string[], now: number): boolean {
    return moved.length <= this.#movesUpTo() && !this.answers.namedSince(now - 2 * this.#leaseDurationMs);
  }

  /**
   * The most members a move is read as, one by one: half the group, at least a read's worth. Read by id
   * they cost an item each, as in a whole read, on the stores that have `getRosterMoves` (Redis and
   * PostgreSQL); past half the group one statement of them all costs less than several calls of 16.
   */
  #movesUpTo(): number {
    return Math.max(limits.maxWatchedMembers, Math.floor(this.view.size / 2));
  }

  /**
   * Reads the members the digest's moves since the last read named (`moved`), with the watched few and
   * this worker's own: the roster is as up to date as a whole read would leave it for everything a move
   * announces. A change the watched members show beyond the moves is announced as the watched read's is.
   */
  async #readMoves(moved: readonly string[], digest: number, now: number): Promise<boolean> {
    const named = this.#movesUnread ? [] : [...new Set(moved)];
    const namedSet = new Set(named);
    const rest = [...new Set([...this.#watched, this.#workerId])].filter((workerId) => !namedSet.has(workerId));
    const roster = await this.#getMembers([...named, ...rest]);
    if (this.#host.state() !== 'running') return false;
    this.#digestSeen = digest;
    if (named.length > 0 && !this.readRoster(roster, named, true)) return false;
    const announced = this.view.signature();
    if (!this.readRoster(roster, rest)) return false;
    if (this.answers.read(digest, now) && this.#current !== null) this.#host.answer();
    void this.#still.prompt();
    await this.#watchUnannounced(this.view.signature() !== announced, now);
    return true;
  }

  /**
   * A change the watched members show and the digest does not (its writer died before advancing it, or the
   * advance failed) is announced by the watcher, a tick later if the digest still does not show it: a
   * whole read, which the digest's move brings, clears it.
   */
  async #watchUnannounced(changed: boolean, now: number): Promise<void> {
    if (this.#unannouncedSince === null) {
      if (changed) this.#unannouncedSince = now;
    } else if (now - this.#unannouncedSince >= this.#takeIntervalMs * 0.9) {
      this.#unannouncedSince = null;
      await this.#digest.advance(null);
    }
  }

  /** Reads the named members, in as many calls as {@link limits}.maxWatchedMembers requires, sent together. */
  async #getMembers(workerIds: readonly string[]): Promise<Roster> {
    const storage = this.#storage as { getMembers(group: string, workerIds: readonly string[]): Promise<Roster> };
    if (workerIds.length <= limits.maxWatchedMembers) return storage.getMembers(this.#group, workerIds);
    const calls: Promise<Roster>[] = [];
    for (let at = 0; at < workerIds.length; at += limits.maxWatchedMembers) calls.push(storage.getMembers(this.#group, workerIds.slice(at, at + limits.maxWatchedMembers)));
    const rosters = await Promise.all(calls);
    return { group: this.#group, members: rosters.flatMap((roster) => roster.members), corrupt: rosters.flatMap((roster) => roster.corrupt) };
  }

  /**
   * How long a worker goes without listing when nothing signalled a change: `listIntervalMs`, stretched
   * in a group of watchers so that the group as a whole lists as often as ten members would (a listing of
   * 100,000 leases every ten minutes by each of 1,000 members would cost each 41 KB/s).
   */
  safetyListingMs(listIntervalMs: number): number {
    return this.readsWatched() ? listIntervalMs * Math.max(1, this.view.size / 10) : listIntervalMs;
  }

  /** Whether this worker reads only the digest and its watched members: the store has them and the group is larger than `wholeRosterUpTo`. */
  readsWatched(): boolean {
    return this.#watcherReads && this.view.size + this.view.corruptCount > this.#wholeRosterUpTo;
  }

  /** How long a worker goes without reading the whole roster when the digest does not move: 30 take ticks, or a twentieth of a tick per member. */
  #refreshMs(): number {
    return Math.max(30, this.view.size / 20) * this.#takeIntervalMs;
  }

  /** Advances the roster digest after a member write others must look at (`DigestAdvances.announce`). */
  announce(workerIds: readonly string[] | null): void {
    this.#digest.announce(workerIds);
  }

  /**
   * Takes in a roster read, whole or of the members `only` names: observes each member's version; false
   * when the coordinator must stop. After a whole read, or a read of the digest's moves (`moves`) that
   * changed who is alive, the watched members are chosen again from the ring.
   */
  readRoster(roster: Roster, only?: readonly string[], moves = false): boolean {
    const newer = roster.members.find((member) => member.format > RECORD_FORMAT);
    if (newer) {
      this.#host.refuseFormat(`member ${describeValue(newer.workerId)}`, newer.format);
      return false;
    }
    const now = this.#clock.now();
    for (const error of only ? this.view.readSome(roster, only, now) : this.view.read(roster, now)) this.#host.report(error, 'roster');
    if (this.#watcherReads && (!only || (moves && this.view.othersChangedAt === now))) {
      const ringed = [...this.view.values()].filter((member) => member.workerId !== this.#workerId && (this.#ringKeepsTheDead || member.status === 'alive'));
      // With failure domains, the ring spreads each domain's members (`ringOrder`): this worker's own as the
      // others read it, from its record (its option until its first write was read back).
      const own: Record<string, string> = this.#failureDomain === undefined ? {} : { [FAILURE_DOMAIN_FIELD]: this.#failureDomain };
      const self = this.view.get(this.#workerId) ?? { workerId: this.#workerId, metadata: own };
      const watched = new Set(watchedBy(this.#workerId, ringed.map((member) => member.workerId), this.#watchers, this.#domainsIgnored ? undefined : domainsOf([...ringed, self])));
      const moved = watched.size !== this.#watched.size || [...watched].some((workerId) => !this.#watched.has(workerId));
      this.#watched = watched;
      if (moved) this.#host.watchedChanged();
    }
    this.#armExpiry();
    this.#still.arm();
    this.#due.arm();
    return true;
  }

  /**
   * Wakes the take loop at the moment the first watched member would expire, if that comes before the
   * next tick: a crashed worker is declared dead a lease duration after it was first seen still, not up
   * to a take tick later.
   */
  #armExpiry(): void {
    const earliest = this.view.nextExpiry(this.readsWatched() ? this.#watched : undefined);
    this.#expiryTimer = wakeAt(this.#wakeParts, this.#expiryTimer, earliest, () => this.#host.wakeTake());
  }

  #expiryTimer: WakeTimer | null = null;
}
