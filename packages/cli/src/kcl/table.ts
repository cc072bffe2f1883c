/**
 * The KCL lease table in DynamoDB: read whole (strongly consistent), watched for workers that still renew,
 * created in KCL's schema, written item by item.
 */
import {
  CreateTableCommand,
  DeleteItemCommand,
  DescribeTableCommand,
  DynamoDBClient,
  PutItemCommand,
  ResourceNotFoundException,
  ScanCommand,
} from '@aws-sdk/client-dynamodb';
import { InvalidConfigError, LeaseholdError, StorageUnavailableError } from '@leasehold/core';
import { describeValue } from '@leasehold/core/adapter';
import { PKG } from '../pkg.js';
import { isLeaseItem, type KclItem } from './lease.js';

/** Where the KCL lease table is. */
export interface KclTableTarget {
  readonly table: string;
  readonly region?: string | undefined;
  readonly endpoint?: string | undefined;
}

/** A KCL lease table opened for reading and writing. */
export interface KclTable {
  readonly name: string;
  /** Every item, or `null` when the table does not exist. */
  scan(): Promise<KclItem[] | null>;
  create(): Promise<void>;
  put(item: KclItem): Promise<void>;
  delete(leaseKey: string): Promise<void>;
  close(): void;
}

const TABLE_NAME = /^[a-zA-Z0-9_.-]{3,255}$/;

/** Opens the KCL table's client (one retry, as the command line's other clients). */
export function openKclTable(target: KclTableTarget): KclTable {
  if (!TABLE_NAME.test(target.table)) {
    throw new InvalidConfigError(`[${PKG}] --kcl-table ${describeValue(target.table)} is not a DynamoDB table name (3 to 255 of a-z, A-Z, 0-9, _ - .)`);
  }
  if (target.endpoint !== undefined) {
    try {
      new URL(target.endpoint);
    } catch {
      throw new InvalidConfigError(`[${PKG}] --kcl-endpoint ${describeValue(target.endpoint)} is not a URL`);
    }
  }
  const client = new DynamoDBClient({
    maxAttempts: 2,
    ...(target.region === undefined ? {} : { region: target.region }),
    ...(target.endpoint === undefined ? {} : { endpoint: target.endpoint }),
  });
  const name = target.table;
  const failed = (what: string, error: unknown): LeaseholdError =>
    new StorageUnavailableError(`[${PKG}] ${what} KCL table ${describeValue(name)}: ${(error as Error).message}`, { cause: error });
  return {
    name,
    async scan() {
      const items: KclItem[] = [];
      let start: KclItem | undefined;
      try {
        do {
          const page = await client.send(new ScanCommand({ TableName: name, ConsistentRead: true, ExclusiveStartKey: start }));
          items.push(...(page.Items ?? []));
          start = page.LastEvaluatedKey;
        } while (start !== undefined);
      } catch (error) {
        if (error instanceof ResourceNotFoundException) return null;
        throw failed('reading', error);
      }
      return items;
    },
    async create() {
      try {
        // KCL's schema: the lease key is the hash key. KCL 3.x adds its owner index itself when it starts.
        await client.send(
          new CreateTableCommand({
            TableName: name,
            BillingMode: 'PAY_PER_REQUEST',
            AttributeDefinitions: [{ AttributeName: 'leaseKey', AttributeType: 'S' }],
            KeySchema: [{ AttributeName: 'leaseKey', KeyType: 'HASH' }],
          }),
        );
        for (;;) {
          const { Table } = await client.send(new DescribeTableCommand({ TableName: name }));
          if (Table?.TableStatus === 'ACTIVE') return;
          await new Promise((resolve) => setTimeout(resolve, 200));
        }
      } catch (error) {
        throw failed('creating', error);
      }
    },
    async put(item) {
      try {
        await client.send(new PutItemCommand({ TableName: name, Item: item }));
      } catch (error) {
        throw failed(`writing lease ${describeValue(item.leaseKey?.S)} to`, error);
      }
    },
    async delete(leaseKey) {
      try {
        await client.send(new DeleteItemCommand({ TableName: name, Key: { leaseKey: { S: leaseKey } } }));
      } catch (error) {
        throw failed(`deleting lease ${describeValue(leaseKey)} from`, error);
      }
    },
    close() {
      client.destroy();
    },
  };
}

/** A KCL lease that moved while watched: a worker renewed, took or checkpointed it. */
export interface KclMove {
  readonly leaseKey: string;
  readonly owner: string | null;
  readonly fromCounter: string;
  readonly toCounter: string | null;
}

/**
 * Watches the table for `observeMs`, reading it every `pollMs`, and returns the first lease seen to move
 * (its counter, owner or checkpoint changed, or it appeared or went), or `null` when none moved. KCL
 * workers renew each lease they hold every third of their failover time (10 s by default), moving its
 * counter, so a watch of a failover time sees every running worker that holds a lease.
 */
export async function watchKclTable(table: KclTable, first: readonly KclItem[], observeMs: number, pollMs: number): Promise<KclMove | null> {
  const started = performance.now();
  const stamp = (item: KclItem): string => JSON.stringify([item.leaseCounter?.N, item.leaseOwner?.S, item.checkpoint?.S, item.checkpointSubSequenceNumber?.N]);
  const before = new Map(first.filter(isLeaseItem).map((item) => [item.leaseKey?.S ?? '', item]));
  for (;;) {
    const elapsed = performance.now() - started;
    if (elapsed >= observeMs) return null;
    await new Promise((resolve) => setTimeout(resolve, Math.min(pollMs, observeMs - elapsed)));
    const now = (await table.scan()) ?? [];
    const after = new Map(now.filter(isLeaseItem).map((item) => [item.leaseKey?.S ?? '', item]));
    for (const [leaseKey, item] of after) {
      const old = before.get(leaseKey);
      if (old === undefined || stamp(old) !== stamp(item)) {
        return { leaseKey, owner: item.leaseOwner?.S ?? null, fromCounter: old?.leaseCounter?.N ?? '(none)', toCounter: item.leaseCounter?.N ?? null };
      }
    }
    for (const [leaseKey, item] of before) {
      if (!after.has(leaseKey)) return { leaseKey, owner: item.leaseOwner?.S ?? null, fromCounter: item.leaseCounter?.N ?? '(none)', toCounter: null };
    }
  }
}
