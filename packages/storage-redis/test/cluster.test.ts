/**
 * The conformance suite again, on a three-primary Redis Cluster started for this file and stopped
 * after it: every key of a group carries one hash tag, so every script runs on one node unchanged.
 */
import { randomUUID } from 'node:crypto';
import { type Storage } from '@leasehold/core';
import { RECORD_FORMAT } from '@leasehold/core/adapter';
import { runConformanceSuite } from '@leasehold/core/testing';
import type { Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisStorage } from '../src/index.js';
import { groupKeys } from '../src/keys.js';
import { corruptMember, OwnCluster } from './servers.js';

let cluster: OwnCluster;
let client: Cluster;

beforeAll(async () => {
  cluster = await OwnCluster.start();
  client = cluster.client();
}, 120_000);

afterAll(async () => {
  await client?.quit();
  await cluster?.stop();
});

describe('RedisStorage on Redis Cluster', () => {
  it('puts every key of a group in one slot, the roster and its digest included, and spreads groups over the primaries', async () => {
    const storage = new RedisStorage({ client });
    const groups = Array.from({ length: 12 }, (_, i) => `cluster-{${i}}-${randomUUID()}`);
    for (const group of groups) {
      await storage.createLease({ group, leaseKey: 'k' });
      await storage.createLeader({ group });
      const joined = await storage.putMember(group, 'w', null, { format: RECORD_FORMAT, incarnation: 'w-1', leaseDurationMs: 10_000, status: 'alive', held: 0, changes: 0, requests: [], metadata: {} });
      expect(joined.status).toBe('applied');
      expect(await storage.advanceRosterDigest(group)).toBe(1);
    }
    const slotsByGroup = new Map<string, Set<number>>();
    const rosters = new Set<string>();
    const digests = new Set<string>();
    const nodesUsed = new Set<number>();
    for (const [index, node] of cluster.nodes.entries()) {
      const keys = (await client.nodes('master').find((redis) => redis.options.port === node.port)!.keys('leasehold:*'));
      for (const key of keys) {
        const group = groups.find((name) => key.includes(`{${Buffer.from(name).toString('base64url')}}`));
        if (!group) continue;
        nodesUsed.add(index);
        if (key.endsWith(':roster')) rosters.add(group);
        if (key.endsWith(':roster-digest')) digests.add(group);
        const slot = (await client.cluster('KEYSLOT', key));
        slotsByGroup.set(group, (slotsByGroup.get(group) ?? new Set()).add(slot));
      }
    }
    expect([...slotsByGroup.keys()].sort()).toEqual([...groups].sort());
    // The roster key is among them, in its group's slot: roster scripts run on one node like the others.
    expect([...rosters].sort()).toEqual([...groups].sort());
    expect([...digests].sort()).toEqual([...groups].sort());
    for (const group of groups) {
      expect((await storage.getRoster(group)).members.map((member) => member.workerId)).toEqual(['w']);
      expect((await storage.getMembers(group, ['w', 'nobody'])).members.map((member) => member.workerId)).toEqual(['w']);
      expect(await storage.getRosterDigest(group)).toBe(1);
    }
    for (const slots of slotsByGroup.values()) expect(slots.size).toBe(1);
    expect(nodesUsed.size).toBeGreaterThan(1);
  });
});

runConformanceSuite(
  { describe, it },
  {
    name: 'RedisStorage on a cluster',
    createStorage: async () => new RedisStorage({ client }),
    closeStorage: async (storage: Storage) => (storage as RedisStorage).close(),
    changeFeed: true,
    addressedHandovers: true,
    corruptMember: (group, workerId) => corruptMember(client, groupKeys('leasehold:', group).roster, workerId),
    timeoutMs: 90_000,
  },
);
