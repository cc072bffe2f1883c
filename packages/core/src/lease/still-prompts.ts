/**
 * A watcher's suspects (DESIGN section 4, "Who answered the digest"): the watched members it sees standing
 * still for {@link PROMPT_STILL} of their expiry are named, at a digest advanced for them, once for each write
 * seen still; every member answers with a heartbeat, so that whoever declares the still member dead, about
 * 0.3 of a lease duration later, can tell the members that died with it (no answer) from those alive.
 * Without it, the first deaths of a crash are declared when a member dead for 0.35 of a lease duration and
 * one alive between two heartbeats 0.65 apart look alike. The membership (membership.ts) owns one; this
 * keeps what it was named for and the wake-up at the next member's moment.
 */
import type { MemberRecord } from '../storage.js';
import { ANSWER_TICKS, writeIdentity, type Answers } from './answers.js';
import type { RosterView } from './roster-view.js';
import { wakeAt, type WakeParts, type WakeTimer } from './wake-timer.js';

/** A watcher names a watched member seen standing still for this part of its expiry as a suspect (a heartbeat comes every 0.65). */
export const PROMPT_STILL = 0.7;

/** What the suspects need of the membership. */
export interface StillPromptsParts extends WakeParts {
  readonly renewIntervalMs: number;
  readonly view: RosterView;
  readonly answers: Answers;
  /** The members this worker watches now. */
  watched(): ReadonlySet<string>;
  /** Whether this worker reads its watched few (a group larger than the whole reads'). */
  readsWatched(): boolean;
  /** Whether this worker is a member now. */
  isMember(): boolean;
  /** How long `member` may stand still before it expires, as this worker judges it. */
  expiryMs(member: MemberRecord): number;
  /** Advances the digest naming nobody, after the advances already on their way: the value written, or `undefined` when none was. */
  advanceDigest(): Promise<number | undefined>;
  /** Reads the named members (watched ones whose moment came) into the view, in turn with the take tick's reads; false when the coordinator must stop. */
  read(workerIds: readonly string[]): Promise<boolean>;
  /** The suspects named (the coordinator notes them for its deals). */
  suspected(members: readonly MemberRecord[]): void;
  /** Writes this worker's member record soon, naming the suspects. */
  answer(): void;
  report(error: unknown, operation: string): void;
}

export class StillPrompts {
  readonly #parts: StillPromptsParts;
  /** The watched members this worker tried to name at the write it saw standing still (once per write; one whose advance of the digest failed is tried again at the next read). */
  readonly #promptedFor = new Map<string, string>();
  #timer: WakeTimer | null = null;

  constructor(parts: StillPromptsParts) {
    this.#parts = parts;
  }

  /** Names as suspects the watched members whose moment came (see above), and arms the wake-up at the next one's. */
  async prompt(): Promise<void> {
    const parts = this.#parts;
    if (!parts.isMember() || !parts.running() || !parts.readsWatched()) return;
    const watched = parts.watched();
    for (const workerId of this.#promptedFor.keys()) if (!watched.has(workerId)) this.#promptedFor.delete(workerId);
    const due: MemberRecord[] = [];
    for (const workerId of watched) {
      const member = parts.view.get(workerId);
      const at = this.#momentOf(workerId);
      const readAt = parts.view.readAt(workerId);
      if (member === undefined || at === undefined || readAt === undefined || readAt < at) continue;
      this.#promptedFor.set(workerId, writeIdentity(member));
      due.push(member);
    }
    this.arm();
    if (due.length === 0) return;
    parts.suspected(due);
    // The digest first: whoever reads a digest at least this one read it after the member stood still.
    const digest = await parts.advanceDigest();
    if (digest === undefined) {
      // Tried again at the next read (the store is failing: at most once a tick).
      for (const member of due) this.#promptedFor.delete(member.workerId);
      return;
    }
    parts.answers.name(due, digest, parts.clock.now());
    // Named in this worker's record, whose write moves the digest again: everyone reads it at its next tick.
    parts.answer();
  }

  /** Wakes at the first watched member's moment to be named, if it comes before the next tick, to read it and name it. */
  arm(): void {
    const parts = this.#parts;
    let earliest = Infinity;
    if (parts.readsWatched()) {
      for (const workerId of parts.watched()) {
        const at = this.#momentOf(workerId);
        if (at !== undefined) earliest = Math.min(earliest, at);
      }
    }
    this.#timer = wakeAt(parts, this.#timer, earliest, () => void this.#check());
  }

  /** The moment of the member `workerId` names, as {@link #moment}; `undefined` for one not in the view. */
  #momentOf(workerId: string): number | undefined {
    const member = this.#parts.view.get(workerId);
    return member === undefined ? undefined : this.#moment(member);
  }

  /**
   * When `member`, still at the write this worker last read, is to be named: `undefined` for a member not
   * alive, named already at that write, or whose naming could not be answered before it expires (a
   * heartbeat interval close to the lease duration: its declaration's own move prompts then).
   */
  #moment(member: MemberRecord): number | undefined {
    const parts = this.#parts;
    if (member.status !== 'alive' || this.#promptedFor.get(member.workerId) === writeIdentity(member)) return undefined;
    const expiryMs = parts.expiryMs(member);
    // Never before a member has missed a heartbeat of this worker's pace.
    const promptMs = Math.max(PROMPT_STILL * expiryMs, parts.renewIntervalMs + 0.05 * expiryMs);
    if (promptMs > expiryMs - ANSWER_TICKS * parts.takeIntervalMs) return undefined;
    return parts.view.stillUntil(member, promptMs);
  }

  /** Reads the watched members whose moment to be named came, and names those still standing still. */
  async #check(): Promise<void> {
    const parts = this.#parts;
    const now = parts.clock.now();
    const due = [...parts.watched()].filter((workerId) => {
      const at = this.#momentOf(workerId);
      return at !== undefined && at <= now;
    });
    if (due.length === 0 || !parts.isMember() || !parts.running()) return;
    try {
      if (!(await parts.read(due)) || !parts.running()) return;
      await this.prompt();
    } catch (error) {
      parts.report(error, 'roster');
    }
  }
}
