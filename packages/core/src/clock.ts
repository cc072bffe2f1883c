/**
 * Time and randomness, injected into every algorithm so that the simulation can drive them: core never
 * calls `Date.now()`, `setTimeout` or `Math.random()` directly.
 */
import { AbortedError } from './errors.js';

/** A monotonic clock and a way to wait on it, plus the wall clock for timestamps. */
export interface Clock {
  /** Milliseconds on a monotonic clock; only differences between two readings mean anything. */
  now(): number;
  /**
   * Milliseconds since the epoch by the wall clock: only for timestamps that people read or that a
   * source resolves (`AT_TIMESTAMP`), never for lease timing, since wall clocks of two machines differ.
   */
  wallTime(): number;
  /** Resolves after `ms` milliseconds of this clock, or rejects with an `AbortedError` when `signal` fires. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

/** A source of uniformly distributed numbers in [0, 1). */
export interface Random {
  next(): number;
}

/** The process's monotonic clock (`performance.now()`) and real timers. */
export const systemClock: Clock = {
  now: () => performance.now(),
  wallTime: () => Date.now(),
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        reject(abortReason(signal));
        return;
      }
      const onAbort = (): void => {
        clearTimeout(timer);
        reject(abortReason(signal));
      };
      const timer = setTimeout(() => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      }, Math.max(0, ms));
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  },
};

/** `Math.random()`. */
export const systemRandom: Random = { next: () => Math.random() };

/** A small, fast, seeded generator (mulberry32): the same seed gives the same sequence everywhere. */
export function seededRandom(seed: number): Random {
  let state = seed >>> 0;
  return {
    next(): number {
      state = (state + 0x6d2b79f5) >>> 0;
      let t = state;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    },
  };
}

/** Fisher-Yates shuffle of a copy of `items`, driven by `random`. */
export function shuffled<T>(items: readonly T[], random: Random): T[] {
  const copy = [...items];
  for (let i = copy.length - 1; i > 0; i--) {
    const j = Math.floor(random.next() * (i + 1));
    [copy[i], copy[j]] = [copy[j] as T, copy[i] as T];
  }
  return copy;
}

/** The reason an aborted signal carries, as an `AbortedError` unless it already is a Leasehold error. */
export function abortReason(signal: AbortSignal | undefined): Error {
  const reason: unknown = signal?.reason;
  if (reason instanceof AbortedError) return reason;
  return new AbortedError('operation aborted', { cause: reason });
}

/**
 * `read`, or a rejection with `signal`'s reason as soon as the signal aborts first: for a read whose
 * answer is of no use once the signal fired (a stopping worker's listing), so that nothing waits for a
 * store slow to answer it. The read itself goes on unawaited and its answer is dropped. Never for a
 * write, whose outcome must be known.
 */
export function unlessAborted<T>(read: Promise<T>, signal: AbortSignal): Promise<T> {
  // Once given up, the read's failure is nobody's to hear.
  read.catch(() => undefined);
  if (signal.aborted) return Promise.reject(abortReason(signal));
  let onAbort = (): void => undefined;
  const aborted = new Promise<never>((_resolve, reject) => {
    onAbort = () => reject(abortReason(signal));
    signal.addEventListener('abort', onAbort, { once: true });
  });
  return Promise.race([read, aborted]).finally(() => signal.removeEventListener('abort', onAbort));
}
