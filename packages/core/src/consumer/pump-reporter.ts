/**
 * What a shard's reader reports, turned into the consumer's events and log lines (and its stall reports):
 * one object per reader, for the lease and tenure it reads in.
 */
import type { HeldLease } from '../lease/coordinator.js';
import type { ConsumerEvents } from './events.js';
import type { Logger } from './options.js';
import type { PumpReporter } from './shard-pump.js';
import type { StallWatch } from './stalls.js';

/** What the reporter needs of its consumer. */
export interface PumpReporterHost {
  readonly logger: Logger;
  emit<K extends keyof ConsumerEvents>(name: K, event: ConsumerEvents[K]): void;
  /** Whether this worker still holds the lease in the reader's tenure: a reader of an ended tenure reports no stall. */
  stillHeld(lease: HeldLease): boolean;
  readonly stalls: StallWatch;
  report(error: unknown, operation: string): void;
}

/** The reporter of the reader of `lease` (in its tenure). */
export function pumpReporter(host: PumpReporterHost, lease: HeldLease): PumpReporter {
  return {
    started: (shardId, position) => {
      host.logger.info({ shardId, position, fencingToken: lease.fencingToken }, 'shard started');
      host.emit('shard-started', { shardId, position, fencingToken: lease.fencingToken });
    },
    batch: (shardId, records, bytes, millisBehindLatest, durationMs) =>
      host.emit('batch-processed', { shardId, records, bytes, millisBehindLatest, durationMs }),
    checkpointed: (shardId, position) => host.emit('checkpointed', { shardId, position }),
    handlerFailed: (shardId, attempt, error) => {
      host.logger.warn({ shardId, attempt, err: error }, 'handler failed');
      host.emit('handler-failed', { shardId, attempt, error });
    },
    bisected: (shardId, records, left, right, error) => {
      host.logger.warn({ shardId, records, left, right, err: error }, 'handler failed; the records are split in two to find the failing one');
      host.emit('batch-bisected', { shardId, records, left, right, error });
    },
    retried: (shardId, records, attempt, delayMs) => host.emit('batch-retried', { shardId, records, attempt, delayMs }),
    deadLettered: (shardId, positions, attempts, reason, error) => {
      host.logger.warn({ shardId, positions, attempts, reason, err: error }, 'records given up and dead-lettered; they are skipped');
      host.emit('records-dead-lettered', { shardId, positions, attempts, reason, error });
    },
    deadLetterFailed: (shardId, positions, attempt, error, retryInMs) => {
      host.logger.error({ shardId, positions, attempt, retryInMs, err: error }, 'the dead-letter handler failed; the shard waits and it is called again');
      host.emit('dead-letter-failed', { shardId, positions, attempt, error, retryInMs });
    },
    recordSkipped: (shardId, position, error, { reason, attempts, deadLettered }) => {
      if (!deadLettered) host.logger.error({ shardId, position, reason, attempts, err: error }, 'record skipped after repeated handler failures');
      host.emit('record-skipped', { shardId, position, error, reason, attempts, deadLettered });
    },
    ended: (shardId, childShardIds) => {
      host.logger.info({ shardId, childShardIds }, 'shard ended');
      host.emit('shard-ended', { shardId, childShardIds });
    },
    heldBack: (_shardId, reason, error) => {
      if (!host.stillHeld(lease)) return;
      host.stalls.reportStalled(lease, { reason, sinceMs: 0, error });
    },
    resumed: () => {
      if (host.stalls.reportedIn(lease)) host.stalls.reportResumed(lease);
    },
    stopped: (shardId, error) => {
      host.logger.error({ shardId, err: error }, 'shard stopped after a handler failure');
      host.emit('shard-stopped', { shardId, error });
    },
    error: (error, operation) => host.report(error, operation),
  };
}
