/**
 * What a stopping member's leave says of the leases it handed over (DESIGN section 4, "A leave that names
 * its handovers"). Without a change feed nothing tells a recipient which leases a stopping member wrote to
 * it: every survivor listed the whole group for it (100 x 10,000: a million lease items read per graceful
 * stop). The leave is a member write every survivor reads anyway (it moves the roster digest), so it
 * carries them: each recipient reads the few leases it is named for, by key, and nobody lists for a leave
 * that named every lease it had.
 *
 * The note is one metadata field of the member record (metadata round-trips on every adapter, and a worker
 * of an earlier release ignores it and lists, as before). It must fit the member's 2,048 bytes with the
 * rest of the record, so it is compressed: the recipients are named by a 32-bit hash of their worker id
 * (a member whose hash collides with a recipient's reads a lease that is not its own, and leaves it), the
 * keys written out, the whole deflated. 100 Kinesis shard ids to 99 members take about 1.3 KB, 100
 * multi-stream keys of 90 bytes about 1.4 KB. What does not fit is left out, and the note then says it is
 * not complete: the survivors list for that leave, as they did before.
 */
import { deflateRawSync, inflateRawSync } from 'node:zlib';
import type { MemberRecord } from '../storage.js';

/** Member metadata, written by a member's leave only: the leases it handed over, compressed. */
export const HANDED_FIELD = 'leasehold.handed';

/** The largest note read back: a note is at most 2 KB compressed; one inflating past this is not ours. */
const MAX_INFLATED_BYTES = 256 * 1024;

/** A recipient's name in a note: FNV-1a of its worker id's UTF-8 bytes, 32 bits, in base 36. */
export function recipientTag(workerId: string): string {
  let hash = 0x811c9dc5;
  for (const byte of Buffer.from(workerId, 'utf8')) {
    hash ^= byte;
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash.toString(36);
}

/** A note as read: the leases named for each recipient tag, and whether they are every lease the member had at its leave. */
export interface LeaveNote {
  readonly complete: boolean;
  readonly count: number;
  readonly byTag: ReadonlyMap<string, readonly string[]>;
}

function encode(groups: ReadonlyArray<readonly [string, readonly string[]]>, complete: boolean): string {
  const document = { c: complete ? 1 : 0, h: groups.map(([tag, keys]) => [tag, ...keys]) };
  return deflateRawSync(Buffer.from(JSON.stringify(document), 'utf8'), { level: 9 }).toString('base64');
}

/**
 * The note for a leave that handed `handed` (lease keys by recipient worker id): as many recipients as
 * `fits` accepts, the whole note complete only when `complete` (the member handed every lease it had, and
 * wrote none free) and every recipient fits. `undefined` when not one recipient fits, or none was handed.
 */
export function writeNote(handed: ReadonlyMap<string, readonly string[]>, complete: boolean, fits: (value: string) => boolean): string | undefined {
  const groups = [...handed]
    .filter(([, keys]) => keys.length > 0)
    .map(([workerId, keys]) => [recipientTag(workerId), [...keys].sort()] as const)
    .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  if (groups.length === 0) return undefined;
  const whole = encode(groups, complete);
  if (fits(whole)) return whole;
  // The largest prefix of recipients that fits, by bisection (each try deflates a few KB).
  let low = 0;
  let high = groups.length - 1;
  let best: string | undefined;
  while (low < high) {
    const mid = Math.ceil((low + high) / 2);
    const value = encode(groups.slice(0, mid), false);
    if (fits(value)) {
      best = value;
      low = mid;
    } else {
      high = mid - 1;
    }
  }
  return best;
}

/** The note a member's metadata holds, or `undefined` when it holds none or one that cannot be read (another writer's, or damaged). */
export function readNote(value: string | undefined): LeaveNote | undefined {
  if (value === undefined) return undefined;
  let document: unknown;
  try {
    document = JSON.parse(inflateRawSync(Buffer.from(value, 'base64'), { maxOutputLength: MAX_INFLATED_BYTES }).toString('utf8'));
  } catch {
    return undefined;
  }
  if (typeof document !== 'object' || document === null) return undefined;
  const { c, h } = document as { c?: unknown; h?: unknown };
  if ((c !== 0 && c !== 1) || !Array.isArray(h)) return undefined;
  const byTag = new Map<string, string[]>();
  let count = 0;
  for (const group of h) {
    if (!Array.isArray(group) || group.length < 2 || !group.every((part) => typeof part === 'string' && part.length > 0)) return undefined;
    const [tag, ...keys] = group as string[];
    byTag.set(tag!, [...(byTag.get(tag!) ?? []), ...keys]);
    count += keys.length;
  }
  return { complete: c === 1, count, byTag };
}

/**
 * The notes of the leaves this worker has read: which leases they name for it, and how many they name in
 * all, for the shortfall (`Taking`): the leases a leave handed over are on their way to members whose
 * counts do not show them yet, and are not missing.
 */
export class NotesRead {
  readonly #tag: string;
  readonly #workerId: string;
  /** Unsafe: a note's count stands for leases on their way for as long as the note is read. */
  readonly #trusted: boolean;
  /** The notes read, by member: of which incarnation, how many leases they name (in all and by recipient tag), and when this worker first read each. */
  readonly #read = new Map<string, { incarnation: string; count: number; byTag: ReadonlyMap<string, number>; at: number }>();
  /** Recipient tags of the worker ids asked about, so that a tick hashes each id once. */
  readonly #tags = new Map<string, string>();

  constructor(workerId: string, trusted: boolean) {
    this.#workerId = workerId;
    this.#tag = recipientTag(workerId);
    this.#trusted = trusted;
  }

  /**
   * Reads the notes of the dead members of `roster` not read yet, and forgets those of members removed; returns the lease keys they name for
   * this worker (to read by key: a key named for another member whose tag is this worker's is read and
   * left, as the lease names its owner).
   */
  read(roster: { values(): Iterable<MemberRecord>; has(workerId: string): boolean }, now: number): string[] {
    const mine: string[] = [];
    for (const member of roster.values()) {
      if (member.status !== 'dead' || member.workerId === this.#workerId) continue;
      const value = member.metadata[HANDED_FIELD];
      if (value === undefined || this.#read.get(member.workerId)?.incarnation === member.incarnation) continue;
      const note = readNote(value);
      const byTag = new Map([...(note?.byTag ?? [])].map(([tag, keys]) => [tag, keys.length]));
      this.#read.set(member.workerId, { incarnation: member.incarnation, count: note?.count ?? 0, byTag, at: now });
      mine.push(...(note?.byTag.get(this.#tag) ?? []));
    }
    for (const workerId of this.#read.keys()) if (!roster.has(workerId)) this.#read.delete(workerId);
    return mine;
  }

  /**
   * How many leases the notes first read within `windowMs` before `now` name for `workerId`: leases on their
   * way to it, which its count may not show yet. (A tag shared with another worker counts its leases too:
   * the member then looks fuller than it is for the window, which delays an offer, never a take.)
   */
  namedFor(workerId: string, now: number, windowMs: number): number {
    if (this.#read.size === 0) return 0;
    let tag = this.#tags.get(workerId);
    if (tag === undefined) {
      tag = recipientTag(workerId);
      if (this.#tags.size >= 4_096) this.#tags.clear();
      this.#tags.set(workerId, tag);
    }
    let count = 0;
    for (const note of this.#read.values()) if (this.#trusted || now - note.at < windowMs) count += note.byTag.get(tag) ?? 0;
    return count;
  }

  /** How many leases the notes first read within `windowMs` before `now` name: leases on their way to their recipients. */
  onTheirWay(now: number, windowMs: number): number {
    let count = 0;
    for (const note of this.#read.values()) if (this.#trusted || now - note.at < windowMs) count += note.count;
    return count;
  }
}
