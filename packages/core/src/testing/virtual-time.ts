/**
 * Virtual time for deterministic tests and the simulation: a scheduler that owns "now", and clocks
 * (one per simulated process) that may run fast or slow, pause, or die, all driven by it.
 */
import { setImmediate as macrotask } from 'node:timers/promises';
import { abortReason, type Clock } from '../clock.js';

interface Timer {
  at: number;
  seq: number;
  fire: () => void;
  cancelled: boolean;
}

/** A binary min-heap of timers ordered by time, then by scheduling order. */
class TimerHeap {
  readonly #items: Timer[] = [];

  get size(): number {
    return this.#items.length;
  }

  peek(): Timer | undefined {
    return this.#items[0];
  }

  push(timer: Timer): void {
    const items = this.#items;
    items.push(timer);
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!before(items[i] as Timer, items[parent] as Timer)) break;
      [items[i], items[parent]] = [items[parent] as Timer, items[i] as Timer];
      i = parent;
    }
  }

  pop(): Timer | undefined {
    const items = this.#items;
    const top = items[0];
    const last = items.pop();
    if (items.length > 0 && last) {
      items[0] = last;
      let i = 0;
      for (;;) {
        const left = 2 * i + 1;
        const right = left + 1;
        let smallest = i;
        if (left < items.length && before(items[left] as Timer, items[smallest] as Timer)) smallest = left;
        if (right < items.length && before(items[right] as Timer, items[smallest] as Timer)) smallest = right;
        if (smallest === i) break;
        [items[i], items[smallest]] = [items[smallest] as Timer, items[i] as Timer];
        i = smallest;
      }
    }
    return top;
  }
}

function before(a: Timer, b: Timer): boolean {
  return a.at < b.at || (a.at === b.at && a.seq < b.seq);
}

/**
 * Owns virtual time. Nothing happens between timers: `advance` fires each due timer in order, and after
 * each instant lets every promise continuation run before time moves on, so code written against
 * `Clock` behaves exactly as it would in real time, only instantly and reproducibly.
 */
export class VirtualScheduler {
  #now = 0;
  #seq = 0;
  readonly #timers = new TimerHeap();

  /** Virtual milliseconds since the scheduler was made. */
  get now(): number {
    return this.#now;
  }

  /** Calls `fire` at virtual time `at` (or now, if `at` has passed); returns a cancel function. */
  schedule(at: number, fire: () => void): () => void {
    const timer: Timer = { at: Math.max(at, this.#now), seq: this.#seq++, fire, cancelled: false };
    this.#timers.push(timer);
    return () => {
      timer.cancelled = true;
    };
  }

  /**
   * Runs every timer due up to `until`, in order. `afterEach` runs after each instant, once its promise
   * continuations have settled (the simulation checks its invariants there).
   */
  async advanceTo(until: number, afterEach?: () => void): Promise<void> {
    await settle();
    for (;;) {
      const next = this.#timers.peek();
      if (!next || next.at > until) break;
      this.#now = next.at;
      while (this.#timers.peek()?.at === this.#now) {
        const timer = this.#timers.pop() as Timer;
        if (!timer.cancelled) timer.fire();
      }
      await settle();
      afterEach?.();
    }
    this.#now = Math.max(this.#now, until);
  }

  /** Runs `ms` of virtual time. */
  advance(ms: number, afterEach?: () => void): Promise<void> {
    return this.advanceTo(this.#now + ms, afterEach);
  }

  /** A clock that runs at exactly the scheduler's rate. */
  clock(): VirtualClock {
    return new VirtualClock(this);
  }
}

/** Lets every pending promise continuation run: microtasks drain completely before a macrotask. */
async function settle(): Promise<void> {
  await macrotask();
}

/** Options of a {@link VirtualClock}. */
export interface VirtualClockOptions {
  /** How fast this clock runs against virtual time: 1.01 is 1% fast. Default 1. */
  rate?: number;
  /** The clock's reading at virtual time 0. Default 0. */
  offsetMs?: number;
  /** The wall clock's reading (ms since the epoch) at virtual time 0. Default 1,767,225,600,000 (2026-01-01). */
  wallOffsetMs?: number;
}

/** Where virtual wall clocks start unless told otherwise: 2026-01-01T00:00:00Z. */
export const VIRTUAL_EPOCH_MS = 1_767_225_600_000;

/**
 * A `Clock` on virtual time, with its own rate and offset. A paused clock's timers fire only when the
 * pause ends (a stopped process runs nothing); a killed clock's timers never fire (a dead process).
 */
export class VirtualClock implements Clock {
  readonly #scheduler: VirtualScheduler;
  readonly #rate: number;
  readonly #offsetMs: number;
  readonly #wallOffsetMs: number;
  #pausedUntil = -Infinity;
  #dead = false;

  constructor(scheduler: VirtualScheduler, options: VirtualClockOptions = {}) {
    this.#scheduler = scheduler;
    this.#rate = options.rate ?? 1;
    this.#offsetMs = options.offsetMs ?? 0;
    this.#wallOffsetMs = options.wallOffsetMs ?? VIRTUAL_EPOCH_MS;
  }

  now(): number {
    return this.#offsetMs + this.#scheduler.now * this.#rate;
  }

  /** The wall clock: runs with virtual time (NTP keeps its rate), from its own offset. */
  wallTime(): number {
    return Math.floor(this.#wallOffsetMs + this.#scheduler.now);
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        reject(abortReason(signal));
        return;
      }
      const onAbort = (): void => {
        cancel();
        reject(abortReason(signal));
      };
      const cancel = this.#at(this.#scheduler.now + Math.max(0, ms) / this.#rate, () => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      });
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Runs `fire` after `ms` of this clock, subject to pauses and death, like any of this process's work. */
  defer(ms: number, fire: () => void): () => void {
    return this.#at(this.#scheduler.now + Math.max(0, ms) / this.#rate, fire);
  }

  /** Freezes this process until virtual time `until`: its timers and I/O completions wait. */
  pauseUntil(until: number): void {
    this.#pausedUntil = Math.max(this.#pausedUntil, until);
  }

  /** Kills this process: none of its timers fire again. */
  kill(): void {
    this.#dead = true;
  }

  get paused(): boolean {
    return this.#scheduler.now < this.#pausedUntil;
  }

  /** The virtual time the last pause ends (or ended); `-Infinity` if the clock never paused. */
  get pausedUntil(): number {
    return this.#pausedUntil;
  }

  get dead(): boolean {
    return this.#dead;
  }

  #at(at: number, fire: () => void): () => void {
    let cancelled = false;
    let cancelCurrent = (): void => undefined;
    const attempt = (): void => {
      if (cancelled || this.#dead) return;
      if (this.#scheduler.now < this.#pausedUntil) {
        cancelCurrent = this.#scheduler.schedule(this.#pausedUntil, attempt);
        return;
      }
      fire();
    };
    cancelCurrent = this.#scheduler.schedule(at, attempt);
    return () => {
      cancelled = true;
      cancelCurrent();
    };
  }
}
