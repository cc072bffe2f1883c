/** The polling wait the benchmarks share, so that each bench file reads as its measurement. */
import { setTimeout as sleep } from 'node:timers/promises';

/** Waits until `condition` holds; false after `timeoutMs`; throws with `failure()` when it says so. */
export async function waitFor(condition: () => boolean, timeoutMs: number, failure?: () => string | undefined): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    const failed = failure?.();
    if (failed !== undefined) throw new Error(failed);
    if (Date.now() > deadline) return false;
    await sleep(50);
  }
  return true;
}
