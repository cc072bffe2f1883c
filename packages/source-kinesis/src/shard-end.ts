import type { ChildShard } from '@aws-sdk/client-kinesis';
import type { EndOfShard, ShardInfo } from '@leasehold/core';
import type { ReaderContext } from './context.js';

/**
 * The end of a shard with its children and their parents: as the shard's last answer named them
 * (`ChildShards`, each with its `ParentShards`), or, when it named none or named one without this shard
 * among its parents (the shard ended before this read began, or an answer that does not say), from a
 * listing of the stream, so that core's runtime never needs one of its own.
 */
export async function endOfShard(ctx: ReaderContext, shardId: string, named: readonly ChildShard[] | undefined, signal: AbortSignal): Promise<EndOfShard> {
  const given = (named ?? []).map((child) => childOf(child, shardId));
  const childShards = given.length > 0 && given.every((child) => child !== undefined) ? given : await ctx.childShardsOf(shardId, signal);
  return { kind: 'end', childShardIds: childShards.map((child) => child.shardId), childShards };
}

function childOf(child: ChildShard, parentShardId: string): ShardInfo | undefined {
  if (!child.ShardId || !child.ParentShards?.includes(parentShardId)) return undefined;
  const details: Record<string, string> = {};
  if (child.HashKeyRange?.StartingHashKey !== undefined) details.startingHashKey = child.HashKeyRange.StartingHashKey;
  if (child.HashKeyRange?.EndingHashKey !== undefined) details.endingHashKey = child.HashKeyRange.EndingHashKey;
  // A child is open when its parent ends; whether it has closed since does not matter here.
  return { shardId: child.ShardId, parentShardIds: [...child.ParentShards], closed: false, details };
}
