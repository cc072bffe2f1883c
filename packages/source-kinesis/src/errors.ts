/**
 * The typed errors of the Kinesis source, and the one place that decides which Kinesis errors are
 * transient (retried with backoff) and which are reported.
 */
import { SourceError } from '@leasehold/core';
import { describeValue } from '@leasehold/core/adapter';

/** The stream does not exist (or is not visible to these credentials in this region). */
export class StreamNotFoundError extends SourceError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_STREAM_NOT_FOUND', message, options);
  }
}

/** The shard does not exist in the stream (a wrong id, or trimmed past the retention period). */
export class ShardNotFoundError extends SourceError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_SHARD_NOT_FOUND', message, options);
  }
}

/** The enhanced fan-out consumer does not exist (deregistered, or a `consumerArn` of another stream). */
export class ConsumerNotFoundError extends SourceError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_CONSUMER_NOT_FOUND', message, options);
  }
}

/** The credentials may not read the stream (IAM, KMS key policy, expired or unknown credentials). */
export class AccessDeniedError extends SourceError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_ACCESS_DENIED', message, options);
  }
}

/** A record carries the KPL aggregation magic number but cannot be de-aggregated (bad MD5 trailer or protobuf). */
export class MalformedRecordError extends SourceError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_MALFORMED_RECORD', message, options);
  }
}

const THROTTLING = new Set([
  'ProvisionedThroughputExceededException',
  'LimitExceededException',
  'ThrottlingException',
  'KMSThrottlingException',
]);

const TRANSIENT = new Set([
  'InternalFailure',
  'InternalFailureException',
  'InternalServerError',
  'ServiceUnavailable',
  'ServiceUnavailableException',
  'TimeoutError',
  'RequestTimeout',
  'RequestTimeoutException',
]);

const NETWORK_CODES = new Set(['ECONNRESET', 'ECONNREFUSED', 'EPIPE', 'ETIMEDOUT', 'EAI_AGAIN', 'ERR_HTTP2_STREAM_ERROR']);

const ACCESS = new Set([
  'AccessDeniedException',
  'KMSAccessDeniedException',
  'UnrecognizedClientException',
  'InvalidSignatureException',
  'ExpiredTokenException',
  'IncompleteSignature',
  'MissingAuthenticationToken',
]);

function nameOf(error: unknown): string {
  return error instanceof Error ? error.name : '';
}

/** Whether the error says "slow down": ProvisionedThroughputExceeded, LimitExceeded and friends. */
export function isThrottling(error: unknown): boolean {
  return THROTTLING.has(nameOf(error));
}

/** Whether the shard iterator has expired (it lives five minutes) and a fresh one must be asked for. */
export function isExpiredIterator(error: unknown): boolean {
  return nameOf(error) === 'ExpiredIteratorException';
}

/** Whether the error is worth retrying with backoff: throttling, a server fault or a network failure. */
export function isTransient(error: unknown): boolean {
  if (isThrottling(error) || TRANSIENT.has(nameOf(error))) return true;
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && NETWORK_CODES.has(code)) return true;
  const status = (error as { $metadata?: { httpStatusCode?: number } } | null)?.$metadata?.httpStatusCode;
  return typeof status === 'number' && status >= 500;
}

/** Where a Kinesis call went: the stream (name or ARN) and, when the call addressed them, the shard and the consumer. */
export interface ErrorScope {
  readonly stream: string;
  readonly shardId?: string | undefined;
  /** The consumer's ARN or name, for SubscribeToShard and the consumer calls. */
  readonly consumer?: string | undefined;
  readonly action: string;
}

const NAME_CHAR = 'A-Za-z0-9_.\\-';

function escaped(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');
}

/** `text` without the whole-word occurrences of `names` (a stream called "my-shard-stream" says nothing about a shard). */
function without(text: string, names: readonly string[]): string {
  let rest = text;
  for (const name of [...names].sort((a, b) => b.length - a.length)) {
    if (name === '') continue;
    rest = rest.replace(new RegExp(`(?<![${NAME_CHAR}])${escaped(name)}(?![${NAME_CHAR}])`, 'g'), ' ');
  }
  return rest;
}

/** The last part of an ARN (`.../stream/orders` gives `orders`), and the name in a consumer ARN. */
function namesOf(nameOrArn: string | undefined): string[] {
  if (nameOrArn === undefined) return [];
  if (!nameOrArn.startsWith('arn:')) return [nameOrArn];
  const consumer = /\/consumer\/([^:/]+)/.exec(nameOrArn)?.[1];
  const stream = /:stream\/([^/]+)/.exec(nameOrArn)?.[1];
  return [nameOrArn, ...(consumer === undefined ? [] : [consumer]), ...(stream === undefined ? [] : [stream])];
}

/**
 * What a ResourceNotFoundException is about. Kinesis uses the one error for a missing stream, shard and
 * consumer and tells them apart only in its message (AWS: "Shard shardId-000000000005 in stream orders
 * under account ... does not exist", "Stream orders under account ... not found"), so the message is
 * read, after removing the names of the stream and the consumer from it: they may contain any word.
 */
export function notFoundSubject(message: string, scope: Omit<ErrorScope, 'action'>): 'shard' | 'consumer' | 'stream' {
  const rest = without(message, [...namesOf(scope.stream), ...namesOf(scope.consumer)]);
  if (scope.shardId !== undefined && without(rest, [scope.shardId]) !== rest) return 'shard';
  if (/consumer/i.test(rest)) return 'consumer';
  if (scope.shardId !== undefined && /\bshard\b/i.test(rest)) return 'shard';
  return 'stream';
}

/** Turns a Kinesis error that must reach the caller into a typed error naming the stream and shard. */
export function toSourceError(error: unknown, where: ErrorScope): SourceError {
  if (error instanceof SourceError) return error;
  const name = nameOf(error);
  const detail = error instanceof Error ? error.message : String(error);
  const stream = describeValue(where.stream);
  if (name === 'ResourceNotFoundException') {
    switch (notFoundSubject(detail, where)) {
      case 'shard':
        return new ShardNotFoundError(
          `[source-kinesis] shard ${describeValue(where.shardId)} was not found in stream ${stream}`,
          { cause: error },
        );
      case 'consumer':
        return new ConsumerNotFoundError(
          `[source-kinesis] stream consumer ${describeValue(where.consumer)} was not found on stream ${stream}: ${detail}`,
          { cause: error },
        );
      case 'stream':
        return new StreamNotFoundError(`[source-kinesis] stream ${stream} was not found`, { cause: error });
    }
  }
  if (ACCESS.has(name)) {
    return new AccessDeniedError(`[source-kinesis] access to stream ${stream} was denied (${name}): ${detail}`, {
      cause: error,
    });
  }
  return new SourceError('ERR_SOURCE', `[source-kinesis] ${where.action} on stream ${stream} failed (${name || 'Error'}): ${detail}`, {
    cause: error,
  });
}
