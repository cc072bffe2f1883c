/**
 * A consumer group worker on Kinesis, with the backend chosen by environment (see storage.ts). Start as
 * many as you like; they share the stream's shards. Stop one with SIGTERM or Ctrl-C: it finishes its
 * batches, checkpoints and hands its shards over at once.
 *
 *   KINESIS_STREAM=orders LEASEHOLD_STORAGE='postgres://localhost/app?schema=leasehold' \
 *     node --import tsx examples/consumer/main.ts
 *
 * KINESIS_ENDPOINT points the client at an emulator (plain HTTP/1.1, as kinesis-local speaks).
 */
import { KinesisClient } from '@aws-sdk/client-kinesis';
import { Consumer, type ShardSource } from '@leasehold/core';
import { KinesisSource } from '@leasehold/source-kinesis';
import { NodeHttpHandler } from '@smithy/node-http-handler';
import { pathToFileURL } from 'node:url';
import { MemoryTotals, totalOrders, type Totals } from './handler.js';
import { storageFromEnv } from './storage.js';

/** Starts one worker of the `orders-totals` group; the test calls this with its own source and totals. */
export async function startWorker(options: { source: ShardSource; totals: Totals; env?: NodeJS.ProcessEnv; group?: string }) {
  const opened = await storageFromEnv(options.env);
  const consumer = new Consumer({
    group: options.group ?? 'orders-totals',
    source: options.source,
    storage: opened.storage,
    initialPosition: 'TRIM_HORIZON',
    processBatch: totalOrders(options.totals),
    lease: { leaseDurationMs: 10_000 },
  });
  consumer.on('error', ({ error, operation }) => console.error(`[${operation}]`, error.message));
  await consumer.start();
  return {
    consumer,
    async stop(): Promise<void> {
      await consumer.stop({ timeoutMs: 20_000 });
      await opened.close();
    },
  };
}

/** The Kinesis source that the environment names. */
export function kinesisFromEnv(env: NodeJS.ProcessEnv = process.env): KinesisSource {
  const endpoint = env.KINESIS_ENDPOINT;
  const client = new KinesisClient({
    region: env.AWS_REGION ?? 'us-east-1',
    ...(endpoint ? { endpoint, requestHandler: new NodeHttpHandler() } : {}),
  });
  return new KinesisSource({ client, streamName: env.KINESIS_STREAM ?? 'orders' });
}

async function main(): Promise<void> {
  const totals = new MemoryTotals();
  const worker = await startWorker({ source: kinesisFromEnv(), totals });
  console.log(`worker ${worker.consumer.workerId} started`);
  const stop = (): void => {
    void worker.stop().then(() => {
      console.log('stopped; totals:', Object.fromEntries(totals.byCustomer));
      process.exit(0);
    });
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) await main();
