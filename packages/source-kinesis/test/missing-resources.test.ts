import {
  ExpiredIteratorException,
  ProvisionedThroughputExceededException,
  ResourceNotFoundException,
  type KinesisClient,
  type SubscribeToShardEvent,
} from '@aws-sdk/client-kinesis';
import { AbortedError, Checkpoint, InvalidInputError, SourceError } from '@leasehold/core';
import { describe, expect, it } from 'vitest';
import { ConsumerNotFoundError, KinesisSource, ShardNotFoundError, StreamNotFoundError } from '../src/index.js';
import { fakeClock, readRecords } from './support.js';

const SHARD = 'shardId-000000000005';
const STREAM_ARN = 'arn:aws:kinesis:us-east-1:123456789012:stream/orders';
const CONSUMER_ARN = `${STREAM_ARN}/consumer/billing:1700000000`;

// The wording of AWS for a shard and a stream that do not exist; the emulator's is tested on kinesis-local.
const shardMissing = (stream = 'orders'): ResourceNotFoundException =>
  new ResourceNotFoundException({ message: `Shard ${SHARD} in stream ${stream} under account 123456789012 does not exist`, $metadata: {} });
const streamMissing = (stream = 'orders'): ResourceNotFoundException =>
  new ResourceNotFoundException({ message: `Stream ${stream} under account 123456789012 not found.`, $metadata: {} });

type Handler = (input: Record<string, unknown>) => unknown;

/** A client that answers each command with its handler (by command name); a command without one is a test error. */
function scriptedClient(handlers: Record<string, Handler>): { client: KinesisClient; calls: string[] } {
  const calls: string[] = [];
  const client = {
    send: async (command: { constructor: { name: string }; input: Record<string, unknown> }) => {
      const name = command.constructor.name.replace(/Command$/, '');
      calls.push(name);
      const handler = handlers[name];
      if (handler === undefined) throw new Error(`unexpected ${name}`);
      return handler(command.input);
    },
  } as unknown as KinesisClient;
  return { client, calls };
}

const thrower = (error: Error): Handler => () => {
  throw error;
};

const streamThere: Handler = () => ({ StreamDescriptionSummary: { StreamARN: STREAM_ARN, StreamStatus: 'ACTIVE' } });

describe('KinesisSource.isShardGone', () => {
  it('is true when Kinesis says the shard does not exist and the stream is there', async () => {
    const { client, calls } = scriptedClient({ GetShardIterator: thrower(shardMissing()), DescribeStreamSummary: streamThere });
    const source = new KinesisSource({ client, streamName: 'orders' });

    await expect(source.isShardGone(SHARD)).resolves.toBe(true);
    expect(calls).toEqual(['GetShardIterator', 'DescribeStreamSummary']);
  });

  it('is false when the shard has an iterator, closed or open', async () => {
    const { client, calls } = scriptedClient({ GetShardIterator: () => ({ ShardIterator: 'AAAA' }) });
    const source = new KinesisSource({ client, streamArn: STREAM_ARN });

    await expect(source.isShardGone(SHARD)).resolves.toBe(false);
    expect(calls).toEqual(['GetShardIterator']);
  });

  it('throws a StreamNotFoundError, never true, when the stream is what Kinesis cannot find', async () => {
    const { client, calls } = scriptedClient({ GetShardIterator: thrower(streamMissing()) });
    const source = new KinesisSource({ client, streamName: 'orders' });

    await expect(source.isShardGone(SHARD)).rejects.toThrow(new StreamNotFoundError('[source-kinesis] stream "orders" was not found'));
    expect(calls).toEqual(['GetShardIterator']);
  });

  it('does not read a missing stream whose name contains "shard" as a missing shard', async () => {
    const { client } = scriptedClient({ GetShardIterator: thrower(streamMissing('shard-events')) });
    const source = new KinesisSource({ client, streamName: 'shard-events' });

    await expect(source.isShardGone(SHARD)).rejects.toBeInstanceOf(StreamNotFoundError);
  });

  it('throws a StreamNotFoundError when the shard is missing because the stream went away meanwhile', async () => {
    const { client } = scriptedClient({ GetShardIterator: thrower(shardMissing()), DescribeStreamSummary: thrower(streamMissing()) });
    const source = new KinesisSource({ client, streamName: 'orders' });

    await expect(source.isShardGone(SHARD)).rejects.toBeInstanceOf(StreamNotFoundError);
  });

  it('throws a SourceError naming the failure when Kinesis cannot answer (throttled, unreachable)', async () => {
    const throttled = new ProvisionedThroughputExceededException({ message: 'Rate exceeded for shard', $metadata: {} });
    const unreachable = Object.assign(new Error('connect ECONNREFUSED 10.0.0.1:443'), { code: 'ECONNREFUSED' });
    const source = (error: Error): KinesisSource =>
      new KinesisSource({ client: scriptedClient({ GetShardIterator: thrower(error) }).client, streamName: 'orders' });

    await expect(source(throttled).isShardGone(SHARD)).rejects.toThrow(
      new SourceError('ERR_SOURCE', '[source-kinesis] GetShardIterator on stream "orders" failed (ProvisionedThroughputExceededException): Rate exceeded for shard'),
    );
    await expect(source(unreachable).isShardGone(SHARD)).rejects.toMatchObject({ code: 'ERR_SOURCE' });
  });

  it('throws an AbortedError when its signal fired, and an InvalidInputError for a malformed shard id', async () => {
    const { client, calls } = scriptedClient({});
    const source = new KinesisSource({ client, streamName: 'orders' });

    await expect(source.isShardGone(SHARD, { signal: AbortSignal.abort() })).rejects.toBeInstanceOf(AbortedError);
    await expect(source.isShardGone('shard 5')).rejects.toThrow(
      new InvalidInputError('[source-kinesis] shard id "shard 5" is not a valid shard id'),
    );
    expect(calls).toEqual([]);
  });
});

describe('reading a shard that does not exist', () => {
  const failureOf = (read: Promise<unknown>): Promise<unknown> => read.then(() => 'the read ended without an error', (error: unknown) => error);

  it('GetShardIterator, GetRecords and a fresh iterator after expiry all end the read with a ShardNotFoundError', async () => {
    const atStart = scriptedClient({ GetShardIterator: thrower(shardMissing()) });
    const inGetRecords = scriptedClient({ GetShardIterator: () => ({ ShardIterator: 'AAAA' }), GetRecords: thrower(shardMissing()) });
    let iterators = 0;
    const afterExpiry = scriptedClient({
      GetShardIterator: () => {
        if (++iterators > 1) throw shardMissing();
        return { ShardIterator: 'AAAA' };
      },
      GetRecords: thrower(new ExpiredIteratorException({ message: 'Iterator expired', $metadata: {} })),
    });

    for (const { client } of [atStart, inGetRecords, afterExpiry]) {
      const source = new KinesisSource({ client, streamName: 'orders', clock: fakeClock() });
      const error = await failureOf(readRecords(source, SHARD, Checkpoint.TRIM_HORIZON, 1));
      expect(error).toEqual(new ShardNotFoundError(`[source-kinesis] shard "${SHARD}" was not found in stream "orders"`));
      expect(error).toMatchObject({ code: 'ERR_SHARD_NOT_FOUND' });
    }
  });

  it('SubscribeToShard ends the read with a ShardNotFoundError, whether refused at once or sent as an event', async () => {
    const refused = scriptedClient({ SubscribeToShard: thrower(shardMissing()) });
    const inStream = scriptedClient({
      SubscribeToShard: () => ({
        EventStream: (async function* () {
          yield { SubscribeToShardEvent: { Records: [], ContinuationSequenceNumber: '1', MillisBehindLatest: 0 } satisfies SubscribeToShardEvent };
          throw shardMissing();
        })(),
      }),
    });

    for (const { client } of [refused, inStream]) {
      const source = new KinesisSource({ client, streamArn: STREAM_ARN, enhancedFanOut: { consumerArn: CONSUMER_ARN }, clock: fakeClock() });
      const error = await failureOf(readRecords(source, SHARD, Checkpoint.TRIM_HORIZON, 1));
      expect(error).toEqual(new ShardNotFoundError(`[source-kinesis] shard "${SHARD}" was not found in stream "${STREAM_ARN}"`));
    }
  });

  it('a missing stream consumer is a ConsumerNotFoundError, not a missing stream', async () => {
    const message = `Consumer ${CONSUMER_ARN} not found.`;
    const { client } = scriptedClient({ SubscribeToShard: thrower(new ResourceNotFoundException({ message, $metadata: {} })) });
    const source = new KinesisSource({ client, streamArn: STREAM_ARN, enhancedFanOut: { consumerArn: CONSUMER_ARN }, clock: fakeClock() });

    const error = await failureOf(readRecords(source, SHARD, Checkpoint.TRIM_HORIZON, 1));

    expect(error).toEqual(
      new ConsumerNotFoundError(`[source-kinesis] stream consumer "${CONSUMER_ARN}" was not found on stream "${STREAM_ARN}": ${message}`),
    );
    expect(error).toMatchObject({ code: 'ERR_CONSUMER_NOT_FOUND' });
  });

  it('a missing stream whose name contains "shard" is a StreamNotFoundError', async () => {
    const { client } = scriptedClient({ GetShardIterator: thrower(streamMissing('shard-events')) });
    const source = new KinesisSource({ client, streamName: 'shard-events', clock: fakeClock() });

    await expect(readRecords(source, SHARD, Checkpoint.TRIM_HORIZON, 1)).rejects.toThrow(
      new StreamNotFoundError('[source-kinesis] stream "shard-events" was not found'),
    );
  });
});
