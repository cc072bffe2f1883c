/**
 * Reading a shard with GetRecords: one call in flight, sent before the previous answer is decoded and
 * handed over (the consumer works on a batch while the next one is read), at most
 * `maxGetRecordsPerSecond` calls a second while the shard is behind and one every `idleDelayMs` once it is
 * caught up, throttling retried with backoff, and an expired iterator replaced by a fresh one from the
 * last position handed over.
 */
import { GetRecordsCommand, GetShardIteratorCommand, type GetRecordsOutput } from '@aws-sdk/client-kinesis';
import type { Position } from '@leasehold/core';
import { userRecordsOfAll, type SkipThrough } from './aggregation.js';
import { backoffDelayMs } from './backoff.js';
import type { ReaderContext } from './context.js';
import { isExpiredIterator, isTransient, toSourceError } from './errors.js';
import { skipOf, startingPointOf, type StartingPoint } from './positions.js';
import { iteratorOfHint, resumeHintOf } from './resume-hint.js';
import { sendCancellable } from './send.js';
import { endOfShard } from './shard-end.js';
import type { BatchQueue } from './queue.js';

/**
 * Whether a GetRecords answer shows the reader caught up: fewer records than it asked for, and nothing
 * behind the tip (`MillisBehindLatest` 0, or not given). A full answer, or one that says it is behind
 * (even empty: a shard can answer nothing while records lie further on), is read on at once.
 */
export function caughtUp(output: GetRecordsOutput, limit: number): boolean {
  return (output.Records?.length ?? 0) < limit && (output.MillisBehindLatest ?? 0) === 0;
}

/**
 * Reads `shardId` after `from` into `queue` until the shard ends, an error is reported or `signal` fires;
 * from `resumeHint`'s iterator when it carries one for this shard (made for exactly `from`, as the consumer
 * makes sure), with a fresh iterator for `from` if Kinesis refuses it.
 */
export async function pollShard(
  ctx: ReaderContext,
  shardId: string,
  from: Position,
  queue: BatchQueue,
  signal: AbortSignal,
  resumeHint?: string,
): Promise<void> {
  let position = from;
  let start = startingPointOf(from);
  let skip: SkipThrough | undefined = skipOf(start);
  let failures = 0;
  // GetRecords and GetShardIterator have separate limits of five calls a second per shard, so separate paces.
  const lastCallAt = { records: Number.NEGATIVE_INFINITY, iterator: Number.NEGATIVE_INFINITY };
  // The least time from one GetRecords to the next: the pace while behind, `idleDelayMs` once caught up.
  let gapMs = ctx.minCallIntervalMs;

  const retryLater = async (error: unknown, action: string): Promise<void> => {
    if (!isTransient(error)) throw toSourceError(error, { stream: ctx.streamLabel, shardId, action });
    await ctx.clock.sleep(backoffDelayMs(failures++, ctx.backoffBaseMs, ctx.backoffMaxMs, ctx.random), signal);
  };

  // Every call to the shard, retries included, goes through here: at most one of a kind every minCallIntervalMs.
  const paced = async <T>(kind: keyof typeof lastCallAt, call: () => Promise<T>, intervalMs = ctx.minCallIntervalMs): Promise<T> => {
    const waitMs = lastCallAt[kind] + Math.max(intervalMs, ctx.minCallIntervalMs) - ctx.clock.now();
    if (waitMs > 0) await ctx.clock.sleep(waitMs, signal);
    lastCallAt[kind] = ctx.clock.now();
    return call();
  };

  const iteratorFor = async (point: StartingPoint): Promise<string | undefined> => {
    for (;;) {
      try {
        const output = await paced('iterator', () =>
          sendCancellable(ctx.client, signal, (options) =>
            ctx.client.send(new GetShardIteratorCommand({ ...ctx.stream, ShardId: shardId, ...iteratorRequestOf(point) }), options),
          ),
        );
        failures = 0;
        return output.ShardIterator;
      } catch (error) {
        if (signal.aborted) throw error;
        await retryLater(error, 'GetShardIterator');
      }
    }
  };

  const getRecords = (iterator: string): Promise<GetRecordsOutput> => {
    const fetched = paced(
      'records',
      () =>
        sendCancellable(ctx.client, signal, (options) =>
          ctx.client.send(new GetRecordsCommand({ ShardIterator: iterator, Limit: ctx.maxRecordsPerCall, ...arnOf(ctx) }), options),
        ),
      gapMs,
    );
    // Awaited below, after the previous batch is handed over; until then a failure must not go unhandled.
    fetched.catch(() => undefined);
    return fetched;
  };

  const end = async (childShards: GetRecordsOutput['ChildShards']): Promise<void> => {
    queue.push({ kind: 'end', end: await endOfShard(ctx, shardId, childShards, signal) });
  };

  if (start.type === 'SHARD_END') return end(undefined);
  // A hint is an iterator after a whole GetRecords answer: never one for a position inside an aggregate.
  let hinted = skip === undefined ? iteratorOfHint(resumeHint, shardId) : undefined;
  let iterator = hinted ?? (await iteratorFor(start));
  if (iterator === undefined) return end(undefined);
  await queue.waitForRoom(signal);
  let next: Promise<GetRecordsOutput> | undefined = getRecords(iterator);

  /**
   * Awaits the answer in flight and hands its records over. The answer lives in this call's frame alone,
   * which ends here: the loop below, suspended while the next answer is awaited, keeps neither the SDK's
   * records nor the last of them (a suspended async function keeps the registers it used).
   */
  const handOver = async (current: string): Promise<{ following: string | undefined; childShards: GetRecordsOutput['ChildShards'] } | { failed: unknown }> => {
    let output: GetRecordsOutput;
    try {
      next ??= getRecords(current);
      output = await next;
      failures = 0;
    } catch (error) {
      next = undefined;
      return { failed: error };
    }
    hinted = undefined;
    const rawRecords = output.Records ?? [];
    const following = output.NextShardIterator ?? undefined;
    gapMs = caughtUp(output, ctx.maxRecordsPerCall) ? ctx.idleDelayMs : ctx.minCallIntervalMs;
    // The next call goes out before this answer is decoded and handed over, when the batch leaves room.
    next = following !== undefined && queue.hasRoomFor(rawRecords.length, rawBytesOf(rawRecords)) ? getRecords(following) : undefined;
    const { records, bytes } = userRecordsOfAll(rawRecords, shardId, ctx.malformedAggregates, skip);
    // An AT_SEQUENCE_NUMBER read returns the partly done record first: only it has sub-records to skip.
    if (rawRecords.length > 0) skip = undefined;
    const last = records[records.length - 1];
    if (last !== undefined) position = last.position;
    queue.push({
      kind: 'batch',
      batch: { kind: 'records', records, position, bytes, millisBehindLatest: output.MillisBehindLatest, ...(following === undefined ? {} : { resumeHint: resumeHintOf(shardId, following) }) },
      bytes,
    });
    return { following, childShards: following === undefined ? output.ChildShards : undefined };
  };

  for (;;) {
    const answer = await handOver(iterator);
    if ('failed' in answer) {
      const error = answer.failed;
      if (signal.aborted) throw error;
      // A handed-over iterator that fails in any way (expired, refused, or an emulator's unnamed error) is
      // not tried again: a fresh one for the position reads the same records.
      if (isExpiredIterator(error) || hinted !== undefined) {
        hinted = undefined;
        // Resume exactly where the consumer's records stop: nothing lost, nothing repeated.
        start = restartPointOf(position, start);
        skip = skipOf(start);
        const fresh = await iteratorFor(start);
        if (fresh === undefined) return end(undefined);
        iterator = fresh;
        continue;
      }
      await retryLater(error, 'GetRecords');
      continue;
    }
    if (answer.following === undefined) return end(answer.childShards);
    iterator = answer.following;
    if (next === undefined) await queue.waitForRoom(signal);
  }
}

function rawBytesOf(records: NonNullable<GetRecordsOutput['Records']>): number {
  let total = 0;
  for (const record of records) total += record.Data?.byteLength ?? 0;
  return total;
}

/** Where to start again after the records handed over so far, or the original start if none were. */
export function restartPointOf(position: Position, original: StartingPoint): StartingPoint {
  const point = startingPointOf(position);
  // Before the first record, the original start still holds (for LATEST, records written meanwhile are
  // after the new iterator's start only if they were written after it: see the README).
  return point.type === 'TRIM_HORIZON' || point.type === 'LATEST' || point.type === 'AT_TIMESTAMP' ? original : point;
}

function iteratorRequestOf(point: StartingPoint): {
  ShardIteratorType: 'TRIM_HORIZON' | 'LATEST' | 'AT_TIMESTAMP' | 'AFTER_SEQUENCE_NUMBER' | 'AT_SEQUENCE_NUMBER';
  StartingSequenceNumber?: string;
  Timestamp?: Date;
} {
  switch (point.type) {
    case 'AFTER_SEQUENCE_NUMBER':
    case 'AT_SEQUENCE_NUMBER':
      return { ShardIteratorType: point.type, StartingSequenceNumber: point.sequenceNumber };
    case 'AT_TIMESTAMP':
      return { ShardIteratorType: 'AT_TIMESTAMP', Timestamp: point.timestamp };
    case 'SHARD_END':
      throw new Error('unreachable: SHARD_END has no iterator');
    default:
      return { ShardIteratorType: point.type };
  }
}

function arnOf(ctx: ReaderContext): { StreamARN?: string } {
  return ctx.stream.StreamARN !== undefined ? { StreamARN: ctx.stream.StreamARN } : {};
}
