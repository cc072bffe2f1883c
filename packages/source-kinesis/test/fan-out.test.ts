import {
  DescribeStreamConsumerCommand,
  DescribeStreamSummaryCommand,
  GetRecordsCommand,
  GetShardIteratorCommand,
  RegisterStreamConsumerCommand,
  SubscribeToShardCommand,
  type KinesisClient,
  type SubscribeToShardCommandInput,
  type SubscribeToShardEvent,
} from '@aws-sdk/client-kinesis';
import { AbortedError, Checkpoint, type ShardBatch } from '@leasehold/core';
import { seededRandom } from '@leasehold/core/testing';
import type { RunningKinesisLocal } from '@leasehold/local-stack';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConsumerNotFoundError, KinesisSource, type KinesisRecord } from '../src/index.js';
import { clientFor, createStream, fakeClock, putRecords, readRecords, startEmulator, text, textEntries } from './support.js';

const CONSUMER_ARN = 'arn:aws:kinesis:us-east-1:000000000000:stream/s/consumer/c:1';
const SEQ = (n: number): string => `4968070221431632128393721418750${String(n).padStart(25, '0')}`;

function recordOf(n: number): NonNullable<SubscribeToShardEvent['Records']>[number] {
  return { SequenceNumber: SEQ(n), Data: Buffer.from(`r-${n}`), PartitionKey: 'k', ApproximateArrivalTimestamp: new Date(0) };
}

/** A client whose SubscribeToShard replays recorded subscriptions, one per call; an Error entry breaks the stream there. */
function replayingClient(
  subscriptions: (SubscribeToShardEvent | Error)[][],
  clock = fakeClock(),
): { client: KinesisClient; inputs: SubscribeToShardCommandInput[]; times: number[] } {
  const inputs: SubscribeToShardCommandInput[] = [];
  const times: number[] = [];
  const client = {
    send: async (command: unknown) => {
      if (!(command instanceof SubscribeToShardCommand)) throw new Error(`unexpected ${String(command)}`);
      inputs.push(command.input);
      times.push(clock.now());
      const events = subscriptions.shift() ?? [];
      return {
        EventStream: (async function* () {
          for (const event of events) {
            if (event instanceof Error) throw event;
            yield { SubscribeToShardEvent: event };
          }
        })(),
      };
    },
  } as unknown as KinesisClient;
  return { client, inputs, times };
}

async function drain(source: KinesisSource, from: string): Promise<ShardBatch<KinesisRecord>[]> {
  const batches: ShardBatch<KinesisRecord>[] = [];
  for await (const batch of source.read('shardId-000000000000', from)) batches.push(batch);
  return batches;
}

describe('enhanced fan-out on recorded events', () => {
  it('ends the shard at the event without a continuation sequence number, with its child shards', async () => {
    const { client } = replayingClient([
      [
        { Records: [recordOf(1), recordOf(2)], ContinuationSequenceNumber: SEQ(2), MillisBehindLatest: 10 },
        { Records: [recordOf(3)], ContinuationSequenceNumber: undefined, MillisBehindLatest: 0, ChildShards: [
          { ShardId: 'shardId-000000000001', ParentShards: ['shardId-000000000000'], HashKeyRange: { StartingHashKey: '0', EndingHashKey: '1' } },
          { ShardId: 'shardId-000000000002', ParentShards: ['shardId-000000000000'], HashKeyRange: { StartingHashKey: '2', EndingHashKey: '3' } },
        ] },
      ],
    ]);
    const source = new KinesisSource({ client, streamName: 's', enhancedFanOut: { consumerArn: CONSUMER_ARN }, clock: fakeClock() });

    const batches = await drain(source, Checkpoint.TRIM_HORIZON);

    expect(batches.map((batch) => (batch.kind === 'records' ? batch.records.map(text) : batch.childShardIds))).toEqual([
      ['r-1', 'r-2'],
      ['r-3'],
      ['shardId-000000000001', 'shardId-000000000002'],
    ]);
    expect(batches[0]).toMatchObject({ position: SEQ(2), millisBehindLatest: 10 });
    // With their parents, so that core's runtime creates their leases without listing the stream.
    expect(batches.at(-1)).toEqual({
      kind: 'end',
      childShardIds: ['shardId-000000000001', 'shardId-000000000002'],
      childShards: [
        { shardId: 'shardId-000000000001', parentShardIds: ['shardId-000000000000'], closed: false, details: { startingHashKey: '0', endingHashKey: '1' } },
        { shardId: 'shardId-000000000002', parentShardIds: ['shardId-000000000000'], closed: false, details: { startingHashKey: '2', endingHashKey: '3' } },
      ],
    });
  });

  it('hands over a "nothing new" batch for an event without records, as polling does, with the position so far', async () => {
    // Core's runtime takes its time-based checkpoint on such a batch: an idle shard must not hold it back.
    const { client } = replayingClient([
      [
        { Records: [recordOf(1)], ContinuationSequenceNumber: SEQ(1), MillisBehindLatest: 20 },
        { Records: [], ContinuationSequenceNumber: SEQ(1), MillisBehindLatest: 0 },
        { Records: [recordOf(2)], ContinuationSequenceNumber: undefined, MillisBehindLatest: 0, ChildShards: [] },
      ],
    ]);
    const source = new KinesisSource({
      client: { send: async () => ({ Shards: [] }) } as unknown as KinesisClient,
      streamName: 's',
      enhancedFanOut: { consumerArn: CONSUMER_ARN, client },
      clock: fakeClock(),
    });

    const batches = await drain(source, Checkpoint.TRIM_HORIZON);

    expect(batches.map((batch) => (batch.kind === 'records' ? { records: batch.records.map(text), position: batch.position, millisBehindLatest: batch.millisBehindLatest } : batch))).toEqual([
      { records: ['r-1'], position: SEQ(1), millisBehindLatest: 20 },
      { records: [], position: SEQ(1), millisBehindLatest: 0 },
      { records: ['r-2'], position: SEQ(2), millisBehindLatest: 0 },
      { kind: 'end', childShardIds: [], childShards: [] },
    ]);
  });

  it('subscribes again after the last continuation when a subscription ends or fails', async () => {
    const broken = Object.assign(new Error('Internal failure'), { name: 'InternalFailureException' });
    const clock = fakeClock();
    const { client, inputs, times } = replayingClient([
      [{ Records: [recordOf(1)], ContinuationSequenceNumber: SEQ(1), MillisBehindLatest: 0 }],
      [{ Records: [recordOf(2)], ContinuationSequenceNumber: SEQ(5), MillisBehindLatest: 0 }, broken],
      [{ Records: [], ContinuationSequenceNumber: undefined, MillisBehindLatest: 0, ChildShards: [{ ShardId: 'shardId-000000000003', ParentShards: ['shardId-000000000000'], HashKeyRange: { StartingHashKey: '0', EndingHashKey: '1' } }] }],
    ], clock);
    const source = new KinesisSource({ client, streamName: 's', enhancedFanOut: { consumerArn: CONSUMER_ARN }, clock, random: seededRandom(1) });

    const batches = await drain(source, `${SEQ(0)}`);

    expect(inputs.map((input) => input.StartingPosition)).toEqual([
      { Type: 'AFTER_SEQUENCE_NUMBER', SequenceNumber: SEQ(0) },
      { Type: 'AFTER_SEQUENCE_NUMBER', SequenceNumber: SEQ(1) },
      { Type: 'AFTER_SEQUENCE_NUMBER', SequenceNumber: SEQ(5) },
    ]);
    expect(batches.flatMap((batch) => (batch.kind === 'records' ? batch.records.map(text) : batch.childShardIds))).toEqual([
      'r-1',
      'r-2',
      'shardId-000000000003',
    ]);
    // Kinesis allows one subscription a second per shard and consumer.
    expect(times[1]! - times[0]!).toBeGreaterThanOrEqual(1000);
    expect(times[2]! - times[1]!).toBeGreaterThanOrEqual(1000);
  });
});

/**
 * A client on which the named consumer is still CREATING: the first DescribeStreamConsumer waits until
 * `activate()` and then answers CREATING, later ones ACTIVE. Like the SDK, a call rejects when the signal it
 * was sent with fires. Every SubscribeToShard ends its shard at once with one record.
 */
function creatingConsumerClient(): {
  client: KinesisClient;
  activate: () => void;
  describing: Promise<void>;
  describeSignals: AbortSignal[];
  subscribedShards: string[];
} {
  let activate!: () => void;
  const active = new Promise<void>((resolve) => (activate = resolve));
  let described!: () => void;
  const describing = new Promise<void>((resolve) => (described = resolve));
  const describeSignals: AbortSignal[] = [];
  const subscribedShards: string[] = [];
  const abortable = <T>(signal: AbortSignal | undefined, work: Promise<T>): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      const onAbort = (): void => reject(Object.assign(new Error('Request aborted'), { name: 'AbortError' }));
      if (signal?.aborted) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      work.then(resolve, reject);
    });
  const client = {
    send: async (command: unknown, options?: { abortSignal?: AbortSignal }) => {
      if (command instanceof DescribeStreamSummaryCommand) return { StreamDescriptionSummary: { StreamARN: 'arn:aws:kinesis:us-east-1:000000000000:stream/s' } };
      if (command instanceof RegisterStreamConsumerCommand) throw new Error('the consumer exists: nothing is registered');
      if (command instanceof DescribeStreamConsumerCommand) {
        describeSignals.push(options!.abortSignal!);
        if (describeSignals.length === 1) {
          described();
          await abortable(options?.abortSignal, active);
          return { ConsumerDescription: { ConsumerStatus: 'CREATING', ConsumerARN: CONSUMER_ARN } };
        }
        return { ConsumerDescription: { ConsumerStatus: 'ACTIVE', ConsumerARN: CONSUMER_ARN } };
      }
      if (command instanceof SubscribeToShardCommand) {
        subscribedShards.push(command.input.ShardId!);
        return { EventStream: (async function* () {
          yield { SubscribeToShardEvent: { Records: [recordOf(1)], ContinuationSequenceNumber: undefined, MillisBehindLatest: 0, ChildShards: [] } };
        })() };
      }
      throw new Error(`unexpected ${String(command)}`);
    },
  } as unknown as KinesisClient;
  return { client, activate, describing, describeSignals, subscribedShards };
}

describe('enhanced fan-out while the stream consumer is still CREATING', () => {
  it("a read that stops while the consumer is CREATING does not stop the other shards' reads", async () => {
    const { client, activate, describing, subscribedShards } = creatingConsumerClient();
    const source = new KinesisSource({ client, streamName: 's', enhancedFanOut: { consumerName: 'c' }, clock: fakeClock() });
    const handedOff = new AbortController();
    const first = source.read('shardId-000000000000', Checkpoint.TRIM_HORIZON, { signal: handedOff.signal })[Symbol.asyncIterator]();
    const second = source.read('shardId-000000000001', Checkpoint.TRIM_HORIZON)[Symbol.asyncIterator]();
    const firstBatch = first.next();
    const secondBatch = second.next();
    await describing;

    handedOff.abort();
    await expect(firstBatch).rejects.toBeInstanceOf(AbortedError);
    activate();

    const batch = (await secondBatch).value as ShardBatch<KinesisRecord>;
    expect(batch.kind === 'records' ? batch.records.map(text) : batch).toEqual(['r-1']);
    expect(subscribedShards).toEqual(['shardId-000000000001']);
    await second.return(undefined);
  });

  it('stops waiting for the consumer once no read waits for it, and the next read waits for it again', async () => {
    const { client, activate, describing, describeSignals, subscribedShards } = creatingConsumerClient();
    const source = new KinesisSource({ client, streamName: 's', enhancedFanOut: { consumerName: 'c' }, clock: fakeClock() });
    const stopped = new AbortController();
    const only = source.read('shardId-000000000000', Checkpoint.TRIM_HORIZON, { signal: stopped.signal })[Symbol.asyncIterator]();
    const onlyBatch = only.next();
    await describing;

    stopped.abort();
    await expect(onlyBatch).rejects.toBeInstanceOf(AbortedError);
    expect(describeSignals[0]!.aborted).toBe(true);
    activate();

    const { records } = await readRecords(source, 'shardId-000000000001', Checkpoint.TRIM_HORIZON, 1);
    expect(records.map(text)).toEqual(['r-1']);
    expect(subscribedShards).toEqual(['shardId-000000000001']);
  });
});

describe('enhanced fan-out when the stream consumer is deregistered', () => {
  it('reports a ConsumerNotFoundError, and the next read registers the named consumer again', async () => {
    const described: string[] = [];
    let consumers = 0;
    const subscribed: string[] = [];
    const client = {
      send: async (command: unknown) => {
        if (command instanceof DescribeStreamSummaryCommand) return { StreamDescriptionSummary: { StreamARN: 'arn:aws:kinesis:us-east-1:000000000000:stream/s' } };
        if (command instanceof DescribeStreamConsumerCommand) {
          described.push(command.input.ConsumerName!);
          return { ConsumerDescription: { ConsumerStatus: 'ACTIVE', ConsumerARN: `${CONSUMER_ARN}${++consumers}` } };
        }
        if (command instanceof SubscribeToShardCommand) {
          subscribed.push(command.input.ConsumerARN!);
          if (command.input.ConsumerARN === `${CONSUMER_ARN}1`) {
            throw Object.assign(new Error(`Consumer ${CONSUMER_ARN}1 not found.`), { name: 'ResourceNotFoundException' });
          }
          return { EventStream: (async function* () {
            yield { SubscribeToShardEvent: { Records: [recordOf(1)], ContinuationSequenceNumber: undefined, MillisBehindLatest: 0, ChildShards: [] } };
          })() };
        }
        throw new Error(`unexpected ${String(command)}`);
      },
    } as unknown as KinesisClient;
    const source = new KinesisSource({ client, streamName: 's', enhancedFanOut: { consumerName: 'c' }, clock: fakeClock() });

    await expect(readRecords(source, 'shardId-000000000000', Checkpoint.TRIM_HORIZON, 1)).rejects.toBeInstanceOf(ConsumerNotFoundError);
    const { records } = await readRecords(source, 'shardId-000000000000', Checkpoint.TRIM_HORIZON, 1);

    expect(records.map(text)).toEqual(['r-1']);
    expect(described).toEqual(['c', 'c']);
    expect(subscribed).toEqual([`${CONSUMER_ARN}1`, `${CONSUMER_ARN}2`]);
  });
});

describe('polling pace', () => {
  it('never sends more than maxGetRecordsPerSecond calls to a shard in any second, retries and backoff included', async () => {
    const clock = fakeClock();
    const callTimes: number[] = [];
    let call = 0;
    const client = {
      send: async (command: unknown) => {
        if (command instanceof GetShardIteratorCommand) return { ShardIterator: 'it' };
        if (!(command instanceof GetRecordsCommand)) throw new Error('unexpected command');
        callTimes.push(clock.now());
        call++;
        if (call % 3 === 0) throw Object.assign(new Error('Rate exceeded'), { name: 'ProvisionedThroughputExceededException' });
        return { Records: [recordOf(call)], NextShardIterator: 'it', MillisBehindLatest: 1000 };
      },
    } as unknown as KinesisClient;
    const source = new KinesisSource({ client, streamName: 's', clock, random: seededRandom(7), backoffBaseMs: 1, maxGetRecordsPerSecond: 5 });

    const { records } = await readRecords(source, 'shardId-000000000000', Checkpoint.TRIM_HORIZON, 20);

    expect(records).toHaveLength(20);
    for (let i = 5; i < callTimes.length; i++) expect(callTimes[i]! - callTimes[i - 5]!).toBeGreaterThanOrEqual(1000);
  });
});

describe('enhanced fan-out on kinesis-local', () => {
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

  it('registers a consumer and reads the records of a shard through SubscribeToShard', async () => {
    const { streamName } = await createStream(client, 1);
    await putRecords(client, streamName, textEntries('r', 40));
    const source = new KinesisSource({ client, streamName, enhancedFanOut: { consumerName: 'leasehold-test' } });

    const { records } = await readRecords(source, 'shardId-000000000000', Checkpoint.TRIM_HORIZON, 40);

    expect(records.map(text)).toEqual(Array.from({ length: 40 }, (_, i) => `r-${i}`));
    // A second source reuses the consumer the first registered, and resumes after a checkpoint.
    const again = new KinesisSource({ client, streamName, enhancedFanOut: { consumerName: 'leasehold-test' } });
    const rest = await readRecords(again, 'shardId-000000000000', records[29]!.position, 10);
    expect(rest.records.map(text)).toEqual(Array.from({ length: 10 }, (_, i) => `r-${30 + i}`));
  });
});
