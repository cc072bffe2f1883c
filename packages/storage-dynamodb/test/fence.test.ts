/** Fenced sink updates on dynalite: each sink item refuses a zombie's writes and a replay by its own fence. */
import { CreateTableCommand, GetItemCommand, waitUntilTableExists, type DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { compareNumericPositions, InvalidConfigError, LeaseLostError } from '@leasehold/core';
import { seededRandom } from '@leasehold/core/testing';
import type { RunningDynalite } from '@leasehold/local-stack';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeFencePosition, fencedUpdate, type FencedUpdateResult } from '../src/index.js';
import { localClient, randomTableName, startLocalDynamo } from './support.js';

let dynalite: RunningDynalite;
let client: DynamoDBClient;
const tableName = randomTableName('fence');
let runs = 0;

beforeAll(async () => {
  dynalite = await startLocalDynamo();
  client = localClient(dynalite.endpoint);
  await client.send(
    new CreateTableCommand({
      TableName: tableName,
      AttributeDefinitions: [{ AttributeName: 'customer', AttributeType: 'S' }],
      KeySchema: [{ AttributeName: 'customer', KeyType: 'HASH' }],
      BillingMode: 'PAY_PER_REQUEST',
    }),
  );
  // Written only once ACTIVE: on a busy machine dynalite is still creating it when the first write comes.
  await waitUntilTableExists({ client, maxWaitTime: 60, minDelay: 1, maxDelay: 2 }, { TableName: tableName });
});

afterAll(async () => {
  client?.destroy();
  await dynalite?.close();
});

interface Order {
  readonly position: string;
  readonly customer: string;
  readonly amount: number;
}

/** Adds an order's amount to its customer's total: not idempotent, so a replay would count twice. */
function add(order: Order, shardId: string, fencingToken: number): Promise<FencedUpdateResult> {
  return fencedUpdate(client, {
    tableName,
    key: { customer: { S: order.customer } },
    shardId,
    fencingToken,
    position: order.position,
    updateExpression: 'ADD #total :amount, #orders :one',
    expressionAttributeNames: { '#total': 'total', '#orders': 'orders' },
    expressionAttributeValues: { ':amount': { N: String(order.amount) }, ':one': { N: '1' } },
  });
}

async function total(customer: string): Promise<{ total: number; orders: number }> {
  const { Item } = await client.send(new GetItemCommand({ TableName: tableName, Key: { customer: { S: customer } }, ConsistentRead: true }));
  return { total: Number(Item?.total?.N ?? 0), orders: Number(Item?.orders?.N ?? 0) };
}

/** Orders 1..count of a shard, spread over three customers of this run. */
function orders(count: number): { list: Order[]; customers: string[] } {
  const run = ++runs;
  const customers = [0, 1, 2].map((c) => `run-${run}-customer-${c}`);
  const list = Array.from({ length: count }, (_, i) => ({ position: String(1000 + i), customer: customers[i % 3] as string, amount: i + 1 }));
  return { list, customers };
}

function expected(list: readonly Order[], customer: string): { total: number; orders: number } {
  const mine = list.filter((order) => order.customer === customer);
  return { total: mine.reduce((sum, order) => sum + order.amount, 0), orders: mine.length };
}

describe('fencedUpdate', () => {
  it('applies each record once: the same records sent again (a replay after a crash, or a retry after a lost answer) are refused', async () => {
    const { list, customers } = orders(12);
    for (const order of list) expect(await add(order, 'shard-a', 1)).toBe('applied');
    for (const order of list.slice(4)) expect(await add(order, 'shard-a', 2)).toBe('replay');
    for (const customer of customers) expect(await total(customer)).toEqual(expected(list, customer));
  });

  it('refuses a zombie once the new owner wrote the item: a LeaseLostError, and the item is unchanged', async () => {
    const { list, customers } = orders(6);
    const [first, second, third, fourth] = list as [Order, Order, Order, Order];
    await add(first, 'shard-a', 1);
    await add(fourth, 'shard-a', 2); // the heir, on the first customer's item
    const refused = add({ ...first, position: '2000' }, 'shard-a', 1);
    await expect(refused).rejects.toThrow(LeaseLostError);
    await expect(refused).rejects.toThrow('fencing token 1 of shard "shard-a" is older than the 2 item');
    expect(await add(second, 'shard-a', 1)).toBe('applied'); // an item the heir has not written yet
    expect(await add(second, 'shard-a', 2)).toBe('replay');
    expect(await add(third, 'shard-a', 2)).toBe('applied');
    expect(await total(customers[0] as string)).toEqual({ total: first.amount + fourth.amount, orders: 2 });
  });

  it('a zombie and its heir writing one shard at once, the heir from an older checkpoint: every order counts exactly once', async () => {
    const random = seededRandom(11);
    for (let round = 0; round < 4; round++) {
      const { list, customers } = orders(30);
      for (const order of list.slice(0, 5)) await add(order, 'shard-a', 1);
      const zombie = (async () => {
        for (const order of list.slice(5)) {
          if (random.next() < 0.3) await new Promise((resolve) => setTimeout(resolve, 1));
          const outcome = await add(order, 'shard-a', 1).catch((error: unknown) => error);
          if (outcome instanceof LeaseLostError) return;
        }
      })();
      const heir = (async () => {
        for (const order of list.slice(3)) {
          if (random.next() < 0.3) await new Promise((resolve) => setTimeout(resolve, 1));
          await add(order, 'shard-a', 2);
        }
      })();
      await Promise.all([zombie, heir]);
      for (const customer of customers) expect(await total(customer)).toEqual(expected(list, customer));
    }
  });

  it('keeps the fences of different shards on one item apart', async () => {
    const { customers } = orders(0);
    const customer = customers[0] as string;
    const order = { position: '500', customer, amount: 3 };
    expect(await add(order, 'shard-a', 1)).toBe('applied');
    expect(await add(order, 'shard-b', 1)).toBe('applied');
    expect(await add(order, 'shard-b', 1)).toBe('replay');
    expect(await total(customer)).toEqual({ total: 6, orders: 2 });
  });

  it('encodes positions so that their byte order is the order of compareNumericPositions, Kinesis sequence numbers of 56 digits and sub-sequences included', () => {
    const positions = [
      '0',
      '7',
      '10',
      '49590338271490256608559692538361571095921575989136588898:0',
      '49590338271490256608559692538361571095921575989136588898:3',
      '49590338271490256608559692538361571095921575989136588898',
      '49590338271490256608559692538361571095921575989136588899',
      '149590338271490256608559692538361571095921575989136588898',
      '18446744073709551615:18446744073709551615',
    ];
    const byEncoding = [...positions].sort((a, b) => (encodeFencePosition(a) < encodeFencePosition(b) ? -1 : encodeFencePosition(a) > encodeFencePosition(b) ? 1 : 0));
    expect(byEncoding).toEqual([...positions].sort(compareNumericPositions));
    expect(encodeFencePosition('007')).toBe(encodeFencePosition('7'));
  });

  it('refuses bad input with an InvalidConfigError naming it, before anything is sent', async () => {
    const base = { tableName, key: { customer: { S: 'x' } }, shardId: 's', fencingToken: 1, position: '1', updateExpression: 'ADD #n :one' };
    await expect(fencedUpdate(client, { ...base, tableName: "a'b" })).rejects.toThrow(InvalidConfigError);
    await expect(fencedUpdate(client, { ...base, tableName: "a'b" })).rejects.toThrow(`[storage-dynamodb] table name "a'b" is not valid`);
    await expect(fencedUpdate(client, { ...base, position: 'LATEST' })).rejects.toThrow(
      '[storage-dynamodb] fence position "LATEST" is not a record position (a sequence number, with an optional :sub-sequence)',
    );
    await expect(fencedUpdate(client, { ...base, position: '1:18446744073709551616' })).rejects.toThrow('fence position "1:18446744073709551616" is not a record position');
    await expect(fencedUpdate(client, { ...base, fencingToken: 1.5 })).rejects.toThrow('[storage-dynamodb] fencedUpdate fencingToken must be a non-negative integer, got 1.5');
    await expect(fencedUpdate(client, { ...base, shardId: '' })).rejects.toThrow('[storage-dynamodb] fencedUpdate shardId must be a non-empty string, got ""');
    await expect(fencedUpdate(client, { ...base, expressionAttributeNames: { '#lhToken': 'x' } })).rejects.toThrow(
      '[storage-dynamodb] fencedUpdate placeholder "#lhToken" is reserved for the fence',
    );
  });
});
