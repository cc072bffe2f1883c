import type { VirtualScheduler } from '../../src/testing/index.js';

/** Awaits work that runs on virtual time, advancing time 10 ms at a step until it settles. */
export async function run<T>(scheduler: VirtualScheduler, work: Promise<T>): Promise<T> {
  let done = false;
  const settled = work.finally(() => {
    done = true;
  });
  // Handled here so that a rejection is not reported as unhandled while time is still advancing.
  settled.catch(() => undefined);
  for (let i = 0; i < 20_000 && !done; i++) await scheduler.advance(10);
  return settled;
}
