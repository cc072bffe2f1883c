/**
 * Failure domains as the command line shows them (DESIGN section 4, "failure domains"): each member's
 * domain, read from its record, and per domain its members and the leases they hold. Workers spread the
 * watchers' ring by domain only when every member alive in its record (an expired one included, until it
 * is declared dead) names one and they name two or more; otherwise every worker orders the plain ring and
 * the domains protect nothing. {@link failureDomainsOf} says which, and why, so that an operator sees it.
 */
import { describeValue, FAILURE_DOMAIN_FIELD } from '@leasehold/core/adapter';
import type { MemberState } from '@leasehold/core';
import type { MemberLiveness } from './observe.js';
import { table } from './shared.js';

/** A member's failure domain (the coordinator's `failureDomain`), or `null` when it names none. */
export function failureDomainOf(member: { readonly metadata: Readonly<Record<string, string>> }): string | null {
  const domain = member.metadata[FAILURE_DOMAIN_FIELD];
  // An empty name is no name, as the workers' ring reads it.
  return domain === undefined || domain === '' ? null : domain;
}

/** One failure domain as `status --json` shows it. */
export interface DomainView {
  /** The domain's name, or `null` for the members that name none. */
  readonly domain: string | null;
  /** Its members in the roster, whatever their liveness. */
  readonly members: number;
  /** Those of them judged alive. */
  readonly alive: number;
  /** The leases that name its members in their current incarnations, as stored. */
  readonly leases: number;
  /** Those of them held: their owner is alive. */
  readonly held: number;
}

/** A group's failure domains as `status --json` shows them. */
export interface FailureDomainsView {
  /**
   * `spread` when workers spread the watchers' ring by domain: every member alive in its record names one,
   * and they name two or more; `plain` otherwise.
   */
  readonly ring: 'spread' | 'plain';
  /**
   * Why the domains give no protection, or `null`: `mixed` when some members alive in their records name a
   * domain and others (`withoutDomain`, by worker id) none, so that every worker orders the plain ring;
   * `single-domain` when two or more such members all name one and the same `domain`.
   */
  readonly problem: DomainProblem | null;
  /** Per domain, by name; the members that name none last, as `domain: null`. */
  readonly domains: DomainView[];
}

/** Why a group's failure domains give no protection (see {@link FailureDomainsView}). */
export type DomainProblem = { readonly kind: 'mixed'; readonly withoutDomain: string[] } | { readonly kind: 'single-domain'; readonly domain: string };

/** What {@link failureDomainsOf} reads of a member. */
export interface DomainMember {
  readonly workerId: string;
  /** As the record says: the ring is of the members whose record says `alive`. */
  readonly status: MemberState['status'];
  readonly liveness: MemberLiveness;
  readonly leases: number;
  readonly failureDomain: string | null;
}

/** The group's failure domains, or `null` when no member names one (the group does not use them). */
export function failureDomainsOf(members: readonly DomainMember[]): FailureDomainsView | null {
  if (members.every((member) => member.failureDomain === null)) return null;
  const byDomain = new Map<string | null, { members: number; alive: number; leases: number; held: number }>();
  for (const member of members) {
    const counts = byDomain.get(member.failureDomain) ?? { members: 0, alive: 0, leases: 0, held: 0 };
    counts.members++;
    counts.leases += member.leases;
    // A lease is held while its owner is alive in the incarnation it names: the leases that name an alive member.
    if (member.liveness === 'alive') {
      counts.alive++;
      counts.held += member.leases;
    }
    byDomain.set(member.failureDomain, counts);
  }
  const domains = [...byDomain.entries()]
    .sort(([a], [b]) => (a === b ? 0 : a === null ? 1 : b === null ? -1 : a < b ? -1 : 1))
    .map(([domain, counts]) => ({ domain, ...counts }));
  const ringed = members.filter((member) => member.status === 'alive');
  const withoutDomain = ringed.filter((member) => member.failureDomain === null).map((member) => member.workerId);
  const named = new Set(ringed.flatMap((member) => (member.failureDomain === null ? [] : [member.failureDomain])));
  const [only] = named;
  const problem: DomainProblem | null =
    named.size > 0 && withoutDomain.length > 0
      ? { kind: 'mixed', withoutDomain }
      : // One member has no watcher to protect: a group of one is not warned about.
        only !== undefined && named.size === 1 && withoutDomain.length === 0 && ringed.length > 1
        ? { kind: 'single-domain', domain: only }
        : null;
  return { ring: withoutDomain.length === 0 && named.size > 1 ? 'spread' : 'plain', problem, domains };
}

const SHOWN_IDS = 5;

/** The lines `status` prints about a group's failure domains: a heading, a table per domain, and a warning when they protect nothing. */
export function renderDomains(view: FailureDomainsView): string[] {
  const heading =
    view.ring === 'spread'
      ? "failure domains (every member alive in its record names one: the watchers' ring spreads each domain's members, so that a member's watchers are on other domains):"
      : view.problem === null
        ? "failure domains (the watchers' ring is the plain one: fewer than two members alive in their records name a domain):"
        : 'failure domains:';
  const lines = [
    heading,
    table(
      ['DOMAIN', 'MEMBERS', 'ALIVE', 'LEASES', 'HELD'],
      view.domains.map((domain) => [domain.domain ?? '-', String(domain.members), String(domain.alive), String(domain.leases), String(domain.held)]),
    ),
  ];
  const warning = warningOf(view.problem);
  if (warning !== null) lines.push(warning);
  return lines;
}

/** The warning line for a group whose domains protect nothing, or `null`. */
export function warningOf(problem: DomainProblem | null): string | null {
  if (problem === null) return null;
  if (problem.kind === 'mixed') {
    const without = problem.withoutDomain;
    const ids = without.slice(0, SHOWN_IDS).join(', ') + (without.length > SHOWN_IDS ? ` and ${without.length - SHOWN_IDS} more` : '');
    const naming = without.length === 1 ? 'member alive in its record names' : 'members alive in their records name';
    return (
      `warning: ${without.length} ${naming} no failure domain (${ids}) while others name one: every worker then orders the plain ring, ` +
      'so the failure domains give no protection (a domain lost at once can take a member with all its watchers); give every worker a failureDomain'
    );
  }
  return (
    `warning: every member alive in its record names the one failure domain ${describeValue(problem.domain)}: the watchers' ring has no other domain to spread them over, ` +
    'so the failure domains give no protection; name two or more (one per host or zone)'
  );
}
