/**
 * What a member that just joined asks of the members already there (DESIGN section 4, "A join that names
 * its givers"). A join moved the roster, and every member listed the whole group for it to hand the newcomer
 * its share: at 100 x 10,000 a million lease items read for one worker added, at 1,000 x 100,000 a hundred
 * million. The newcomer lists anyway (it must learn what it may take): from that listing it computes the
 * plan of moves every member would compute, and writes into its member record how many leases each member
 * due to give it should hand it. The members read that record anyway (the write moves the roster digest);
 * each hands over what it is named for from the leases it holds, and nobody else lists for the join.
 *
 * The asks are one metadata field, in the leave note's format (recipient tags, the whole deflated: see
 * leave-notes.ts): a giver's tag with the count as its one entry. About 0.75 KB for 99 givers (180 fit), within the
 * member's 2,048 bytes; the givers that do not fit (the last by tag) are left out, and the newcomer asks
 * again, or steals, for what they would have handed it. The field is dropped a few ticks later without moving the
 * digest: a heartbeat stays within one write unit.
 */
import type { MemberRecord } from '../storage.js';
import { readNote, recipientTag, writeNote } from './leave-notes.js';

/** Member metadata, written by a newcomer's first listing only: how many leases it asks of each giver. */
export const ASKS_FIELD = 'leasehold.asks';

/**
 * How long, in take ticks, a newcomer waits for its givers before it asks again or the usual way (a
 * listing and steal requests, for what a giver refused): the givers read the asks at their next tick, at
 * most a tick after them, and hand over at once, and the change feed, or the newcomer's next listing,
 * brings the leases. (A tick and a half at first: three joins 1-3 s apart balanced later, the newcomers
 * refused by givers another had asked first waiting half a tick more for each round.)
 */
export const ASKED_TICKS = 1;

/**
 * How long, in take ticks from reading them, the members count what a newcomer asked for as on its way to
 * it: a tick for the givers to hand over, a tick for its count to show them, and time for the newcomer's
 * own steal requests (after `ASKED_TICKS`) to be answered before anyone lists to offer it leases. No
 * longer than its record carries them: it drops them when it stops waiting, and what had not come by
 * then was refused (counted on for the whole window, a refusal hid a shortfall, and without a change feed
 * a lease offered to a member that lists only for a shortfall waited for the window to pass).
 */
export const ASKS_TICKS = 4;

/** The asks field for `givers` (counts by worker id), as many givers as `fits` accepts; `undefined` when none fits or none gives. */
export function writeAsks(givers: ReadonlyMap<string, number>, fits: (value: string) => boolean): string | undefined {
  return writeNote(new Map([...givers].filter(([, count]) => count > 0).map(([workerId, count]) => [workerId, [String(count)]])), true, fits);
}

/** The asks a member's metadata holds, by giver tag; `undefined` when none, or unreadable (another writer's, or damaged). */
export function readAsks(value: string | undefined): { byTag: ReadonlyMap<string, number>; total: number } | undefined {
  const note = readNote(value);
  if (note === undefined) return undefined;
  const byTag = new Map<string, number>();
  let total = 0;
  // Two givers whose tags collide are each asked for both counts: the members' counts correct it later.
  for (const [tag, counts] of note.byTag) {
    const n = counts.reduce((sum, count) => sum + Number(count), 0);
    if (!Number.isSafeInteger(n) || n <= 0 || counts.some((count) => !/^[1-9][0-9]{0,8}$/.test(count))) return undefined;
    byTag.set(tag, n);
    total += n;
  }
  return { byTag, total };
}

/**
 * The asks this worker has read: which it answered (each once per newcomer incarnation), and how many
 * leases each newcomer asked for in all, for the counts others balance on: what it asked for is on its
 * way to it, from members whose counts already show it gone.
 */
export class AsksRead {
  readonly #tag: string;
  readonly #workerId: string;
  /** Unsafe: asks stand for leases on their way for as long as they are read, and after they are dropped. */
  readonly #trusted: boolean;
  /** By newcomer: its incarnation and asks as written, how many leases they ask for in all, and when this worker first read them. */
  readonly #read = new Map<string, { incarnation: string; value: string | undefined; total: number; at: number }>();
  /** Newcomers whose asks named this worker, by worker id: when this worker read the last of them. */
  readonly #askedMe = new Map<string, number>();
  /** Newcomers seen without asks yet, by worker id: the incarnation and when this worker first saw it. */
  readonly #joined = new Map<string, { incarnation: string; at: number }>();

  constructor(workerId: string, trusted: boolean) {
    this.#workerId = workerId;
    this.#tag = recipientTag(workerId);
    this.#trusted = trusted;
  }

  /**
   * Reads the asks of the live members of `roster` not read yet (a newcomer asks again, in other words, for
   * what its givers refused: each asks is answered once); returns how many leases each asks of this worker. A member seen for the first time since a
   * join (`joined`) is remembered as a newcomer whose asks may still come.
   */
  read(roster: { values(): Iterable<MemberRecord>; has(workerId: string): boolean }, now: number, joined: ReadonlySet<string>): { to: MemberRecord; count: number }[] {
    const mine: { to: MemberRecord; count: number }[] = [];
    for (const member of roster.values()) {
      if (member.status !== 'alive' || member.workerId === this.#workerId) continue;
      if (joined.has(member.workerId) && this.#joined.get(member.workerId)?.incarnation !== member.incarnation) this.#joined.set(member.workerId, { incarnation: member.incarnation, at: now });
      const value = member.metadata[ASKS_FIELD];
      const seen = this.#read.get(member.workerId);
      if (seen?.incarnation === member.incarnation && seen.value === value) continue;
      // Asks dropped: the newcomer waits for no more of them (what has not come by then was refused, or is
      // in a handover that its giver's count no longer shows either), and nothing stands on its way to it.
      if (value === undefined) {
        if (seen?.incarnation === member.incarnation && !this.#trusted) this.#read.set(member.workerId, { ...seen, value, total: 0 });
        continue;
      }
      const asks = readAsks(value);
      this.#read.set(member.workerId, { incarnation: member.incarnation, value, total: (asks?.total ?? 0) + member.held, at: now });
      const count = asks?.byTag.get(this.#tag) ?? 0;
      if (count > 0) {
        mine.push({ to: member, count });
        this.#askedMe.set(member.workerId, now);
      }
    }
    for (const workerId of this.#read.keys()) if (!roster.has(workerId)) this.#read.delete(workerId);
    for (const workerId of this.#joined.keys()) if (!roster.has(workerId)) this.#joined.delete(workerId);
    for (const workerId of this.#askedMe.keys()) if (!roster.has(workerId)) this.#askedMe.delete(workerId);
    return mine;
  }

  /**
   * How many leases `member` asked for within `windowMs` before `now` beyond what its count shows: on their
   * way to it. (What it asked for is counted on top of what it held when this worker read the asks.) (A member that asked more than it took, its givers' answers refused, looks fuller than it is
   * for the window: that delays an offer to it, never a take.)
   */
  onTheirWayTo(member: MemberRecord, now: number, windowMs: number): number {
    const read = this.#read.get(member.workerId);
    if (read === undefined || read.incarnation !== member.incarnation || (!this.#trusted && now - read.at >= windowMs)) return 0;
    return Math.max(0, read.total - member.held);
  }

  /** Whether asks of the member `workerId` that named this worker were read within `windowMs` before `now` (by any incarnation: a member back under the same id asks anew). */
  askedMeLately(workerId: string, now: number, windowMs: number): boolean {
    const at = this.#askedMe.get(workerId);
    return at !== undefined && now - at < windowMs;
  }

  /**
   * Whether `member` joined within `windowMs` before `now` and has not asked yet: its first listing, and its
   * asks, are a tick or two away, and members above it do not list to offer it leases meanwhile.
   */
  mayStillAsk(member: MemberRecord, now: number, windowMs: number): boolean {
    const joined = this.#joined.get(member.workerId);
    if (joined === undefined || joined.incarnation !== member.incarnation || now - joined.at >= windowMs) return false;
    return this.#read.get(member.workerId)?.incarnation !== member.incarnation;
  }
}
