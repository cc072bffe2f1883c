import type { KinesisClient } from '@aws-sdk/client-kinesis';
import { InvalidConfigError, InvalidInputError } from '@leasehold/core';
import { describe, expect, it } from 'vitest';
import { KinesisSource } from '../src/index.js';

const client = { send: async () => ({}) } as unknown as KinesisClient;

describe('KinesisSource options', () => {
  it('refuses options that name no stream, or two', () => {
    expect(() => new KinesisSource({ client })).toThrow(new InvalidConfigError('[source-kinesis] give exactly one of streamName and streamArn'));
    expect(() => new KinesisSource({ client, streamName: 'a', streamArn: 'arn:aws:kinesis:us-east-1:123456789012:stream/a' })).toThrow(InvalidConfigError);
  });

  it('refuses an invalid stream name or ARN, naming it', () => {
    expect(() => new KinesisSource({ client, streamName: 'bad name' })).toThrow(
      new InvalidConfigError('[source-kinesis] stream name "bad name" is not a valid Kinesis stream name'),
    );
    expect(() => new KinesisSource({ client, streamArn: 'arn:aws:s3:::bucket' })).toThrow(
      new InvalidConfigError('[source-kinesis] stream ARN "arn:aws:s3:::bucket" is not a Kinesis stream ARN'),
    );
  });

  it('refuses more than five GetRecords per second per shard', () => {
    expect(() => new KinesisSource({ client, streamName: 's', maxGetRecordsPerSecond: 6 })).toThrow(
      new InvalidConfigError('[source-kinesis] maxGetRecordsPerSecond must be a number above 0 and at most 5, got 6'),
    );
  });

  it('refuses a GetRecords limit above 10,000 records', () => {
    expect(() => new KinesisSource({ client, streamName: 's', maxRecordsPerCall: 10_001 })).toThrow(
      new InvalidConfigError('[source-kinesis] maxRecordsPerCall must be an integer at least 1 and at most 10000, got 10001'),
    );
  });

  it('refuses enhanced fan-out without a consumer name or ARN', () => {
    expect(() => new KinesisSource({ client, streamName: 's', enhancedFanOut: {} })).toThrow(
      new InvalidConfigError('[source-kinesis] enhancedFanOut.consumerName undefined is not a valid consumer name'),
    );
  });

  it('refuses an option it does not take, at the top or in enhancedFanOut, naming it and where it belongs', () => {
    expect(() => new KinesisSource({ client, streamName: 's', consumerName: 'app' } as never)).toThrow(
      new InvalidConfigError('[source-kinesis] KinesisSource has no option "consumerName"; did you mean enhancedFanOut.consumerName?'),
    );
    expect(() => new KinesisSource({ client, streamName: 's', maxRecords: 100 } as never)).toThrow(
      /^\[source-kinesis\] KinesisSource has no option "maxRecords"; it takes client, streamName, streamArn, maxRecordsPerCall,/,
    );
    expect(() => new KinesisSource({ client, streamName: 's', enhancedFanOut: { consumerName: 'app', consumerARN: 'arn' } as never })).toThrow(
      new InvalidConfigError('[source-kinesis] KinesisSource option enhancedFanOut has no option "consumerARN"; did you mean enhancedFanOut.consumerArn?'),
    );
  });

  it('refuses to read from a position that is neither a sequence number nor a sentinel', async () => {
    const read = new KinesisSource({ client, streamName: 's' }).read('shardId-000000000000', '12abc');
    await expect(read.next()).rejects.toThrow(
      new InvalidInputError('[source-kinesis] position "12abc" is not a sequence number, "<sequence>:<subSequence>" or a checkpoint sentinel'),
    );
  });
});

describe('KinesisSource.comparePositions', () => {
  const source = new KinesisSource({ client, streamName: 's' });
  const big = '49680702214316321283937214187507837864532547371802820610';
  const bigger = '49680702214316321283937214187507837864532547371802820611';

  it('orders 128-bit sequence numbers as integers, not as strings or doubles', () => {
    expect(source.comparePositions(big, bigger)).toBeLessThan(0);
    expect(source.comparePositions('9', '10')).toBeLessThan(0);
    expect(source.comparePositions(bigger, big)).toBeGreaterThan(0);
  });

  it('orders sub-records of one aggregated record by sub-sequence, before the whole record', () => {
    expect(source.comparePositions(`${big}:1`, `${big}:2`)).toBeLessThan(0);
    expect(source.comparePositions(`${big}:9`, big)).toBeLessThan(0);
    expect(source.comparePositions(big, `${bigger}:0`)).toBeLessThan(0);
    expect(source.comparePositions(big, big)).toBe(0);
  });
});
