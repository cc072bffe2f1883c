import type { KinesisClient } from '@aws-sdk/client-kinesis';
import { Checkpoint } from '@leasehold/core';
import type { RunningKinesisLocal } from '@leasehold/local-stack';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { userRecordsOf, userRecordsOfAll } from '../src/aggregation.js';
import { KinesisSource, MalformedRecordError } from '../src/index.js';
import { aggregate } from './kpl.js';
import { clientFor, createStream, putRecords, readRecords, startEmulator, text } from './support.js';

const SEQ = '49680702214316321283937214187507837864532547371802820610';

describe('KPL de-aggregation', () => {
  it('gives each user record its sub-sequence number, and the last one the whole record position', () => {
    const { data, partitionKey } = aggregate(['a', 'b', 'c'], '12345');
    const records = userRecordsOf({ SequenceNumber: SEQ, Data: data, PartitionKey: partitionKey }, 'shard', 'error', undefined);
    expect(records.map((record) => [Buffer.from(record.data).toString(), record.position, record.subSequenceNumber])).toEqual([
      ['a', `${SEQ}:0`, 0],
      ['b', `${SEQ}:1`, 1],
      ['c', SEQ, 2],
    ]);
    expect(records.map((record) => record.partitionKey)).toEqual(['pk-0', 'pk-1', 'pk-2']);
    expect(records.every((record) => record.aggregated && record.explicitHashKey === '12345' && record.sequenceNumber === SEQ)).toBe(true);
  });

  it('skips exactly the sub-records up to the one a checkpoint names', () => {
    const { data } = aggregate(['a', 'b', 'c', 'd']);
    const records = userRecordsOf({ SequenceNumber: SEQ, Data: data, PartitionKey: 'k' }, 'shard', 'error', { sequenceNumber: SEQ, subSequenceNumber: 1 });
    expect(records.map((record) => Buffer.from(record.data).toString())).toEqual(['c', 'd']);
  });

  it('converts an answer of plain and aggregated records in order, counting the payload bytes of what it hands over', () => {
    const SEQ2 = `${SEQ.slice(0, -1)}1`;
    const SEQ3 = `${SEQ.slice(0, -1)}2`;
    const arrival = new Date(1_700_000_000_000);
    const answer = [
      { SequenceNumber: SEQ, Data: Buffer.from('plain-1'), PartitionKey: 'p1', ApproximateArrivalTimestamp: arrival },
      { SequenceNumber: SEQ2, Data: aggregate(['aa', 'bbb']).data, PartitionKey: 'k' },
      { SequenceNumber: SEQ3, Data: Buffer.from('p3'), PartitionKey: 'p3' },
    ];

    const all = userRecordsOfAll(answer, 'shard', 'error', undefined);
    expect(all.records.map((record) => [Buffer.from(record.data).toString(), record.position, record.aggregated])).toEqual([
      ['plain-1', SEQ, false],
      ['aa', `${SEQ2}:0`, true],
      ['bbb', SEQ2, true],
      ['p3', SEQ3, false],
    ]);
    expect(all.records[0]).toMatchObject({ partitionKey: 'p1', approximateArrivalTimestampMs: arrival.getTime(), sequenceNumber: SEQ, subSequenceNumber: undefined, explicitHashKey: undefined });
    // The de-aggregated user records' bytes, not the aggregate's: 7 + 2 + 3 + 2.
    expect(all.bytes).toBe(14);

    // Resuming at a plain first record (AT_SEQUENCE_NUMBER of a record handed over whole) drops it alone.
    const resumed = userRecordsOfAll(answer, 'shard', 'error', { sequenceNumber: SEQ, subSequenceNumber: 0 });
    expect(resumed.records.map((record) => record.position)).toEqual([`${SEQ2}:0`, SEQ2, SEQ3]);
    expect(resumed.bytes).toBe(7);
    // A skip names the first record only: the same sequence number later in the answer is not dropped.
    expect(userRecordsOfAll(answer, 'shard', 'error', { sequenceNumber: SEQ3, subSequenceNumber: 0 }).records).toHaveLength(4);
  });

  it('refuses an aggregated record whose MD5 trailer does not match, naming it', () => {
    const { data } = aggregate(['a', 'b']);
    data.writeUInt8(data.readUInt8(data.length - 1) ^ 0xff, data.length - 1);
    expect(() => userRecordsOf({ SequenceNumber: SEQ, Data: data, PartitionKey: 'k' }, 'shardId-000000000007', 'error', undefined)).toThrow(
      new MalformedRecordError(
        `[source-kinesis] record "${SEQ}" of shard "shardId-000000000007" starts with the KPL magic number but cannot be de-aggregated: Invalid record checksum`,
      ),
    );
  });

  it('hands a record with a bad MD5 trailer over whole when told to, as the KCL does', () => {
    const { data } = aggregate(['a', 'b']);
    data.writeUInt8(data.readUInt8(data.length - 1) ^ 0xff, data.length - 1);
    const records = userRecordsOf({ SequenceNumber: SEQ, Data: data, PartitionKey: 'k' }, 'shard', 'deliver-whole', undefined);
    expect(records).toHaveLength(1);
    expect(records[0]).toMatchObject({ position: SEQ, aggregated: false, partitionKey: 'k' });
    expect(Buffer.from(records[0]!.data).equals(data)).toBe(true);
  });
});

describe('loading the de-aggregator', () => {
  it('loads aws-kinesis-agg only at the first aggregated record, so a stream without any never pays for it', () => {
    const script = fileURLToPath(new URL('./fixtures/deaggregator-load.ts', import.meta.url));
    const output = execFileSync(process.execPath, ['--import', 'tsx', script, aggregate(['a', 'b', 'c']).data.toString('hex')], { encoding: 'utf8' });

    expect(JSON.parse(output)).toEqual({ seen: [false, false, true], records: 3 });
  });
});

describe('aggregated records on kinesis-local', () => {
  let emulator: RunningKinesisLocal;
  let client: KinesisClient;
  beforeAll(async () => {
    emulator = await startEmulator();
    client = clientFor(emulator);
  });
  afterAll(async () => {
    client?.destroy();
    await emulator?.close();
  });

  const SHARD = 'shardId-000000000000';

  async function streamWithAggregates(): Promise<{ source: KinesisSource; sequenceNumbers: string[] }> {
    const { streamName } = await createStream(client, 1);
    const first = aggregate(['a0', 'a1', 'a2', 'a3', 'a4']);
    const second = aggregate(['b0', 'b1', 'b2', 'b3', 'b4']);
    const sequenceNumbers = await putRecords(client, streamName, [
      { Data: first.data, PartitionKey: first.partitionKey },
      { Data: Buffer.from('plain'), PartitionKey: 'p' },
      { Data: second.data, PartitionKey: second.partitionKey },
    ]);
    await putRecords(client, streamName, [{ Data: Buffer.from('last'), PartitionKey: 'p' }]);
    return { source: new KinesisSource({ client, streamName }), sequenceNumbers };
  }

  const ALL = ['a0', 'a1', 'a2', 'a3', 'a4', 'plain', 'b0', 'b1', 'b2', 'b3', 'b4', 'last'];

  it('reads every user record of aggregated and plain records in order', async () => {
    const { source, sequenceNumbers } = await streamWithAggregates();
    const { records } = await readRecords(source, SHARD, Checkpoint.TRIM_HORIZON, ALL.length);
    expect(records.map(text)).toEqual(ALL);
    expect(records[4]!.position).toBe(sequenceNumbers[0]);
    expect(records[6]!.position).toBe(`${sequenceNumbers[2]}:0`);
  });

  it('resumes in the middle of an aggregated record after exactly the sub-records already done', async () => {
    const { source, sequenceNumbers } = await streamWithAggregates();
    const { records } = await readRecords(source, SHARD, `${sequenceNumbers[2]}:2`, 3);
    expect(records.map(text)).toEqual(['b3', 'b4', 'last']);
  });

  it('resumes after the last sub-record of an aggregated record at the next record', async () => {
    const { source, sequenceNumbers } = await streamWithAggregates();
    const { records } = await readRecords(source, SHARD, sequenceNumbers[0]!, 7);
    expect(records.map(text)).toEqual(ALL.slice(5));
  });
});
