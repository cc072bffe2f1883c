/**
 * The roster on Redis: one hash per group, a field per member and one counter field, written one member
 * at a time by a script that touches only that member's field and the counter.
 */
import { randomUUID } from 'node:crypto';
import { CorruptRecordError, RegressionError } from '@leasehold/core';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisStorage } from '../src/index.js';
import { groupKeys } from '../src/keys.js';
import { OwnServer, sendDuringKill, SHARED_PORT } from './servers.js';
import { applied, byWorker, connect, onSharedServer, state, withClients } from './support.js';

describe('RedisStorage roster on the shared server', () => {
  const sharedServer = onSharedServer('leasehold-roster-test');
  const { keyPrefix } = sharedServer;
  const rosterKey = (group: string): string => groupKeys(keyPrefix, group).roster;

  it('keeps the roster in one hash under the group\'s hash tag: a field per member, and the counter under the empty field', async () => {
    const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
    const group = `layout}{${randomUUID()}`;
    for (const workerId of ['a', 'b', '__proto__']) applied(await storage.putMember(group, workerId, null, state(`${workerId}-1`)));
    const tag = `{${Buffer.from(group).toString('base64url')}}`;
    expect(await sharedServer.client.keys(`${keyPrefix}${tag}*`)).toEqual([`${keyPrefix}${tag}:roster`]);
    const raw = await sharedServer.client.call('HGETALL', rosterKey(group)) as string[];
    const fields = new Map<string, string>();
    for (let i = 0; i < raw.length; i += 2) fields.set(raw[i]!, raw[i + 1]!);
    expect([...fields.keys()].sort()).toEqual(['', '__proto__', 'a', 'b']);
    expect(fields.get('')).toBe('3');
    expect(fields.get('b')).toMatch(/^2:[^:]+:\{"format":1,"incarnation":"b-1",/);
    const roster = await storage.getRoster(group);
    expect(roster.corrupt).toEqual([]);
    expect(byWorker(roster.members).map((member) => [member.workerId, member.version])).toEqual([['__proto__', 3], ['a', 1], ['b', 2]]);
    expect(await storage.getRoster(`${group}-nobody`)).toEqual({ group: `${group}-nobody`, members: [], corrupt: [] });
  });

  it('50 members heartbeating at once, each through a client of its own: every write applies, and no version repeats', async () => {
    const group = `heartbeats-${randomUUID()}`;
    const clients = Array.from({ length: 50 }, () => connect(SHARED_PORT));
    try {
      const storages = clients.map((own) => new RedisStorage({ client: own, keyPrefix }));
      const rounds = 10;
      const versions: number[] = [];
      const last = await Promise.all(
        storages.map(async (storage, i) => {
          const workerId = `worker-${i}`;
          let member = applied(await storage.putMember(group, workerId, null, state(`${workerId}-1`)));
          versions.push(member.version);
          for (let round = 0; round < rounds; round++) {
            member = applied(await storage.putMember(group, workerId, member.version, state(`${workerId}-1`, { held: round, changes: round })));
            versions.push(member.version);
          }
          return member;
        }),
      );
      expect(versions.length).toBe(50 * (rounds + 1));
      expect(new Set(versions).size).toBe(versions.length);
      expect(Math.max(...versions)).toBe(versions.length);
      const roster = await storages[0]!.getRoster(group);
      expect(roster.corrupt).toEqual([]);
      expect(byWorker(roster.members)).toEqual(byWorker(last));
    } finally {
      for (const own of clients) own.disconnect();
    }
  });

  it('32 clients joining one worker id at once: exactly one applies, every other gets a conflict carrying the winner', async () => {
    const group = `join-race-${randomUUID()}`;
    const clients = Array.from({ length: 32 }, () => connect(SHARED_PORT));
    try {
      const outcomes = await Promise.all(clients.map((own, i) => new RedisStorage({ client: own, keyPrefix }).putMember(group, 'w', null, state(`w-${i}`))));
      const winners = outcomes.filter((outcome) => outcome.status === 'applied');
      expect(winners).toHaveLength(1);
      const winner = applied(winners[0]);
      for (const outcome of outcomes) {
        if (outcome.status !== 'applied') expect(outcome).toEqual({ status: 'conflict', current: winner });
      }
      expect((await new RedisStorage({ client: sharedServer.client, keyPrefix }).getRoster(group)).members).toEqual([winner]);
    } finally {
      for (const own of clients) own.disconnect();
    }
  });

  it('remove-then-join gives the worker id a version greater than any member of the group ever had', async () => {
    const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
    const group = `rejoin-${randomUUID()}`;
    const a = applied(await storage.putMember(group, 'a', null, state('a-1')));
    let b = applied(await storage.putMember(group, 'b', null, state('b-1')));
    b = applied(await storage.putMember(group, 'b', b.version, state('b-1')));
    expect(await storage.removeMember(group, 'a', a.version)).toEqual({ status: 'applied' });
    expect(await storage.removeMember(group, 'b', b.version)).toEqual({ status: 'applied' });
    expect((await storage.getRoster(group)).members).toEqual([]);
    // The group's counter outlives its last member: the hash stays, with the counter alone.
    expect(await sharedServer.client.hkeys(rosterKey(group))).toEqual(['']);
    expect(await sharedServer.client.hget(rosterKey(group), '')).toMatch(/^3:/);
    const again = applied(await storage.putMember(group, 'a', null, state('a-2')));
    expect(again.version).toBe(4);
    expect(again.version).toBeGreaterThan(b.version);
  });

  it('a conflict carries the member as stored when the write was refused, or none', async () => {
    const first = new RedisStorage({ client: sharedServer.client, keyPrefix });
    const second = new RedisStorage({ client: sharedServer.client, keyPrefix });
    const group = `conflict-${randomUUID()}`;
    const joined = applied(await first.putMember(group, 'w', null, state('w-1')));
    const moved = applied(await second.putMember(group, 'w', joined.version, state('w-1', { status: 'dead', metadata: { why: 'declared dead' } })));
    expect(await first.putMember(group, 'w', joined.version, state('w-1', { held: 3 }))).toEqual({ status: 'conflict', current: moved });
    expect(await first.putMember(group, 'w', null, state('w-2'))).toEqual({ status: 'conflict', current: moved });
    expect(await first.removeMember(group, 'w', joined.version)).toEqual({ status: 'conflict', current: moved });
    expect(await first.putMember(group, 'nobody', 1, state('n-1'))).toEqual({ status: 'conflict', current: null });
    expect(await first.removeMember(group, 'nobody', 1)).toEqual({ status: 'conflict', current: null });
    expect((await first.getRoster(group)).members).toEqual([moved]);
  });

  it('a member value that is not a member is listed in corrupt, naming it, while the others read; writes at another version are unknown and leave it', async () => {
    const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
    const group = `corrupt-${randomUUID()}`;
    const good = applied(await storage.putMember(group, 'good', null, state('g-1')));
    const bad = applied(await storage.putMember(group, 'bad', null, state('b-1')));
    await sharedServer.client.hset(rosterKey(group), 'bad', 'not a member');
    const roster = await storage.getRoster(group);
    expect(roster.members).toEqual([good]);
    expect(roster.corrupt).toHaveLength(1);
    expect(roster.corrupt[0]).toBeInstanceOf(CorruptRecordError);
    expect(roster.corrupt[0]).toMatchObject({ group, workerId: 'bad', leaseKey: undefined });
    expect(roster.corrupt[0]!.message).toBe(`[storage-redis] stored member "bad" of group ${JSON.stringify(group)} is corrupt: malformed header in "not a member"`);
    for (const outcome of [
      await storage.putMember(group, 'bad', bad.version, state('b-1')),
      await storage.putMember(group, 'bad', null, state('b-2')),
      await storage.removeMember(group, 'bad', bad.version),
    ]) {
      expect(outcome.status).toBe('unknown');
      expect(outcome.status === 'unknown' && outcome.error).toMatchObject({ code: 'ERR_CORRUPT_RECORD', workerId: 'bad' });
    }
    expect(await sharedServer.client.hget(rosterKey(group), 'bad')).toBe('not a member');
    // A good member is written as before, beside it.
    applied(await storage.putMember(group, 'good', good.version, state('g-1')));
  });

  it('a corrupt member whose header holds a version is replaced by a write at that version, or removed by a delete at it', async () => {
    const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
    const group = `corrupt-versioned-${randomUUID()}`;
    applied(await storage.putMember(group, 'a', null, state('a-1')));
    applied(await storage.putMember(group, 'b', null, state('b-1')));
    await sharedServer.client.hset(rosterKey(group), 'a', '7:someone:{"format":1}', 'b', '8:someone:[]', '', '8');
    expect((await storage.getRoster(group)).corrupt.map((error) => error.workerId).sort()).toEqual(['a', 'b']);
    expect((await storage.putMember(group, 'a', 6, state('a-1'))).status).toBe('unknown');
    expect(applied(await storage.putMember(group, 'a', 7, state('a-2'))).version).toBe(9);
    expect(await storage.removeMember(group, 'b', 8)).toEqual({ status: 'applied' });
    const roster = await storage.getRoster(group);
    expect(roster.corrupt).toEqual([]);
    expect(roster.members.map((member) => [member.workerId, member.incarnation, member.version])).toEqual([['a', 'a-2', 9]]);
  });

  it('a counter that is not a number: the members still read, and a write is unknown naming the counter', async () => {
    const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
    const group = `bad-counter-${randomUUID()}`;
    const member = applied(await storage.putMember(group, 'a', null, state('a-1')));
    await sharedServer.client.hset(rosterKey(group), '', 'many');
    expect(await storage.getRoster(group)).toEqual({ group, members: [member], corrupt: [] });
    const outcome = await storage.putMember(group, 'a', member.version, state('a-1'));
    expect(outcome.status === 'unknown' && outcome.error.message).toBe(
      `[storage-redis] stored version counter of the roster of group ${JSON.stringify(group)} is corrupt: "many"`,
    );
    expect((await storage.removeMember(group, 'a', member.version)).status).toBe('unknown');
    expect(await sharedServer.client.hget(rosterKey(group), '')).toBe('many');
  });

  it('member writes publish nothing on the change feed', async () => {
    const storage = new RedisStorage({ client: sharedServer.client, keyPrefix });
    const group = `quiet-${randomUUID()}`;
    const heard: unknown[] = [];
    const subscription = await storage.subscribe(group, (change) => heard.push(change));
    try {
      const member = applied(await storage.putMember(group, 'w', null, state('w-1')));
      const next = applied(await storage.putMember(group, 'w', member.version, state('w-1', { status: 'dead' })));
      expect(await storage.removeMember(group, 'w', next.version)).toEqual({ status: 'applied' });
      await storage.createLease({ group, leaseKey: 'k' });
      await expect.poll(() => heard.length, { timeout: 5000 }).toBe(1);
      expect(heard).toEqual([{ group, leaseKey: 'k', kind: 'created' }]);
    } finally {
      await subscription.close();
      await storage.close();
    }
  });
});

describe('RedisStorage roster on a redis-server of its own', () => {
  let server: OwnServer;

  beforeAll(async () => {
    server = await OwnServer.start();
  });

  afterAll(async () => {
    await server.stop();
  });

  async function commandCalls(admin: Redis): Promise<Map<string, number>> {
    const info = await admin.info('commandstats');
    const calls = new Map<string, number>();
    for (const match of info.matchAll(/^cmdstat_([a-z|]+):calls=(\d+)/gm)) calls.set(match[1]!, Number(match[2]));
    return calls;
  }

  it('reading a roster of 100 members is one command on one key; a heartbeat reads and writes one field and the counter', async () => {
    await withClients(server.port, 2, async (client, admin) => {
      const storage = new RedisStorage({ client });
      const group = `cost-${randomUUID()}`;
      const members = await Promise.all(Array.from({ length: 100 }, (_, i) => storage.putMember(group, `worker-${i}`, null, state(`w${i}`)).then(applied)));
      await storage.getRoster(group);
      await admin.config('RESETSTAT');
      const roster = await storage.getRoster(group);
      expect(roster.members).toHaveLength(100);
      const read = await commandCalls(admin);
      expect(Object.fromEntries([...read].filter(([name]) => name !== 'config|resetstat' && name !== 'info'))).toEqual({ evalsha: 1, hgetall: 1 });
      await admin.config('RESETSTAT');
      applied(await storage.putMember(group, 'worker-0', members[0]!.version, state('w0')));
      const write = await commandCalls(admin);
      expect(Object.fromEntries([...write].filter(([name]) => name !== 'config|resetstat' && name !== 'info'))).toEqual({ evalsha: 1, hmget: 1, hset: 1 });
    });
  });

  it('a member write resent by the client after its reply was lost is recognised as applied: join, heartbeat and remove', async () => {
    await withClients(server.port, 3, async (client, admin, killer) => {
      const storage = new RedisStorage({ client });
      const group = `resent-${randomUUID()}`;
      for (let round = 0; round < 4; round++) {
        const workerId = `w${round}`;
        const joined = applied(await sendDuringKill(admin, killer, () => storage.putMember(group, workerId, null, state(`${workerId}-1`))));
        const beat = applied(await sendDuringKill(admin, killer, () => storage.putMember(group, workerId, joined.version, state(`${workerId}-1`, { held: 1 }))));
        expect(beat.version).toBeGreaterThan(joined.version);
        expect((await storage.getRoster(group)).members).toEqual([beat]);
        expect(await sendDuringKill(admin, killer, () => storage.removeMember(group, workerId, beat.version))).toEqual({ status: 'applied' });
        expect((await storage.getRoster(group)).members).toEqual([]);
      }
    });
  });

  it('a restart that lost the roster, or brought back an older one, is a RegressionError: thrown by a read, carried by a write', async () => {
    await withClients(server.port, 1, async (client) => {
      const storage = new RedisStorage({ client });
      const group = `restart-${randomUUID()}`;
      const member = applied(await storage.putMember(group, 'a', null, state('a-1')));
      await client.save();
      applied(await storage.putMember(group, 'a', member.version, state('a-1')));
      applied(await storage.putMember(group, 'b', null, state('b-1')));
      await server.restart();
      const error = await storage.getRoster(group).catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(RegressionError);
      expect((error as Error).message).toBe(
        `[storage-redis] roster of group ${JSON.stringify(group)} went back from member version 3 to member version 1; Redis lost acknowledged writes (a restart without appendfsync always, or a failover to a replica that lagged)`,
      );
      // The group stays refused, leases and leader included.
      await expect(storage.putMember(group, 'a', 1, state('a-1'))).rejects.toBe(error);
      await expect(storage.listLeases(group)).rejects.toBe(error);

      const writer = new RedisStorage({ client });
      const other = `restart-empty-${randomUUID()}`;
      const joined = applied(await writer.putMember(other, 'a', null, state('a-1')));
      await server.restart({ fromSnapshot: false });
      const outcome = await writer.putMember(other, 'a', joined.version, state('a-1'));
      expect(outcome.status).toBe('unknown');
      expect(outcome.status === 'unknown' && outcome.error).toBeInstanceOf(RegressionError);
      expect(outcome.status === 'unknown' && outcome.error.message).toMatch(/^\[storage-redis\] roster of group .* was seen at member version 1 and is gone; /);
      await expect(writer.getRoster(other)).rejects.toBeInstanceOf(RegressionError);
    });
  });
});
