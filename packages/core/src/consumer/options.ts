import type { Meter } from '@opentelemetry/api';
import type { Clock, Random } from '../clock.js';
import type { LeaderElectorOptions } from '../leader/elector.js';
import type { CheckpointWrite, LeaseCoordinatorOptions } from '../lease/coordinator.js';
import type { ShardSource, SourceRecord } from '../source.js';
import type { CheckpointStorage, LeaderStore, Position } from '../storage.js';

/** A pino-compatible logger: `logger.info({ shardId }, 'message')`. Silent by default. */
export interface Logger {
  /** Detail for tracing a problem (not used on the hot path). */
  debug(fields: object, message: string): void;
  /** What a worker does: starts, stops, shards taken and ended, leadership. */
  info(fields: object, message: string): void;
  /** Something went wrong and was handled: a lease lost, a handler that failed and will be retried. */
  warn(fields: object, message: string): void;
  /** Something needs a person: a record skipped, a shard stopped, a storage error. */
  error(fields: object, message: string): void;
}

/** What the handler gets with each batch. */
export interface BatchContext {
  /** The shard (partition) the batch comes from. */
  readonly shardId: string;
  /** Fires when the lease is lost or handed off: stop, and do not write anything more for this batch. */
  readonly signal: AbortSignal;
  /** The lease's ownership epoch: pass it to your own downstream writes to fence them too. */
  readonly fencingToken: number;
  /** How far this shard's reader is behind the tip of the stream, if the source knows. */
  readonly millisBehindLatest: number | undefined;
  /** The position after this batch. */
  readonly position: Position;
  /**
   * Checkpoints `position` (default: the end of this batch). Refused past this batch, after the lease was
   * lost, or behind the current checkpoint. With the default checkpointing the runtime does it for you.
   */
  checkpoint(position?: Position): Promise<void>;
  /**
   * Checkpoints `position` (default: the end of this batch) through `write`, a conditional write of the
   * lease made in one atomic step with your own writes, so that they and the checkpoint apply together or
   * not at all (exactly-once effects: `PostgresStorage.transaction` calls it for you). Refused past this
   * batch, when the lease is not held, at or behind the stored checkpoint (`CheckpointBehindError`), and
   * when the stored lease moved on (`LeaseLostError`). The runtime does not checkpoint the batch again.
   */
  checkpointWith(write: CheckpointWrite, position?: Position): Promise<void>;
}

/** When the runtime checkpoints on its own. */
export type CheckpointPolicy =
  | 'batch' // after every batch the handler finished (default)
  | 'manual' // only when the handler calls `ctx.checkpoint()`
  | { everyRecords?: number; everyMs?: number }; // after N records or N milliseconds, whichever comes first

/** What happens when the handler throws. */
export type FailurePolicy =
  | 'retry' // retry the batch with backoff until it succeeds or the lease is lost (default)
  | 'skip' // retry record by record; a record that fails `maxAttempts` times is reported and skipped
  | 'stop'; // stop this shard (its lease is kept, nothing is checkpointed past the failure) and report

/** Where a shard with no checkpoint starts. */
export type InitialPosition = 'TRIM_HORIZON' | 'LATEST' | { atTimestamp: Date | number };

/** Optional per-shard hooks, in the spirit of KCL's record processor. */
export interface ShardHooks {
  /** The worker took the shard and starts reading it at `position`. */
  shardStarted?(shardId: string, position: Position): void | Promise<void>;
  /** The lease was lost (taken after a stall, or self-fenced); any write for the shard will be refused. */
  leaseLost?(shardId: string): void | Promise<void>;
  /** Every record of the (closed) shard was processed; its children may start. */
  shardEnded?(shardId: string, childShardIds: readonly string[]): void | Promise<void>;
  /**
   * The worker is about to give the shard away (shutdown or a balancing handoff): the last chance to
   * checkpoint. With automatic checkpointing the runtime checkpoints the last processed batch itself.
   */
  shutdownRequested?(shardId: string, checkpoint: (position?: Position) => Promise<void>): void | Promise<void>;
}

/**
 * Deliberately unsafe behaviours, each bringing back one defect the runtime once had, so that the
 * simulation can prove it catches them. Never set in production.
 * @internal
 */
export interface ConsumerUnsafe {
  /** A child shard with no checkpoint starts at the consumer's initial position, not at the child's start. */
  childrenAtInitialPosition?: boolean;
  /** Shard sync looks one generation down: finished ancestors whose leases were cleaned up are created again. */
  oneGenerationSync?: boolean;
  /** Workers take before the first shard sync, sync creates leases in listing order, and a pump creates a merge child without its other parent. */
  birthRace?: boolean;
  /** The leader deletes every lease the shard listing does not name, at the version it listed, whoever owns it. */
  deleteOnStaleView?: boolean;
  /** A checkpoint is fenced by worker and key only, not by the tenure (fencing token) it was made in. */
  checkpointPerKey?: boolean;
  /** A pump that failed for good keeps its lease, renewed with nobody reading. */
  keepFailedPump?: boolean;
  /** Passed to the coordinator and the elector: no self-fencing. */
  skipSelfFencing?: boolean;
}

/** Options of {@link Consumer}. */
export interface ConsumerOptions<R extends SourceRecord = SourceRecord> {
  /** The consuming application: every worker of it shares its shards. */
  group: string;
  /** The stream. */
  source: ShardSource<R>;
  /** Where leases and checkpoints live (and the leader record, if it is also a `LeaderStore`). */
  storage: CheckpointStorage | (CheckpointStorage & LeaderStore);
  /** Where the leader record lives. Default: `storage`, when it implements `LeaderStore`. */
  leaderStore?: LeaderStore;
  /** Your code: called with each batch of a shard, one batch at a time per shard, in order. */
  processBatch: (records: readonly R[], context: BatchContext) => void | Promise<void>;
  /** When to checkpoint. Default `'batch'`. */
  checkpointing?: CheckpointPolicy;
  /** Where a shard with no checkpoint starts. Default `'LATEST'`, as in KCL. */
  initialPosition?: InitialPosition;
  /** What a handler failure does. Default `'retry'`. */
  onHandlerError?: FailurePolicy;
  /** Backoff of handler retries. Default 100 ms doubling to 10 s; `skip` gives up on a record after 3 attempts. */
  retry?: { initialDelayMs?: number; maxDelayMs?: number; maxAttempts?: number };
  /** Per-shard hooks. */
  hooks?: ShardHooks;
  /** How often the leader syncs shards with the stream and cleans up finished leases. Default 60,000. */
  shardSyncIntervalMs?: number;
  /**
   * A held shard that makes no progress this long (a handler call that does not return, a source that
   * does not answer, nobody reading it) is reported: a `shard-stalled` event, a log line and two fields on
   * its lease that `leasehold status` shows. Default 60,000.
   */
  stallAfterMs?: number;
  /** A pino-compatible logger. Default: silent. */
  logger?: Logger;
  /** Lease timing and limits, passed to the `LeaseCoordinator` (see its options). */
  lease?: Pick<
    LeaseCoordinatorOptions,
    | 'leaseDurationMs'
    | 'renewIntervalMs'
    | 'takeIntervalMs'
    | 'maxLeasesPerWorker'
    | 'maxStealsPerTick'
    | 'maxClockDrift'
    | 'safetyMarginMs'
    | 'handoffTimeoutMs'
  >;
  /** The leader's timing, when it should differ from `lease` (each field defaults to the lease's). */
  leader?: Pick<LeaderElectorOptions, 'leaseDurationMs' | 'renewIntervalMs' | 'maxClockDrift' | 'safetyMarginMs'>;
  /**
   * OpenTelemetry metrics: recorded through `@opentelemetry/api`'s global meter provider (a no-op until you
   * register an SDK), or through the `meter` you pass; `false` records nothing.
   */
  metrics?: { meter?: Meter } | false;
  /** This worker's id, unique among the group's live processes. Default: host name, pid and a random suffix. */
  workerId?: string;
  /** The monotonic clock. Default: the process's. */
  clock?: Clock;
  /** The random source. Default: `Math.random`. */
  random?: Random;
  /** @internal Deliberately unsafe behaviours for the simulation's own tests. */
  unsafe?: ConsumerUnsafe;
}
