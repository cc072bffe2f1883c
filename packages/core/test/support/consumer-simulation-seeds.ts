import { describe, expect, it } from 'vitest';
import { simulateConsumers, type ConsumerSimulationConfig, type ConsumerSimulationResult } from '../../src/testing/index.js';

const CHUNK = 50;

/** A seed to run: its number, or its number with the kind of group it must run (when not the one it draws). */
export type ConsumerSeed = number | { seed: number; multiStream?: boolean };

/**
 * Runs consumer simulation seeds `from` to `from + count - 1` in chunks of 50, one test per chunk, and
 * fails a chunk with the violations and the replay command of each failing seed.
 */
export function consumerSimulationSeeds(from: number, count: number, options: Pick<ConsumerSimulationConfig, 'multiStream' | 'rewind'> = {}): void {
  consumerSimulationSeedList(`seeds ${from} to ${from + count - 1}`, Array.from({ length: count }, (_, i) => from + i), options);
}

/**
 * Seeds that once found a bug (by exploration beyond the CI range), kept so that the bug stays fixed:
 * each with what it found, and `multiStream` when it found it in a run of that kind whatever the seed
 * draws (`pnpm sim --consumer --multi-stream` or `--single-stream`).
 */
export const FOUND_SEEDS: ReadonlyArray<{ seed: number; found: string; multiStream?: boolean }> = [
  // Found in a one-stream run; since multi-stream runs came, this seed draws a multi-stream group.
  { seed: 20029, multiStream: false, found: 'a lease that went corrupt, then whose shard was trimmed, stayed held with no reader once repaired' },
  ...[14, 39].map((seed) => ({
    seed,
    multiStream: true,
    found: "the lease of a stream its worker stopped reading, whose release failed, stayed named by that live worker, which would not take it back: nobody could take or delete it",
  })),
  { seed: 11991, multiStream: true, found: 'giving such a lease back failed too, and nothing listed the leases again for it' },
  ...[160, 242].map((seed) => ({
    seed,
    multiStream: true,
    found: "a stream whose listing failed at the group's birth held the other streams back: nobody took anything until it answered",
  })),
  ...[219, 294].map((seed) => ({
    seed,
    multiStream: true,
    found: "a worker that waited for the group's birth went by the stream list it started with, and read a stream removed meanwhile",
  })),
  { seed: 20740, multiStream: true, found: "a group whose birth mark could not be written stayed unborn while its only listed stream's listing failed, though that stream was born" },
  { seed: 22401, multiStream: true, found: "a leader paused in the middle of a stream's first birth created again, over its tombstone, a lease finished and deleted meanwhile" },
  { seed: 20244, found: "a stopping worker's release refused by an operator's rewind request (the version moved, the lease still its own) was taken for a loss, and the lease lapsed" },
  {
    seed: 156412,
    multiStream: true,
    found: "a leader paused in its shard sync judged a lease it learned of from a create's conflict on the roster it read before: a worker that joined meanwhile held it, and the sync applied a rewind request on it directly while it read its child before the parent",
  },
  {
    seed: 157896,
    multiStream: true,
    found: "a stopping worker's leaving heartbeat still carried the asks of its last tick: its giver answered them by handing back the lease the stop had just handed it, after the stop had handed its leases on, and the stop returned with that lease named for it",
  },
];

/** Runs the given seeds in chunks of 50, one test per chunk (see {@link consumerSimulationSeeds}). */
export function consumerSimulationSeedList(
  title: string,
  seeds: readonly ConsumerSeed[],
  options: Pick<ConsumerSimulationConfig, 'exactlyOnce' | 'multiStream' | 'rewind' | 'faults'> = {},
): void {
  const configs = seeds.map((seed): ConsumerSimulationConfig => {
    if (typeof seed === 'number') return { seed, ...options };
    return { ...options, seed: seed.seed, ...(seed.multiStream === undefined ? {} : { multiStream: seed.multiStream }) };
  });
  describe(`the consumer simulation, ${title}`, () => {
    for (let start = 0; start < configs.length; start += CHUNK) {
      const chunk = configs.slice(start, start + CHUNK);
      it(`keeps every guarantee of the consumer runtime on seeds ${chunk[0]?.seed} to ${chunk[chunk.length - 1]?.seed}`, async () => {
        const failures: ConsumerSimulationResult[] = [];
        for (const config of chunk) {
          const result = await simulateConsumers(config);
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
