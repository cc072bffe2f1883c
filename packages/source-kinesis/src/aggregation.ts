/**
 * De-aggregation of KPL aggregated records (magic number, protobuf `AggregatedRecord`, MD5 trailer), with
 * aws-kinesis-agg doing the decoding and checking the checksum.
 */
import { createRequire } from 'node:module';
import type { _Record } from '@aws-sdk/client-kinesis';
import { describeValue } from '@leasehold/core/adapter';
import { MalformedRecordError } from './errors.js';
import type { KinesisRecord } from './record.js';
import { kinesisPosition } from './positions.js';

/** The parts of aws-kinesis-agg that are used here (its own typings need aws-sdk v2 and aws-lambda). */
interface DeaggregatedUserRecord {
  partitionKey: string;
  explicitPartitionKey?: string | undefined;
  sequenceNumber: string;
  subSequenceNumber?: number | undefined;
  data: string;
}
interface AwsKinesisAgg {
  deaggregate(
    record: { data: Uint8Array; partitionKey: string; sequenceNumber: string; explicitPartitionKey?: string | undefined },
    computeChecksums: boolean,
    perRecord: (error: Error | null, userRecord?: DeaggregatedUserRecord) => void,
    afterRecord: (error?: Error, failedUserRecord?: DeaggregatedUserRecord) => void,
  ): void;
}

// Loaded at the first record that carries the KPL's magic number: the module and protobufjs under it add
// about 11 MB to a worker's RSS, which a stream without aggregated records never needs.
let agg: AwsKinesisAgg | undefined;
const deaggregator = (): AwsKinesisAgg => (agg ??= createRequire(import.meta.url)('aws-kinesis-agg') as AwsKinesisAgg);

const MAGIC = [0xf3, 0x89, 0x9a, 0xc2];
const MD5_BYTES = 16;

/** What to do with a record that starts with the KPL magic number but does not decode: report it, or hand it over whole. */
export type MalformedAggregatePolicy = 'error' | 'deliver-whole';

/** Whether the payload starts with the KPL aggregation magic number. */
export function looksAggregated(data: Uint8Array): boolean {
  return (
    data.length > MAGIC.length + MD5_BYTES &&
    data[0] === MAGIC[0] &&
    data[1] === MAGIC[1] &&
    data[2] === MAGIC[2] &&
    data[3] === MAGIC[3]
  );
}

/** Where a read resumes inside an aggregated record: sub-records up to `subSequenceNumber` of `sequenceNumber` are skipped. */
export interface SkipThrough {
  readonly sequenceNumber: string;
  readonly subSequenceNumber: number;
}

/**
 * The user records of one Kinesis record, in order, appended to `into` (and returned). A plain record is
 * one user record at `<seq>`; an aggregated one gives `<seq>:<i>` for each sub-record but the last, which
 * gives `<seq>` (the whole record is done). Sub-records covered by `skip` are dropped.
 */
export function userRecordsOf(
  record: _Record,
  shardId: string,
  policy: MalformedAggregatePolicy,
  skip: SkipThrough | undefined,
  into: KinesisRecord[] = [],
): KinesisRecord[] {
  const sequenceNumber = record.SequenceNumber ?? '';
  const data = record.Data ?? new Uint8Array(0);
  const arrival = record.ApproximateArrivalTimestamp?.getTime();
  const skipping = skip !== undefined && skip.sequenceNumber === sequenceNumber;
  if (!looksAggregated(data)) return whole(record, sequenceNumber, data, arrival, skipping, into);

  const decoded: DeaggregatedUserRecord[] = [];
  let failure: Error | undefined;
  deaggregator().deaggregate(
    { data, partitionKey: record.PartitionKey ?? '', sequenceNumber },
    true,
    (error, userRecord) => {
      if (error) failure ??= error;
      else if (userRecord) decoded.push(userRecord);
    },
    (error) => {
      if (error) failure ??= error;
    },
  );
  if (failure !== undefined) {
    if (policy === 'error') {
      throw new MalformedRecordError(
        `[source-kinesis] record ${describeValue(sequenceNumber)} of shard ${describeValue(shardId)} starts with the KPL magic number but cannot be de-aggregated: ${failure.message}`,
        { cause: failure },
      );
    }
    return whole(record, sequenceNumber, data, arrival, skipping, into);
  }

  const last = decoded.length - 1;
  decoded.forEach((user, index) => {
    if (skipping && index <= skip.subSequenceNumber) return;
    into.push({
      position: index === last ? sequenceNumber : kinesisPosition(sequenceNumber, index),
      data: Buffer.from(user.data, 'base64'),
      partitionKey: user.partitionKey,
      approximateArrivalTimestampMs: arrival,
      sequenceNumber,
      subSequenceNumber: index,
      explicitHashKey: user.explicitPartitionKey ?? undefined,
      aggregated: true,
    });
  });
  return into;
}

/** The record as it is: a plain record, or an aggregate handed over whole by the 'deliver-whole' policy. */
function whole(record: _Record, sequenceNumber: string, data: Uint8Array, arrival: number | undefined, skipping: boolean, into: KinesisRecord[]): KinesisRecord[] {
  if (skipping) return into;
  into.push({
    position: sequenceNumber,
    data,
    partitionKey: record.PartitionKey ?? '',
    approximateArrivalTimestampMs: arrival,
    sequenceNumber,
    subSequenceNumber: undefined,
    explicitHashKey: undefined,
    aggregated: false,
  });
  return into;
}

/** The user records of one answer (or one event) and their payload bytes. */
export interface UserRecords {
  readonly records: KinesisRecord[];
  /** The sum of the records' `data` lengths: the prefetch bound's count and the batch's `bytes`. */
  readonly bytes: number;
}

const EMPTY = new Uint8Array(0);

/**
 * The user records of one answer's (or one event's) records, in order, with their payload bytes counted
 * on the way; `skip` applies to the first record only (an AT_SEQUENCE_NUMBER read returns the partly done
 * record first). A plain record, the common case, is converted here in one pass, without a call of its
 * own: in a fresh process this code runs interpreted for its first thousands of records. A function of
 * its own, so that a reader's suspended frame keeps none of the records it decoded.
 */
export function userRecordsOfAll(rawRecords: readonly _Record[], shardId: string, malformed: MalformedAggregatePolicy, skip: SkipThrough | undefined): UserRecords {
  const records: KinesisRecord[] = [];
  let bytes = 0;
  for (let i = 0; i < rawRecords.length; i++) {
    const raw = rawRecords[i]!;
    const data = raw.Data ?? EMPTY;
    if (data[0] === MAGIC[0] && looksAggregated(data)) {
      const before = records.length;
      userRecordsOf(raw, shardId, malformed, i === 0 ? skip : undefined, records);
      for (let j = before; j < records.length; j++) bytes += records[j]!.data.byteLength;
      continue;
    }
    const sequenceNumber = raw.SequenceNumber ?? '';
    // Read from inside this record, which is not an aggregate: it was handed over whole already.
    if (i === 0 && skip !== undefined && skip.sequenceNumber === sequenceNumber) continue;
    records.push({
      position: sequenceNumber,
      data,
      partitionKey: raw.PartitionKey ?? '',
      approximateArrivalTimestampMs: raw.ApproximateArrivalTimestamp?.getTime(),
      sequenceNumber,
      subSequenceNumber: undefined,
      explicitHashKey: undefined,
      aggregated: false,
    });
    bytes += data.byteLength;
  }
  return { records, bytes };
}
