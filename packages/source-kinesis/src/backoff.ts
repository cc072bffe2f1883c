import type { Random } from '@leasehold/core';

/** Exponential backoff with jitter: half the capped exponential delay, plus a random part of the other half. */
export function backoffDelayMs(attempt: number, baseMs: number, maxMs: number, random: Random): number {
  const capped = Math.min(maxMs, baseMs * 2 ** Math.min(attempt, 30));
  return capped / 2 + random.next() * (capped / 2);
}
