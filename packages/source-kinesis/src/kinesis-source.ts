/**
 * `KinesisSource`: core's `ShardSource` over a `KinesisClient` the user creates. Discovery with
 * ListShards, reading with GetRecords (default) or enhanced fan-out, KPL de-aggregation, and positions
 * that compare as 128-bit sequence numbers plus sub-sequence.
 */
import {
  DescribeStreamConsumerCommand,
  DescribeStreamSummaryCommand,
  GetShardIteratorCommand,
  ListShardsCommand,
  RegisterStreamConsumerCommand,
  type KinesisClient,
  type ListShardsCommandInput,
} from '@aws-sdk/client-kinesis';
import {
  AbortedError,
  InvalidConfigError,
  InvalidInputError,
  SourceError,
  compareNumericPositions,
  type Clock,
  type Position,
  type Random,
  type ReadOptions,
  type ShardBatch,
  type ShardInfo,
  type ShardSource,
} from '@leasehold/core';
import { abortReason, describeValue, optionKeys, refuseUnknownOptions, systemClock, systemRandom } from '@leasehold/core/adapter';
import type { MalformedAggregatePolicy } from './aggregation.js';
import { sendCancellable } from './send.js';
import { backoffDelayMs } from './backoff.js';
import type { ReaderContext, StreamRef } from './context.js';
import { isTransient, ShardNotFoundError, toSourceError, type ErrorScope } from './errors.js';
import { subscribeShard, type FanOutContext } from './fan-out.js';
import { pollShard } from './polling.js';
import { RESUME_HINT_MAX_AGE_MS } from './resume-hint.js';
import { startingPointOf } from './positions.js';
import { BatchQueue } from './queue.js';
import { SharedTask } from './shared-task.js';
import type { KinesisRecord } from './record.js';

/** Enhanced fan-out: a dedicated 2 MB/s per shard pushed over SubscribeToShard. */
export interface EnhancedFanOutOptions {
  /** The stream consumer to register, or reuse when it exists. Required unless `consumerArn` is given. */
  readonly consumerName?: string | undefined;
  /** The ARN of a consumer registered beforehand; nothing is registered then. */
  readonly consumerArn?: string | undefined;
  /**
   * The client SubscribeToShard is sent with. Default: the source's client. On AWS it must speak HTTP/2
   * (the SDK's default `NodeHttp2Handler`); the local emulator speaks HTTP/1.1 only (`NodeHttpHandler`).
   */
  readonly client?: KinesisClient | undefined;
}

/** Options of {@link KinesisSource}. */
export interface KinesisSourceOptions {
  /** The client every call is sent with (region, credentials, endpoint and HTTP handler are the user's). */
  readonly client: KinesisClient;
  /** The stream's name. Give this or `streamArn`. */
  readonly streamName?: string | undefined;
  /** The stream's ARN (needed for a stream of another account). Give this or `streamName`. */
  readonly streamArn?: string | undefined;
  /** Records asked for per GetRecords, 1 to 10,000. Default 10,000. */
  readonly maxRecordsPerCall?: number | undefined;
  /** GetRecords calls per second per shard while it is behind, above 0 and at most 5 (Kinesis's limit). Default 5. */
  readonly maxGetRecordsPerSecond?: number | undefined;
  /**
   * The time from one GetRecords to the next once the shard is caught up (fewer records than asked for,
   * and `MillisBehindLatest` 0), so that an idle shard leaves the read budget to other readers. Never
   * shorter than `maxGetRecordsPerSecond` allows. Default 1,000 ms.
   */
  readonly idleDelayMs?: number | undefined;
  /** Prefetch stops while this many records wait for the consumer. Default 10,000. */
  readonly prefetchMaxRecords?: number | undefined;
  /** Prefetch stops while this many payload bytes wait for the consumer. Default 16 MiB. */
  readonly prefetchMaxBytes?: number | undefined;
  /** The first backoff after throttling or a transient failure; it doubles up to `backoffMaxMs`. Default 200 ms. */
  readonly backoffBaseMs?: number | undefined;
  /** The longest backoff. Default 10,000 ms. */
  readonly backoffMaxMs?: number | undefined;
  /**
   * A record that starts with the KPL magic number but fails its MD5 check or does not decode: `'error'`
   * (default) reports a `MalformedRecordError`; `'deliver-whole'` hands it over as one plain record, as
   * the KCL does.
   */
  readonly malformedAggregates?: MalformedAggregatePolicy | undefined;
  /** Read with enhanced fan-out instead of GetRecords. */
  readonly enhancedFanOut?: EnhancedFanOutOptions | undefined;
  /** The clock for pacing, backoff and idle waits. Default: the system clock. */
  readonly clock?: Clock | undefined;
  /** The randomness for backoff jitter. Default: `Math.random`. */
  readonly random?: Random | undefined;
}

const OPTION_KEYS = optionKeys<KinesisSourceOptions>({
  client: true,
  streamName: true,
  streamArn: true,
  maxRecordsPerCall: true,
  maxGetRecordsPerSecond: true,
  idleDelayMs: true,
  prefetchMaxRecords: true,
  prefetchMaxBytes: true,
  backoffBaseMs: true,
  backoffMaxMs: true,
  malformedAggregates: true,
  enhancedFanOut: true,
  clock: true,
  random: true,
});

const FAN_OUT_KEYS = optionKeys<EnhancedFanOutOptions>({ consumerName: true, consumerArn: true, client: true });

/** A fan-out option given at the top belongs under `enhancedFanOut`. */
const FAN_OUT_HINTS = { consumerName: 'enhancedFanOut.consumerName', consumerArn: 'enhancedFanOut.consumerArn' };

const STREAM_NAME = /^[a-zA-Z0-9_.-]{1,128}$/;
const STREAM_ARN = /^arn:aws[a-z-]*:kinesis:[a-z0-9-]+:\d{12}:stream\/[a-zA-Z0-9_.-]{1,128}$/;
const CONSUMER_NAME = /^[a-zA-Z0-9_.-]{1,128}$/;
const SHARD_ID = /^[a-zA-Z0-9_.-]{1,128}$/;

/** Reads the shards of one Kinesis data stream for Leasehold's consumer runtime. */
export class KinesisSource implements ShardSource<KinesisRecord> {
  private readonly ctx: ReaderContext;
  private readonly prefetchMaxRecords: number;
  private readonly prefetchMaxBytes: number;
  private readonly fanOut: FanOutContext | undefined;
  /**
   * How long a batch's resume hint (its GetRecords call's `NextShardIterator`) can start the next owner's
   * read: 4 minutes, under Kinesis's 5. Polling reads only; a fan-out read gives no hints.
   */
  readonly resumeHintMaxAgeMs: number | undefined;

  constructor(options: KinesisSourceOptions) {
    if (typeof options !== 'object' || options === null) {
      throw new InvalidConfigError(`[source-kinesis] options must be an object, got ${describeValue(options)}`);
    }
    refuseUnknownOptions('source-kinesis', 'KinesisSource', options, OPTION_KEYS, FAN_OUT_HINTS);
    if (typeof options.enhancedFanOut === 'object' && options.enhancedFanOut !== null) {
      refuseUnknownOptions('source-kinesis', 'KinesisSource option enhancedFanOut', options.enhancedFanOut, FAN_OUT_KEYS, {}, 'enhancedFanOut.');
    }
    const { client, streamName, streamArn } = options;
    if (client === undefined || client === null || typeof (client as { send?: unknown }).send !== 'function') {
      throw new InvalidConfigError(`[source-kinesis] client must be a KinesisClient, got ${describeValue(client)}`);
    }
    if ((streamName === undefined) === (streamArn === undefined)) {
      throw new InvalidConfigError('[source-kinesis] give exactly one of streamName and streamArn');
    }
    if (streamName !== undefined && !STREAM_NAME.test(streamName)) {
      throw new InvalidConfigError(`[source-kinesis] stream name ${describeValue(streamName)} is not a valid Kinesis stream name`);
    }
    if (streamArn !== undefined && !STREAM_ARN.test(streamArn)) {
      throw new InvalidConfigError(`[source-kinesis] stream ARN ${describeValue(streamArn)} is not a Kinesis stream ARN`);
    }
    const maxGetRecordsPerSecond = numberOption('maxGetRecordsPerSecond', options.maxGetRecordsPerSecond, 5, { min: 0, max: 5, exclusiveMin: true });
    const backoffBaseMs = numberOption('backoffBaseMs', options.backoffBaseMs, 200, { min: 0 });
    const backoffMaxMs = numberOption('backoffMaxMs', options.backoffMaxMs, 10_000, { min: backoffBaseMs });
    const malformedAggregates = options.malformedAggregates ?? 'error';
    if (malformedAggregates !== 'error' && malformedAggregates !== 'deliver-whole') {
      throw new InvalidConfigError(`[source-kinesis] malformedAggregates must be "error" or "deliver-whole", got ${describeValue(malformedAggregates)}`);
    }
    const stream: StreamRef = streamArn !== undefined ? { StreamARN: streamArn } : { StreamName: streamName };
    this.prefetchMaxRecords = numberOption('prefetchMaxRecords', options.prefetchMaxRecords, 10_000, { min: 1, integer: true });
    this.prefetchMaxBytes = numberOption('prefetchMaxBytes', options.prefetchMaxBytes, 16 * 1024 * 1024, { min: 1, integer: true });
    this.ctx = {
      client,
      stream,
      streamLabel: streamArn ?? streamName ?? '',
      clock: options.clock ?? systemClock,
      random: options.random ?? systemRandom,
      maxRecordsPerCall: numberOption('maxRecordsPerCall', options.maxRecordsPerCall, 10_000, { min: 1, max: 10_000, integer: true }),
      minCallIntervalMs: 1000 / maxGetRecordsPerSecond,
      idleDelayMs: numberOption('idleDelayMs', options.idleDelayMs, 1_000, { min: 0 }),
      backoffBaseMs,
      backoffMaxMs,
      malformedAggregates,
      childShardsOf: (shardId, signal) => this.childShardsOf(shardId, signal),
    };
    this.fanOut = options.enhancedFanOut === undefined ? undefined : this.fanOutContext(options.enhancedFanOut, client);
    this.resumeHintMaxAgeMs = this.fanOut === undefined ? RESUME_HINT_MAX_AGE_MS : undefined;
  }

  /** Every shard of the stream, open and closed, with parents and hash key range (ListShards, all pages). */
  async listShards(options: ReadOptions = {}): Promise<ShardInfo[]> {
    const signal = options.signal ?? new AbortController().signal;
    const shards: ShardInfo[] = [];
    let nextToken: string | undefined;
    do {
      const input: ListShardsCommandInput = nextToken === undefined ? { ...this.ctx.stream } : { NextToken: nextToken };
      const output = await this.withRetries({ action: 'ListShards' }, signal, () =>
        sendCancellable(this.ctx.client, signal, (options) => this.ctx.client.send(new ListShardsCommand(input), options)),
      );
      for (const shard of output.Shards ?? []) {
        const ending = shard.SequenceNumberRange?.EndingSequenceNumber;
        const details: Record<string, string> = {
          startingHashKey: shard.HashKeyRange?.StartingHashKey ?? '',
          endingHashKey: shard.HashKeyRange?.EndingHashKey ?? '',
          startingSequenceNumber: shard.SequenceNumberRange?.StartingSequenceNumber ?? '',
        };
        if (ending !== undefined) details.endingSequenceNumber = ending;
        shards.push({
          shardId: shard.ShardId ?? '',
          parentShardIds: [shard.ParentShardId, shard.AdjacentParentShardId].filter((id): id is string => !!id),
          closed: ending !== undefined,
          details,
        });
      }
      nextToken = output.NextToken;
    } while (nextToken !== undefined);
    return shards;
  }

  /**
   * Reads a shard after `from`: a checkpoint (`<sequence>` or `<sequence>:<subSequence>`) or a sentinel
   * (`TRIM_HORIZON`, `LATEST`, `AT_TIMESTAMP:<ms>`, `SHARD_END`). Yields batches in order, prefetching the
   * next while the caller works, and ends with the shard's children once a closed shard is read to its end.
   * Leaving the loop or firing `options.signal` stops every request and timer of the read.
   */
  async *read(shardId: string, from: Position, options: ReadOptions = {}): AsyncGenerator<ShardBatch<KinesisRecord>, void, undefined> {
    checkShardId(shardId);
    startingPointOf(from);
    const external = options.signal;
    if (external?.aborted) throw abortReason(external);
    const controller = new AbortController();
    const onAbort = (): void => controller.abort(external?.reason);
    external?.addEventListener('abort', onAbort, { once: true });

    const queue = new BatchQueue(this.prefetchMaxRecords, this.prefetchMaxBytes);
    const work =
      this.fanOut === undefined
        ? pollShard(this.ctx, shardId, from, queue, controller.signal, options.resumeHint)
        : subscribeShard(this.ctx, this.fanOut, shardId, from, queue, controller.signal);
    const reader = work.catch((error: unknown) => {
      if (!controller.signal.aborted) queue.push({ kind: 'error', error });
    });

    try {
      // Each batch goes through `nextBatch`, whose frame ends as it hands the batch over: this generator,
      // suspended between batches, keeps none that the consumer is done with (a suspended generator keeps
      // the registers it used).
      const reading = { ended: false };
      while (!reading.ended) yield await nextBatch(queue, controller.signal, reading);
    } finally {
      external?.removeEventListener('abort', onAbort);
      controller.abort(new AbortedError(`[source-kinesis] read of shard ${describeValue(shardId)} stopped`));
      await reader;
    }
  }

  /** Orders two positions of one shard: sequence numbers as 128-bit integers, then the sub-sequence. */
  comparePositions(a: Position, b: Position): number {
    return compareNumericPositions(a, b);
  }

  /**
   * Whether the shard is certainly gone from the stream (trimmed past the retention period, or the stream
   * is being deleted): `true` only when GetShardIterator says that the shard does not exist while the
   * stream itself is there; `false` when the shard exists. A stream that cannot be found throws a
   * `StreamNotFoundError` (a wrong name, region or account is never read as "every shard is gone"), and a
   * question Kinesis cannot answer now (throttled, unreachable) throws a `SourceError`: ask again later.
   */
  async isShardGone(shardId: string, options: ReadOptions = {}): Promise<boolean> {
    checkShardId(shardId);
    const signal = options.signal ?? new AbortController().signal;
    if (signal.aborted) throw abortReason(signal);
    const { client, stream } = this.ctx;
    try {
      await sendCancellable(client, signal, (options) => client.send(new GetShardIteratorCommand({ ...stream, ShardId: shardId, ShardIteratorType: 'TRIM_HORIZON' }), options));
      return false;
    } catch (error) {
      if (signal.aborted) throw abortReason(signal);
      const failure = toSourceError(error, { stream: this.ctx.streamLabel, shardId, action: 'GetShardIterator' });
      if (!(failure instanceof ShardNotFoundError)) throw failure;
    }
    // Kinesis named the shard; only a stream that is there makes that certain.
    try {
      await sendCancellable(client, signal, (options) => client.send(new DescribeStreamSummaryCommand({ ...stream }), options));
    } catch (error) {
      if (signal.aborted) throw abortReason(signal);
      throw toSourceError(error, { stream: this.ctx.streamLabel, action: 'DescribeStreamSummary' });
    }
    return true;
  }

  /**
   * The stream's name in the lease keys of a multi-stream group, in KCL's form:
   * `<account id>:<stream name>:<creation time in epoch seconds>`. The creation time makes a stream deleted
   * and created again under the same name a new stream (its shard ids start over). Read once with
   * `DescribeStreamSummary` (retried while Kinesis throttles) and kept.
   */
  streamIdentity(options: ReadOptions = {}): Promise<string> {
    this.#identity ??= this.#describeIdentity(options.signal ?? new AbortController().signal).catch((error: unknown) => {
      this.#identity = undefined;
      throw error;
    });
    return this.#identity;
  }

  #identity: Promise<string> | undefined;

  async #describeIdentity(signal: AbortSignal): Promise<string> {
    const { client, stream } = this.ctx;
    const { StreamDescriptionSummary: summary } = await this.withRetries({ action: 'DescribeStreamSummary' }, signal, () =>
      sendCancellable(client, signal, (options) => client.send(new DescribeStreamSummaryCommand({ ...stream }), options)),
    );
    const arn = summary?.StreamARN ?? stream.StreamARN;
    const account = arn?.split(':')[4];
    const name = summary?.StreamName ?? arn?.split('/').at(-1);
    const created = summary?.StreamCreationTimestamp;
    if (!account || !name || !(created instanceof Date) || Number.isNaN(created.getTime())) {
      throw new SourceError('ERR_SOURCE', `[source-kinesis] DescribeStreamSummary of stream ${describeValue(this.ctx.streamLabel)} gave no ARN, name or creation time to name it by`);
    }
    return `${account}:${name}:${Math.floor(created.getTime() / 1000)}`;
  }

  private async childShardsOf(shardId: string, signal: AbortSignal): Promise<ShardInfo[]> {
    const shards = await this.listShards({ signal });
    return shards.filter((shard) => shard.parentShardIds.includes(shardId));
  }

  private async withRetries<T>(scope: Omit<ErrorScope, 'stream'>, signal: AbortSignal, call: () => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await call();
      } catch (error) {
        if (signal.aborted) throw abortReason(signal);
        if (!isTransient(error)) throw toSourceError(error, { ...scope, stream: this.ctx.streamLabel });
        await this.ctx.clock.sleep(backoffDelayMs(attempt, this.ctx.backoffBaseMs, this.ctx.backoffMaxMs, this.ctx.random), signal);
      }
    }
  }

  private fanOutContext(options: EnhancedFanOutOptions, client: KinesisClient): FanOutContext {
    const { consumerName, consumerArn } = options;
    if (consumerArn === undefined && (consumerName === undefined || !CONSUMER_NAME.test(consumerName))) {
      throw new InvalidConfigError(`[source-kinesis] enhancedFanOut.consumerName ${describeValue(consumerName)} is not a valid consumer name`);
    }
    // Every shard's reader waits for the one registration; each wait ends with its own reader's signal only.
    const registration = new SharedTask(`registration of consumer ${describeValue(consumerName)}`, (signal) =>
      this.registerOrReuseConsumer(consumerName ?? '', signal),
    );
    return {
      client: options.client ?? client,
      minSubscribeIntervalMs: 1_000,
      consumerArn: (signal) => (consumerArn !== undefined ? Promise.resolve(consumerArn) : registration.get(signal)),
      consumerGone: () => registration.forget(),
    };
  }

  /** The ARN of the named stream consumer once it is ACTIVE, registering it first if the stream has none of that name. */
  private async registerOrReuseConsumer(consumerName: string, signal: AbortSignal): Promise<string> {
    const { client } = this.ctx;
    const streamArn =
      this.ctx.stream.StreamARN ??
      (
        await this.withRetries({ action: 'DescribeStreamSummary' }, signal, () =>
          sendCancellable(client, signal, (options) => client.send(new DescribeStreamSummaryCommand({ ...this.ctx.stream }), options)),
        )
      ).StreamDescriptionSummary?.StreamARN;
    if (streamArn === undefined) throw new SourceError('ERR_SOURCE', `[source-kinesis] stream ${describeValue(this.ctx.streamLabel)} has no ARN`);

    for (let attempt = 0; ; attempt++) {
      let description;
      try {
        description = (
          await this.withRetries({ action: 'DescribeStreamConsumer', consumer: consumerName }, signal, () =>
            sendCancellable(client, signal, (options) => client.send(new DescribeStreamConsumerCommand({ StreamARN: streamArn, ConsumerName: consumerName }), options)),
          )
        ).ConsumerDescription;
      } catch (error) {
        const missing = error instanceof SourceError && (error.code === 'ERR_CONSUMER_NOT_FOUND' || error.code === 'ERR_STREAM_NOT_FOUND');
        if (!missing || attempt > 0) throw error;
        // No consumer of that name yet: register it (a stream that is missing fails the registration too).
        try {
          await this.withRetries({ action: 'RegisterStreamConsumer', consumer: consumerName }, signal, () =>
            sendCancellable(client, signal, (options) => client.send(new RegisterStreamConsumerCommand({ StreamARN: streamArn, ConsumerName: consumerName }), options)),
          );
        } catch (registerError) {
          // Another worker registered it first: reuse theirs.
          if (!(registerError instanceof SourceError && (registerError.cause as Error | undefined)?.name === 'ResourceInUseException')) throw registerError;
        }
        continue;
      }
      if (description?.ConsumerStatus === 'ACTIVE' && description.ConsumerARN !== undefined) return description.ConsumerARN;
      if (attempt > 600) {
        throw new SourceError('ERR_SOURCE', `[source-kinesis] consumer ${describeValue(consumerName)} did not become ACTIVE (status ${describeValue(description?.ConsumerStatus)})`);
      }
      await this.ctx.clock.sleep(500, signal);
    }
  }
}

/** The next item of `queue` as the read hands it over: a batch, or the shard's end (`reading.ended` set); an error is thrown. */
async function nextBatch(queue: BatchQueue, signal: AbortSignal, reading: { ended: boolean }): Promise<ShardBatch<KinesisRecord>> {
  const item = await queue.take(signal);
  if (item.kind === 'error') throw item.error;
  if (item.kind === 'batch') return item.batch;
  reading.ended = true;
  return item.end;
}

function checkShardId(shardId: unknown): asserts shardId is string {
  if (typeof shardId !== 'string' || !SHARD_ID.test(shardId)) {
    throw new InvalidInputError(`[source-kinesis] shard id ${describeValue(shardId)} is not a valid shard id`);
  }
}

function numberOption(
  name: string,
  value: number | undefined,
  fallback: number,
  rule: { min: number; max?: number; exclusiveMin?: boolean; integer?: boolean },
): number {
  if (value === undefined) return fallback;
  const valid =
    typeof value === 'number' &&
    Number.isFinite(value) &&
    (rule.exclusiveMin ? value > rule.min : value >= rule.min) &&
    (rule.max === undefined || value <= rule.max) &&
    (!rule.integer || Number.isInteger(value));
  if (!valid) {
    const range = `${rule.exclusiveMin ? 'above' : 'at least'} ${rule.min}${rule.max === undefined ? '' : ` and at most ${rule.max}`}`;
    throw new InvalidConfigError(`[source-kinesis] ${name} must be ${rule.integer ? 'an integer ' : 'a number '}${range}, got ${describeValue(value)}`);
  }
  return value;
}
