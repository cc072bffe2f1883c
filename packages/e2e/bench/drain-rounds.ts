/**
 * A drain's figures (run.ts), and their medians over the rounds of BENCH_DRAIN_ROUNDS: one drain's
 * throughput ratio swings too far on a shared machine to compare two builds.
 */

/** Records per second through the consumer, through the plain loop (the mean of its reads before and after), and through the plain loop unpaced. */
export interface DrainResult {
  readonly rate: number;
  readonly plain: number;
  readonly unpaced: number;
  /** CPU ms per 1,000 records: the three workers together over the drain, and the plain loop's process (the mean of its two reads). */
  readonly cpuPer1k: number;
  readonly plainCpuPer1k: number;
  /** Cold start only: the plain loop in a fresh process of its own (bench/plain-worker.ts), read just before and after: records/s and CPU ms per 1,000 records. */
  readonly fresh?: { readonly rate: number; readonly cpuPer1k: number };
  /** The plain loop in three fresh processes, each over its share of the shards as a worker holds them (bench/plain-processes.ts). */
  readonly processes?: { readonly rate: number; readonly cpuPer1k: number };
  /** Cold start only: the workers' CPU ms per 1,000 records, each worker's counted from its own first reader's start (as each plain process's is from its own reads). */
  readonly cpuPer1kFromOwnStarts?: number;
}

// BENCH_DRAIN_ROUNDS=5: each drain (cold and burst) that many times per system, with a row of medians.
export const DRAIN_ROUNDS = Math.max(1, Number(process.env.BENCH_DRAIN_ROUNDS ?? 1));

/**
 * The median of each figure over the rounds that drained (a ratio shown from these medians is the
 * ratio of the medians); the first failure when none did.
 */
export function medianDrain(results: ReadonlyArray<DrainResult | string>): DrainResult | string {
  const done = results.filter((result): result is DrainResult => typeof result !== 'string');
  if (done.length === 0) return results[0] ?? '-';
  const of = (figure: (result: DrainResult) => number | undefined): number => median(done.map(figure).filter((value): value is number => value !== undefined));
  const fresh = done.every((result) => result.fresh !== undefined) ? { rate: of((result) => result.fresh?.rate), cpuPer1k: of((result) => result.fresh?.cpuPer1k) } : undefined;
  const processes = done.every((result) => result.processes !== undefined) ? { rate: of((result) => result.processes?.rate), cpuPer1k: of((result) => result.processes?.cpuPer1k) } : undefined;
  return {
    rate: of((result) => result.rate),
    plain: of((result) => result.plain),
    unpaced: of((result) => result.unpaced),
    cpuPer1k: of((result) => result.cpuPer1k),
    plainCpuPer1k: of((result) => result.plainCpuPer1k),
    ...(fresh === undefined ? {} : { fresh }),
    ...(processes === undefined ? {} : { processes }),
    ...(done.every((result) => result.cpuPer1kFromOwnStarts !== undefined) ? { cpuPer1kFromOwnStarts: of((result) => result.cpuPer1kFromOwnStarts) } : {}),
  };
}

/** The median of `values` (the mean of the middle two for an even count); NaN for none. */
export const median = (values: readonly number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted.length === 0 ? NaN : (sorted[Math.floor((sorted.length - 1) / 2)]! + sorted[Math.ceil((sorted.length - 1) / 2)]!) / 2;
};
