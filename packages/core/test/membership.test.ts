import { describe, expect, it } from 'vitest';
import {
  LeaseCoordinator,
  LeaseLostError,
  MemberExpelledError,
  MemoryStorage,
  type LeaseCoordinatorOptions,
  type LeaseListing,
  type LeaseRecord,
  type LeaseUpdate,
  type MemberRecord,
  type MemberState,
  type Roster,
  type WriteResult,
} from '../src/index.js';
import { RECORD_FORMAT } from '../src/adapter.js';
import { seededRandom, FaultyStorage, noFaults, VirtualScheduler, type VirtualClock, withUnsafe, type CoordinatorUnsafe } from '../src/testing/index.js';
import { run } from './support/virtual.js';
import { withoutWatcherReads } from '../src/testing/without-watcher-reads.js';

const GROUP = 'orders';

/** One worker's view of the shared store, counting the calls it makes. */
class CountingStorage extends FaultyStorage {
  readonly calls = { putMember: 0, updateLeases: 0, listLeases: 0, getRoster: 0, getMembers: 0, getRosterDigest: 0, getRosterMoves: 0, advanceRosterDigest: 0, betweenTicks: 0 };
  /** The worker whose view this is: its reads of watched members that leave out its own are those between two ticks (a heartbeat due, or a member seen still). */
  owner = '';

  constructor(...args: ConstructorParameters<typeof FaultyStorage>) {
    super(...args);
    // The watchers' reads are the fault-injecting store's own properties (present when the inner store
    // has them): counted by wrapping them.
    for (const name of ['getMembers', 'getRosterDigest', 'getRosterMoves', 'advanceRosterDigest'] as const) {
      const read = this[name] as ((...params: never[]) => Promise<unknown>) | undefined;
      if (!read) continue;
      Object.defineProperty(this, name, {
        value: (...params: never[]) => {
          this.calls[name]++;
          if (name === 'getMembers' && !(params[1] as unknown as readonly string[]).includes(this.owner)) this.calls.betweenTicks++;
          return read(...params);
        },
      });
    }
  }

  reset(): void {
    for (const name of Object.keys(this.calls) as Array<keyof CountingStorage['calls']>) this.calls[name] = 0;
  }

  override putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    this.calls.putMember++;
    return super.putMember(group, workerId, expectedVersion, next);
  }

  override updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    this.calls.updateLeases++;
    return super.updateLeases(group, updates);
  }

  override listLeases(group: string): Promise<LeaseListing> {
    this.calls.listLeases++;
    return super.listLeases(group);
  }

  override getRoster(group: string): Promise<Roster> {
    this.calls.getRoster++;
    return super.getRoster(group);
  }
}

function world(leaseKeys: string[] = [], { watcherReads = true } = {}) {
  const scheduler = new VirtualScheduler();
  const memory = new MemoryStorage();
  const storage = watcherReads ? memory : withoutWatcherReads(memory);
  const ready = Promise.all(leaseKeys.map((leaseKey) => storage.createLease({ group: GROUP, leaseKey })));
  let seed = 1;
  const worker = (workerId: string, { unsafe, ...options }: Partial<LeaseCoordinatorOptions> & { unsafe?: CoordinatorUnsafe } = {}) => {
    const clock: VirtualClock = scheduler.clock();
    const faults = noFaults();
    const view = new CountingStorage(storage, clock, seededRandom(seed), faults);
    view.owner = workerId;
    const coordinator = new LeaseCoordinator(withUnsafe({ storage: view, group: GROUP, workerId, clock, random: seededRandom(seed++), ...options }, unsafe));
    /** When it last sent a heartbeat (or its join) that applied: its hold runs from there. */
    const sent = { last: -Infinity };
    coordinator.on('joined', () => (sent.last = scheduler.now));
    coordinator.on('renewed', ({ durationMs }) => (sent.last = scheduler.now - durationMs));
    return { coordinator, faults, clock, view, sent };
  };
  return { scheduler, storage, memory, ready, worker };
}

/** Starts a worker and runs past its join tick to its first take tick. */
async function joined(scheduler: VirtualScheduler, coordinator: LeaseCoordinator): Promise<void> {
  await run(scheduler, coordinator.start());
  await scheduler.advance(coordinator.takeIntervalMs * 1.06);
}

/** A member record written by hand: a worker that is not running in the test. */
function member(incarnation: string, fields: Partial<MemberState> = {}): MemberState {
  return { format: RECORD_FORMAT, incarnation, leaseDurationMs: 10_000, status: 'alive', held: 0, changes: 0, requests: [], metadata: {}, ...fields };
}

async function memberOf(storage: MemoryStorage, workerId: string): Promise<MemberRecord | undefined> {
  return (await storage.getRoster(GROUP)).members.find((record) => record.workerId === workerId);
}

const keys = (n: number, prefix = 'shard-') => Array.from({ length: n }, (_, i) => `${prefix}${String(i).padStart(4, '0')}`);

describe('membership: what a worker costs', () => {
  it('heartbeats with one member write per heartbeat interval however many leases it holds, and writes no lease', async () => {
    const perSize: number[] = [];
    for (const size of [1, 500]) {
      const { scheduler, ready, worker } = world(keys(size));
      await ready;
      const a = worker('a');
      await joined(scheduler, a.coordinator);
      expect(a.coordinator.heldLeases()).toHaveLength(size);
      a.view.reset();
      const span = a.coordinator.renewIntervalMs * 10;
      await scheduler.advance(span);
      // Each interval is jittered by at most 5%.
      expect(a.view.calls.putMember).toBeGreaterThanOrEqual(Math.floor(span / (a.coordinator.renewIntervalMs * 1.05)));
      expect(a.view.calls.putMember).toBeLessThanOrEqual(Math.ceil(span / (a.coordinator.renewIntervalMs * 0.95)));
      expect(a.view.calls.updateLeases).toBe(0);
      expect(a.coordinator.heldLeases()).toHaveLength(size);
      perSize.push(a.view.calls.putMember);
      await run(scheduler, a.coordinator.stop());
    }
    expect(Math.abs((perSize[0] as number) - (perSize[1] as number))).toBeLessThanOrEqual(1);
  });

  it('answers a suspect named in the roster with one heartbeat at its next take tick, on top of its regular heartbeats, which keep their pace', async () => {
    const { scheduler, ready, worker, storage } = world(keys(30));
    await ready;
    const workers = ['a', 'b', 'c'].map((id) => worker(id, { wholeRosterUpTo: 0 }));
    const beats = new Map<string, number[]>(['a', 'b', 'c'].map((id) => [id, []]));
    workers.forEach((w, i) => w.coordinator.on('renewed', ({ durationMs }) => beats.get(['a', 'b', 'c'][i]!)!.push(scheduler.now - durationMs)));
    for (const w of workers) await run(scheduler, w.coordinator.start());
    await scheduler.advance(60_000);
    const interval = workers[0]!.coordinator.renewIntervalMs;
    // Half an interval after a's last heartbeat, the digest moves (anyone's write others must look at).
    const last = beats.get('a')!.at(-1)!;
    await scheduler.advance(last + interval / 2 - scheduler.now);
    const movedAt = scheduler.now;
    // A member (played by the test, stopping, so that nobody offers it leases) names a suspect at the digest it advanced to, and moves the digest again for its write.
    const moved = await storage.advanceRosterDigest(GROUP);
    await storage.putMember(GROUP, 'namer', null, { format: RECORD_FORMAT, incarnation: 'inc-namer', leaseDurationMs: 10_000, status: 'alive', held: 0, changes: 0, requests: [], metadata: { 'leasehold.leaving': '1', 'leasehold.suspect.a': String(moved) } });
    await storage.advanceRosterDigest(GROUP);
    await scheduler.advance(2 * interval);
    for (const w of workers) {
      const id = w.coordinator.workerId;
      const after = beats.get(id)!.filter((at) => at >= movedAt);
      const before = beats.get(id)!.filter((at) => at < movedAt).at(-1)!;
      // The answer, within a take tick and a quarter of the move; then the regular heartbeats, as paced before it.
      expect(after[0]! - movedAt).toBeLessThanOrEqual(1.25 * 2_000);
      // (Until the namer, which never heartbeats, has stood still for 0.7 of its lease duration: its watchers then name it.)
      const regular = after.slice(1).filter((at) => at < movedAt + 6_900);
      expect(regular.length).toBeGreaterThanOrEqual(1);
      for (const [i, at] of regular.entries()) {
        // Each interval jittered by at most 5%, and the writes' latency.
        expect(at - before).toBeGreaterThanOrEqual((i + 1) * interval * 0.95 - 100);
        expect(at - before).toBeLessThanOrEqual((i + 1) * interval * 1.05 + 100);
      }
      expect(Number((await storage.getRoster(GROUP)).members.find((m) => m.workerId === id)?.metadata['leasehold.digest'])).toBeGreaterThanOrEqual(moved);
    }
    await run(scheduler, Promise.all(workers.map((w) => w.coordinator.stop())));
  });

  it('writes no lease at all in steady state; reads the digest and its watched members every take tick, the whole roster only every 30 ticks, and lists the leases only for the periodic refresh', async () => {
    const { scheduler, ready, worker, storage } = world(keys(30));
    await ready;
    const workers = ['a', 'b', 'c'].map((id) => worker(id, { wholeRosterUpTo: 0 }));
    for (const w of workers) await run(scheduler, w.coordinator.start());
    await scheduler.advance(60_000);
    expect(workers.map((w) => w.coordinator.heldLeases().length)).toEqual([10, 10, 10]);
    const versions = new Map((await storage.listLeases(GROUP)).leases.map((lease) => [lease.leaseKey, lease.version]));
    for (const w of workers) w.view.reset();
    await scheduler.advance(600_000); // ten quiet minutes
    const ticks = Math.floor(600_000 / (2_000 * 1.05));
    for (const w of workers) {
      expect(w.view.calls.updateLeases).toBe(0);
      // Heartbeats that change nothing else never move the digest.
      expect(w.view.calls.advanceRosterDigest).toBe(0);
      // The digest, read with its moves since the last read (the memory store has getRosterMoves).
      const digestReads = w.view.calls.getRosterDigest + w.view.calls.getRosterMoves;
      expect(digestReads).toBeGreaterThanOrEqual(ticks);
      expect(w.view.calls.getRoster).toBeLessThanOrEqual(Math.ceil(600_000 / (30 * 2_000 * 0.95)));
      // Each tick reads the digest, then its watched members or the whole roster; a listing reads the roster after it.
      expect(w.view.calls.getMembers - w.view.calls.betweenTicks + w.view.calls.getRoster - w.view.calls.listLeases).toBe(digestReads);
      // Between two ticks, each of the two members it watches is read when its heartbeat is due, every
      // quarter tick from the earliest moment the heartbeat can come until a read shows it (a heartbeat comes
      // within 5% of its interval of its moment, so about twice a heartbeat), and once more when it was not
      // seen to move for 0.7 of its lease duration: three times a heartbeat of each at most, on average.
      expect(w.view.calls.betweenTicks).toBeGreaterThanOrEqual(2 * Math.floor(600_000 / (6_500 * 1.05)));
      expect(w.view.calls.betweenTicks).toBeLessThanOrEqual(3 * 2 * Math.ceil(600_000 / (6_500 * 0.95)));
      expect(w.view.calls.listLeases).toBeLessThanOrEqual(1);
      expect(w.coordinator.heldLeases()).toHaveLength(10);
    }
    const after = (await storage.listLeases(GROUP)).leases;
    expect(after.every((lease) => lease.version === versions.get(lease.leaseKey))).toBe(true);
    await run(scheduler, Promise.all(workers.map((w) => w.coordinator.stop())));
  });

  it('on a store without the watchers\' reads, writes no lease in steady state and reads the whole roster every take tick', async () => {
    const { scheduler, ready, worker, storage } = world(keys(30), { watcherReads: false });
    await ready;
    const workers = ['a', 'b', 'c'].map((id) => worker(id));
    for (const w of workers) await run(scheduler, w.coordinator.start());
    await scheduler.advance(60_000);
    expect(workers.map((w) => w.coordinator.heldLeases().length)).toEqual([10, 10, 10]);
    const versions = new Map((await storage.listLeases(GROUP)).leases.map((lease) => [lease.leaseKey, lease.version]));
    for (const w of workers) w.view.reset();
    await scheduler.advance(600_000); // ten quiet minutes
    for (const w of workers) {
      expect(w.view.calls.updateLeases).toBe(0);
      expect(w.view.calls.getRoster).toBeGreaterThanOrEqual(Math.floor(600_000 / (2_000 * 1.05)));
      expect(w.view.calls.listLeases).toBeLessThanOrEqual(1);
      expect(w.coordinator.heldLeases()).toHaveLength(10);
    }
    const after = (await storage.listLeases(GROUP)).leases;
    expect(after.every((lease) => lease.version === versions.get(lease.leaseKey))).toBe(true);
    await run(scheduler, Promise.all(workers.map((w) => w.coordinator.stop())));
  });

  it('on a cold start of 10 workers and 1,000 free leases without a change feed, holds every lease fairly within 3 take ticks of the join tick, acquiring each about once', async () => {
    const { scheduler, ready, worker, storage } = world(keys(1_000));
    await ready;
    const workers = Array.from({ length: 10 }, (_, i) => worker(`w${i}`, { useChangeFeed: false }).coordinator);
    let acquisitions = 0;
    for (const coordinator of workers) coordinator.on('acquired', () => acquisitions++);
    await run(scheduler, Promise.all(workers.map((coordinator) => coordinator.start())));
    const joinTick = scheduler.now;
    expect(acquisitions).toBe(0);
    await scheduler.advanceTo(joinTick + 3 * 2_000 * 1.05);
    const counts = workers.map((coordinator) => coordinator.heldLeases().length);
    expect(counts.reduce((sum, count) => sum + count, 0)).toBe(1_000);
    expect(Math.max(...counts) - Math.min(...counts)).toBeLessThanOrEqual(1);
    expect((await storage.listLeases(GROUP)).leases.every((lease) => lease.owner !== null)).toBe(true);
    expect(acquisitions).toBeLessThanOrEqual(1_050);
    await run(scheduler, Promise.all(workers.map((coordinator) => coordinator.stop())));
  });
});

describe('membership: declaring a member dead', () => {
  /**
   * A long-lived member that heartbeats for a while and then crashes, watched by a worker configured with
   * a much shorter lease duration; `overlaps` lists each lease the watcher took while the member still
   * counted it as held.
   */
  async function longerLivedMember(unsafe: CoordinatorUnsafe = {}) {
    const { scheduler, ready, worker } = world(keys(4));
    await ready;
    const long = worker('long', { leaseDurationMs: 20_000 });
    await joined(scheduler, long.coordinator);
    const short = worker('short', { leaseDurationMs: 5_000, unsafe });
    const expiredAt: number[] = [];
    const deadAt: number[] = [];
    const overlaps: string[] = [];
    const expelled: string[] = [];
    short.coordinator.on('acquired', ({ leaseKey, how }) => {
      if (how === 'expired') expiredAt.push(scheduler.now);
      if (long.coordinator.isHeld(leaseKey)) overlaps.push(leaseKey);
    });
    short.coordinator.on('member-dead', ({ workerId }) => workerId === 'long' && deadAt.push(scheduler.now));
    long.coordinator.on('lost', ({ leaseKey, reason }) => reason === 'expelled' && expelled.push(leaseKey));
    await joined(scheduler, short.coordinator);
    await scheduler.advance(30_000);
    const deadWhileAlive = deadAt.length;
    const heldAtCrash = long.coordinator.heldLeases().length;
    long.clock.kill(); // a crash: it never heartbeats again
    const lastSent = long.sent.last;
    await scheduler.advance(60_000);
    return { long, short, expiredAt, deadAt, overlaps, expelled, deadWhileAlive, heldAtCrash, lastSent, scheduler };
  }

  it('declares a member dead only after the longer of both lease durations without a change, on its own clock', async () => {
    const { long, short, expiredAt, deadAt, overlaps, deadWhileAlive, heldAtCrash, lastSent, scheduler } = await longerLivedMember();
    // Heartbeating every 13 s, the member never looks dead to a worker that waits only 5 s for its own.
    expect(deadWhileAlive).toBe(0);
    expect(heldAtCrash).toBeGreaterThan(0);
    expect(deadAt).toHaveLength(1);
    expect(deadAt[0]).toBeGreaterThanOrEqual(lastSent + 20_000);
    expect(deadAt[0]).toBeLessThanOrEqual(lastSent + 20_000 + 2 * 2_100);
    expect(expiredAt.length).toBeGreaterThan(0);
    // Never while the crashed member could still count its leases as held.
    expect(Math.min(...expiredAt)).toBeGreaterThanOrEqual(lastSent + long.coordinator.holdMs);
    expect(overlaps).toEqual([]);
    expect(short.coordinator.heldLeases()).toHaveLength(4);
    await run(scheduler, short.coordinator.stop());
  });

  it('with the unsafe own-duration expiry, a worker with a shorter lease duration declares a live longer-lived member dead and takes leases it still holds (the switch brings the defect back)', async () => {
    const { deadWhileAlive, overlaps, expelled } = await longerLivedMember({ ownDurationOnly: true });
    expect(deadWhileAlive).toBeGreaterThan(0);
    expect(overlaps.length).toBeGreaterThan(0);
    expect(expelled.length).toBeGreaterThan(0);
  });

  it('takes the leases of a crashed worker once it declared it dead, keeping their checkpoints, in a new tenure', async () => {
    const { scheduler, ready, worker, storage } = world(keys(4));
    await ready;
    const crashed = worker('crashed');
    await joined(scheduler, crashed.coordinator);
    const heir = worker('heir');
    await joined(scheduler, heir.coordinator);
    await scheduler.advance(30_000);
    const theirs = crashed.coordinator.heldLeases();
    expect(theirs).toHaveLength(2);
    for (const lease of theirs) await run(scheduler, crashed.coordinator.checkpoint(lease, '7'));
    const incarnation = crashed.coordinator.incarnation;
    const deadAt: number[] = [];
    const acquired: Array<{ leaseKey: string; how: string; fencingToken: number; checkpoint: string | null; at: number }> = [];
    heir.coordinator.on('member-dead', (event) => {
      expect(event).toEqual({ workerId: 'crashed', incarnation });
      deadAt.push(scheduler.now);
    });
    heir.coordinator.on('acquired', (event) => acquired.push({ ...event, at: scheduler.now }));
    crashed.clock.kill();
    const lastSent = crashed.sent.last;
    await scheduler.advance(30_000);
    expect(deadAt).toHaveLength(1);
    expect(deadAt[0]).toBeGreaterThanOrEqual(lastSent + 10_000);
    expect(await memberOf(storage, 'crashed')).toMatchObject({ status: 'dead', incarnation });
    expect(acquired.map((event) => event.leaseKey).sort()).toEqual(theirs.map((lease) => lease.leaseKey).sort());
    for (const event of acquired) {
      const before = theirs.find((lease) => lease.leaseKey === event.leaseKey) as (typeof theirs)[number];
      expect(event).toMatchObject({ how: 'expired', checkpoint: '7', fencingToken: before.fencingToken + 1 });
      expect(event.at).toBeGreaterThanOrEqual(deadAt[0] as number);
      expect(await storage.getLease(GROUP, event.leaseKey)).toMatchObject({ owner: 'heir', incarnation: heir.coordinator.incarnation, checkpoint: '7' });
    }
    expect(heir.coordinator.heldLeases()).toHaveLength(4);
    await run(scheduler, heir.coordinator.stop());
  });

  it('a worker paused past its hold is declared dead and its leases taken; on waking its signals are aborted, its heartbeat conflicts, and it joins again as a new incarnation and takes a fair share', async () => {
    const { scheduler, ready, worker, storage } = world(keys(4));
    await ready;
    const zombie = worker('zombie');
    await joined(scheduler, zombie.coordinator);
    const heir = worker('heir');
    await joined(scheduler, heir.coordinator);
    await scheduler.advance(30_000);
    const handles = zombie.coordinator.heldLeases();
    expect(handles).toHaveLength(2);
    const first = zombie.coordinator.incarnation;
    const lost: string[] = [];
    const errors: Error[] = [];
    const incarnations: string[] = [];
    zombie.coordinator.on('lost', ({ leaseKey, reason }) => lost.push(`${leaseKey}:${reason}`));
    zombie.coordinator.on('error', ({ error }) => errors.push(error));
    zombie.coordinator.on('joined', ({ incarnation }) => incarnations.push(incarnation));
    const wakeAt = scheduler.now + 30_000;
    // The first thing that runs on waking, as an I/O completion could: it sees every signal aborted.
    const seenOnWaking = zombie.clock.sleep(1_000).then(() => handles.map((lease) => lease.signal.aborted));
    zombie.clock.pauseUntil(wakeAt);
    await scheduler.advanceTo(wakeAt - 1);
    // Meanwhile the heir declared it dead and took its leases, in a new tenure.
    expect(await memberOf(storage, 'zombie')).toMatchObject({ status: 'dead', incarnation: first });
    expect(heir.coordinator.heldLeases()).toHaveLength(4);
    for (const lease of handles) expect((await storage.getLease(GROUP, lease.leaseKey))?.epoch).toBe(lease.fencingToken + 1);
    await scheduler.advance(2_000);
    expect(await seenOnWaking).toEqual([true, true]);
    for (const lease of handles) expect(lease.signal.reason).toBeInstanceOf(LeaseLostError);
    expect(lost.sort()).toEqual(handles.map((lease) => `${lease.leaseKey}:self-fenced`).sort());
    expect(errors.filter((error) => error instanceof MemberExpelledError)).toHaveLength(1);
    await scheduler.advance(60_000);
    expect(incarnations).toHaveLength(1);
    expect(incarnations[0]).not.toBe(first);
    expect(zombie.coordinator.incarnation).toBe(incarnations[0]);
    expect(zombie.coordinator.heldLeases()).toHaveLength(2);
    expect(heir.coordinator.heldLeases()).toHaveLength(2);
    await run(scheduler, Promise.all([zombie.coordinator.stop(), heir.coordinator.stop()]));
  });

  it('a worker written dead while it still holds its leases drops every one of them as expelled and joins again', async () => {
    const { scheduler, ready, worker, storage } = world(keys(2));
    await ready;
    const a = worker('a');
    await joined(scheduler, a.coordinator);
    const handles = a.coordinator.heldLeases();
    expect(handles).toHaveLength(2);
    const first = a.coordinator.incarnation;
    const lost: string[] = [];
    a.coordinator.on('lost', ({ leaseKey, reason }) => lost.push(`${leaseKey}:${reason}`));
    const stored = (await memberOf(storage, 'a')) as MemberRecord;
    // An operator evicts it (or another worker declared it dead): its hold has not run out yet.
    await storage.putMember(GROUP, 'a', stored.version, { ...member(stored.incarnation), status: 'dead' });
    await scheduler.advance(a.coordinator.takeIntervalMs * 1.06);
    expect(lost.sort()).toEqual(handles.map((lease) => `${lease.leaseKey}:expelled`).sort());
    expect(handles.every((lease) => lease.signal.aborted)).toBe(true);
    await scheduler.advance(10_000);
    expect(a.coordinator.incarnation).not.toBeNull();
    expect(a.coordinator.incarnation).not.toBe(first);
    expect(a.coordinator.heldLeases()).toHaveLength(2);
    await run(scheduler, a.coordinator.stop());
  });

  it('a worker whose id is already alive in the roster (a duplicate process) does not join until that member expired', async () => {
    const { scheduler, ready, worker, storage } = world(keys(3));
    await ready;
    const original = worker('a');
    await joined(scheduler, original.coordinator);
    const duplicate = worker('a');
    const joinedAt: number[] = [];
    duplicate.coordinator.on('joined', () => joinedAt.push(scheduler.now));
    await run(scheduler, duplicate.coordinator.start());
    await scheduler.advance(60_000);
    expect(joinedAt).toEqual([]);
    expect(duplicate.coordinator.incarnation).toBeNull();
    expect(duplicate.view.calls.putMember).toBe(0);
    expect(duplicate.view.calls.updateLeases).toBe(0);
    expect(original.coordinator.heldLeases()).toHaveLength(3);
    expect((await memberOf(storage, 'a'))?.incarnation).toBe(original.coordinator.incarnation);
    const first = original.coordinator.incarnation;
    original.clock.kill();
    const lastSent = original.sent.last;
    await scheduler.advance(30_000);
    expect(joinedAt).toHaveLength(1);
    expect(joinedAt[0]).toBeGreaterThanOrEqual(lastSent + 10_000);
    expect(duplicate.coordinator.incarnation).not.toBe(first);
    expect(duplicate.coordinator.heldLeases()).toHaveLength(3);
    expect((await storage.listLeases(GROUP)).leases.every((lease) => lease.incarnation === duplicate.coordinator.incarnation && lease.epoch === 2)).toBe(true);
    await run(scheduler, duplicate.coordinator.stop());
  });

  it('never takes the leases of another member whose record cannot be read back, nor declares it dead', async () => {
    const { scheduler, ready, worker, storage } = world(keys(2, 'free-'));
    await ready;
    await storage.putMember(GROUP, 'ghost', null, member('inc-ghost', { held: 2 }));
    for (const leaseKey of ['ghost-0', 'ghost-1']) {
      await storage.createLease({ group: GROUP, leaseKey, owner: 'ghost', incarnation: 'inc-ghost', epoch: 1 });
    }
    storage.corruptMember(GROUP, 'ghost');
    const a = worker('a');
    const dead: string[] = [];
    const rosterErrors: Error[] = [];
    a.coordinator.on('member-dead', ({ workerId }) => dead.push(workerId));
    a.coordinator.on('error', ({ error, operation }) => operation === 'roster' && rosterErrors.push(error));
    await joined(scheduler, a.coordinator);
    await scheduler.advance(120_000);
    expect(a.coordinator.heldLeases().map((lease) => lease.leaseKey).sort()).toEqual(['free-0000', 'free-0001']);
    for (const leaseKey of ['ghost-0', 'ghost-1']) {
      expect(await storage.getLease(GROUP, leaseKey)).toMatchObject({ owner: 'ghost', incarnation: 'inc-ghost', epoch: 1, version: 1 });
    }
    expect(dead).toEqual([]);
    expect(rosterErrors).toHaveLength(1);
    await run(scheduler, a.coordinator.stop());
  });
});

describe('membership: a worker that cannot heartbeat', () => {
  it('takes nothing while its own record cannot be written, so that it never moves the epochs of the leases it lost', async () => {
    const { scheduler, ready, worker, storage } = world(keys(4));
    await ready;
    const a = worker('a');
    const b = worker('b');
    for (const w of [a, b]) await run(scheduler, w.coordinator.start());
    await scheduler.advance(30_000);
    const mine = a.coordinator.heldLeases().map((lease) => lease.leaseKey);
    expect(mine.length).toBeGreaterThan(0);
    const epochs = new Map<string, number>();
    for (const leaseKey of mine) epochs.set(leaseKey, (await storage.getLease(GROUP, leaseKey))?.epoch ?? -1);
    // Its record is damaged: every heartbeat is refused, the hold runs out, and its leases are lost.
    storage.corruptMember(GROUP, 'a');
    await scheduler.advance(60_000);
    expect(a.coordinator.heldLeases()).toEqual([]);
    for (const leaseKey of mine) {
      // Still naming a's incarnation (b may not judge a member it cannot read), at the epoch it had.
      expect((await storage.getLease(GROUP, leaseKey))?.epoch).toBe(epochs.get(leaseKey));
    }
    for (const w of [a, b]) await run(scheduler, w.coordinator.stop());
  });
});

describe('membership: hearing of changes', () => {
  it('lists and takes a lease created later at once with a change feed', async () => {
    const { scheduler, ready, worker, storage } = world(keys(2));
    await ready;
    const a = worker('a');
    const b = worker('b');
    for (const w of [a, b]) await run(scheduler, w.coordinator.start());
    await scheduler.advance(30_000);
    const takenAt: number[] = [];
    for (const w of [a, b]) w.coordinator.on('acquired', ({ leaseKey }) => leaseKey === 'late' && takenAt.push(scheduler.now));
    const createdAt = scheduler.now;
    await storage.createLease({ group: GROUP, leaseKey: 'late' });
    await scheduler.advance(100);
    expect(takenAt).toHaveLength(1);
    expect((takenAt[0] as number) - createdAt).toBeLessThan(100);
    await run(scheduler, Promise.all([a.coordinator.stop(), b.coordinator.stop()]));
  });

  it('without a change feed, lists and takes a lease created later at the next take tick after noteLeasesChanged(), and not before', async () => {
    const { scheduler, ready, worker, storage } = world(keys(2));
    await ready;
    // The worker that notes the change (as the leader does after creating leases) is 'b'; the split of the
    // free lease gives it to 'a' (first in order, below its share), which hears of it only through the roster.
    const leader = worker('b', { useChangeFeed: false });
    const other = worker('a', { useChangeFeed: false });
    for (const w of [leader, other]) await run(scheduler, w.coordinator.start());
    await scheduler.advance(30_000);
    expect(other.coordinator.heldLeases()).toHaveLength(1);
    const takenAt: number[] = [];
    other.coordinator.on('acquired', ({ leaseKey }) => leaseKey === 'late' && takenAt.push(scheduler.now));
    await storage.createLease({ group: GROUP, leaseKey: 'late' });
    await scheduler.advance(60_000);
    expect(takenAt).toEqual([]); // nobody listed: nothing said the leases changed
    const notedAt = scheduler.now;
    leader.coordinator.noteLeasesChanged();
    await scheduler.advance(2 * 2_000 * 1.05);
    expect(takenAt).toHaveLength(1);
    // At the other worker's next take tick after the heartbeat that carries the note.
    expect((takenAt[0] as number) - notedAt).toBeLessThanOrEqual(2_000 * 1.05 + 10);
    expect(other.coordinator.isHeld('late')).toBe(true);
    await run(scheduler, Promise.all([leader.coordinator.stop(), other.coordinator.stop()]));
  });
});

describe('membership: handoffs and leaving', () => {
  it('never asks a member that by its own count is not two above it, though the listing shows it holding more', async () => {
    const { scheduler, ready, worker, storage } = world();
    await ready;
    // The owner's leases, as listed, are four; its own latest count says one (it is giving leases away).
    await storage.putMember(GROUP, 'owner', null, member('inc-owner', { held: 1 }));
    for (const leaseKey of keys(4, 'owned-')) {
      await storage.createLease({ group: GROUP, leaseKey, owner: 'owner', incarnation: 'inc-owner', epoch: 1 });
    }
    const thief = worker('thief', { useChangeFeed: false });
    const requested: string[] = [];
    thief.coordinator.on('steal-requested', ({ leaseKey }) => requested.push(leaseKey));
    await run(scheduler, thief.coordinator.start());
    await scheduler.advance(8_000);
    expect(requested).toEqual([]);
    expect((await memberOf(storage, 'thief'))?.requests).toEqual([]);
    await run(scheduler, thief.coordinator.stop());
  });

  it('drops a handoff request within a take tick once the member asked says, by its own count, that it is no longer two above, instead of waiting for an answer', async () => {
    const { scheduler, ready, worker, storage } = world();
    await ready;
    const owner = await storage.putMember(GROUP, 'owner', null, member('inc-owner', { held: 4 }));
    for (const leaseKey of keys(4, 'owned-')) {
      await storage.createLease({ group: GROUP, leaseKey, owner: 'owner', incarnation: 'inc-owner', epoch: 1 });
    }
    const thief = worker('thief', { useChangeFeed: false });
    const requestedAt: number[] = [];
    thief.coordinator.on('steal-requested', () => requestedAt.push(scheduler.now));
    await run(scheduler, thief.coordinator.start());
    for (let t = 0; t < 8_000 && requestedAt.length === 0; t += 10) await scheduler.advance(10);
    expect(requestedAt.length).toBeGreaterThanOrEqual(1);
    expect((await memberOf(storage, 'thief'))?.requests.length).toBeGreaterThan(0);
    // The owner heartbeats a count of one (it is giving leases away elsewhere).
    if (owner.status !== 'applied') throw new Error('the owner could not be written');
    await storage.putMember(GROUP, 'owner', owner.record.version, member('inc-owner', { held: 1 }));
    const loweredAt = scheduler.now;
    let dropped = -1;
    for (let t = 0; t < 8_000 && dropped < 0; t += 10) {
      await scheduler.advance(10);
      if (((await memberOf(storage, 'thief'))?.requests ?? []).length === 0) dropped = scheduler.now;
    }
    expect(dropped).toBeGreaterThan(0);
    // One take tick, where an answer could take a drain, a lease duration and more.
    expect(dropped - loweredAt).toBeLessThanOrEqual(2_000 * 1.05 + 10);
    await run(scheduler, thief.coordinator.stop());
  });

  it('carries the fields a handoff request holds that core does not name through its own later writes of its member', async () => {
    const { scheduler, ready, worker, storage } = world();
    await ready;
    // The owner runs with a long lease duration and does not answer: the request stays open.
    await storage.putMember(GROUP, 'owner', null, member('inc-owner', { held: 4, leaseDurationMs: 600_000 }));
    for (const leaseKey of keys(4, 'owned-')) {
      await storage.createLease({ group: GROUP, leaseKey, owner: 'owner', incarnation: 'inc-owner', epoch: 1 });
    }
    const thief = worker('thief', { useChangeFeed: false });
    await run(scheduler, thief.coordinator.start());
    for (let t = 0; t < 8_000 && ((await memberOf(storage, 'thief'))?.requests ?? []).length === 0; t += 10) await scheduler.advance(10);
    const asked = (await memberOf(storage, 'thief')) as MemberRecord;
    expect(asked.requests.length).toBeGreaterThan(0);
    // A later core's fields on each request (and on the member), written over the worker's own record.
    const later = { ...asked, requests: asked.requests.map((request) => ({ ...request, 'x-later': { priority: 2 } })), 'x-member': 'kept' } as MemberState;
    const written = await storage.putMember(GROUP, 'thief', asked.version, later);
    if (written.status !== 'applied') throw new Error('the thief could not be written');
    for (let t = 0; t < 20_000 && ((await memberOf(storage, 'thief'))?.version ?? 0) <= written.record.version; t += 100) await scheduler.advance(100);
    const after = (await memberOf(storage, 'thief')) as MemberRecord;
    expect(after.version).toBeGreaterThan(written.record.version);
    expect(after.requests).toEqual(asked.requests.map((request) => ({ ...request, 'x-later': { priority: 2 } })));
    expect((after as unknown as Record<string, unknown>)['x-member']).toBe('kept');
    await run(scheduler, thief.coordinator.stop());
  });

  it('on stop, with everything released, writes its member dead, and the others take its leases at once', async () => {
    const { scheduler, ready, worker, storage } = world(keys(4));
    await ready;
    const leaving = worker('leaving');
    const staying = worker('staying', { takeIntervalMs: 5_000 });
    for (const w of [leaving, staying]) await run(scheduler, w.coordinator.start());
    await scheduler.advance(60_000);
    expect(leaving.coordinator.heldLeases()).toHaveLength(2);
    const stoppedAt = scheduler.now;
    await run(scheduler, leaving.coordinator.stop());
    expect(await memberOf(storage, 'leaving')).toMatchObject({ status: 'dead', held: 0, requests: [] });
    await scheduler.advance(100);
    expect(staying.coordinator.heldLeases()).toHaveLength(4);
    expect(scheduler.now - stoppedAt).toBeLessThan(staying.coordinator.takeIntervalMs);
    await run(scheduler, staying.coordinator.stop());
  });

  it('on stop, hands each drained lease to the least loaded member staying, which holds it at once without a take', async () => {
    for (const useChangeFeed of [true, false]) {
      const { scheduler, ready, worker, storage } = world(keys(4));
      await ready;
      // Long ticks for the members staying: with a change feed they hold what is handed to them at once.
      const leaving = worker('leaving', { useChangeFeed });
      const x = worker('x', { takeIntervalMs: 5_000, useChangeFeed });
      const y = worker('y', { takeIntervalMs: 5_000, useChangeFeed });
      for (const w of [leaving, x, y]) await run(scheduler, w.coordinator.start());
      await scheduler.advance(60_000);
      expect([leaving, x, y].map((w) => w.coordinator.heldLeases().length).sort()).toEqual([1, 1, 2]);
      const stopping = [leaving, x, y].find((w) => w.coordinator.heldLeases().length === 2)!;
      const leaseKeys = stopping.coordinator.heldLeases().map((lease) => lease.leaseKey);
      const epochs = new Map(await Promise.all(leaseKeys.map(async (leaseKey) => [leaseKey, (await storage.getLease(GROUP, leaseKey))!.epoch] as const)));
      const others = [leaving, x, y].filter((w) => w !== stopping);
      const acquired: Array<{ workerId: string; leaseKey: string; how: string; at: number }> = [];
      for (const w of others) w.coordinator.on('acquired', ({ leaseKey, how }) => acquired.push({ workerId: w.coordinator.workerId, leaseKey, how, at: scheduler.now }));
      const updates = others.map((w) => w.view.calls.updateLeases);
      const stoppedAt = scheduler.now;
      await run(scheduler, stopping.coordinator.stop());
      await scheduler.advance(useChangeFeed ? 100 : 5_000 * 1.06 * 2);
      // One each, so the group is balanced at once; written to them by the leaving owner (epoch + 1).
      expect(others.map((w) => w.coordinator.heldLeases().length)).toEqual([2, 2]);
      expect(acquired.map((each) => each.how)).toEqual(['handoff', 'handoff']);
      expect(new Set(acquired.map((each) => each.workerId)).size).toBe(2);
      for (const leaseKey of leaseKeys) {
        const lease = (await storage.getLease(GROUP, leaseKey))!;
        expect(lease.epoch).toBe(epochs.get(leaseKey)! + 1);
        expect(others.map((w) => w.coordinator.workerId)).toContain(lease.owner);
      }
      // The recipients wrote nothing to hold them.
      expect(others.map((w) => w.view.calls.updateLeases)).toEqual(updates);
      if (useChangeFeed) for (const each of acquired) expect(each.at - stoppedAt).toBeLessThan(100);
      for (const w of others) await run(scheduler, w.coordinator.stop());
    }
  });

  it('on stop, with no member staying to hand a lease to, writes it free', async () => {
    const { scheduler, ready, worker, storage } = world(keys(2));
    await ready;
    const alone = worker('alone');
    await joined(scheduler, alone.coordinator);
    await scheduler.advance(10_000);
    expect(alone.coordinator.heldLeases()).toHaveLength(2);
    await run(scheduler, alone.coordinator.stop());
    for (const leaseKey of keys(2)) expect(await storage.getLease(GROUP, leaseKey)).toMatchObject({ owner: null, incarnation: null });
  });

  it('on stop, with a lease that did not drain, leaves its member to lapse, and others take that lease only once it expired', async () => {
    const { scheduler, ready, worker, storage } = world(keys(4));
    await ready;
    let stuck: string | null = null;
    const leaving = worker('leaving', {
      onDrain: (lease) => {
        stuck ??= lease.leaseKey;
        return lease.leaseKey === stuck ? new Promise<void>(() => undefined) : Promise.resolve();
      },
    });
    const staying = worker('staying');
    for (const w of [leaving, staying]) await run(scheduler, w.coordinator.start());
    await scheduler.advance(60_000);
    expect(leaving.coordinator.heldLeases()).toHaveLength(2);
    const takenAt = new Map<string, { at: number; how: string }>();
    staying.coordinator.on('acquired', ({ leaseKey, how }) => takenAt.set(leaseKey, { at: scheduler.now, how }));
    const stoppedAt = scheduler.now;
    await run(scheduler, leaving.coordinator.stop({ timeoutMs: 1_000 }));
    expect(scheduler.now - stoppedAt).toBeLessThanOrEqual(1_000);
    expect(await memberOf(storage, 'leaving')).toMatchObject({ status: 'alive' });
    const lastSent = leaving.sent.last;
    await scheduler.advance(30_000);
    expect(staying.coordinator.heldLeases()).toHaveLength(4);
    expect(await memberOf(storage, 'leaving')).toMatchObject({ status: 'dead' });
    const lapsed = takenAt.get(stuck as unknown as string);
    expect(lapsed?.how).toBe('expired');
    expect(lapsed?.at).toBeGreaterThanOrEqual(lastSent + 10_000);
    const released = [...takenAt].filter(([leaseKey]) => leaseKey !== stuck);
    expect(released).toHaveLength(1);
    // The lease that drained is handed straight to the member staying, which the change feed tells at
    // once: held well before the lapse.
    expect(released[0]?.[1]).toMatchObject({ how: 'handoff' });
    expect(released[0]?.[1].at as number).toBeLessThan(stoppedAt + 1_000 + 500);
    expect(released[0]?.[1].at as number).toBeLessThan(lapsed?.at as number);
    await run(scheduler, staying.coordinator.stop());
  });
});

describe('membership: heartbeats under a slow store', () => {
  it('heartbeats every interval counted from the previous send, so that a 2 s round trip never lets the hold run out', async () => {
    const { scheduler, ready, worker } = world(keys(4));
    await ready;
    const w = worker('a', { useChangeFeed: false });
    await joined(scheduler, w.coordinator);
    expect(w.coordinator.heldLeases()).toHaveLength(4);
    const lost: string[] = [];
    w.coordinator.on('lost', ({ reason }) => lost.push(reason));
    const sends: number[] = [];
    w.coordinator.on('renewed', ({ durationMs }) => sends.push(scheduler.now - durationMs));
    // 1 s each way: a heartbeat sent a whole interval after the previous one's answer would be answered
    // 2 + 6.5 + 2 s after the previous send, past its 9.3 s hold.
    w.faults.latencyMs = () => 1_000;
    await scheduler.advance(120_000);
    expect(lost).toEqual([]);
    expect(w.coordinator.heldLeases()).toHaveLength(4);
    const gaps = sends.slice(2).map((at, i) => at - (sends[i + 1] as number));
    expect(Math.max(...gaps)).toBeLessThanOrEqual(w.coordinator.renewIntervalMs * 1.05 + 1);
    await run(scheduler, w.coordinator.stop());
  });
});

describe('membership: owners hand their excess to members below their share', () => {
  it('a worker that holds every lease hands a late joiner its share unasked, each lease moving once, within a few take ticks, and the joiner holds them as written', async () => {
    const { scheduler, ready, worker, storage } = world(keys(40));
    await ready;
    const first = worker('a', { useChangeFeed: false });
    await joined(scheduler, first.coordinator);
    await scheduler.advance(10_000);
    expect(first.coordinator.heldLeases()).toHaveLength(40);
    // The joiner never asks (no steals): only the owner's offers can balance the group.
    const late = worker('b', { useChangeFeed: false, maxStealsPerTick: 0 });
    const offered: string[] = [];
    first.coordinator.on('handoff-offered', ({ leaseKey, to }) => to === 'b' && offered.push(leaseKey));
    const acquired: { leaseKey: string; how: string; fencingToken: number }[] = [];
    late.coordinator.on('acquired', ({ leaseKey, how, fencingToken }) => acquired.push({ leaseKey, how, fencingToken }));
    const joinedAt = scheduler.now;
    await run(scheduler, late.coordinator.start());
    let balancedAt = -1;
    for (let t = 0; t < 30_000 && balancedAt < 0; t += 100) {
      await scheduler.advance(100);
      if (first.coordinator.heldLeases().length === 20 && late.coordinator.heldLeases().length === 20) balancedAt = scheduler.now;
    }
    expect(balancedAt).toBeGreaterThan(0);
    // Seen at the owner's next tick, drained, written, announced, and held at the joiner's next listing.
    expect(balancedAt - joinedAt).toBeLessThanOrEqual(4 * 2_000 * 1.05);
    expect(offered.sort()).toEqual(acquired.map((a) => a.leaseKey).sort());
    expect(acquired).toHaveLength(20);
    expect(new Set(acquired.map((a) => a.how))).toEqual(new Set(['handoff']));
    // Held in the tenure the owner wrote: no second write.
    for (const { leaseKey, fencingToken } of acquired) {
      expect(await storage.getLease(GROUP, leaseKey)).toMatchObject({ owner: 'b', incarnation: late.coordinator.incarnation, epoch: fencingToken });
    }
    // Balanced, nothing moves any more.
    await scheduler.advance(60_000);
    expect(first.coordinator.heldLeases()).toHaveLength(20);
    expect(late.coordinator.heldLeases()).toHaveLength(20);
    expect(offered).toHaveLength(20);
    await run(scheduler, Promise.all([first.coordinator.stop(), late.coordinator.stop()]));
  });

  it('on a cold start spread over four seconds without a change feed, waits for the members to stop joining, lists once and takes each lease once', async () => {
    const { scheduler, ready, worker } = world(keys(100));
    await ready;
    const workers: LeaseCoordinator[] = [];
    const views: CountingStorage[] = [];
    let acquisitions = 0;
    const starts: Promise<void>[] = [];
    for (let i = 0; i < 5; i++) {
      const { coordinator, view } = worker(`w${i}`, { useChangeFeed: false });
      coordinator.on('acquired', () => acquisitions++);
      workers.push(coordinator);
      views.push(view);
      starts.push(coordinator.start());
      await scheduler.advance(1_000);
    }
    await run(scheduler, Promise.all(starts));
    const lastJoin = scheduler.now - 1_000;
    let balancedAt = -1;
    for (let t = 0; t < 20_000 && balancedAt < 0; t += 100) {
      await scheduler.advance(100);
      if (workers.every((coordinator) => coordinator.heldLeases().length === 20)) balancedAt = scheduler.now;
    }
    expect(balancedAt - lastJoin).toBeGreaterThan(0);
    expect(balancedAt - lastJoin).toBeLessThanOrEqual(3 * 2_000 * 1.05);
    expect(acquisitions).toBe(100);
    // While the members kept joining, each worker read the roster, not the whole group, every tick; and
    // since every member said it held nothing, none listed before the joining stopped: one listing each.
    for (const view of views) expect(view.calls.listLeases).toBe(1);
    await run(scheduler, Promise.all(workers.map((coordinator) => coordinator.stop())));
  });

  it('on a cold start with a lull of more than a take tick between two bursts of joins, waits for the second burst and takes each lease once', async () => {
    const { scheduler, ready, worker } = world(keys(100));
    await ready;
    const workers: LeaseCoordinator[] = [];
    let acquisitions = 0;
    const starts: Promise<void>[] = [];
    // Four workers within 600 ms, nothing for 2.2 s (more than a take tick), then six more within a second.
    for (const gap of [0, 200, 200, 200, 2_200, 200, 200, 200, 200, 200]) {
      await scheduler.advance(gap);
      const { coordinator } = worker(`w${workers.length}`, { useChangeFeed: false });
      coordinator.on('acquired', () => acquisitions++);
      workers.push(coordinator);
      starts.push(coordinator.start());
    }
    await run(scheduler, Promise.all(starts));
    const lastStart = scheduler.now;
    let balancedAt = -1;
    for (let t = 0; t < 20_000 && balancedAt < 0; t += 100) {
      await scheduler.advance(100);
      if (workers.every((coordinator) => coordinator.heldLeases().length === 10)) balancedAt = scheduler.now;
    }
    expect(balancedAt).toBeGreaterThan(0);
    // The first burst did not deal among itself: no lease was taken and then handed on.
    expect(acquisitions).toBe(100);
    expect(balancedAt - lastStart).toBeLessThanOrEqual(4 * 2_000 * 1.05);
    await run(scheduler, Promise.all(workers.map((coordinator) => coordinator.stop())));
  });

  it('on a cold start, workers started within a take tick of each other take their shares within a quarter tick of each other', async () => {
    const { scheduler, ready, worker } = world(keys(12));
    await ready;
    const firstTake = new Map<string, number>();
    const starts: Promise<void>[] = [];
    const workers: LeaseCoordinator[] = [];
    for (const [i, phase] of [0, 700, 1_400].entries()) {
      await scheduler.advance(phase - (i === 0 ? 0 : [0, 700, 1_400][i - 1]!));
      const { coordinator } = worker(`w${i}`, { useChangeFeed: false });
      coordinator.on('acquired', () => firstTake.has(coordinator.workerId) || firstTake.set(coordinator.workerId, scheduler.now));
      workers.push(coordinator);
      starts.push(coordinator.start());
    }
    await run(scheduler, Promise.all(starts));
    await scheduler.advance(20_000);
    expect(workers.map((coordinator) => coordinator.heldLeases().length)).toEqual([4, 4, 4]);
    const times = [...firstTake.values()];
    expect(times).toHaveLength(3);
    // Each dealt at its own first quarter-tick read after the last join had been seen for a tick.
    expect(Math.max(...times) - Math.min(...times)).toBeLessThanOrEqual((2_000 / 4) * 1.05);
    await run(scheduler, Promise.all(workers.map((coordinator) => coordinator.stop())));
  });

  /**
   * A cold start of six workers started within half a second over 60 free leases, without a change feed,
   * each listing taking `listingMs`: the group reads as watchers when `wholeRosterUpTo` is below six.
   * `created` makes a lease while the members are still joining, as a leader's shard sync would, and
   * tells the group through the first worker's record. `slowerMs`: the last three workers' listings take
   * that much longer; `failing`: the workers whose listings always fail.
   */
  async function slowColdStart({
    wholeRosterUpTo,
    created = false,
    unsafe,
    useChangeFeed = false,
    slowerMs = 0,
    failing = [],
    failingTakes = [],
    leases = 60,
  }: {
    wholeRosterUpTo: number;
    created?: boolean;
    unsafe?: CoordinatorUnsafe;
    useChangeFeed?: boolean;
    slowerMs?: number;
    failing?: readonly number[];
    failingTakes?: readonly number[];
    leases?: number;
  }) {
    const { scheduler, ready, worker, storage } = world(keys(leases));
    await ready;
    const listingMs = 2_500;
    const started = Array.from({ length: 6 }, (_, i) => worker(`w${i}`, { useChangeFeed, wholeRosterUpTo, unsafe }));
    for (const [i, { view, clock }] of started.entries()) {
      const list = view.listLeases.bind(view);
      view.listLeases = async (group: string) => {
        const listing = await list(group);
        await clock.sleep(listingMs + (i >= 3 ? slowerMs : 0));
        if (failing.includes(i)) throw new Error('the listing failed');
        return listing;
      };
      if (failingTakes.includes(i)) {
        view.updateLeases = async () => {
          throw new Error('the write failed');
        };
      }
    }
    const workers = started.map(({ coordinator }) => coordinator);
    let acquisitions = 0;
    for (const coordinator of workers) coordinator.on('acquired', () => acquisitions++);
    const starts: Promise<void>[] = [];
    for (const coordinator of workers) {
      starts.push(coordinator.start());
      await scheduler.advance(100);
    }
    await run(scheduler, Promise.all(starts));
    const lastJoin = scheduler.now - 100;
    if (created) {
      await scheduler.advance(1_000);
      await storage.createLease({ group: GROUP, leaseKey: 'shard-9999' });
      workers[0]!.noteLeasesChanged();
    }
    const total = created ? leases + 1 : leases;
    let balancedAt = -1;
    let heldAt = -1;
    for (let t = 0; t < 30_000 && balancedAt < 0; t += 100) {
      await scheduler.advance(100);
      const counts = workers.map((coordinator) => coordinator.heldLeases().length);
      if (heldAt < 0 && counts.reduce((sum, n) => sum + n, 0) === total) heldAt = scheduler.now;
      if (counts.reduce((sum, n) => sum + n, 0) === total && Math.max(...counts) - Math.min(...counts) <= 1) balancedAt = scheduler.now;
    }
    const held = workers.reduce((sum, coordinator) => sum + coordinator.heldLeases().length, 0);
    const free = (await storage.listLeases(GROUP)).leases.filter((lease) => lease.owner === null).length;
    const listings = started.map(({ view }) => view.calls.listLeases);
    await run(scheduler, Promise.all(workers.map((coordinator) => coordinator.stop())));
    return { afterLastJoin: balancedAt < 0 ? Infinity : balancedAt - lastJoin, heldAfterLastJoin: heldAt < 0 ? Infinity : heldAt - lastJoin, held, free, listings, acquisitions, listingMs };
  }

  it('on a cold start of a group that reads as watchers, lists while the members are still joining and deals from that listing once they stop, so that a slow listing does not come after the wait', async () => {
    const { afterLastJoin, listings, acquisitions, listingMs } = await slowColdStart({ wholeRosterUpTo: 2 });
    // The deal waits for 1.4 ticks of stillness (2.8 s) after the last join, and for the listing asked
    // for at the first tick after the join: the longer of the two, not their sum.
    expect(afterLastJoin).toBeLessThanOrEqual(1.4 * 2_000 + 1_000);
    expect(afterLastJoin).toBeLessThan(1.4 * 2_000 + listingMs);
    // One listing each, as before, and each lease taken once.
    expect(listings).toEqual([1, 1, 1, 1, 1, 1]);
    expect(acquisitions).toBe(60);
  });

  it('on a cold start of a group that reads the whole roster, lists once the members stop joining, its listing after the wait', async () => {
    const { afterLastJoin, acquisitions, listingMs } = await slowColdStart({ wholeRosterUpTo: 16 });
    // A listing of a small group is quick: the freshest one is dealt from.
    expect(afterLastJoin).toBeGreaterThanOrEqual(1.4 * 2_000 + listingMs);
    expect(acquisitions).toBe(60);
  });

  it('on a cold start of a group that reads as watchers, takes a lease created while the members were joining: the listing asked for before it is not dealt from', async () => {
    const { afterLastJoin, held, listings } = await slowColdStart({ wholeRosterUpTo: 2, created: true });
    expect(held).toBe(61);
    expect(afterLastJoin).toBeLessThan(30_000);
    // Each listed again for the change it heard of (and once more a tick after that deal, as a deal on a fresh listing does).
    for (const count of listings) expect(count).toBeGreaterThanOrEqual(2);
  });

  it('with coldListingIgnoresNews, deals from a cold start\'s early listing after a lease was created, and leaves that lease unheld', async () => {
    const { held, listings } = await slowColdStart({ wholeRosterUpTo: 2, created: true, unsafe: { coldListingIgnoresNews: true } });
    expect(held).toBe(60);
    expect(listings).toEqual([1, 1, 1, 1, 1, 1]);
  });

  it('on a cold start of a group that reads as watchers, the members whose listings came back first do not list the group again while the others wait for theirs', async () => {
    const { afterLastJoin, listings, acquisitions } = await slowColdStart({ wholeRosterUpTo: 2, slowerMs: 8_000 });
    // The first three deal and take their portions eight seconds before the last three, past the window in
    // which those may still ask as newcomers: each of those is then ten leases below them by its count, and
    // the counts fall short of the listing, but its portion is on its way.
    expect(listings).toEqual([1, 1, 1, 1, 1, 1]);
    expect(acquisitions).toBe(60);
    expect(afterLastJoin).toBeLessThan(2_000 + 2_500 + 8_000 + 2_000);
  });

  it('on a cold start, takes the portion of a member that never takes it (its takes fail) once it stopped counting as on its way', async () => {
    const { held, free, listings } = await slowColdStart({ wholeRosterUpTo: 2, failingTakes: [5] });
    // Its portion counted as on its way for five take ticks after each deal, then the counts fell short of
    // the listing, and the others listed and took it, or handed it leases it holds without a write (within
    // the 30 s the helper waits). None is left free; the member may not take back one it gave up.
    expect(free).toBe(0);
    expect(held).toBeGreaterThanOrEqual(59);
    expect(Math.min(...listings.slice(0, 5))).toBeGreaterThanOrEqual(2);
  });

  it('with coldDealTrusted, leaves a cold start\'s portion that its member never takes unheld, the others waiting for their next listing', async () => {
    const { held, free, listings } = await slowColdStart({ wholeRosterUpTo: 2, failingTakes: [5], unsafe: { coldDealTrusted: true } });
    expect(held).toBe(50);
    expect(free).toBe(10);
    expect(listings.slice(0, 5)).toEqual([1, 1, 1, 1, 1]);
  });

  it('on a cold start of a group that reads as watchers, with a change feed, one member lists and deals every portion, and the others take theirs without listing', async () => {
    const { held, listings, acquisitions, afterLastJoin } = await slowColdStart({ wholeRosterUpTo: 2, useChangeFeed: true });
    // w0 is the first by worker id: it lists once the members stop joining, and writes each portion to its member.
    expect(listings).toEqual([1, 0, 0, 0, 0, 0]);
    expect(held).toBe(60);
    expect(acquisitions).toBe(60);
    // Its listing (2.5 s here) after the 2.8 s of stillness, then a tick for the portions and the note.
    expect(afterLastJoin).toBeLessThan(1.4 * 2_000 + 2_500 + 2 * 2_000);
  });

  it('on a cold start dealt by one member, the others list and take their portions when the dealer never deals (its listings fail)', async () => {
    const { held, listings, afterLastJoin } = await slowColdStart({ wholeRosterUpTo: 2, useChangeFeed: true, failing: [0] });
    // The others waited three take ticks for the deal, then listed, each taking its own portion.
    expect(held).toBe(60);
    for (const count of listings.slice(1)) expect(count).toBeGreaterThanOrEqual(1);
    expect(afterLastJoin).toBeLessThan(30_000);
  });

  it('on a cold start dealt by one member, a member reads a portion larger than it reads by key between two ticks by key, without listing', async () => {
    const { held, listings, acquisitions } = await slowColdStart({ wholeRosterUpTo: 2, useChangeFeed: true, leases: 1_200 });
    // 200 leases each, more than NAMED_READS_MAX (128), at most COLD_DEAL_MAX_PORTION (1,000).
    expect(listings).toEqual([1, 0, 0, 0, 0, 0]);
    expect(held).toBe(1_200);
    expect(acquisitions).toBe(1_200);
  });

  it('on a cold start whose portions are larger than a dealer deals, the dealer deals nothing and its note sends the others to list at once, each listing once', async () => {
    const { held, listings, acquisitions, afterLastJoin } = await slowColdStart({ wholeRosterUpTo: 2, useChangeFeed: true, leases: 6_600 });
    // 1,100 leases each, more than COLD_DEAL_MAX_PORTION: each lists once and takes its own portion, as without a dealer.
    expect(listings).toEqual([1, 1, 1, 1, 1, 1]);
    expect(held).toBe(6_600);
    expect(acquisitions).toBe(6_600);
    // The dealer's listing, then the others' once they read its note: not three ticks of waiting on top.
    expect(afterLastJoin).toBeLessThan(1.4 * 2_000 + 2 * 2_500 + 2_000);
  });

  it('with coldDealerAwaited, the members of a cold start whose dealer never deals wait for it, holding nothing', async () => {
    const { held, listings } = await slowColdStart({ wholeRosterUpTo: 2, useChangeFeed: true, failing: [0], unsafe: { coldDealerAwaited: true } });
    expect(held).toBe(0);
    expect(listings.slice(1)).toEqual([0, 0, 0, 0, 0]);
  });

  it('hands a member no more than the maxLeasesPerWorker it publishes, and balances the rest among the others', async () => {
    const { scheduler, ready, worker, storage } = world(keys(30));
    await ready;
    const a = worker('a', { useChangeFeed: false });
    await joined(scheduler, a.coordinator);
    await scheduler.advance(10_000);
    const capped = worker('b', { useChangeFeed: false, maxLeasesPerWorker: 3 });
    const c = worker('c', { useChangeFeed: false });
    await run(scheduler, Promise.all([capped.coordinator.start(), c.coordinator.start()]));
    await scheduler.advance(60_000);
    expect((await memberOf(storage, 'b'))?.metadata['leasehold.maxLeases']).toBe('3');
    expect(capped.coordinator.heldLeases()).toHaveLength(3);
    const counts = [a, c].map((w) => w.coordinator.heldLeases().length).sort();
    expect(counts[1]! - counts[0]!).toBeLessThanOrEqual(1);
    expect(counts[0]! + counts[1]!).toBe(27);
    // Settled: no lease keeps moving between them.
    const versions = new Map((await storage.listLeases(GROUP)).leases.map((lease) => [lease.leaseKey, lease.version]));
    await scheduler.advance(60_000);
    expect((await storage.listLeases(GROUP)).leases.every((lease) => versions.get(lease.leaseKey) === lease.version)).toBe(true);
    await run(scheduler, Promise.all([a, capped, c].map((w) => w.coordinator.stop())));
  });

  for (const unsafe of [false, true]) {
    it(
      unsafe
        ? 'with givenBackPlanned, a member at its maxLeasesPerWorker handed one lease more counts the one it gives back as its own, and hands one of its own away to make room for it (the switch brings the defect back)'
        : 'a member at its maxLeasesPerWorker handed one lease more gives that one back and keeps its own: none of its leases moves, and the group holds every lease again',
      async () => {
        const { scheduler, ready, worker, storage } = world(keys(30));
        await ready;
        const a = worker('a', { useChangeFeed: false });
        await joined(scheduler, a.coordinator);
        await scheduler.advance(10_000);
        const capped = worker('b', { useChangeFeed: false, maxLeasesPerWorker: 3, unsafe: { givenBackPlanned: unsafe } });
        const c = worker('c', { useChangeFeed: false });
        await run(scheduler, Promise.all([capped.coordinator.start(), c.coordinator.start()]));
        await scheduler.advance(60_000);
        const own = new Map((await storage.listLeases(GROUP)).leases.filter((lease) => lease.owner === 'b').map((lease) => [lease.leaseKey, lease.epoch]));
        expect(own.size).toBe(3);
        // An offer and an answer crossed: one more lease of a's is written to b, at its cap, as a handover
        // writes it (a lets it go, and the write names b's incarnation in a new tenure).
        const given = a.coordinator.heldLeases()[0]!.leaseKey;
        await run(scheduler, a.coordinator.release(given));
        const extra = (await storage.getLease(GROUP, given))!;
        expect(extra.owner).toBeNull();
        await storage.updateLeases(GROUP, [
          { leaseKey: extra.leaseKey, expectedVersion: extra.version, next: { ...extra, owner: 'b', incarnation: capped.coordinator.incarnation, epoch: extra.epoch + 1 }, notify: 'handed-off' },
        ]);
        const handedAway: string[] = [];
        capped.coordinator.on('handed-off', ({ leaseKey }) => handedAway.push(leaseKey));
        await scheduler.advance(60_000);
        const after = (await storage.listLeases(GROUP)).leases;
        if (unsafe) {
          expect(handedAway.filter((leaseKey) => own.has(leaseKey)).length).toBeGreaterThan(0);
        } else {
          expect(handedAway).toEqual([]);
          for (const [leaseKey, epoch] of own) expect(after.find((lease) => lease.leaseKey === leaseKey)).toMatchObject({ owner: 'b', epoch });
          expect(capped.coordinator.heldLeases()).toHaveLength(3);
          expect(after.find((lease) => lease.leaseKey === extra.leaseKey)?.owner).not.toBe('b');
          expect([a, capped, c].reduce((sum, w) => sum + w.coordinator.heldLeases().length, 0)).toBe(30);
        }
        await run(scheduler, Promise.all([a, capped, c].map((w) => w.coordinator.stop())));
      },
    );
  }

  it('a member at its maxLeasesPerWorker that has leases of its own to take back, lost to self-fencing, gives back those it has no room for: nobody else may take them while they name it', async () => {
    const { scheduler, ready, worker, storage } = world(['x1', 'x2']);
    await ready;
    const b = worker('b', { useChangeFeed: false, maxLeasesPerWorker: 2 });
    await joined(scheduler, b.coordinator);
    expect(b.coordinator.heldLeases().map((lease) => lease.leaseKey).sort()).toEqual(['x1', 'x2']);
    // Cut off past its hold: it fences itself, while storage still names its incarnation for both.
    b.faults.cutOff = true;
    await scheduler.advance(12_000);
    expect(b.coordinator.heldLeases()).toEqual([]);
    // Meanwhile two other leases are handed to it (a tenure it never held): they fill its cap.
    const incarnation = b.coordinator.incarnation;
    for (const leaseKey of ['y1', 'y2']) {
      const { record } = (await storage.createLease({ group: GROUP, leaseKey })) as { record: LeaseRecord };
      await storage.updateLeases(GROUP, [{ leaseKey, expectedVersion: record.version, next: { ...record, owner: 'b', incarnation, epoch: record.epoch + 1 }, notify: 'handed-off' }]);
    }
    b.faults.cutOff = false;
    await scheduler.advance(10_000);
    expect(b.coordinator.incarnation).toBe(incarnation);
    expect(b.coordinator.heldLeases().map((lease) => lease.leaseKey).sort()).toEqual(['y1', 'y2']);
    for (const leaseKey of ['x1', 'x2']) expect((await storage.getLease(GROUP, leaseKey))?.owner).toBeNull();
    // A member with room takes them.
    const a = worker('a', { useChangeFeed: false });
    await joined(scheduler, a.coordinator);
    await scheduler.advance(10_000);
    expect(a.coordinator.heldLeases().map((lease) => lease.leaseKey).sort()).toEqual(['x1', 'x2']);
    await run(scheduler, Promise.all([a, b].map((w) => w.coordinator.stop())));
  });

  it('a lease handed to a worker in a tenure it never held is held as written; one it lost to self-fencing is taken back in a new tenure', async () => {
    const { scheduler, ready, worker, storage } = world(keys(2));
    await ready;
    const w = worker('a', { useChangeFeed: false });
    await joined(scheduler, w.coordinator);
    const [lost, handed] = keys(2) as [string, string];
    expect(w.coordinator.isHeld(lost)).toBe(true);
    const lostEpoch = (await storage.getLease(GROUP, lost))!.epoch;
    // Cut off past its hold: it fences itself, while storage still names its incarnation.
    w.faults.cutOff = true;
    await scheduler.advance(12_000);
    expect(w.coordinator.isHeld(lost)).toBe(false);
    w.faults.cutOff = false;
    // Meanwhile a lease is written to it by another owner in a tenure it never held (a handover).
    const incarnation = w.coordinator.incarnation;
    const record = (await storage.getLease(GROUP, handed))!;
    await storage.updateLeases(GROUP, [{ leaseKey: handed, expectedVersion: record.version, next: { ...record, owner: 'a', incarnation, epoch: record.epoch + 5 }, notify: 'handed-off' }]);
    const handedEpoch = record.epoch + 5;
    const acquired = new Map<string, { how: string; fencingToken: number }>();
    w.coordinator.on('acquired', ({ leaseKey, how, fencingToken }) => acquired.set(leaseKey, { how, fencingToken }));
    await scheduler.advance(10_000);
    expect(w.coordinator.incarnation).toBe(incarnation);
    expect(acquired.get(lost)).toEqual({ how: 'expired', fencingToken: lostEpoch + 1 });
    expect(acquired.get(handed)).toEqual({ how: 'handoff', fencingToken: handedEpoch });
    await run(scheduler, w.coordinator.stop());
  });

  for (const unsafe of [false, true]) {
    it(
      unsafe
        ? 'with the unsafe switch, a lease it lost whose record a listing could not read is held again in the lost tenure once repaired (the switch brings the defect back)'
        : 'a lease it lost whose record a listing could not read is still taken back in a new tenure once repaired, not held in the tenure it lost',
      async () => {
        const { scheduler, ready, worker, storage, memory } = world(keys(1));
        await ready;
        const w = worker('a', { useChangeFeed: false, unsafe: { letGoForgetsUnreadable: unsafe } });
        await joined(scheduler, w.coordinator);
        const [lost] = keys(1) as [string];
        const lostEpoch = (await storage.getLease(GROUP, lost))!.epoch;
        // Cut off past its hold: it fences itself, while storage still names its incarnation.
        w.faults.cutOff = true;
        await scheduler.advance(12_000);
        expect(w.coordinator.isHeld(lost)).toBe(false);
        // The lease is damaged before the worker lists again, and its listings find it unreadable.
        memory.corrupt(GROUP, lost);
        w.faults.cutOff = false;
        const corruptSeen: string[] = [];
        w.coordinator.on('corrupt-lease', ({ leaseKey }) => corruptSeen.push(leaseKey));
        await scheduler.advance(6_000);
        expect(corruptSeen).toEqual([lost]);
        // Restored as it was: it names the worker's incarnation, in the tenure the worker lost.
        memory.repair(GROUP, lost);
        const acquired: Array<{ how: string; fencingToken: number }> = [];
        w.coordinator.on('acquired', ({ how, fencingToken }) => acquired.push({ how, fencingToken }));
        await scheduler.advance(10_000);
        expect(acquired).toEqual([unsafe ? { how: 'handoff', fencingToken: lostEpoch } : { how: 'expired', fencingToken: lostEpoch + 1 }]);
        expect((await storage.getLease(GROUP, lost))!.epoch).toBe(unsafe ? lostEpoch : lostEpoch + 1);
        await run(scheduler, w.coordinator.stop());
      },
    );
  }
});
