/**
 * The conformance suite again, on a three-primary Redis Cluster started for this file and stopped
 * after it: every key of a group carries one hash tag, so every script runs on one node unchanged.
 */
import { randomUUID } from 'node:crypto';
import type { Storage } from '@leasehold/core';
import { runConformanceSuite } from '@leasehold/core/testing';
import type { Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisStorage } from '../src/index.js';
import { OwnCluster } from './servers.js';

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
  it('puts every key of a group in one slot, and spreads groups over the primaries', async () => {
    const storage = new RedisStorage({ client });
    const groups = Array.from({ length: 12 }, (_, i) => `cluster-{${i}}-${randomUUID()}`);
    for (const group of groups) {
      await storage.createLease({ group, leaseKey: 'k' });
      await storage.createLeader({ group });
    }
    const slotsByGroup = new Map<string, Set<number>>();
    const nodesUsed = new Set<number>();
    for (const [index, node] of cluster.nodes.entries()) {
      const keys = (await client.nodes('master').find((redis) => redis.options.port === node.port)!.keys('leasehold:*'));
      for (const key of keys) {
        const group = groups.find((name) => key.includes(`{${Buffer.from(name).toString('base64url')}}`));
        if (!group) continue;
        nodesUsed.add(index);
        const slot = (await client.cluster('KEYSLOT', key));
        slotsByGroup.set(group, (slotsByGroup.get(group) ?? new Set()).add(slot));
      }
    }
    expect([...slotsByGroup.keys()].sort()).toEqual([...groups].sort());
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
    timeoutMs: 90_000,
  },
);
