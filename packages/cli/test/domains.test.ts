import { describe, expect, it } from 'vitest';
import { failureDomainsOf, warningOf, type DomainMember } from '../src/domains.js';

/** A member alive in its record and judged alive, naming `failureDomain`, that no lease names. */
const member = (workerId: string, failureDomain: string | null, more: Partial<DomainMember> = {}): DomainMember => ({
  workerId,
  status: 'alive',
  liveness: 'alive',
  leases: 0,
  failureDomain,
  ...more,
});

describe('failure domains as status judges them', () => {
  it.each([
    ['no member names a domain: the group does not use them', [member('a', null), member('b', null)], null],
    ['members in two domains: the ring is spread', [member('a', 'x'), member('b', 'y')], { ring: 'spread', problem: null }],
    ['a group of one: nothing to warn about, nothing to spread', [member('a', 'x')], { ring: 'plain', problem: null }],
    [
      'an expired member without a domain is on the ring until declared dead: the group is mixed',
      [member('a', 'x'), member('b', 'y'), member('c', null, { liveness: 'expired' })],
      { ring: 'plain', problem: { kind: 'mixed', withoutDomain: ['c'] } },
    ],
    ['a dead member without a domain is on no ring', [member('a', 'x'), member('b', 'y'), member('c', null, { status: 'dead', liveness: 'dead' })], { ring: 'spread', problem: null }],
    ['only dead members name a domain: the ring is the plain one, and nothing is mixed', [member('a', null), member('c', 'x', { status: 'dead', liveness: 'dead' })], { ring: 'plain', problem: null }],
    ['every member in one domain', [member('a', 'x'), member('b', 'x')], { ring: 'plain', problem: { kind: 'single-domain', domain: 'x' } }],
  ])('%s', (_title, members, expected) => {
    const view = failureDomainsOf(members);
    if (expected === null) expect(view).toBeNull();
    else expect(view).toMatchObject(expected);
  });

  it('counts per domain the members, the alive ones, the leases that name them and those held, the members without a domain last', () => {
    const view = failureDomainsOf([
      member('a', 'z', { leases: 3 }),
      member('b', 'y', { leases: 2, liveness: 'expired' }),
      member('c', null, { leases: 1 }),
      member('d', 'y', { leases: 1 }),
    ]);

    expect(view?.domains).toEqual([
      { domain: 'y', members: 2, alive: 1, leases: 3, held: 1 },
      { domain: 'z', members: 1, alive: 1, leases: 3, held: 3 },
      { domain: null, members: 1, alive: 1, leases: 1, held: 1 },
    ]);
  });

  it('names at most five members without a domain in the warning, and counts the others', () => {
    const without = ['m1', 'm2', 'm3', 'm4', 'm5', 'm6', 'm7'];

    expect(warningOf({ kind: 'mixed', withoutDomain: without })).toMatch(/^warning: 7 members alive in their records name no failure domain \(m1, m2, m3, m4, m5 and 2 more\) while others name one: /);
  });
});
