import { consumerSimulationSeedList } from './support/consumer-simulation-seeds.js';

// Handlers commit their effects with their checkpoints (ctx.checkpointWith) under every fault of the
// consumer simulation; the effect of each record must be applied exactly once. Seed 97049: a stream added
// at a timestamp while the group had no leader was judged drained before anybody had read it. Seed 40047:
// the stop-handover check blamed the handler policy for a lease its worker lost to self-fencing while
// storage failed (the check now leaves such leases to the lease rules). Seed 90011: a commit's outcome was
// unknown and could not be read back, but had applied; the next commit's conflict showed the checkpoint
// past four records, and the retry handed them over again, applying their effects twice. Seed 100563: a
// lease was corrupted while its owner let a tenure of it go (a handover that did not drain in time); the
// listing that could not read it made the owner forget that tenure, so once repaired it held the lease
// again in that same tenure, and the tenure's deferred handover wrote it to another worker under it. Seed
// 104181: a stream added with LATEST while the leader was cut off got its leases only as the run ended;
// nothing of it counted as owed before (its start is pinned when its leases are made), so the run was
// judged drained and stopped before anybody read it. A listed stream without a lease now holds the run.
// Seed 106122: the leader deleted the lease of a child trimmed from the stream while its parent was still
// read, and a grandchild was read before the parent's last records. Seed 169289: a stream whose first shard
// sync failed midway left the list while its only lease was corrupt; its birth was forgotten, and added
// back it pinned LATEST anew, so the shard whose lease had not been created skipped what came between.
consumerSimulationSeedList(
  'with effects committed with their checkpoints (exactly once), seeds 1 to 100, 97049, 40047, 90011, 100563, 104181, 106122 and 169289',
  [...Array.from({ length: 100 }, (_, i) => i + 1), 97049, 40047, 90011, 100563, 104181, 106122, 169289],
  { exactlyOnce: true },
);

// The same while an operator's tool rewinds the live group. Seed 7 found that the check counted an effect
// as owed when a rewind forward (to latest) moved its lease past a record whose handler had succeeded but
// whose commit was refused (its tenure had ended first): the operator skips that effect as any other.
consumerSimulationSeedList('with effects committed with their checkpoints while the group is rewound, seeds 1 to 100', Array.from({ length: 100 }, (_, i) => i + 1), {
  exactlyOnce: true,
  rewind: true,
});
