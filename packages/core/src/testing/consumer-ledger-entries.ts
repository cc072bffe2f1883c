/**
 * What the consumer simulation's ledger (`consumer-checks.ts`) keeps of its world: each record put and
 * what became of it, each shard and its lineage, each stream and where it starts. The ledger fills these
 * in and checks the runtime against them; the simulation reads them to build its world.
 */
import type { Position } from '../storage.js';

/** Where a group without checkpoints starts, as the simulation resolved it. */
export type StartingPoint = { kind: 'TRIM_HORIZON' } | { kind: 'LATEST' } | { kind: 'AT_TIMESTAMP'; timestampMs: number };

/** One record the simulation put, and what became of it. */
export interface RecordEntry {
  readonly index: number;
  readonly partitionKey: string;
  /** The record's number among the records of its key, from 1: put order per key. */
  readonly n: number;
  readonly shardId: string;
  readonly position: Position;
  readonly arrivedWallMs: number;
  /** Virtual time of the first hand-over to `processBatch`, or `null`. */
  firstHandedAtMs: number | null;
  handovers: number;
  /** Whether the simulated handler always fails on this record. */
  readonly poison: boolean;
  /** Virtual time the handler first returned with this record done, or `null`. */
  succeededAtMs: number | null;
  /** Virtual time the dead-letter handler first accepted this record, or `null`. */
  deadLetteredAtMs: number | null;
  /** Virtual time the runtime first reported this record skipped, or `null`. */
  skippedAtMs: number | null;
  /** The last rewind that moved its lease back before it: it is owed again, or `null`. */
  replayOf: string | null;
  /** Virtual time of its first hand-over since that rewind, or `null`. */
  replayHandedAtMs: number | null;
  /** How many times a rewind moved its lease back before it. */
  rewinds: number;
  /** A rewind moved its lease past it before it was handled: the operator skipped it. */
  skippedByRewind: boolean;
}

/** One shard of a simulated stream, by the simulation's own account. */
export interface ShardEntry {
  /** The shard's lease key: its shard id, or in a multi-stream group `<streamId>:<shardId>`. */
  readonly shardId: string;
  /** The stream it belongs to (`''` when the group reads one stream). */
  readonly streamId: string;
  readonly parentShardIds: readonly string[];
  readonly childShardIds: string[];
  readonly createdAtMs: number;
  readonly createdWallMs: number;
  /** Whether the shard was made by resharding (not one of the stream's first shards). */
  readonly resharded: boolean;
  closedAtMs: number | null;
  trimmedAtMs: number | null;
  readonly records: number[];
}

/** One stream of the group, by the simulation's own account: where it starts, when it was born, whether it is listed. */
export interface StreamEntry {
  readonly streamId: string;
  readonly start: StartingPoint;
  /** Wall time of the first lease created for it, and the earliest `AT_TIMESTAMP` such a lease carried. */
  firstCreationWallMs: number | null;
  earliestCreatedTimestampMs: number | null;
  /** The `AT_TIMESTAMP` its first shards were created at, for `LATEST`: one pin per stream. */
  pinned: Position | null;
  /** Whether the group's list names it now, and since when it does not. */
  listed: boolean;
  unlistedAtMs: number | null;
  /** Removed and never to come back: nothing of it is owed any more. */
  removedForGood: boolean;
}
