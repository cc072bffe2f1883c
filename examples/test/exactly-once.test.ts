import { MemorySource } from '@leasehold/core';
import { postgresUrl } from '@leasehold/local-stack';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startOrdersWorker, type OrderPlaced } from '../exactly-once/orders.js';

const schema = `example_eo_${randomUUID().replaceAll('-', '').slice(0, 8)}`;
let pool: pg.Pool;

beforeAll(async () => {
  pool = new pg.Pool({ connectionString: postgresUrl(), max: 12 });
  pool.on('error', () => undefined);
  await pool.query('SELECT 1').catch((error: unknown) => {
    throw new Error(`PostgreSQL is not reachable (${(error as Error).message}); \`npm test\` starts a throwaway one when the PostgreSQL server binaries are installed; or start your own and set PGHOST, PGPORT, PGUSER and PGDATABASE`, { cause: error });
  });
});

afterAll(async () => {
  await pool?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await pool?.end();
});

async function eventually(condition: () => Promise<boolean>, what: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe('the exactly-once example', () => {
  it('writes every order and its customer total exactly once while workers join and leave', async () => {
    const customers = ['ada', 'grace', 'linus', 'barbara', 'ken'];
    const source = new MemorySource(4, { batchSize: 5 });
    const orders: OrderPlaced[] = [];
    const produce = (count: number): void => {
      for (let i = 0; i < count; i++) {
        const order = { orderId: `order-${orders.length}`, customer: customers[orders.length % customers.length] as string, amountCents: 100 + orders.length };
        orders.push(order);
        source.put(order.customer, JSON.stringify(order));
      }
    };
    const count = async (): Promise<number> => Number((await pool.query<{ n: string }>(`SELECT count(*) AS n FROM "${schema}".orders`)).rows[0]?.n);
    const first = await startOrdersWorker({ source, pool, schema, workerId: 'first' });
    produce(100);
    const second = await startOrdersWorker({ source, pool, schema, workerId: 'second' });
    produce(100);
    await eventually(async () => second.consumer.shards.length > 0 && (await count()) === orders.length, 'the second worker to take its share and every order');
    await first.stop();
    produce(100);
    await eventually(async () => (await count()) === orders.length, 'every order after the first worker left');
    await second.stop();

    const { rows } = await pool.query<{ customer: string; total_cents: string; orders: string }>(`SELECT * FROM "${schema}".customer_totals`);
    const totals = new Map(rows.map((row) => [row.customer, { total: Number(row.total_cents), orders: Number(row.orders) }]));
    for (const customer of customers) {
      const mine = orders.filter((order) => order.customer === customer);
      expect(totals.get(customer)).toEqual({ total: mine.reduce((sum, order) => sum + order.amountCents, 0), orders: mine.length });
    }
  });
});
