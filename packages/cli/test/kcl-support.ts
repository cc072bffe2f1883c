/**
 * KCL lease tables built by hand on dynalite, item by item, in the layout KCL's lease serializers write
 * (KCL 2.x: `leaseKey`, `leaseOwner`, `leaseCounter`, `checkpoint`, `checkpointSubSequenceNumber`,
 * `pendingCheckpoint*`, `ownerSwitchesSinceCheckpoint`, `parentShardId`, `childShardIds`, hash key range;
 * 3.x adds `throughputKBps`, `checkpointOwner`, `entityType`; multi-stream leases add `streamName` and
 * `shardId`), and a stand-in for a KCL worker that keeps renewing its lease.
 */
import { CreateTableCommand, DynamoDBClient, PutItemCommand, ScanCommand, UpdateItemCommand, type AttributeValue } from '@aws-sdk/client-dynamodb';
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
