import { describe, expect, it } from 'vitest';
import { simulateConsumers, type ConsumerSimulationResult } from '../../src/testing/index.js';

const CHUNK = 50;

/**
 * Runs consumer simulation seeds `from` to `from + count - 1` in chunks of 50, one test per chunk, and
 * fails a chunk with the violations and the replay command of each failing seed.
 */
export function consumerSimulationSeeds(from: number, count: number): void {
  describe(`the consumer simulation, seeds ${from} to ${from + count - 1}`, () => {
    for (let start = from; start < from + count; start += CHUNK) {
      const end = Math.min(start + CHUNK, from + count);
      it(`keeps every guarantee of the consumer runtime on seeds ${start} to ${end - 1}`, async () => {
        const failures: ConsumerSimulationResult[] = [];
        for (let seed = start; seed < end; seed++) {
          const result = await simulateConsumers({ seed });
          if (result.violations.length > 0) failures.push(result);
        }
        const report = failures.map(
          (result) =>
            `seed ${result.seed}: ${result.violations
              .slice(0, 5)
              .map((violation) => `${violation.guarantee} at ${violation.atMs.toFixed(0)} ms: ${violation.detail}`)
              .join('; ')}\n  replay: ${result.replay}`,
        );
        expect(report).toEqual([]);
      }, 600_000);
    }
  });
}
