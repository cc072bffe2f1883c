/**
 * What the dashboard's tests share: a storage that counts the calls made of it or can be cut off, and a
 * client of the dashboard's server-sent events.
 */
import { request } from 'node:http';
import { Consumer, MemorySource, StorageUnavailableError, type Storage } from '@leasehold/core';

/** A storage that passes every call on and counts them by method. */
export function countingStorage(inner: Storage): { storage: Storage; calls: Map<string, number>; total(): number } {
  const calls = new Map<string, number>();
  const storage = new Proxy(inner, {
    get(target, name, receiver) {
      const value = Reflect.get(target, name, receiver) as unknown;
      if (typeof value !== 'function' || typeof name !== 'string') return value;
      return (...args: unknown[]) => {
        calls.set(name, (calls.get(name) ?? 0) + 1);
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { storage, calls, total: () => [...calls.values()].reduce((sum, count) => sum + count, 0) };
}

/**
 * A storage a worker loses, as a worker whose process was killed (or cut off from its storage) does: once
 * `cut()` is called, every call fails and nothing is written, so its member record stops moving.
 */
export function severableStorage(inner: Storage): { storage: Storage; cut: () => void } {
  let severed = false;
  const storage = new Proxy(inner, {
    get(target, name, receiver) {
      const value = Reflect.get(target, name, receiver) as unknown;
      if (typeof value !== 'function' || name === 'close') return value;
      return (...args: unknown[]) => {
        if (severed) return Promise.reject(new StorageUnavailableError('[test] the worker is cut off from its storage'));
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { storage, cut: () => void (severed = true) };
}

/** An open `GET /events` stream: the `state` events it received, parsed. */
export interface EventClient {
  readonly states: unknown[];
  close(): void;
}

/** Opens the dashboard's event stream with the given headers; resolves once the response started. */
export function openEvents(url: string, headers: Record<string, string> = {}): Promise<EventClient & { status: number }> {
  return new Promise((resolve, reject) => {
    const states: unknown[] = [];
    const req = request(new URL('/events', url), { headers }, (response) => {
      let buffer = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => {
        buffer += chunk;
        let end = buffer.indexOf('\n\n');
        while (end !== -1) {
          const message = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const data = message.split('\n').find((line) => line.startsWith('data: '));
          if (message.includes('event: state') && data !== undefined) states.push(JSON.parse(data.slice(6)));
          end = buffer.indexOf('\n\n');
        }
      });
      response.on('error', () => undefined);
      resolve({ status: response.statusCode ?? 0, states, close: () => req.destroy() });
    });
    req.on('error', (error) => {
      if (states.length === 0) reject(error);
    });
    req.end();
  });
}

/** Polls `read` until `check` accepts its value, or fails after `timeoutMs` with the last value. */
export async function eventually<T>(read: () => T | Promise<T>, check: (value: T) => boolean, what: string, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (check(value)) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; last: ${JSON.stringify(value)?.slice(0, 2000)}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** A group of workers of core's Consumer in this process, on a stream in memory, with records flowing. */
export interface InProcessGroup {
  readonly group: string;
  readonly source: MemorySource;
  /** Each worker, and for those started `severable`, how to cut it off from the storage. */
  readonly workers: Map<string, { readonly consumer: Consumer; readonly cut?: () => void }>;
  stop(): Promise<void>;
}

/**
 * Starts `workerIds` as workers of `group` on `storage` over a stream of `shards` shards in memory (lease
 * duration 2 s), and puts 80 records a second on it until stopped. The workers named in `severable` can be
 * cut off from the storage, as a killed worker is.
 */
export async function startInProcessGroup(storage: Storage, group: string, workerIds: readonly string[], options: { shards: number; severable?: readonly string[] }): Promise<InProcessGroup> {
  const source = new MemorySource(options.shards, { batchSize: 20 });
  const workers = new Map<string, { consumer: Consumer; cut?: () => void }>();
  for (const workerId of workerIds) {
    const severable = options.severable?.includes(workerId) ? severableStorage(storage) : undefined;
    const consumer = new Consumer({
      group,
      source,
      storage: severable?.storage ?? storage,
      workerId,
      initialPosition: 'TRIM_HORIZON',
      shardSyncIntervalMs: 300,
      lease: { leaseDurationMs: 2_000, takeIntervalMs: 200 },
      processBatch: () => undefined,
    });
    await consumer.start();
    workers.set(workerId, { consumer, ...(severable ? { cut: severable.cut } : {}) });
  }
  let n = 0;
  const producer = setInterval(() => {
    for (let i = 0; i < 8; i++) source.put(`key-${n++ % 16}`, `record-${n}`);
  }, 100);
  return {
    group,
    source,
    workers,
    async stop() {
      clearInterval(producer);
      // A worker cut off cannot release anything: its stop gives up after its timeout.
      await Promise.all([...workers.values()].map(({ consumer }) => consumer.stop({ timeoutMs: 2_000 }).catch(() => undefined)));
    },
  };
}
