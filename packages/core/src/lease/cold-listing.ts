/**
 * A large group's cold start (DESIGN section 4, taking, step 3): the listing a worker asks for while the
 * members are still joining, kept for the deal once they stop, with what the worker knew of the group's
 * leases when it asked, so that a change since (a lease created, released or handed on, announced on the
 * change feed, by this worker, or in a member's record) sends it to list again.
 */
import type { LeaseListing } from '../storage.js';
import type { Incarnation } from './membership.js';
import type { LeaseParts } from './parts.js';

interface Asked {
  /** The listing; `null` once it failed (reported). */
  readonly listing: Promise<LeaseListing | null>;
  /** When it was asked for. */
  readonly at: number;
  readonly membership: Incarnation;
  /** This worker's count of the lease changes it heard of, when it asked. */
  readonly news: number;
  /** Each member's count of the lease changes it announced in the roster, as read when it asked. */
  readonly changes: ReadonlyMap<string, number>;
}

export interface ColdListingOptions {
  readonly parts: LeaseParts;
  readonly report: (error: unknown, operation: string) => void;
  /** Aborts when the coordinator's stop begins: a failure then is not reported. */
  readonly stopping: AbortSignal;
  /** Unsafe: the listing is dealt from whatever changed in the group's leases since it was asked for. */
  readonly ignoresNews: boolean;
}

/** The early listing of a large group's cold start, and the lease changes this worker heard of. */
export class ColdListing {
  readonly #parts: LeaseParts;
  readonly #report: ColdListingOptions['report'];
  readonly #stopping: AbortSignal;
  readonly #ignoresNews: boolean;
  #asked: Asked | null = null;
  /** How many changes of the group's leases this worker heard of (the change feed, its own notes). */
  #news = 0;

  constructor(options: ColdListingOptions) {
    this.#parts = options.parts;
    this.#report = options.report;
    this.#stopping = options.stopping;
    this.#ignoresNews = options.ignoresNews;
  }

  /** A change of the group's leases this worker heard of: a listing asked for before it is not dealt from. */
  heardOfChange(): void {
    this.#news++;
  }

  /** Asks for the listing now, unless it did already, noting what this worker knows of the group's lease changes. */
  ask(now: number, membership: Incarnation): void {
    if (this.#asked !== null) return;
    const listing = this.#parts.storage.listLeases(this.#parts.group).then(
      (answer) => answer,
      (error: unknown) => {
        if (!this.#stopping.aborted) this.#report(error, 'list');
        return null;
      },
    );
    const changes = new Map([...this.#parts.view.values()].map((member) => [member.workerId, member.changes]));
    this.#asked = { listing, at: now, membership, news: this.#news, changes };
  }

  /**
   * The listing asked for, once, if it was asked for in `membership`: awaited through `wait` (a stop gives
   * it up), then the roster read again through `readRoster`, so that owners are judged on a roster read
   * after it; `null` when there is none, it failed, or it no longer tells the group's leases (see `#stillTells`).
   */
  async take(membership: Incarnation, wait: <T>(read: Promise<T>) => Promise<T>, readRoster: () => Promise<boolean>): Promise<{ listing: LeaseListing; at: number } | null | 'roster-unread'> {
    const asked = this.#asked;
    this.#asked = null;
    if (asked === null || asked.membership !== membership) return null;
    const listing = await wait(asked.listing);
    if (listing === null) return null;
    if (!(await readRoster())) return 'roster-unread';
    return this.#stillTells(asked) ? { listing, at: asked.at } : null;
  }

  /**
   * Whether the listing still tells the group's leases: this worker holds none yet, heard of no change since
   * it asked, and no member announced one in the roster (a member new since announced none). Otherwise the
   * worker lists again, as it would have without it. Members that dealt a moment earlier and hold their
   * portions already do not make it stale: the deal from it is theirs, and this worker's portion is what it
   * takes (a take of a lease written since conflicts, as any take on an older listing).
   */
  #stillTells(asked: Asked): boolean {
    if (this.#ignoresNews) return true;
    if (asked.news !== this.#news || this.#parts.hold.countHeld() > 0) return false;
    for (const member of this.#parts.view.values()) if (member.changes !== (asked.changes.get(member.workerId) ?? 0)) return false;
    return true;
  }
}
