import { CreateStreamCommand, DescribeStreamSummaryCommand, KinesisClient, PutRecordsCommand } from '@aws-sdk/client-kinesis';
import { MemorySource } from '@leasehold/core';
import { postgresUrl, redisUrl, startDynalite, startKinesisLocal, type RunningDynalite, type RunningKinesisLocal } from '@leasehold/local-stack';
import { NodeHttpHandler } from '@smithy/node-http-handler';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryTotals, type OrderPlaced } from '../consumer/handler.js';
import { kinesisFromEnv, startWorker } from '../consumer/main.js';

const customers = ['ada', 'grace', 'linus', 'barbara'];
const orders: OrderPlaced[] = Array.from({ length: 40 }, (_, i) => ({
  orderId: `order-${i}`,
  customer: customers[i % customers.length] as string,
  amountCents: 100 + i,
}));
const expected = new Map(customers.map((customer) => [customer, orders.filter((o) => o.customer === customer).reduce((sum, o) => sum + o.amountCents, 0)]));

async function eventually(condition: () => boolean, what: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe('the consumer example', () => {
  it('totals every order once with the backend chosen by environment: memory in unit tests', async () => {
    const source = new MemorySource(2);
    for (const order of orders) source.put(order.customer, JSON.stringify(order));
    const totals = new MemoryTotals();
    const worker = await startWorker({ source, totals, env: {} });
    await eventually(() => totals.orders.size === orders.length, 'every order');
    await worker.stop();
    expect(totals.byCustomer).toEqual(expected);
  });

  describe('on Kinesis (kinesis-local) with each backend', () => {
    let kinesis: RunningKinesisLocal;
    let dynalite: RunningDynalite;
    const streamName = `orders-${randomUUID().slice(0, 8)}`;

    beforeAll(async () => {
      process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';
      [kinesis, dynalite] = await Promise.all([startKinesisLocal(), startDynalite()]);
      process.env.AWS_ACCESS_KEY_ID = kinesis.credentials.accessKeyId;
      process.env.AWS_SECRET_ACCESS_KEY = kinesis.credentials.secretAccessKey;
      const client = new KinesisClient({ region: kinesis.region, endpoint: kinesis.endpoint, requestHandler: new NodeHttpHandler() });
      await client.send(new CreateStreamCommand({ StreamName: streamName, ShardCount: 2 }));
      for (;;) {
        const { StreamDescriptionSummary } = await client.send(new DescribeStreamSummaryCommand({ StreamName: streamName }));
        if (StreamDescriptionSummary?.StreamStatus === 'ACTIVE') break;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      await client.send(
        new PutRecordsCommand({
          StreamName: streamName,
          Records: orders.map((order) => ({ PartitionKey: order.customer, Data: new TextEncoder().encode(JSON.stringify(order)) })),
        }),
      );
      client.destroy();
    }, 120_000);

    afterAll(async () => {
      await Promise.all([kinesis?.close(), dynalite?.close()]);
    });

    const startCommand: Record<string, string> = {
      postgres: '`npm test` starts a throwaway one when the PostgreSQL server binaries are installed; or start your own and set PGHOST, PGPORT, PGUSER and PGDATABASE',
      redis: '`npm test` starts a throwaway one when redis-server is on the PATH; or start your own and set REDIS_HOST and REDIS_PORT',
      dynamodb: 'nothing to start: dynalite runs in-process',
    };
    const backends: Array<[string, () => NodeJS.ProcessEnv]> = [
      ['postgres', () => ({ LEASEHOLD_STORAGE: `${postgresUrl()}?schema=example_${randomUUID().slice(0, 8)}` })],
      ['redis', () => ({ LEASEHOLD_STORAGE: `${redisUrl()}?prefix=example-${randomUUID().slice(0, 8)}:` })],
      ['dynamodb', () => ({ LEASEHOLD_STORAGE: `dynamodb://example-${randomUUID().slice(0, 8)}?endpoint=${encodeURIComponent(dynalite.endpoint)}&region=${kinesis.region}` })],
    ];
    for (const [backend, env] of backends) {
      it(`totals every order once with ${backend} holding the leases`, async () => {
        const source = kinesisFromEnv({ KINESIS_ENDPOINT: kinesis.endpoint, KINESIS_STREAM: streamName, AWS_REGION: kinesis.region });
        const totals = new MemoryTotals();
        const worker = await startWorker({ source, totals, env: env(), group: `orders-totals-${backend}` }).catch((error: unknown) => {
          throw new Error(`${backend} is not reachable (${(error as Error).message}); start it with: ${startCommand[backend]}`, { cause: error });
        });
        await eventually(() => totals.orders.size === orders.length, `every order on ${backend}`);
        await worker.stop();
        expect(totals.byCustomer).toEqual(expected);
      }, 120_000);
    }
  });
});
