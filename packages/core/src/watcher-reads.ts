/**
 * The watchers' reads of the storage contract: `getMembers`, `getRosterDigest` and `advanceRosterDigest`
 * (see `CheckpointStorage`). They are optional, all three or none: a worker that reads a few members by id
 * needs the digest to learn when to read the whole roster, and the digest is worth nothing if nobody
 * advances it.
 */
import { InvalidConfigError } from './errors.js';
import type { CheckpointStorage } from './storage.js';

/** The methods of the watchers' reads, in the order the contract gives them. */
export const WATCHER_READS = ['getMembers', 'getRosterDigest', 'advanceRosterDigest'] as const;

/** The watchers' reads of a store that has them. */
export type WatcherReads = Required<Pick<CheckpointStorage, (typeof WATCHER_READS)[number]>>;

/**
 * Whether `storage` has the watchers' reads: `true` when it has all three, `false` when it has none. A store
 * with one or two of them is misbuilt: an `InvalidConfigError` names what it has and what it lacks.
 */
export function checkWatcherReads<S extends CheckpointStorage>(storage: S, pkg = 'core'): storage is S & WatcherReads {
  const present = WATCHER_READS.filter((name) => typeof storage[name] === 'function');
  if (present.length === WATCHER_READS.length) return true;
  if (present.length === 0) return false;
  const missing = WATCHER_READS.filter((name) => !present.includes(name));
  throw new InvalidConfigError(
    `[${pkg}] the storage has ${present.join(' and ')} but not ${missing.join(' nor ')}: a store has all three of getMembers, getRosterDigest and advanceRosterDigest, or none`,
  );
}

/**
 * Whether `storage` has `getRosterMoves` (the members each digest advance named). It goes with the watchers'
 * reads: a store that has it without them is misbuilt, and an `InvalidConfigError` says so.
 */
export function checkRosterMoves<S extends CheckpointStorage>(storage: S, pkg = 'core'): storage is S & WatcherReads & Required<Pick<CheckpointStorage, 'getRosterMoves'>> {
  const watcherReads = checkWatcherReads(storage, pkg);
  if (typeof storage.getRosterMoves !== 'function') return false;
  if (!watcherReads) {
    throw new InvalidConfigError(`[${pkg}] the storage has getRosterMoves but not getMembers, getRosterDigest nor advanceRosterDigest: the roster's moves are read with the watchers' reads`);
  }
  return true;
}
