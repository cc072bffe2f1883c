/**
 * `pnpm bench`: measured side by side in one run against Redis on 127.0.0.1:6379, printed as ratios.
 *
 * 1. A batched renew of N leases (one script call) against N single conditional updates sent one by one.
 * 2. One conditional update through the adapter against one raw EVALSHA of an equivalent one-key
 *    compare-and-set script: the adapter's own cost (validation, encoding, decoding, checks).
 */
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { leaseStateOf, type LeaseRecord, type LeaseUpdate, type WriteResult } from '@leasehold/core';
import { Redis } from 'ioredis';
import { RedisStorage } from '../src/index.js';

const keyPrefix = `leasehold-bench-${randomUUID().slice(0, 8)}:`;

function applied(outcome: WriteResult<LeaseRecord> | undefined): LeaseRecord {
  if (outcome?.status !== 'applied') throw new Error(`a renewal did not apply: ${JSON.stringify(outcome)}`);
  return outcome.record;
}

function renewals(leases: readonly LeaseRecord[]): LeaseUpdate[] {
  return leases.map((lease) => ({
    leaseKey: lease.leaseKey,
    expectedVersion: lease.version,
    next: { ...leaseStateOf(lease), owner: 'bench', incarnation: 'bench-1' },
  }));
}

async function timed(run: () => Promise<unknown>): Promise<number> {
  const start = performance.now();
  await run();
  return performance.now() - start;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
}

async function batchVersusSingles(storage: RedisStorage): Promise<void> {
  console.log('Batched renew (one script call) vs single conditional updates sent one by one');
  for (const size of [1, 100, 1000, 10_000]) {
    const group = `bench-batch-${size}-${randomUUID()}`;
    for (let start = 0; start < size; start += 500) {
      await Promise.all(
        Array.from({ length: Math.min(500, size - start) }, (_, i) =>
          storage.createLease({ group, leaseKey: `shardId-${String(start + i).padStart(12, '0')}`, checkpoint: '49590338271490256608559692538361571095921575989136588898' }),
        ),
      );
    }
    // Renew the way a worker does: from the records the previous write returned, with no re-read between.
    let { leases } = await storage.listLeases(group);
    const renewBatch = async (): Promise<void> => {
      const results = await storage.updateLeases(group, renewals(leases));
      leases = results.map((outcome) => applied(outcome));
    };
    const renewOneByOne = async (): Promise<void> => {
      const next: LeaseRecord[] = [];
      for (const update of renewals(leases)) next.push(applied((await storage.updateLeases(group, [update]))[0]));
      leases = next;
    };
    await renewBatch();
    await renewOneByOne();
    const repeats = size >= 10_000 ? 3 : size >= 1000 ? 11 : 41;
    const batchTimes: number[] = [];
    const singleTimes: number[] = [];
    for (let round = 0; round < repeats; round++) {
      batchTimes.push(await timed(renewBatch));
      singleTimes.push(await timed(renewOneByOne));
    }
    const batch = median(batchTimes);
    const singles = median(singleTimes);
    console.log(
      `  ${String(size).padStart(6)} leases: batch ${batch.toFixed(2)} ms, one by one ${singles.toFixed(2)} ms, batch is ${(singles / batch).toFixed(1)}x faster`,
    );
  }
}

const RAW_CAS = `
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current and string.match(current, '^(%d+):') == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3] .. ':' .. ARGV[4])
  return 1
end
return current
`;

async function adapterVersusRaw(client: Redis, storage: RedisStorage): Promise<void> {
  const group = `bench-single-${randomUUID()}`;
  let lease = applied(await storage.createLease({ group, leaseKey: 'shardId-000000000000', owner: 'bench', epoch: 1, checkpoint: '1' }));
  const rawKey = `${keyPrefix}{raw}:leases`;
  const body = JSON.stringify({ owner: 'bench', checkpoint: '1', parentKeys: [], incarnation: 'bench-1', metadata: {} });
  await client.hset(rawKey, 'k', `1:${body}`);
  const sha = (await client.script('LOAD', RAW_CAS)) as string;
  let rawVersion = 1;
  const perBlock = 500;
  const adapterBlocks: number[] = [];
  const rawBlocks: number[] = [];
  for (let block = 0; block < 31; block++) {
    // Alternate which side goes first, so that neither always runs on a warmer machine.
    const runAdapter = async (): Promise<void> => {
      adapterBlocks.push(
        await timed(async () => {
          for (let i = 0; i < perBlock; i++) {
            lease = applied((await storage.updateLeases(group, renewals([lease])))[0]);
          }
        }),
      );
    };
    const runRaw = async (): Promise<void> => {
      rawBlocks.push(
        await timed(async () => {
          for (let i = 0; i < perBlock; i++) {
            const reply = await client.evalsha(sha, 1, rawKey, 'k', String(rawVersion), String(rawVersion + 1), body);
            if (reply !== 1) throw new Error(`raw compare-and-set did not apply: ${String(reply)}`);
            rawVersion++;
          }
        }),
      );
    };
    if (block % 2 === 0) {
      await runAdapter();
      await runRaw();
    } else {
      await runRaw();
      await runAdapter();
    }
  }
  const adapter = (median(adapterBlocks) / perBlock) * 1000;
  const raw = (median(rawBlocks) / perBlock) * 1000;
  console.log('One conditional update: adapter vs raw EVALSHA of a one-key compare-and-set');
  console.log(`  adapter ${adapter.toFixed(1)} µs, raw ${raw.toFixed(1)} µs, ratio ${(adapter / raw).toFixed(2)} (target at most 1.3)`);
}

async function cleanUp(client: Redis): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await client.scan(cursor, 'MATCH', `${keyPrefix}*`, 'COUNT', 1000);
    if (keys.length > 0) await client.unlink(...keys);
    cursor = next;
  } while (cursor !== '0');
}

const client = new Redis({ host: '127.0.0.1', port: 6379, maxRetriesPerRequest: 1 });
try {
  await client.ping();
} catch (error) {
  client.disconnect();
  throw new Error('the benchmark needs Redis on 127.0.0.1:6379; start it with: redis-server --port 6379 --save "" --appendonly no', { cause: error });
}
const storage = new RedisStorage({ client, keyPrefix });
try {
  await adapterVersusRaw(client, storage);
  await batchVersusSingles(storage);
} finally {
  await cleanUp(client);
  await storage.close();
  await client.quit();
}
