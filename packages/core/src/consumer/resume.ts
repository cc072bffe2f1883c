/**
 * A reader's start from the resume hint its lease was handed over with (DESIGN section 4, "Releasing"):
 * the coordinator judges the hint against the lease's tenure and checkpoint and its age; the source, which
 * may still refuse it, starts from the checkpoint then. Every hint not used is a debug line, nothing more.
 */
import type { HeldLease, LeaseCoordinator } from '../lease/coordinator.js';
import type { ShardSource } from '../source.js';
import type { Logger } from './options.js';

/** The hint to start the lease's first read from, or `undefined` to start from its checkpoint alone. */
export function resumeHintFor(source: ShardSource, coordinator: LeaseCoordinator, lease: HeldLease, logger: Logger, anyCheckpoint: boolean): string | undefined {
  const maxAgeMs = source.resumeHintMaxAgeMs;
  if (maxAgeMs === undefined || !(maxAgeMs > 0)) return undefined;
  const verdict = coordinator.resumeHint(lease, maxAgeMs, anyCheckpoint);
  if ('hint' in verdict) {
    logger.debug({ shardId: lease.leaseKey, ageMs: verdict.ageMs }, '[core] reading on from the resume hint handed over with the lease');
    return verdict.hint;
  }
  if (verdict.refused !== 'missing') logger.debug({ shardId: lease.leaseKey, refused: verdict.refused }, '[core] resume hint not used: reading from the checkpoint');
  return undefined;
}
