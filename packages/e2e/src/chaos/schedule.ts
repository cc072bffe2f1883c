/**
 * The fault schedule of a chaos run, drawn from a seed with core's `seededRandom`: the same seed, duration
 * and lease duration give the same faults at the same moments, so that a failing run can be replayed.
 * Every kind of fault happens at least once; a longer run repeats them in a fresh order each round.
 */
import { seededRandom, shuffled } from '@leasehold/core/testing';

export const FAULT_KINDS = ['kill', 'pause', 'backend-restart', 'cut-off', 'drop', 'delay', 'split', 'merge'] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

export interface Fault {
  /** Milliseconds after the start of the fault phase. */
  readonly at: number;
  readonly kind: FaultKind;
  /** The worker slot it hits (ignored by backend-wide and stream faults). */
  readonly slot: number;
  /**
   * How long the fault lasts: the pause (SIGSTOP to SIGCONT), the cut-off, drop or delay of the proxy, the
   * time before a killed worker is started again.
   */
  readonly holdMs: number;
  /** The added latency of a `delay` fault. */
  readonly delayMs: number;
}

/** The faults of a run of `durationMs`, one per slot of about 7.5 s and never fewer than every kind once. */
export function faultSchedule(seed: number, durationMs: number, leaseDurationMs: number, slots = 3): Fault[] {
  const random = seededRandom(seed);
  const count = Math.max(FAULT_KINDS.length, Math.floor(durationMs / 7_500));
  const kinds: FaultKind[] = [];
  while (kinds.length < count) kinds.push(...shuffled(FAULT_KINDS, random));
  const slotMs = durationMs / count;
  return kinds.slice(0, count).map((kind, i) => {
    const longerThanLease = Math.round(leaseDurationMs * (1.5 + random.next()));
    const holdMs = kind === 'kill' ? Math.round(300 + random.next() * 1_500) : kind === 'delay' ? Math.round(leaseDurationMs * (0.5 + random.next())) : longerThanLease;
    return {
      at: Math.round(i * slotMs + random.next() * slotMs * 0.3),
      kind,
      slot: Math.floor(random.next() * slots),
      holdMs,
      delayMs: Math.round(100 + random.next() * 400),
    };
  });
}

/** The schedule as printed at the start of a run. */
export function formatSchedule(faults: readonly Fault[]): string {
  return faults
    .map((fault) => {
      const what =
        fault.kind === 'split' || fault.kind === 'merge' || fault.kind === 'backend-restart'
          ? fault.kind
          : fault.kind === 'delay'
            ? `delay +${fault.delayMs} ms for ${fault.holdMs} ms, worker slot ${fault.slot + 1}`
            : fault.kind === 'kill'
              ? `SIGKILL worker slot ${fault.slot + 1}, restart after ${fault.holdMs} ms`
              : `${fault.kind} worker slot ${fault.slot + 1} for ${fault.holdMs} ms`;
      return `  ${(fault.at / 1000).toFixed(1).padStart(6)}s  ${what}`;
    })
    .join('\n');
}
