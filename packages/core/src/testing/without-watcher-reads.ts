/**
 * A store as an adapter without the watchers' reads presents it: `getMembers`, `getRosterDigest` and
 * `advanceRosterDigest` hidden, everything else the store's own. For tests and the simulation of the path
 * every member takes on such an adapter (the whole roster every take tick).
 */
import type { Storage } from '../storage.js';

export function withoutWatcherReads<S extends Storage>(storage: S): S {
  const hidden = new Set<PropertyKey>(['getMembers', 'getRosterDigest', 'advanceRosterDigest']);
  return new Proxy(storage, {
    get: (target, name) => {
      if (hidden.has(name)) return undefined;
      const value: unknown = Reflect.get(target, name, target);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}
