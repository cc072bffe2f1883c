/**
 * What is particular to Redis: the script cache, connections dropped mid-command, restarts that lose
 * acknowledged writes, and the key layout. Everything destructive runs on a redis-server of its own.
 */
import { randomUUID } from 'node:crypto';
import {
  CorruptRecordError,
  InvalidConfigError,
  InvalidInputError,
  LeaseholdError,
  MemoryStorage,
  RegressionError,
  type LeaseChange,
  type LeaseRecord,
  type WriteResult,
} from '@leasehold/core';
import { leaderStateOf, leaseStateOf, limits } from '@leasehold/core/adapter';
import { Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisStorage } from '../src/index.js';
import { OwnServer, sendDuringKill, SHARED_HOST, SHARED_PORT } from './servers.js';
import { applied, connect, onSharedServer, withClients } from './support.js';

function renewals(leases: readonly LeaseRecord[], owner: string) {
  return leases.map((lease) => ({
    leaseKey: lease.leaseKey,
    expectedVersion: lease.version,
    next: { ...leaseStateOf(lease), owner, incarnation: `${owner}-1` },
  }));
}

async function createLeases(storage: RedisStorage, group: string, count: number): Promise<void> {
  for (let i = 0; i < count; i++) applied(await storage.createLease({ group, leaseKey: `shardId-${String(i).padStart(6, '0')}`, owner: 'w', epoch: 1 }));
}

describe('RedisStorage options', () => {
  const client = new Redis({ lazyConnect: true });

  for (const [label, keyPrefix] of [
    ['a space', 'lease hold:'],
    ['an opening brace', 'lease{hold:'],
    ['a closing brace', 'lease}hold:'],
    ['a newline', 'leasehold\n'],
    ['a quote', 'lease"hold'],
  ] as const) {
    it(`a key prefix with ${label} is refused, naming the prefix`, () => {
      expect(() => new RedisStorage({ client, keyPrefix })).toThrow(InvalidConfigError);
      expect(() => new RedisStorage({ client, keyPrefix })).toThrow(
        `[storage-redis] key prefix ${JSON.stringify(keyPrefix)} may only contain letters, digits and . _ : / - (at most 128 characters)`,
      );
    });
  }

  it('a key prefix over 128 characters is refused', () => {
    expect(() => new RedisStorage({ client, keyPrefix: 'p'.repeat(129) })).toThrow(InvalidConfigError);
  });

  it('an option it does not take is refused with an InvalidConfigError naming it, and what it takes', () => {
    expect(() => new RedisStorage({ client, prefix: 'app:' } as never)).toThrow(InvalidConfigError);
    expect(() => new RedisStorage({ client, prefix: 'app:' } as never)).toThrow('[storage-redis] RedisStorage has no option "prefix"; it takes client, keyPrefix, listPageSize, maxBatchSize');
    expect(() => new RedisStorage({ client, keyprefix: 'app:' } as never)).toThrow('[storage-redis] RedisStorage has no option "keyprefix"; did you mean keyPrefix?');
  });

  it('a missing client and a non-positive page or batch size are refused, naming the value', () => {
    expect(() => new RedisStorage({ client: undefined as unknown as Redis })).toThrow(
      '[storage-redis] client must be an ioredis Redis or Cluster instance, got undefined',
    );
    expect(() => new RedisStorage({ client, listPageSize: 0 })).toThrow('[storage-redis] listPageSize must be a positive integer, got 0');
    expect(() => new RedisStorage({ client, maxBatchSize: 1.5 })).toThrow('[storage-redis] maxBatchSize must be a positive integer, got 1.5');
  });

  it('a client that drops its commands in flight on a reconnect without failing them is refused: a cut write would never return', () => {
    for (const [options, shown] of [
      [{ autoResendUnfulfilledCommands: false }, '20'],
      [{ autoResendUnfulfilledCommands: false, maxRetriesPerRequest: null }, 'null'],
    ] as const) {
      const dropping = new Redis({ lazyConnect: true, ...options });
      expect(() => new RedisStorage({ client: dropping })).toThrow(InvalidConfigError);
      expect(() => new RedisStorage({ client: dropping })).toThrow(
        `[storage-redis] client has autoResendUnfulfilledCommands false and maxRetriesPerRequest ${shown}: ioredis then drops the commands in flight when a connection drops without answering them, so a write would never return; set maxRetriesPerRequest to 0 too (a cut call then fails, and a write is unknown), or leave autoResendUnfulfilledCommands on`,
      );
    }
    const cluster = new Cluster([{ host: '127.0.0.1', port: 7000 }], { lazyConnect: true, redisOptions: { autoResendUnfulfilledCommands: false } });
    expect(() => new RedisStorage({ client: cluster })).toThrow(InvalidConfigError);
    // Failing them at once instead (maxRetriesPerRequest 0) answers every cut call: the conformance suite cuts such a client.
    expect(() => new RedisStorage({ client: new Redis({ lazyConnect: true, autoResendUnfulfilledCommands: false, maxRetriesPerRequest: 0 }) })).not.toThrow();
  });
});

describe('RedisStorage on the shared server', () => {
  const sharedServer = onSharedServer('leasehold-redis-test');
  const { keyPrefix } = sharedServer;

  it('keeps every key of a group under the prefix and one hash tag that encodes the group, braces included', async () => {
    const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
    const group = `g}{${randomUUID()}`;
    applied(await storage.createLease({ group, leaseKey: 'k' }));
    applied(await storage.createLeader({ group }));
    const tag = `{${Buffer.from(group).toString('base64url')}}`;
    const keys = (await sharedServer.client.keys(`${keyPrefix}${tag}*`)).sort();
    expect(keys).toEqual([`${keyPrefix}${tag}:incarnation`, `${keyPrefix}${tag}:leader`, `${keyPrefix}${tag}:leases`]);
  });

  it('lists a group larger than one page completely when pages are small', async () => {
    const storage = new RedisStorage({ client: sharedServer.client, keyPrefix, listPageSize: 7 });
    const group = `paged-${randomUUID()}`;
    await createLeases(storage, group, 300);
    expect((await storage.listLeases(group)).leases.length).toBe(300);
  });

  it('decodes a listing a slice at a time, the event loop turning between slices: what fell due when the answer came runs before the listing is handed back', async () => {
    const client = sharedServer.client.duplicate();
    try {
      const group = `slices-${randomUUID()}`;
      await createLeases(new RedisStorage({ client, keyPrefix }), group, 2_000);
      // The listing's script, as the adapter defined it on this client: wrapped to note when its answer came.
      const command = Object.keys(client).find((name) => name.startsWith('leasehold_listLeases_'));
      expect(command).toBeDefined();
      const methods = client as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
      const original = methods[command!]!;
      let ranBetween = false;
      methods[command!] = (...args: unknown[]) =>
        original.apply(client, args).then((reply) => {
          // Due as soon as the loop turns: a heartbeat's timer, in a process of many coordinators.
          setImmediate(() => (ranBetween = true));
          return reply;
        });
      const storage = new RedisStorage({ client, keyPrefix, listPageSize: 10_000 });
      const listing = await storage.listLeases(group);
      expect(listing.leases).toHaveLength(2_000);
      expect(ranBetween).toBe(true);
    } finally {
      client.disconnect();
    }
  });

  it('splits a batch larger than maxBatchSize into several calls and still returns one result per update, in order', async () => {
    const storage = new RedisStorage({ client: sharedServer.client, keyPrefix, maxBatchSize: 16 });
    const group = `chunked-${randomUUID()}`;
    await createLeases(storage, group, 50);
    const { leases } = await storage.listLeases(group);
    const results = await storage.updateLeases(group, renewals(leases, 'renewer'));
    expect(results.map((outcome) => (outcome.status === 'applied' ? outcome.record.leaseKey : outcome.status))).toEqual(leases.map((lease) => lease.leaseKey));
  });

  it('a lease whose epoch was written lower, then deleted and created again, gets its highest epoch back, as in MemoryStorage', async () => {
    const group = `epochs-${randomUUID()}`;
    for (const storage of [new RedisStorage({ client: sharedServer.client, keyPrefix }), new MemoryStorage()]) {
      const created = applied(await storage.createLease({ group, leaseKey: 'k', owner: 'a', epoch: 5 }));
      const lowered = applied((await storage.updateLeases(group, [{ leaseKey: 'k', expectedVersion: created.version, next: { ...created, epoch: 2 } }]))[0]);
      expect(lowered.epoch).toBe(2);
      expect((await storage.deleteLease(group, 'k', lowered.version)).status).toBe('applied');
      const again = applied(await storage.createLease({ group, leaseKey: 'k', epoch: 0 }, { recreate: true }));
      expect({ version: again.version, epoch: again.epoch }).toEqual({ version: 3, epoch: 5 });
    }
  });

  const hashOf = (group: string, name: 'leases' | 'tombstones' | 'leader'): string => `${keyPrefix}{${Buffer.from(group).toString('base64url')}}:${name}`;

  it('reports a stored lease that is not in its format as a CorruptRecordError naming the lease', async () => {
    const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
    const group = `corrupt-${randomUUID()}`;
    applied(await storage.createLease({ group, leaseKey: 'k' }));
    await sharedServer.client.hset(hashOf(group, 'leases'), 'k', 'not a lease');
    const error = await storage.getLease(group, 'k').catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(CorruptRecordError);
    expect((error as Error).message).toBe(`[storage-redis] stored lease "k" of group ${JSON.stringify(group)} is corrupt: malformed header in "not a lease"`);
    await sharedServer.client.hset(hashOf(group, 'leases'), 'k', '2:0:token:{"owner":5}');
    await expect(storage.getLease(group, 'k')).rejects.toThrow(
      `[storage-redis] stored lease "k" of group ${JSON.stringify(group)} is corrupt: state lacks format, checkpoint, parentKeys, incarnation, metadata`,
    );
  });

  it('lists hash fields of the wrong shape in corrupt, one error naming each, and every other lease of the group, across pages', async () => {
    const storage = new RedisStorage({ client: sharedServer.client, keyPrefix, listPageSize: 2 });
    const group = `corrupt-list-${randomUUID()}`;
    await createLeases(storage, group, 6);
    await sharedServer.client.hset(hashOf(group, 'leases'), 'shardId-000001', 'not a lease', 'shardId-000004', '7:1:token:[]');
    const { leases, corrupt } = await storage.listLeases(group);
    expect(leases.map((lease) => lease.leaseKey).sort()).toEqual(['shardId-000000', 'shardId-000002', 'shardId-000003', 'shardId-000005']);
    expect(corrupt.every((error) => error instanceof CorruptRecordError)).toBe(true);
    expect(corrupt.map((error) => [error.leaseKey, error.message]).sort()).toEqual([
      ['shardId-000001', `[storage-redis] stored lease "shardId-000001" of group ${JSON.stringify(group)} is corrupt: malformed header in "not a lease"`],
      ['shardId-000004', `[storage-redis] stored lease "shardId-000004" of group ${JSON.stringify(group)} is corrupt: state is not a JSON object ("[]")`],
    ]);
  });

  it('a batch that meets a corrupt lease applies the others and gives unknown with the CorruptRecordError for it alone; create and delete on it are unknown too, and it is never overwritten', async () => {
    const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
    const group = `corrupt-batch-${randomUUID()}`;
    await createLeases(storage, group, 3);
    const { leases } = await storage.listLeases(group);
    await sharedServer.client.hset(hashOf(group, 'leases'), 'shardId-000001', 'not a lease');
    const results = await storage.updateLeases(group, renewals(leases, 'renewer'));
    expect(results.map((outcome) => outcome.status)).toEqual(leases.map((lease) => (lease.leaseKey === 'shardId-000001' ? 'unknown' : 'applied')));
    const failed = results.find((outcome) => outcome.status === 'unknown');
    expect(failed?.status === 'unknown' && failed.error).toBeInstanceOf(CorruptRecordError);
    expect(failed?.status === 'unknown' && failed.error).toMatchObject({ group, leaseKey: 'shardId-000001' });
    expect((await storage.listLeases(group)).leases.map((lease) => lease.owner)).toEqual(['renewer', 'renewer']);
    const created = await storage.createLease({ group, leaseKey: 'shardId-000001' }, { recreate: true });
    expect(created.status === 'unknown' && created.error).toBeInstanceOf(CorruptRecordError);
    const deleted = await storage.deleteLease(group, 'shardId-000001', 1);
    expect(deleted.status === 'unknown' && deleted.error).toBeInstanceOf(CorruptRecordError);
    expect(await sharedServer.client.hget(hashOf(group, 'leases'), 'shardId-000001')).toBe('not a lease');
  });

  it('a corrupt tombstone makes a create of its key unknown, with or without recreate, and leaves it as it was', async () => {
    const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
    const group = `corrupt-tombstone-${randomUUID()}`;
    const lease = applied(await storage.createLease({ group, leaseKey: 'k' }));
    expect((await storage.deleteLease(group, 'k', lease.version)).status).toBe('applied');
    await sharedServer.client.hset(hashOf(group, 'tombstones'), 'k', 'gone');
    for (const recreate of [false, true]) {
      const outcome = await storage.createLease({ group, leaseKey: 'k' }, { recreate });
      expect(outcome.status === 'unknown' && outcome.error.message).toBe(
        `[storage-redis] stored lease "k" of group ${JSON.stringify(group)} is corrupt: malformed tombstone "gone"`,
      );
    }
    expect(await sharedServer.client.hget(hashOf(group, 'tombstones'), 'k')).toBe('gone');
    expect(await sharedServer.client.hexists(hashOf(group, 'leases'), 'k')).toBe(0);
  });

  it('getLeases puts a lease that is not in its format, and the malformed tombstone of a deleted one, in corrupt, naming each, and reads every other lease named', async () => {
    const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
    const group = `corrupt-get-leases-${randomUUID()}`;
    await createLeases(storage, group, 3);
    const gone = applied(await storage.createLease({ group, leaseKey: 'gone' }));
    expect((await storage.deleteLease(group, 'gone', gone.version)).status).toBe('applied');
    await sharedServer.client.hset(hashOf(group, 'leases'), 'shardId-000001', 'not a lease');
    await sharedServer.client.hset(hashOf(group, 'tombstones'), 'gone', 'gone');
    const { leases, corrupt } = await storage.getLeases(group, ['shardId-000000', 'shardId-000001', 'gone', 'shardId-000002', 'never', 'gone']);
    expect(leases.map((lease) => lease.leaseKey).sort()).toEqual(['shardId-000000', 'shardId-000002']);
    expect(corrupt.every((error) => error instanceof CorruptRecordError)).toBe(true);
    expect(corrupt.map((error) => [error.leaseKey, error.message]).sort()).toEqual([
      ['gone', `[storage-redis] stored lease "gone" of group ${JSON.stringify(group)} is corrupt: malformed tombstone "gone"`],
      ['shardId-000001', `[storage-redis] stored lease "shardId-000001" of group ${JSON.stringify(group)} is corrupt: malformed header in "not a lease"`],
    ]);
    expect(await sharedServer.client.hget(hashOf(group, 'leases'), 'shardId-000001')).toBe('not a lease');
  });

  it('a corrupt leader record is an error naming the group on read, and unknown for a write that meets it', async () => {
    const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
    const group = `corrupt-leader-${randomUUID()}`;
    const leader = applied(await storage.createLeader({ group, holder: 'w', term: 1 }));
    await sharedServer.client.set(hashOf(group, 'leader'), '5:token:{"holder":"w"}');
    await expect(storage.getLeader(group)).rejects.toThrow(
      `[storage-redis] stored leader record of group ${JSON.stringify(group)} is corrupt: state lacks format, term, metadata`,
    );
    for (const outcome of [await storage.updateLeader(group, leader.version, leaderStateOf(leader)), await storage.createLeader({ group })]) {
      expect(outcome.status === 'unknown' && outcome.error).toBeInstanceOf(CorruptRecordError);
    }
  });

  it('keeps format 2 and fields core does not name through create, batched update, get, list, conflicts and a recreate', async () => {
    const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
    const group = `later-${randomUUID()}`;
    const later = { format: 2, shardRange: { start: '0', end: '9'.repeat(39) }, tags: ['a', 1.5, true, null, { deep: [] }] };
    const created = applied(await storage.createLease({ group, leaseKey: 'one', owner: 'a', epoch: 3, ...later }));
    expect(created).toEqual({ ...leaseStateOf({ owner: 'a', epoch: 3, ...later }), group, leaseKey: 'one', version: 1 });
    expect(await storage.getLease(group, 'one')).toEqual(created);
    const two = applied(await storage.createLease({ group, leaseKey: 'two' }));
    const [one, taken] = (
      await storage.updateLeases(group, [
        { leaseKey: 'one', expectedVersion: created.version, next: { ...leaseStateOf(created), checkpoint: '7' } },
        { leaseKey: 'two', expectedVersion: two.version, next: { ...leaseStateOf(two), ...later } },
      ])
    ).map((outcome) => applied(outcome));
    expect(one).toEqual({ ...created, checkpoint: '7', version: 2 });
    expect(taken).toEqual({ ...two, ...later, version: 2 });
    const { leases, corrupt } = await storage.listLeases(group);
    expect(corrupt).toEqual([]);
    expect(leases.sort((a, b) => a.leaseKey.localeCompare(b.leaseKey))).toEqual([one, taken]);
    expect(await storage.updateLeases(group, [{ leaseKey: 'one', expectedVersion: created.version, next: leaseStateOf(created) }])).toEqual([
      { status: 'conflict', current: one },
    ]);
    expect(await storage.createLease({ group, leaseKey: 'one' })).toEqual({ status: 'conflict', current: one });
    expect((await storage.deleteLease(group, 'one', one!.version)).status).toBe('applied');
    const again = applied(await storage.createLease({ group, leaseKey: 'one', ...later }, { recreate: true }));
    expect(again).toEqual({ ...leaseStateOf({ epoch: 3, ...later }), group, leaseKey: 'one', version: 3 });

    const leader = applied(await storage.createLeader({ group, holder: 'w1', term: 1, ...later }));
    expect(leader).toEqual({ ...leaderStateOf({ holder: 'w1', term: 1, ...later }), group, version: 1 });
    const next = applied(await storage.updateLeader(group, leader.version, { ...leaderStateOf(leader), holder: 'w2', term: 2 }));
    expect(next).toEqual({ ...leader, holder: 'w2', term: 2, version: 2 });
    expect(await storage.getLeader(group)).toEqual(next);
    expect(await storage.updateLeader(group, leader.version, leaderStateOf(leader))).toEqual({ status: 'conflict', current: next });
  });

  it('does not create a deleted key again without recreate: a conflict with no current lease, and the tombstone stays as it was', async () => {
    const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
    const group = `deleted-${randomUUID()}`;
    const lease = applied(await storage.createLease({ group, leaseKey: 'k', owner: 'a', epoch: 4 }));
    expect((await storage.deleteLease(group, 'k', lease.version)).status).toBe('applied');
    const tombstone = await sharedServer.client.hget(hashOf(group, 'tombstones'), 'k');
    expect(tombstone).toMatch(/^1:4:/);
    expect(await storage.createLease({ group, leaseKey: 'k' })).toEqual({ status: 'conflict', current: null });
    expect(await storage.createLease({ group, leaseKey: 'k' }, { recreate: false })).toEqual({ status: 'conflict', current: null });
    expect(await sharedServer.client.hget(hashOf(group, 'tombstones'), 'k')).toBe(tombstone);
    expect(await storage.listLeases(group)).toEqual({ leases: [], corrupt: [] });
    expect(applied(await storage.createLease({ group, leaseKey: 'k' }, { recreate: true }))).toMatchObject({ version: 2, epoch: 4, owner: null });
    expect(applied(await storage.createLease({ group, leaseKey: 'never-had-one' }, { recreate: true })).version).toBe(1);
  });

  it('works through a client with a keyPrefix of its own, change feed included', async () => {
    const prefixed = new Redis({ host: SHARED_HOST, port: SHARED_PORT, keyPrefix: `${keyPrefix}client:` });
    const storage = new RedisStorage({ client: prefixed, keyPrefix: 'inner:' });
    try {
      const group = `prefixed-${randomUUID()}`;
      const heard: LeaseChange[] = [];
      const addressedHeard: LeaseChange[] = [];
      const subscription = await storage.subscribe(group, (change) => heard.push(change));
      const addressed = await storage.subscribe(group, (change) => addressedHeard.push(change), { addressedTo: ['b'] });
      const lease = applied(await storage.createLease({ group, leaseKey: 'k', owner: 'a', epoch: 1 }));
      const handed = applied((await storage.updateLeases(group, [{ leaseKey: 'k', expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner: 'b', epoch: 2 }, notify: 'handed-off' }]))[0]);
      applied((await storage.updateLeases(group, [{ leaseKey: 'k', expectedVersion: handed.version, next: { ...leaseStateOf(handed), owner: null }, notify: 'released' }]))[0]);
      // The client's prefix is for keys alone: channels and patterns, the owners' included, go without it.
      const expected = [
        { group, leaseKey: 'k', kind: 'created' },
        { group, leaseKey: 'k', kind: 'handed-off', owner: 'b' },
        { group, leaseKey: 'k', kind: 'released' },
      ];
      await expect.poll(() => heard, { timeout: 5000 }).toEqual(expected);
      await expect.poll(() => addressedHeard, { timeout: 5000 }).toEqual(expected);
      await subscription.close();
      await addressed.close();
      expect(await sharedServer.client.exists(`${keyPrefix}client:inner:{${Buffer.from(group).toString('base64url')}}:leases`)).toBe(1);
    } finally {
      await storage.close();
      await prefixed.quit();
    }
  });

  describe('the channels of the change feed, and the owner of a handover, between releases', () => {
    /** The parser of the releases before owner notes, as they shipped: `kind:lease key`, any other kind dropped. */
    function parseAsEarlierRelease(message: string): { kind: string; leaseKey: string } | undefined {
      const split = message.indexOf(':');
      if (split < 0) return undefined;
      const kind = message.slice(0, split);
      if (!['released', 'handed-off', 'created', 'rewind'].includes(kind)) return undefined;
      return { kind, leaseKey: message.slice(split + 1) };
    }

    const channelOf = (group: string): string => `${keyPrefix}{${Buffer.from(group).toString('base64url')}}:changes`;
    const ownerChannelOf = (group: string, workerId: string): string => `${channelOf(group)}:to:${workerId}`;
    /** A handover of the lease to `owner`, published as core asks for one. */
    const handOver = async (storage: RedisStorage, lease: LeaseRecord, owner: string | null): Promise<LeaseRecord> =>
      applied((await storage.updateLeases(lease.group, [{ leaseKey: lease.leaseKey, expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner, epoch: lease.epoch + 1 }, notify: 'handed-off' }]))[0]);

    it('a handover that names its owner goes out on that owner\'s channel alone, as the message earlier releases read, and is heard with that owner; every other change on the group\'s channel', async () => {
      const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
      const raw = sharedServer.client.duplicate();
      try {
        const group = `owner-channel-${randomUUID()}`;
        const messages: Array<[string, string]> = [];
        raw.on('message', (channel: string, message: string) => messages.push([channel, message]));
        raw.on('pmessage', (_pattern: string, channel: string, message: string) => messages.push([channel, message]));
        await raw.subscribe(channelOf(group));
        await raw.psubscribe(`${channelOf(group)}:to:*`);
        const heard: LeaseChange[] = [];
        await storage.subscribe(group, (change) => heard.push(change));
        // A key with a colon: the change message ends with the whole key, as before; and an owner with one.
        let lease = applied(await storage.createLease({ group, leaseKey: 'shard:1', owner: 'a', epoch: 1 }));
        lease = await handOver(storage, lease, 'b:1');
        lease = await handOver(storage, lease, null);
        applied((await storage.updateLeases(group, [{ leaseKey: 'shard:1', expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner: null }, notify: 'released' }]))[0]);
        // Two connections each get the messages in order, but neither waits for the other.
        await expect.poll(() => heard.length, { timeout: 5000 }).toBe(4);
        await expect.poll(() => messages.length, { timeout: 5000 }).toBe(4);
        expect(messages).toEqual([
          [channelOf(group), 'created:shard:1'],
          [ownerChannelOf(group, 'b:1'), 'handed-off:shard:1'],
          [channelOf(group), 'handed-off:shard:1'],
          [channelOf(group), 'released:shard:1'],
        ]);
        expect(messages.map(([, message]) => parseAsEarlierRelease(message))).toEqual([
          { kind: 'created', leaseKey: 'shard:1' },
          { kind: 'handed-off', leaseKey: 'shard:1' },
          { kind: 'handed-off', leaseKey: 'shard:1' },
          { kind: 'released', leaseKey: 'shard:1' },
        ]);
        // A handover that left the lease free names nobody: it is for the whole group, heard with no owner.
        expect(heard).toStrictEqual([
          { group, leaseKey: 'shard:1', kind: 'created' },
          { group, leaseKey: 'shard:1', kind: 'handed-off', owner: 'b:1' },
          { group, leaseKey: 'shard:1', kind: 'handed-off' },
          { group, leaseKey: 'shard:1', kind: 'released' },
        ]);
      } finally {
        await raw.quit();
        await storage.close();
      }
    });

    it('a subscription addressed to w1 puts the connection on the group\'s channel and w1\'s alone: a handover to w2 is never sent to it, and each subscription hears each change once', async () => {
      const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
      const admin = sharedServer.client;
      try {
        const group = `addressed-${randomUUID()}`;
        const [all, w1, w2] = [channelOf(group), ownerChannelOf(group, 'w1'), ownerChannelOf(group, 'w2')];
        const subscribed = async (): Promise<number[]> => {
          const reply = (await admin.pubsub('NUMSUB', all, w1, w2)) as Array<string | number>;
          return reply.filter((_, i) => i % 2 === 1).map(Number);
        };
        const toW1: LeaseChange[] = [];
        const addressed = await storage.subscribe(group, (change) => toW1.push(change), { addressedTo: ['w1'] });
        expect(await subscribed()).toEqual([1, 1, 0]);
        expect((await admin.pubsub('CHANNELS', `${channelOf(group)}*`)).sort()).toEqual([all, w1].sort());
        // What PUBLISH answers is the number of connections the server sent the message to: no pattern of
        // this connection's matches w2's channel either.
        expect(await admin.publish(w2, 'handed-off:probe')).toBe(0);
        expect(await admin.publish(w1, 'handed-off:probe')).toBe(1);

        let k1 = applied(await storage.createLease({ group, leaseKey: 'k1', owner: 'a', epoch: 1 }));
        let k2 = applied(await storage.createLease({ group, leaseKey: 'k2', owner: 'a', epoch: 1 }));
        k1 = await handOver(storage, k1, 'w1');
        k2 = await handOver(storage, k2, 'w2');
        applied((await storage.updateLeases(group, [{ leaseKey: 'k2', expectedVersion: k2.version, next: { ...leaseStateOf(k2), owner: null }, notify: 'released' }]))[0]);
        await expect.poll(() => toW1.length, { timeout: 5000 }).toBe(5);
        expect(toW1).toStrictEqual([
          { group, leaseKey: 'probe', kind: 'handed-off', owner: 'w1' },
          { group, leaseKey: 'k1', kind: 'created' },
          { group, leaseKey: 'k2', kind: 'created' },
          { group, leaseKey: 'k1', kind: 'handed-off', owner: 'w1' },
          { group, leaseKey: 'k2', kind: 'released' },
        ]);

        // A subscription of every change on the same client adds the pattern: the connection is now sent
        // every handover, w1's twice (on w1's channel and through the pattern), yet each subscription is
        // handed only what it asked for, once.
        const everything: LeaseChange[] = [];
        const unaddressed = await storage.subscribe(group, (change) => everything.push(change));
        // One connection, on the group's channel once for both subscriptions.
        expect(await subscribed()).toEqual([1, 1, 0]);
        expect(await admin.publish(w2, 'handed-off:probe')).toBe(1);
        await handOver(storage, k1, 'w2');
        k2 = await handOver(storage, (await storage.getLease(group, 'k2')) as LeaseRecord, 'w1');
        applied((await storage.updateLeases(group, [{ leaseKey: 'k2', expectedVersion: k2.version, next: { ...leaseStateOf(k2), owner: null }, notify: 'released' }]))[0]);
        await expect.poll(() => everything.length, { timeout: 5000 }).toBe(4);
        await expect.poll(() => toW1.length, { timeout: 5000 }).toBe(7);
        expect(everything).toStrictEqual([
          { group, leaseKey: 'probe', kind: 'handed-off', owner: 'w2' },
          { group, leaseKey: 'k1', kind: 'handed-off', owner: 'w2' },
          { group, leaseKey: 'k2', kind: 'handed-off', owner: 'w1' },
          { group, leaseKey: 'k2', kind: 'released' },
        ]);
        expect(toW1.slice(5)).toStrictEqual([
          { group, leaseKey: 'k2', kind: 'handed-off', owner: 'w1' },
          { group, leaseKey: 'k2', kind: 'released' },
        ]);

        // Closing one leaves what the other uses: the connection stays on the group's channel until both are closed.
        await addressed.close();
        await expect.poll(subscribed, { timeout: 5000 }).toEqual([1, 0, 0]);
        expect(await admin.publish(w2, 'handed-off:probe')).toBe(1);
        await unaddressed.close();
        await expect.poll(subscribed, { timeout: 5000 }).toEqual([0, 0, 0]);
        expect(await admin.publish(w2, 'handed-off:probe')).toBe(0);
      } finally {
        await storage.close();
      }
    });

    it('worker ids with glob characters, braces or the channel separator are owners like any other: an owner\'s channel is subscribed to literally, and the pattern gives each handover its whole owner', async () => {
      const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
      try {
        const group = `odd-owners-${randomUUID()}`;
        const owners = ['w*', 'w?', '[w]', 'w\\', '{w}', 'w:to:x', 'x'];
        const everything: LeaseChange[] = [];
        const toGlobs: LeaseChange[] = [];
        await storage.subscribe(group, (change) => everything.push(change));
        await storage.subscribe(group, (change) => toGlobs.push(change), { addressedTo: ['w*', '[w]', 'w:to:x'] });
        for (const [i, owner] of owners.entries()) {
          const lease = applied(await storage.createLease({ group, leaseKey: `k${i}`, owner: 'a', epoch: 1 }));
          await handOver(storage, lease, owner);
        }
        const handovers = (heard: LeaseChange[]): Array<[string, unknown]> => heard.filter((change) => change.kind === 'handed-off').map((change) => [change.leaseKey, change.owner]);
        await expect.poll(() => handovers(everything).length, { timeout: 5000 }).toBe(owners.length);
        expect(handovers(everything)).toEqual(owners.map((owner, i) => [`k${i}`, owner]));
        // A lease created after the last handover: once it is heard, every message sent before it has been.
        applied(await storage.createLease({ group, leaseKey: 'marker' }));
        await expect.poll(() => toGlobs.some((change) => change.leaseKey === 'marker'), { timeout: 5000 }).toBe(true);
        expect(handovers(toGlobs)).toEqual([['k0', 'w*'], ['k2', '[w]'], ['k5', 'w:to:x']]);
      } finally {
        await storage.close();
      }
    });

    it('a handover an earlier release published on the group\'s channel, after a note naming its owner, is heard with that owner, and only by the subscriptions that asked for that owner\'s handovers', async () => {
      const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
      try {
        const group = `earlier-note-${randomUUID()}`;
        const everything: LeaseChange[] = [];
        const toB: LeaseChange[] = [];
        const toC: LeaseChange[] = [];
        await storage.subscribe(group, (change) => everything.push(change));
        await storage.subscribe(group, (change) => toB.push(change), { addressedTo: ['b'] });
        await storage.subscribe(group, (change) => toC.push(change), { addressedTo: ['c'] });
        // As an earlier release published a handover to b, then a release, on the group's channel.
        await sharedServer.client.publish(channelOf(group), 'owner:b\0handed-off:k');
        await sharedServer.client.publish(channelOf(group), 'handed-off:k');
        await sharedServer.client.publish(channelOf(group), 'released:k');
        const handedToB = { group, leaseKey: 'k', kind: 'handed-off', owner: 'b' };
        const released = { group, leaseKey: 'k', kind: 'released' };
        await expect.poll(() => [everything.length, toB.length, toC.length], { timeout: 5000 }).toEqual([2, 2, 1]);
        expect(everything).toStrictEqual([handedToB, released]);
        expect(toB).toStrictEqual([handedToB, released]);
        expect(toC).toStrictEqual([released]);
      } finally {
        await storage.close();
      }
    });

    it('a change message of an earlier release, with no note just before it naming it, is heard with no owner, by every subscription', async () => {
      const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
      try {
        const group = `no-note-${randomUUID()}`;
        const heard: LeaseChange[] = [];
        const addressedHeard: LeaseChange[] = [];
        await storage.subscribe(group, (change) => heard.push(change));
        await storage.subscribe(group, (change) => addressedHeard.push(change), { addressedTo: ['y'] });
        // As an earlier release publishes a handover; then a note for another lease, and a change it does not name.
        await sharedServer.client.publish(channelOf(group), 'handed-off:k');
        await sharedServer.client.publish(channelOf(group), 'owner:x\0handed-off:other');
        await sharedServer.client.publish(channelOf(group), 'handed-off:k2');
        const expected = [
          { group, leaseKey: 'k', kind: 'handed-off' },
          { group, leaseKey: 'k2', kind: 'handed-off' },
        ];
        await expect.poll(() => heard.length, { timeout: 5000 }).toBe(2);
        await expect.poll(() => addressedHeard.length, { timeout: 5000 }).toBe(2);
        expect(heard).toStrictEqual(expected);
        expect(addressedHeard).toStrictEqual(expected);
      } finally {
        await storage.close();
      }
    });

    it('a subscription refuses options that are not valid with an InvalidInputError naming them, and subscribes to nothing', async () => {
      const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
      try {
        const group = `bad-options-${randomUUID()}`;
        await expect(storage.subscribe(group, () => undefined, { addressedTo: ['w1', ''] })).rejects.toThrow(InvalidInputError);
        await expect(storage.subscribe(group, () => undefined, { addressedTo: 'w1' as unknown as string[] })).rejects.toThrow(/w1/);
        const many = Array.from({ length: limits.maxWatchedMembers + 1 }, (_, i) => `w${i}`);
        await expect(storage.subscribe(group, () => undefined, { addressedTo: many })).rejects.toThrow(/17/);
        expect(await sharedServer.client.pubsub('CHANNELS', `${channelOf(group)}*`)).toEqual([]);
      } finally {
        await storage.close();
      }
    });
  });

  it('close() ends its own pub/sub connection and leaves the caller\'s client open', async () => {
    const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
    const group = `closing-${randomUUID()}`;
    const channel = `${keyPrefix}{${Buffer.from(group).toString('base64url')}}:changes`;
    await storage.subscribe(group, () => undefined);
    expect(await sharedServer.client.pubsub('NUMSUB', channel)).toEqual([channel, 1]);
    await storage.close();
    await expect.poll(() => sharedServer.client.pubsub('NUMSUB', channel), { timeout: 5000 }).toEqual([channel, 0]);
    expect(await sharedServer.client.ping()).toBe('PONG');
  });
});

describe('RedisStorage on a redis-server of its own', () => {
  let server: OwnServer;

  beforeAll(async () => {
    server = await OwnServer.start();
  });

  afterAll(async () => {
    await server.stop();
  });

  it('SCRIPT FLUSH in the middle of a run: the scripts reload and every operation succeeds', async () => {
    await withClients(server.port, 2, async (client, admin) => {
      const storage = new RedisStorage({ client });
      const group = `flush-${randomUUID()}`;
      await createLeases(storage, group, 20);
      for (let round = 0; round < 20; round++) {
        if (round % 3 === 0) await admin.script('FLUSH');
        const { leases } = await storage.listLeases(group);
        const results = await storage.updateLeases(group, renewals(leases, `round-${round}`));
        expect(results.every((outcome) => outcome.status === 'applied')).toBe(true);
        const leader = (await storage.getLeader(group)) ?? applied(await storage.createLeader({ group }));
        applied(await storage.updateLeader(group, leader.version, leaderStateOf({ holder: `round-${round}`, term: round + 1 })));
      }
      expect((await storage.listLeases(group)).leases.every((lease) => lease.owner === 'round-19' && lease.version === 21)).toBe(true);
    });
  });

  it('the connection killed mid-run (CLIENT KILL): each write is applied, unknown or typed, never a false conflict, and the next call works', async () => {
    await withClients(server.port, 3, async (client, admin, killer) => {
      const storage = new RedisStorage({ client });
      const group = `killed-${randomUUID()}`;
      await createLeases(storage, group, 5);
      const seen = { applied: 0, unknown: 0, thrown: 0 };
      for (let round = 0; round < 12; round++) {
        const { leases: before } = await storage.listLeases(group);
        const pending = sendDuringKill(admin, killer, () => storage.updateLeases(group, renewals(before, `round-${round}`)), round % 3);
        let results: WriteResult<LeaseRecord>[];
        try {
          results = await pending;
        } catch (error) {
          // Only typed errors may escape; a write that fails is expected to come back as unknown instead.
          expect(error).toBeInstanceOf(LeaseholdError);
          seen.thrown++;
          continue;
        }
        const stored = new Map((await storage.listLeases(group)).leases.map((lease) => [lease.leaseKey, lease]));
        results.forEach((outcome, i) => {
          const key = before[i]!.leaseKey;
          // Nobody else writes this group, so a conflict could only be the client's resend of an applied
          // write, which the write token must recognise.
          expect(outcome.status).not.toBe('conflict');
          if (outcome.status === 'applied') {
            seen.applied++;
            expect(stored.get(key)).toEqual(outcome.record);
          } else if (outcome.status === 'unknown') {
            seen.unknown++;
            expect(outcome.error.message).toMatch(/^\[storage-redis\] the outcome of updating 5 leases of group .* is unknown: /);
          }
        });
      }
      expect(seen.applied + seen.unknown + seen.thrown * 5).toBe(12 * 5);
      // Recovery: the next calls work as if nothing happened.
      const { leases } = await storage.listLeases(group);
      expect((await storage.updateLeases(group, renewals(leases, 'after'))).every((outcome) => outcome.status === 'applied')).toBe(true);
      expect(applied(await storage.createLeader({ group, holder: 'after' })).holder).toBe('after');
    });
  });

  it('a write resent by the client after its reply was lost is recognised as applied, for every kind of write', async () => {
    await withClients(server.port, 3, async (client, admin, killer) => {
      const storage = new RedisStorage({ client });
      const group = `resent-${randomUUID()}`;
      for (let round = 0; round < 4; round++) {
        const leaseKey = `k${round}`;
        const created = applied(await sendDuringKill(admin, killer, () => storage.createLease({ group, leaseKey, owner: 'a', epoch: 1 })));
        const [renewed] = await sendDuringKill(admin, killer, () => storage.updateLeases(group, renewals([created], 'a')));
        expect(applied(renewed).version).toBe(created.version + 1);
        expect((await sendDuringKill(admin, killer, () => storage.deleteLease(group, leaseKey, created.version + 1))).status).toBe('applied');
        expect(await storage.getLease(group, leaseKey)).toBeNull();
      }
      const leader = applied(await sendDuringKill(admin, killer, () => storage.createLeader({ group, holder: 'a', term: 1 })));
      const next = applied(await sendDuringKill(admin, killer, () => storage.updateLeader(group, leader.version, { ...leaderStateOf(leader), holder: 'b', term: 2 })));
      expect(await storage.getLeader(group)).toEqual(next);
    });
  });

  it('a connection that cannot come back turns writes into unknown results and reads into StorageUnavailableError', async () => {
    const client = new Redis({ host: '127.0.0.1', port: server.port, retryStrategy: () => null, maxRetriesPerRequest: 0 });
    client.on('error', () => undefined);
    const admin = connect(server.port);
    try {
      const storage = new RedisStorage({ client });
      const group = `gone-${randomUUID()}`;
      const lease = applied(await storage.createLease({ group, leaseKey: 'k' }));
      await admin.call('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
      await expect.poll(() => client.status, { timeout: 5000 }).toBe('end');
      const [outcome] = await storage.updateLeases(group, renewals([lease], 'w'));
      expect(outcome?.status).toBe('unknown');
      expect(outcome?.status === 'unknown' && outcome.error.code).toBe('ERR_STORAGE_OUTCOME_UNKNOWN');
      await expect(storage.getLease(group, 'k')).rejects.toThrow(
        `[storage-redis] could not read lease "k" of group ${JSON.stringify(group)}: Connection is closed.`,
      );
    } finally {
      client.disconnect();
      admin.disconnect();
    }
  });

  it('a restart that lost every write is reported as a RegressionError, and the group stays refused', async () => {
    await withClients(server.port, 1, async (client) => {
      const storage = new RedisStorage({ client });
      const group = `restart-${randomUUID()}`;
      await createLeases(storage, group, 3);
      applied(await storage.createLeader({ group, holder: 'w', term: 4 }));
      await storage.listLeases(group);
      await server.restart({ fromSnapshot: false });
      const error = await storage.listLeases(group).catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(RegressionError);
      expect((error as Error).message).toMatch(
        new RegExp(`^\\[storage-redis\\] group ${JSON.stringify(group)} was reset: its incarnation marker was "[0-9a-f-]+" and it is gone; Redis lost acknowledged writes`),
      );
      // Every later call on the group is refused, even one that would recreate what was lost.
      await expect(storage.createLease({ group, leaseKey: 'shardId-000000' })).rejects.toBe(error);
      await expect(storage.getLeader(group)).rejects.toBe(error);
      // A group this storage never saw is unaffected.
      applied(await storage.createLease({ group: `${group}-other`, leaseKey: 'k' }));
    });
  });

  it('a restart from an older snapshot is reported: the version that went back, and the lease that vanished', async () => {
    await withClients(server.port, 1, async (client) => {
      const storage = new RedisStorage({ client });
      const group = `snapshot-${randomUUID()}`;
      let lease = applied(await storage.createLease({ group, leaseKey: 'kept', owner: 'a', epoch: 1 }));
      await client.save();
      for (let i = 0; i < 3; i++) lease = applied((await storage.updateLeases(group, renewals([lease], 'a')))[0]);
      applied(await storage.createLease({ group, leaseKey: 'added-after-the-snapshot' }));
      const leader = applied(await storage.createLeader({ group, holder: 'a', term: 1 }));
      await server.restart();

      const versionError = await storage.getLease(group, 'kept').catch((caught: unknown) => caught);
      expect(versionError).toBeInstanceOf(RegressionError);
      expect((versionError as Error).message).toBe(
        `[storage-redis] lease "kept" of group ${JSON.stringify(group)} went back from version 4 to version 1; Redis lost acknowledged writes (a restart without appendfsync always, or a failover to a replica that lagged)`,
      );

      const fresh = new RedisStorage({ client });
      const other = `snapshot-lists-${randomUUID()}`;
      await createLeases(fresh, other, 2);
      applied(await fresh.createLeader({ group: other, holder: 'a', term: 3 }));
      const { leases: seen } = await fresh.listLeases(other);
      await client.save();
      applied(await fresh.createLease({ group: other, leaseKey: 'lost' }));
      await fresh.listLeases(other);
      applied(await fresh.updateLeader(other, 1, leaderStateOf({ holder: 'b', term: 4 })));
      await server.restart();
      await expect(fresh.listLeases(other)).rejects.toThrow(
        `[storage-redis] lease "lost" of group ${JSON.stringify(other)} was seen at version 1 and is gone without a tombstone`,
      );
      expect(seen).toHaveLength(2);
      expect(leader.version).toBe(1);

      const leaders = new RedisStorage({ client });
      const third = `snapshot-leader-${randomUUID()}`;
      applied(await leaders.createLeader({ group: third, holder: 'a', term: 1 }));
      await client.save();
      applied(await leaders.updateLeader(third, 1, leaderStateOf({ holder: 'b', term: 2 })));
      await server.restart();
      await expect(leaders.getLeader(third)).rejects.toThrow(
        `[storage-redis] leader record of group ${JSON.stringify(third)} went back from version 2 to version 1`,
      );
    });
  });

  it('getLeases finds lost writes as getLease does: a version that went back, or a lease gone without a tombstone, is a RegressionError, and the group is refused', async () => {
    await withClients(server.port, 1, async (client) => {
      const storage = new RedisStorage({ client });
      const group = `get-leases-snapshot-${randomUUID()}`;
      let kept = applied(await storage.createLease({ group, leaseKey: 'kept', owner: 'a', epoch: 1 }));
      const other = applied(await storage.createLease({ group, leaseKey: 'other' }));
      await client.save();
      kept = applied((await storage.updateLeases(group, renewals([kept], 'a')))[0]);
      expect((await storage.getLeases(group, ['kept', 'other', 'never'])).leases.sort((a, b) => a.leaseKey.localeCompare(b.leaseKey))).toEqual([kept, other]);
      await server.restart();
      const versionError = await storage.getLeases(group, ['other', 'kept']).catch((caught: unknown) => caught);
      expect(versionError).toBeInstanceOf(RegressionError);
      expect((versionError as Error).message).toBe(
        `[storage-redis] lease "kept" of group ${JSON.stringify(group)} went back from version 2 to version 1; Redis lost acknowledged writes (a restart without appendfsync always, or a failover to a replica that lagged)`,
      );
      await expect(storage.getLeases(group, ['other'])).rejects.toBe(versionError);
      await expect(storage.getLease(group, 'other')).rejects.toBe(versionError);

      const fresh = new RedisStorage({ client });
      const second = `get-leases-vanished-${randomUUID()}`;
      applied(await fresh.createLease({ group: second, leaseKey: 'saved' }));
      await client.save();
      applied(await fresh.createLease({ group: second, leaseKey: 'lost' }));
      const deleted = applied(await fresh.createLease({ group: second, leaseKey: 'deleted' }));
      expect((await fresh.deleteLease(second, 'deleted', deleted.version)).status).toBe('applied');
      expect((await fresh.getLeases(second, ['saved', 'lost', 'deleted'])).leases.map((lease) => lease.leaseKey).sort()).toEqual(['lost', 'saved']);
      await server.restart();
      await expect(fresh.getLeases(second, ['saved', 'lost'])).rejects.toThrow(
        `[storage-redis] lease "lost" of group ${JSON.stringify(second)} was seen at version 1 and is gone without a tombstone; Redis lost acknowledged writes`,
      );
      await expect(fresh.getLeases(second, [])).rejects.toBeInstanceOf(RegressionError);
    });
  });

  it('a write whose reply shows lost writes is unknown, carrying the RegressionError, and the group is refused from then on', async () => {
    await withClients(server.port, 1, async (client) => {
      const storage = new RedisStorage({ client });
      const group = `write-regression-${randomUUID()}`;
      let lease = applied(await storage.createLease({ group, leaseKey: 'k', owner: 'a', epoch: 1 }));
      const leader = applied(await storage.createLeader({ group, holder: 'a', term: 1 }));
      await client.save();
      lease = applied((await storage.updateLeases(group, renewals([lease], 'a')))[0]);
      await server.restart();
      const [outcome] = await storage.updateLeases(group, renewals([lease], 'a'));
      expect(outcome?.status).toBe('unknown');
      const error = outcome?.status === 'unknown' ? outcome.error : undefined;
      expect(error).toBeInstanceOf(RegressionError);
      expect(error?.message).toBe(
        `[storage-redis] lease "k" of group ${JSON.stringify(group)} went back from version 2 to version 1; Redis lost acknowledged writes (a restart without appendfsync always, or a failover to a replica that lagged)`,
      );
      await expect(storage.updateLeader(group, leader.version, leaderStateOf({ holder: 'b', term: 2 }))).rejects.toBe(error);

      const other = `write-reset-${randomUUID()}`;
      const fresh = new RedisStorage({ client });
      const created = applied(await fresh.createLease({ group: other, leaseKey: 'k' }));
      await server.restart({ fromSnapshot: false });
      const deleted = await fresh.deleteLease(other, 'k', created.version);
      expect(deleted.status === 'unknown' && deleted.error).toBeInstanceOf(RegressionError);
    });
  });

  it('a lease deleted through another client and listed afterwards is not mistaken for a loss', async () => {
    await withClients(server.port, 1, async (client) => {
      const watcher = new RedisStorage({ client });
      const deleter = new RedisStorage({ client });
      const group = `deleted-${randomUUID()}`;
      await createLeases(watcher, group, 3);
      const [first] = (await watcher.listLeases(group)).leases;
      expect((await deleter.deleteLease(group, first!.leaseKey, first!.version)).status).toBe('applied');
      expect((await watcher.listLeases(group)).leases.length).toBe(2);
      expect(await watcher.getLease(group, first!.leaseKey)).toBeNull();
      expect(await watcher.createLease({ group, leaseKey: first!.leaseKey })).toEqual({ status: 'conflict', current: null });
      const again = applied(await watcher.createLease({ group, leaseKey: first!.leaseKey }, { recreate: true }));
      expect(again.version).toBe(first!.version + 1);
      expect(again.epoch).toBe(first!.epoch);
    });
  });
});
