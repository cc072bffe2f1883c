/**
 * Reads of leases by key: what a worker does with the leases the change feed announced handed to it, and
 * what a watcher does with those a deal gave a member it watches. With the store's `getLeases`, up to
 * `limits.maxLeasesPerRead` keys go in one call; without it, each key is one `getLease`. At 100 x 10,000 a
 * dealt cold start hands each member 100 leases at once: one call instead of 100 round trips, which on a
 * shared client or pool queued the heartbeats of every coordinator of the process behind them.
 */
import { concurrencyLimit } from '../concurrency.js';
import type { CheckpointStorage, LeaseRecord } from '../storage.js';
import { limits } from '../validation.js';

/** One key's read: its lease (`null` when the group has no live lease with that key), or what the read met. */
export type KeyRead = { readonly lease: LeaseRecord | null } | { readonly error: unknown };

/**
 * Reads `keys` of `group`, `inFlight` calls at a time, and returns each key's read in the order given, each
 * settling as soon as its own call answers: a caller that awaits them in turn acts on the first leases
 * while later calls are on their way. A key the store reports corrupt, or whose call failed, reads as the
 * error; a call never rejects.
 */
export function readByKey(storage: CheckpointStorage, group: string, keys: readonly string[], inFlight: number): Promise<KeyRead>[] {
  const limit = concurrencyLimit(inFlight);
  const getLeases = storage.getLeases?.bind(storage);
  if (getLeases === undefined) {
    return keys.map((leaseKey) => limit(() => storage.getLease(group, leaseKey)).then((lease): KeyRead => ({ lease }), (error: unknown): KeyRead => ({ error })));
  }
  const reads: Promise<KeyRead>[] = [];
  for (let from = 0; from < keys.length; from += limits.maxLeasesPerRead) {
    const chunk = keys.slice(from, from + limits.maxLeasesPerRead);
    const answer: Promise<{ readonly byKey: ReadonlyMap<string, KeyRead> } | { readonly failed: unknown }> = limit(() => getLeases(group, chunk)).then(
      (listing) => {
        const byKey = new Map<string, KeyRead>();
        for (const lease of listing.leases) byKey.set(lease.leaseKey, { lease });
        for (const error of listing.corrupt) byKey.set(error.leaseKey ?? '', { error });
        return { byKey };
      },
      (error: unknown) => ({ failed: error }),
    );
    for (const leaseKey of chunk) {
      reads.push(answer.then((answered): KeyRead => ('byKey' in answered ? (answered.byKey.get(leaseKey) ?? { lease: null }) : { error: answered.failed })));
    }
  }
  return reads;
}
