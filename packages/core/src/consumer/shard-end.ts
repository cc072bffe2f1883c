/**
 * A shard's end, as its reader sees it: the children's leases it creates at once (they start at their
 * beginning), from the children the end names or else from a listing of the stream (DESIGN section 5, the
 * shard lifecycle, rule 6). What it leaves is the leader's.
 */
import type { ShardInfo, ShardSource, EndOfShard, SourceRecord } from '../source.js';
import { Checkpoint, type CheckpointStorage } from '../storage.js';
import type { ConsumerUnsafe } from '../unsafe.js';
import { asError, type PumpReporter } from './pump-types.js';

/** What creating the children's leases needs of the reader. */
export interface ChildLeasesContext<R extends SourceRecord> {
  readonly storage: CheckpointStorage;
  readonly group: string;
  readonly source: ShardSource<R>;
  readonly reporter: PumpReporter;
  readonly unsafe: ConsumerUnsafe;
  /** The reader's: a listing for the children is given up when it fires. */
  readonly signal: AbortSignal;
}

/**
 * Creates the leases of the children `end` names of `shardId`, each only when every other parent of it
 * has a lease (a merge child waits for both parents; a parent without a lease may be one not created yet),
 * at its own beginning. The children's parents come from the end when the source named them there,
 * otherwise from a listing; a child the listing does not show is left to the leader's next shard sync.
 */
export async function createChildLeases<R extends SourceRecord>(ctx: ChildLeasesContext<R>, shardId: string, end: EndOfShard): Promise<void> {
  const { storage, group, reporter, unsafe } = ctx;
  const { childShardIds } = end;
  if (childShardIds.length === 0) return;
  const shards = namedChildren(end, shardId) ?? (await listShards(ctx));
  for (const childShardId of childShardIds) {
    const child = shards.find((shard) => shard.shardId === childShardId);
    if (!child) continue; // the leader's next shard sync creates it from a complete listing
    const others = child.parentShardIds.filter((parent) => parent !== shardId);
    if (!unsafe.birthRace && !(await allLeased(ctx, others))) continue;
    // A create that fails (unknown, or refused before it was sent) is reported, and the child left to the
    // leader's next shard sync: the end is still reported and its lease given back.
    const creating = storage.createLease({
      group,
      leaseKey: childShardId,
      parentKeys: [...child.parentShardIds],
      checkpoint: unsafe.childrenAtInitialPosition ? null : Checkpoint.TRIM_HORIZON,
    });
    const outcome = unsafe.childCreateEndsReader ? await creating : await creating.catch((error: unknown) => ({ status: 'unknown' as const, error: asError(error) }));
    if (outcome.status === 'unknown') reporter.error(outcome.error, 'create-child-lease');
  }
}

/**
 * The children with their parents as the end named them, when it named every child of `childShardIds`
 * as a child of `shardId`; `undefined` otherwise, and the stream is listed.
 */
function namedChildren(end: EndOfShard, shardId: string): readonly ShardInfo[] | undefined {
  const named = end.childShards;
  if (named === undefined) return undefined;
  const complete = end.childShardIds.every((childShardId) => named.some((child) => child.shardId === childShardId && child.parentShardIds.includes(shardId)));
  return complete ? named : undefined;
}

async function listShards<R extends SourceRecord>(ctx: ChildLeasesContext<R>): Promise<ShardInfo[]> {
  return ctx.source.listShards({ signal: ctx.signal }).catch((error: unknown) => {
    ctx.reporter.error(asError(error), 'list-shards');
    return [];
  });
}

/** Whether every key has a lease now (a read that fails counts as no). */
async function allLeased<R extends SourceRecord>(ctx: ChildLeasesContext<R>, keys: readonly string[]): Promise<boolean> {
  for (const key of keys) {
    const lease = await ctx.storage.getLease(ctx.group, key).catch((error: unknown) => {
      ctx.reporter.error(asError(error), 'read-parent-lease');
      return null;
    });
    if (lease === null) return false;
  }
  return true;
}
