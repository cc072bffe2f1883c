/**
 * Group birth at scale, against each real backend (see ./backends.ts): a stream of 10,000 shards (an
 * in-memory source, so that the emulator's speed is not what is measured).
 *
 * 1. The leader's first shard sync round alone, creating every lease, one create at a time (as before
 *    lease creation ran concurrently) and with the default concurrency, side by side: the ratio.
 * 2. Ten Consumers started at once on a new group: the time until the group is born (the first complete
 *    round), until every shard is owned, each exactly once, and until the owners are balanced (max - min
 *    <= 1), with the acquisitions it took.
 *
 *   pnpm --filter @leasehold/e2e bench:birth                        all three backends
 *   pnpm --filter @leasehold/e2e bench:birth -- --backend redis --shards 2000
 *
 * Writes bench/results/birth.json.
 */
import { Checkpoint, Consumer, MemorySource, type Storage } from '@leasehold/core';
import { ShardSync, systemClock } from '@leasehold/core/adapter';
import { mkdirSync, writeFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { BACKENDS, OPEN, runId, type Backend } from './backends.js';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';

const { values } = parseArgs({
  options: {
    backend: { type: 'string', multiple: true },
    shards: { type: 'string', default: '10000' },
    workers: { type: 'string', default: '10' },
  },
});
const SHARDS = Number(values.shards);
const WORKERS = Number(values.workers);
const backends = (values.backend ?? BACKENDS) as Backend[];
const log = (line: string): void => void process.stdout.write(`${line}\n`);

/** One birth round on a fresh group with `createConcurrency` creates in flight; seconds it took. */
async function syncRound(storage: Storage, group: string, source: MemorySource, createConcurrency: number): Promise<number> {
  const sync = new ShardSync({ group, source, storage, initialPosition: Checkpoint.TRIM_HORIZON, clock: systemClock, isLeader: () => true, createConcurrency });
  const startedAt = performance.now();
  const report = await sync.run(new AbortController().signal);
  const seconds = (performance.now() - startedAt) / 1_000;
  if (!report.complete || report.created.length !== SHARDS) throw new Error(`the round created ${report.created.length} of ${SHARDS} leases (complete: ${report.complete})`);
  return seconds;
}

async function run(backend: Backend): Promise<Record<string, unknown>> {
  const opened = await OPEN[backend]();
  const consumers: Consumer[] = [];
  try {
    const source = new MemorySource(SHARDS, { idleDelayMs: 1_000 });
    const sequential = await syncRound(opened.storage, `birth-${runId}-seq`, source, 1);
    const concurrent = await syncRound(opened.storage, `birth-${runId}-par`, source, 16);
    log(`${backend}: one birth round of ${SHARDS} leases: ${sequential.toFixed(2)} s one create at a time, ${concurrent.toFixed(2)} s 16 at a time (${(sequential / concurrent).toFixed(1)}x faster)`);

    const group = `birth-${runId}-group`;
    let bornAt: number | null = null;
    const startedAt = performance.now();
    for (let i = 0; i < WORKERS; i++) {
      const consumer = new Consumer({
        group,
        source,
        storage: i === 0 || !opened.storageFor ? opened.storage : opened.storageFor(i),
        workerId: `w${i}`,
        initialPosition: 'TRIM_HORIZON',
        processBatch: () => undefined,
        metrics: false,
      });
      consumer.on('shard-sync', (report) => {
        if (report.complete && bornAt === null) bornAt = performance.now();
      });
      consumers.push(consumer);
    }
    let acquisitions = 0;
    for (const consumer of consumers) consumer.coordinator.on('acquired', () => acquisitions++);
    await Promise.all(consumers.map((consumer) => consumer.start()));
    let ownedAt: number | null = null;
    let balancedAt: number | null = null;
    let owned = 0;
    let acquisitionsWhenBalanced = 0;
    while (performance.now() - startedAt < 600_000) {
      const counts = consumers.map((consumer) => consumer.coordinator.heldLeases().length);
      const held = consumers.flatMap((consumer) => consumer.coordinator.heldLeases().map((lease) => lease.leaseKey));
      owned = new Set(held).size;
      const everyOnce = owned === SHARDS && held.length === SHARDS;
      if (everyOnce && ownedAt === null) ownedAt = performance.now();
      if (everyOnce && Math.max(...counts) - Math.min(...counts) <= 1) {
        balancedAt = performance.now();
        acquisitionsWhenBalanced = acquisitions;
        break;
      }
      await sleep(100);
    }
    const seconds = (at: number | null): number | null => (at === null ? null : (at - startedAt) / 1_000);
    const perWorker = consumers.map((consumer) => consumer.coordinator.heldLeases().length);
    log(
      `${backend}: ${WORKERS} consumers on ${SHARDS} shards: born after ${seconds(bornAt)?.toFixed(2) ?? 'never'} s, every shard owned after ${seconds(ownedAt)?.toFixed(2) ?? `never (${owned} owned)`} s, ` +
        `balanced (max - min <= 1) after ${seconds(balancedAt)?.toFixed(2) ?? 'never'} s with ${acquisitionsWhenBalanced} acquisitions (${(acquisitionsWhenBalanced / SHARDS).toFixed(3)} per shard); ` +
        `${Math.min(...perWorker)}-${Math.max(...perWorker)} per worker`,
    );
    return {
      backend,
      shards: SHARDS,
      workers: WORKERS,
      birthRoundSeconds: { oneAtATime: sequential, sixteenAtATime: concurrent, ratio: sequential / concurrent },
      consumers: {
        bornAfterSeconds: seconds(bornAt),
        everyShardOwnedAfterSeconds: seconds(ownedAt),
        balancedAfterSeconds: seconds(balancedAt),
        acquisitionsPerShardUntilBalanced: acquisitionsWhenBalanced / SHARDS,
        perWorker: { fewest: Math.min(...perWorker), most: Math.max(...perWorker) },
      },
    };
  } finally {
    await Promise.all(consumers.map((consumer) => consumer.stop({ timeoutMs: 10_000 }).catch(() => undefined)));
    await opened.close();
  }
}

const results: Record<string, unknown>[] = [];
log(`birth: ${SHARDS} shards, ${WORKERS} consumers, default timing`);
for (const backend of backends) results.push(await run(backend));
const dir = new URL('./results/', import.meta.url);
mkdirSync(dir, { recursive: true });
writeFileSync(new URL('birth.json', dir), JSON.stringify({ shards: SHARDS, workers: WORKERS, results }, null, 2) + '\n');
if (results.some((r) => (r as { consumers: { balancedAfterSeconds: number | null } }).consumers.balancedAfterSeconds === null)) process.exitCode = 1;
