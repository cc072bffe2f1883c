/**
 * What this worker writes in its own member record (DESIGN section 4, "Membership"): its incarnation,
 * lease duration, count of leases held, change counter and requests, and the metadata others read there:
 * that it is leaving, its cap, its failure domain, its answers to suspects, a newcomer's asks of its givers
 * ("A join that names its givers") and a cold start's deal note ("One member deals a cold start").
 * membership.ts writes the record; this file says what goes in it.
 */
import { limits } from '../validation.js';
import { memberStateOf, RECORD_FORMAT, type MemberState } from '../storage.js';
import type { Answers } from './answers.js';
import { MAX_LEASES_FIELD } from './balance.js';
import { COLD_DEALT_FIELD, writeColdDealt } from './cold-deal-note.js';
import { ASKS_FIELD, writeAsks } from './join-asks.js';
import type { Incarnation, MembershipHost } from './membership.js';
import { FAILURE_DOMAIN_FIELD } from './watchers.js';

/** Member metadata of a worker that is stopping: others deal it nothing more. */
export const LEAVING_FIELD = 'leasehold.leaving';

export interface OwnRecordOptions {
  readonly leaseDurationMs: number;
  readonly maxLeases: number;
  readonly failureDomain: string | undefined;
  readonly answers: Answers;
  readonly host: Pick<MembershipHost, 'state' | 'countHeld' | 'requests'>;
  /** The roster digest read just before the last whole roster read, written with the answers; `null` before the first. */
  readonly digestSeen: () => number | null;
}

/** The member state this worker writes, and what it carries besides its heartbeat. */
export class OwnRecord {
  readonly #options: OwnRecordOptions;
  /** The change counter this worker's member carries: moved by every change other workers must list for. */
  #changes = 0;
  /** The asks of this incarnation's first listing, while they stand (join-asks.ts). */
  #asks: { incarnation: string; value: string } | null = null;
  /** The note of a cold start this incarnation dealt to the group, while it stands (`noteColdDeal`). */
  #coldDealt: { incarnation: string; value: string } | null = null;

  constructor(options: OwnRecordOptions) {
    this.#options = options;
  }

  /** A change other workers must list for: the next heartbeat carries it in the change counter. */
  noteChanged(): void {
    this.#changes++;
  }

  /** The member state this worker writes now: its incarnation, duration, count, changes and requests. */
  state(membership: Incarnation): MemberState {
    const { host } = this.#options;
    const base = membership.record ? memberStateOf(membership.record) : { format: RECORD_FORMAT, metadata: {} };
    // A stopping member says so, so that nobody deals it the leases others release meanwhile.
    const metadata: Record<string, string> = { ...base.metadata };
    if (host.state() === 'stopping') metadata[LEAVING_FIELD] = '1';
    else delete metadata[LEAVING_FIELD];
    if (Number.isFinite(this.#options.maxLeases)) metadata[MAX_LEASES_FIELD] = String(this.#options.maxLeases);
    else delete metadata[MAX_LEASES_FIELD];
    if (this.#options.failureDomain !== undefined) metadata[FAILURE_DOMAIN_FIELD] = this.#options.failureDomain;
    else delete metadata[FAILURE_DOMAIN_FIELD];
    this.#options.answers.writeInto(metadata, this.#options.digestSeen());
    // A stopping member asks for nothing more (DESIGN section 4, "Releasing"): asks its last tick wrote, which
    // only a later tick would drop, do not go out with its leave.
    if (this.#asks?.incarnation === membership.incarnation && host.state() !== 'stopping') metadata[ASKS_FIELD] = this.#asks.value;
    else delete metadata[ASKS_FIELD];
    if (this.#coldDealt?.incarnation === membership.incarnation) metadata[COLD_DEALT_FIELD] = this.#coldDealt.value;
    else delete metadata[COLD_DEALT_FIELD];
    let state: MemberState = {
      ...base,
      metadata,
      format: RECORD_FORMAT,
      incarnation: membership.incarnation,
      leaseDurationMs: this.#options.leaseDurationMs,
      status: 'alive',
      held: host.countHeld(),
      changes: this.#changes,
      requests: [],
    };
    // A request as stored keeps the fields a later core gave it (they round-trip as the member's do).
    // Names hold no NUL, so it separates the two names of a request's key.
    const stored = new Map((membership.record?.requests ?? []).map((request) => [`${request.from}\u0000${request.leaseKey}`, request]));
    // As many open requests as fit the member's size limit (long names may leave room for fewer).
    for (const [leaseKey, request] of host.requests) {
      if (state.requests.length >= limits.maxRequests) break;
      const written = stored.get(`${request.from}\u0000${leaseKey}`) ?? { leaseKey, from: request.from };
      const next = { ...state, requests: [...state.requests, written] };
      if (Buffer.byteLength(JSON.stringify(next), 'utf8') > limits.maxMemberBytes) break;
      state = next;
    }
    return state;
  }

  /**
   * Asks the members named in `givers` for that many leases each, in `membership`'s member record, written
   * at the next heartbeat (DESIGN section 4, "A join that names its givers"). As many givers as fit three
   * quarters of the member's size (the rest is room for steal requests). False when none fits.
   */
  ask(membership: Incarnation, givers: ReadonlyMap<string, number>): boolean {
    const state = this.state(membership);
    const fits = (value: string): boolean =>
      Buffer.byteLength(JSON.stringify({ ...state, metadata: { ...state.metadata, [ASKS_FIELD]: value } }), 'utf8') <= limits.maxMemberBytes * 0.75;
    const value = writeAsks(givers, fits);
    if (value === undefined) return false;
    this.#asks = { incarnation: membership.incarnation, value };
    return true;
  }

  /** Drops the asks at the next heartbeat, which does not move the digest for it. */
  unask(): void {
    this.#asks = null;
  }

  /** Says in `membership`'s member record, from the next heartbeat, that it dealt a cold start's `total` leases to the group. */
  noteColdDeal(membership: Incarnation, total: number): void {
    this.#coldDealt = { incarnation: membership.incarnation, value: writeColdDealt(total) };
  }

  /** Drops the cold start's deal note at the next heartbeat, which does not move the digest for it. */
  unnoteColdDeal(): void {
    this.#coldDealt = null;
  }
}
