/**
 * KCL lease tables built by hand on dynalite, item by item, in the layout KCL's lease serializers write
 * (KCL 2.x: `leaseKey`, `leaseOwner`, `leaseCounter`, `checkpoint`, `checkpointSubSequenceNumber`,
 * `pendingCheckpoint*`, `ownerSwitchesSinceCheckpoint`, `parentShardId`, `childShardIds`, hash key range;
 * 3.x adds `throughputKBps`, `checkpointOwner`, `entityType`; multi-stream leases add `streamName` and
 * `shardId`), the tables the tests import (one stream with a split and a merge, two streams with every
 * attribute), and a stand-in for a KCL worker that keeps renewing its lease.
 */
import { CreateTableCommand, DynamoDBClient, PutItemCommand, ScanCommand, UpdateItemCommand, waitUntilTableExists, type AttributeValue } from '@aws-sdk/client-dynamodb';
import { freshName } from './support.js';

/** A KCL lease as a test writes it: numbers and strings as KCL stores them, absent fields left out. */
export interface KclLeaseSpec {
  leaseKey: string;
  leaseOwner?: string;
  leaseCounter?: number;
  checkpoint: string;
  checkpointSubSequenceNumber?: number;
  pendingCheckpoint?: string;
  pendingCheckpointSubSequenceNumber?: number;
  pendingCheckpointState?: Uint8Array;
  ownerSwitchesSinceCheckpoint?: number;
  parentShardId?: string[];
  childShardIds?: string[];
  startingHashKey?: string;
  endingHashKey?: string;
  throughputKBps?: number;
  checkpointOwner?: string;
  entityType?: string;
  streamName?: string;
  shardId?: string;
}

/** The DynamoDB item of a lease, attribute types as KCL's serializer writes them. */
export function kclItem(spec: KclLeaseSpec): Record<string, AttributeValue> {
  const item: Record<string, AttributeValue> = {};
  for (const [name, value] of Object.entries(spec)) {
    if (value === undefined) continue;
    if (typeof value === 'number') item[name] = { N: String(value) };
    else if (typeof value === 'string') item[name] = { S: value };
    else if (value instanceof Uint8Array) item[name] = { B: value };
    else item[name] = { SS: value as string[] };
  }
  item.leaseCounter ??= { N: '1' };
  return item;
}

/** Creates a KCL lease table (hash key `leaseKey`) and writes the leases; returns its name. */
export async function kclTable(client: DynamoDBClient, leases: readonly (KclLeaseSpec | Record<string, AttributeValue>)[]): Promise<string> {
  const tableName = freshName('kcl');
  await client.send(
    new CreateTableCommand({
      TableName: tableName,
      BillingMode: 'PAY_PER_REQUEST',
      AttributeDefinitions: [{ AttributeName: 'leaseKey', AttributeType: 'S' }],
      KeySchema: [{ AttributeName: 'leaseKey', KeyType: 'HASH' }],
    }),
  );
  // A table is written only once ACTIVE: on a busy machine dynalite is still creating it when the first
  // PutItem comes (ResourceNotFoundException).
  await waitUntilTableExists({ client, maxWaitTime: 60, minDelay: 1, maxDelay: 2 }, { TableName: tableName });
  for (const lease of leases) {
    const item = typeof (lease as KclLeaseSpec).leaseKey === 'string' ? kclItem(lease as KclLeaseSpec) : (lease as Record<string, AttributeValue>);
    await client.send(new PutItemCommand({ TableName: tableName, Item: item }));
  }
  return tableName;
}

/** Every item of a table, by lease key. */
export async function scanTable(client: DynamoDBClient, tableName: string): Promise<Map<string, Record<string, AttributeValue>>> {
  const items = new Map<string, Record<string, AttributeValue>>();
  let start: Record<string, AttributeValue> | undefined;
  do {
    const page = await client.send(new ScanCommand({ TableName: tableName, ConsistentRead: true, ExclusiveStartKey: start }));
    for (const item of page.Items ?? []) items.set(item.leaseKey?.S ?? '', item);
    start = page.LastEvaluatedKey;
  } while (start !== undefined);
  return items;
}

/** A KCL worker stand-in: renews one lease (adds one to its counter) every `everyMs` until stopped. */
export function kclRenewer(client: DynamoDBClient, tableName: string, leaseKey: string, everyMs = 100): { stop(): Promise<void> } {
  let running = true;
  const loop = (async () => {
    while (running) {
      await client.send(
        new UpdateItemCommand({
          TableName: tableName,
          Key: { leaseKey: { S: leaseKey } },
          UpdateExpression: 'ADD leaseCounter :one',
          ExpressionAttributeValues: { ':one': { N: '1' } },
        }),
      );
      await new Promise((resolve) => setTimeout(resolve, everyMs));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
    },
  };
}

/** The `--kcl-*` options naming a table on dynalite. */
export function kclArgs(endpoint: string, tableName: string): string[] {
  return ['--kcl-table', tableName, '--kcl-region', 'us-east-1', '--kcl-endpoint', endpoint];
}

export const SEQ = {
  s1: '49655802218836443958227395874624049733543284513093844994',
  s2: '49655802218836443958227395874624049733543284513093845010',
  s2pending: '49655802218836443958227395874624049733543284513093845026',
  s3: '49655802218836443958227395874624049733543284513093845042',
};
export const HALF = '170141183460469231731687303715884105727';

/**
 * One stream's KCL table (KCL 2.x layout, one lease in KCL 3.x's): shard 0 split into 2 and 3, then 3
 * merged with 1 into 4. Shard 0 is finished, 2 is checkpointed inside an aggregated record with a
 * prepared checkpoint after it, 4 was never read.
 */
export function singleStreamLeases(): KclLeaseSpec[] {
  return [
    { leaseKey: 'shardId-000000000000', leaseOwner: 'kcl-worker-1', leaseCounter: 4211, checkpoint: 'SHARD_END', checkpointSubSequenceNumber: 0, ownerSwitchesSinceCheckpoint: 0, childShardIds: ['shardId-000000000002', 'shardId-000000000003'], startingHashKey: '0', endingHashKey: HALF },
    { leaseKey: 'shardId-000000000001', leaseOwner: 'kcl-worker-2', leaseCounter: 3907, checkpoint: SEQ.s1, checkpointSubSequenceNumber: 0, ownerSwitchesSinceCheckpoint: 1 },
    { leaseKey: 'shardId-000000000002', leaseOwner: 'kcl-worker-1', leaseCounter: 12, checkpoint: SEQ.s2, checkpointSubSequenceNumber: 1, pendingCheckpoint: SEQ.s2pending, pendingCheckpointSubSequenceNumber: 0, pendingCheckpointState: new Uint8Array([1, 2, 3]), ownerSwitchesSinceCheckpoint: 0, parentShardId: ['shardId-000000000000'] },
    { leaseKey: 'shardId-000000000003', leaseOwner: 'kcl-worker-2', leaseCounter: 9, checkpoint: SEQ.s3, checkpointSubSequenceNumber: 0, ownerSwitchesSinceCheckpoint: 0, parentShardId: ['shardId-000000000000'], throughputKBps: 12.5, entityType: 'LEASE' },
    { leaseKey: 'shardId-000000000004', leaseCounter: 1, checkpoint: 'TRIM_HORIZON', checkpointSubSequenceNumber: 0, ownerSwitchesSinceCheckpoint: 0, parentShardId: ['shardId-000000000001', 'shardId-000000000003'] },
  ];
}

export const ACCOUNT = '123456789012';
export const ORDERS = `${ACCOUNT}:orders:1714557600`;
export const PAYMENTS = `${ACCOUNT}:payments:1714557700`;

/** A multi-stream KCL 3.x table: two streams, a split in one, every attribute KCL writes. */
export function multiStreamLeases(): KclLeaseSpec[] {
  const lease = (streamName: string, shardId: string, rest: Omit<KclLeaseSpec, 'leaseKey' | 'streamName' | 'shardId'>): KclLeaseSpec => ({
    leaseKey: `${streamName}:${shardId}`,
    streamName,
    shardId,
    entityType: 'LEASE',
    ...rest,
  });
  return [
    lease(ORDERS, 'shardId-000000000000', { leaseOwner: 'kcl-a', leaseCounter: 77, checkpoint: 'SHARD_END', checkpointSubSequenceNumber: 0, ownerSwitchesSinceCheckpoint: 0, childShardIds: ['shardId-000000000001', 'shardId-000000000002'], startingHashKey: '0', endingHashKey: '340282366920938463463374607431768211455', throughputKBps: 0 }),
    lease(ORDERS, 'shardId-000000000001', { leaseOwner: 'kcl-a', leaseCounter: 31, checkpoint: SEQ.s1, checkpointSubSequenceNumber: 3, pendingCheckpoint: SEQ.s2, pendingCheckpointSubSequenceNumber: 0, pendingCheckpointState: new Uint8Array([7, 7]), ownerSwitchesSinceCheckpoint: 2, parentShardId: ['shardId-000000000000'], startingHashKey: '0', endingHashKey: HALF, throughputKBps: 3.25, checkpointOwner: 'kcl-b' }),
    lease(ORDERS, 'shardId-000000000002', { leaseCounter: 2, checkpoint: 'TRIM_HORIZON', checkpointSubSequenceNumber: 0, ownerSwitchesSinceCheckpoint: 0, parentShardId: ['shardId-000000000000'], startingHashKey: '170141183460469231731687303715884105728', endingHashKey: '340282366920938463463374607431768211455' }),
    lease(PAYMENTS, 'shardId-000000000000', { leaseOwner: 'kcl-b', leaseCounter: 5120, checkpoint: SEQ.s3, checkpointSubSequenceNumber: 0, ownerSwitchesSinceCheckpoint: 0, startingHashKey: '0', endingHashKey: '340282366920938463463374607431768211455', throughputKBps: 101.5 }),
    lease(PAYMENTS, 'shardId-000000000001', { leaseCounter: 1, checkpoint: 'LATEST', checkpointSubSequenceNumber: 0, ownerSwitchesSinceCheckpoint: 0 }),
  ];
}

/** Items as plain values with sets sorted, so that two scans compare as values. */
export function normalise(items: Map<string, Record<string, AttributeValue>>): Record<string, unknown> {
  return Object.fromEntries(
    [...items].map(([key, item]) => [
      key,
      Object.fromEntries(
        Object.entries(item)
          .sort(([a], [b]) => (a < b ? -1 : 1))
          .map(([name, value]) => [name, value.SS ? { SS: [...value.SS].sort() } : value.B ? { B: Buffer.from(value.B).toString('base64') } : value]),
      ),
    ]),
  );
}
