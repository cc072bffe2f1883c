import { describe, expect, it } from 'vitest';
import {
  AbortedError,
  applyRewind,
  awaitRewind,
  Checkpoint,
  MemoryStorage,
  planRewind,
  type BatchContext,
  type Consumer,
  StorageOutcomeUnknownError,
  StorageUnavailableError,
  type LeaseUpdate,
  type RewindTarget,
} from '../src/index.js';
import { leaseStateOf, REWIND_FIELDS, rewindRequestOf } from '../src/adapter.js';
import type { ConsumerUnsafe } from '../src/testing/index.js';
import { run } from './support/virtual.js';
import { GROUP, perKey, range, world, type Seen } from './support/consumer-world.js';

/** A world whose rewind tool runs on the same virtual time as its workers. */
function rewindWorld(shards = 1) {
  const base = world(shards);
  const toolClock = base.scheduler.clock();
  /** Plans, applies and waits for a rewind of the whole group (or `leaseKeys`); returns the plan, the rewind as applied and its progress. */
  const rewind = async (to: RewindTarget, leaseKeys?: string[], timeoutMs = 60_000) => {
    const plan = await run(base.scheduler, planRewind({ storage: base.storage, group: GROUP, to, select: leaseKeys ? { leaseKeys } : undefined, clock: toolClock }));
    const applied = await run(base.scheduler, applyRewind(plan, { storage: base.storage, clock: toolClock }));
    const progress = await run(base.scheduler, awaitRewind(applied, { storage: base.storage, clock: toolClock, timeoutMs, pollIntervalMs: 100 }));
    return { plan, applied, progress };
  };
  return { ...base, toolClock, rewind };
}

/** The same store seen through a client without a change feed, as DynamoDB is. */
function withoutFeed(storage: MemoryStorage): MemoryStorage {
  return new Proxy(storage, {
    get: (target, name) => {
      if (name === 'subscribe') return undefined;
      // Operations bound to the store, values (its contractVersion) as they are.
      const value: unknown = Reflect.get(target, name, target);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/** Records each worker's `shard-rewound` and `shard-started` events. */
function watch(consumer: Consumer, into: string[]): void {
  consumer.on('shard-rewound', ({ shardId, to, waitsForParent }) => into.push(`${consumer.workerId} rewound ${shardId} to ${to}${waitsForParent ? ', waits for its parent' : ''}`));
  consumer.on('shard-started', ({ shardId, position }) => into.push(`${consumer.workerId} started ${shardId} at ${position}`));
}

/** Each key's deliveries from `from` on. */
function deliveredSince(seen: readonly Seen[], from: number): Map<string, number[]> {
  return perKey(seen.slice(from));
}

/**
 * A child rewound by its last owner while that owner handed it over, whose parent is still to be read: the
 * recipient looks at the parent before it reads the child, and a rewind event that reaches it meanwhile
 * (the event of the rewind the last owner applied) finds nothing to apply. The parent is held by a worker
 * whose handler never finishes its first batch, so that it stays unfinished. Returns the child's records
 * the recipient delivered while it looked at the parent, and whether it still held the child after.
 */
async function rewoundChildHandedOver(unsafe?: ConsumerUnsafe) {
  const { scheduler, source, seen, consumer, produce, storage } = rewindWorld(1);
  produce(['a', 'b'], 5);
  const [left] = source.split('shard-0000');
  produce(['a', 'b'], 5, 6);
  const holder = consumer('holder', { shardSyncIntervalMs: 600_000, processBatch: () => new Promise<void>(() => undefined) });
  await run(scheduler, holder.start());
  await scheduler.advance(10_000);
  expect(holder.shards).toEqual(['shard-0000']);
  // The recipient's reads of the parent by key wait while `stalled` is set.
  let stalled: Promise<void> | null = null;
  let resume = (): void => undefined;
  const stalling = new Proxy(storage, {
    get: (target, name) => {
      const value: unknown = Reflect.get(target, name, target);
      if (typeof value !== 'function') return value;
      if (name === 'getLease') {
        return async (group: string, leaseKey: string) => {
          if (leaseKey === 'shard-0000' && stalled) await stalled;
          return target.getLease(group, leaseKey);
        };
      }
      return (value as (...args: unknown[]) => unknown).bind(target);
    },
  });
  const recipient = consumer('recipient', { storage: stalling, unsafe });
  await run(scheduler, recipient.start());
  await scheduler.advance(5_000);
  expect(recipient.shards).toEqual([]);
  stalled = new Promise((resolve) => (resume = resolve));
  // The child, rewound to its start, written to the recipient as a handover writes it.
  const child = (await storage.getLease(GROUP, left))!;
  await storage.updateLeases(GROUP, [
    {
      leaseKey: left,
      expectedVersion: child.version,
      next: { ...leaseStateOf(child), owner: 'recipient', incarnation: recipient.coordinator.incarnation!, epoch: child.epoch + 1, checkpoint: Checkpoint.TRIM_HORIZON, metadata: { ...child.metadata, [REWIND_FIELDS.rewound]: 'rewind-1' } },
      notify: 'handed-off',
    },
  ]);
  let held = false;
  for (let i = 0; i < 100 && !held; i++) {
    await scheduler.advance(100);
    held = recipient.coordinator.isHeld(left);
  }
  expect(held).toBe(true);
  const from = seen.length;
  // The event of the rewind its last owner applied reaches the recipient while it looks at the parent (a
  // write that leaves the lease as it is, announced as a rewind).
  const handed = (await storage.getLease(GROUP, left))!;
  await storage.updateLeases(GROUP, [{ leaseKey: left, expectedVersion: handed.version, next: leaseStateOf(handed), notify: 'rewind' }]);
  await scheduler.advance(5_000);
  const whileLooking = seen.slice(from).filter((entry) => entry.shardId === left);
  resume();
  stalled = null;
  await scheduler.advance(5_000);
  const stillHeld = recipient.coordinator.isHeld(left);
  await run(scheduler, Promise.all([recipient.stop(), holder.stop({ timeoutMs: 1_000 })]));
  return { whileLooking, stillHeld };
}

describe('rewinding a live group', () => {
  it('a child rewound while handed over, whose parent is still to be read, is given back unread even when a rewind event reaches its recipient while it looks at the parent', async () => {
    const { whileLooking, stillHeld } = await rewoundChildHandedOver();
    expect(whileLooking).toEqual([]);
    expect(stillHeld).toBe(false);
  });

  it('with the unsafe rewindStartSkipsParents, the rewind event starts the child\'s reader while its parent is still to be read (the switch brings the defect back)', async () => {
    const { whileLooking } = await rewoundChildHandedOver({ rewindStartSkipsParents: true });
    expect(whileLooking.length).toBeGreaterThan(0);
  });

  it('a held shard rewound to a time: its owner finishes the batch in flight and hands every record from that time on to the handler again, in order, in the same tenure', async () => {
    const { scheduler, storage, seen, consumer, produce, toolClock, rewind } = rewindWorld(1);
    const worker = consumer('w1');
    const events: string[] = [];
    watch(worker, events);
    await run(scheduler, worker.start());
    produce(['a', 'b'], 20);
    await scheduler.advance(5_000);
    const at = toolClock.wallTime();
    await scheduler.advance(1_000);
    produce(['a', 'b'], 20, 21);
    await scheduler.advance(5_000);
    expect(perKey(seen)).toEqual(new Map([['a', range(1, 40)], ['b', range(1, 40)]]));
    const tenure = worker.coordinator.lease('shard-0000')?.fencingToken;
    const before = seen.length;
    events.length = 0;

    const { plan, progress } = await rewind({ time: at });
    expect(plan.moves).toEqual([{ leaseKey: 'shard-0000', owner: 'w1', from: '80', to: Checkpoint.atTimestamp(at), how: 'request', descendantOf: undefined }]);
    expect(progress.complete).toBe(true);
    await scheduler.advance(5_000);

    expect(deliveredSince(seen, before)).toEqual(new Map([['a', range(21, 40)], ['b', range(21, 40)]]));
    expect(events).toEqual([`w1 rewound shard-0000 to ${Checkpoint.atTimestamp(at)}`, `w1 started shard-0000 at ${Checkpoint.atTimestamp(at)}`]);
    expect(worker.coordinator.lease('shard-0000')?.fencingToken).toBe(tenure);
    const lease = await storage.getLease(GROUP, 'shard-0000');
    expect(lease?.checkpoint).toBe('80');
    expect(lease?.metadata[REWIND_FIELDS.rewound]).toBe(plan.rewindId);
    expect(lease?.metadata[REWIND_FIELDS.request]).toBeUndefined();
    await run(scheduler, worker.stop());
  });

  it('a held shard whose handler keeps failing is rewound without waiting out the failing batch\'s retries, and read again from the target', async () => {
    const { scheduler, storage, seen, consumer, produce, toolClock, rewind } = rewindWorld(1);
    let failing = false;
    const worker = consumer('w1', {
      // A backoff longer than the rewind tool waits: the pause must cut it short.
      retry: { initialDelayMs: 40_000, maxDelayMs: 60_000 },
      processBatch: (records) => {
        if (failing) throw new Error('downstream unavailable');
        for (const record of records) {
          const [key, value] = new TextDecoder().decode(record.data).split('=') as [string, string];
          seen.push({ worker: 'w1', shardId: 'shard-0000', key, value: Number(value) });
        }
      },
    });
    await run(scheduler, worker.start());
    produce(['a'], 10);
    await scheduler.advance(5_000);
    const at = toolClock.wallTime();
    await scheduler.advance(1_000);
    produce(['a'], 10, 11);
    await scheduler.advance(5_000);
    failing = true;
    produce(['a'], 5, 21);
    await scheduler.advance(5_000);
    expect(perKey(seen)).toEqual(new Map([['a', range(1, 20)]]));
    const before = seen.length;

    const { progress } = await rewind({ time: at }, undefined, 20_000);
    expect(progress.complete).toBe(true);
    expect((await storage.getLease(GROUP, 'shard-0000'))?.metadata[REWIND_FIELDS.request]).toBeUndefined();
    failing = false;
    await scheduler.advance(70_000);
    expect(deliveredSince(seen, before)).toEqual(new Map([['a', range(11, 25)]]));
    await run(scheduler, worker.stop());
  });

  it('applies within a few milliseconds with a change feed, and within a renew interval and a quarter without one', async () => {
    for (const useChangeFeed of [true, false]) {
      const { scheduler, produce, consumer, rewind, storage } = rewindWorld(2);
      const worker = consumer('w1', useChangeFeed ? {} : { storage: withoutFeed(storage) });
      await run(scheduler, worker.start());
      produce(['a', 'b', 'c'], 10);
      await scheduler.advance(5_000);
      const { progress } = await rewind('trim-horizon');
      expect(progress.complete).toBe(true);
      const slowest = Math.max(...progress.leases.map((lease) => lease.appliedAfterMs ?? Infinity));
      if (useChangeFeed) expect(slowest).toBeLessThanOrEqual(200); // a poll of awaitRewind
      else expect(slowest).toBeLessThanOrEqual(worker.elector!.renewIntervalMs * 1.25 + 200);
      await run(scheduler, worker.stop());
    }
  });

  it('a lease nobody holds is moved directly, and the worker that takes it reads from there', async () => {
    const { scheduler, storage, seen, consumer, produce, rewind } = rewindWorld(1);
    const first = consumer('first');
    await run(scheduler, first.start());
    produce(['a'], 10);
    await scheduler.advance(5_000);
    await run(scheduler, first.stop());
    const before = seen.length;
    const { plan, progress } = await rewind({ position: '4' }, ['shard-0000']);
    expect(plan.moves.map((move) => [move.owner, move.how])).toEqual([[null, 'direct']]);
    expect(progress.leases).toEqual([{ leaseKey: 'shard-0000', how: 'direct', state: 'applied', appliedAfterMs: expect.any(Number) }]);
    expect((await storage.getLease(GROUP, 'shard-0000'))?.checkpoint).toBe('4');
    const second = consumer('second');
    await run(scheduler, second.start());
    await scheduler.advance(5_000);
    expect(deliveredSince(seen, before)).toEqual(new Map([['a', range(5, 10)]]));
    await run(scheduler, second.stop());
  });

  it('a request left by an owner that died before applying it is applied by the worker that takes the lease next, before it reads', async () => {
    const { scheduler, seen, consumer, produce, storage } = rewindWorld(2);
    // The survivor leads, and runs its shard sync (which settles what nobody holds) only once, at its election.
    const survivor = consumer('survivor', { shardSyncIntervalMs: 600_000 });
    const events: string[] = [];
    watch(survivor, events);
    await run(scheduler, survivor.start());
    const doomedClock = scheduler.clock();
    const doomed = consumer('doomed', { storage: withoutFeed(storage) }, doomedClock);
    await run(scheduler, doomed.start());
    produce(['a', 'b', 'c', 'd'], 10);
    await scheduler.advance(20_000);
    const lost = doomed.shards;
    expect(lost).toHaveLength(1);
    doomedClock.kill();
    const before = seen.length;
    events.length = 0;
    // Written while the owner is dead but not yet declared so: a request, which nobody applies for now.
    const plan = await run(scheduler, planRewind({ storage, group: GROUP, to: 'trim-horizon', select: { leaseKeys: lost }, clock: scheduler.clock() }));
    expect(plan.moves.map((move) => move.how)).toEqual(['request']);
    await run(scheduler, applyRewind(plan, { storage, clock: scheduler.clock() }));
    await scheduler.advance(40_000);
    expect(events).toEqual([`survivor rewound ${lost[0]} to TRIM_HORIZON`, `survivor started ${lost[0]} at TRIM_HORIZON`]);
    const replayed = seen.slice(before).filter((entry) => entry.shardId === lost[0]);
    expect(replayed.length).toBeGreaterThan(0);
    for (const values of perKey(replayed).values()) expect(values).toEqual(range(1, 10));
    expect(rewindRequestOf((await storage.getLease(GROUP, lost[0]!))!)).toBeUndefined();
    await run(scheduler, survivor.stop());
  });

  it('a rewind during a rebalance: a lease being handed over carries its request to the recipient, which applies it before it reads, and nothing after the target is missed', async () => {
    const { scheduler, seen, consumer, produce, toolClock, rewind, storage } = rewindWorld(4);
    const busy = (workerId: string, options: { storage?: ReturnType<typeof withoutFeed> } = {}) =>
      consumer(workerId, {
        ...options,
        processBatch: async (records, context) => {
          for (const record of records) {
            const [key, value] = new TextDecoder().decode(record.data).split('=') as [string, string];
            seen.push({ worker: workerId, shardId: context.shardId, key, value: Number(value) });
          }
          await scheduler.clock().sleep(300, context.signal).catch(() => undefined);
        },
      });
    const first = busy('first');
    const events: string[] = [];
    watch(first, events);
    first.on('lease-handed-off', ({ shardId, to }) => events.push(`first handed ${shardId} to ${to}`));
    await run(scheduler, first.start());
    produce(['a', 'b', 'c', 'd', 'e', 'f'], 20);
    await scheduler.advance(2_000);
    const at = toolClock.wallTime();
    await scheduler.advance(500);
    produce(['a', 'b', 'c', 'd', 'e', 'f'], 20, 21);
    await scheduler.advance(20_000);
    // A second worker joins: the first hands it half its leases; the rewind is asked for the moment the first handover begins.
    // Without a change feed the recipient learns of its leases at a listing, after the request landed on
    // them: the request travels with the lease. (With a feed it may hold one before the request lands, and
    // then applies it as the owner, as any owner does.)
    const second = busy('second', { storage: withoutFeed(storage) });
    let rewinding: Promise<unknown> | undefined;
    const before = { count: 0 };
    first.coordinator.once('handoff-offered', () => {
      before.count = seen.length;
      rewinding = rewind({ time: at });
    });
    watch(second, events);
    await run(scheduler, second.start());
    await scheduler.advance(30_000);
    expect(rewinding).toBeDefined();
    // The leases on their way applied the request at their recipient, the others at their owner.
    const handed = events.filter((event) => event.startsWith('first handed')).map((event) => event.split(' ')[2]);
    expect(handed).toHaveLength(2);
    const to = Checkpoint.atTimestamp(at);
    for (const shardId of handed) {
      // Applied before it read anything: its first start is at the target.
      expect(events.filter((event) => event.startsWith('second') && event.includes(` ${shardId} `))).toEqual([`second rewound ${shardId} to ${to}`, `second started ${shardId} at ${to}`]);
      expect(events.filter((event) => event.startsWith('first rewound') && event.includes(` ${shardId} `))).toEqual([]);
    }
    const { progress } = (await rewinding) as Awaited<ReturnType<typeof rewind>>;
    expect(progress.complete).toBe(true);
    await scheduler.advance(20_000);
    expect(first.shards.length).toBe(2);
    expect(second.shards.length).toBe(2);
    // Every record from the target on was handed over again, and the last pass over each key is in order.
    for (const [key, values] of deliveredSince(seen, before.count)) expect(values.slice(-20), key).toEqual(range(21, 40));
    for (const lease of (await storage.listLeases(GROUP)).leases) expect(lease.metadata[REWIND_FIELDS.request]).toBeUndefined();
    await run(scheduler, Promise.all([first.stop(), second.stop()]));
  });

  it('a finished parent rewound with its children: the parent is read again from the target before the children, which start again from their beginning', async () => {
    const { scheduler, source, seen, consumer, produce, toolClock, rewind, storage } = rewindWorld(1);
    // One shard sync only (at the election), so that the finished parent's lease is not cleaned up meanwhile.
    const worker = consumer('w1', { shardSyncIntervalMs: 600_000 });
    const events: string[] = [];
    watch(worker, events);
    produce(['a', 'b', 'c', 'd'], 10);
    await scheduler.advance(1_000);
    const at = toolClock.wallTime();
    await scheduler.advance(1_000);
    produce(['a', 'b', 'c', 'd'], 10, 11);
    const [left, right] = source.split('shard-0000');
    produce(['a', 'b', 'c', 'd'], 10, 21);
    await run(scheduler, worker.start());
    await scheduler.advance(20_000);
    expect((await storage.getLease(GROUP, 'shard-0000'))?.checkpoint).toBe(Checkpoint.SHARD_END);
    for (const values of perKey(seen).values()) expect(values).toEqual(range(1, 30));
    const before = seen.length;
    events.length = 0;

    const { plan, progress } = await rewind({ time: at });
    const to = Checkpoint.atTimestamp(at);
    expect(plan.moves.map((move) => [move.leaseKey, move.how, move.descendantOf])).toEqual([
      ['shard-0000', 'after-descendants', undefined],
      [left, 'request', 'shard-0000'],
      [right, 'request', 'shard-0000'],
    ]);
    expect(progress.complete).toBe(true);
    await scheduler.advance(20_000);

    // Per key: the parent's records from the target on, then the child's, each once, in order.
    for (const [key, values] of deliveredSince(seen, before)) expect(values, key).toEqual(range(11, 30));
    const parentDone = seen.slice(before).findLastIndex((entry) => entry.shardId === 'shard-0000');
    const childStart = seen.slice(before).findIndex((entry) => entry.shardId !== 'shard-0000');
    expect(childStart).toBeGreaterThan(parentDone);
    expect(events.slice(0, 2).sort()).toEqual([`w1 rewound ${left} to ${to}, waits for its parent`, `w1 rewound ${right} to ${to}, waits for its parent`]);
    expect(events.slice(2, 3)).toEqual([`w1 started shard-0000 at ${to}`]);
    await run(scheduler, worker.stop());
  });

  it('a request that cannot be read is reported and not applied, and the shard is read on', async () => {
    const { scheduler, storage, seen, consumer, produce } = rewindWorld(1);
    const worker = consumer('w1');
    const errors: string[] = [];
    worker.on('error', ({ error }) => errors.push(`${(error as { code?: string }).code}: ${error.message}`));
    await run(scheduler, worker.start());
    produce(['a'], 5);
    await scheduler.advance(3_000);
    const lease = (await storage.getLease(GROUP, 'shard-0000'))!;
    await storage.updateLeases(GROUP, [{ leaseKey: 'shard-0000', expectedVersion: lease.version, next: { ...leaseStateOf(lease), metadata: { ...lease.metadata, [REWIND_FIELDS.request]: 'not json' } }, notify: 'rewind' }]);
    await scheduler.advance(1_000);
    produce(['a'], 5, 6);
    await scheduler.advance(3_000);
    expect(errors).toEqual(['ERR_REWIND_UNREADABLE: [core] lease "shard-0000" carries a rewind request that cannot be read ("not json"): it is not applied, and its children wait for it; rewind it again']);
    expect(perKey(seen).get('a')).toEqual(range(1, 10));
    await run(scheduler, worker.stop());
  });

  it('an owner given a request of the rewind its lease records already removes it and reads on from its checkpoint: a rewind moves a lease once', async () => {
    const { scheduler, storage, seen, consumer, produce, rewind } = rewindWorld(1);
    const worker = consumer('w1');
    const events: string[] = [];
    watch(worker, events);
    await run(scheduler, worker.start());
    produce(['a'], 5);
    await scheduler.advance(3_000);
    const { plan } = await rewind('trim-horizon');
    await scheduler.advance(3_000);
    produce(['a'], 5, 6);
    await scheduler.advance(3_000);
    expect(perKey(seen).get('a')).toEqual([...range(1, 5), ...range(1, 10)]);
    // The same rewind's request again, as a tool without the rule wrote it after the owner read on.
    const lease = (await storage.getLease(GROUP, 'shard-0000'))!;
    expect(lease.metadata[REWIND_FIELDS.rewound]).toBe(plan.rewindId);
    const request = JSON.stringify({ id: plan.rewindId, to: Checkpoint.TRIM_HORIZON, requestedAt: plan.requestedAt });
    await storage.updateLeases(GROUP, [{ leaseKey: 'shard-0000', expectedVersion: lease.version, next: { ...leaseStateOf(lease), metadata: { ...lease.metadata, [REWIND_FIELDS.request]: request } }, notify: 'rewind' }]);
    events.length = 0;
    await scheduler.advance(1_000);
    produce(['a'], 5, 11);
    await scheduler.advance(3_000);
    expect(perKey(seen).get('a')).toEqual([...range(1, 5), ...range(1, 15)]);
    const after = (await storage.getLease(GROUP, 'shard-0000'))!;
    expect(rewindRequestOf(after)).toBeUndefined();
    expect(after.checkpoint).not.toBe(Checkpoint.TRIM_HORIZON);
    expect(events.filter((event) => event.includes('rewound'))).toEqual([]);
    await run(scheduler, worker.stop());
  });

  /** A held shard rewound to the stream's start, whose owner's write of the rewind applies but answers with an unknown outcome, and cannot be read back at once. */
  async function rewindWithUnknownOutcome(unsafe?: { rewindUnknownReadsOn: boolean }) {
    const { scheduler, storage, seen, consumer, produce, rewind } = rewindWorld(1);
    let failing = 0;
    const flaky = new Proxy(storage, {
      get: (target, name) => {
        if (name === 'updateLeases') {
          return async (group: string, updates: readonly LeaseUpdate[]) => {
            const results = await target.updateLeases(group, updates);
            // The owner's move applies; its answer is lost, and the next two reads fail.
            if (failing === 0 && updates.some((update) => update.next.metadata[REWIND_FIELDS.rewound] !== undefined && update.next.owner !== null)) {
              failing = 2;
              return results.map(() => ({ status: 'unknown', error: new StorageOutcomeUnknownError('[test] the answer was lost') }));
            }
            return results;
          };
        }
        if (name === 'getLease') {
          return async (group: string, leaseKey: string) => {
            if (failing > 0) {
              failing--;
              throw new StorageUnavailableError('[test] connection refused');
            }
            return target.getLease(group, leaseKey);
          };
        }
        const value: unknown = Reflect.get(target, name, target);
        return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      },
    });
    const worker = consumer('w1', { storage: flaky, retry: { initialDelayMs: 100, maxDelayMs: 1_000 }, unsafe });
    await run(scheduler, worker.start());
    produce(['a'], 10);
    await scheduler.advance(3_000);
    const before = seen.length;
    const { progress } = await rewind('trim-horizon');
    await scheduler.advance(5_000);
    await run(scheduler, worker.stop());
    return { progress, replayed: perKey(seen.slice(before)).get('a') ?? [], lease: (await storage.getLease(GROUP, 'shard-0000'))! };
  }

  it('an owner whose rewind write\'s outcome is unknown reads nothing until it has read the lease back, and then reads from the rewound checkpoint', async () => {
    const { progress, replayed, lease } = await rewindWithUnknownOutcome();
    expect(progress.complete).toBe(true);
    expect(replayed).toEqual(range(1, 10));
    expect(lease.checkpoint).not.toBe(Checkpoint.TRIM_HORIZON);
  });

  it('with the unsafe rewindUnknownReadsOn, the reader reads on from the checkpoint of before and moves the rewound lease past the replay (the switch brings the defect back)', async () => {
    const { replayed } = await rewindWithUnknownOutcome({ rewindUnknownReadsOn: true });
    expect(replayed).toEqual([]);
  });

  it('a handler that kept the context of a batch from before the rewind cannot move the rewound checkpoint forward', async () => {
    const { scheduler, consumer, produce, rewind, storage } = rewindWorld(1);
    let kept: BatchContext | undefined;
    const worker = consumer('w1', {
      processBatch: (_records, context) => {
        kept ??= context;
      },
    });
    await run(scheduler, worker.start());
    produce(['a'], 5);
    await scheduler.advance(3_000);
    const { progress } = await rewind('trim-horizon');
    expect(progress.complete).toBe(true);
    await expect(kept!.checkpoint()).rejects.toBeInstanceOf(AbortedError);
    await scheduler.advance(3_000);
    expect((await storage.getLease(GROUP, 'shard-0000'))?.checkpoint).toBe('5');
    await run(scheduler, worker.stop());
  });
});
