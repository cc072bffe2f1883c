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
