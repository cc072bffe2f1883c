/**
 * A watcher's reads at its watched members' heartbeats (DESIGN section 4, "Reading a heartbeat when it is
 * due"). A member is declared dead a lease duration after its watcher first saw its last write; read only
 * at the take ticks, that sight comes up to a tick (0.2 of a lease duration) after the write, and a crash's
 * declarations, and its take-over, with it. The heartbeats come at a steady pace, so a watcher that saw a
 * write knows, within the pace's jitter, when the next is due: it reads that member again from the earliest
 * moment the next heartbeat can come, every {@link DUE_STEP} of a tick, until a read shows it or its latest
 * moment has passed. Its sight of each heartbeat then comes within a step of the write, and its expiry
 * judgement of the member follows it as closely; a member that misses its heartbeat is read no more than
 * that until it writes again. The membership (membership.ts) owns one; this keeps the wake-up at the next
 * member's moment.
 */
import type { MemberRecord } from '../storage.js';
import type { RosterView } from './roster-view.js';
import { TICK_JITTER } from './timing.js';
import { wakeAt, type WakeParts, type WakeTimer } from './wake-timer.js';

/** A watched member whose heartbeat is due is read every this part of a take tick until a read shows it. */
export const DUE_STEP = 0.25;

/** What the reads at heartbeats need of the membership. */
export interface DueReadsParts extends WakeParts {
  /** How often the members heartbeat: this worker's pace, which a group shares. */
  readonly renewIntervalMs: number;
  readonly view: RosterView;
  /** The members this worker watches now. */
  watched(): ReadonlySet<string>;
  /** Whether this worker reads its watched few (a group larger than the whole reads'). */
  readsWatched(): boolean;
  /** Whether this worker is a member now. */
  isMember(): boolean;
  /** Reads the named members into the view, after any read of the roster already under way. */
  read(workerIds: readonly string[]): Promise<boolean>;
  report(error: unknown, operation: string): void;
}

export class DueReads {
  readonly #parts: DueReadsParts;
  /** Unsafe: no read at a heartbeat's moment; watched members are read at the take ticks only. */
  readonly #skipped: boolean;
  #timer: WakeTimer | null = null;
  /**
   * Per watched member, the write its pace may run from: the last write seen that may be a heartbeat of its
   * pace. A write seen before the pace's next heartbeat could come is one on top of it: an answer to a
   * suspect named, after which the pace's heartbeat still comes when it would have, or a note of change,
   * from which the pace runs again. The member is read for the heartbeat after either.
   */
  readonly #pace = new Map<string, { readonly incarnation: string; readonly after: number; readonly seenAt: number }>();

  constructor(parts: DueReadsParts, skipped: boolean) {
    this.#parts = parts;
    this.#skipped = skipped;
  }

  /** The time between two reads of a member whose heartbeat is due. */
  get stepMs(): number {
    return this.#parts.takeIntervalMs * DUE_STEP;
  }

  /** Wakes at the first watched member's moment to be read, if it comes before the next tick. */
  arm(): void {
    const parts = this.#parts;
    if (this.#skipped || !parts.readsWatched()) return;
    const watched = parts.watched();
    for (const workerId of this.#pace.keys()) if (!watched.has(workerId)) this.#pace.delete(workerId);
    let earliest = Infinity;
    for (const workerId of watched) earliest = Math.min(earliest, this.#momentOf(workerId) ?? Infinity);
    this.#timer = wakeAt(parts, this.#timer, earliest, () => void this.#read());
  }

  /**
   * When the member `workerId` names is next read for its heartbeat: a step after its last read, from the
   * earliest moment the heartbeat after a write its pace may run from (the last write seen, and the one
   * before it when that came on top) can come, a period at the pace's fastest after that write, which came
   * after the read before the one that showed it; and no later than the latest moment that heartbeat can
   * come and a step. `undefined` for a member not alive or not read.
   */
  #momentOf(workerId: string): number | undefined {
    const parts = this.#parts;
    const member: MemberRecord | undefined = parts.view.get(workerId);
    if (member === undefined || member.status !== 'alive') return undefined;
    const window = parts.view.writeWindow(member);
    const readAt = parts.view.readAt(workerId);
    if (window === undefined || readAt === undefined) return undefined;
    const step = this.stepMs;
    // A write seen a tick or more after the read before, or at its first sight (a member this worker has
    // just begun to watch): taken to have come a tick before its sight, the take ticks' own lag.
    const seen = { incarnation: member.incarnation, after: Math.max(window.after ?? -Infinity, window.seenAt - parts.takeIntervalMs), seenAt: window.seenAt };
    const kept = this.#pace.get(workerId);
    const onTop = kept !== undefined && kept.incarnation === seen.incarnation && seen.seenAt < kept.after + (1 - TICK_JITTER) * parts.renewIntervalMs;
    if (!onTop) this.#pace.set(workerId, seen);
    let moment: number | undefined;
    for (const write of onTop ? [kept, seen] : [seen]) {
      const at = Math.max(write.after + (1 - TICK_JITTER) * parts.renewIntervalMs, readAt + step);
      if (at <= write.seenAt + (1 + TICK_JITTER) * parts.renewIntervalMs + step) moment = Math.min(moment ?? Infinity, at);
    }
    return moment;
  }

  /** Reads the watched members whose moment came (and those within half a step of it, in the same call). */
  async #read(): Promise<void> {
    const parts = this.#parts;
    if (!parts.isMember() || !parts.running() || !parts.readsWatched()) return;
    const soon = parts.clock.now() + this.stepMs / 2;
    const due = [...parts.watched()].filter((workerId) => (this.#momentOf(workerId) ?? Infinity) <= soon);
    if (due.length > 0) {
      try {
        await parts.read(due);
      } catch (error) {
        parts.report(error, 'roster');
      }
    }
    this.arm();
  }
}
