import { describe, expect, it } from 'vitest';
import { simulate, type SimulationConfig, type SimulationResult } from '../../src/testing/index.js';

/** The violations of a run and the command that replays it, or nothing when the run kept every guarantee. */
export function failures(result: SimulationResult): string[] {
  return result.violations.map((violation) => `seed ${result.seed}: ${violation.guarantee} at ${violation.atMs.toFixed(0)} ms: ${violation.detail}\n  replay: ${result.replay}`);
}

/**
 * Runs one seed of a large group and checks that it kept every guarantee while its faults crashed the
 * leader and a tenth of the group at once (the end of every fault phase does both together).
 */
export async function largeGroupKeepsEveryGuarantee(config: SimulationConfig & { workers: number; leases: number }): Promise<SimulationResult> {
  const result = await simulate(config);
  expect(failures(result)).toEqual([]);
  expect(result.stats.leaderCrashes).toBeGreaterThanOrEqual(1);
  // A tenth of the workers alive at the time crashed at one instant (the leader and the members that observe
  // it first); crashes and stops earlier in the run leave fewer than the group started with, never half.
  expect(result.stats.mostCrashedAtOnce).toBeGreaterThanOrEqual(Math.ceil(config.workers / 20));
  expect(result.leaderAfterMs).toBeGreaterThanOrEqual(0);
  return result;
}

/**
 * The long suite's groups of 1,000 workers, the largest a roster holds (limits.maxMembers), over 1,000
 * leases: every member reads the whole roster each take tick, so a seed costs four to five minutes of CPU,
 * nearly all of it in the coordinators' handling of those reads. Ten seconds of faults (a crash of the
 * leader or of a tenth of the group among them, drawn like any fault) end with the leader and the hundred
 * members that observe it first crashing at once, for good.
 */
export function thousandWorkerSeeds(seeds: readonly number[]): void {
  describe('the simulation of a group of 1,000 workers', () => {
    for (const seed of seeds) {
      it(`keeps every guarantee on seed ${seed} while the leader and a hundred members crash at once`, async () => {
        await largeGroupKeepsEveryGuarantee({ seed, workers: 1_000, leases: 1_000, faultPhaseMs: 10_000 });
      }, 3_600_000);
    }
  });
}
