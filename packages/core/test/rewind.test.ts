import { describe, expect, it } from 'vitest';
import {
  applyRewind,
  awaitRewind,
  Checkpoint,
  InvalidConfigError,
  InvalidInputError,
  MemoryStorage,
  parseRewindTarget,
  planRewind,
  type LeaseChange,
  type LeaseRecord,
  type LeaseUpdate,
  type NewLease,
  type RewindTarget,
  type WriteResult,
} from '../src/index.js';
import { settleRewinds } from '../src/rewind.js';
import { leaseStateOf, RECORD_FORMAT, REWIND_FIELDS, REWIND_MARKER_FIELD, rewindRequestOf } from '../src/adapter.js';
import { seededRandom, VirtualScheduler, withUnsafe } from '../src/testing/index.js';
import { run } from './support/virtual.js';

/** A member of `storage` for a proxy that replaces some of its operations: operations bound to it, values (its contractVersion) as they are. */
function ownOf(storage: object, name: string | symbol): unknown {
  const value: unknown = Reflect.get(storage, name);
  return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(storage) : value;
}

const GROUP = 'orders';

async function group(leases: readonly Omit<NewLease, 'group'>[], members: readonly { workerId: string; status?: 'alive' | 'dead' }[] = []) {
  const storage = new MemoryStorage();
  for (const lease of leases) {
    const outcome = await storage.createLease({ group: GROUP, ...lease });
    if (outcome.status !== 'applied') throw new Error(`seeding ${lease.leaseKey}: ${outcome.status}`);
  }
  for (const member of members) {
    await storage.putMember(GROUP, member.workerId, null, {
      format: RECORD_FORMAT,
      incarnation: `${member.workerId}-inc`,
      leaseDurationMs: 10_000,
      status: member.status ?? 'alive',
      held: 0,
      changes: 0,
      requests: [],
      metadata: {},
    });
  }
  await storage.createLeader({ group: GROUP, holder: 'w1', term: 3, metadata: { 'leasehold.shardsSynced': 'yes' } });
  const scheduler = new VirtualScheduler();
  const clock = scheduler.clock();
  const plan = (to: RewindTarget, select?: { streamId?: string; leaseKeys?: string[] }) =>
    planRewind({ storage, group: GROUP, to, select, clock, random: seededRandom(7) });
  const lease = async (leaseKey: string): Promise<LeaseRecord> => (await storage.getLease(GROUP, leaseKey)) as LeaseRecord;
  return { storage, scheduler, clock, plan, lease };
}

const owned = (workerId: string) => ({ owner: workerId, incarnation: `${workerId}-inc`, epoch: 4 });

describe('rewind targets', () => {
  it('reads trim-horizon, latest, ISO times, AT_TIMESTAMP and positions, and refuses anything else naming it', () => {
    expect(parseRewindTarget('trim-horizon')).toBe('trim-horizon');
    expect(parseRewindTarget('TRIM_HORIZON')).toBe('trim-horizon');
    expect(parseRewindTarget('latest')).toBe('latest');
    expect(parseRewindTarget('2024-05-01T10:00:00Z')).toEqual({ time: Date.UTC(2024, 4, 1, 10) });
    expect(parseRewindTarget('2024-05-01T12:00:00.5+02:00')).toEqual({ time: Date.UTC(2024, 4, 1, 10, 0, 0, 500) });
    expect(parseRewindTarget('2024-05-01')).toEqual({ time: Date.UTC(2024, 4, 1) });
    expect(parseRewindTarget('AT_TIMESTAMP:1714557600000')).toEqual({ time: 1714557600000 });
    expect(parseRewindTarget('49590338271490256608559692538361571095921575989136588898')).toEqual({ position: '49590338271490256608559692538361571095921575989136588898' });
    expect(parseRewindTarget('495903:3')).toEqual({ position: '495903:3' });
    expect(() => parseRewindTarget('2024-02-30T10:00:00Z')).toThrow(InvalidInputError);
    expect(() => parseRewindTarget('2024-02-30T10:00:00Z')).toThrow('rewind time "2024-02-30T10:00:00Z" is not a valid ISO time: no such day');
    expect(() => parseRewindTarget('2024-05-01T25:00:00Z')).toThrow('no such time of day');
    expect(() => parseRewindTarget('2024-05-01T10:00:00')).toThrow('a time of day needs its zone');
    expect(() => parseRewindTarget('lastest')).toThrow('rewind target "lastest" is not trim-horizon, latest, an ISO time');
  });

  it('refuses a bad time, a time in the future, a position without exactly one lease, and an unknown lease or stream', async () => {
    const { plan, clock } = await group([{ leaseKey: 'a', checkpoint: '10' }, { leaseKey: 'b', checkpoint: '20' }]);
    await expect(plan({ time: Number.NaN })).rejects.toThrow('rewind time must be a valid Date or milliseconds since the epoch, got NaN');
    await expect(plan({ time: clock.wallTime() + 60_000 })).rejects.toThrow(/is in the future .*: to skip to now, rewind to latest/);
    await expect(plan({ position: '5' })).rejects.toThrow('names a place in one shard: select exactly one lease, not every lease');
    await expect(plan({ position: '5' }, { leaseKeys: ['a', 'b'] })).rejects.toThrow('select exactly one lease, not 2');
    await expect(plan('trim-horizon', { leaseKeys: ['c'] })).rejects.toThrow('group "orders" has no lease "c"');
    await expect(plan('trim-horizon', { streamId: 'orders-stream' })).rejects.toThrow('group "orders" has no lease of stream "orders-stream"');
    await expect(plan('trim-horizon', { streamId: 's1', leaseKeys: ['a'] })).rejects.toThrow('lease "a" is not a lease of stream "s1"');
    await expect(plan({ position: 'SHARD_END' }, { leaseKeys: ['a'] })).rejects.toBeInstanceOf(InvalidInputError);
  });
});

describe('planRewind', () => {
  it('moves a free lease directly and asks the live owner of a held one; a lease of a dead owner is free', async () => {
    const { plan } = await group(
      [
        { leaseKey: 'free', checkpoint: '10' },
        { leaseKey: 'held', checkpoint: '20', ...owned('w1') },
        { leaseKey: 'orphan', checkpoint: '30', ...owned('gone') },
      ],
      [{ workerId: 'w1' }, { workerId: 'gone', status: 'dead' }],
    );
    const rewind = await plan('trim-horizon');
    expect(rewind.moves).toEqual([
      { leaseKey: 'free', owner: null, from: '10', to: 'TRIM_HORIZON', how: 'direct', descendantOf: undefined },
      { leaseKey: 'held', owner: 'w1', from: '20', to: 'TRIM_HORIZON', how: 'request', descendantOf: undefined },
      { leaseKey: 'orphan', owner: null, from: '30', to: 'TRIM_HORIZON', how: 'direct', descendantOf: undefined },
    ]);
    expect(rewind.selected).toEqual(['free', 'held', 'orphan']);
    expect(rewind.notReplayable).toEqual([]);
  });

  it('a finished parent moves after its descendants, which are reset to the rewind time, and a cleaned-up parent is named as not replayed', async () => {
    const { plan, clock } = await group(
      [
        { leaseKey: 'parent', checkpoint: Checkpoint.SHARD_END, parentKeys: ['grandparent'] },
        { leaseKey: 'left', checkpoint: '40', parentKeys: ['parent'], ...owned('w1') },
        { leaseKey: 'right', checkpoint: Checkpoint.SHARD_END, parentKeys: ['parent'] },
        { leaseKey: 'grandchild', checkpoint: '70', parentKeys: ['right'] },
        { leaseKey: 'other', checkpoint: '5' },
      ],
      [{ workerId: 'w1' }],
    );
    const at = clock.wallTime() - 60_000;
    const rewind = await plan({ time: at }, { leaseKeys: ['parent'] });
    const to = Checkpoint.atTimestamp(at);
    expect(rewind.moves).toEqual([
      { leaseKey: 'parent', owner: null, from: Checkpoint.SHARD_END, to, how: 'after-descendants', descendantOf: undefined },
      { leaseKey: 'left', owner: 'w1', from: '40', to, how: 'request', descendantOf: 'parent' },
      { leaseKey: 'right', owner: null, from: Checkpoint.SHARD_END, to, how: 'after-descendants', descendantOf: 'parent' },
      { leaseKey: 'grandchild', owner: null, from: '70', to, how: 'direct', descendantOf: 'parent' },
    ]);
    expect(rewind.notReplayable).toEqual([
      { leaseKey: 'grandparent', reason: 'parent of parent: its lease was cleaned up after it finished, so its records after the target are not read again' },
    ]);
    // A position in one shard: what continues it is read again from its start.
    const byPosition = await plan({ position: '12' }, { leaseKeys: ['parent'] });
    expect(byPosition.moves.map((move) => [move.leaseKey, move.to])).toEqual([
      ['parent', '12'],
      ['left', 'TRIM_HORIZON'],
      ['right', 'TRIM_HORIZON'],
      ['grandchild', 'TRIM_HORIZON'],
    ]);
  });

  it('a descendant of a finished lease is written even when it is free and at the target already, so that a take on a listing from before the rewind conflicts', async () => {
    const { storage, plan, lease } = await group([
      { leaseKey: 'parent', checkpoint: Checkpoint.SHARD_END },
      { leaseKey: 'child', checkpoint: Checkpoint.TRIM_HORIZON, parentKeys: ['parent'] },
    ]);
    // A worker listed the group before the rewind: the parent finished, so the child was eligible.
    const listed = await lease('child');
    const rewind = await plan('trim-horizon', { leaseKeys: ['parent'] });
    expect(rewind.moves.map((move) => [move.leaseKey, move.how])).toEqual([
      ['parent', 'after-descendants'],
      ['child', 'direct'],
    ]);
    await applyRewind(rewind, { storage });
    const [take] = await storage.updateLeases(GROUP, [{ leaseKey: 'child', expectedVersion: listed.version, next: { ...leaseStateOf(listed), ...owned('w2') } }]);
    expect(take?.status).toBe('conflict');
    // Nobody read the child: the parent is moved back, and the child waits for it.
    expect(await lease('parent')).toMatchObject({ checkpoint: Checkpoint.TRIM_HORIZON });
  });

  it('leaves a lease whose line runs through a lease that cannot be read back as it is, when the rewind reads a finished lease again, naming that lease', async () => {
    const { storage, plan } = await group([
      { leaseKey: 'grandparent', checkpoint: Checkpoint.SHARD_END },
      { leaseKey: 'parent', checkpoint: Checkpoint.SHARD_END, parentKeys: ['grandparent'] },
      { leaseKey: 'child', checkpoint: '40', parentKeys: ['parent'] },
      { leaseKey: 'grandchild', checkpoint: null, parentKeys: ['child'] },
      { leaseKey: 'other', checkpoint: '70' },
    ]);
    // Only the leases' own records tell their lines: the damaged parent may descend from the grandparent.
    storage.corrupt(GROUP, 'parent');
    const everything = await plan('trim-horizon');
    expect(everything.moves.map((move) => [move.leaseKey, move.how])).toEqual([
      ['grandparent', 'after-descendants'],
      ['other', 'direct'],
    ]);
    expect(everything.unchanged.map((note) => note.leaseKey).sort()).toEqual(['child', 'grandchild']);
    expect(everything.unchanged.find((note) => note.leaseKey === 'child')?.reason).toContain('descends from parent, whose lease cannot be read back');
    // A rewind that reads no finished lease again moves them: nothing it writes can be read again before them.
    const some = await plan('trim-horizon', { leaseKeys: ['child'] });
    expect(some.moves.map((move) => [move.leaseKey, move.how])).toEqual([['child', 'direct']]);
  });

  it('latest is pinned to the moment of the request and leaves finished leases as they are', async () => {
    const { plan, clock } = await group([{ leaseKey: 'done', checkpoint: Checkpoint.SHARD_END }, { leaseKey: 'open', checkpoint: '9', parentKeys: ['done'] }]);
    const rewind = await plan('latest');
    expect(rewind.to).toBe(Checkpoint.atTimestamp(clock.wallTime()));
    expect(rewind.moves.map((move) => move.leaseKey)).toEqual(['open']);
    expect(rewind.unchanged).toEqual([{ leaseKey: 'done', reason: 'finished: nothing in it comes after the moment of the request' }]);
  });

  it('selects the leases of one stream by the stream id their keys name up to their last colon, not those of a stream whose id starts with it', async () => {
    const { plan, storage } = await group([
      { leaseKey: 's1:shard-0' },
      { leaseKey: 's1:shard-1' },
      { leaseKey: 's10:shard-0' },
      { leaseKey: 'orders:shard-0' },
      { leaseKey: 'orders:eu:shard-0' },
      { leaseKey: 'orders:eu:shard-1' },
    ]);
    expect((await plan('trim-horizon', { streamId: 's1' })).selected).toEqual(['s1:shard-0', 's1:shard-1']);
    expect((await plan('trim-horizon', { streamId: 'orders' })).selected).toEqual(['orders:shard-0']);
    expect((await plan('trim-horizon', { streamId: 'orders:eu' })).selected).toEqual(['orders:eu:shard-0', 'orders:eu:shard-1']);
    await expect(plan('trim-horizon', { streamId: 'orders', leaseKeys: ['orders:eu:shard-0'] })).rejects.toThrow(
      'lease "orders:eu:shard-0" is not a lease of stream "orders" (it is a lease of stream "orders:eu")',
    );
    await expect(plan('trim-horizon', { streamId: 'orders:eu:shard-0' })).rejects.toThrow('group "orders" has no lease of stream "orders:eu:shard-0"');
    // A lease that cannot be read back is named only under the stream its key names.
    storage.corrupt(GROUP, 'orders:eu:shard-1');
    expect((await plan('trim-horizon', { streamId: 'orders' })).notReplayable).toEqual([]);
    expect((await plan('trim-horizon', { streamId: 'orders:eu' })).notReplayable.map((note) => note.leaseKey)).toEqual(['orders:eu:shard-1']);
  });
});

describe('applyRewind', () => {
  it('moves free leases in one conditional write that keeps owner, epoch and incarnation, adds a request to held ones, and marks the leader record keeping holder and term', async () => {
    const { storage, plan, lease } = await group(
      [
        { leaseKey: 'free', checkpoint: '10', metadata: { mine: 'kept' } },
        { leaseKey: 'held', checkpoint: '20', ...owned('w1'), metadata: { mine: 'kept' } },
        { leaseKey: 'orphan', checkpoint: '30', ...owned('gone') },
      ],
      [{ workerId: 'w1' }],
    );
    const heard: LeaseChange[] = [];
    await storage.subscribe(GROUP, (change) => heard.push(change));
    const rewind = await plan('trim-horizon');
    const applied = await applyRewind(rewind, { storage });
    expect(applied.marker).toBe('written');
    expect(await lease('free')).toMatchObject({ checkpoint: 'TRIM_HORIZON', owner: null, metadata: { mine: 'kept', [REWIND_FIELDS.rewound]: rewind.rewindId } });
    expect(await lease('orphan')).toMatchObject({ checkpoint: 'TRIM_HORIZON', owner: 'gone', incarnation: 'gone-inc', epoch: 4 });
    const held = await lease('held');
    expect(held).toMatchObject({ checkpoint: '20', owner: 'w1', incarnation: 'w1-inc', epoch: 4 });
    expect(rewindRequestOf(held)).toEqual({ id: rewind.rewindId, to: 'TRIM_HORIZON', requestedAt: rewind.requestedAt });
    expect(held.metadata.mine).toBe('kept');
    expect(heard).toEqual([{ group: GROUP, leaseKey: 'held', kind: 'rewind', owner: 'w1' }]);
    expect(await storage.getLeader(GROUP)).toMatchObject({ holder: 'w1', term: 3, metadata: { 'leasehold.shardsSynced': 'yes', [REWIND_MARKER_FIELD]: rewind.rewindId } });
  });

  it('reads the group again and writes again when a lease changed after it was read, and moves a lease taken meanwhile by request', async () => {
    const { storage, plan, lease } = await group([{ leaseKey: 'a', checkpoint: '10' }], [{ workerId: 'w1' }]);
    const rewind = await plan('trim-horizon');
    // A worker takes the lease between the plan and the writes.
    const taking = await lease('a');
    await storage.updateLeases(GROUP, [{ leaseKey: 'a', expectedVersion: taking.version, next: { ...leaseStateOf(taking), ...owned('w1'), epoch: 1 } }]);
    const applied = await applyRewind(rewind, { storage });
    expect(applied.moves).toEqual([{ leaseKey: 'a', owner: 'w1', from: '10', to: 'TRIM_HORIZON', how: 'request', descendantOf: undefined }]);
    expect(rewindRequestOf(await lease('a'))?.id).toBe(rewind.rewindId);
    expect((await lease('a')).checkpoint).toBe('10');
  });

  it('a request kept out by an owner that checkpoints before each write of the tool is sent again at once on the record the conflict carries', async () => {
    const { storage, plan, lease } = await group([{ leaseKey: 'busy', checkpoint: '10', ...owned('w1') }], [{ workerId: 'w1' }]);
    const rewind = await plan('trim-horizon');
    let checkpoints = 0;
    const updateLeases = async (g: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> => {
      // The owner checkpoints just before each of the tool's first three writes.
      if (checkpoints < 3) {
        const current = (await storage.getLease(g, 'busy')) as LeaseRecord;
        await storage.updateLeases(g, [{ leaseKey: 'busy', expectedVersion: current.version, next: { ...leaseStateOf(current), checkpoint: String(11 + checkpoints++) } }]);
      }
      return storage.updateLeases(g, updates);
    };
    const busy = new Proxy(storage, {
      get: (target, name) => (name === 'updateLeases' ? updateLeases : ownOf(target, name)),
    });
    // One read of the group: the write gets through without reading it again.
    await applyRewind(rewind, { storage: busy, maxAttempts: 1 });
    expect(rewindRequestOf(await lease('busy'))?.id).toBe(rewind.rewindId);
    expect((await lease('busy')).checkpoint).toBe('13');
  });

  it('a lease that finished between the read and the write, and whose new child is being read, gets a request, never a direct move, and its child is covered', async () => {
    const { storage, plan, lease } = await group([{ leaseKey: 'parent', checkpoint: '10', ...owned('w1') }], [{ workerId: 'w1' }, { workerId: 'w2' }]);
    const rewind = await plan('trim-horizon');
    let finished = false;
    const updateLeases = async (g: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> => {
      if (!finished) {
        // Right before the tool's first write: the owner reaches the end and gives the lease back, and another worker reads its child.
        finished = true;
        const parent = await lease('parent');
        await storage.updateLeases(g, [{ leaseKey: 'parent', expectedVersion: parent.version, next: { ...leaseStateOf(parent), checkpoint: Checkpoint.SHARD_END, owner: null, incarnation: null } }]);
        await storage.createLease({ group: g, leaseKey: 'child', parentKeys: ['parent'], checkpoint: '3', ...owned('w2') });
      }
      return storage.updateLeases(g, updates);
    };
    const racing = new Proxy(storage, {
      get: (target, name) => (name === 'updateLeases' ? updateLeases : ownOf(target, name)),
    });
    await applyRewind(rewind, { storage: racing, maxAttempts: 1 });
    expect(await lease('parent')).toMatchObject({ checkpoint: Checkpoint.SHARD_END });
    expect(rewindRequestOf(await lease('parent'))?.to).toBe('TRIM_HORIZON');
    // The child's reader must stop first: the rewind covers it, and the parent waits for it.
    expect(rewindRequestOf(await lease('child'))).toEqual({ id: rewind.rewindId, to: 'TRIM_HORIZON', requestedAt: rewind.requestedAt });
  });

  /** A lease its owner moved by `earlier`, and read on from, that carries a later rewind's request now; then `earlier`'s tool sends its writes again. */
  async function twoRewindsOfOneLease(unsafe?: { rewindRequestedAgain: boolean }) {
    const { storage, scheduler, clock, plan, lease } = await group([{ leaseKey: 'held', checkpoint: '50', ...owned('w1') }], [{ workerId: 'w1' }]);
    const earlier = await plan({ time: 1_000 });
    const applied = await applyRewind(earlier, { storage, clock });
    const requested = await lease('held');
    await storage.updateLeases(GROUP, [{ leaseKey: 'held', expectedVersion: requested.version, next: { ...leaseStateOf(requested), checkpoint: '60', metadata: { [REWIND_FIELDS.rewound]: earlier.rewindId } } }]);
    const later = await applyRewind(await planRewind({ storage, group: GROUP, to: 'trim-horizon', clock, random: seededRandom(8) }), { storage, clock });
    expect(later.rewindId).not.toBe(earlier.rewindId);
    // Its first answer lost, the earlier rewind's tool sends its writes again.
    await applyRewind(earlier, withUnsafe({ storage, clock }, unsafe));
    return { storage, scheduler, clock, applied, later, held: await lease('held') };
  }

  it('does not write its request again on a lease it moved already that carries a later rewind\'s request, and counts that lease as moved', async () => {
    const { storage, scheduler, clock, applied, later, held } = await twoRewindsOfOneLease();
    expect(rewindRequestOf(held)?.id).toBe(later.rewindId);
    const progress = await run(scheduler, awaitRewind(applied, { storage, clock, timeoutMs: 1_000, pollIntervalMs: 100 }));
    expect(progress.leases).toEqual([expect.objectContaining({ leaseKey: 'held', state: 'applied' })]);
  });

  it('with the unsafe rewindRequestedAgain, the earlier rewind writes its request over the later one (the switch brings the defect back)', async () => {
    const { applied, held } = await twoRewindsOfOneLease({ rewindRequestedAgain: true });
    expect(rewindRequestOf(held)?.id).toBe(applied.rewindId);
    expect(held.checkpoint).toBe('60');
  });

  it('gives up after a bounded number of attempts when a lease keeps changing, naming it', async () => {
    const { storage, plan } = await group([{ leaseKey: 'busy', checkpoint: '10' }]);
    const rewind = await plan('trim-horizon');
    const updateLeases = async (g: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> => {
      // Someone else writes the lease just before each of the tool's writes.
      const current = (await storage.getLease(g, 'busy')) as LeaseRecord;
      await storage.updateLeases(g, [{ leaseKey: 'busy', expectedVersion: current.version, next: leaseStateOf(current) }]);
      return storage.updateLeases(g, updates);
    };
    const jittery = new Proxy(storage, {
      get: (target, name) => (name === 'updateLeases' ? updateLeases : ownOf(target, name)),
    });
    await expect(applyRewind(rewind, { storage: jittery, maxAttempts: 3 })).rejects.toThrow(/could not be written to "busy" after 3 attempts: they kept changing/);
    await expect(applyRewind(rewind, { storage, maxAttempts: 0 })).rejects.toThrow(InvalidConfigError);
  });
});

describe('settling a rewind', () => {
  it('a finished parent is moved only once every descendant carries the rewind with no request left, descendants first', async () => {
    const { storage, plan, lease, scheduler, clock } = await group(
      [
        { leaseKey: 'parent', checkpoint: Checkpoint.SHARD_END },
        { leaseKey: 'child', checkpoint: '40', parentKeys: ['parent'], ...owned('w1') },
      ],
      [{ workerId: 'w1' }],
    );
    const rewind = await plan('trim-horizon', { leaseKeys: ['parent'] });
    const applied = await applyRewind(rewind, { storage, clock });
    // The child's owner has not applied its request: the parent waits, and nobody may take the child.
    expect(rewindRequestOf(await lease('parent'))?.id).toBe(rewind.rewindId);
    expect((await lease('parent')).checkpoint).toBe(Checkpoint.SHARD_END);
    const waiting = await run(scheduler, awaitRewind(applied, { storage, clock, timeoutMs: 2_000, pollIntervalMs: 100 }));
    expect(waiting.complete).toBe(false);
    expect(waiting.leases.map((progress) => [progress.leaseKey, progress.state])).toEqual([
      ['parent', 'pending'],
      ['child', 'pending'],
    ]);
    // Its owner applies it (moves the checkpoint, removes the request) and gives the lease back.
    const child = await lease('child');
    const request = rewindRequestOf(child)!;
    const metadata: Record<string, string> = { ...child.metadata, [REWIND_FIELDS.rewound]: request.id };
    delete metadata[REWIND_FIELDS.request];
    await storage.updateLeases(GROUP, [{ leaseKey: 'child', expectedVersion: child.version, next: { ...leaseStateOf(child), checkpoint: request.to, metadata, owner: null, incarnation: null } }]);
    const progress: number[] = [];
    const done = await run(scheduler, awaitRewind(applied, { storage, clock, timeoutMs: 2_000, pollIntervalMs: 100, onProgress: (p) => progress.push(p.done) }));
    expect(done.complete).toBe(true);
    expect(progress).toEqual([2]);
    expect(await lease('parent')).toMatchObject({ checkpoint: 'TRIM_HORIZON', metadata: { [REWIND_FIELDS.rewound]: rewind.rewindId } });
    // The leader record was marked again: workers without a change feed list and find the parent takeable.
    expect((await storage.getLeader(GROUP))?.metadata[REWIND_MARKER_FIELD]).toBe(`${rewind.rewindId}/parent`);
  });

  it('a finished parent is not moved while a lease of the group cannot be read back, since it may descend from it and be read', async () => {
    const { storage, scheduler, clock, plan, lease } = await group(
      [
        { leaseKey: 'parent', checkpoint: Checkpoint.SHARD_END },
        { leaseKey: 'child', checkpoint: '40', parentKeys: ['parent'], ...owned('w1') },
      ],
      [{ workerId: 'w1' }],
    );
    const applied = await applyRewind(await plan('trim-horizon', { leaseKeys: ['parent'] }), { storage, clock });
    // The child's record is damaged while its owner reads on: nothing in the listing names it any more.
    storage.corrupt(GROUP, 'child');
    const progress = await run(scheduler, awaitRewind(applied, { storage, clock, timeoutMs: 1_000, pollIntervalMs: 100 }));
    expect(progress.complete).toBe(false);
    expect(await lease('parent')).toMatchObject({ checkpoint: Checkpoint.SHARD_END });
    expect(rewindRequestOf(await lease('parent'))?.id).toBe(applied.rewindId);
  });

  it('a request on a lease nobody holds is applied directly, and a descendant that missed the rewind is covered by it', async () => {
    const { storage, lease } = await group(
      [
        { leaseKey: 'parent', checkpoint: Checkpoint.SHARD_END, metadata: { [REWIND_FIELDS.request]: JSON.stringify({ id: 'r9', to: '7', requestedAt: '2024-01-01T00:00:00.000Z' }) } },
        { leaseKey: 'late-child', checkpoint: '55', parentKeys: ['parent'], ...owned('w1') },
        { leaseKey: 'orphan', checkpoint: '90', ...owned('gone'), metadata: { [REWIND_FIELDS.request]: JSON.stringify({ id: 'r8', to: '3', requestedAt: '2024-01-01T00:00:00.000Z' }) } },
      ],
      [{ workerId: 'w1' }],
    );
    const leases = (await storage.listLeases(GROUP)).leases;
    const heldByAnyone = (record: LeaseRecord): boolean => record.owner === 'w1';
    const written = await settleRewinds({ storage, group: GROUP, leases, heldByAnyone });
    expect(written.map((record) => record.leaseKey).sort()).toEqual(['late-child', 'orphan']);
    expect(await lease('orphan')).toMatchObject({ checkpoint: '3', owner: 'gone', metadata: { [REWIND_FIELDS.rewound]: 'r8' } });
    expect(rewindRequestOf(await lease('late-child'))).toEqual({ id: 'r9', to: 'TRIM_HORIZON', requestedAt: '2024-01-01T00:00:00.000Z' });
    expect((await lease('parent')).checkpoint).toBe(Checkpoint.SHARD_END);
  });

  /** A finished parent carrying a request, with a child created since that nobody holds and nobody started; a worker listed the child before the request. */
  async function unstartedChild() {
    const { storage, lease } = await group([
      { leaseKey: 'parent', checkpoint: Checkpoint.SHARD_END },
      { leaseKey: 'child', checkpoint: Checkpoint.TRIM_HORIZON, parentKeys: ['parent'] },
    ]);
    const listed = await lease('child');
    const parent = await lease('parent');
    const request = JSON.stringify({ id: 'r1', to: 'TRIM_HORIZON', requestedAt: '2026-01-01T00:00:00.000Z' });
    await storage.updateLeases(GROUP, [{ leaseKey: 'parent', expectedVersion: parent.version, next: { ...leaseStateOf(parent), metadata: { [REWIND_FIELDS.request]: request } } }]);
    const takeAsListed = async () => (await storage.updateLeases(GROUP, [{ leaseKey: 'child', expectedVersion: listed.version, next: { ...leaseStateOf(listed), ...owned('w2') } }]))[0]?.status;
    return { storage, lease, takeAsListed };
  }

  it('writes a descendant nobody holds that never started, so that a take on a listing from before the request conflicts, and then moves the finished parent', async () => {
    const { storage, lease, takeAsListed } = await unstartedChild();
    await settleRewinds({ storage, group: GROUP, leases: [await lease('parent'), await lease('child')], heldByAnyone: () => false });
    expect((await lease('child')).metadata[REWIND_FIELDS.rewound]).toBe('r1');
    expect(await lease('parent')).toMatchObject({ checkpoint: 'TRIM_HORIZON', metadata: { [REWIND_FIELDS.rewound]: 'r1' } });
    expect(await takeAsListed()).toBe('conflict');
  });

  it('with the unsafe unstartedLeftAlone, that descendant is left as it is and the take on the old listing holds it under the parent read again (the switch brings the defect back)', async () => {
    const { storage, lease, takeAsListed } = await unstartedChild();
    await settleRewinds({ storage, group: GROUP, leases: [await lease('parent'), await lease('child')], heldByAnyone: () => false, unstartedLeftAlone: true });
    expect((await lease('parent')).checkpoint).toBe('TRIM_HORIZON');
    expect(await takeAsListed()).toBe('applied');
  });

  it('a request of a rewind the lease records already is removed with its checkpoint kept: a rewind moves a lease once', async () => {
    const { storage, lease } = await group([{ leaseKey: 'free', checkpoint: '90', metadata: { [REWIND_FIELDS.rewound]: 'r1' } }]);
    // As a tool without the rule wrote it: the request of r1 on a lease r1 moved, read on since.
    const stored = await lease('free');
    const request = JSON.stringify({ id: 'r1', to: 'TRIM_HORIZON', requestedAt: '2026-01-01T00:00:00.000Z' });
    await storage.updateLeases(GROUP, [{ leaseKey: 'free', expectedVersion: stored.version, next: { ...leaseStateOf(stored), metadata: { ...stored.metadata, [REWIND_FIELDS.request]: request } } }]);
    const written = await settleRewinds({ storage, group: GROUP, leases: [await lease('free')], heldByAnyone: () => false });
    expect(written).toHaveLength(1);
    expect(await lease('free')).toMatchObject({ checkpoint: '90', metadata: { [REWIND_FIELDS.rewound]: 'r1' } });
    expect(rewindRequestOf(await lease('free'))).toBeUndefined();
  });

  it('awaitRewind refuses a negative timeout', async () => {
    const { storage, plan } = await group([{ leaseKey: 'a', checkpoint: '1' }]);
    const applied = await applyRewind(await plan('trim-horizon'), { storage });
    await expect(awaitRewind(applied, { storage, timeoutMs: -1 })).rejects.toThrow('timeoutMs must be a non-negative number of milliseconds, got -1');
    await expect(awaitRewind(applied, { storage, timeoutMs: -1 })).rejects.toBeInstanceOf(InvalidConfigError);
  });
});
