import { describe, expect, it } from 'vitest';
import { LeaseCoordinator } from '../src/index.js';
import { leaseStateOf } from '../src/storage.js';
import { ringOrder, watchersOf } from '../src/lease/watchers.js';
import { type CoordinatorUnsafe } from '../src/testing/index.js';
import { run } from './support/virtual.js';
import { advanceUntil, balanced, cluster, dispose, GROUP as BENCH_GROUP, settled } from '../bench/cluster.js';
import { GROUP, TICK, keys, ids, member, group, until, startFed, ghostDealt } from './support/watched-group.js';

/**
 * Three dead members that stand right after `ghost` on the ring of `live`, `ghost` and themselves: a ring
 * that kept the dead would give `ghost` them as its watchers.
 */
function deadWatchersOf(live: readonly string[]): string[] {
  const dead: string[] = [];
  for (let i = 0; dead.length < 3; i++) {
    const ring = ringOrder([...live, 'ghost', ...dead, `dead-${i}`]);
    const at = ring.indexOf('ghost');
    const after = [...ring.slice(at + 1), ...ring.slice(0, at)];
    if (after.slice(0, dead.length + 1).every((workerId) => workerId.startsWith('dead-'))) dead.push(`dead-${i}`);
  }
  return dead;
}

/**
 * A balanced group of ten and a member, `ghost`, that holds its share and never heartbeats, whose place on
 * the ring is followed by three members long dead: who declares it dead, who takes its leases, and when.
 */
async function deathOfAGhost(unsafe?: CoordinatorUnsafe) {
  const { scheduler, storage, start } = group(unsafe);
  for (const leaseKey of keys(100)) await storage.createLease({ group: GROUP, leaseKey });
  await storage.putMember(GROUP, 'ghost', null, member('inc-ghost', { held: 10 }));
  for (const leaseKey of keys(10, 'ghost-')) await storage.createLease({ group: GROUP, leaseKey, owner: 'ghost', incarnation: 'inc-ghost', epoch: 1 });
  for (const workerId of deadWatchersOf(ids(10))) await storage.putMember(GROUP, workerId, null, member(`inc-${workerId}`, { status: 'dead' }));
  const workers: LeaseCoordinator[] = [];
  const declaredBy: string[] = [];
  const takers = new Set<string>();
  const from = scheduler.now;
  for (const workerId of ids(10)) {
    const coordinator = await start(workerId);
    coordinator.on('member-dead', ({ workerId: dead }) => dead === 'ghost' && declaredBy.push(workerId));
    coordinator.on('acquired', ({ leaseKey }) => leaseKey.startsWith('ghost-') && takers.add(workerId));
    workers.push(coordinator);
  }
  await until(scheduler, () => workers.reduce((sum, w) => sum + w.heldLeases().filter((lease) => lease.leaseKey.startsWith('ghost-')).length, 0) === 10, 120_000);
  const took = scheduler.now - from;
  await run(scheduler, Promise.all(workers.map((w) => w.stop())));
  return { took, declaredBy, takers, watchers: watchersOf('ghost', ids(10), 3) };
}

describe('the death of a member watched', () => {
  // A member and its three watchers on the plain ring run on one host, which dies: nobody alive watches
  // the member until the watchers' own deaths are declared and the ring gives it new ones. Named as one
  // failure domain, the ring spreads them, and each keeps watchers on the other hosts.
  async function hostLost(domains: boolean, unsafe?: CoordinatorUnsafe): Promise<{ victimTook: number; allTook: number }> {
    const { scheduler, storage, start, clocks } = group(unsafe);
    for (const leaseKey of keys(120)) await storage.createLease({ group: GROUP, leaseKey });
    const workerIds = ids(12);
    const victim = workerIds[0] as string;
    const lost = new Set([victim, ...watchersOf(victim, workerIds, 3)]);
    const others = workerIds.filter((workerId) => !lost.has(workerId));
    const hostOf = (workerId: string): string => (lost.has(workerId) ? 'host-lost' : `host-${others.indexOf(workerId) % 2}`);
    const workers: LeaseCoordinator[] = [];
    for (const workerId of workerIds) workers.push(await start(workerId, domains ? { failureDomain: hostOf(workerId) } : {}));
    expect(await until(scheduler, () => workers.every((w) => w.heldLeases().length === 10), 60_000)).toBeLessThan(Infinity);
    await scheduler.advance(5 * TICK);
    const theirs = new Set(workers.filter((w) => lost.has(w.workerId)).flatMap((w) => w.heldLeases().map((lease) => lease.leaseKey)));
    const victims = new Set(workers.find((w) => w.workerId === victim)!.heldLeases().map((lease) => lease.leaseKey));
    for (const workerId of lost) clocks.get(workerId)!.kill();
    const survivors = workers.filter((w) => !lost.has(w.workerId));
    const heldElsewhere = (set: ReadonlySet<string>) => survivors.reduce((sum, w) => sum + w.heldLeases().filter((lease) => set.has(lease.leaseKey)).length, 0);
    const from = scheduler.now;
    const victimTook = await until(scheduler, () => heldElsewhere(victims) === victims.size, 120_000);
    await until(scheduler, () => heldElsewhere(theirs) === theirs.size, 120_000);
    const allTook = scheduler.now - from;
    await run(scheduler, Promise.all(survivors.map((w) => w.stop())));
    return { victimTook, allTook };
  }

  it('takes over the members of a host lost at once within a lease duration and a take tick when every member names its host as failureDomain, though one had all its watchers there; without, that one waits for its watchers\' declarations', async () => {
    const spread = await hostLost(true);
    const plain = await hostLost(false);
    // From the kill: the hold (a lease duration from the last heartbeat, which came before the kill), a
    // take tick, and a round trip's margin.
    const bound = 10_000 * 1.01 + TICK * 1.05 + 500;
    expect(spread.victimTook).toBeLessThanOrEqual(bound);
    expect(spread.allTook).toBeLessThanOrEqual(bound);
    // Without domains, the member's new watchers judge its expiry from their first read of it, after the
    // first declarations moved the digest: a quarter of a lease duration or more later.
    expect(plain.victimTook).toBeGreaterThan(spread.victimTook + 2_500);
    // The unsafe switch that orders the plain ring whatever the domains brings the wait back.
    const ignored = await hostLost(true, { domainsIgnored: true });
    expect(ignored.victimTook).toBe(plain.victimTook);
  });

  it('has a member that stopped heartbeating declared dead by one of its live watchers, and its leases taken within the liveness bound', async () => {
    const { took, declaredBy, takers, watchers } = await deathOfAGhost();
    expect(declaredBy).toHaveLength(1);
    expect(watchers).toContain(declaredBy[0]);
    expect(takers.size).toBeGreaterThanOrEqual(1);
    // Lease duration, a heartbeat interval and three take ticks (DESIGN section 6, guarantee 6), from the start.
    expect(took).toBeLessThanOrEqual(10_000 * 1.01 + 6_500 + 3 * TICK * 1.05 + 1_000);
  });

  it('with a ring that keeps the dead, the member whose ring places only dead members after it is judged only at the next whole read, 30 take ticks later', async () => {
    const { took } = await deathOfAGhost({ ringKeepsTheDead: true });
    expect(took).toBeGreaterThan(10_000 * 1.01 + 6_500 + 3 * TICK * 1.05 + 1_000);
  });

  /**
   * Nine members over 90 leases of their own and a member, `ghost`, that never heartbeats and names ten
   * more: runs until the ten are held, then until the group is balanced. `caps` gives members a
   * maxLeasesPerWorker.
   */
  const deathWith = async (useChangeFeed: boolean, caps: Record<string, number> = {}, unsafe?: CoordinatorUnsafe) => {
    const { scheduler, storage, start, listings } = group(unsafe);
    for (const leaseKey of keys(90)) await storage.createLease({ group: GROUP, leaseKey });
    await storage.putMember(GROUP, 'ghost', null, member('inc-ghost', { held: 10 }));
    for (const leaseKey of keys(10, 'ghost-')) await storage.createLease({ group: GROUP, leaseKey, owner: 'ghost', incarnation: 'inc-ghost', epoch: 1 });
    const workers: LeaseCoordinator[] = [];
    let declaredAt = Infinity;
    let declarer = '';
    let freed = 0;
    let dealt = 0;
    let mostHeld = 0;
    const takers = new Set<string>();
    const dealtTo = new Set<string>();
    let listedBefore = new Map<string, number>();
    for (const workerId of ids(9)) {
      const coordinator = await start(workerId, { useChangeFeed, ...(caps[workerId] !== undefined ? { maxLeasesPerWorker: caps[workerId] } : {}) });
      coordinator.on('member-dead', ({ workerId: dead }) => {
        if (dead !== 'ghost' || scheduler.now >= declaredAt) return;
        declaredAt = scheduler.now;
        declarer = workerId;
        listedBefore = new Map(listings);
      });
      coordinator.on('storage', ({ operation, applied }) => {
        // The declarer's writes of the dead member's leases: to the members its deal names, or free.
        if (operation === 'deal-dead') dealt += applied;
        if (operation === 'free-dead') freed += applied;
      });
      coordinator.on('acquired', ({ leaseKey, how }) => {
        // Who took a lease of the dead, and who was handed one (by the declarer's deal, or later by the plan of moves).
        if (leaseKey.startsWith('ghost-') && how !== 'handoff') takers.add(workerId);
        if (leaseKey.startsWith('ghost-') && how === 'handoff' && scheduler.now - declaredAt < TICK) dealtTo.add(workerId);
        mostHeld = Math.max(mostHeld, coordinator.heldLeases().length);
      });
      workers.push(coordinator);
    }
    const ghostHeld = () => workers.reduce((sum, w) => sum + w.heldLeases().filter((lease) => lease.leaseKey.startsWith('ghost-')).length, 0);
    await until(scheduler, () => ghostHeld() === 10, 120_000);
    const after = scheduler.now - declaredAt;
    const counts = () => workers.map((w) => w.heldLeases().length);
    const balancedAfter = await until(scheduler, () => Math.max(...counts()) - Math.min(...counts()) <= 1, 60_000);
    const declarerHeldMost = mostHeld;
    // Who listed the leases from the declaration until the group was balanced again.
    const listedSince = new Set(ids(9).filter((workerId) => (listings.get(workerId) ?? 0) > (listedBefore.get(workerId) ?? 0)));
    await run(scheduler, Promise.all(workers.map((w) => w.stop())));
    return { after, freed, dealt, takers, dealtTo, listedSince, declarer, balancedAfter, mostHeld: declarerHeldMost };
  };

  it('with a change feed, a dead member\'s leases are held by the members that do not watch it a fraction of a take tick after its declaration: the declarer deals them, the feed tells each member its own, and only the declarer lists', async () => {
    const fed = await deathWith(true);
    // Nine members over 100 leases: the declarer keeps its share of the ten and writes the rest to the
    // members its deal gives them to, who hold them as handed over; nobody else takes or lists.
    expect(fed.dealt).toBeGreaterThanOrEqual(8);
    expect(fed.freed).toBe(0);
    expect([...fed.takers]).toEqual([fed.declarer]);
    expect(fed.dealtTo.size).toBeGreaterThan(3);
    expect([...fed.listedSince]).toEqual([fed.declarer]);
    expect(fed.after).toBeLessThan(TICK / 4);
    expect(fed.balancedAfter).toBeLessThan(Infinity);
  });

  it('without a change feed, the declarer takes all of a dead member\'s leases at its declaration, nothing waits for the others\' next tick, and the plan of moves hands the excess on until the group is balanced', async () => {
    const unfed = await deathWith(false);
    expect(unfed.freed).toBe(0);
    expect([...unfed.takers]).toEqual([unfed.declarer]);
    expect(unfed.after).toBeLessThan(TICK / 4);
    // Its ten (its share) and the ten it adopted, then handed on: max - min <= 1 within a few ticks.
    expect(unfed.mostHeld).toBe(20);
    expect(unfed.balancedAfter).toBeLessThanOrEqual(10 * TICK);
  });

  it('without a change feed, a declarer with a maxLeasesPerWorker adopts only what its cap leaves room for, and the rest waits for the others\' next tick', async () => {
    const caps = Object.fromEntries(ids(9).map((workerId) => [workerId, 14]));
    const capped = await deathWith(false, caps);
    expect(capped.mostHeld).toBe(14);
    expect(capped.takers.size).toBeGreaterThan(1);
    expect(capped.balancedAfter).toBeLessThan(Infinity);
    // The unsafe switch adopts whatever the cap: the declarer holds more than it may.
    const uncapped = await deathWith(false, caps, { adoptionIgnoresCap: true });
    expect(uncapped.mostHeld).toBeGreaterThan(14);
  });

  it('with a change feed, deals a dead member\'s leases from its last listing at the declaration, before the listing the declaration brings: a listing that takes seconds holds none of them back', async () => {
    // Listings of 4 s each. Nine members and `ghost`, which never heartbeats, 10 leases each.
    const g = group(undefined, { listingMs: 4_000 });
    const { scheduler, storage } = g;
    for (const leaseKey of keys(90)) await storage.createLease({ group: GROUP, leaseKey });
    await storage.putMember(GROUP, 'ghost', null, member('inc-ghost', { held: 10 }));
    for (const leaseKey of keys(10, 'ghost-')) await storage.createLease({ group: GROUP, leaseKey, owner: 'ghost', incarnation: 'inc-ghost', epoch: 1 });
    const { workers, declaredAt } = await startFed(g, ids(9), 'ghost');
    const ghostHeld = () => workers.reduce((sum, w) => sum + w.heldLeases().filter((lease) => lease.leaseKey.startsWith('ghost-')).length, 0);
    await until(scheduler, () => declaredAt() < Infinity, 60_000);
    const took = await until(scheduler, () => ghostHeld() === 10, 30_000);
    const counts = workers.map((w) => w.heldLeases().length);
    await run(scheduler, Promise.all(workers.map((w) => w.stop())));
    expect(took).toBeLessThan(1_000);
    // Dealt as the listing would have: 100 leases over nine, 11 or 12 each.
    expect(Math.max(...counts) - Math.min(...counts)).toBeLessThanOrEqual(1);
  });

  it('with a change feed, deals a dead member\'s leases at its declaration when their versions moved since the listing (its checkpoints): the declarer\'s own portion too, none waiting for the listing', async () => {
    const slow = { listingMs: 0 };
    const g = group(undefined, slow);
    const { scheduler, storage } = g;
    for (const leaseKey of keys(90)) await storage.createLease({ group: GROUP, leaseKey });
    await storage.putMember(GROUP, 'ghost', null, member('inc-ghost', { held: 10 }));
    for (const leaseKey of keys(10, 'ghost-')) await storage.createLease({ group: GROUP, leaseKey, owner: 'ghost', incarnation: 'inc-ghost', epoch: 1 });
    const { workers, declaredAt } = await startFed(g, ids(9), 'ghost');
    // Every worker has listed (the ghost holding its ten) and taken its share.
    await until(scheduler, () => workers.every((w) => w.heldLeases().length === 10), 30_000);
    await scheduler.advance(1.5 * TICK);
    expect(declaredAt()).toBe(Infinity);
    // The ghost's last checkpoints, after those listings: each of its records at a newer version.
    for (const leaseKey of keys(10, 'ghost-')) {
      const lease = (await storage.getLease(GROUP, leaseKey))!;
      await storage.updateLeases(GROUP, [{ leaseKey, expectedVersion: lease.version, next: { ...leaseStateOf(lease), checkpoint: '7' } }]);
    }
    slow.listingMs = 4_000;
    const ghostHeld = () => workers.reduce((sum, w) => sum + w.heldLeases().filter((lease) => lease.leaseKey.startsWith('ghost-')).length, 0);
    await until(scheduler, () => declaredAt() < Infinity, 60_000);
    const took = await until(scheduler, () => ghostHeld() === 10, 30_000);
    await run(scheduler, Promise.all(workers.map((w) => w.stop())));
    expect(took).toBeLessThan(1_000);
  });

  /**
   * A cold start dealt by one member over a change feed, then a crash once listings take 4 s: how long
   * the crashed member's leases took to be held elsewhere after its declaration, and how many of them a
   * watcher read by key before the declaration.
   */
  async function crashAfterDealtStart(unsafe?: CoordinatorUnsafe, victim = 3) {
    const victimId = ids(10)[victim]!;
    // Listings are quick until the group is balanced, then take 4 s each.
    const slow = { listingMs: 0 };
    const g = group(unsafe, slow);
    const { scheduler, storage, clocks, reads } = g;
    for (const leaseKey of keys(100)) await storage.createLease({ group: GROUP, leaseKey });
    const { workers, declaredAt } = await startFed(g, ids(10), victimId);
    expect(await until(scheduler, () => workers.every((w) => w.heldLeases().length === 10), 60_000)).toBeLessThan(Infinity);
    await scheduler.advance(5 * TICK);
    // One listing each, in the cold start: none showed the crashed member holding anything.
    slow.listingMs = 4_000;
    const crashed = workers[victim]!;
    const theirs = new Set(crashed.heldLeases().map((lease) => lease.leaseKey));
    clocks.get(victimId)!.kill();
    const survivors = workers.filter((w) => w !== crashed);
    const heldElsewhere = () => survivors.reduce((sum, w) => sum + w.heldLeases().filter((lease) => theirs.has(lease.leaseKey)).length, 0);
    await until(scheduler, () => declaredAt() < Infinity, 60_000);
    const took = await until(scheduler, () => heldElsewhere() === 10, 30_000);
    await run(scheduler, Promise.all(survivors.map((w) => w.stop())));
    const readBefore = new Set(reads.filter(({ leaseKey, at }) => theirs.has(leaseKey) && at < declaredAt()).map(({ leaseKey }) => leaseKey));
    return { took, readBefore: readBefore.size };
  }

  it('with a change feed, deals a crashed member\'s leases at its declaration after a cold start, the listings that follow taking seconds, having read them back when it named the member a suspect', async () => {
    const { took, readBefore } = await crashAfterDealtStart();
    expect(took).toBeLessThan(1_000);
    // The cold start's deal gave them to it and no listing showed them held since: a watcher read them
    // back by key when it named the member a suspect, before the declaration, not at it.
    expect(readBefore).toBe(10);
  });

  it('with feedAddressedToSelf, the declarer heard nothing of the cold start\'s deal to the member it watched: at its death the leases wait for a listing of seconds', async () => {
    // The feed's subscription names each worker alone: the handovers of the deal to a watched member are
    // another owner's, never delivered, so its declarer deals nothing at the declaration. The same with
    // any of members 1-9 crashed (member 0 dealt: its own portion is announced to nobody either way).
    const { took } = await crashAfterDealtStart({ feedAddressedToSelf: true });
    expect(took).toBeGreaterThanOrEqual(4_000);
  });

  it('with a change feed, the members that handed leases to a member that then died do not list for them: its declarer deals them with the rest', async () => {
    const { scheduler, storage, start, listings, clocks } = group();
    for (const leaseKey of keys(100)) await storage.createLease({ group: GROUP, leaseKey });
    const workers: LeaseCoordinator[] = [];
    const handers = new Set<string>();
    let declarer: string | undefined;
    for (const workerId of ids(10)) {
      const coordinator = await start(workerId, { useChangeFeed: true });
      coordinator.on('handed-off', ({ to }) => to === 'joiner' && handers.add(workerId));
      coordinator.on('member-dead', ({ workerId: dead }) => dead === 'joiner' && (declarer ??= workerId));
      workers.push(coordinator);
    }
    expect(await until(scheduler, () => workers.every((w) => w.heldLeases().length === 10), 60_000)).toBeLessThan(Infinity);
    // A member joins, is handed its share unasked by the members above it, and dies a take tick later:
    // well within the three lease durations a hander keeps track of what it handed.
    const joiner = await start('joiner', { useChangeFeed: true });
    expect(await until(scheduler, () => joiner.heldLeases().length >= 9, 60_000)).toBeLessThan(Infinity);
    await scheduler.advance(TICK);
    const theirs = new Set(joiner.heldLeases().map((lease) => lease.leaseKey));
    clocks.get('joiner')!.kill();
    const before = new Map(listings);
    const heldElsewhere = () => workers.reduce((sum, w) => sum + w.heldLeases().filter((lease) => theirs.has(lease.leaseKey)).length, 0);
    expect(await until(scheduler, () => heldElsewhere() === theirs.size, 60_000)).toBeLessThan(Infinity);
    const listedSince = [...handers].filter((workerId) => workerId !== declarer && (listings.get(workerId) ?? 0) > (before.get(workerId) ?? 0));
    await run(scheduler, Promise.all(workers.map((w) => w.stop())));
    expect(handers.size).toBeGreaterThan(3);
    expect(declarer).toBeDefined();
    expect(listedSince).toEqual([]);
  });

  it('with a change feed, a watcher whose declaration of a dead member lost the race to another watcher\'s does not list the group: the winner deals the leases, as to every other member', async () => {
    // Three live members watching each other and `ghost`, which never heartbeats; worker-00's declarations
    // take 1.5 s to land, so that another watcher declares the ghost while worker-00's write is on its way.
    const g = group(undefined, { listingMs: 0, declareMs: { 'worker-00': 1_500 } });
    const { workers, declarer, took, listedSince } = await ghostDealt(g, 30, 60, 3);
    // worker-00's own declaration, on its way when the other's applied, lands after it and is refused.
    await g.scheduler.advance(2 * TICK);
    const listed = listedSince();
    const held = workers.map((w) => w.heldLeases().length);
    await run(g.scheduler, Promise.all(workers.map((w) => w.stop())));
    expect(g.slowDeclarations).toEqual([{ workerId: 'worker-00', of: 'ghost' }]);
    expect(declarer).not.toBe('worker-00');
    // Only the declarer listed (worker-00 listed once more for its lost race before).
    expect(listed).toEqual(ids(3).map((workerId) => (workerId === declarer ? 1 : 0)));
    expect(took).toBeLessThan(TICK);
    expect(held).toEqual([30, 30, 30]);
  });

  for (const { ghostLeases, lists } of [
    { ghostLeases: 40, lists: false },
    { ghostLeases: 300, lists: true },
  ]) {
    it(
      lists
        ? 'has a member dealt more of a dead member\'s leases than it reads by key (128) list for them, and hold them within a take tick of the declaration'
        : 'has a member dealt more of a dead member\'s leases than one round of reads (16) read each by key, without a listing, and hold them within half a take tick of the declaration',
      async () => {
        // Two members of 40 leases each and a member, `ghost`, that never heartbeats and names more: the
        // declarer keeps half of them and deals the other half to the other member, which hears each
        // handover by name on the change feed: 20 it reads by key, 150 it lists for.
        const g = group();
        const { workers, declarer, took, listedSince } = await ghostDealt(g, ghostLeases, 80, 2);
        const half = (80 + ghostLeases) / 2;
        expect(workers.map((w) => w.heldLeases().length)).toEqual([half, half]);
        const recipient = ids(2).findIndex((workerId) => workerId !== declarer);
        expect(listedSince()[recipient]).toBe(lists ? 1 : 0);
        expect(took).toBeLessThan(lists ? TICK : TICK / 2);
        await run(g.scheduler, Promise.all(workers.map((w) => w.stop())));
      },
    );
  }

  it('deals none of a dead member\'s leases to a member seen standing still for most of its lease duration: they go to members seen heartbeating, and wait for no second declaration', async () => {
    // Three live members, `ghost` (lease duration 10 s) and `frozen` (13 s), neither of which ever
    // heartbeats, 12 leases each. When ghost's death is declared, frozen has stood still for 10 s or more,
    // over 0.75 of its 13: the deal gives it nothing, though it is the least loaded of the members alive.
    const { scheduler, storage, start } = group();
    await storage.putMember(GROUP, 'ghost', null, member('inc-ghost', { held: 12 }));
    await storage.putMember(GROUP, 'frozen', null, member('inc-frozen', { held: 12, leaseDurationMs: 13_000 }));
    for (const leaseKey of keys(12, 'ghost-')) await storage.createLease({ group: GROUP, leaseKey, owner: 'ghost', incarnation: 'inc-ghost', epoch: 1 });
    for (const leaseKey of keys(12, 'frozen-')) await storage.createLease({ group: GROUP, leaseKey, owner: 'frozen', incarnation: 'inc-frozen', epoch: 1 });
    for (const leaseKey of keys(36)) await storage.createLease({ group: GROUP, leaseKey });
    const workers: LeaseCoordinator[] = [];
    const declared = new Map<string, number>();
    let dealt = 0;
    for (const workerId of ids(3)) {
      const coordinator = await start(workerId, { useChangeFeed: true });
      coordinator.on('member-dead', ({ workerId: dead }) => declared.set(dead, Math.min(declared.get(dead) ?? Infinity, scheduler.now)));
      coordinator.on('storage', ({ operation, applied }) => operation === 'deal-dead' && (dealt += applied));
      workers.push(coordinator);
    }
    await until(scheduler, () => declared.has('ghost'), 60_000);
    // Frozen's record was written at 0 and read as it is ever since.
    const frozenStill = scheduler.now;
    // From ghost's declaration until its leases are all held: any of them written to frozen, as seen in the
    // store each 100 ms, and how long that took.
    const toFrozen = new Set<string>();
    const ghostHeld = (): number => workers.reduce((sum, w) => sum + w.heldLeases().filter((lease) => lease.leaseKey.startsWith('ghost-')).length, 0);
    for (;;) {
      for (const lease of (await storage.listLeases(GROUP)).leases) if (lease.leaseKey.startsWith('ghost-') && lease.owner === 'frozen') toFrozen.add(lease.leaseKey);
      if (ghostHeld() === 12 || scheduler.now - declared.get('ghost')! >= 30_000) break;
      await scheduler.advance(100);
    }
    const took = scheduler.now - declared.get('ghost')!;
    await until(scheduler, () => declared.has('frozen'), 60_000);
    await run(scheduler, Promise.all(workers.map((w) => w.stop())));
    // Ghost was declared before frozen's own lease duration ran out, and after 0.75 of it.
    expect(frozenStill).toBeGreaterThanOrEqual(0.75 * 13_000);
    expect(declared.get('frozen')!).toBeGreaterThan(declared.get('ghost')!);
    expect(dealt).toBeGreaterThan(0);
    expect([...toFrozen]).toEqual([]);
    // Held at once by the members the deal named: not at frozen's declaration, seconds later.
    expect(took).toBeLessThan(TICK / 2);
  });

  /**
   * Three coordinators and two members the test plays, `ghost` (12 leases) and `zombie` (4), each
   * heartbeating every 0.65 of its lease duration with the digest it read, zombie 5 s after ghost; ghost
   * stops, and zombie after one more heartbeat, as two members of one crash whose last heartbeats fell
   * apart. When ghost is declared, zombie has stood still for less than 0.75 of its lease duration, and is
   * the member furthest below its share: which of ghost's leases are written to zombie, and when ghost's
   * leases are all held.
   */
  const crashOfTwo = async (unsafe?: CoordinatorUnsafe) => {
    const { scheduler, storage, start } = group(unsafe);
    const puppets = new Map([
      ['ghost', { version: null as number | null, next: 0, lastAt: -Infinity, stopAt: 19_600 }],
      ['zombie', { version: null as number | null, next: 5_000, lastAt: -Infinity, stopAt: 24_600 }],
    ]);
    const beat = async (workerId: string): Promise<void> => {
      const puppet = puppets.get(workerId)!;
      const held = (await storage.listLeases(GROUP)).leases.filter((lease) => lease.owner === workerId).length;
      const digest = String(await storage.getRosterDigest(GROUP));
      const result = await storage.putMember(GROUP, workerId, puppet.version, member(`inc-${workerId}`, { held, metadata: { 'leasehold.digest': digest } }));
      if (result.status === 'applied') puppet.version = result.record.version;
      puppet.lastAt = scheduler.now;
      puppet.next = scheduler.now + 6_500;
    };
    for (const leaseKey of keys(12, 'ghost-')) await storage.createLease({ group: GROUP, leaseKey, owner: 'ghost', incarnation: 'inc-ghost', epoch: 1 });
    for (const leaseKey of keys(4, 'zombie-')) await storage.createLease({ group: GROUP, leaseKey, owner: 'zombie', incarnation: 'inc-zombie', epoch: 1 });
    for (const leaseKey of keys(36)) await storage.createLease({ group: GROUP, leaseKey });
    await beat('ghost');
    const heartbeats = (async () => {
      const clock = scheduler.clock();
      for (;;) {
        const beating = [...puppets].filter(([, puppet]) => scheduler.now < puppet.stopAt);
        if (beating.length === 0) return;
        for (const [workerId, puppet] of beating) if (scheduler.now >= puppet.next) await beat(workerId);
        await clock.sleep(100);
      }
    })();
    const workers: LeaseCoordinator[] = [];
    const declared = new Map<string, number>();
    for (const workerId of ids(3)) {
      const coordinator = await start(workerId, { useChangeFeed: true });
      coordinator.on('member-dead', ({ workerId: dead }) => declared.set(dead, Math.min(declared.get(dead) ?? Infinity, scheduler.now)));
      workers.push(coordinator);
    }
    await until(scheduler, () => declared.has('ghost'), 60_000);
    const ghostDeclared = declared.get('ghost')!;
    const toZombie = new Set<string>();
    const ghostHeld = (): number => workers.reduce((sum, w) => sum + w.heldLeases().filter((lease) => lease.leaseKey.startsWith('ghost-')).length, 0);
    while (ghostHeld() < 12 && scheduler.now - ghostDeclared < 30_000) {
      for (const lease of (await storage.listLeases(GROUP)).leases) if (lease.leaseKey.startsWith('ghost-') && lease.owner === 'zombie') toZombie.add(lease.leaseKey);
      await scheduler.advance(100);
    }
    const took = scheduler.now - ghostDeclared;
    await until(scheduler, () => declared.has('zombie'), 60_000);
    await run(scheduler, Promise.all(workers.map((w) => w.stop())));
    await run(scheduler, heartbeats);
    const zombieStill = ghostDeclared - puppets.get('zombie')!.lastAt;
    return { took, toZombie: [...toZombie], zombieStill, zombieDeclared: declared.get('zombie')! - ghostDeclared };
  };

  it('deals none of a dead member\'s leases to a member that did not answer the digest its watchers moved before the declaration: a member of the same crash that has not yet stood still for 0.75 of its lease duration waits for its own declaration, not with them', async () => {
    const { took, toZombie, zombieStill, zombieDeclared } = await crashOfTwo();
    // Zombie had stood still for less than 0.75 of its lease duration when ghost was declared, and was
    // declared itself seconds later.
    expect(zombieStill).toBeLessThan(0.75 * 10_000);
    expect(zombieDeclared).toBeGreaterThan(TICK);
    expect(toZombie).toEqual([]);
    expect(took).toBeLessThan(TICK / 2);
  });

  it('with unansweredDealt, writes a dead member\'s leases to a member of the same crash that did not answer the digest, where they wait for its declaration', async () => {
    const { took, toZombie, zombieStill } = await crashOfTwo({ unansweredDealt: true });
    expect(zombieStill).toBeLessThan(0.75 * 10_000);
    expect(toZombie.length).toBeGreaterThan(0);
    expect(took).toBeGreaterThan(TICK);
  });

  /**
   * 40 members over 4,000 leases with a change feed, balanced; ten of them (a quarter, every fourth by id)
   * crash at once. The survivors' listings of the group per survivor from the crash until balanced again,
   * and how long after the crash every lease of the crashed was held elsewhere and the group balanced.
   */
  async function quarterCrash(seed = 11, unsafe?: CoordinatorUnsafe) {
    const c = await cluster(seed, 40, 4_000, { startSpreadMs: TICK / 2, coordinator: { useChangeFeed: true }, ...(unsafe ? { unsafe } : {}) });
    try {
      await settled(c, 40);
      const victims = c.workers.filter((_, i) => i % 4 === 0);
      const gone = new Set(victims.map((worker) => worker.coordinator.workerId));
      /** When each victim was first declared dead. */
      const declared = new Map<string, number>();
      for (const worker of c.workers) {
        worker.coordinator.on('member-dead', ({ workerId }) => {
          if (!declared.has(workerId)) declared.set(workerId, c.scheduler.now);
        });
      }
      const orphans = (await c.store.listLeases(BENCH_GROUP)).leases.filter((lease) => lease.owner !== null && gone.has(lease.owner)).map((lease) => lease.leaseKey);
      for (const victim of victims) {
        victim.clock.kill();
        victim.alive = false;
      }
      const listings = (): number => c.live().reduce((sum, worker) => sum + (worker.storage.counts.calls.listLeases ?? 0), 0);
      const before = listings();
      const heldAfter = await advanceUntil(c.scheduler, () => orphans.every((leaseKey) => c.live().some((worker) => worker.coordinator.isHeld(leaseKey))), { stepMs: 100, precise: false, capMs: 60_000 });
      const rest = await advanceUntil(c.scheduler, () => balanced(c), { stepMs: 100, precise: false, capMs: 60_000 });
      const declarations = [...declared.values()].sort((a, b) => a - b);
      const longestLull = Math.max(0, ...declarations.slice(1).map((at, i) => at - (declarations[i] as number)));
      return { listed: (listings() - before) / c.live().length, heldAfter, balancedAfter: heldAfter === null || rest === null ? null : heldAfter + rest, longestLull };
    } finally {
      dispose(c);
    }
  }

  it('with a change feed, a crash of a quarter of the group brings the survivors no listing for counts read while the declarers deal the dead members\' leases: the deals land, and the group balances', async () => {
    const { listed, heldAfter, balancedAfter } = await quarterCrash();
    // 2.87 listings a survivor before (the members dealt a portion reading two above those whose portion was
    // on its way, and every member below the survivors' share), 0.47 now: the declarers' own listings.
    expect(listed).toBeLessThan(1.5);
    // Held elsewhere 6.8 s after the crash, before and now; balanced 7.5 s after it before, 6.8 s now.
    // (Since the feed's subscription names its owners, each delivery draws no latency for the members that
    // are not told: seed 11 then balances 4.2 s after the leases were held. Over seeds 1-24 the take-overs
    // and balances are as with every handover told to everyone, 8.3 s and 13.0 s against 8.3 and 12.9 on
    // the mean, the balance 0-7.9 s after the take-over, in steps of take ticks: the plan of moves' rounds.)
    expect(heldAfter).not.toBeNull();
    expect(heldAfter!).toBeLessThanOrEqual(12_000);
    expect(balancedAfter).not.toBeNull();
    expect(balancedAfter!).toBeLessThanOrEqual(heldAfter! + 4 * TICK);
  });

  it('with a change feed, a crash whose deaths are declared in two waves more than 1.8 take ticks apart brings no listing by the survivors between them: a member that looks gone is offered nothing, and the leases dealt to it wait for its declaration', async () => {
    // (Seed 4 until a cold start was dealt by one member, which moved the members' heartbeats: seeds 1-60
    // then show a lull of more than 1.8 ticks on 31 and 35.)
    const { listed, heldAfter, longestLull } = await quarterCrash(35);
    // The victims' last heartbeats were up to a heartbeat interval apart: so are their declarations.
    expect(longestLull).toBeGreaterThan(1.8 * TICK);
    // 2.07 listings a survivor before (at the end of the first wave's window, every member above listed to
    // offer leases to the members of the second wave, and then for the shortfall of the leases dealt to
    // them), 0.93 at seed 4 after it, 0.33 at seed 35 now.
    expect(listed).toBeLessThan(1.5);
    // Held elsewhere 11.1 s after the crash before, 11.0 s after it (seed 4), 11.1 s at seed 35 now.
    expect(heldAfter).not.toBeNull();
    expect(heldAfter!).toBeLessThanOrEqual(12_000);
  });

  it('with a change feed, deals again at once a lease another declarer wrote to a member this worker had just declared dead', async () => {
    // Seed 14: a declarer whose view still showed another victim alive dealt it leases 57 ms after that
    // victim's declaration; its declarer, which had dealt and listed already, hears of them on the feed.
    // The scene needs views a tick old: the watchers read here at the take ticks only (`dueReadsSkipped`),
    // as before they read a member when its heartbeat is due, which made it rarer (none of seeds 1-100
    // shows it with them; a ring moved by a death, or a busy host, still leaves views that old).
    const { heldAfter } = await quarterCrash(14, { dueReadsSkipped: true });
    expect(heldAfter).not.toBeNull();
    expect(heldAfter!).toBeLessThanOrEqual(12_000);
  });

  it('with lateDealIgnored, leaves a lease written to a member just declared dead for the counts\' shortfall, take ticks later', async () => {
    const { heldAfter } = await quarterCrash(14, { lateDealIgnored: true, dueReadsSkipped: true });
    expect(heldAfter!).toBeGreaterThan(14_000);
  });
});
