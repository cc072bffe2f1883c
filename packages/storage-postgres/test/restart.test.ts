import { StorageOutcomeUnknownError, StorageUnavailableError, type LeaseRecord } from '@leasehold/core';
import { leaseStateOf } from '@leasehold/core/adapter';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresStorage } from '../src/index.js';
import { startCluster, type Cluster } from './cluster.js';
import { waitFor } from './support.js';

// Destructive: this file stops and restarts a cluster of its own, never the shared server.
let cluster: Cluster;
beforeAll(async () => {
  cluster = await startCluster();
}, 120_000);
afterAll(async () => {
  await cluster?.destroy();
});

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe.each(['immediate', 'fast'] as const)('PostgresStorage across a server stop in %s mode', (mode) => {
  it('reports unknown or typed errors for operations in flight, works again on the next call, and loses no acknowledged write', async () => {
    const pool = new pg.Pool({ host: '127.0.0.1', port: cluster.port, user: 'postgres', database: 'postgres', max: 8, connectionTimeoutMillis: 2000 });
    pool.on('error', () => undefined);
    const adapter = new PostgresStorage({ pool });
    try {
      await adapter.migrate();

      const group = `stop-${mode}`;
      const keys = Array.from({ length: 6 }, (_, i) => `k${i}`);
      // What each lease was before any worker wrote it: a worker whose every write was in flight at the stop,
      // or sent after the restart once another worker's had applied, has no acknowledged write at all.
      const created = new Map<string, LeaseRecord>();
      for (const leaseKey of keys) {
        const outcome = await adapter.createLease({ group, leaseKey, metadata: { count: '0' } });
        if (outcome.status !== 'applied') throw new Error(`lease ${leaseKey} was not created: ${outcome.status}`);
        created.set(leaseKey, outcome.record);
      }

      const acknowledged = new Map<string, LeaseRecord>();
      const outcomes = { applied: 0, conflict: 0, unknown: 0, thrown: 0, appliedAfterRestart: 0 };
      const strays: unknown[] = [];
      let stop = false;
      let restarted = false;

      // Each worker increments its own lease's counter with conditional writes, re-reading when it must.
      const worker = async (leaseKey: string): Promise<void> => {
        let current: LeaseRecord | null = null;
        for (let step = 0; !stop && step < 10_000; step++) {
          try {
            current ??= await adapter.getLease(group, leaseKey);
            if (!current) throw new Error(`lease ${leaseKey} vanished`);
            const count = Number(current.metadata.count) + 1;
            const sentAfterRestart = restarted;
            const [outcome] = await adapter.updateLeases(group, [
              { leaseKey, expectedVersion: current.version, next: { ...leaseStateOf(current), metadata: { count: String(count) } } },
            ]);
            if (outcome?.status === 'applied') {
              outcomes.applied++;
              if (sentAfterRestart) outcomes.appliedAfterRestart++;
              acknowledged.set(leaseKey, outcome.record);
              current = outcome.record;
            } else if (outcome?.status === 'conflict') {
              outcomes.conflict++;
              current = outcome.current;
            } else {
              outcomes.unknown++;
              if (!(outcome?.error instanceof StorageOutcomeUnknownError)) strays.push(outcome?.error);
              current = null;
              await sleep(20);
            }
          } catch (error) {
            outcomes.thrown++;
            if (!(error instanceof StorageUnavailableError)) strays.push(error);
            current = null;
            await sleep(20);
          }
        }
      };

      // Each step waits for what it needs to see, not for a time the machine must keep: on a busy machine the
      // first writes, or the reconnection after the restart, can take longer than any fixed pause.
      const running = Promise.all(keys.map(worker));
      const wroteBeforeCrash = await waitFor(() => outcomes.applied > 0, 30_000);
      await cluster.stop(mode);
      const failedWhileDown = await waitFor(() => outcomes.unknown + outcomes.thrown > 0, 30_000);
      await cluster.start();
      restarted = true;
      const wroteAfterRestart = await waitFor(() => outcomes.appliedAfterRestart > 0, 30_000);
      stop = true;
      await running;

      expect(strays).toEqual([]);
      expect(wroteBeforeCrash).toBe(true);
      expect(failedWhileDown).toBe(true);
      expect(wroteAfterRestart).toBe(true);

      // The very next call works, with no retry.
      const { leases: stored, corrupt } = await adapter.listLeases(group);
      expect(corrupt).toEqual([]);
      expect(stored).toHaveLength(keys.length);
      for (const lease of stored) {
        const acked = acknowledged.get(lease.leaseKey) ?? created.get(lease.leaseKey);
        expect(acked, `lease ${lease.leaseKey} was created`).toBeDefined();
        // Every write adds one to both version and counter, so an unknown write that applied keeps them in step.
        expect(lease.version).toBeGreaterThanOrEqual((acked as LeaseRecord).version);
        expect(Number(lease.metadata.count) - Number((acked as LeaseRecord).metadata.count)).toBe(lease.version - (acked as LeaseRecord).version);
      }
    } finally {
      await adapter.close();
      await pool.end();
    }
  }, 120_000);
});
