/**
 * Reading a shard with enhanced fan-out: SubscribeToShard through a registered stream consumer. A
 * subscription lasts five minutes or ends with an error; the reader subscribes again after the last
 * continuation sequence number, so nothing is lost or repeated. The shard ends with the event that has
 * no continuation sequence number; its `ChildShards` name the children.
 */
import {
  SubscribeToShardCommand,
  type KinesisClient,
  type StartingPosition,
  type SubscribeToShardEvent,
  type SubscribeToShardEventStream,
} from '@aws-sdk/client-kinesis';
import type { Position } from '@leasehold/core';
import { userRecordsOfAll, type SkipThrough } from './aggregation.js';
import { backoffDelayMs } from './backoff.js';
import type { ReaderContext } from './context.js';
import { ConsumerNotFoundError, isTransient, toSourceError } from './errors.js';
import { skipOf, startingPointOf, type StartingPoint } from './positions.js';
import { endOfShard } from './shard-end.js';
import type { BatchQueue } from './queue.js';

/** What the fan-out reader needs beyond the polling context. */
export interface FanOutContext {
  /** The client SubscribeToShard is sent with (HTTP/2 on AWS; HTTP/1.1 on the local emulator). */
  readonly client: KinesisClient;
  /** The ARN of the registered stream consumer. */
  consumerArn(signal: AbortSignal): Promise<string>;
  /** Called when Kinesis no longer knows the consumer: a consumer registered by name is looked up (or registered) again next time. */
  consumerGone(): void;
  /** The least time between two subscriptions to one shard (Kinesis allows one a second). */
  readonly minSubscribeIntervalMs: number;
}

/** Reads `shardId` after `from` into `queue` through SubscribeToShard until the shard ends, an error is reported or `signal` fires. */
export async function subscribeShard(
  ctx: ReaderContext,
  fanOut: FanOutContext,
  shardId: string,
  from: Position,
  queue: BatchQueue,
  signal: AbortSignal,
): Promise<void> {
  const start = startingPointOf(from);
  let skip: SkipThrough | undefined = skipOf(start);
  let position = from;
  let continuation: string | undefined;
  let failures = 0;
  let lastSubscribeAt = Number.NEGATIVE_INFINITY;

  if (start.type === 'SHARD_END') {
    queue.push({ kind: 'end', end: await endOfShard(ctx, shardId, undefined, signal) });
    return;
  }
  const consumerArn = await fanOut.consumerArn(signal);

  const retryLater = async (error: unknown): Promise<void> => {
    if (signal.aborted) throw error;
    const name = error instanceof Error ? error.name : '';
    if (name !== 'ResourceInUseException' && !isTransient(error)) {
      const failure = toSourceError(error, { stream: ctx.streamLabel, shardId, consumer: consumerArn, action: 'SubscribeToShard' });
      if (failure instanceof ConsumerNotFoundError) fanOut.consumerGone();
      throw failure;
    }
    await ctx.clock.sleep(backoffDelayMs(failures++, ctx.backoffBaseMs, ctx.backoffMaxMs, ctx.random), signal);
  };

  /**
   * Takes the subscription's next event and hands its records over. The event lives in this call's frame
   * alone, which ends here: the loop, suspended while the next event is awaited, keeps none of its records.
   */
  const handOverNext = async (
    events: AsyncIterator<SubscribeToShardEventStream>,
  ): Promise<'exhausted' | { kind: 'end'; childShards: SubscribeToShardEvent['ChildShards'] } | { kind: 'next'; continuation: string }> => {
    const message = await events.next();
    if (message.done === true) return 'exhausted';
    const event = eventOf(message.value);
    const rawRecords = event.Records ?? [];
    const { records, bytes } = userRecordsOfAll(rawRecords, shardId, ctx.malformedAggregates, skip);
    if (rawRecords.length > 0) skip = undefined;
    const last = records[records.length - 1];
    if (last !== undefined) position = last.position;
    failures = 0;
    // An event without records is handed over too, as polling does with an empty GetRecords: the consumer
    // learns that the shard is caught up, and its time-based checkpoint runs on an idle shard. The queue
    // keeps only the latest of such batches in a row.
    queue.push({
      kind: 'batch',
      batch: { kind: 'records', records, position, bytes, millisBehindLatest: event.MillisBehindLatest },
      bytes,
    });
    const next = event.ContinuationSequenceNumber;
    return next === undefined || next === null ? { kind: 'end', childShards: event.ChildShards } : { kind: 'next', continuation: next };
  };

  for (;;) {
    const waitMs = lastSubscribeAt + fanOut.minSubscribeIntervalMs - ctx.clock.now();
    if (waitMs > 0) await ctx.clock.sleep(waitMs, signal);
    lastSubscribeAt = ctx.clock.now();
    const startingPosition: StartingPosition =
      continuation !== undefined ? { Type: 'AFTER_SEQUENCE_NUMBER', SequenceNumber: continuation } : startingPositionOf(start);
    try {
      const output = await fanOut.client.send(
        new SubscribeToShardCommand({ ConsumerARN: consumerArn, ShardId: shardId, StartingPosition: startingPosition }),
        { abortSignal: signal },
      );
      const events = output.EventStream?.[Symbol.asyncIterator]();
      let exhausted = events === undefined;
      try {
        while (!exhausted) {
          const step = await handOverNext(events!);
          if (step === 'exhausted') exhausted = true;
          else if (step.kind === 'end') {
            queue.push({ kind: 'end', end: await endOfShard(ctx, shardId, step.childShards, signal) });
            return;
          } else {
            continuation = step.continuation;
            // Backpressure: the next event is read only when the consumer has room for it.
            await queue.waitForRoom(signal);
          }
        }
      } finally {
        // As a for-await loop would: a subscription left before its end is closed.
        if (!exhausted) await events?.return?.().catch(() => undefined);
      }
      // The subscription ran its five minutes: subscribe again after the continuation.
    } catch (error) {
      await retryLater(error);
    }
  }
}

/** The records event of a stream message, or the error the message carries. */
function eventOf(message: SubscribeToShardEventStream): SubscribeToShardEvent {
  if (message.SubscribeToShardEvent !== undefined) return message.SubscribeToShardEvent;
  const entry: [string, unknown] | undefined = Object.entries(message as unknown as Record<string, unknown>).find(([, value]) => value !== undefined);
  const name = entry?.[0] ?? 'UnknownEvent';
  if (entry?.[1] instanceof Error) throw entry[1];
  const wrapped = new Error(`event stream sent ${name}`);
  wrapped.name = name;
  throw wrapped;
}

function startingPositionOf(point: StartingPoint): StartingPosition {
  switch (point.type) {
    case 'AFTER_SEQUENCE_NUMBER':
    case 'AT_SEQUENCE_NUMBER':
      return { Type: point.type, SequenceNumber: point.sequenceNumber };
    case 'AT_TIMESTAMP':
      return { Type: 'AT_TIMESTAMP', Timestamp: point.timestamp };
    case 'TRIM_HORIZON':
    case 'LATEST':
      return { Type: point.type };
    case 'SHARD_END':
      throw new Error('unreachable: SHARD_END has no starting position');
  }
}
