/**
 * A wake-up before the next take tick (the membership's: a watched member's expiry, a watched member's
 * moment to be named a suspect): armed for one moment, moved when the moment moves, aborted when the
 * coordinator stops.
 */
import type { Clock } from '../clock.js';

/** A wake-up armed for a moment; `done` once it fired (a fired timer is armed again for any moment). */
export interface WakeTimer {
  readonly at: number;
  readonly controller: AbortController;
  done: boolean;
}

/** What a wake-up needs of its coordinator. */
export interface WakeParts {
  readonly clock: Clock;
  readonly takeIntervalMs: number;
  /** Whether the coordinator runs: nothing is armed otherwise. */
  running(): boolean;
  /** Aborted when the coordinator stops, with every timer armed. */
  lifetime(): AbortSignal;
}

/**
 * The timer `current` moved to `at` (kept if it is armed for that moment already), running `fire` then;
 * `null`, with nothing armed, for a moment already due (the regular tick tries again, never a tight loop)
 * or not before the next tick; left as it is once the coordinator stops (its lifetime aborts it).
 */
export function wakeAt(parts: WakeParts, current: WakeTimer | null, at: number, fire: () => void): WakeTimer | null {
  if (!parts.running() || at === Infinity) return current;
  if (current !== null && !current.done && current.at === at) return current;
  current?.controller.abort();
  const delay = at - parts.clock.now();
  if (delay <= 0 || delay >= parts.takeIntervalMs) return null;
  const timer: WakeTimer = { at, controller: new AbortController(), done: false };
  const lifetime = parts.lifetime();
  const onStop = (): void => timer.controller.abort();
  lifetime.addEventListener('abort', onStop, { once: true });
  parts.clock.sleep(delay + 1, timer.controller.signal).then(
    () => {
      timer.done = true;
      fire();
    },
    () => undefined,
  ).finally(() => lifetime.removeEventListener('abort', onStop));
  return timer;
}
