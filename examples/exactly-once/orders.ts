/**
 * Orders from a stream into a Postgres table, exactly once: each batch's rows and its checkpoint commit in
 * one transaction on the database that also holds the leases, refused as a whole when the lease moved to
 * another worker. A crash, a rebalance or a zombie (a worker paused past its lease) never counts an order
 * twice nor loses one, although the totals below are not idempotent (`total_cents + amount`).
 *
 *   KINESIS_STREAM=orders DATABASE_URL=postgres://localhost/app node --import tsx examples/exactly-once/orders.ts
 *
 * KINESIS_ENDPOINT points the client at an emulator (plain HTTP/1.1, as kinesis-local speaks).
 */
import { KinesisClient } from '@aws-sdk/client-kinesis';
import { Consumer, LeaseLostError, type ShardSource } from '@leasehold/core';
import { KinesisSource } from '@leasehold/source-kinesis';
import { PostgresStorage } from '@leasehold/storage-postgres';
import { NodeHttpHandler } from '@smithy/node-http-handler';
import { pathToFileURL } from 'node:url';
import pg from 'pg';

/** One order event, as producers put it on the stream (JSON, partitioned by customer). */
export interface OrderPlaced {
  orderId: string;
  customer: string;
  amountCents: number;
}

/** Creates the lease tables and the example's own two tables in `schema`. Idempotent. */
export async function migrate(pool: pg.Pool, schema = 'public'): Promise<PostgresStorage> {
  const storage = new PostgresStorage({ pool, schema });
  await storage.migrate();
  const s = `"${schema}"`; // a schema name the storage accepted is a plain identifier
  await pool.query(`CREATE TABLE IF NOT EXISTS ${s}.orders (
    order_id text PRIMARY KEY, customer text NOT NULL, amount_cents bigint NOT NULL, shard_id text NOT NULL, position text NOT NULL)`);
  await pool.query(`CREATE TABLE IF NOT EXISTS ${s}.customer_totals (
    customer text PRIMARY KEY, total_cents bigint NOT NULL, orders bigint NOT NULL)`);
  return storage;
}

const decoder = new TextDecoder();

/** Starts one worker of the group; the test calls this with its own source and pool. */
export async function startOrdersWorker(options: { source: ShardSource; pool: pg.Pool; schema?: string; group?: string; workerId?: string }) {
  const schema = options.schema ?? 'public';
  const storage = await migrate(options.pool, schema);
  const consumer = new Consumer({
    group: options.group ?? 'orders-exactly-once',
    source: options.source,
    storage,
    ...(options.workerId ? { workerId: options.workerId } : {}),
    initialPosition: 'TRIM_HORIZON',
    lease: { leaseDurationMs: 10_000 },
    processBatch: async (records, ctx) => {
      // The batch's rows and its checkpoint: one transaction, fenced by the lease row it locks first.
      await storage.transaction(ctx, async (client) => {
        for (const record of records) {
          const order = JSON.parse(decoder.decode(record.data)) as OrderPlaced;
          await client.query(`INSERT INTO "${schema}".orders VALUES ($1, $2, $3, $4, $5)`, [order.orderId, order.customer, order.amountCents, ctx.shardId, record.position]);
          await client.query(
            `INSERT INTO "${schema}".customer_totals VALUES ($1, $2, 1)
             ON CONFLICT (customer) DO UPDATE SET total_cents = customer_totals.total_cents + EXCLUDED.total_cents, orders = customer_totals.orders + 1`,
            [order.customer, order.amountCents],
          );
        }
      });
    },
  });
  consumer.on('handler-failed', ({ shardId, error }) => {
    // A LeaseLostError means another worker owns the shard now: nothing of the batch was written.
    if (!(error instanceof LeaseLostError)) console.error(`[${shardId}]`, error.message);
  });
  await consumer.start();
  return { consumer, stop: (): Promise<void> => consumer.stop({ timeoutMs: 20_000 }) };
}

async function main(): Promise<void> {
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
  const endpoint = process.env.KINESIS_ENDPOINT;
  const client = new KinesisClient({ region: process.env.AWS_REGION ?? 'us-east-1', ...(endpoint ? { endpoint, requestHandler: new NodeHttpHandler() } : {}) });
  const source = new KinesisSource({ client, streamName: process.env.KINESIS_STREAM ?? 'orders' });
  const worker = await startOrdersWorker({ source, pool });
  console.log(`worker ${worker.consumer.workerId} started`);
  const stop = (): void => {
    void worker.stop().then(async () => {
      await pool.end();
      process.exit(0);
    });
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) await main();
