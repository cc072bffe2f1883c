/**
 * A small typed event emitter. Unlike Node's EventEmitter, an `error` event without a listener is dropped
 * rather than thrown, and a listener that throws never breaks the emitter's caller: a lease loop must
 * never die of an observer's bug.
 */
/** A listener of one event. */
export type Listener<T> = (event: T) => void;

/** The base of every Leasehold component that reports what happens: typed `on`, `off` and `once`. */
export class TypedEmitter<Events extends object> {
  readonly #listeners = new Map<keyof Events, Set<Listener<never>>>();

  /** Calls `listener` for every `name` event; returns a function that removes it. */
  on<K extends keyof Events>(name: K, listener: Listener<Events[K]>): () => void {
    let set = this.#listeners.get(name);
    if (!set) {
      set = new Set();
      this.#listeners.set(name, set);
    }
    set.add(listener);
    return () => this.off(name, listener);
  }

  /** Removes a listener added with `on`. */
  off<K extends keyof Events>(name: K, listener: Listener<Events[K]>): void {
    this.#listeners.get(name)?.delete(listener);
  }

  /** Calls `listener` for the next `name` event only. */
  once<K extends keyof Events>(name: K, listener: Listener<Events[K]>): () => void {
    const off = this.on(name, (event) => {
      off();
      listener(event);
    });
    return off;
  }

  /** How many listeners are registered, over every event (diagnostics: a count that keeps growing is a leak). */
  protected countListeners(): number {
    let count = 0;
    for (const set of this.#listeners.values()) count += set.size;
    return count;
  }

  /** Calls every listener of `name`; a listener that throws does not stop the others or the caller. */
  protected emit<K extends keyof Events>(name: K, event: Events[K]): void {
    const set = this.#listeners.get(name);
    if (!set) return;
    for (const listener of [...set]) {
      try {
        (listener as Listener<Events[K]>)(event);
      } catch {
        // An observer's failure is its own; the coordinator carries on.
      }
    }
  }
}
