/**
 * What a watcher reads on Redis instead of the whole roster: a few members by id, one `HMGET` of their
 * fields in the roster hash, and the group's roster digest, a counter in a key of its own under the
 * group's hash tag.
 */
import { randomUUID } from 'node:crypto';
import {
  CorruptRecordError,
  InvalidInputError,
  RegressionError,
  StorageOutcomeUnknownError,
  StorageUnavailableError,
} from '@leasehold/core';
import { limits } from '@leasehold/core/adapter';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisStorage } from '../src/index.js';
import { groupKeys } from '../src/keys.js';
import { corruptMember, OwnServer, SHARED_PORT } from './servers.js';
import { applied, byWorker, connect, onSharedServer, state, withClients } from './support.js';

describe('RedisStorage watchers\' reads on the shared server', () => {
  const sharedServer = onSharedServer('leasehold-watch-test');
  const { keyPrefix } = sharedServer;

  it('getMembers reads exactly the named members, each as getRoster gives it: absent and removed ones are left out, a repeated id is read once', async () => {
    const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
    const group = `members-${randomUUID()}`;
    for (const workerId of ['a', 'b', 'c', 'd']) applied(await storage.putMember(group, workerId, null, state(`${workerId}-1`, { held: 2 })));
    const c = (await storage.getRoster(group)).members.find((member) => member.workerId === 'c')!;
    expect(await storage.removeMember(group, 'c', c.version)).toEqual({ status: 'applied' });
    const roster = await storage.getRoster(group);
    const read = await storage.getMembers(group, ['d', 'c', 'nobody', 'a', 'd', 'a']);
    expect(read.group).toBe(group);
    expect(read.corrupt).toEqual([]);
    expect(byWorker(read.members)).toEqual(byWorker(roster.members.filter((member) => member.workerId === 'a' || member.workerId === 'd')));
    expect(await storage.getMembers(group, [])).toEqual({ group, members: [], corrupt: [] });
    expect(await storage.getMembers(`${group}-nobody`, ['a'])).toEqual({ group: `${group}-nobody`, members: [], corrupt: [] });
  });

  it('a named member that cannot be read back is in corrupt, naming its worker id exactly as getRoster reports it, while the others read', async () => {
    const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
    const group = `corrupt-${randomUUID()}`;
    const good = applied(await storage.putMember(group, 'good', null, state('g-1')));
    applied(await storage.putMember(group, 'bad', null, state('b-1')));
    await corruptMember(sharedServer.client, groupKeys(keyPrefix, group).roster, 'bad');
    const read = await storage.getMembers(group, ['bad', 'good', 'bad']);
    expect(read.members).toEqual([good]);
    expect(read.corrupt).toHaveLength(1);
    expect(read.corrupt[0]).toBeInstanceOf(CorruptRecordError);
    expect(read.corrupt[0]).toMatchObject({ group, workerId: 'bad', leaseKey: undefined });
    const [reported] = (await storage.getRoster(group)).corrupt;
    expect(read.corrupt[0]!.message).toBe(reported!.message);
    expect(read.corrupt[0]!.message).toMatch(/^\[storage-redis\] stored member "bad" of group .* is corrupt: /);
  });

  it('more than limits.maxWatchedMembers worker ids, a bad worker id or a bad group is refused with an InvalidInputError naming it, and nothing is sent', async () => {
    const idle = new Redis({ lazyConnect: true });
    const storage = new RedisStorage({ client: idle, keyPrefix });
    const ids = (count: number): string[] => Array.from({ length: count }, (_, i) => `w${i}`);
    expect(limits.maxWatchedMembers).toBe(16);
    await expect(storage.getMembers('g', ids(17))).rejects.toThrow(InvalidInputError);
    await expect(storage.getMembers('g', ids(17))).rejects.toThrow('[storage-redis] at most 16 worker ids may be read at once, got 17');
    await expect(storage.getMembers('g', ['w', ''])).rejects.toThrow('[storage-redis] worker id must not be empty');
    await expect(storage.getMembers('g', 'w' as unknown as string[])).rejects.toThrow('[storage-redis] worker ids must be an array, got "w"');
    await expect(storage.getMembers('', ['w'])).rejects.toThrow('[storage-redis] group must not be empty');
    await expect(storage.getRosterDigest('')).rejects.toThrow(InvalidInputError);
    await expect(storage.advanceRosterDigest(7 as unknown as string)).rejects.toThrow('[storage-redis] group must be a string, got 7');
    expect(idle.status).toBe('wait');
    // Sixteen, the limit, are read.
    const shared = new RedisStorage({ client: sharedServer.client, keyPrefix });
    expect(await shared.getMembers(`limit-${randomUUID()}`, ids(16))).toMatchObject({ members: [], corrupt: [] });
  });

  it('the digest of a group never advanced is 0; each advance adds one and returns the value it wrote; each group has its own', async () => {
    const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
    const group = `digest-${randomUUID()}`;
    const other = `${group}-other`;
    expect(await storage.getRosterDigest(group)).toBe(0);
    expect([await storage.advanceRosterDigest(group), await storage.advanceRosterDigest(group), await storage.advanceRosterDigest(group)]).toEqual([1, 2, 3]);
    expect(await storage.getRosterDigest(group)).toBe(3);
    expect(await storage.getRosterDigest(other)).toBe(0);
    expect(await storage.advanceRosterDigest(other)).toBe(1);
    expect(await new RedisStorage({ client: sharedServer.client, keyPrefix }).getRosterDigest(group)).toBe(3);
  });

  it('50 advances at once from 10 clients end at 50: each value is returned once, none is lost', async () => {
    const group = `digest-race-${randomUUID()}`;
    const clients = Array.from({ length: 10 }, () => connect(SHARED_PORT));
    try {
      const storages = clients.map((own) => new RedisStorage({ client: own, keyPrefix }));
      const values = await Promise.all(Array.from({ length: 50 }, (_, i) => storages[i % storages.length]!.advanceRosterDigest(group)));
      expect([...values].sort((a, b) => a - b)).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
      expect(await storages[3]!.getRosterDigest(group)).toBe(50);
    } finally {
      for (const own of clients) own.disconnect();
    }
  });

  it('the digest is a key of its own beside the roster, under the group\'s hash tag: getRoster never sees it, and member writes leave it alone', async () => {
    const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
    const group = `layout}{${randomUUID()}`;
    const a = applied(await storage.putMember(group, 'a', null, state('a-1')));
    await storage.advanceRosterDigest(group);
    await storage.advanceRosterDigest(group);
    applied(await storage.putMember(group, 'a', a.version, state('a-1', { held: 1 })));
    const tag = `{${Buffer.from(group).toString('base64url')}}`;
    expect((await sharedServer.client.keys(`${keyPrefix}${tag}*`)).sort()).toEqual([`${keyPrefix}${tag}:roster`, `${keyPrefix}${tag}:roster-digest`, `${keyPrefix}${tag}:roster-moves`]);
    // Each advance's names under the value it wrote; none given, nobody named.
    expect(await sharedServer.client.hgetall(`${keyPrefix}${tag}:roster-moves`)).toEqual({ '1': '[]', '2': '[]' });
    expect(groupKeys(keyPrefix, group).rosterDigest).toBe(`${keyPrefix}${tag}:roster-digest`);
    expect(await sharedServer.client.type(`${keyPrefix}${tag}:roster-digest`)).toBe('string');
    expect(await sharedServer.client.get(`${keyPrefix}${tag}:roster-digest`)).toBe('2');
    expect((await sharedServer.client.hkeys(`${keyPrefix}${tag}:roster`)).sort()).toEqual(['', 'a']);
    expect((await storage.getRoster(group)).members.map((member) => member.workerId)).toEqual(['a']);
    expect(await storage.getRosterDigest(group)).toBe(2);
  });

  it(`keeps the names of the digest's last ${limits.rosterMovesKept} advances, dropping each older one as a new one comes`, async () => {
    const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
    const group = `moves-${randomUUID()}`;
    const total = limits.rosterMovesKept + 44;
    for (let i = 1; i <= total; i++) await storage.advanceRosterDigest(group, [`w${i}`]);
    const moves = groupKeys(keyPrefix, group).rosterMoves;
    expect(await sharedServer.client.hlen(moves)).toBe(limits.rosterMovesKept);
    expect(await sharedServer.client.hget(moves, String(total - limits.rosterMovesKept))).toBeNull();
    expect(await sharedServer.client.hget(moves, String(total))).toBe(JSON.stringify([`w${total}`]));
    expect(await storage.getRosterMoves(group, 0)).toEqual({ digest: total, moved: null });
    expect(await storage.getRosterMoves(group, total - 2)).toEqual({ digest: total, moved: [`w${total - 1}`, `w${total}`] });
  });

  it('reads an advance of an earlier release (an INCR that left no names) or a names entry it cannot read back as naming nobody: the reader reads the whole roster, and advances after it name as before', async () => {
    const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
    const group = `moves-earlier-${randomUUID()}`;
    const keys = groupKeys(keyPrefix, group);
    await storage.advanceRosterDigest(group, ['a']);
    await sharedServer.client.incr(keys.rosterDigest);
    await storage.advanceRosterDigest(group, ['b']);
    expect(await storage.getRosterMoves(group, 0)).toEqual({ digest: 3, moved: null });
    expect(await storage.getRosterMoves(group, 2)).toEqual({ digest: 3, moved: ['b'] });
    for (const garbage of ['not json', '{"a":1}', '[1]', '[""]']) {
      await sharedServer.client.hset(keys.rosterMoves, '3', garbage);
      expect(await storage.getRosterMoves(group, 2), garbage).toEqual({ digest: 3, moved: null });
    }
  });

  it('a digest that is not a number is a CorruptRecordError naming the group, and an advance of it is unknown', async () => {
    const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
    const group = `bad-digest-${randomUUID()}`;
    await sharedServer.client.set(groupKeys(keyPrefix, group).rosterDigest, 'many');
    const error = await storage.getRosterDigest(group).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(CorruptRecordError);
    expect(error).toMatchObject({ group, message: `[storage-redis] stored roster digest of group ${JSON.stringify(group)} is corrupt: "many"` });
    await expect(storage.advanceRosterDigest(group)).rejects.toThrow(StorageOutcomeUnknownError);
    expect(await sharedServer.client.get(groupKeys(keyPrefix, group).rosterDigest)).toBe('many');
    await expect(storage.getRosterMoves(group, 0)).rejects.toThrow(CorruptRecordError);
    expect(await sharedServer.client.exists(groupKeys(keyPrefix, group).rosterMoves)).toBe(0);
  });
});

describe('RedisStorage watchers\' reads on a redis-server of its own', () => {
  let server: OwnServer;

  beforeAll(async () => {
    server = await OwnServer.start();
  });

  afterAll(async () => {
    await server.stop();
  });

  async function commandsOf(admin: Redis, run: () => Promise<unknown>): Promise<Record<string, number>> {
    await admin.config('RESETSTAT');
    await run();
    const info = await admin.info('commandstats');
    const calls: Record<string, number> = {};
    for (const match of info.matchAll(/^cmdstat_([a-z|]+):calls=(\d+)/gm)) {
      if (match[1] !== 'config|resetstat' && match[1] !== 'info') calls[match[1]!] = Number(match[2]);
    }
    return calls;
  }

  it('getMembers of 3 in a roster of 100 is one command reading their fields; a digest read is one GET, an advance one script (INCR, HSET of its names, HDEL of the oldest kept), a read of the moves one script (GET, HMGET of the advances\' names)', async () => {
    await withClients(server.port, 2, async (client, admin) => {
      const storage = new RedisStorage({ client });
      const group = `cost-${randomUUID()}`;
      await Promise.all(Array.from({ length: 100 }, (_, i) => storage.putMember(group, `worker-${i}`, null, state(`w${i}`)).then(applied)));
      const watched = ['worker-7', 'worker-42', 'worker-99'];
      // Once before counting, so that the scripts are loaded and called by EVALSHA alone.
      await storage.getMembers(group, watched);
      await storage.getRosterDigest(group);
      expect(await commandsOf(admin, async () => expect((await storage.getMembers(group, watched)).members).toHaveLength(3))).toEqual({ evalsha: 1, hmget: 1 });
      expect(await commandsOf(admin, () => storage.getRosterDigest(group))).toEqual({ evalsha: 1, get: 1 });
      await storage.advanceRosterDigest(group, ['worker-7']);
      await storage.getRosterMoves(group, 0);
      expect(await commandsOf(admin, () => storage.advanceRosterDigest(group, ['worker-42']))).toEqual({ evalsha: 1, incr: 1, hset: 1 });
      expect(await commandsOf(admin, () => storage.getRosterMoves(group, 0))).toEqual({ evalsha: 1, get: 1, hmget: 1 });
      expect(await commandsOf(admin, () => storage.getRosterMoves(group, 2))).toEqual({ evalsha: 1, get: 1 });
    });
  });

  it('a connection that cannot come back: getMembers and a digest read throw StorageUnavailableError, an advance throws StorageOutcomeUnknownError', async () => {
    const client = new Redis({ host: '127.0.0.1', port: server.port, retryStrategy: () => null, maxRetriesPerRequest: 0 });
    client.on('error', () => undefined);
    const admin = connect(server.port);
    try {
      const storage = new RedisStorage({ client });
      const group = `gone-${randomUUID()}`;
      await storage.advanceRosterDigest(group);
      await admin.call('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
      await expect.poll(() => client.status, { timeout: 5000 }).toBe('end');
      const quoted = JSON.stringify(group);
      await expect(storage.getMembers(group, ['a', 'b'])).rejects.toThrow(StorageUnavailableError);
      await expect(storage.getMembers(group, ['a', 'b'])).rejects.toThrow(`[storage-redis] could not read 2 members of group ${quoted}: Connection is closed.`);
      await expect(storage.getRosterDigest(group)).rejects.toThrow(`[storage-redis] could not read the roster digest of group ${quoted}: Connection is closed.`);
      const error = await storage.advanceRosterDigest(group).catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(StorageOutcomeUnknownError);
      expect((error as Error).message).toBe(`[storage-redis] the outcome of advancing the roster digest of group ${quoted} is unknown: Connection is closed.`);
    } finally {
      client.disconnect();
      admin.disconnect();
    }
  });

  it('a restart that brought back an older digest is a RegressionError, and the group is refused from then on', async () => {
    await withClients(server.port, 1, async (client) => {
      const storage = new RedisStorage({ client });
      const group = `restart-${randomUUID()}`;
      await storage.advanceRosterDigest(group);
      await client.save();
      await storage.advanceRosterDigest(group);
      expect(await storage.getRosterDigest(group)).toBe(2);
      await server.restart();
      const error = await storage.getRosterDigest(group).catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(RegressionError);
      expect((error as Error).message).toBe(
        `[storage-redis] roster digest of group ${JSON.stringify(group)} went back from 2 to 1; Redis lost acknowledged writes (a restart without appendfsync always, or a failover to a replica that lagged)`,
      );
      await expect(storage.advanceRosterDigest(group)).rejects.toBe(error);
      await expect(storage.getMembers(group, ['a'])).rejects.toBe(error);
      // A fresh storage, which never saw the lost value, reads what Redis has.
      expect(await new RedisStorage({ client }).getRosterDigest(group)).toBe(1);
    });
  });
});
