import { describe, expect, it } from 'vitest';
import type { LeaseRecord, LeaseUpdate, MemberState } from '../src/index.js';
import { leaseStateOf } from '../src/adapter.js';
import { ASKS_FIELD, writeAsks } from '../src/lease/join-asks.js';
import { LEAVING_FIELD } from '../src/lease/membership.js';
import { GROUP, joined, member, overriding, scripted, started, world, writeRewindRequest } from './support/lease-world.js';
import { run } from './support/virtual.js';

describe('LeaseCoordinator when stopping', () => {
  it('requests no handoff once stop() began, even from a take tick already in flight', async () => {
    const { scheduler, ready, worker, storage } = scripted(['s-0', 's-1', 's-2', 's-3']);
    await ready;
    const owner = worker('owner', { maxLeasesPerWorker: 4 });
    await joined(scheduler, owner.coordinator);
    expect(owner.coordinator.heldLeases()).toHaveLength(4);
    const asked: string[] = [];
    owner.coordinator.on('handoff-requested', ({ leaseKey }) => asked.push(leaseKey));
    const thief = worker('thief');
    let stopCalled = false;
    const requestedWhileStopping: string[] = [];
    thief.coordinator.on('steal-requested', ({ leaseKey }) => {
      if (stopCalled) requestedWhileStopping.push(leaseKey);
    });
    await started(scheduler, thief.coordinator); // its join tick: it lists and takes nothing yet
    // A lease appears; the feed wakes the thief's first listing, which takes it, and that write waits
    // while stop() begins. Still below its share with nothing free, it would go on to ask the owner.
    await storage.createLease({ group: GROUP, leaseKey: 'free' });
    const write = storage.holdNext('update', 'free');
    let called = false;
    while (!called && scheduler.now < 60_000) {
      called = await Promise.race([write.called.then(() => true), scheduler.advance(10).then(() => false)]);
    }
    expect(called).toBe(true);
    stopCalled = true;
    const stopping = thief.coordinator.stop();
    write.release();
    await run(scheduler, stopping);
    await scheduler.advance(5_000);
    expect(requestedWhileStopping).toEqual([]);
    expect(asked).toEqual([]);
    const thiefMember = (await storage.getRoster(GROUP)).members.find((m) => m.workerId === 'thief');
    expect(thiefMember).toMatchObject({ status: 'dead', requests: [] });
    expect(owner.coordinator.heldLeases()).toHaveLength(4);
    await run(scheduler, owner.coordinator.stop());
  });

  it('withdraws its own handoff requests and gives back a lease handed to it while it stopped', async () => {
    const { scheduler, ready, worker, storage } = scripted([]);
    await ready;
    // Another member holds four leases; the leaver, with none, asks it for two.
    await storage.putMember(GROUP, 'someone', null, member('inc-someone', { held: 4 }));
    for (let i = 0; i < 4; i++) {
      await storage.createLease({ group: GROUP, leaseKey: `k${i}`, owner: 'someone', incarnation: 'inc-someone', epoch: 3 });
    }
    const leaver = worker('leaver', { maxStealsPerTick: 2, useChangeFeed: false });
    const requested: string[] = [];
    leaver.coordinator.on('steal-requested', ({ leaseKey, from }) => {
      expect(from).toBe('someone');
      requested.push(leaseKey);
    });
    await joined(scheduler, leaver.coordinator);
    // It asks by name first (a newcomer's asks, which this member does not answer), then the usual way.
    for (let t = 0; t < 10_000 && requested.length < 2; t += 100) await scheduler.advance(100);
    expect(requested).toHaveLength(2);
    const before = (await storage.getRoster(GROUP)).members.find((m) => m.workerId === 'leaver');
    expect(before?.requests.map((request) => request.leaseKey).sort()).toEqual([...requested].sort());
    // The owner answers one request just as the leaver stops: it would otherwise hold that lease for nobody.
    const [handed, pending] = requested as [string, string];
    const lease = (await storage.getLease(GROUP, handed)) as LeaseRecord;
    await storage.updateLeases(GROUP, [
      { leaseKey: handed, expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner: 'leaver', incarnation: leaver.coordinator.incarnation, epoch: 4 }, notify: 'handed-off' },
    ]);
    await run(scheduler, leaver.coordinator.stop());
    const leases = new Map((await storage.listLeases(GROUP)).leases.map((record) => [record.leaseKey, record]));
    expect(leases.get(handed)).toMatchObject({ owner: null, incarnation: null, epoch: 4 });
    expect(leases.get(pending)).toMatchObject({ owner: 'someone', incarnation: 'inc-someone', epoch: 3 });
    const after = (await storage.getRoster(GROUP)).members.find((m) => m.workerId === 'leaver');
    expect(after).toMatchObject({ status: 'dead', requests: [] });
  });

  for (const unsafe of [false, true]) {
    it(unsafe
      ? 'with the unsafe release without retry, a release refused by an operator\'s rewind request is taken for a loss, and the lease stays named (the switch brings the defect back)'
      : 'releases on stop a lease whose version an operator\'s rewind request moved while it drained, sending the release again on the record the conflict carries, and the request stays on the free lease', async () => {
      const { scheduler, ready, worker, storage } = world(['shard-0']);
      await ready;
      const requestRewind = async (): Promise<void> => expect(await writeRewindRequest(storage, 'r1')).toBe('applied');
      const alone = worker('alone', { onDrain: requestRewind, unsafe: { releaseWithoutRetry: unsafe } });
      await joined(scheduler, alone.coordinator);
      expect(alone.coordinator.heldLeases().map((lease) => lease.leaseKey)).toEqual(['shard-0']);
      const lost: string[] = [];
      alone.coordinator.on('lost', ({ leaseKey }) => lost.push(leaseKey));
      await run(scheduler, alone.coordinator.stop());
      const stored = (await storage.getLease(GROUP, 'shard-0')) as LeaseRecord;
      expect(stored.metadata['leasehold.rewind']).toContain('r1');
      if (unsafe) {
        expect(stored.owner).toBe('alone');
        expect(lost).toEqual(['shard-0']);
      } else {
        expect(stored.owner).toBeNull();
        expect(lost).toEqual([]);
      }
    });
  }

  for (const unsafe of [false, true]) {
    it(unsafe
      ? 'with the unsafe switch, a stopping worker whose handover an operator\'s writes keep refusing gives it up, and the lease stays named to lapse (the switch brings the defect back)'
      : 'a stopping worker whose handover an operator\'s writes keep refusing writes the lease free instead, the request kept on it', async () => {
      const { scheduler, ready, worker, storage } = world(['shard-0']);
      await ready;
      // The tool's write of a request (owner, incarnation and epoch kept, the version moved), made just
      // before each of the stopping owner's handover writes: every handover conflicts, its tenure intact.
      let requests = 0;
      const requestRewind = async (): Promise<void> => void (await writeRewindRequest(storage, `r${++requests}`));
      const contested = overriding(storage, 'updateLeases', (target) => async (group: string, updates: readonly LeaseUpdate[]) => {
        if (updates.some((update) => update.notify === 'handed-off')) await requestRewind();
        return target.updateLeases(group, updates);
      });
      const owner = worker('owner', { storage: contested, unsafe: { stopHandoverKeeps: unsafe } });
      await joined(scheduler, owner.coordinator);
      expect(owner.coordinator.heldLeases().map((lease) => lease.leaseKey)).toEqual(['shard-0']);
      const other = worker('other');
      await joined(scheduler, other.coordinator);
      expect(other.coordinator.heldLeases()).toEqual([]);
      const lost: string[] = [];
      owner.coordinator.on('lost', ({ leaseKey, reason }) => lost.push(`${leaseKey} ${reason}`));
      await run(scheduler, owner.coordinator.stop());
      const stored = (await storage.getLease(GROUP, 'shard-0')) as LeaseRecord;
      // Both handover writes were refused by a request written just before them.
      expect(requests).toBe(2);
      expect(stored.metadata['leasehold.rewind']).toContain('r2');
      if (unsafe) {
        expect(stored.owner).toBe('owner');
        expect(lost).toEqual(['shard-0 handoff-timeout']);
      } else {
        expect(stored.owner).toBeNull();
        expect(lost).toEqual([]);
      }
      await run(scheduler, other.coordinator.stop());
    });
  }

  for (const unsafe of [false, true]) {
    it(unsafe
      ? 'with the unsafe switch, a stopping worker waits for its take tick\'s listing that the store never answers, and its whole timeout goes by with its lease not handed over (the switch brings the defect back)'
      : 'a stopping worker gives up its take tick\'s listing that the store is slow to answer, and hands its lease over at once', async () => {
      const { scheduler, ready, worker, storage } = world(['shard-0']);
      await ready;
      // The owner's view of the store: once stalled, its listings never answer; its other calls do.
      let stalled = false;
      let listingsWaiting = 0;
      const slow = overriding(storage, 'listLeases', (target) => async (group: string) => {
        if (!stalled) return target.listLeases(group);
        listingsWaiting++;
        return new Promise<never>(() => undefined);
      });
      const owner = worker('owner', { storage: slow, unsafe: { stopWaitsForListing: unsafe } });
      await joined(scheduler, owner.coordinator);
      const other = worker('other');
      await joined(scheduler, other.coordinator);
      expect(owner.coordinator.heldLeases().map((lease) => lease.leaseKey)).toEqual(['shard-0']);
      stalled = true;
      owner.coordinator.listSoon();
      while (listingsWaiting === 0 && scheduler.now < 60_000) await scheduler.advance(10);
      expect(listingsWaiting).toBe(1);
      const lost: string[] = [];
      owner.coordinator.on('lost', ({ leaseKey, reason }) => lost.push(`${leaseKey} ${reason}`));
      const acquired: string[] = [];
      other.coordinator.on('acquired', ({ leaseKey, how }) => acquired.push(`${leaseKey} ${how}`));
      const stoppedAt = scheduler.now;
      let returnedAt = -1;
      await run(scheduler, owner.coordinator.stop({ timeoutMs: 10_000 }).then(() => (returnedAt = scheduler.now)));
      if (unsafe) {
        // The whole timeout spent on the listing: nothing was handed over by the deadline.
        expect(returnedAt - stoppedAt).toBeGreaterThanOrEqual(10_000);
        expect(lost).toEqual(['shard-0 shutdown-timeout']);
      } else {
        expect(returnedAt - stoppedAt).toBeLessThan(1_000);
        expect(lost).toEqual([]);
        expect(acquired).toEqual(['shard-0 handoff']);
        expect((await storage.getLease(GROUP, 'shard-0'))?.owner).toBe('other');
      }
      await run(scheduler, other.coordinator.stop());
    });
  }

  it('writes no asks into the heartbeat that says it is leaving: a stopping member asks for nothing more', async () => {
    // Seed 157896 of the multi-stream consumer simulation: a newcomer's asks, written at its last tick, went
    // out again with its leaving heartbeat; its giver, reading them first there, answered them by handing
    // back the lease the stop had just handed it, and the stop returned with that lease named for it.
    const { scheduler, ready, worker, storage } = world(['s-0', 's-1', 's-2', 's-3', 's-4']);
    await ready;
    const giver = worker('giver', { maxLeasesPerWorker: 4 });
    await joined(scheduler, giver.coordinator);
    expect(giver.coordinator.heldLeases()).toHaveLength(4);
    const written: MemberState[] = [];
    const watched = overriding(storage, 'putMember', (target) => async (group: string, workerId: string, expectedVersion: number | null, next: MemberState) => {
      written.push(next);
      return target.putMember(group, workerId, expectedVersion, next);
    });
    const newcomer = worker('newcomer', { storage: watched });
    await joined(scheduler, newcomer.coordinator);
    // Its first listing takes the free lease and asks the giver for one more; it stops once that ask went out.
    while (!written.some((state) => state.metadata[ASKS_FIELD] !== undefined) && scheduler.now < 60_000) await scheduler.advance(10);
    expect(written.some((state) => state.metadata[ASKS_FIELD] !== undefined)).toBe(true);
    const handedToNewcomer: string[] = [];
    giver.coordinator.on('handoff-offered', ({ leaseKey, to }) => {
      if (to === 'newcomer') handedToNewcomer.push(leaseKey);
    });
    await run(scheduler, newcomer.coordinator.stop());
    await scheduler.advance(5_000);
    const leaving = written.filter((state) => state.metadata[LEAVING_FIELD] !== undefined);
    expect(leaving.length).toBeGreaterThan(0);
    expect(leaving.filter((state) => state.metadata[ASKS_FIELD] !== undefined)).toEqual([]);
    expect(handedToNewcomer).toEqual([]);
    expect((await storage.listLeases(GROUP)).leases.filter((lease) => lease.owner === 'newcomer')).toEqual([]);
    await run(scheduler, giver.coordinator.stop());
  });

  for (const how of ['asks', 'requests'] as const) {
    for (const leaving of [false, true]) {
      it(leaving
        ? `answers no ${how} of a member whose record says it is leaving: it takes nothing more (one of an earlier release still writes its asks there, and every stop its requests)`
        : `answers the ${how} of a member that is not leaving (the same record otherwise)`, async () => {
        const { scheduler, ready, worker, storage } = world(Array.from({ length: 7 }, (_, i) => `s-${i}`));
        await ready;
        const giver = worker('giver');
        await joined(scheduler, giver.coordinator);
        expect(giver.coordinator.heldLeases()).toHaveLength(7);
        const offered: string[] = [];
        giver.coordinator.on('handoff-offered', ({ to }) => offered.push(to));
        giver.coordinator.on('handoff-requested', ({ to }) => offered.push(to));
        // Another member, not leaving, makes the group's smallest share 3 of the 7: the giver may give two.
        await storage.putMember(GROUP, 'other', null, member('inc-other', { leaseDurationMs: 60_000 }));
        const metadata: Record<string, string> = leaving ? { [LEAVING_FIELD]: '1' } : {};
        if (how === 'asks') metadata[ASKS_FIELD] = writeAsks(new Map([['giver', 2]]), () => true) as string;
        const requests = how === 'requests' ? ['s-0', 's-1'].map((leaseKey) => ({ leaseKey, from: 'giver' })) : [];
        await storage.putMember(GROUP, 'asker', null, member('inc-asker', { leaseDurationMs: 60_000, metadata, requests }));
        await scheduler.advance(giver.coordinator.takeIntervalMs * 2);
        const toAsker = (await storage.listLeases(GROUP)).leases.filter((lease) => lease.owner === 'asker');
        if (leaving) {
          expect(offered.filter((to) => to === 'asker')).toEqual([]);
          expect(toAsker).toEqual([]);
        } else {
          expect(offered.filter((to) => to === 'asker')).toEqual(['asker', 'asker']);
          expect(toAsker).toHaveLength(2);
        }
      });
    }
  }

  for (const unsafe of [false, true]) {
    it(unsafe
      ? 'with the unsafe switch, a giver whose drain outlasted the requester\'s leaving heartbeat hands the lease to the leaving member all the same (the switch brings the defect back)'
      : 'hands no lease to a requester whose record said it was leaving by the time the drain finished: the lease stays the giver\'s, and its next listing takes it back', async () => {
      const { scheduler, ready, worker, storage } = world(Array.from({ length: 7 }, (_, i) => `s-${i}`));
      await ready;
      let drainGate = (): void => undefined;
      const draining = new Promise<void>((resolve) => (drainGate = resolve));
      let drains = 0;
      const giver = worker('giver', {
        onDrain: async (_lease, reason) => {
          if (reason !== 'handoff') return;
          drains++;
          await draining;
        },
        handoffTimeoutMs: 9_000,
        unsafe: { handoverToLeaving: unsafe },
      });
      await joined(scheduler, giver.coordinator);
      expect(giver.coordinator.heldLeases()).toHaveLength(7);
      const requested: string[] = [];
      giver.coordinator.on('handoff-requested', ({ leaseKey, to }) => requested.push(`${leaseKey} ${to}`));
      const handed: string[] = [];
      giver.coordinator.on('handed-off', ({ leaseKey, to }) => handed.push(`${leaseKey} ${to}`));
      const lost: string[] = [];
      giver.coordinator.on('lost', ({ leaseKey, reason }) => lost.push(`${leaseKey} ${reason}`));
      const requests = ['s-0', 's-1'].map((leaseKey) => ({ leaseKey, from: 'giver' }));
      const asked = await storage.putMember(GROUP, 'asker', null, member('inc-asker', { leaseDurationMs: 60_000, requests }));
      expect(asked.status).toBe('applied');
      // The giver answers both requests; their drains wait.
      for (let t = 0; t < 20_000 && drains < 2; t += 100) await scheduler.advance(100);
      expect(requested.sort()).toEqual(['s-0 asker', 's-1 asker']);
      // Meanwhile the requester begins to stop: its heartbeat says it is leaving (its requests still on it).
      const version = asked.status === 'applied' ? asked.record.version : -1;
      const leavingWrite = await storage.putMember(GROUP, 'asker', version, member('inc-asker', { leaseDurationMs: 60_000, requests, changes: 1, metadata: { [LEAVING_FIELD]: '1' } }));
      expect(leavingWrite.status).toBe('applied');
      await scheduler.advance(giver.coordinator.takeIntervalMs * 1.5);
      drainGate();
      await scheduler.advance(giver.coordinator.takeIntervalMs * 3);
      const toAsker = (await storage.listLeases(GROUP)).leases.filter((lease) => lease.owner === 'asker').map((lease) => lease.leaseKey);
      if (unsafe) {
        expect(toAsker.sort()).toEqual(['s-0', 's-1']);
        expect(handed.sort()).toEqual(['s-0 asker', 's-1 asker']);
      } else {
        expect(toAsker).toEqual([]);
        expect(handed).toEqual([]);
        // The handovers did not happen; the work stopped for them, so the leases are taken again, as new tenures.
        expect(lost.sort()).toEqual(['s-0 handoff-timeout', 's-1 handoff-timeout']);
        expect(giver.coordinator.heldLeases().map((lease) => lease.leaseKey).sort()).toEqual(Array.from({ length: 7 }, (_, i) => `s-${i}`));
      }
      await run(scheduler, giver.coordinator.stop());
    });
  }

  it('returns from stop() by its deadline when a drain never finishes', async () => {
    const { scheduler, ready, worker } = world(['shard-0']);
    await ready;
    const { coordinator } = worker('a', { onDrain: () => new Promise<void>(() => undefined) });
    await joined(scheduler, coordinator);
    expect(coordinator.isHeld('shard-0')).toBe(true);
    const stoppedAt = scheduler.now;
    let returnedAt = -1;
    const stopping = coordinator.stop({ timeoutMs: 1_000 }).then(() => (returnedAt = scheduler.now));
    const second = coordinator.stop({ timeoutMs: 60_000 });
    await run(scheduler, Promise.all([stopping, second]));
    expect(returnedAt - stoppedAt).toBeLessThanOrEqual(1_000);
    expect(coordinator.isHeld('shard-0')).toBe(false);
  });
});
