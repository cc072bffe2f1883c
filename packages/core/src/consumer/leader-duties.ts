import type { Clock } from '../clock.js';
import type { ShardInfo, ShardSource } from '../source.js';
import { Checkpoint, type CheckpointStorage, type LeaseRecord } from '../storage.js';

/** What one round of the leader's chores did. */
export interface ShardSyncReport {
  /** Leases created for shards that had none. */
  created: string[];
  /** Leases deleted: finished parents whose children have all started, and shards the stream no longer has. */
  deleted: string[];
}

/**
 * The leader's chores (DESIGN section 5), each a conditional write that is harmless if done twice:
 * create leases for shards that have none (with their parents, so that children wait), and delete the
 * lease of a shard that reached `SHARD_END` once all its children started, or that the stream no longer has.
 */
export async function syncShards(
  group: string,
  source: ShardSource,
  storage: CheckpointStorage,
  signal: AbortSignal,
): Promise<ShardSyncReport> {
  const shards = await source.listShards({ signal });
  const { leases } = await storage.listLeases(group);
  const report: ShardSyncReport = { created: [], deleted: [] };
  const byKey = new Map(leases.map((lease) => [lease.leaseKey, lease]));
  const inStream = new Map(shards.map((shard) => [shard.shardId, shard]));

  // A shard with a leased child was finished and cleaned up before: creating its lease again would read it again.
  const leasedParents = new Set(shards.filter((shard) => byKey.has(shard.shardId)).flatMap((shard) => shard.parentShardIds));
  for (const shard of shards) {
    if (signal.aborted) return report;
    if (byKey.has(shard.shardId) || leasedParents.has(shard.shardId)) continue;
    const outcome = await storage.createLease({ group, leaseKey: shard.shardId, parentKeys: [...shard.parentShardIds] });
    if (outcome.status === 'applied') {
      report.created.push(shard.shardId);
      byKey.set(shard.shardId, outcome.record);
    }
  }

  for (const lease of byKey.values()) {
    if (signal.aborted) return report;
    if (!shouldDelete(lease, inStream, byKey, shards)) continue;
    const outcome = await storage.deleteLease(group, lease.leaseKey, lease.version);
    if (outcome.status === 'applied') report.deleted.push(lease.leaseKey);
  }
  return report;
}

function shouldDelete(
  lease: LeaseRecord,
  inStream: ReadonlyMap<string, ShardInfo>,
  leases: ReadonlyMap<string, LeaseRecord>,
  shards: readonly ShardInfo[],
): boolean {
  // Trimmed past retention: the stream no longer has the shard, so there is nothing left to read.
  if (!inStream.has(lease.leaseKey)) return true;
  if (lease.checkpoint !== Checkpoint.SHARD_END) return false;
  const children = shards.filter((shard) => shard.parentShardIds.includes(lease.leaseKey));
  // A finished parent stays until every child has started (has a checkpoint or an owner), so that no child
  // ever sees its parent vanish before it was able to tell that the parent had finished.
  return (
    children.length > 0 &&
    children.every((child) => {
      const childLease = leases.get(child.shardId);
      return childLease !== undefined && (childLease.checkpoint !== null || childLease.owner !== null);
    })
  );
}

/** Runs `syncShards` now and then every `intervalMs` until `signal` fires. */
export async function leaderLoop(
  run: () => Promise<void>,
  intervalMs: number,
  clock: Clock,
  signal: AbortSignal,
): Promise<void> {
  while (!signal.aborted) {
    await run();
    try {
      await clock.sleep(intervalMs, signal);
    } catch {
      return;
    }
  }
}
