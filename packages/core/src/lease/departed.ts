/**
 * The members long dead, and their removal (DESIGN section 4, "A join that names its givers"): a member
 * ten lease durations dead, as this worker saw it, is removed at a take tick by its first watcher when its
 * leave named every lease it handed over (no lease names it), or at a listing by whoever lists once no
 * listed lease names it, so that workers that come and go (new ids each deploy) do not fill the roster.
 */
import type { LeaseListing, MemberRecord } from '../storage.js';
import { HANDED_FIELD, readNote } from './leave-notes.js';
import type { LeaseParts } from './parts.js';
import type { TakingHost } from './taking.js';
import { domainsOf, FAILURE_DOMAIN_FIELD, firstWatcherOf, type DomainOf } from './watchers.js';

export interface DepartedOptions {
  readonly parts: LeaseParts;
  readonly host: Pick<TakingHost, 'state' | 'emit' | 'report'>;
  /** Unsafe: a leave's note is taken for one naming every lease the member had. */
  readonly noteTrusted: boolean;
  /** Has this worker list at its next take tick. */
  readonly list: () => void;
}

/** The members this worker has seen dead, and the removal of those long dead. */
export class Departed {
  readonly #parts: LeaseParts;
  readonly #host: Pick<TakingHost, 'state' | 'emit' | 'report'>;
  readonly #noteTrusted: boolean;
  readonly #list: () => void;
  /**
   * Dead members, when this worker first saw them dead at that version, whether it listed to remove one,
   * and whether the leave's note at that version names every lease the member had (read once it is due).
   */
  readonly #deadSince = new Map<string, { version: number; at: number; listed: boolean; complete?: boolean }>();

  constructor(options: DepartedOptions) {
    this.#parts = options.parts;
    this.#host = options.host;
    this.#noteTrusted = options.noteTrusted;
    this.#list = options.list;
  }

  /** How many dead members this worker keeps track of, for the diagnostics. */
  get size(): number {
    return this.#deadSince.size;
  }

  /**
   * The members dead for ten lease durations, as this worker saw them (from the first take tick that read
   * them dead, at that version): due for removal, so that workers that come and go (new ids each deploy) do
   * not fill the roster. A removed worker id that joins again gets a version above any it had, so nobody
   * confuses it with the one removed.
   */
  #longDead(now: number): MemberRecord[] {
    const due: MemberRecord[] = [];
    for (const member of this.#parts.view.values()) {
      if (member.status !== 'dead') {
        this.#deadSince.delete(member.workerId);
        continue;
      }
      const since = this.#deadSince.get(member.workerId);
      if (since === undefined || since.version !== member.version) this.#deadSince.set(member.workerId, { version: member.version, at: now, listed: false });
      else if (now - since.at >= this.#parts.leaseDurationMs * 10 && member.workerId !== this.#parts.workerId) due.push(member);
    }
    for (const workerId of this.#deadSince.keys()) if (!this.#parts.view.has(workerId)) this.#deadSince.delete(workerId);
    return due;
  }

  /**
   * At a take tick: removes the long dead members whose first watcher this worker is (one member for each,
   * not every member) when their leave named every lease they had, handed over, so that no lease names them;
   * for any other, lists once, to see that no lease names it. Neither a join nor a leave with such a note
   * brings a listing, and the safety-net listing may be an hour away in a large group.
   */
  async atTick(now: number): Promise<void> {
    const due = this.#longDead(now);
    if (due.length === 0) return;
    let alive: string[] | undefined;
    // The live members' failure domains, read once a tick (`null` until needed; `undefined` when some live
    // member names none, and the ring is the plain one).
    let aliveDomains: DomainOf | undefined | null = null;
    for (const member of due) {
      const since = this.#deadSince.get(member.workerId);
      if (since === undefined) continue;
      since.complete ??= this.#noteTrusted || readNote(member.metadata[HANDED_FIELD])?.complete === true;
      // Listed for once already: nothing more to do here (a member a lease still names stays due, and the
      // ring of a thousand members is not worth ordering every tick to find that out again).
      if (!since.complete && since.listed) continue;
      alive ??= [...this.#parts.view.alive().keys()];
      // The dead member stands on the ring with its own domain, as it did while it lived: each member's ring
      // is the live members and that member, whatever order the due members come in.
      if (aliveDomains === null) aliveDomains = domainsOf(alive.flatMap((workerId) => this.#parts.view.get(workerId) ?? []));
      if (firstWatcherOf(member.workerId, alive, withDomainOf(aliveDomains, member)) !== this.#parts.workerId) continue;
      if (since.complete) await this.#remove(member);
      else {
        since.listed = true;
        this.#list();
      }
      if (this.#host.state() !== 'running') return;
    }
  }

  /** At a listing: removes the long dead members that no listed lease names. */
  async atListing(listing: LeaseListing, now: number): Promise<void> {
    const named = new Set(listing.leases.map((lease) => lease.owner));
    for (const member of this.#longDead(now)) if (!named.has(member.workerId)) await this.#remove(member);
  }

  async #remove(member: MemberRecord): Promise<void> {
    try {
      const outcome = await this.#parts.storage.removeMember(this.#parts.group, member.workerId, member.version);
      this.#host.emit('storage', { operation: 'remove-member', applied: outcome.status === 'applied' ? 1 : 0, conflict: outcome.status === 'conflict' ? 1 : 0, unknown: outcome.status === 'unknown' ? 1 : 0 });
      if (outcome.status !== 'conflict') this.#parts.members.announce([member.workerId]);
    } catch (error) {
      this.#host.report(error, 'remove-member');
    }
    this.#deadSince.delete(member.workerId);
  }
}

/**
 * The live members' domains with `member`'s own added: `undefined` (the plain ring) when any live member
 * names none or `member` names none, as `domainsOf` of them all would give.
 */
function withDomainOf(alive: DomainOf | undefined, member: { readonly workerId: string; readonly metadata: Readonly<Record<string, string>> }): DomainOf | undefined {
  const own = member.metadata[FAILURE_DOMAIN_FIELD];
  if (alive === undefined || own === undefined || own === '') return undefined;
  return (workerId) => (workerId === member.workerId ? own : alive(workerId));
}
