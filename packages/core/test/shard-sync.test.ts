import { describe, expect, it } from 'vitest';
import {
  Checkpoint,
  MemorySource,
  MemoryStorage,
  type LeaseRecord,
  type MemberRecord,
  type NewLease,
  type ShardInfo,
  type WriteResult,
} from '../src/index.js';
import { RECORD_FORMAT, leaseStateOf, memberStateOf, result, REWIND_FIELDS, rewindRequestOf, ShardSync, type ShardSyncOptions } from '../src/adapter.js';
import { StorageOutcomeUnknownError } from '../src/errors.js';
import { VIRTUAL_EPOCH_MS, VirtualScheduler } from '../src/testing/virtual-time.js';
import { withUnsafe, type ShardSyncUnsafe } from '../src/testing/index.js';

const GROUP = 'orders';

/** A store that records the order in which leases were created, and can time out chosen creates. */
class RecordingStorage extends MemoryStorage {
  readonly createdOrder: string[] = [];
  /** Creates of these keys time out without applying (an unknown outcome). */
  readonly timingOut = new Set<string>();
  override async createLease(lease: NewLease, options?: { recreate?: boolean }): Promise<WriteResult<LeaseRecord>> {
    if (this.timingOut.has(lease.leaseKey)) return result.unknown(new StorageOutcomeUnknownError('[test] create timed out'));
    const outcome = await super.createLease(lease, options);
    if (outcome.status === 'applied') this.createdOrder.push(lease.leaseKey);
    return outcome;
  }
}

function world(shards = 1, options: Partial<ShardSyncOptions> = {}) {
  const scheduler = new VirtualScheduler();
  const clock = scheduler.clock();
  const source = new MemorySource(shards, { clock });
  const storage = new RecordingStorage();
  const sync = ({ unsafe, ...more }: Partial<ShardSyncOptions> & { unsafe?: ShardSyncUnsafe } = {}): ShardSync =>
    new ShardSync(withUnsafe({
      group: GROUP,
      source,
      storage,
      initialPosition: Checkpoint.TRIM_HORIZON,
      clock,
      isLeader: () => true,
      ...options,
      ...more,
    }, unsafe));
  const signal = new AbortController().signal;
  /** Plays a worker that read the shard to its end and gave the lease back. */
  const finish = async (leaseKey: string): Promise<void> => {
    const lease = (await storage.getLease(GROUP, leaseKey)) as LeaseRecord;
    const [outcome] = await storage.updateLeases(GROUP, [
      { leaseKey, expectedVersion: lease.version, next: { ...leaseStateOf(lease), epoch: lease.epoch + 1, checkpoint: Checkpoint.SHARD_END } },
    ]);
    expect(outcome?.status).toBe('applied');
  };
  const keys = async (): Promise<string[]> => (await storage.listLeases(GROUP)).leases.map((lease) => lease.leaseKey).sort();
  return { scheduler, clock, source, storage, sync, signal, finish, keys };
}

/**
 * Three generations: shard-0000 finished but still held by w1, alive in the roster; its child finished,
 * free, with leases for both of its own children.
 */
async function finishedUnderAHeldParent() {
  const w = world(1);
  const { source, storage, sync, signal, finish } = w;
  const leader = sync();
  await leader.run(signal);
  const parent = (await storage.getLease(GROUP, 'shard-0000')) as LeaseRecord;
  const member = await join(storage, 'w1');
  await storage.updateLeases(GROUP, [
    { leaseKey: 'shard-0000', expectedVersion: parent.version, next: { ...leaseStateOf(parent), owner: 'w1', incarnation: 'i-w1', epoch: 1, checkpoint: Checkpoint.SHARD_END } },
  ]);
  const [child, sibling] = source.split('shard-0000');
  await leader.run(signal);
  await finish(child);
  const grandchildren = source.split(child);
  return { ...w, leader, member, child, sibling, grandchildren };
}

/** Makes `workerId` an alive member of the group's roster, as its coordinator's join does. */
async function join(storage: MemoryStorage, workerId: string, incarnation = `i-${workerId}`): Promise<MemberRecord> {
  const outcome = await storage.putMember(GROUP, workerId, null, {
    format: RECORD_FORMAT,
    incarnation,
    leaseDurationMs: 10_000,
    status: 'alive',
    held: 1,
    changes: 0,
    requests: [],
    metadata: {},
  });
  if (outcome.status !== 'applied') throw new Error(`[test] ${workerId} could not join`);
  return outcome.record;
}

/** A source whose listing is a fixed snapshot (a listing that lags) or lists children before parents. */
function viewOf(source: MemorySource, listing: () => Promise<ShardInfo[]>, gone: (shardId: string) => boolean = () => false) {
  return {
    listShards: listing,
    read: source.read.bind(source),
    comparePositions: source.comparePositions.bind(source),
    isShardGone: async (shardId: string) => gone(shardId),
  };
}

describe('shard sync: finished ancestors', () => {
  it('never creates again the lease of an ancestor finished two or more generations ago', async () => {
    const { source, storage, sync, signal, finish, keys } = world(1);
    const leader = sync();
    expect((await leader.run(signal)).created).toEqual(['shard-0000']);
    await finish('shard-0000');
    const [a, b] = source.split('shard-0000');
    expect((await leader.run(signal)).deleted).toEqual(['shard-0000']);
    await finish(a);
    await finish(b);
    source.split(a);
    source.split(b);
    const third = await leader.run(signal);
    expect(third.deleted.sort()).toEqual([a, b].sort());
    for (let round = 0; round < 3; round++) {
      const report = await leader.run(signal);
      expect(report.created).toEqual([]);
      expect(report.complete).toBe(true);
    }
    expect(await keys()).toEqual(['shard-0003', 'shard-0004', 'shard-0005', 'shard-0006']);
    // A new leader, with no memory of the past, knows it from the lineage alone.
    expect((await sync().run(signal)).created).toEqual([]);
    // And the store itself refuses to create a deleted key again.
    expect(await storage.createLease({ group: GROUP, leaseKey: 'shard-0000' })).toEqual(result.conflict(null));
  });

  it('with the unsafe one-generation rule, the finished grandparent comes back (the switch brings the defect back)', async () => {
    const { source, sync, signal, finish } = world(1);
    const leader = sync({ unsafe: { oneGenerationSync: true } });
    await leader.run(signal);
    await finish('shard-0000');
    const [a, b] = source.split('shard-0000');
    await leader.run(signal);
    await finish(a);
    await finish(b);
    source.split(a);
    source.split(b);
    await leader.run(signal);
    expect((await leader.run(signal)).created).toEqual(['shard-0000']);
  });
});

describe('shard sync: lineage', () => {
  it('tells the same retired shards on a long lineage as walking every descendant would, in one pass', async () => {
    // A stream split and merged over many generations, most of whose ancestors were cleaned up: every
    // shard without a lease whose lineage reaches a leased one is retired, and nothing is created.
    const scheduler = new VirtualScheduler();
    const clock = scheduler.clock();
    const source = new MemorySource(4, { clock });
    let open = ['shard-0000', 'shard-0001', 'shard-0002', 'shard-0003'];
    for (let generation = 0; generation < 30; generation++) {
      const [a, b] = source.split(open[0] as string);
      open = [...open.slice(1), a, b];
      const merged = source.merge(open[0] as string, open[1] as string);
      open = [...open.slice(2), merged];
    }
    const storage = new MemoryStorage();
    for (const leaseKey of open) await storage.createLease({ group: GROUP, leaseKey, checkpoint: Checkpoint.TRIM_HORIZON });
    const report = await new ShardSync({ group: GROUP, source, storage, initialPosition: Checkpoint.TRIM_HORIZON, clock, isLeader: () => true }).run(new AbortController().signal);
    expect(report.created).toEqual([]);
    expect(report.pending).toEqual([]);
    expect(report.complete).toBe(true);
    expect((await storage.listLeases(GROUP)).leases.map((lease) => lease.leaseKey).sort()).toEqual([...open].sort());
  });
});

describe('shard sync: birth', () => {
  it('creates many leases at once, at most createConcurrency in flight, and a child only after its parents settled', async () => {
    const scheduler = new VirtualScheduler();
    const clock = scheduler.clock();
    const source = new MemorySource(40, { clock });
    // Two generations: ten of the shards split, so twenty children wait for their parents.
    const children = new Map<string, string>();
    for (let i = 0; i < 10; i++) for (const child of source.split(`shard-${String(i).padStart(4, '0')}`)) children.set(child, `shard-${String(i).padStart(4, '0')}`);
    let inFlight = 0;
    let most = 0;
    const settledAt = new Map<string, number>();
    const startedAt = new Map<string, number>();
    let tick = 0;
    class SlowStorage extends MemoryStorage {
      override async createLease(lease: NewLease, options?: { recreate?: boolean }): Promise<WriteResult<LeaseRecord>> {
        inFlight++;
        most = Math.max(most, inFlight);
        startedAt.set(lease.leaseKey, tick++);
        await clock.sleep(10);
        try {
          return await super.createLease(lease, options);
        } finally {
          inFlight--;
          settledAt.set(lease.leaseKey, tick++);
        }
      }
    }
    const storage = new SlowStorage();
    const sync = new ShardSync({ group: GROUP, source, storage, initialPosition: Checkpoint.TRIM_HORIZON, clock, isLeader: () => true, createConcurrency: 8 });
    const round = sync.run(new AbortController().signal);
    await scheduler.advance(1_000);
    const report = await round;
    expect(report.complete).toBe(true);
    expect(report.created).toHaveLength(60);
    expect(most).toBe(8);
    for (const [child, parent] of children) expect(startedAt.get(child)).toBeGreaterThan(settledAt.get(parent) as number);
  });

  it('creates parents before children even when the listing names the children first', async () => {
    const { source, storage, sync, signal } = world(1);
    const [a, b] = source.split('shard-0000');
    const child = source.merge(a, b);
    const reversed = viewOf(source, async () => (await source.listShards()).reverse());
    const report = await sync({ source: reversed }).run(signal);
    expect(report.complete).toBe(true);
    expect(storage.createdOrder).toEqual(['shard-0000', a, b, child]);
  });

  it('a child waits while a parent create has an unknown outcome, and the next round settles both', async () => {
    const { source, storage, sync, signal, keys } = world(1);
    const [a] = source.split('shard-0000');
    storage.timingOut.add('shard-0000');
    const leader = sync();
    const first = await leader.run(signal);
    expect(first.complete).toBe(false);
    expect(first.pending).toContain('shard-0000');
    expect(first.pending).toContain(a);
    expect(await keys()).toEqual([]);
    storage.timingOut.clear();
    const second = await leader.run(signal);
    expect(second.complete).toBe(true);
    expect(storage.createdOrder.slice(0, 1)).toEqual(['shard-0000']);
    expect(await keys()).toHaveLength(3);
  });

  it('with the unsafe birth race, a child is created while its parent has no lease (the switch brings the defect back)', async () => {
    const { source, storage, sync, signal } = world(1);
    const [a] = source.split('shard-0000');
    storage.timingOut.add('shard-0000');
    await sync({ unsafe: { birthRace: true } }).run(signal);
    expect(storage.createdOrder).toContain(a);
    expect(await storage.getLease(GROUP, 'shard-0000')).toBeNull();
  });

  it('pins LATEST to the leader wall time for every shard of the birth, and starts a later child at its beginning', async () => {
    const { scheduler, source, storage, sync, signal, finish } = world(1);
    const [a, b] = source.split('shard-0000');
    await scheduler.advance(5_000);
    const leader = sync({ initialPosition: Checkpoint.LATEST });
    await leader.run(signal);
    const born = Checkpoint.atTimestamp(VIRTUAL_EPOCH_MS + 5_000);
    for (const key of ['shard-0000', a, b]) expect((await storage.getLease(GROUP, key))?.checkpoint).toBe(born);
    await finish(a);
    const [c] = source.split(a);
    await leader.run(signal);
    expect((await storage.getLease(GROUP, c))?.checkpoint).toBe(Checkpoint.TRIM_HORIZON);
  });

  it('starts at their beginning every generation a round catches up on, not only the first below a leased parent', async () => {
    const { source, storage, sync, signal, finish } = world(1);
    const leader = sync({ initialPosition: Checkpoint.LATEST });
    await leader.run(signal);
    await finish('shard-0000');
    // No leader for a while: two generations of resharding happen before the next round.
    const [a, b] = source.split('shard-0000');
    const [c, d] = source.split(a);
    const merged = source.merge(d, b); // d is the upper half of a, next to b
    await sync({ initialPosition: Checkpoint.LATEST }).run(signal);
    for (const key of [a, b, c, d, merged]) expect((await storage.getLease(GROUP, key))?.checkpoint).toBe(Checkpoint.TRIM_HORIZON);
  });

  it('pins LATEST once for a birth spread over several rounds', async () => {
    const { scheduler, source, storage, sync, signal } = world(2);
    let allowed = 1;
    let writes = 0;
    const leader = sync({ initialPosition: Checkpoint.LATEST, isLeader: () => writes++ < allowed });
    const first = await leader.run(signal);
    expect(first.complete).toBe(false);
    await scheduler.advance(7_000);
    allowed = Infinity;
    await leader.run(signal);
    const positions = new Set((await storage.listLeases(GROUP)).leases.map((lease) => lease.checkpoint));
    expect(positions).toEqual(new Set([Checkpoint.atTimestamp(VIRTUAL_EPOCH_MS)]));
    expect(source).toBeDefined();
  });

  it('starts at the initial position a shard whose parents left the stream before the group was born', async () => {
    const { source, storage, sync, signal } = world(1);
    const [a] = source.split('shard-0000');
    const trimmed = viewOf(source, async () => (await source.listShards()).filter((shard) => shard.shardId !== 'shard-0000'));
    await sync({ source: trimmed, initialPosition: 'AT_TIMESTAMP:1000' }).run(signal);
    expect((await storage.getLease(GROUP, a))?.checkpoint).toBe('AT_TIMESTAMP:1000');
    expect(await storage.getLease(GROUP, 'shard-0000')).toBeNull();
  });

  it('writes nothing once it no longer leads', async () => {
    const { sync, signal, keys } = world(3);
    const report = await sync({ isLeader: () => false }).run(signal);
    expect(report.created).toEqual([]);
    expect(report.complete).toBe(false);
    expect(await keys()).toEqual([]);
  });
});

describe('shard sync: deletes', () => {
  it('keeps a lease the listing does not name yet (a lagging listing), and reports it; its finished parent may go', async () => {
    const { source, storage, sync, signal, finish, keys } = world(1);
    await sync().run(signal);
    const stale = await source.listShards();
    await finish('shard-0000');
    const [a, b] = source.split('shard-0000');
    // The parent's reader creates the children from the shard's end, before any listing shows them.
    for (const key of [a, b]) await storage.createLease({ group: GROUP, leaseKey: key, parentKeys: ['shard-0000'], checkpoint: Checkpoint.TRIM_HORIZON });
    const report = await sync({ source: viewOf(source, async () => stale) }).run(signal);
    expect(report.missing.sort()).toEqual([a, b].sort());
    // The parent finished and each child has a lease: nothing needs it any more.
    expect(report.deleted).toEqual(['shard-0000']);
    expect(await keys()).toEqual([a, b].sort());
  });

  it('with the unsafe stale-view rule, that lease is deleted (the switch brings the defect back)', async () => {
    const { source, storage, sync, signal, finish } = world(1);
    await sync().run(signal);
    const stale = await source.listShards();
    await finish('shard-0000');
    const [a] = source.split('shard-0000');
    await storage.createLease({ group: GROUP, leaseKey: a, parentKeys: ['shard-0000'], checkpoint: Checkpoint.TRIM_HORIZON });
    const report = await sync({ source: viewOf(source, async () => stale), unsafe: { deleteOnStaleView: true } }).run(signal);
    expect(report.deleted).toContain(a);
  });

  /**
   * A round whose listing was read before a child's lease was created (the parent's reader created it at the
   * shard's end) and whose roster was read before the worker that took the child joined: the create's
   * conflict brings the child's record, owned by that worker, carrying a rewind request.
   */
  async function childLearnedFromConflict(unsafe?: ShardSyncUnsafe) {
    const { source, storage, sync, signal, finish } = world(1);
    await sync().run(signal);
    await finish('shard-0000');
    const [a] = source.split('shard-0000');
    const request = JSON.stringify({ id: 'rewind-1', to: Checkpoint.TRIM_HORIZON, requestedAt: new Date(VIRTUAL_EPOCH_MS).toISOString() });
    await storage.createLease({ group: GROUP, leaseKey: a, parentKeys: ['shard-0000'], checkpoint: '3', owner: 'joiner', incarnation: 'joiner-1', epoch: 1, metadata: { [REWIND_FIELDS.request]: request } });
    const before = await storage.listLeases(GROUP);
    const listing = { ...before, leases: before.leases.filter((lease) => lease.leaseKey !== a) };
    // The worker that took the child joined after the round's roster read: that roster does not name it.
    const view = new Proxy(storage, {
      get: (target, name) => {
        if (name === 'listLeases') return async () => listing;
        if (name === 'getRoster') return async () => ({ members: [], corrupt: [] });
        const value: unknown = Reflect.get(target, name, target);
        return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      },
    });
    const report = await sync({ storage: view, unsafe }).run(signal);
    return { report, child: (await storage.getLease(GROUP, a))! };
  }

  it('counts as held a lease it learns of from a create\'s conflict whenever it names an owner: one that joined after the roster read is not judged dead, and its rewind request is left to it', async () => {
    const { report, child } = await childLearnedFromConflict();
    expect(report.rewound).toEqual([]);
    expect(child.checkpoint).toBe('3');
    expect(rewindRequestOf(child)?.id).toBe('rewind-1');
  });

  it('with the unsafe lateRecordJudged, the owner that joined after the roster read is judged dead and the request applied under it (the switch brings the defect back)', async () => {
    const { report, child } = await childLearnedFromConflict({ lateRecordJudged: true });
    expect(report.rewound).toContain(child.leaseKey);
    expect(child.checkpoint).toBe(Checkpoint.TRIM_HORIZON);
    expect(child.owner).toBe('joiner');
  });

  it('deletes an unfinished lease only when the source confirms its shard gone and nobody holds it', async () => {
    const { source, storage, sync, signal, keys } = world(2);
    await sync().run(signal);
    const held = (await storage.getLease(GROUP, 'shard-0001')) as LeaseRecord;
    await join(storage, 'w1');
    await storage.updateLeases(GROUP, [{ leaseKey: 'shard-0001', expectedVersion: held.version, next: { ...leaseStateOf(held), owner: 'w1', incarnation: 'i-w1', epoch: 1 } }]);
    const without = viewOf(source, async () => [], () => true);
    const unsure = await sync({ source: { ...without, isShardGone: async () => false } }).run(signal);
    expect(unsure.deleted).toEqual([]);
    const confirmed = await sync({ source: without }).run(signal);
    expect(confirmed.deleted).toEqual(['shard-0000']);
    expect(confirmed.missing).toEqual(['shard-0001']);
    const { isShardGone: _none, ...noMethod } = without;
    expect((await sync({ source: noMethod }).run(signal)).deleted).toEqual([]);
    expect(await keys()).toEqual(['shard-0001']);
  });

  /** shard-0000 split, held by w1 and still read; one child gone from the stream (trimmed), nobody holding it. */
  async function goneUnderAReadParent() {
    const w = world(1);
    const { source, storage, sync, signal } = w;
    await sync().run(signal);
    const [gone, sibling] = source.split('shard-0000');
    await sync().run(signal);
    await join(storage, 'w1');
    const parent = (await storage.getLease(GROUP, 'shard-0000')) as LeaseRecord;
    await storage.updateLeases(GROUP, [{ leaseKey: 'shard-0000', expectedVersion: parent.version, next: { ...leaseStateOf(parent), owner: 'w1', incarnation: 'i-w1', epoch: 1, checkpoint: '5' } }]);
    const trimmed = viewOf(source, async () => (await source.listShards()).filter((shard) => shard.shardId !== gone), (shardId) => shardId === gone);
    return { ...w, gone, sibling, trimmed };
  }

  it('keeps the lease of a shard gone from the stream while its parent still has a lease, so that its children wait for the parent', async () => {
    const { storage, sync, signal, finish, gone, trimmed } = await goneUnderAReadParent();
    const first = await sync({ source: trimmed }).run(signal);
    expect(first.deleted).toEqual([]);
    expect(first.missing).toEqual([gone]);
    expect(await storage.getLease(GROUP, gone)).not.toBeNull();
    // The parent read to its end and given back: deleted first, then the gone child.
    await finish('shard-0000');
    const parent = (await storage.getLease(GROUP, 'shard-0000')) as LeaseRecord;
    await storage.updateLeases(GROUP, [{ leaseKey: 'shard-0000', expectedVersion: parent.version, next: { ...leaseStateOf(parent), owner: null, incarnation: null } }]);
    expect((await sync({ source: trimmed }).run(signal)).deleted).toEqual(['shard-0000', gone]);
  });

  it('with the unsafe goneBeforeParents, the gone child is deleted under its parent still read (the switch brings the defect back)', async () => {
    const { sync, signal, gone, trimmed } = await goneUnderAReadParent();
    expect((await sync({ source: trimmed, unsafe: { goneBeforeParents: true } }).run(signal)).deleted).toEqual([gone]);
  });

  it('a source that cannot answer whether a shard is gone costs that lease only: the round goes on', async () => {
    const { source, storage, sync, signal } = world(2);
    await sync().run(signal);
    const errors: string[] = [];
    const flaky = viewOf(source, async () => []);
    flaky.isShardGone = async (shardId: string) => {
      if (shardId === 'shard-0000') throw new Error('[test] throttled');
      return true;
    };
    const report = await sync({ source: flaky, onError: (error) => void errors.push(error.message) }).run(signal);
    expect(report.missing).toEqual(['shard-0000']);
    expect(report.deleted).toEqual(['shard-0001']);
    expect(errors).toEqual(['[test] throttled']);
    expect((await storage.listLeases(GROUP)).leases.map((lease) => lease.leaseKey)).toEqual(['shard-0000']);
  });

  it('deletes a finished lease once every child has a lease and nobody holds it, never before', async () => {
    const { scheduler, source, storage, sync, signal, keys } = world(1);
    const leader = sync();
    await leader.run(signal);
    const lease = (await storage.getLease(GROUP, 'shard-0000')) as LeaseRecord;
    // Finished, but its owner, alive in the roster, has not given it back yet.
    const member = await join(storage, 'w1');
    await storage.updateLeases(GROUP, [
      { leaseKey: 'shard-0000', expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner: 'w1', incarnation: 'i-w1', epoch: 1, checkpoint: Checkpoint.SHARD_END } },
    ]);
    const [a, b] = source.split('shard-0000');
    expect((await leader.run(signal)).deleted).toEqual([]);
    expect(await keys()).toEqual(['shard-0000', a, b].sort());
    // However long its record stands still: only a member declared dead holds nothing.
    await scheduler.advance(60_000);
    expect((await leader.run(signal)).deleted).toEqual([]);
    const declared = await storage.putMember(GROUP, 'w1', member.version, { ...memberStateOf(member), status: 'dead' });
    expect(declared.status).toBe('applied');
    expect((await leader.run(signal)).deleted).toEqual(['shard-0000']);
  });

  it('deletes a finished lease only once its parents have no lease: oldest generation first, so that a rewind of a parent finds every descendant', async () => {
    const { sync, signal, keys, leader, child, sibling, grandchildren } = await finishedUnderAHeldParent();
    // The child is finished, free, and its children have leases: only its parent's lease keeps it.
    expect((await leader.run(signal)).deleted).toEqual([]);
    expect(await keys()).toEqual(['shard-0000', child, sibling, ...grandchildren].sort());
    expect((await sync({ unsafe: { deleteBeforeParents: true } }).run(signal)).deleted).toEqual([child]);
  });

  it('deletes a finished child in the same round as its parent, once the parent goes', async () => {
    const { storage, signal, keys, leader, member, child, sibling, grandchildren } = await finishedUnderAHeldParent();
    expect((await leader.run(signal)).deleted).toEqual([]);
    const declared = await storage.putMember(GROUP, 'w1', member.version, { ...memberStateOf(member), status: 'dead' });
    expect(declared.status).toBe('applied');
    expect((await leader.run(signal)).deleted.sort()).toEqual(['shard-0000', child].sort());
    expect(await keys()).toEqual([sibling, ...grandchildren].sort());
  });

  it('counts as held a lease whose owner joined again as a new incarnation only if it names the new one', async () => {
    const { source, storage, sync, signal } = world(1);
    const leader = sync();
    await leader.run(signal);
    const lease = (await storage.getLease(GROUP, 'shard-0000')) as LeaseRecord;
    await join(storage, 'w1', 'i-w1-second');
    await storage.updateLeases(GROUP, [
      { leaseKey: 'shard-0000', expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner: 'w1', incarnation: 'i-w1-first', epoch: 1, checkpoint: Checkpoint.SHARD_END } },
    ]);
    source.split('shard-0000');
    expect((await leader.run(signal)).deleted).toEqual(['shard-0000']);
  });

  it('never touches a corrupt lease, and never counts a corrupt parent as finished', async () => {
    const { source, storage, sync, signal, finish } = world(1);
    const leader = sync();
    await leader.run(signal);
    await finish('shard-0000');
    storage.corrupt(GROUP, 'shard-0000');
    const [a] = source.split('shard-0000');
    const report = await leader.run(signal);
    expect(report.corrupt).toEqual(['shard-0000']);
    expect(report.deleted).toEqual([]);
    // The children are created (their parent has a lease, if an unreadable one), and wait for it.
    expect((await storage.getLease(GROUP, a))?.parentKeys).toEqual(['shard-0000']);
  });

  it('leaves alone a lease written in a newer record format', async () => {
    const { storage, sync, signal } = world(1);
    await storage.createLease({ group: GROUP, leaseKey: 'future', format: RECORD_FORMAT + 1, checkpoint: Checkpoint.SHARD_END });
    const report = await sync().run(signal);
    expect(report.deleted).toEqual([]);
    expect((await storage.getLease(GROUP, 'future'))?.format).toBe(RECORD_FORMAT + 1);
  });
});
