import { describe, expect, it } from 'vitest';
import { simulate } from '../src/testing/index.js';
import { failures } from './support/simulation-groups.js';

// Ten workers over 3,000 leases, 300 each: the crashes and restarts of the fault phase move hundreds of
// leases by handover, and every worker hears each one announced and reads it. On this seed two members
// crash at 10 s and return under new ids, and at 30 s the leader and its first observer crash for good.
// Read one after another, the announced leases held workers' take ticks 15 to 26 s, the two were declared
// dead 13 s after the crash, and 334 of their leases had no holder when the liveness bound ran out.
describe('the simulation of a group that rebalances hundreds of leases', () => {
  it('fails over the leases of the crashed leader within the liveness bound while hundreds of handovers are announced', async () => {
    const result = await simulate({ seed: 3, workers: 10, leases: 3_000 });
    expect(failures(result)).toEqual([]);
    expect(result.stats.handoffs).toBeGreaterThan(500);
    expect(result.stats.leaderCrashes).toBeGreaterThanOrEqual(1);
    expect(result.ownedAfterMs).toBeGreaterThanOrEqual(0);
  }, 600_000);
});
