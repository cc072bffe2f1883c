/**
 * Positions of a Kinesis shard: `<sequenceNumber>` (the whole record is done) or
 * `<sequenceNumber>:<subSequenceNumber>` (sub-records 0..n of an aggregated record are done), and core's
 * sentinels. Each maps to the starting point of a shard iterator or subscription.
 */
import { Checkpoint, InvalidInputError, type Position } from '@leasehold/core';
import { describeValue } from '@leasehold/core/adapter';
import type { SkipThrough } from './aggregation.js';

/** Where a read starts, in Kinesis's terms. */
export type StartingPoint =
  | { readonly type: 'TRIM_HORIZON' }
  | { readonly type: 'LATEST' }
  | { readonly type: 'AT_TIMESTAMP'; readonly timestamp: Date }
  | { readonly type: 'AFTER_SEQUENCE_NUMBER'; readonly sequenceNumber: string }
  | { readonly type: 'AT_SEQUENCE_NUMBER'; readonly sequenceNumber: string; readonly skip: SkipThrough }
  | { readonly type: 'SHARD_END' };

const POSITION = /^(\d{1,128})(?::(\d{1,10}))?$/;

/**
 * The position of a user record: `<sequenceNumber>` when the whole Kinesis record is done (a plain record,
 * or the last sub-record of an aggregate), `<sequenceNumber>:<subSequenceNumber>` when sub-records
 * 0..`subSequenceNumber` of an aggregated record are done and the rest are not.
 */
export function kinesisPosition(sequenceNumber: string, subSequenceNumber?: number): Position {
  if (!/^\d{1,128}$/.test(sequenceNumber)) {
    throw new InvalidInputError(`[source-kinesis] sequence number ${describeValue(sequenceNumber)} is not a Kinesis sequence number`);
  }
  if (subSequenceNumber === undefined) return sequenceNumber;
  if (!Number.isSafeInteger(subSequenceNumber) || subSequenceNumber < 0 || subSequenceNumber > 9_999_999_999) {
    throw new InvalidInputError(`[source-kinesis] sub-sequence number ${describeValue(String(subSequenceNumber))} of record ${describeValue(sequenceNumber)} is not a whole number of at most 10 digits`);
  }
  return `${sequenceNumber}:${subSequenceNumber}`;
}

/**
 * The record a numeric position names, and how far into it (`subSequenceNumber`, or `undefined` when the
 * whole record is done); `undefined` for a sentinel (`TRIM_HORIZON`, `LATEST`, `AT_TIMESTAMP:<ms>`,
 * `SHARD_END`). Anything else is refused with an `InvalidInputError`.
 */
export function kinesisPositionParts(position: Position): { readonly sequenceNumber: string; readonly subSequenceNumber: number | undefined } | undefined {
  const start = startingPointOf(position);
  if (start.type === 'AFTER_SEQUENCE_NUMBER') return { sequenceNumber: start.sequenceNumber, subSequenceNumber: undefined };
  if (start.type === 'AT_SEQUENCE_NUMBER') return { sequenceNumber: start.sequenceNumber, subSequenceNumber: start.skip.subSequenceNumber };
  return undefined;
}

/** The starting point of a read that begins after `position`. */
export function startingPointOf(position: Position): StartingPoint {
  if (position === Checkpoint.TRIM_HORIZON) return { type: 'TRIM_HORIZON' };
  if (position === Checkpoint.LATEST) return { type: 'LATEST' };
  if (position === Checkpoint.SHARD_END) return { type: 'SHARD_END' };
  const timestampMs = Checkpoint.timestampOf(position);
  if (timestampMs !== undefined) return { type: 'AT_TIMESTAMP', timestamp: new Date(timestampMs) };
  const match = POSITION.exec(position);
  if (!match) {
    throw new InvalidInputError(`[source-kinesis] position ${describeValue(position)} is not a sequence number, "<sequence>:<subSequence>" or a checkpoint sentinel`);
  }
  const sequenceNumber = match[1] as string;
  if (match[2] === undefined) return { type: 'AFTER_SEQUENCE_NUMBER', sequenceNumber };
  return { type: 'AT_SEQUENCE_NUMBER', sequenceNumber, skip: { sequenceNumber, subSequenceNumber: Number(match[2]) } };
}

/** The sub-records to skip when a read starts at `start`. */
export function skipOf(start: StartingPoint): SkipThrough | undefined {
  return start.type === 'AT_SEQUENCE_NUMBER' ? start.skip : undefined;
}
