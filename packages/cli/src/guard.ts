/**
 * The guard of every command that writes: it refuses while a worker of the group is running. A group is
 * live when a lease with an owner changes version while this process watches it (a worker renews its
 * leases every third of the lease duration); a group none of whose leases has an owner is not live.
 */
import { describeValue, LeaseholdError, type LeaseListing, type Storage } from '@leasehold/core';
import { observeLiveness } from './observe.js';
import { formatDuration, type Io } from './shared.js';
import { PKG } from './url.js';

/** Options of {@link refuseIfLive}. */
export interface GuardOptions {
  /** Skip the check. */
  readonly force: boolean;
  /** How long to watch; above the group's `leaseDurationMs` (10,000 by default). */
  readonly observeMs: number;
}

/** Default watch: above core's default lease duration of 10 s, so that a live owner renews at least three times. */
export const DEFAULT_OBSERVE_MS = 12_000;

/**
 * Watches the group and throws an `ERR_GROUP_LIVE` error naming the renewed lease and its owner when a
 * worker is seen renewing; returns the last listing otherwise. With `force`, lists once and returns.
 */
export async function refuseIfLive(storage: Storage, group: string, options: GuardOptions, io: Io): Promise<LeaseListing> {
  if (options.force) {
    io.err(`not checking whether group ${describeValue(group)} is live (--force)\n`);
    return storage.listLeases(group);
  }
  const owned = (await storage.listLeases(group)).leases.some((lease) => lease.owner !== null);
  if (owned) {
    io.err(`watching group ${describeValue(group)} for ${formatDuration(options.observeMs)} for renewals by a live worker (--observe-ms)\n`);
  }
  const pollMs = Math.max(20, Math.min(1000, Math.floor(options.observeMs / 10)));
  const verdict = await observeLiveness(storage, group, { observeMs: options.observeMs, pollMs });
  const [renewed] = verdict.renewed;
  if (verdict.live && renewed) {
    throw new LeaseholdError(
      'ERR_GROUP_LIVE',
      `[${PKG}] group ${describeValue(group)} is live: lease ${describeValue(renewed.leaseKey)} of worker ${describeValue(renewed.owner)} was renewed while watched; stop the group's workers first, or pass --force`,
    );
  }
  return { leases: [...verdict.leases], corrupt: [...verdict.corrupt] };
}
