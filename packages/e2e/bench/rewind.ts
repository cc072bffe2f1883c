/**
 * How long a rewind takes to reach the readers: from the rewind command (the start of `applyRewind`) until
 * each shard's reader starts reading at the new position (its `shard-started` event there), per backend:
 * the in-process MemoryStorage, Redis (127.0.0.1:6379) and PostgreSQL (127.0.0.1:5432, database `test`),
 * whose owners hear the request on the change feed, and DynamoDB (dynalite, in a process of its own), whose owners
 * learn of it from the group's mark on the leader record within a renew interval.
 *
 * Four workers in this process, each with its own storage client as separate processes would have, share
 * eight shards of a MemorySource that receives records all the time and is read at Kinesis's pace (a
 * batch per shard every 200 ms at most); each round rewinds the whole group to a second ago, with every
 * shard held by a live worker (so each moves by request).
 *
 *   pnpm --filter @leasehold/e2e bench:rewind                               every backend, default timing
 *   pnpm --filter @leasehold/e2e bench:rewind -- --lease-ms 3000 --rounds 3 --backend dynamodb
 *
 * Writes bench/results/rewind.json.
 */
import { applyRewind, awaitRewind, Consumer, MemorySource, MemoryStorage, planRewind, type Storage } from '@leasehold/core';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createInterface } from 'node:readline';
import { mkdirSync, writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { openStorage, prepareStorage } from '../src/storage-url.js';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';

const { values: args } = parseArgs({
  options: {
    backend: { type: 'string', multiple: true },
    rounds: { type: 'string', default: '5' },
    'lease-ms': { type: 'string', default: '10000' },
  },
});
const BACKENDS = ['memory', 'redis', 'postgres', 'dynamodb'] as const;
type BackendName = (typeof BACKENDS)[number];
const chosen = (args.backend ?? [...BACKENDS]) as BackendName[];
const rounds = Number(args.rounds);
const leaseDurationMs = Number(args['lease-ms']);
const SHARDS = 8;
const WORKERS = 4;
const log = (line: string): void => void process.stdout.write(`${line}\n`);

interface Opened {
  readonly storage: Storage;
  close(): Promise<void>;
}

/** A client per worker (and one for the tool) on a fresh space of the backend. */
async function clientsOf(backend: BackendName, count: number, dynamodbEndpoint: string): Promise<Opened[]> {
  const runId = `rw${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;
  if (backend === 'memory') {
    const storage = new MemoryStorage();
    return Array.from({ length: count }, () => ({ storage, close: async () => undefined }));
  }
  const base =
    backend === 'postgres'
      ? 'postgres://root@127.0.0.1:5432/test'
      : backend === 'redis'
        ? 'redis://127.0.0.1:6379'
        : `dynamodb://leasehold-bench?endpoint=${encodeURIComponent(dynamodbEndpoint)}&region=us-east-1`;
  const url = await prepareStorage(base, runId);
  return Promise.all(Array.from({ length: count }, async () => openStorage(url)));
}

function quantile(values: readonly number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
}

/** dynalite in a process of its own, so that its event loop is not the workers' (as a real DynamoDB is not). */
async function startDynaliteChild(): Promise<{ endpoint: string; close(): Promise<void> }> {
  const script = fileURLToPath(new URL('./dynalite-child.ts', import.meta.url));
  const child = spawn(process.execPath, ['--import', 'tsx', script], { cwd: fileURLToPath(new URL('..', import.meta.url)), stdio: ['pipe', 'pipe', 'inherit'] });
  const line = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout }).once('line', resolve);
    child.once('exit', (code) => reject(new Error(`dynalite exited with ${code} before it listened`)));
  });
  const { endpoint } = JSON.parse(line) as { endpoint: string };
  return {
    endpoint,
    close: async () => {
      child.stdin.end();
      await new Promise((resolve) => child.once('exit', resolve));
    },
  };
}

const dynalite = chosen.includes('dynamodb') ? await startDynaliteChild() : undefined;
const results: Record<string, unknown> = {};
try {
  for (const backend of chosen) {
    const clients = await clientsOf(backend, WORKERS + 1, dynalite?.endpoint ?? '');
    const tool = clients[WORKERS]!.storage;
    // Read at Kinesis's pace: GetRecords answers a shard at most five times a second, so an owner
    // checkpoints at most every 200 ms. (Faster than the tool's round trip, it would keep a request out.)
    const source = new MemorySource(SHARDS, { batchSize: 100, idleDelayMs: 200 });
    const group = `bench-rewind-${randomBytes(3).toString('hex')}`;
    const consumers = clients.slice(0, WORKERS).map(
      ({ storage }, i) =>
        new Consumer({
          group,
          source,
          storage,
          workerId: `worker-${i + 1}`,
          initialPosition: 'TRIM_HORIZON',
          lease: { leaseDurationMs },
          metrics: false,
          processBatch: () => undefined,
        }),
    );
    const producing = setInterval(() => {
      for (let key = 0; key < 16; key++) source.put(`key-${key}`, `record-${Date.now()}`);
    }, 20);
    await Promise.all(consumers.map((consumer) => consumer.start()));
    const balancedBy = Date.now() + 120_000;
    while (!consumers.every((consumer) => consumer.shards.length === SHARDS / WORKERS)) {
      if (Date.now() > balancedBy) throw new Error(`${backend}: the workers did not balance: ${consumers.map((consumer) => consumer.shards.length).join(', ')}`);
      await sleep(100);
    }
    const reaching: number[] = [];
    const completing: number[] = [];
    for (let round = 1; round <= rounds; round++) {
      await sleep(1_000);
      const startedAt = performance.now();
      const reached = new Map<string, number>();
      let to = '';
      const listeners = consumers.map((consumer) => {
        const listener = ({ shardId, position }: { shardId: string; position: string }): void => {
          if (position === to && !reached.has(shardId)) reached.set(shardId, performance.now() - startedAt);
        };
        consumer.on('shard-started', listener);
        return () => consumer.off('shard-started', listener);
      });
      const plan = await planRewind({ storage: tool, group, to: { time: Date.now() - 1_000 } });
      to = plan.to;
      const applied = await applyRewind(plan, { storage: tool });
      const progress = await awaitRewind(applied, { storage: tool, timeoutMs: 60_000, pollIntervalMs: 50 });
      const deadline = Date.now() + 60_000;
      while (reached.size < SHARDS && Date.now() < deadline) await sleep(10);
      for (const stop of listeners) stop();
      if (!progress.complete || reached.size < SHARDS) throw new Error(`${backend}: round ${round} did not reach every shard (${reached.size} of ${SHARDS})`);
      const times = [...reached.values()];
      reaching.push(...times);
      completing.push(progress.elapsedMs);
      log(`${backend} round ${round}: every shard reading at the target after ${Math.max(...times).toFixed(0)} ms (median ${quantile(times, 0.5).toFixed(0)} ms); awaitRewind complete after ${progress.elapsedMs.toFixed(0)} ms`);
    }
    clearInterval(producing);
    await Promise.all(consumers.map((consumer) => consumer.stop()));
    await Promise.all(clients.map((client) => client.close()));
    const summary = {
      leaseDurationMs,
      renewIntervalMs: Math.round(consumers[0]!.elector!.renewIntervalMs),
      shardsPerRound: SHARDS,
      rounds,
      medianMs: Math.round(quantile(reaching, 0.5)),
      p90Ms: Math.round(quantile(reaching, 0.9)),
      maxMs: Math.round(Math.max(...reaching)),
      awaitCompleteMedianMs: Math.round(quantile(completing, 0.5)),
    };
    results[backend] = summary;
    log(`${backend}: reading at the target after median ${summary.medianMs} ms, p90 ${summary.p90Ms} ms, max ${summary.maxMs} ms (lease ${leaseDurationMs} ms, renew ${summary.renewIntervalMs} ms)`);
  }
} finally {
  await dynalite?.close();
}
const out = fileURLToPath(new URL('./results/', import.meta.url));
mkdirSync(out, { recursive: true });
writeFileSync(`${out}rewind.json`, `${JSON.stringify(results, null, 2)}\n`);
log(`wrote ${out}rewind.json`);
process.exit(0);
