import { expect } from 'vitest';
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
