/** Runs at most `n` of the calls given at once, the others in the order they came. */
export function concurrencyLimit(n: number): <T>(call: () => Promise<T>) => Promise<T> {
  let active = 0;
  const waiting: Array<() => void> = [];
  return async <T>(call: () => Promise<T>): Promise<T> => {
    if (active >= n) await new Promise<void>((resolve) => waiting.push(resolve));
    active++;
    try {
      return await call();
    } finally {
      active--;
      waiting.shift()?.();
    }
  };
}
