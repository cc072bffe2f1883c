import type { KinesisClient } from '@aws-sdk/client-kinesis';
import type { Clock, Random, ShardInfo } from '@leasehold/core';
import type { MalformedAggregatePolicy } from './aggregation.js';

/** The stream, as Kinesis API calls address it. */
export interface StreamRef {
  readonly StreamName?: string | undefined;
  readonly StreamARN?: string | undefined;
}

/** What a shard reader needs from the source: the client, the stream, time and the resolved options. */
export interface ReaderContext {
  readonly client: KinesisClient;
  readonly stream: StreamRef;
  /** The stream's name or ARN, for messages. */
  readonly streamLabel: string;
  readonly clock: Clock;
  readonly random: Random;
  readonly maxRecordsPerCall: number;
  readonly minCallIntervalMs: number;
  readonly idleDelayMs: number;
  readonly backoffBaseMs: number;
  readonly backoffMaxMs: number;
  readonly malformedAggregates: MalformedAggregatePolicy;
  /** The shards whose parent or adjacent parent is `shardId`, from a listing of the stream. */
  childShardsOf(shardId: string, signal: AbortSignal): Promise<ShardInfo[]>;
}
