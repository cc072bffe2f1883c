import { describe, expect, it } from 'vitest';
import { type CoordinatorUnsafe } from '../src/testing/index.js';
import { advanceUntil, cluster, dispose, LEASE_MS, MAX_DRIFT, settled, TAKE_MS } from '../bench/cluster.js';
import { DUE_STEP } from '../src/lease/due-reads.js';

const STEP_MS = DUE_STEP * TAKE_MS;

/**
 * 40 members over 400 leases (the watchers' reads: each member reads its watched few, not the roster).
 * Ten of them crash one after another, a lease duration apart, each just after its heartbeat's write
 * returned (its last write): when a member first declared each dead, counted from the crash.
 */
async function crashesJustAfterHeartbeats(seed: number, unsafe?: CoordinatorUnsafe) {
  const c = await cluster(seed, 40, 400, { startSpreadMs: TAKE_MS / 2, ...(unsafe ? { unsafe } : {}) });
  try {
    await settled(c, 40);
    const declaredAfter: number[] = [];
    for (let victimIndex = 3; victimIndex < 40; victimIndex += 4) {
      const victim = c.workers[victimIndex]!;
      const workerId = victim.coordinator.workerId;
      // Crashed from within the heartbeat's outcome: a step of virtual time would let it write again.
      let killedAt = -1;
      victim.coordinator.once('renewed', () => {
        victim.clock.kill();
        killedAt = c.scheduler.now;
      });
      expect(await advanceUntil(c.scheduler, () => killedAt >= 0, { capMs: LEASE_MS })).not.toBeNull();
      victim.alive = false;
      let declaredAt = -1;
      const onDead = ({ workerId: dead }: { workerId: string }): void => {
        if (dead === workerId && declaredAt < 0) declaredAt = c.scheduler.now;
      };
      for (const worker of c.live()) worker.coordinator.on('member-dead', onDead);
      expect(await advanceUntil(c.scheduler, () => declaredAt >= 0, { capMs: 3 * LEASE_MS })).not.toBeNull();
      for (const worker of c.live()) worker.coordinator.off('member-dead', onDead);
      declaredAfter.push(declaredAt - killedAt);
      // The ring settles on the survivors before the next crash: a member's new watchers first see its
      // writes at their first read of it, and judge it from that sight.
      await c.scheduler.advance(LEASE_MS);
    }
    return declaredAfter;
  } finally {
    dispose(c);
  }
}

/**
 * The latest a declaration can come when the watchers read a member when its heartbeat is due: a lease
 * duration on a watcher's clock (its rate within the drift bound) from a sight at most a step (and a read's
 * latency, at most 20 ms here) after the write, and the declaration's write.
 */
const DUE_BOUND_MS = LEASE_MS * (1 + MAX_DRIFT) + STEP_MS + 3 * 20 + 1;

describe('the watchers read a member when its heartbeat is due', () => {
  it('declares each member crashed just after a heartbeat within a lease duration and a step of that heartbeat, not a take tick', async () => {
    const declaredAfter = await crashesJustAfterHeartbeats(7_200_001);
    expect(declaredAfter).toHaveLength(10);
    for (const after of declaredAfter) {
      expect(after).toBeGreaterThanOrEqual(LEASE_MS * (1 - MAX_DRIFT));
      expect(after).toBeLessThanOrEqual(DUE_BOUND_MS);
    }
  });

  it('with dueReadsSkipped, declares some of them up to a take tick later: the watchers first saw the heartbeat at their next tick', async () => {
    const declaredAfter = await crashesJustAfterHeartbeats(7_200_001, { dueReadsSkipped: true });
    expect(declaredAfter).toHaveLength(10);
    expect(Math.max(...declaredAfter)).toBeGreaterThan(DUE_BOUND_MS);
    for (const after of declaredAfter) expect(after).toBeLessThanOrEqual(LEASE_MS * (1 + MAX_DRIFT) + TAKE_MS * 1.05 + 3 * 20 + 1);
  });
});

/**
 * 40 members over 400 leases, every call answered 1-400 ms later: a read between two ticks (a heartbeat
 * due) is often answered after a tick's read sent later. How many member records the members' views took in
 * older than the one they held, over three minutes of steady state.
 */
async function staleReadsWhenAnswersCrossEachOther(unsafe?: CoordinatorUnsafe) {
  const c = await cluster(7_200_002, 40, 400, { startSpreadMs: TAKE_MS / 2, latencyMs: (random) => 1 + random.next() * 400, ...(unsafe ? { unsafe } : {}) });
  try {
    await settled(c, 40);
    await c.scheduler.advance(3 * 60_000);
    return c.live().reduce((sum, worker) => sum + (worker.coordinator.diagnostics().staleRosterReads ?? 0), 0);
  } finally {
    dispose(c);
  }
}

describe('the reads between two ticks take effect in turn with the ticks\' reads', () => {
  it('never leaves a member older in a view than a read sent earlier left it, however late the answers come', async () => {
    expect(await staleReadsWhenAnswersCrossEachOther()).toBe(0);
  });

  it('with readsOutOfTurn, takes in records older than the view held: a read answered after one sent later', async () => {
    expect(await staleReadsWhenAnswersCrossEachOther({ readsOutOfTurn: true })).toBeGreaterThan(0);
  });
});
