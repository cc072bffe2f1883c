/**
 * The guard of every command that writes leases: it refuses while a worker of the group is running.
 * Liveness is judged as core's workers judge each other, from the group's roster: a worker is live while
 * its member record keeps moving (it heartbeats every 0.65 of its lease duration), and not live once its
 * record was watched not moving for its lease duration, or was declared dead. Lease versions say nothing
 * about liveness: a lease is written only when its owner or its checkpoint changes.
 */
import { LeaseholdError, type LeaseListing, type Storage } from '@leasehold/core';
import { describeValue } from '@leasehold/core/adapter';
import { unreadableMembers, watchRoster } from './observe.js';
import { formatDuration, type Io } from './shared.js';
import { PKG } from './pkg.js';

/** Options of {@link refuseIfLive}. */
export interface GuardOptions {
  /** Skip the check. */
  readonly force: boolean;
  /**
   * Watch each alive member at least this long; 0 watches each for its own lease duration, as workers
   * do. Also how long a member that cannot be read back is watched (0: {@link UNREADABLE_WATCH_MS}).
   */
  readonly observeMs: number;
}

/**
 * How long a member that cannot be read back is watched when `--observe-ms` does not say: its lease
 * duration cannot be read, so this is above core's default of 10 s.
 */
export const UNREADABLE_WATCH_MS = 12_000;

/** The pause between roster reads while watching. */
export function pollOf(observeMs: number): number {
  return observeMs > 0 ? Math.max(20, Math.min(500, Math.floor(observeMs / 10))) : 250;
}

/**
 * Watches the group's roster and throws an `ERR_GROUP_LIVE` error naming a live worker when one is seen
 * heartbeating; returns the leases as listed after the watch otherwise. With `force`, lists once and
 * returns.
 */
export async function refuseIfLive(storage: Storage, group: string, options: GuardOptions, io: Io): Promise<LeaseListing> {
  if (options.force) {
    io.err(`not checking whether group ${describeValue(group)} is live (--force)\n`);
    return storage.listLeases(group);
  }
  const first = await storage.getRoster(group);
  const alive = first.members.filter((member) => member.status === 'alive');
  if (alive.length > 0 || first.corrupt.length > 0) {
    const longest = Math.max(options.observeMs, ...alive.map((member) => member.leaseDurationMs));
    const unreadable = first.corrupt.length > 0 ? `, ${first.corrupt.length} that cannot be read back` : '';
    io.err(
      `watching the roster of group ${describeValue(group)} (${alive.length} alive member${alive.length === 1 ? '' : 's'}${unreadable}) for up to ${formatDuration(Math.max(longest, first.corrupt.length > 0 ? options.observeMs || UNREADABLE_WATCH_MS : 0))} for heartbeats: each member for its lease duration${options.observeMs > 0 ? `, at least ${formatDuration(options.observeMs)} (--observe-ms)` : ''}\n`,
    );
  }
  const verdict = await watchRoster(storage, group, { minimumMs: options.observeMs, unreadableMs: UNREADABLE_WATCH_MS, pollMs: pollOf(options.observeMs) });
  if (verdict.live) {
    const [moved] = verdict.moved;
    const who =
      moved !== undefined
        ? `worker ${describeValue(moved.workerId)} (incarnation ${describeValue(moved.incarnation)}) sent a heartbeat while watched`
        : `the member of worker ${describeValue(verdict.repaired[0])} could not be read back and then could: its worker heartbeat`;
    throw new LeaseholdError('ERR_GROUP_LIVE', `[${PKG}] group ${describeValue(group)} is live: ${who}; stop the group's workers first, or pass --force`);
  }
  const unreadable = unreadableMembers(verdict.roster.corrupt);
  if (unreadable.size > 0) {
    io.err(
      `the members ${[...unreadable].map((workerId) => describeValue(workerId)).join(', ')} cannot be read back and did not change for ${formatDuration(verdict.watchedMs)}: their workers cannot heartbeat (see leasehold doctor --group)\n`,
    );
  }
  return storage.listLeases(group);
}
