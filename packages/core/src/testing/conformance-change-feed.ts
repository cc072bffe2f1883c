/**
 * The conformance suite's rules on the change feed (`subscribe()`), the group "change feed".
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { leaderStateOf, leaseStateOf } from '../storage.js';
import type { LeaseChange, LeaseChangeKind, LeaseRecord, LeaseUpdate, Storage, SubscribeOptions } from '../storage.js';
import {
  applied,
  byKey,
  conflict,
  createMany,
  define,
  full,
  heartbeat,
  join,
  listed,
  show,
  type ConformanceTarget,
  type Context,
  type TestApi,
} from './conformance-kit.js';

async function waitUntil(condition: () => boolean, what: string, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) assert.fail(`${what} (waited ${timeoutMs} ms)`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

interface Heard {
  /** The changes heard, without the optional owner, which the rules on kinds and delivery do not judge. */
  readonly changes: LeaseChange[];
  /** The changes heard as the adapter delivered them, with the owner when it gives one. */
  readonly delivered: LeaseChange[];
  close(): Promise<void>;
}

function feedOf(storage: Storage, target: ConformanceTarget, context: Context): NonNullable<Storage['subscribe']> {
  if (typeof storage.subscribe !== 'function') {
    assert.ok(!target.changeFeed, 'the target declares a change feed (changeFeed: true) but its clients have no subscribe()');
    context.notChecked('not checked: the adapter has no subscribe(), so it has no change feed to check');
  }
  return (group, listener, options) => (storage.subscribe as NonNullable<Storage['subscribe']>).call(storage, group, listener, options);
}

async function listen(storage: Storage, group: string, target: ConformanceTarget, context: Context, options?: SubscribeOptions): Promise<Heard> {
  const changes: LeaseChange[] = [];
  const delivered: LeaseChange[] = [];
  const subscription = await feedOf(storage, target, context)(group, (change) => {
    delivered.push(change);
    changes.push({ group: change.group, leaseKey: change.leaseKey, kind: change.kind });
  }, options);
  let closing: Promise<void> | undefined;
  const close = (): Promise<void> => (closing ??= subscription.close());
  context.cleanup(close);
  return { changes, delivered, close };
}

/**
 * Writes a release of a marker lease through `writer` and waits until `heard` has it: changes written
 * before it by the same client have then been delivered too. Returns what was heard before the marker.
 */
async function settle(writer: Storage, group: string, heard: Heard): Promise<LeaseChange[]> {
  const leaseKey = `marker-${randomUUID().slice(0, 8)}`;
  const marker = applied(await writer.createLease({ group, leaseKey, owner: 'm', epoch: 1 }), 'create the marker');
  const [outcome] = await writer.updateLeases(group, [{ leaseKey, expectedVersion: marker.version, next: { ...leaseStateOf(marker), owner: null }, notify: 'released' }]);
  applied(outcome, 'release the marker');
  await waitUntil(() => heard.changes.some((change) => change.leaseKey === leaseKey && change.kind === 'released'), 'the marker release was never delivered');
  return heard.changes.filter((change) => change.leaseKey !== leaseKey);
}

function sortChanges(changes: readonly LeaseChange[]): LeaseChange[] {
  return [...changes].sort((a, b) => `${a.leaseKey} ${a.kind}`.localeCompare(`${b.leaseKey} ${b.kind}`));
}

/**
 * The change feed, checked whenever the adapter has `subscribe()`: a subscriber of a group hears, on any
 * client including the writer's own, every change that applied, with its kind, and nothing else.
 */
export function changeFeedContract(t: TestApi, target: ConformanceTarget): void {
  t.describe(`${target.name}: change feed`, () => {
    define(t, target, 'a release published by one client reaches a subscriber on another client, and no other group', async (context) => {
      const [writer, reader] = (await context.clients(2)) as [Storage, Storage];
      const g = context.group();
      const heard = await listen(reader, g, target, context);
      const elsewhere = await listen(reader, context.group(), target, context);
      const lease = applied(await writer.createLease({ group: g, leaseKey: 'k', owner: 'a', epoch: 1 }), 'create');
      const [outcome] = await writer.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner: null }, notify: 'released' }]);
      applied(outcome, 'release');
      await waitUntil(() => heard.changes.some((change) => change.kind === 'released'), 'the release was never delivered');
      assert.deepEqual(heard.changes.filter((change) => change.kind === 'released'), [{ group: g, leaseKey: 'k', kind: 'released' }]);
      assert.deepEqual(elsewhere.changes, []);
    });

    define(t, target, 'each change reaches subscribers with the kind it was written with: created for a new lease, handed-off, rewind and released', async (context) => {
      const [writer, reader] = (await context.clients(2)) as [Storage, Storage];
      const g = context.group();
      const heard = await listen(reader, g, target, context);
      const lease = applied(await writer.createLease({ group: g, leaseKey: 'k', owner: 'a', epoch: 1 }), 'create');
      await waitUntil(() => heard.changes.length > 0, 'the creation of a lease was never published (an adapter with a feed publishes created for every lease it creates)');
      let current = lease;
      for (const [kind, step] of [
        ['handed-off', { owner: 'b', epoch: 2, incarnation: 'i-b' }],
        // A rewind request changes only the metadata: the owner hears it and applies it.
        ['rewind', { metadata: { 'leasehold.rewind': '{"id":"r1","to":"TRIM_HORIZON","requestedAt":"2024-01-01T00:00:00.000Z"}' } }],
        ['released', { owner: null, incarnation: null }],
      ] as const) {
        const [outcome] = await writer.updateLeases(g, [{ leaseKey: 'k', expectedVersion: current.version, next: { ...leaseStateOf(current), ...step }, notify: kind }]);
        current = applied(outcome, kind);
      }
      assert.deepEqual(await settle(writer, g, heard), [
        { group: g, leaseKey: 'k', kind: 'created' },
        { group: g, leaseKey: 'k', kind: 'handed-off' },
        { group: g, leaseKey: 'k', kind: 'rewind' },
        { group: g, leaseKey: 'k', kind: 'released' },
      ]);
    });

    define(t, target, 'a change that names an owner names the one its write set: created with the lease\'s owner, handed-off to the new one, rewind to the one kept, released to none, each item of a batch its own', async (context) => {
      const [writer, reader] = (await context.clients(2)) as [Storage, Storage];
      const g = context.group();
      const heard = await listen(reader, g, target, context);
      // What each change must name, by lease and kind (each lease has each kind once).
      const expected = new Map<string, string | null>();
      let current = applied(await writer.createLease({ group: g, leaseKey: 'k', owner: 'a', epoch: 1 }), 'create');
      expected.set('k created', 'a');
      for (const [kind, step, owner] of [
        ['handed-off', { owner: 'b', epoch: 2, incarnation: 'i-b' }, 'b'],
        ['rewind', { metadata: { 'leasehold.rewind': '{"id":"r1","to":"TRIM_HORIZON","requestedAt":"2024-01-01T00:00:00.000Z"}' } }, 'b'],
        ['released', { owner: null, incarnation: null }, null],
      ] as const) {
        const [outcome] = await writer.updateLeases(g, [{ leaseKey: 'k', expectedVersion: current.version, next: { ...leaseStateOf(current), ...step }, notify: kind }]);
        current = applied(outcome, kind);
        expected.set(`k ${kind}`, owner);
      }
      // A batch handing each lease to a different member: each change names its own lease's new owner.
      const keys = ['x', 'y', 'z'];
      await createMany(writer, g, keys, () => ({ owner: 'w', epoch: 1 }));
      const leases = byKey(await listed(writer, g));
      const results = await writer.updateLeases(g, keys.map((leaseKey, i) => {
        const lease = leases.get(leaseKey) as LeaseRecord;
        expected.set(`${leaseKey} created`, 'w');
        expected.set(`${leaseKey} handed-off`, `to-${i}`);
        return { leaseKey, expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner: `to-${i}`, epoch: lease.epoch + 1, incarnation: `i-${i}` }, notify: 'handed-off' as const };
      }));
      results.forEach((outcome, i) => applied(outcome, `handover of ${keys[i]}`));
      await settle(writer, g, heard);
      const named = heard.delivered.filter((change) => !change.leaseKey.startsWith('marker-') && change.owner !== undefined);
      if (named.length === 0) context.notChecked('not checked: the adapter names no owner on the changes it publishes (LeaseChange.owner is optional)');
      for (const change of named) {
        const want = expected.get(`${change.leaseKey} ${change.kind}`);
        assert.ok(want !== undefined, `a change nobody wrote was heard: ${show(change)}`);
        assert.equal(change.owner, want, `the ${change.kind} change of ${change.leaseKey} names owner ${show(change.owner)}, but the write set ${show(want)}`);
      }
    });

    define(t, target, 'only writes that applied are published: a batch mixing applied and refused items publishes the applied ones, a refused create nothing', async (context) => {
      const [writer, reader] = (await context.clients(2)) as [Storage, Storage];
      const g = context.group();
      const keys = ['a', 'b', 'c', 'd', 'e'];
      // Subscribed before every write it judges: a feed may deliver a change written just before a
      // subscription (Redis Cluster forwards publishes between nodes), and that is no fault.
      const heard = await listen(reader, g, target, context);
      await createMany(writer, g, keys, () => ({ owner: 'w', epoch: 1 }));
      const leases = byKey(await listed(writer, g));
      const kinds: LeaseChangeKind[] = ['released', 'handed-off', 'handed-off', 'released', 'handed-off'];
      const results = await writer.updateLeases(g, [
        ...keys.map((leaseKey, i) => {
          const lease = leases.get(leaseKey) as LeaseRecord;
          return { leaseKey, expectedVersion: i % 2 === 0 ? lease.version : lease.version + 7, next: { ...leaseStateOf(lease), owner: null }, notify: kinds[i] };
        }),
        { leaseKey: 'missing', expectedVersion: 1, next: full, notify: 'released' },
      ]);
      assert.deepEqual(results.map((outcome) => outcome.status), ['applied', 'conflict', 'applied', 'conflict', 'applied', 'conflict']);
      conflict(await writer.createLease({ group: g, leaseKey: 'a' }), 'create over a lease');
      assert.deepEqual(sortChanges(await settle(writer, g, heard)), sortChanges([
        ...keys.map((leaseKey) => ({ group: g, leaseKey, kind: 'created' as const })),
        { group: g, leaseKey: 'a', kind: 'released' },
        { group: g, leaseKey: 'c', kind: 'handed-off' },
        { group: g, leaseKey: 'e', kind: 'handed-off' },
      ]));
    });

    define(t, target, 'updates without notify publish nothing: renewals and checkpoints are not changes', async (context) => {
      const [writer, reader] = (await context.clients(2)) as [Storage, Storage];
      const g = context.group();
      const keys = Array.from({ length: 20 }, (_, i) => `k${i}`);
      const heard = await listen(reader, g, target, context);
      await createMany(writer, g, keys, () => ({ owner: 'w', epoch: 1 }));
      for (let round = 0; round < 3; round++) {
        const leases = await listed(writer, g);
        const results = await writer.updateLeases(g, leases.map((lease) => ({ leaseKey: lease.leaseKey, expectedVersion: lease.version, next: { ...leaseStateOf(lease), checkpoint: String(round) } })));
        results.forEach((outcome, i) => applied(outcome, `renewal of ${leases[i]?.leaseKey}`));
      }
      const leader = applied(await writer.createLeader({ group: g, holder: 'w', term: 1 }), 'leader');
      applied(await writer.updateLeader(g, leader.version, leaderStateOf(leader)), 'leader renewal');
      assert.deepEqual(sortChanges(await settle(writer, g, heard)), sortChanges(keys.map((leaseKey) => ({ group: g, leaseKey, kind: 'created' as const }))), 'only the creates are changes');
    });

    define(t, target, 'a subscriber hears the changes its own client writes, as well as another client\'s', async (context) => {
      const [own, other] = (await context.clients(2)) as [Storage, Storage];
      const g = context.group();
      const heard = await listen(own, g, target, context);
      applied(await own.createLease({ group: g, leaseKey: 'mine', owner: 'w', epoch: 1 }), 'create through the subscriber\'s own client');
      applied(await other.createLease({ group: g, leaseKey: 'theirs', owner: 'w', epoch: 1 }), 'create through another client');
      const leases = byKey(await listed(own, g));
      const release = (leaseKey: string): LeaseUpdate => {
        const lease = leases.get(leaseKey) as LeaseRecord;
        return { leaseKey, expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner: null }, notify: 'released' };
      };
      applied((await own.updateLeases(g, [release('mine')]))[0], 'release through the subscriber\'s own client');
      applied((await other.updateLeases(g, [release('theirs')]))[0], 'release through another client');
      await waitUntil(() => heard.changes.length >= 4, `both creates and both releases should be heard, heard ${show(heard.changes)}`);
      assert.deepEqual(sortChanges(await settle(own, g, heard)), sortChanges([
        { group: g, leaseKey: 'mine', kind: 'created' },
        { group: g, leaseKey: 'theirs', kind: 'created' },
        { group: g, leaseKey: 'mine', kind: 'released' },
        { group: g, leaseKey: 'theirs', kind: 'released' },
      ]));
    });

    define(t, target, 'a closed subscription hears nothing more, while another subscription of the group goes on', async (context) => {
      const [writer, reader] = (await context.clients(2)) as [Storage, Storage];
      const g = context.group();
      const closed = await listen(reader, g, target, context);
      const open = await listen(reader, g, target, context);
      const elsewhere = await listen(writer, g, target, context);
      await closed.close();
      const lease = applied(await writer.createLease({ group: g, leaseKey: 'k', owner: 'a', epoch: 1 }), 'create');
      applied((await writer.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner: null }, notify: 'released' }]))[0], 'release');
      await settle(writer, g, open);
      await settle(writer, g, elsewhere);
      assert.deepEqual(closed.changes, [], 'nothing reaches a closed subscription');
      assert.ok(open.changes.some((change) => change.leaseKey === 'k' && change.kind === 'released'), 'the open subscription hears the release');
    });

    define(t, target, 'a subscription addressed to some owners hears every change but handovers to other owners, which an adapter that addresses handovers leaves out', async (context) => {
      const [writer, reader] = (await context.clients(2)) as [Storage, Storage];
      const g = context.group();
      const addressed = await listen(reader, g, target, context, { addressedTo: ['b', 'c'] });
      const everyone = await listen(reader, g, target, context);
      const keys = ['k1', 'k2', 'k3', 'k4', 'k5'];
      await createMany(writer, g, keys, () => ({ owner: 'a', epoch: 1 }));
      const leases = byKey(await listed(writer, g));
      const to = (leaseKey: string, owner: string | null, notify: LeaseChangeKind): LeaseUpdate => {
        const lease = leases.get(leaseKey) as LeaseRecord;
        return { leaseKey, expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner, epoch: lease.epoch + 1, incarnation: owner === null ? null : `i-${owner}` }, notify };
      };
      const rewind = leases.get('k5') as LeaseRecord;
      const results = await writer.updateLeases(g, [
        to('k1', 'b', 'handed-off'),
        to('k2', 'c', 'handed-off'),
        to('k3', 'd', 'handed-off'),
        to('k4', null, 'released'),
        { leaseKey: 'k5', expectedVersion: rewind.version, next: { ...leaseStateOf(rewind), metadata: { 'leasehold.rewind': '{"id":"r1","to":"TRIM_HORIZON","requestedAt":"2024-01-01T00:00:00.000Z"}' } }, notify: 'rewind' },
      ]);
      results.forEach((outcome, i) => applied(outcome, `write ${i + 1} of the batch`));
      const all = [
        ...keys.map((leaseKey) => ({ group: g, leaseKey, kind: 'created' as const })),
        { group: g, leaseKey: 'k1', kind: 'handed-off' as const },
        { group: g, leaseKey: 'k2', kind: 'handed-off' as const },
        { group: g, leaseKey: 'k3', kind: 'handed-off' as const },
        { group: g, leaseKey: 'k4', kind: 'released' as const },
        { group: g, leaseKey: 'k5', kind: 'rewind' as const },
      ];
      assert.deepEqual(sortChanges(await settle(writer, g, everyone)), sortChanges(all), 'a subscription without an address hears every change');
      // (Without the marker the settling of the other subscription wrote.)
      const heard = (await settle(writer, g, addressed)).filter((change) => !change.leaseKey.startsWith('marker-'));
      const toOthers = (change: LeaseChange): boolean => change.leaseKey === 'k3' && change.kind === 'handed-off';
      if (target.addressedHandovers) assert.deepEqual(heard.filter(toOthers), [], 'the adapter addresses handovers (addressedHandovers: true), yet a subscription addressed to b and c heard the handover to d');
      assert.deepEqual(sortChanges(heard.filter((change) => !toOthers(change))), sortChanges(all.filter((change) => !toOthers(change))), 'an addressed subscription hears every create, release and rewind, and the handovers to its owners');
    });

    define(t, target, 'subscriptions of one client addressed to different owners each hear their own owners\' handovers, and closing one leaves the others', async (context) => {
      const [writer, reader] = (await context.clients(2)) as [Storage, Storage];
      const g = context.group();
      const toB = await listen(reader, g, target, context, { addressedTo: ['b'] });
      const toC = await listen(reader, g, target, context, { addressedTo: ['c'] });
      const alsoB = await listen(reader, g, target, context, { addressedTo: ['c', 'b'] });
      const keys = ['k1', 'k2', 'k3'];
      await createMany(writer, g, keys, () => ({ owner: 'a', epoch: 1 }));
      let leases = byKey(await listed(writer, g));
      const handOver = async (leaseKey: string, owner: string): Promise<void> => {
        const lease = leases.get(leaseKey) as LeaseRecord;
        applied((await writer.updateLeases(g, [{ leaseKey, expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner, epoch: lease.epoch + 1, incarnation: `i-${owner}` }, notify: 'handed-off' }]))[0], `hand ${leaseKey} to ${owner}`);
      };
      await handOver('k1', 'b');
      await handOver('k2', 'c');
      const handovers = (heard: LeaseChange[]): string[] => heard.filter((change) => change.kind === 'handed-off').map((change) => change.leaseKey).sort();
      const [b, c, both] = [handovers(await settle(writer, g, toB)), handovers(await settle(writer, g, toC)), handovers(await settle(writer, g, alsoB))];
      assert.ok(b.includes('k1') && c.includes('k2') && both.includes('k1') && both.includes('k2'), `each subscription hears its owners' handovers: to b ${show(b)}, to c ${show(c)}, to both ${show(both)}`);
      if (target.addressedHandovers) assert.deepEqual([b, c], [['k1'], ['k2']], 'the adapter addresses handovers (addressedHandovers: true), yet a subscription heard a handover to an owner it did not name');
      await toB.close();
      const before = toB.changes.length;
      leases = byKey(await listed(writer, g));
      await handOver('k3', 'b');
      assert.ok(handovers(await settle(writer, g, alsoB)).includes('k3'), 'closing one subscription addressed to b leaves another addressed to b hearing b\'s handovers');
      assert.equal(toB.changes.length, before, 'nothing reaches a closed addressed subscription');
    });

    define(t, target, 'member writes publish nothing on the change feed: joins, heartbeats and removes are not lease changes', async (context) => {
      const [writer, reader] = (await context.clients(2)) as [Storage, Storage];
      const g = context.group();
      const heard = await listen(reader, g, target, context);
      const own = await listen(writer, g, target, context);
      let member = await join(writer, g, 'w1');
      for (let beat = 0; beat < 3; beat++) member = await heartbeat(writer, member, { held: beat, changes: beat });
      const other = await join(reader, g, 'w2');
      member = await heartbeat(writer, member, { status: 'dead' });
      assert.equal((await writer.removeMember(g, 'w1', member.version)).status, 'applied');
      assert.equal((await reader.removeMember(g, 'w2', other.version)).status, 'applied');
      assert.deepEqual(await settle(writer, g, heard), [], 'a subscriber on another client heard a member write');
      assert.deepEqual((await settle(writer, g, own)).filter((change) => !change.leaseKey.startsWith('marker-')), [], 'a subscriber on the writer\'s client heard a member write');
    });
  });
}
