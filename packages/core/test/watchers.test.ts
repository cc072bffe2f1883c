import { describe, expect, it } from 'vitest';
import { domainsOf, FAILURE_DOMAIN_FIELD, firstWatcherOf, ringOrder, watchedBy, watchersOf } from '../src/lease/watchers.js';

const ids = (count: number): string[] => Array.from({ length: count }, (_, i) => `worker-${i}`);

describe('watchers: the ring of members', () => {
  it('orders the same members the same way whatever order they are given in', () => {
    const members = ids(50);
    expect(ringOrder([...members].reverse())).toEqual(ringOrder(members));
    expect(new Set(ringOrder(members))).toEqual(new Set(members));
  });

  it('gives every member exactly `watchers` watchers, and each watcher exactly `watchers` members to watch', () => {
    const members = ids(100);
    const watched = new Map(members.map((self) => [self, watchedBy(self, members, 3)]));
    for (const self of members) {
      expect(watched.get(self)).toHaveLength(3);
      expect(watched.get(self)).not.toContain(self);
      const watchers = watchersOf(self, members, 3);
      expect(watchers).toHaveLength(3);
      for (const watcher of watchers) expect(watched.get(watcher)).toContain(self);
    }
  });

  it('has each member watch every other one when the group has no more than `watchers` others', () => {
    const members = ids(3);
    expect(new Set(watchedBy('worker-0', members, 3))).toEqual(new Set(['worker-1', 'worker-2']));
    expect(watchedBy('worker-0', ['worker-0'], 3)).toEqual([]);
  });

  it('scatters members adjacent by id over the ring, so that a crash of consecutive ids rarely takes a member with all its watchers', () => {
    const members = ids(1_000);
    const block = new Set(members.slice(0, 100));
    const unwatched = [...block].filter((self) => watchersOf(self, members, 3).every((watcher) => block.has(watcher)));
    expect(unwatched.length).toBeLessThanOrEqual(2);
  });

  it('gives a member whose watchers left the ring new watchers among those that remain', () => {
    const members = ids(20);
    const [first, second, third] = watchersOf('worker-7', members, 3);
    const remaining = members.filter((id) => id !== first && id !== second && id !== third);
    const next = watchersOf('worker-7', remaining, 3);
    expect(next).toHaveLength(3);
    for (const watcher of next) expect(watchedBy(watcher, remaining, 3)).toContain('worker-7');
  });

  it('finds a member\'s first watcher in one pass, the same as the ring gives, the member itself among the live or not', () => {
    const members = Array.from({ length: 300 }, (_, i) => `host-${i}-${(i * 7919) % 101}`);
    for (const watched of [...members.slice(0, 50), 'gone-1', 'gone-2']) {
      expect(firstWatcherOf(watched, members)).toBe(watchersOf(watched, members, 1)[0]);
    }
    expect(firstWatcherOf('alone', ['alone'])).toBeUndefined();
    expect(firstWatcherOf('a', ['b'])).toBe('b');
  });

  describe('with failure domains', () => {
    const domainsBy = (assign: (workerId: string, i: number) => string | undefined, members: readonly string[]) =>
      domainsOf(
        members.map((workerId, i) => {
          const domain = assign(workerId, i);
          const metadata: Record<string, string> = domain === undefined ? {} : { [FAILURE_DOMAIN_FIELD]: domain };
          return { workerId, metadata };
        }),
      );

    it('orders the plain ring when any member names no domain, or all name one domain', () => {
      const members = ids(40);
      expect(domainsBy((_, i) => (i === 7 ? undefined : `host-${i % 4}`), members)).toBeUndefined();
      const one = domainsBy(() => 'host-a', members);
      expect(ringOrder(members, one)).toEqual(ringOrder(members));
    });

    it('gives every member of four hosts of 25 three watchers on the other three hosts, each watching three', () => {
      const members = ids(100);
      const hostOf = (workerId: string): string => `host-${Number(workerId.slice('worker-'.length)) % 4}`;
      const domainOf = domainsBy(hostOf, members);
      for (const self of members) {
        const watchers = watchersOf(self, members, 3, domainOf);
        expect(watchers).toHaveLength(3);
        expect(new Set(watchers.map(hostOf)).size, self).toBe(3);
        expect(watchers.map(hostOf)).not.toContain(hostOf(self));
        for (const watcher of watchers) expect(watchedBy(watcher, members, 3, domainOf)).toContain(self);
        expect(firstWatcherOf(self, members, domainOf)).toBe(watchers[0]);
      }
      // Without the domains, a host's members stand where their hashes put them: some member of the
      // 100 has all three watchers on its own host.
      expect(members.some((self) => watchersOf(self, members, 3).every((watcher) => hostOf(watcher) === hostOf(self)))).toBe(true);
    });

    it('leaves no member with all its watchers on its own host when the hosts are of unequal sizes (50, 25, 25) or many (10 of 10)', () => {
      for (const hostOf of [(i: number) => (i < 50 ? 'big' : i < 75 ? 'b' : 'c'), (i: number) => `host-${i % 10}`]) {
        const members = ids(100);
        const of = (workerId: string): string => hostOf(Number(workerId.slice('worker-'.length)));
        const domainOf = domainsBy(of, members);
        const alone = members.filter((self) => watchersOf(self, members, 3, domainOf).every((watcher) => of(watcher) === of(self)));
        expect(alone).toEqual([]);
      }
    });
  });
});
