/**
 * One task that many callers wait for, such as the registration of the stream consumer that every shard's
 * reader needs before it can subscribe. Each caller's wait honours only its own signal: one reader that
 * stops (a lease handed off) never cancels the task for the readers still waiting. The task itself is
 * cancelled once nobody waits for it any more, so nothing runs on for no one.
 */
import { AbortedError } from '@leasehold/core';
import { abortReason } from '@leasehold/core/adapter';

interface Running<T> {
  readonly promise: Promise<T>;
  readonly controller: AbortController;
  waiters: number;
}

export class SharedTask<T> {
  readonly #run: (signal: AbortSignal) => Promise<T>;
  readonly #what: string;
  #running: Running<T> | undefined;
  #done: { readonly value: T } | undefined;

  /** `run` does the work under the signal it is given; `what` names it in the reason of a cancellation. */
  constructor(what: string, run: (signal: AbortSignal) => Promise<T>) {
    this.#what = what;
    this.#run = run;
  }

  /**
   * The task's result: at once when it succeeded before, otherwise once the running task (started now if
   * none runs) ends. Rejects when the task fails (the next call starts it again) or when `signal` fires.
   */
  get(signal: AbortSignal): Promise<T> {
    if (this.#done !== undefined) return Promise.resolve(this.#done.value);
    if (signal.aborted) return Promise.reject(abortReason(signal));
    const running = (this.#running ??= this.#start());
    running.waiters++;
    return new Promise<T>((resolve, reject) => {
      let waiting = true;
      const leave = (): boolean => {
        if (!waiting) return false;
        waiting = false;
        running.waiters--;
        signal.removeEventListener('abort', onAbort);
        return true;
      };
      const onAbort = (): void => {
        if (!leave()) return;
        if (running.waiters === 0) {
          // The last waiter left: stop the task, and let the next caller start a fresh one.
          if (this.#running === running) this.#running = undefined;
          running.controller.abort(new AbortedError(`[source-kinesis] ${this.#what} stopped: no reader waits for it any more`));
        }
        reject(abortReason(signal));
      };
      signal.addEventListener('abort', onAbort, { once: true });
      running.promise.then(
        (value) => {
          if (leave()) resolve(value);
        },
        // The task's errors are Leasehold errors or the SDK's: always an Error.
        (error: Error) => {
          if (leave()) reject(error);
        },
      );
    });
  }

  /** Drops a kept result that went stale, so that the next call runs the task again. */
  forget(): void {
    this.#done = undefined;
  }

  #start(): Running<T> {
    const controller = new AbortController();
    const running: Running<T> = {
      controller,
      waiters: 0,
      promise: this.#run(controller.signal).then(
        (value) => {
          if (this.#running === running) this.#running = undefined;
          if (!controller.signal.aborted) this.#done = { value };
          return value;
        },
        (error: unknown) => {
          if (this.#running === running) this.#running = undefined;
          throw error;
        },
      ),
    };
    // A task everyone stopped waiting for ends with nobody to see it: that is expected, not an unhandled rejection.
    running.promise.catch(() => undefined);
    return running;
  }
}
