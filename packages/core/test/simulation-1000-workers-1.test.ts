import { describe, expect, it } from 'vitest';
import { simulate } from '../src/testing/index.js';
import { thousandWorkerSeeds } from './support/simulation-groups.js';

// Two files of one seed each, so that the runner puts them on two cores.
thousandWorkerSeeds([1]);

// The checks of a large group can fail: with the coordinator's self-fencing switched off (the harness shows
// the other switches on small groups), a group of 200 on seed 1 lets w51, paused for 13 s at 14.5 s, go on
// handing records of its leases once others took them as expired. A group of 1,000 with the switch costs as
// much as a seed of it, for the same check.
describe('the simulation of a group of 200 workers with an unsafe coordinator', () => {
  it('catches a holder paused past its lease that skips self-fencing and keeps handing records', async () => {
    const result = await simulate({ seed: 1, workers: 200, leases: 2_000, coordinator: { unsafe: { skipSelfFencing: true } } });
    expect(result.violations.map((violation) => violation.guarantee)).toContain('single-owner');
  }, 3_600_000);
});
