/**
 * The change feed's channels: a table channel for every change but the handovers that name their owner,
 * and 256 owner channels for those, so that a subscription addressed to a few owners LISTENs on, and is
 * sent, only their handovers and their bucket-mates'. Checked on the server itself: which channels the
 * feed's connection LISTENs on (`pg_listening_channels()` on that connection) and which notifications
 * reach it.
 */
import type { LeaseChange, LeaseRecord, LeaseUpdate } from '@leasehold/core';
import { leaseStateOf } from '@leasehold/core/adapter';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { PostgresStorage } from '../src/index.js';
import { OWNER_BUCKETS, ownerBucket } from '../src/owner-buckets.js';
import { tableNames } from '../src/schema.js';
import { applied, freshSchemaName, serverConfig, useMigratedServer, waitFor } from './support.js';

const { server, storage } = useMigratedServer('lh_feed', 6);

/** A pool over `pool` that keeps every client it hands out: the feed's connection is the last one. */
function recordingPool(pool: pg.Pool): { pool: pg.Pool; clients: pg.PoolClient[] } {
  const clients: pg.PoolClient[] = [];
  const recording = Object.create(pool) as pg.Pool;
  recording.connect = (async () => {
    const client = await pool.connect();
    clients.push(client);
    return client;
  }) as pg.Pool['connect'];
  return { pool: recording, clients };
}

/** The channels a connection LISTENs on, asked on that connection (the function answers for its own session). */
async function listeningOn(client: pg.PoolClient): Promise<string[]> {
  const { rows } = await client.query<{ channel: string }>('SELECT pg_listening_channels() AS channel');
  return rows.map((row) => row.channel).sort();
}

/** A storage whose feed takes its connection from a pool of its own, and that connection once it has one. */
function feedStorage(options: Partial<ConstructorParameters<typeof PostgresStorage>[0]> = {}): {
  adapter: PostgresStorage;
  feed: () => pg.PoolClient;
  clients: pg.PoolClient[];
  own: pg.Pool;
  end: () => Promise<void>;
} {
  const own = new pg.Pool({ ...serverConfig, max: 2 });
  own.on('error', () => undefined);
  const { pool, clients } = recordingPool(own);
  const adapter = storage({ listenPool: pool, ...options });
  return {
    adapter,
    clients,
    own,
    feed: () => {
      const client = clients.at(-1);
      if (!client) throw new Error('the feed has taken no connection yet');
      return client;
    },
    end: async () => {
      await adapter.close();
      await own.end();
    },
  };
}

/** A handover of `lease` to `owner`, as core writes it. */
function handOver(lease: LeaseRecord, owner: string): LeaseUpdate {
  return { leaseKey: lease.leaseKey, expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner, epoch: lease.epoch + 1, incarnation: `i-${owner}` }, notify: 'handed-off' };
}

/** `count` owners of the group whose handovers go to `channel` (`same`) or to another channel. */
function ownersOn(adapter: PostgresStorage, group: string, channel: string, same: boolean, count: number): string[] {
  const owners: string[] = [];
  for (let i = 0; owners.length < count; i++) {
    if ((adapter.ownerChannel(group, `o${i}`) === channel) === same) owners.push(`o${i}`);
  }
  return owners;
}

const sorted = (values: Iterable<string>): string[] => [...values].sort();

describe('owner channels', () => {
  it('buckets a handover by group and owner with a hash that never changes: writers and readers of every release must agree on it', () => {
    // Pinned: a change here sends handovers where subscribers of the earlier release do not listen.
    expect(OWNER_BUCKETS).toBe(256);
    expect([ownerBucket('g', 'b'), ownerBucket('g', 'c'), ownerBucket('', ''), ownerBucket('orders', 'worker-1')]).toEqual([208, 201, 91, 222]);
    const counts = new Array<number>(OWNER_BUCKETS).fill(0);
    for (let i = 0; i < 256_000; i++) counts[ownerBucket(`g${i % 7}`, `w${i}`)]! += 1;
    expect(Math.min(...counts)).toBeGreaterThan(850);
    expect(Math.max(...counts)).toBeLessThan(1150);
  });

  it('names every owner channel within 63 bytes and apart from every table channel, hashing a base too long for them', () => {
    const cases: Array<[string, string]> = [
      ['public', 'leasehold_leases'],
      // The table channel fits (59 and 63 bytes) but leaves no room for `:o255`; then both are hashed.
      ['s'.repeat(24), 't'.repeat(24)],
      ['s'.repeat(26), 't'.repeat(26)],
      ['s'.repeat(63), 't'.repeat(63)],
    ];
    const seen = new Set<string>();
    for (const [schema, table] of cases) {
      const names = tableNames(schema, table, 'leaders', 'migrations', 'rosters', 'members');
      expect(names.ownerChannels).toHaveLength(OWNER_BUCKETS);
      expect(new Set(names.ownerChannels).size).toBe(OWNER_BUCKETS);
      for (const channel of [names.channel, ...names.ownerChannels]) {
        expect(Buffer.byteLength(channel)).toBeLessThanOrEqual(63);
        expect(seen.has(channel)).toBe(false);
        seen.add(channel);
      }
      // A separator no identifier has: no table channel is ever an owner channel of another table.
      expect(names.channel).not.toContain(':');
      expect(names.ownerChannels.every((channel, bucket) => channel.endsWith(`:o${bucket}`))).toBe(true);
    }
    const plain = tableNames('public', 'leasehold_leases', 'leaders', 'migrations', 'rosters', 'members');
    expect(plain.ownerChannels[7]).toBe('leasehold.public.leasehold_leases:o7');
    // A table named like another's owner channel still gets a channel of its own.
    expect(tableNames('public', 'leasehold_leases_o7', 'leaders', 'migrations', 'rosters', 'members').channel).not.toBe(plain.ownerChannels[7]);
  });
});

describe('the addressed change feed', () => {
  it("an addressed subscription's connection LISTENs on the table channel and its owners' channels only; one without an address on all; closing one keeps what the others use", async () => {
    const { adapter, feed, own, end } = feedStorage();
    const [g1, g2] = [freshSchemaName('g'), freshSchemaName('g')];
    try {
      const toBC = await adapter.subscribe(g1, () => undefined, { addressedTo: ['b', 'c'] });
      const mine = [adapter.channel, adapter.ownerChannel(g1, 'b'), adapter.ownerChannel(g1, 'c')];
      expect(await listeningOn(feed())).toEqual(sorted(new Set(mine)));
      // A second subscription addressed to b (in another group) and d shares the table channel.
      const toBD = await adapter.subscribe(g2, () => undefined, { addressedTo: ['d', 'b'] });
      const theirs = [adapter.channel, adapter.ownerChannel(g2, 'b'), adapter.ownerChannel(g2, 'd')];
      expect(await listeningOn(feed())).toEqual(sorted(new Set([...mine, ...theirs])));
      // One without an address LISTENs on every channel, once.
      const everyone = await adapter.subscribe(g1, () => undefined);
      const every = await listeningOn(feed());
      expect(every).toHaveLength(1 + OWNER_BUCKETS);
      expect(every).toContain(adapter.channel);
      await everyone.close();
      expect(await listeningOn(feed())).toEqual(sorted(new Set([...mine, ...theirs])));
      await toBC.close();
      expect(await listeningOn(feed())).toEqual(sorted(new Set(theirs)));
      const client = feed();
      await toBD.close();
      // The last one gave the connection back, listening on nothing.
      expect(own.idleCount).toBe(own.totalCount);
      expect(await listeningOn(client)).toEqual([]);
    } finally {
      await end();
    }
  });

  it("an addressed connection is sent the handovers to its owners' channels only, and its subscription hears its own owners' alone, single or batched", async () => {
    const { adapter, feed, end } = feedStorage();
    const writer = storage();
    const group = freshSchemaName('g');
    const bChannel = adapter.ownerChannel(group, 'b');
    const [mate] = ownersOn(adapter, group, bChannel, true, 1) as [string];
    const others = ownersOn(adapter, group, bChannel, false, 20);
    const heard: LeaseChange[] = [];
    const everyone: LeaseChange[] = [];
    const subscription = await adapter.subscribe(group, (change) => heard.push(change), { addressedTo: ['b'] });
    const unaddressed = await writer.subscribe(group, (change) => everyone.push(change));
    const sent: Array<{ channel: string; kind: string; owner: unknown }> = [];
    feed().on('notification', (message) => {
      const payload = JSON.parse(message.payload ?? '{}') as { group?: string; kind: string; owner?: unknown };
      if (payload.group === group) sent.push({ channel: message.channel, kind: payload.kind, owner: payload.owner });
    });
    try {
      const keys = Array.from({ length: 23 }, (_, i) => `k${String(i).padStart(2, '0')}`);
      const leases = await Promise.all(keys.map(async (leaseKey) => applied(await writer.createLease({ group, leaseKey, owner: 'a', epoch: 1 }))));
      // One batch: to b, to b's bucket-mate, to 20 owners of other buckets; then one handover to b alone.
      const batch = await writer.updateLeases(group, [handOver(leases[0]!, 'b'), handOver(leases[1]!, mate), ...others.map((owner, i) => handOver(leases[i + 2]!, owner))]);
      batch.forEach((outcome) => applied(outcome));
      applied((await writer.updateLeases(group, [handOver(leases[22]!, 'b')]))[0]);
      // Notifications arrive in commit order: once this release is heard, everything before it was sent.
      const free = applied(batch[2]);
      applied((await writer.updateLeases(group, [{ leaseKey: free.leaseKey, expectedVersion: free.version, next: { ...leaseStateOf(free), owner: null }, notify: 'released' }]))[0]);
      expect(await waitFor(() => heard.some((change) => change.kind === 'released'))).toBe(true);
      expect(await waitFor(() => everyone.some((change) => change.kind === 'released'))).toBe(true);

      expect(sent.filter((notification) => notification.kind === 'handed-off')).toEqual([
        { channel: bChannel, kind: 'handed-off', owner: 'b' },
        { channel: bChannel, kind: 'handed-off', owner: mate },
        { channel: bChannel, kind: 'handed-off', owner: 'b' },
      ]);
      expect(sent.filter((notification) => notification.channel === adapter.channel)).toHaveLength(23 + 1);
      expect(heard.filter((change) => change.kind === 'handed-off')).toEqual([
        { group, leaseKey: 'k00', kind: 'handed-off', owner: 'b' },
        { group, leaseKey: 'k22', kind: 'handed-off', owner: 'b' },
      ]);
      expect(heard.filter((change) => change.kind === 'created')).toHaveLength(23);
      // A subscription without an address hears every handover.
      expect(everyone.filter((change) => change.kind === 'handed-off').map((change) => change.owner)).toEqual(['b', mate, ...others, 'b']);
    } finally {
      await subscription.close();
      await unaddressed.close();
      await writer.close();
      await end();
    }
  });

  it('a handover published the way an earlier release publishes it, on the table channel, reaches the addressed subscriber whose owner it names, and no other', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const addressed: LeaseChange[] = [];
    const everyone: LeaseChange[] = [];
    const toB = await adapter.subscribe(group, (change) => addressed.push(change), { addressedTo: ['b'] });
    const all = await adapter.subscribe(group, (change) => everyone.push(change));
    try {
      const publish = (payload: object): Promise<unknown> => server.pool().query('SELECT pg_notify($1, $2)', [adapter.channel, JSON.stringify({ group, ...payload })]);
      await publish({ leaseKey: 'k1', kind: 'handed-off', owner: 'b' });
      await publish({ leaseKey: 'k2', kind: 'handed-off', owner: 'x' });
      // A release before payloads named an owner: the owner is unknown, so every subscriber hears it.
      await publish({ leaseKey: 'k3', kind: 'handed-off' });
      await publish({ leaseKey: 'k4', kind: 'handed-off', owner: null });
      await publish({ leaseKey: 'k5', kind: 'created', owner: 'x' });
      expect(await waitFor(() => addressed.length === 4 && everyone.length === 5)).toBe(true);
      expect(addressed).toStrictEqual([
        { group, leaseKey: 'k1', kind: 'handed-off', owner: 'b' },
        { group, leaseKey: 'k3', kind: 'handed-off' },
        { group, leaseKey: 'k4', kind: 'handed-off', owner: null },
        { group, leaseKey: 'k5', kind: 'created', owner: 'x' },
      ]);
      expect(everyone.map((change) => change.leaseKey)).toEqual(['k1', 'k2', 'k3', 'k4', 'k5']);
    } finally {
      await toB.close();
      await all.close();
    }
  });

  it('LISTENs again on every channel in use when its connection is killed, and hears the addressed handovers on the new one', async () => {
    const { adapter, feed, clients, end } = feedStorage();
    const writer = storage();
    const group = freshSchemaName('g');
    const heard: LeaseChange[] = [];
    try {
      const toB = await adapter.subscribe(group, (change) => heard.push(change), { addressedTo: ['b'] });
      const toC = await adapter.subscribe(group, () => undefined, { addressedTo: ['c'] });
      const before = await listeningOn(feed());
      expect(before).toEqual(sorted(new Set([adapter.channel, adapter.ownerChannel(group, 'b'), adapter.ownerChannel(group, 'c')])));
      const { rows } = await feed().query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
      const killed = feed();
      await server.pool().query('SELECT pg_terminate_backend($1)', [rows[0]?.pid]);
      expect(await waitFor(() => clients.length === 2 && feed() !== killed)).toBe(true);
      expect(await waitFor(async () => (await listeningOn(feed())).length === before.length)).toBe(true);
      expect(await listeningOn(feed())).toEqual(before);
      await toC.close();
      expect(await listeningOn(feed())).toEqual(sorted(new Set([adapter.channel, adapter.ownerChannel(group, 'b')])));
      const lease = applied(await writer.createLease({ group, leaseKey: 'k', owner: 'a', epoch: 1 }));
      applied((await writer.updateLeases(group, [handOver(lease, 'b')]))[0]);
      expect(await waitFor(() => heard.length === 2)).toBe(true);
      expect(heard).toEqual([
        { group, leaseKey: 'k', kind: 'created', owner: 'a' },
        { group, leaseKey: 'k', kind: 'handed-off', owner: 'b' },
      ]);
      await toB.close();
    } finally {
      await writer.close();
      await end();
    }
  });

  it('with schema and table names too long for a readable channel, publishes and hears on the hashed channels', async () => {
    // 63 bytes of schema and a lease table whose primary key name still fits: the channels are hashed.
    const schema = freshSchemaName('lh_long').padEnd(63, 'x');
    const leaseTable = 'l'.repeat(58);
    const adapter = new PostgresStorage({ pool: server.pool(), schema, leaseTable });
    const heard: LeaseChange[] = [];
    try {
      await adapter.migrate();
      expect(adapter.channel).toMatch(/^leasehold\.[0-9a-f]{40}$/);
      expect(adapter.ownerChannel('g', 'b')).toBe(`${adapter.channel}:o${ownerBucket('g', 'b')}`);
      const subscription = await adapter.subscribe('g', (change) => heard.push(change), { addressedTo: ['b'] });
      const lease = applied(await adapter.createLease({ group: 'g', leaseKey: 'k', owner: 'a', epoch: 1 }));
      const [mate] = ownersOn(adapter, 'g', adapter.ownerChannel('g', 'b'), true, 1) as [string];
      const handed = applied((await adapter.updateLeases('g', [handOver(lease, mate)]))[0]);
      applied((await adapter.updateLeases('g', [handOver(handed, 'b')]))[0]);
      expect(await waitFor(() => heard.length === 2)).toBe(true);
      expect(heard).toEqual([
        { group: 'g', leaseKey: 'k', kind: 'created', owner: 'a' },
        { group: 'g', leaseKey: 'k', kind: 'handed-off', owner: 'b' },
      ]);
      await subscription.close();
    } finally {
      await adapter.close();
      await server.pool().query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    }
  });
});
