/**
 * The Kinesis side of a run: a client for kinesis-local, a fresh stream, and the resharding the demo and
 * the tests perform (a split at the middle of a shard's hash range, a merge of two adjacent shards).
 */
import {
  CreateStreamCommand,
  DescribeStreamSummaryCommand,
  KinesisClient,
  ListShardsCommand,
  MergeShardsCommand,
  SplitShardCommand,
  type Shard,
} from '@aws-sdk/client-kinesis';
import { NodeHttpHandler } from '@smithy/node-http-handler';
import { setTimeout as sleep } from 'node:timers/promises';

/** Where the stream lives: everything a worker process needs to reach it. */
export interface KinesisEndpoint {
  readonly endpoint: string;
  readonly region: string;
}

/** Dummy credentials: kinesis-local and dynalite accept any. */
export const LOCAL_CREDENTIALS = { accessKeyId: 'local', secretAccessKey: 'local' } as const;

/** A client for kinesis-local: plain HTTP/1.1, dummy credentials. */
export function kinesisClient({ endpoint, region }: KinesisEndpoint): KinesisClient {
  return new KinesisClient({ endpoint, region, credentials: LOCAL_CREDENTIALS, requestHandler: new NodeHttpHandler() });
}

/** Creates a stream and waits until it is `ACTIVE`. */
export async function createStream(client: KinesisClient, streamName: string, shardCount: number): Promise<void> {
  await client.send(new CreateStreamCommand({ StreamName: streamName, ShardCount: shardCount }));
  await waitUntilActive(client, streamName);
}

async function waitUntilActive(client: KinesisClient, streamName: string): Promise<void> {
  for (;;) {
    const summary = (await client.send(new DescribeStreamSummaryCommand({ StreamName: streamName }))).StreamDescriptionSummary;
    if (summary?.StreamStatus === 'ACTIVE') return;
    await sleep(50);
  }
}

/** Every shard of the stream, open and closed. */
export async function listShards(client: KinesisClient, streamName: string): Promise<Shard[]> {
  const shards: Shard[] = [];
  let nextToken: string | undefined;
  do {
    const page = await client.send(
      nextToken === undefined ? new ListShardsCommand({ StreamName: streamName }) : new ListShardsCommand({ NextToken: nextToken }),
    );
    shards.push(...(page.Shards ?? []));
    nextToken = page.NextToken;
  } while (nextToken !== undefined);
  return shards;
}

/** Whether a shard still takes new records. */
export function isOpen(shard: Shard): boolean {
  return shard.SequenceNumberRange?.EndingSequenceNumber === undefined;
}

function hashRange(shard: Shard): { low: bigint; high: bigint } {
  return { low: BigInt(shard.HashKeyRange!.StartingHashKey!), high: BigInt(shard.HashKeyRange!.EndingHashKey!) };
}

/** Splits an open shard at the middle of its hash range; returns the ids of the two children. */
export async function splitShard(client: KinesisClient, streamName: string, shardId: string): Promise<string[]> {
  const before = await listShards(client, streamName);
  const shard = before.find((each) => each.ShardId === shardId);
  if (!shard || !isOpen(shard)) throw new Error(`shard ${shardId} of stream ${streamName} is not open`);
  const { low, high } = hashRange(shard);
  const middle = low + (high - low + 1n) / 2n;
  await client.send(new SplitShardCommand({ StreamName: streamName, ShardToSplit: shardId, NewStartingHashKey: middle.toString() }));
  await waitUntilActive(client, streamName);
  return childrenOf(await listShards(client, streamName), [shardId]);
}

/** Two open shards whose hash ranges touch, lowest first, or `undefined` if there are none. */
export async function adjacentOpenShards(client: KinesisClient, streamName: string): Promise<[string, string] | undefined> {
  const open = (await listShards(client, streamName)).filter(isOpen).sort((a, b) => (hashRange(a).low < hashRange(b).low ? -1 : 1));
  for (let i = 0; i + 1 < open.length; i++) {
    if (hashRange(open[i]!).high + 1n === hashRange(open[i + 1]!).low) return [open[i]!.ShardId!, open[i + 1]!.ShardId!];
  }
  return undefined;
}

/** Merges two adjacent open shards; returns the id of the child. */
export async function mergeShards(client: KinesisClient, streamName: string, shardId: string, adjacentShardId: string): Promise<string> {
  await client.send(new MergeShardsCommand({ StreamName: streamName, ShardToMerge: shardId, AdjacentShardToMerge: adjacentShardId }));
  await waitUntilActive(client, streamName);
  const [child] = childrenOf(await listShards(client, streamName), [shardId, adjacentShardId]);
  if (child === undefined) throw new Error(`merging ${shardId} and ${adjacentShardId} of stream ${streamName} made no child shard`);
  return child;
}

function childrenOf(shards: readonly Shard[], parents: readonly string[]): string[] {
  return shards
    .filter((shard) => parents.includes(shard.ParentShardId ?? '') || parents.includes(shard.AdjacentParentShardId ?? ''))
    .map((shard) => shard.ShardId!);
}
