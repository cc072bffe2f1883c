import type { SourceRecord } from '@leasehold/core';

/** A user record read from a Kinesis shard: a plain record, or one sub-record of a KPL aggregated record. */
export interface KinesisRecord extends SourceRecord {
  /**
   * `<sequenceNumber>` for a plain record and for the last sub-record of an aggregated record;
   * `<sequenceNumber>:<subSequenceNumber>` for the other sub-records.
   */
  readonly position: string;
  /** The sequence number Kinesis gave the (possibly aggregated) record. */
  readonly sequenceNumber: string;
  /** The index of this user record inside its aggregated record, or `undefined` for a plain record. */
  readonly subSequenceNumber: number | undefined;
  /** The explicit hash key the producer routed the user record with, if any. */
  readonly explicitHashKey: string | undefined;
  /** Whether the record came out of a KPL aggregated record. */
  readonly aggregated: boolean;
}
