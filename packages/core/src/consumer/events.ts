/**
 * The events a consumer emits, apart from the consumer so that the metrics name them without importing it.
 */
import type { LossReason } from '../lease/events.js';
import type { Position } from '../storage.js';
import type { ShardSyncReport } from './leader-duties.js';
import type { GiveUpReason } from './options.js';
import type { HoldReason } from './shard-pump.js';
import type { MultiStreamSyncReport } from './stream-sync.js';

/** The events of a {@link Consumer}: everything that happens, typed. */
export interface ConsumerEvents {
  'shard-started': { shardId: string; position: Position; fencingToken: number };
  'shard-ended': { shardId: string; childShardIds: readonly string[] };
  'lease-lost': { shardId: string; reason: LossReason };
  'lease-handed-off': { shardId: string; to: string };
  'batch-processed': { shardId: string; records: number; bytes: number; millisBehindLatest: number | undefined; durationMs: number };
  checkpointed: { shardId: string; position: Position };
  'handler-failed': { shardId: string; attempt: number; error: Error };
  /** A failing call was split in two halves, handled in order (`onHandlerError: { bisect: true }`). */
  'batch-bisected': { shardId: string; records: number; left: number; right: number; error: Error };
  /** Records that failed are handed to the handler again after `delayMs`, for their `attempt`th time. */
  'batch-retried': { shardId: string; records: number; attempt: number; delayMs: number };
  /** The dead-letter handler accepted records given up; they are skipped next. */
  'records-dead-lettered': { shardId: string; positions: readonly Position[]; attempts: number; reason: GiveUpReason; error: Error };
  /** The dead-letter handler failed: the shard waits, and it is called again after `retryInMs`. */
  'dead-letter-failed': { shardId: string; positions: readonly Position[]; attempt: number; error: Error; retryInMs: number };
  /**
   * A record was given up and skipped: after `attempts` failures or past its age (`reason`), and, with a
   * dead-letter handler, only after it accepted the record (`deadLettered`).
   */
  'record-skipped': { shardId: string; position: Position; error: Error; reason: GiveUpReason; attempts: number; deadLettered: boolean };
  'shard-stopped': { shardId: string; error: Error };
  /**
   * An operator's rewind moved this shard's checkpoint (see `applyRewind`): its batch in flight was
   * finished, and it is read again from `to`; or, with `waitsForParent`, its lease was given back, since a
   * parent must be read again first.
   */
  'shard-rewound': { shardId: string; rewindId: string; from: Position | null; to: Position; waitsForParent: boolean };
  /**
   * Reading a shard failed (the source, or the shard's end could not be recorded). The runtime reads it
   * again after `retryInMs`, or, when the shard is gone or after repeated failures (`released`), gives the
   * lease back so that the group tries again elsewhere.
   */
  'shard-failed': { shardId: string; error: Error; attempt: number; retryInMs: number | undefined; released: boolean };
  /**
   * A shard this worker holds made no progress for `stallAfterMs`: a handler call that does not return
   * (`handler`), a source that does not answer (`reader`), or nobody reading it (`failed`: its reads keep
   * failing, or the `stop` policy stopped it). Reported at once, with the `error`, when the `'skip'` or a
   * poison policy holds at records instead of giving them up: their handler's error is not their fault
   * (`handler-error`, see `isRecordError`), or `maxRecordsGivenUpInARow` were given up in a row
   * (`give-up-limit`). Also written on the lease (`leasehold.stalledSince`, `leasehold.stalledReason`)
   * for `leasehold status`.
   */
  'shard-stalled': { shardId: string; reason: StallReason; sinceMs: number; error?: Error };
  /** A stalled shard progresses again. */
  'shard-resumed': { shardId: string };
  /** A lease of the group cannot be read back; nobody takes it and its children wait until an operator repairs or deletes it. */
  'lease-corrupt': { shardId: string; error: Error };
  /** The worker cannot go on (a record of a newer format: upgrade it); it stops by itself. */
  fatal: { error: Error };
  'leader-elected': { term: number };
  'leader-demoted': { term: number };
  /** One round of the leader's shard sync (in a multi-stream group, one per stream, with its `streamId`). */
  'shard-sync': ShardSyncReport;
  /** A multi-stream group's whole round: each stream's sync, failures, streams removed and their leases deleted. */
  'streams-sync': MultiStreamSyncReport;
  /** This worker learnt of a stream of a multi-stream group (at start, or when `streams` returned it). */
  'stream-added': { streamId: string };
  /** A stream left this worker's list: it stops reading it and gives its leases back (kept for `removedStreamGraceMs`). */
  'stream-removed': { streamId: string };
  error: { error: Error; operation: string };
}

/** Why a shard stalled (see the `shard-stalled` event). */
export type StallReason = 'handler' | 'reader' | 'failed' | HoldReason;
