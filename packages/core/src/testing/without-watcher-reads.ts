/**
 * A store as an adapter without the watchers' reads presents it: `getMembers`, `getRosterDigest` and
 * `advanceRosterDigest` hidden, everything else the store's own. For tests and the simulation of the path
 * every member takes on such an adapter (the whole roster every take tick).
 */
import type { Storage } from '../storage.js';

export function withoutWatcherReads<S extends Storage>(storage: S): S {
  return hiding(storage, ['getMembers', 'getRosterDigest', 'advanceRosterDigest', 'getRosterMoves']);
}

/**
 * A store as an adapter with the watchers' reads but without `getRosterMoves` presents it (the DynamoDB
 * adapter, and the Redis and PostgreSQL adapters of earlier releases): a move of the digest is read as the
 * whole roster.
 */
export function withoutRosterMoves<S extends Storage>(storage: S): S {
  return hiding(storage, ['getRosterMoves']);
}

/**
 * A store as an adapter without the read of many leases by key presents it (`getLeases` hidden, as on an
 * adapter of an earlier release or the SQLite example): each lease announced to a worker is one `getLease`.
 */
export function withoutLeaseReads<S extends Storage>(storage: S): S {
  return hiding(storage, ['getLeases']);
}

function hiding<S extends Storage>(storage: S, names: readonly string[]): S {
  const hidden = new Set<PropertyKey>(names);
  return new Proxy(storage, {
    get: (target, name) => {
      if (hidden.has(name)) return undefined;
      const value: unknown = Reflect.get(target, name, target);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}
