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
  /** The shard (partition) the batch comes from: its lease key (`<streamId>:<shardId>` in a multi-stream group). */
  readonly shardId: string;
  /** In a multi-stream group, the stream the batch comes from (`undefined` for one stream). */
  readonly streamId?: string | undefined;
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
   * A call whose target the stored checkpoint already covers in this tenure (an earlier call whose
   * outcome was unknown applied after all, with its writes) returns without calling `write` again.
   */
  checkpointWith(write: CheckpointWrite, position?: Position): Promise<void>;
}

/** When the runtime checkpoints on its own. */
export type CheckpointPolicy =
  | 'batch' // after every batch the handler finished (default)
  | 'manual' // only when the handler calls `ctx.checkpoint()`
  | { everyRecords?: number; everyMs?: number }; // after N records or N milliseconds, whichever comes first

/** What happens when the handler throws (or reports a failed record, see {@link BatchResponse}). */
export type FailurePolicy<R extends SourceRecord = SourceRecord> =
  | 'retry' // retry the batch with backoff until it succeeds or the lease is lost (default)
  | 'skip' // retry record by record; a record that fails `maxAttempts` times is reported and skipped
  | 'stop' // stop this shard (its lease is kept, nothing is checkpointed past the failure) and report
  | PoisonPolicy<R>; // bisect, give up after attempts or age, dead-letter: see PoisonPolicy

/**
 * Failure handling that keeps a shard flowing past records that always fail (poison records), in the
 * manner of AWS Lambda's Kinesis event source mapping (`BisectBatchOnFunctionError`,
 * `MaximumRetryAttempts`, `MaximumRecordAgeInSeconds`, an on-failure destination). Failed records are
 * retried with the backoff of `retry` until they are given up by `maxAttempts` or `maxRecordAgeMs`; a
 * record given up goes to `deadLetter` first, and is skipped only once that accepted it. Without either
 * limit nothing is ever given up (as `'retry'`, but with bisection the records before a poison record
 * are processed and checkpointed, and the shard waits at the poison record).
 */
export interface PoisonPolicy<R extends SourceRecord = SourceRecord> {
  /**
   * Split a failing call in two halves and handle each in order, down to a single record, so that the
   * records beside a poison record are processed (once each when they succeed) and only the poison
   * record is given up. A split is not a retry: it happens at once, without backoff. Default `false`.
   */
  bisect?: boolean;
  /**
   * Failed calls of the same records on their own (a single record with `bisect`, else what is left of
   * the batch) before they are given up. Default: no limit.
   */
  maxAttempts?: number;
  /**
   * A record that arrived in the stream (`approximateArrivalTimestampMs`, against the wall time of the
   * consumer's clock) longer ago than this is not retried after it failed: it is given up. It is always
   * handed to the handler at least once. Records without an arrival time never expire. Default: no limit.
   */
  maxRecordAgeMs?: number;
  /**
   * Called with records about to be given up, before they are skipped. It must store them somewhere
   * durable (a queue, a table). If it throws, it is called again with the retry backoff and the shard
   * waits (a `dead-letter-failed` event each time): a record is skipped only once this resolved. Without
   * it, records are skipped with a `record-skipped` event, an error log and a metric.
   */
  deadLetter?: (failure: FailedRecords<R>) => void | Promise<void>;
}

/** Why records were given up. */
export type GiveUpReason = 'max-attempts' | 'max-record-age';

/** Records given up under a {@link PoisonPolicy}, as its `deadLetter` handler receives them. */
export interface FailedRecords<R extends SourceRecord = SourceRecord> {
  /** The shard they come from. */
  readonly shardId: string;
  /** The records, in shard order (one with `bisect`, unless the handler kept failing on a whole run of them). */
  readonly records: readonly R[];
  /** Their positions, in the same order. */
  readonly positions: readonly Position[];
  /** The last error of the handler. */
  readonly error: Error;
  /** Failed calls of these records on their own. */
  readonly attempts: number;
  /** Which limit gave them up. */
  readonly reason: GiveUpReason;
  /** The lease's ownership epoch, as in {@link BatchContext}. */
  readonly fencingToken: number;
  /** Fires when the lease is lost: the records will be handed to the next owner, and may be given up again there. */
  readonly signal: AbortSignal;
}

/**
 * What `processBatch` may return to report a partial failure (Lambda's `ReportBatchItemFailures`): the
 * records before `failedAt` are done and may be checkpointed; the record at `failedAt` and every one
 * after it are handled again under the failure policy. Returning nothing means the whole batch succeeded.
 * A `failedAt` that is not the position of a record of the batch fails the whole batch.
 */
export interface BatchResponse {
  /** The position of the first record that failed. */
  readonly failedAt: Position;
  /** Why it failed, for events, logs and the dead-letter handler. */
  readonly error?: Error;
}

/** Where a shard with no checkpoint starts. */
export type InitialPosition = 'TRIM_HORIZON' | 'LATEST' | { atTimestamp: Date | number };

/** One stream of a multi-stream group. */
export interface StreamSpec<R extends SourceRecord = SourceRecord> {
  /**
   * The stream's name in lease keys: unique in the group, and new when the stream is deleted and created
   * again (its shard ids start over). Default: what `source.streamIdentity()` answers (for Kinesis
   * `<account>:<stream name>:<creation epoch seconds>`, KCL's form).
   */
  readonly id?: string;
  /** Reads the stream; shard ids it names must not contain `:`. */
  readonly source: ShardSource<R>;
  /** Where this stream's shards start when it joins the group. Default: the consumer's `initialPosition`. */
  readonly initialPosition?: InitialPosition;
}

/** The streams of a group: a fixed list, or a function the runtime calls again now and then. */
export type StreamList<R extends SourceRecord = SourceRecord> =
  | readonly StreamSpec<R>[]
  | (() => readonly StreamSpec<R>[] | Promise<readonly StreamSpec<R>[]>);

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

/** Options of {@link Consumer}. */
export interface ConsumerOptions<R extends SourceRecord = SourceRecord> {
  /** The consuming application: every worker of it shares its shards. */
  group: string;
  /** The stream. Give either `source` (one stream) or `streams` (a multi-stream group). */
  source?: ShardSource<R>;
  /**
   * A multi-stream group: the streams, each with its own source (its own client, so another account's
   * credentials), as a list or a function the runtime calls again every `streamRefreshIntervalMs` so that
   * streams can be added and removed while the group runs. Lease keys then name their stream
   * (`<streamId>:<shardId>`), each stream's leases are synced on their own, and balancing spans them all.
   */
  streams?: StreamList<R>;
  /** How often every worker calls `streams` again, when it is a function. Default `shardSyncIntervalMs`. */
  streamRefreshIntervalMs?: number;
  /**
   * How long the leases of a stream that left `streams` are kept (workers stop reading it at once): added
   * back within this time, it resumes at its checkpoints; after it, the leader deletes its leases. Default
   * 3,600,000 (an hour).
   */
  removedStreamGraceMs?: number;
  /** Where leases and checkpoints live (and the leader record, if it is also a `LeaderStore`). */
  storage: CheckpointStorage | (CheckpointStorage & LeaderStore);
  /** Where the leader record lives. Default: `storage`, when it implements `LeaderStore`. */
  leaderStore?: LeaderStore;
  /** Your code: called with each batch of a shard, one batch at a time per shard, in order. */
  processBatch: (records: readonly R[], context: BatchContext) => void | BatchResponse | Promise<void | BatchResponse>;
  /** When to checkpoint. Default `'batch'`. */
  checkpointing?: CheckpointPolicy;
  /** Where a shard with no checkpoint starts. Default `'LATEST'`, as in KCL. */
  initialPosition?: InitialPosition;
  /**
   * What a handler failure does: `'retry'` (default), `'skip'`, `'stop'`, or a {@link PoisonPolicy}
   * (`{ bisect, maxAttempts, maxRecordAgeMs, deadLetter }`).
   */
  onHandlerError?: FailurePolicy<R>;
  /**
   * Whether a handler failure is the fault of the records it was handed, so that the `'skip'` policy or a
   * {@link PoisonPolicy} may give them up. Return `false` for failures of the sink rather than of a record
   * (its schema or table missing, authentication, the connection): the shard then holds at the records and
   * retries them with the `retry` backoff, reported stalled (`shard-stalled`, reason `handler-error`),
   * and gives nothing up. Leasehold's own errors (`LeaseholdError`, in the error or its causes: a lost
   * lease, `StorageSchemaError`, `StorageUnavailableError`...) are never a record's fault, whatever this
   * says. Default: every other error is the record's.
   */
  isRecordError?: (error: Error) => boolean;
  /**
   * Records given up in a row (skipped, or dead-lettered then skipped), since a record last succeeded,
   * after which the `'skip'` policy or a {@link PoisonPolicy} stops giving records up: the shard holds
   * at the next record to give up (a run of records given up together counts whole), retries it with
   * the `retry` backoff, and is reported stalled (`shard-stalled`, reason `give-up-limit`, an error log);
   * it gives records up again once a record succeeds. A guard against a failure that is not the records'
   * emptying the stream into the dead-letter destination. A positive integer, or `Infinity` for no limit.
   * Default 10.
   */
  maxRecordsGivenUpInARow?: number;
  /**
   * Backoff of handler retries (and of a failing dead-letter handler). Default 100 ms doubling to 10 s;
   * `skip` gives up on a record after `maxAttempts` (3) attempts; a {@link PoisonPolicy} has its own.
   */
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
    | 'watchers'
    | 'wholeRosterUpTo'
    | 'failureDomain'
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
}
