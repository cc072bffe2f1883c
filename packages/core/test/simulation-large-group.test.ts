import { describe, expect, it } from 'vitest';
import { InvalidConfigError } from '../src/errors.js';
import { limits } from '../src/validation.js';
import { simulate } from '../src/testing/index.js';
import { largeGroupKeepsEveryGuarantee } from './support/simulation-groups.js';

// The normal suite's large group: 200 workers, a fifth of the largest (simulation-1000-workers.test.ts runs
// 1,000 in the long suite), in about 15 s of CPU. The checks it runs are the ones every seed runs, and each
// is shown catching a defect: simulation-harness.test.ts on small groups, simulation-1000-workers.test.ts on
// a group of 200 with the coordinator's self-fencing switched off.
describe('the simulation of a group of 200 workers', () => {
  it('keeps every guarantee while the leader and a tenth of the group crash at once', async () => {
    await largeGroupKeepsEveryGuarantee({ seed: 1, workers: 200, leases: 1_000 });
  }, 600_000);

  it(`refuses a group above limits.maxMembers (${limits.maxMembers}), naming the size asked for`, async () => {
    await expect(simulate({ seed: 1, workers: limits.maxMembers + 1, leases: 10 })).rejects.toThrow(InvalidConfigError);
    await expect(simulate({ seed: 1, workers: limits.maxMembers + 1, leases: 10 })).rejects.toThrow(/workers .*got 1001/);
    await expect(simulate({ seed: 1, workers: 4, leases: 0 })).rejects.toThrow(/leases .*got 0/);
  });
});
