import { describe, expect, it } from 'vitest';
import { simulateConsumers, type ConsumerSimulationResult } from '../../src/testing/index.js';

const CHUNK = 50;

/**
 * Runs consumer simulation seeds `from` to `from + count - 1` in chunks of 50, one test per chunk, and
 * fails a chunk with the violations and the replay command of each failing seed.
 */
export function consumerSimulationSeeds(from: number, count: number): void {
  consumerSimulationSeedList(`seeds ${from} to ${from + count - 1}`, Array.from({ length: count }, (_, i) => from + i));
}

/**
 * Seeds that once found a bug (by exploration beyond the CI range), kept so that the bug stays fixed:
 * each with what it found.
 */
export const FOUND_SEEDS: ReadonlyArray<{ seed: number; found: string }> = [
  { seed: 20029, found: 'a lease that went corrupt, then whose shard was trimmed, stayed held with no reader once repaired' },
];

/** Runs the given seeds in chunks of 50, one test per chunk (see {@link consumerSimulationSeeds}). */
export function consumerSimulationSeedList(title: string, seeds: readonly number[], options: { exactlyOnce?: boolean } = {}): void {
  describe(`the consumer simulation, ${title}`, () => {
    for (let start = 0; start < seeds.length; start += CHUNK) {
      const chunk = seeds.slice(start, start + CHUNK);
      it(`keeps every guarantee of the consumer runtime on seeds ${chunk[0]} to ${chunk[chunk.length - 1]}`, async () => {
        const failures: ConsumerSimulationResult[] = [];
        for (const seed of chunk) {
          const result = await simulateConsumers({ seed, ...options });
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
