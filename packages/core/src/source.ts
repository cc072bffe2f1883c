/**
 * The stream source contract: what a partitioned stream (Kinesis first) provides to the consumer
 * runtime. Core never interprets a position; it only asks the source to compare two of them.
 */
import type { Position } from './storage.js';

/** One partition of the stream (a Kinesis shard) and its lineage. */
export interface ShardInfo {
  /** The partition's id; also its lease key. */
  readonly shardId: string;
  /** The partitions this one was split or merged from (for Kinesis: parent and adjacent parent). */
  readonly parentShardIds: readonly string[];
  /** Whether the partition is closed to new records (it will reach its end). */
  readonly closed: boolean;
  /** Source-specific facts (for Kinesis: the hash key range), for logs and tools. */
  readonly details?: Readonly<Record<string, string>>;
}

/** One record as a source hands it over. */
export interface SourceRecord {
  /** The record's own position: checkpointing at it means "this record and all before it are done". */
  readonly position: Position;
  /** The record's payload. */
  readonly data: Uint8Array;
  /** The key the producer used to route the record; per-key order is what resharding preserves. */
  readonly partitionKey: string;
  /** When the stream received the record, in milliseconds since the epoch, if the source knows. */
  readonly approximateArrivalTimestampMs?: number | undefined;
}

/** A batch of records read from a partition. */
export interface RecordsBatch<R extends SourceRecord = SourceRecord> {
  readonly kind: 'records';
  /** The records, in partition order; may be empty when the source has nothing new. */
  readonly records: readonly R[];
  /** The position after this batch: checkpointing it means every record of the batch is done. */
  readonly position: Position;
  /** How far the reader is behind the tip of the partition, if the source knows. */
  readonly millisBehindLatest?: number | undefined;
  /**
   * Optional: the sum of the records' `data` lengths, when the source counted them while reading (the
   * `batch-processed` event's `bytes`); the runtime counts them itself otherwise.
   */
  readonly bytes?: number | undefined;
  /**
   * Optional: a short-lived, source-specific token from which a read of this partition starts right after
   * `position` without looking that position up again (for Kinesis, the `NextShardIterator` of the call
   * that returned this batch). A stopping owner hands it to the next one with the lease (DESIGN section 4,
   * "Releasing"); it is good for {@link ShardSource.resumeHintMaxAgeMs} after the batch was received.
   */
  readonly resumeHint?: string | undefined;
}

/** The end of a closed partition: every record was handed over; the children may start once all their parents end. */
export interface EndOfShard {
  readonly kind: 'end';
  /** The partitions that continue this one. */
  readonly childShardIds: readonly string[];
  /**
   * Optional: those children with all their parents, when the read itself named them (Kinesis does, with
   * `ChildShards` in a shard's last `GetRecords` or `SubscribeToShard` event). With one for every id of
   * `childShardIds`, the runtime creates the children's leases without listing the stream. A child's
   * `closed` may be out of date; only its id and parents are used.
   */
  readonly childShards?: readonly ShardInfo[] | undefined;
}

/** What reading a partition yields. */
export type ShardBatch<R extends SourceRecord = SourceRecord> = RecordsBatch<R> | EndOfShard;

/** Options for {@link ShardSource.read}. */
export interface ReadOptions {
  /** Cancels the read: the iterable ends (or throws an `AbortedError`) soon after it fires. */
  readonly signal?: AbortSignal | undefined;
  /**
   * A {@link RecordsBatch.resumeHint} of this source whose batch ended exactly at the read's `from`: the
   * source may start from it instead of looking `from` up. One it cannot use (malformed, of another
   * partition, expired, refused by the stream) is dropped and the read starts from `from`, so the records
   * read are the same either way.
   */
  readonly resumeHint?: string | undefined;
}

/** A partitioned stream that the consumer runtime reads. */
export interface ShardSource<R extends SourceRecord = SourceRecord> {
  /** Every partition of the stream, open and closed, with their parents. */
  listShards(options?: ReadOptions): Promise<ShardInfo[]>;

  /**
   * Reads one partition, starting after `from` (a checkpoint) or at a sentinel (`TRIM_HORIZON`, `LATEST`,
   * `AT_TIMESTAMP:<ms>`). Yields batches in order and, for a closed partition, ends with an
   * {@link EndOfShard}. While the partition has nothing new it yields an empty batch now and then (a
   * Kinesis `GetRecords` poll does, every time): that is how the runtime tells an idle reader from one
   * that stopped answering. A partition that no longer exists fails the read with a `SourceError` whose
   * code is `ERR_SHARD_NOT_FOUND`.
   */
  read(shardId: string, from: Position, options?: ReadOptions): AsyncIterable<ShardBatch<R>>;

  /**
   * Optional: how long after its batch was received a {@link RecordsBatch.resumeHint} may still be given
   * to {@link read}, in ms: below the stream's own expiry of the token, with a margin. Without it, or
   * with a source that gives no hints, every read starts from its position.
   */
  readonly resumeHintMaxAgeMs?: number | undefined;

  /** Negative, zero or positive as `a` is before, at or after `b` in one partition. */
  comparePositions(a: Position, b: Position): number;

  /**
   * Optional: whether the partition is certainly gone from the stream (trimmed past retention, or the
   * stream deleted). `true` only when the source is sure; `false` when it exists or when in doubt (a
   * listing that lags is not proof). The leader deletes an unfinished lease only on this answer; without
   * the method such a lease is reported and kept.
   */
  isShardGone?(shardId: string, options?: ReadOptions): Promise<boolean>;

  /**
   * Optional: the stream's name in the lease keys of a multi-stream group, unique across accounts and
   * regions, and new when the stream is deleted and created again (its shard ids start over, and the old
   * stream's finished leases must not stand for the new one's). A stream listed without an `id` needs it.
   */
  streamIdentity?(options?: ReadOptions): Promise<string>;
}
