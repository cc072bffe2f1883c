import { describe, expect, it, vi } from 'vitest';
import {
  ConditionalCheckFailedException,
  CreateTableCommand,
  GetItemCommand,
  ProvisionedThroughputExceededException,
  PutItemCommand,
  QueryCommand,
  UpdateItemCommand,
  type AttributeValue,
  type DynamoDBClient,
  type DynamoDBClientConfig,
} from '@aws-sdk/client-dynamodb';
import {
  CorruptRecordError,
  InvalidConfigError,
  InvalidInputError,
  StorageOutcomeUnknownError,
  StorageSchemaError,
  StorageUnavailableError,
  type LeaseRecord,
  type MemberRecord,
  type MemberState,
  type WriteResult,
} from '@leasehold/core';
import { leaderStateOf, leaseStateOf, limits, memberStateOf } from '@leasehold/core/adapter';
import { DynamoDBStorage, checkTable, createTable } from '../src/index.js';
import { memberBucket, memberBucketKeys, memberItemKey } from '../src/items.js';
import { MEMBER_VERSION_SPAN, checkItemSize, itemBytes } from '../src/schema.js';
import { injectFaults, localClient, memberState, meter, randomTableName, sortKeyOf, useDynalite, type Injection, type Metered } from './support.js';

const dynamo = useDynalite('dynamodb');
const { tableName } = dynamo;
const client = (config?: DynamoDBClientConfig): DynamoDBClient => dynamo.client(config);
let groupCount = 0;

function group(): string {
  return `group-${process.pid}-${groupCount++}`;
}

/** The item as stored, read strongly consistently around the adapter. */
async function readItem(g: string, sortKey: string): Promise<Record<string, AttributeValue> | undefined> {
  const { Item } = await client().send(new GetItemCommand({ TableName: tableName, Key: { pk: { S: g }, sk: { S: sortKey } }, ConsistentRead: true }));
  return Item;
}

function appliedRecord<T>(outcome: WriteResult<T> | undefined): T {
  expect(outcome?.status).toBe('applied');
  return (outcome as { record: T }).record;
}

/** A client whose every attempt goes through `inject` (see `injectFaults`). */
function injectingClient(inject: Injection, config: Parameters<typeof localClient>[1] = {}): DynamoDBClient {
  return injectFaults(client(config), inject);
}

function throttle(): ProvisionedThroughputExceededException {
  return new ProvisionedThroughputExceededException({ message: 'injected throttle', $metadata: { httpStatusCode: 400 } });
}

function lostResponse(): Error {
  return Object.assign(new Error('injected: the response was lost after the request was sent'), { name: 'TimeoutError' });
}

/**
 * A storage whose first `UpdateItem` attempt is handed to `first` instead of being sent as it is; every
 * later attempt is sent. `first` plays what happened to it: lost on the way, or applied with its answer lost.
 */
function storageFailingFirstUpdate(first: (send: () => Promise<unknown>) => Promise<unknown>): DynamoDBStorage {
  let failed = false;
  return new DynamoDBStorage({
    client: injectingClient(async (command, send) => {
      if (command === 'UpdateItemCommand' && !failed) {
        failed = true;
        return first(send);
      }
      return send();
    }),
    tableName,
  });
}

describe('DynamoDBStorage options and table', () => {
  it('refuses a table name outside 3 to 255 of [a-zA-Z0-9_.-] before sending anything', () => {
    for (const bad of ['ab', "a'b", 'a b', 'x'.repeat(256), '', 'ü-table']) {
      expect(() => new DynamoDBStorage({ client: client(), tableName: bad })).toThrow(InvalidConfigError);
    }
    expect(() => new DynamoDBStorage({ client: client(), tableName: "a'b" })).toThrow(
      `[storage-dynamodb] table name "a'b" is not valid: use 3 to 255 of the characters a-z, A-Z, 0-9, '_', '-' and '.'`,
    );
    expect(() => new DynamoDBStorage({ client: client(), tableName: 'abc' })).not.toThrow();
    expect(() => new DynamoDBStorage({ client: client(), tableName: 'A.b-c_'.padEnd(255, '9') })).not.toThrow();
  });

  it('refuses an option it does not take with an InvalidConfigError naming it, and what it takes', () => {
    expect(() => new DynamoDBStorage({ client: client(), tableName, table: 'leases' } as never)).toThrow(InvalidConfigError);
    expect(() => new DynamoDBStorage({ client: client(), tableName, table: 'leases' } as never)).toThrow(
      '[storage-dynamodb] DynamoDBStorage has no option "table"; it takes client, tableName, writeConcurrency',
    );
    expect(() => new DynamoDBStorage({ client: client(), tableName, writeconcurrency: 4 } as never)).toThrow('did you mean writeConcurrency?');
  });

  it('refuses a write concurrency that is not an integer from 1 to 1000', () => {
    for (const bad of [0, -1, 1.5, 1001, Number.NaN]) {
      expect(() => new DynamoDBStorage({ client: client(), tableName, writeConcurrency: bad })).toThrow(InvalidConfigError);
    }
    expect(() => new DynamoDBStorage({ client: client(), tableName, writeConcurrency: 0 })).toThrow(
      '[storage-dynamodb] writeConcurrency must be an integer from 1 to 1000, got 0',
    );
  });

  it("close() and await using never destroy the caller's client, which another adapter goes on using", async () => {
    const shared = client();
    const destroy = vi.spyOn(shared, 'destroy');
    const g = group();
    {
      await using first = new DynamoDBStorage({ client: shared, tableName });
      appliedRecord(await first.createLease({ group: g, leaseKey: 'before-close' }));
      await first.close();
    }
    expect(destroy).not.toHaveBeenCalled();
    const second = new DynamoDBStorage({ client: shared, tableName });
    appliedRecord(await second.createLease({ group: g, leaseKey: 'after-close' }));
    expect((await second.listLeases(g)).leases.map((lease) => lease.leaseKey).sort()).toEqual(['after-close', 'before-close']);
  });

  it('createTable is harmless when the table exists, and the table passes the key-schema check', async () => {
    const storage = new DynamoDBStorage({ client: client(), tableName });
    const g = group();
    appliedRecord(await storage.createLease({ group: g, leaseKey: 'kept' }));
    await storage.createTable();
    await expect(storage.checkTable()).resolves.toBeUndefined();
    expect((await storage.listLeases(g)).leases.map((lease) => lease.leaseKey)).toEqual(['kept']);
  });

  it('a missing table is a StorageSchemaError that says to call createTable(), for reads and writes alike', async () => {
    const storage = new DynamoDBStorage({ client: client(), tableName: 'no-such-table' });
    const message = '[storage-dynamodb] table "no-such-table" does not exist: create it with createTable()';
    await expect(storage.checkTable()).rejects.toThrow(new StorageSchemaError(message));
    await expect(storage.listLeases('g')).rejects.toThrow(new StorageSchemaError(message));
    await expect(storage.getLeader('g')).rejects.toThrow(new StorageSchemaError(message));
    await expect(storage.createLease({ group: 'g', leaseKey: 'k' })).rejects.toThrow(new StorageSchemaError(message));
    await expect(storage.updateLeases('g', [{ leaseKey: 'k', expectedVersion: 1, next: leaseStateOf({}) }])).rejects.toThrow(StorageSchemaError);
    await expect(storage.updateLeader('g', 1, leaderStateOf({ holder: 'w', term: 1 }))).rejects.toThrow(new StorageSchemaError(message));
  });

  it('a table with another key schema is a StorageSchemaError naming both schemas, from the check and from every operation', async () => {
    const raw = client();
    const wrong = randomTableName('wrong-schema');
    await raw.send(
      new CreateTableCommand({
        TableName: wrong,
        BillingMode: 'PAY_PER_REQUEST',
        AttributeDefinitions: [{ AttributeName: 'id', AttributeType: 'S' }],
        KeySchema: [{ AttributeName: 'id', KeyType: 'HASH' }],
      }),
    );
    const message = `[storage-dynamodb] table "${wrong}" has key schema id (HASH, S); expected pk (HASH, S), sk (RANGE, S): use another table or create this one with createTable()`;
    await expect(checkTable(raw, wrong)).rejects.toThrow(new StorageSchemaError(message));
    await expect(createTable(raw, wrong)).rejects.toThrow(new StorageSchemaError(message));
    const storage = new DynamoDBStorage({ client: raw, tableName: wrong });
    await expect(storage.listLeases('g')).rejects.toThrow(new StorageSchemaError(message));
    await expect(storage.getLease('g', 'k')).rejects.toThrow(new StorageSchemaError(message));
    await expect(storage.createLease({ group: 'g', leaseKey: 'k' })).rejects.toThrow(new StorageSchemaError(message));
    await expect(storage.createLeader({ group: 'g' })).rejects.toThrow(new StorageSchemaError(message));
  });

  it('an item over 400 KB is refused with an InvalidInputError naming its size, and sizes count names and values', () => {
    const small: Record<string, AttributeValue> = { pk: { S: 'g' }, sk: { S: 'lease:ü' }, version: { N: '12' }, deleted: { BOOL: true } };
    expect(itemBytes(small)).toBe(2 + 1 + 2 + 8 + 7 + 3 + 7 + 1);
    const big = { ...small, state: { S: 'x'.repeat(400 * 1024) } };
    expect(() => checkItemSize(big, 'lease "k" of group "g"')).toThrow(InvalidInputError);
    expect(() => checkItemSize(big, 'lease "k" of group "g"')).toThrow(
      `[storage-dynamodb] lease "k" of group "g" would be an item of ${itemBytes(big)} bytes; DynamoDB's limit is 409600`,
    );
    expect(() => checkItemSize(small, 'small')).not.toThrow();
  });
});

describe('DynamoDBStorage on DynamoDB', () => {
  it('a group whose items exceed the 1 MB page (3,000 leases with 500 bytes of metadata) lists completely', async () => {
    let queries = 0;
    const storage = new DynamoDBStorage({
      client: injectingClient(async (command, send) => {
        if (command === 'QueryCommand') queries++;
        return send();
      }),
      tableName,
    });
    const g = group();
    const keys = Array.from({ length: 3000 }, (_, i) => `shardId-${String(i).padStart(12, '0')}`);
    for (let start = 0; start < keys.length; start += 200) {
      const created = await Promise.all(
        keys.slice(start, start + 200).map((leaseKey) => storage.createLease({ group: g, leaseKey, metadata: { padding: 'p'.repeat(500) } })),
      );
      for (const outcome of created) expect(outcome.status).toBe('applied');
    }
    const { leases: listed } = await storage.listLeases(g);
    expect(listed.map((lease) => lease.leaseKey).sort()).toEqual(keys);
    expect(queries).toBeGreaterThan(1);
  });

  it('a throttled write is retried by the SDK with backoff and applies', async () => {
    let throttles = 0;
    const storage = new DynamoDBStorage({
      client: injectingClient(async (command, send) => {
        if (command === 'UpdateItemCommand' && throttles < 2) {
          throttles++;
          throw throttle();
        }
        return send();
      }, { maxAttempts: 3 }),
      tableName,
    });
    const g = group();
    const lease = appliedRecord(await storage.createLease({ group: g, leaseKey: 'k' }));
    const [outcome] = await storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner: 'w' } }]);
    expect(appliedRecord(outcome).owner).toBe('w');
    expect(throttles).toBe(2);
    expect((await storage.getLease(g, 'k'))?.version).toBe(lease.version + 1);
  });

  it('a write still throttled when the SDK gives up is unknown, and the other writes of its batch keep their own results', async () => {
    const storage = new DynamoDBStorage({
      client: injectingClient(async (_command, send, input) => {
        if (sortKeyOf(input) === 'lease:b') throw throttle();
        return send();
      }, { maxAttempts: 2 }),
      tableName,
    });
    const g = group();
    const a = appliedRecord(await storage.createLease({ group: g, leaseKey: 'a' }));
    const created = await storage.createLease({ group: g, leaseKey: 'b' });
    expect(created.status).toBe('unknown');
    const error = (created as { error: Error }).error;
    expect(error).toBeInstanceOf(StorageOutcomeUnknownError);
    expect(error.message).toBe(
      `[storage-dynamodb] create of lease "b" in group "${g}" was still throttled after 2 attempt(s) (ProvisionedThroughputExceededException: injected throttle); it may or may not have applied`,
    );
    const results = await storage.updateLeases(g, [
      { leaseKey: 'a', expectedVersion: a.version, next: { ...leaseStateOf(a), owner: 'w' } },
      { leaseKey: 'b', expectedVersion: 1, next: { ...leaseStateOf(a), owner: 'w' } },
      { leaseKey: 'c', expectedVersion: 1, next: { ...leaseStateOf(a), owner: 'w' } },
    ]);
    expect(results.map((outcome) => outcome.status)).toEqual(['applied', 'unknown', 'conflict']);
    expect((await storage.listLeases(g)).leases.map((lease) => [lease.leaseKey, lease.owner])).toEqual([['a', 'w']]);
  });

  it('a read still throttled when the SDK gives up is a StorageUnavailableError naming the throttle', async () => {
    const storage = new DynamoDBStorage({
      client: injectingClient(async () => {
        throw throttle();
      }, { maxAttempts: 2 }),
      tableName,
    });
    await expect(storage.listLeases('g')).rejects.toThrow(
      new StorageUnavailableError('[storage-dynamodb] could not list the leases of group "g": ProvisionedThroughputExceededException: injected throttle'),
    );
    await expect(storage.getLease('g', 'k')).rejects.toThrow(StorageUnavailableError);
    await expect(storage.getLeader('g')).rejects.toThrow(
      '[storage-dynamodb] could not read the leader record of group "g": ProvisionedThroughputExceededException: injected throttle',
    );
  });

  it('a write whose response was lost and that the SDK retried is recognised as applied (the false conflict)', async () => {
    // Every write's first attempt applies and its response is lost; the SDK retries the same request.
    const attempted = new WeakSet<object>();
    let lost = 0;
    const storage = new DynamoDBStorage({
      client: injectingClient(async (command, send, input) => {
        if (command === 'GetItemCommand' || command === 'QueryCommand' || attempted.has(input as object)) return send();
        attempted.add(input as object);
        lost++;
        await send();
        throw lostResponse();
      }),
      tableName,
    });
    const g = group();
    const created = appliedRecord(await storage.createLease({ group: g, leaseKey: 'k', owner: 'a', epoch: 1 }));
    expect(created.version).toBe(1);
    const [renewed] = await storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: created.version, next: { ...leaseStateOf(created), checkpoint: '7' } }]);
    expect(appliedRecord(renewed)).toEqual({ ...created, version: 2, checkpoint: '7' });
    expect(await storage.getLease(g, 'k')).toEqual({ ...created, version: 2, checkpoint: '7' });
    expect(await storage.deleteLease(g, 'k', 2)).toEqual({ status: 'applied' });
    expect(await storage.getLease(g, 'k')).toBeNull();
    const recreated = appliedRecord(await storage.createLease({ group: g, leaseKey: 'k' }, { recreate: true }));
    expect({ version: recreated.version, epoch: recreated.epoch }).toEqual({ version: 4, epoch: 1 });
    const leader = appliedRecord(await storage.createLeader({ group: g, holder: 'a', term: 1 }));
    const next = appliedRecord(await storage.updateLeader(g, leader.version, { ...leaderStateOf(leader), holder: 'b', term: 2 }));
    expect(await storage.getLeader(g)).toEqual(next);
    // The recreate over the tombstone takes two writes: the fresh create that fails, then the continuation.
    expect(lost).toBe(7);
  });

  it('a retried write that finds another writer\'s record at the version it would have made is a conflict carrying that record', async () => {
    const g = group();
    const other = new DynamoDBStorage({ client: client(), tableName });
    const lease = appliedRecord(await other.createLease({ group: g, leaseKey: 'k' }));
    const storage = storageFailingFirstUpdate(async () => {
      // The first attempt never reaches DynamoDB; meanwhile another worker takes the lease.
      appliedRecord((await other.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner: 'other', epoch: 1 } }]))[0]);
      throw lostResponse();
    });
    const [outcome] = await storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner: 'me', epoch: 1 } }]);
    expect(outcome?.status).toBe('conflict');
    expect((outcome as { current: LeaseRecord }).current).toEqual({ ...lease, version: lease.version + 1, owner: 'other', epoch: 1 });
  });

  it('a retried write that finds the record moved past the version it would have made is unknown, since its first attempt may have applied', async () => {
    const g = group();
    const other = new DynamoDBStorage({ client: client(), tableName });
    const lease = appliedRecord(await other.createLease({ group: g, leaseKey: 'k' }));
    const storage = storageFailingFirstUpdate(async (send) => {
      await send();
      // The renewal applied but its response was lost; another worker writes before the retry arrives.
      const mine = (await other.getLease(g, 'k'))!;
      appliedRecord((await other.updateLeases(g, [{ leaseKey: 'k', expectedVersion: mine.version, next: { ...leaseStateOf(mine), owner: 'thief', incarnation: 'thief-1', epoch: mine.epoch + 1 } }]))[0]);
      throw lostResponse();
    });
    const [outcome] = await storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner: 'me', epoch: 1 } }]);
    expect(outcome?.status).toBe('unknown');
    expect((outcome as { error: Error }).error).toBeInstanceOf(StorageOutcomeUnknownError);
    expect((outcome as { error: Error }).error.message).toBe(
      `[storage-dynamodb] update of lease "k" in group "${g}" was retried and the record has moved on since; its first attempt may have applied`,
    );
    expect((await other.getLease(g, 'k'))?.version).toBe(lease.version + 2);
  });

  it('a conflict takes the current record from ALL_OLD when DynamoDB returns it, with no extra read', async () => {
    const g = group();
    const raw = client();
    let reads = 0;
    const storage = new DynamoDBStorage({
      client: injectingClient(async (command, send) => {
        if (command === 'GetItemCommand') reads++;
        try {
          return await send();
        } catch (error) {
          // dynalite ignores ReturnValuesOnConditionCheckFailure; answer as DynamoDB does.
          if (!(error instanceof ConditionalCheckFailedException)) throw error;
          const { Item } = await raw.send(new GetItemCommand({ TableName: tableName, Key: { pk: { S: g }, sk: { S: 'lease:k' } }, ConsistentRead: true }));
          throw new ConditionalCheckFailedException({ message: error.message, $metadata: error.$metadata, Item });
        }
      }),
      tableName,
    });
    const lease = appliedRecord(await storage.createLease({ group: g, leaseKey: 'k', owner: 'a', epoch: 3 }));
    const [stale] = await storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version + 1, next: { ...leaseStateOf(lease), owner: 'b' } }]);
    expect(stale).toEqual({ status: 'conflict', current: lease });
    const again = await storage.createLease({ group: g, leaseKey: 'k' });
    expect(again).toEqual({ status: 'conflict', current: lease });
    expect(reads).toBe(0);
  });

  it('a batch runs at most writeConcurrency writes at once, each with its own result', async () => {
    let inFlight = 0;
    let most = 0;
    const storage = new DynamoDBStorage({
      client: injectingClient(async (command, send) => {
        if (command !== 'UpdateItemCommand') return send();
        most = Math.max(most, ++inFlight);
        try {
          return await send();
        } finally {
          inFlight--;
        }
      }),
      tableName,
      writeConcurrency: 4,
    });
    const g = group();
    const leases = await Promise.all(Array.from({ length: 40 }, async (_, i) => appliedRecord(await storage.createLease({ group: g, leaseKey: `k${i}` }))));
    const results = await storage.updateLeases(
      g,
      leases.map((lease, i) => ({ leaseKey: lease.leaseKey, expectedVersion: i % 2 === 0 ? lease.version : lease.version + 1, next: { ...leaseStateOf(lease), owner: 'w' } })),
    );
    expect(results.map((outcome) => outcome.status)).toEqual(leases.map((_, i) => (i % 2 === 0 ? 'applied' : 'conflict')));
    expect(most).toBe(4);
  });

  it('a lease deleted and created again continues its version and epoch from the tombstone, which never lists', async () => {
    const storage = new DynamoDBStorage({ client: client(), tableName });
    const g = group();
    const lease = appliedRecord(await storage.createLease({ group: g, leaseKey: 'k', owner: 'a', epoch: 9 }));
    expect(await storage.deleteLease(g, 'k', lease.version)).toEqual({ status: 'applied' });
    expect(await storage.listLeases(g)).toEqual({ leases: [], corrupt: [] });
    const again = appliedRecord(await storage.createLease({ group: g, leaseKey: 'k', epoch: 2 }, { recreate: true }));
    expect({ version: again.version, epoch: again.epoch, owner: again.owner }).toEqual({ version: lease.version + 2, epoch: 9, owner: null });
    expect(await storage.listLeases(g)).toEqual({ leases: [again], corrupt: [] });
  });

  it('does not create a deleted key again without recreate: a conflict with no current lease, and the tombstone stays as it was', async () => {
    const storage = new DynamoDBStorage({ client: client(), tableName });
    const g = group();
    const lease = appliedRecord(await storage.createLease({ group: g, leaseKey: 'k', owner: 'a', epoch: 4 }));
    expect(await storage.deleteLease(g, 'k', lease.version)).toEqual({ status: 'applied' });
    const tombstone = await readItem(g, 'lease:k');
    expect(tombstone).toMatchObject({ version: { N: String(lease.version + 1) }, epoch: { N: '4' }, deleted: { BOOL: true } });
    expect(await storage.createLease({ group: g, leaseKey: 'k' })).toEqual({ status: 'conflict', current: null });
    expect(await storage.createLease({ group: g, leaseKey: 'k' }, { recreate: false })).toEqual({ status: 'conflict', current: null });
    expect(await readItem(g, 'lease:k')).toEqual(tombstone);
    expect(appliedRecord(await storage.createLease({ group: g, leaseKey: 'k' }, { recreate: true }))).toMatchObject({ version: lease.version + 2, epoch: 4 });
    expect(appliedRecord(await storage.createLease({ group: g, leaseKey: 'never-had-one' }, { recreate: true })).version).toBe(1);
  });

  it('keeps format 2 and fields core does not name through create, batched update, get, list, conflicts and a recreate', async () => {
    const storage = new DynamoDBStorage({ client: client(), tableName });
    const g = group();
    const later = { format: 2, shardRange: { start: '0', end: '9'.repeat(39) }, tags: ['a', 1.5, true, null, { deep: [] }] };
    const created = appliedRecord(await storage.createLease({ group: g, leaseKey: 'one', owner: 'a', epoch: 3, ...later }));
    expect(created).toEqual({ ...leaseStateOf({ owner: 'a', epoch: 3, ...later }), group: g, leaseKey: 'one', version: 1 });
    expect(await storage.getLease(g, 'one')).toEqual(created);
    const two = appliedRecord(await storage.createLease({ group: g, leaseKey: 'two' }));
    const [one, taken] = (
      await storage.updateLeases(g, [
        { leaseKey: 'one', expectedVersion: created.version, next: { ...leaseStateOf(created), checkpoint: '7' } },
        { leaseKey: 'two', expectedVersion: two.version, next: { ...leaseStateOf(two), ...later } },
      ])
    ).map((outcome) => appliedRecord(outcome));
    expect(one).toEqual({ ...created, checkpoint: '7', version: 2 });
    expect(taken).toEqual({ ...two, ...later, version: 2 });
    expect(await storage.listLeases(g)).toEqual({ leases: [one, taken], corrupt: [] });
    expect(await storage.updateLeases(g, [{ leaseKey: 'one', expectedVersion: created.version, next: leaseStateOf(created) }])).toEqual([
      { status: 'conflict', current: one },
    ]);
    expect(await storage.createLease({ group: g, leaseKey: 'one' })).toEqual({ status: 'conflict', current: one });
    expect(await storage.deleteLease(g, 'one', created.version)).toEqual({ status: 'conflict', current: one });
    expect(await storage.deleteLease(g, 'one', one!.version)).toEqual({ status: 'applied' });
    const again = appliedRecord(await storage.createLease({ group: g, leaseKey: 'one', ...later }, { recreate: true }));
    expect(again).toEqual({ ...leaseStateOf({ epoch: 3, ...later }), group: g, leaseKey: 'one', version: 4 });

    const leader = appliedRecord(await storage.createLeader({ group: g, holder: 'w1', term: 1, ...later }));
    expect(leader).toEqual({ ...leaderStateOf({ holder: 'w1', term: 1, ...later }), group: g, version: 1 });
    const next = appliedRecord(await storage.updateLeader(g, leader.version, { ...leaderStateOf(leader), holder: 'w2', term: 2 }));
    expect(next).toEqual({ ...leader, holder: 'w2', term: 2, version: 2 });
    expect(await storage.getLeader(g)).toEqual(next);
    expect(await storage.updateLeader(g, leader.version, leaderStateOf(leader))).toEqual({ status: 'conflict', current: next });
  });
});

describe('DynamoDBStorage corrupt items', () => {
  const raw = (): DynamoDBClient => client();
  /** Writes an item as another program with the wrong idea of its shape would. */
  async function put(g: string, sortKey: string, attributes: Record<string, AttributeValue>): Promise<void> {
    await raw().send(new PutItemCommand({ TableName: tableName, Item: { pk: { S: g }, sk: { S: sortKey }, ...attributes } }));
  }

  it('lists items with a wrong attribute type in corrupt, one error naming each, and every other lease of the group', async () => {
    const storage = new DynamoDBStorage({ client: client(), tableName });
    const g = group();
    for (const leaseKey of ['a', 'b', 'c', 'd']) appliedRecord(await storage.createLease({ group: g, leaseKey }));
    const state = { S: JSON.stringify(leaseStateOf({})) };
    await put(g, 'lease:b', { version: { S: '2' }, epoch: { N: '0' }, state });
    await put(g, 'lease:c', { version: { N: '2' }, epoch: { N: '0' }, state: { N: '1' } });
    const { leases, corrupt } = await storage.listLeases(g);
    expect(leases.map((lease) => lease.leaseKey)).toEqual(['a', 'd']);
    expect(corrupt.every((error) => error instanceof CorruptRecordError)).toBe(true);
    expect(corrupt.map((error) => [error.leaseKey, error.message])).toEqual([
      ['b', `[storage-dynamodb] stored lease "b" of group "${g}" is corrupt: version must be a positive integer, found {"S":"2"}`],
      ['c', `[storage-dynamodb] stored lease "c" of group "${g}" is corrupt: state is undefined`],
    ]);
    await expect(storage.getLease(g, 'b')).rejects.toThrow(CorruptRecordError);
    await expect(storage.getLease(g, 'c')).rejects.toThrow(`[storage-dynamodb] stored lease "c" of group "${g}" is corrupt: state is undefined`);
  });

  it('a batch that meets a corrupt item applies the others and gives unknown with the CorruptRecordError for it alone; create and delete on it are unknown too, and it is never overwritten', async () => {
    const storage = new DynamoDBStorage({ client: client(), tableName });
    const g = group();
    const leases = [];
    for (const leaseKey of ['a', 'bad', 'c']) leases.push(appliedRecord(await storage.createLease({ group: g, leaseKey })));
    const damaged = { version: { S: '1' }, epoch: { N: '0' }, state: { S: '{"owner": nope' } };
    await put(g, 'lease:bad', damaged);
    const results = await storage.updateLeases(g, leases.map((lease) => ({ leaseKey: lease.leaseKey, expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner: 'w' } })));
    expect(results.map((outcome) => outcome.status)).toEqual(['applied', 'unknown', 'applied']);
    const [, unknown] = results;
    expect(unknown?.status === 'unknown' && unknown.error).toBeInstanceOf(CorruptRecordError);
    expect(unknown?.status === 'unknown' && unknown.error).toMatchObject({ group: g, leaseKey: 'bad' });
    expect((await storage.listLeases(g)).leases.map((lease) => [lease.leaseKey, lease.owner])).toEqual([['a', 'w'], ['c', 'w']]);
    for (const outcome of [
      await storage.createLease({ group: g, leaseKey: 'bad' }),
      await storage.createLease({ group: g, leaseKey: 'bad' }, { recreate: true }),
      await storage.deleteLease(g, 'bad', 1),
    ]) {
      expect(outcome.status === 'unknown' && outcome.error).toBeInstanceOf(CorruptRecordError);
    }
    expect(await readItem(g, 'lease:bad')).toEqual({ pk: { S: g }, sk: { S: 'lease:bad' }, ...damaged });
  });

  it('a tombstone with a wrong attribute type makes a recreate of its key unknown, and is left as it was', async () => {
    const storage = new DynamoDBStorage({ client: client(), tableName });
    const g = group();
    const tombstone = { version: { N: '3' }, epoch: { S: 'four' }, deleted: { BOOL: true } };
    await put(g, 'lease:k', tombstone);
    expect(await storage.createLease({ group: g, leaseKey: 'k' })).toEqual({ status: 'conflict', current: null });
    const outcome = await storage.createLease({ group: g, leaseKey: 'k' }, { recreate: true });
    expect(outcome.status === 'unknown' && outcome.error.message).toBe(
      `[storage-dynamodb] stored tombstone of lease "k" of group "${g}" is corrupt: epoch is {"S":"four"}`,
    );
    expect(await readItem(g, 'lease:k')).toEqual({ pk: { S: g }, sk: { S: 'lease:k' }, ...tombstone });
  });

  it('a leader record with a wrong attribute type is an error naming the group on read, and unknown for a write that meets it', async () => {
    const storage = new DynamoDBStorage({ client: client(), tableName });
    const g = group();
    const leader = appliedRecord(await storage.createLeader({ group: g, holder: 'w', term: 1 }));
    await put(g, 'leader', { version: { N: '2' }, term: { N: '1' }, state: { BOOL: true } });
    await expect(storage.getLeader(g)).rejects.toThrow(`[storage-dynamodb] stored leader record of group "${g}" is corrupt: state is undefined`);
    for (const outcome of [await storage.updateLeader(g, leader.version, leaderStateOf(leader)), await storage.createLeader({ group: g })]) {
      expect(outcome.status === 'unknown' && outcome.error).toBeInstanceOf(CorruptRecordError);
    }
  });
});

/** The key of a member's item, read around the adapter. */
function memberKey(g: string, workerId: string): Record<string, AttributeValue> {
  return memberItemKey(g, workerId);
}

async function readMember(g: string, workerId: string): Promise<Record<string, AttributeValue> | undefined> {
  const { Item } = await client().send(new GetItemCommand({ TableName: tableName, Key: memberKey(g, workerId), ConsistentRead: true }));
  return Item;
}

/** A client that asks DynamoDB (here dynalite) for the capacity each request consumed, and logs it. */
function meteringClient(): { client: DynamoDBClient; log: Metered[] } {
  return meter(client());
}

describe('DynamoDBStorage roster', () => {
  it('keeps each member in an item of its own under <group>#members#<bucket of its worker id>, apart from the leases and the leader, which never list it', async () => {
    const storage = new DynamoDBStorage({ client: client(), tableName });
    const g = group();
    for (const leaseKey of ['member:w1', 'roster', 'leader', 'w1']) appliedRecord(await storage.createLease({ group: g, leaseKey }));
    appliedRecord(await storage.createLeader({ group: g, holder: 'w1', term: 1 }));
    const joined = appliedRecord(await storage.putMember(g, 'w1', null, memberState()));
    // The group's first join over no item: its first version is the join counter's 1 times the span.
    expect(joined).toEqual({ group: g, workerId: 'w1', version: MEMBER_VERSION_SPAN, ...memberState() });

    expect((await storage.listLeases(g)).leases.map((lease) => lease.leaseKey).sort()).toEqual(['leader', 'member:w1', 'roster', 'w1']);
    expect(await storage.getRoster(g)).toEqual({ group: g, members: [joined], corrupt: [] });
    const item = await readMember(g, 'w1');
    expect(Object.keys(item ?? {}).sort()).toEqual(['fresh', 'pk', 'sk', 'state', 'version', 'writeId']);
    expect(item?.version).toEqual({ N: String(MEMBER_VERSION_SPAN) });
    expect(JSON.parse(item?.state?.S ?? 'null')).toEqual(memberState());
    expect(item?.writeId?.S).toMatch(/^[A-Za-z0-9_-]{16}$/);
    expect(memberKey(g, 'w1').pk).toEqual({ S: `${g}#members#${memberBucket('w1')}` });
    // A fresh group: the key of the release before holds its marker alone, the earlier release's roster
    // item its marker alone.
    const { Items: before } = await client().send(
      new QueryCommand({ TableName: tableName, KeyConditionExpression: 'pk = :pk', ExpressionAttributeValues: { ':pk': { S: `${g}#members` } }, ConsistentRead: true }),
    );
    expect((before ?? []).map((old) => old.sk?.S)).toEqual(['member:(leasehold) members moved to four keys: upgrade']);
    expect(Object.keys((await readItem(g, 'roster')) ?? {}).filter((name) => name.startsWith('v:'))).toEqual(['v:(leasehold) members moved to one item each: upgrade']);
    expect(await storage.getRoster(group())).toEqual({ group: expect.any(String), members: [], corrupt: [] });
  });

  it("a group named <g>#members#<bucket> keeps its leases and leader on the partition key of that bucket of <g>'s members, and no read of either group finds the other's items", async () => {
    const storage = new DynamoDBStorage({ client: client(), tableName });
    const g = group();
    // `leader` and `digest` are both in bucket 2: their member sort keys sit beside h's leader record.
    expect([memberBucket('leader'), memberBucket('digest')]).toEqual([2, 2]);
    const h = `${g}#members#2`;
    const hLeases = ['member:w1', 'w1', 'leader'];
    for (const leaseKey of hLeases) appliedRecord(await storage.createLease({ group: h, leaseKey }));
    const hLeader = appliedRecord(await storage.createLeader({ group: h, holder: 'h-leader', term: 7 }));
    const gMember = appliedRecord(await storage.putMember(g, 'leader', null, memberState({ incarnation: 'of-g' })));
    const gOther = appliedRecord(await storage.putMember(g, 'digest', null, memberState({ incarnation: 'of-g' })));
    const hMember = appliedRecord(await storage.putMember(h, 'w1', null, memberState({ incarnation: 'of-h' })));

    // They do share one partition key: the leases and leader of h, h's earlier-release roster item (the
    // marker alone), and g's members of bucket 2.
    const { Items } = await client().send(
      new QueryCommand({ TableName: tableName, KeyConditionExpression: 'pk = :pk', ExpressionAttributeValues: { ':pk': { S: h } }, ConsistentRead: true }),
    );
    expect((Items ?? []).map((item) => item.sk?.S).sort()).toEqual(['leader', 'lease:leader', 'lease:member:w1', 'lease:w1', 'member:digest', 'member:leader', 'roster']);

    expect((await storage.listLeases(h)).leases.map((lease) => lease.leaseKey).sort()).toEqual([...hLeases].sort());
    expect((await storage.listLeases(h)).corrupt).toEqual([]);
    expect(await storage.getLeader(h)).toEqual(hLeader);
    expect(await storage.getRoster(g)).toEqual({ group: g, members: [gOther, gMember], corrupt: [] });
    expect(await storage.getRoster(h)).toEqual({ group: h, members: [hMember], corrupt: [] });
    expect(await storage.getLeader(g)).toBeNull();
    expect((await storage.listLeases(g)).leases).toEqual([]);
    // Writes of one group never meet the other's items either.
    expect(await storage.removeMember(h, 'leader', gMember.version)).toEqual({ status: 'conflict', current: null });
    const beat = appliedRecord(await storage.putMember(g, 'leader', gMember.version, memberState({ incarnation: 'of-g', held: 1 })));
    expect(await storage.getRoster(h)).toEqual({ group: h, members: [hMember], corrupt: [] });
    expect(await storage.getRoster(g)).toEqual({ group: g, members: [gOther, beat], corrupt: [] });
    expect((await storage.listLeases(h)).leases.every((lease) => lease.version === 1)).toBe(true);
  });

  it('a heartbeat is one UpdateItem of one member item of about 300 bytes: 1 write unit at any group size', async () => {
    const g = group();
    const workerId = (i: number): string => `ip-10-0-${Math.floor(i / 250)}-${i % 250}.eu-west-1.compute.internal-48213-${String(i).padStart(6, '0')}`;
    const state = memberState({ incarnation: '0b7d4c1e-93a2-4d8f-b6e1-5c2f7a9e3d10', held: 12, changes: 41 });
    const writer = new DynamoDBStorage({ client: client(), tableName });
    const members: MemberRecord[] = [];
    for (let start = 0; start < 300; start += 50) {
      members.push(...(await Promise.all(Array.from({ length: 50 }, async (_, k) => appliedRecord(await writer.putMember(g, workerId(start + k), null, state))))));
    }
    const metered = meteringClient();
    const storage = new DynamoDBStorage({ client: metered.client, tableName });
    for (const index of [0, 150, 299]) {
      metered.log.length = 0;
      const member = members[index] as MemberRecord;
      appliedRecord(await storage.putMember(g, member.workerId, member.version, state));
      expect(metered.log).toEqual([{ command: 'UpdateItemCommand', sortKey: `member:${member.workerId}`, units: 1 }]);
    }
    const bytes = itemBytes((await readMember(g, workerId(0))) ?? {});
    expect(bytes).toBeGreaterThan(250);
    expect(bytes).toBeLessThan(350);
    // A roster read is one Query per bucket, each paying for its members' bytes: one read unit per
    // started 4 KB of a page.
    metered.log.length = 0;
    const roster = await storage.getRoster(g);
    expect(roster.members).toHaveLength(300);
    expect(roster.members.map((member) => member.workerId)).toEqual(members.map((member) => member.workerId).sort());
    expect(metered.log.map((entry) => entry.command)).toEqual(Array(4).fill('QueryCommand'));
    const buckets = await Promise.all(
      memberBucketKeys(g).map(async (key) => {
        const { Items } = await client().send(
          new QueryCommand({ TableName: tableName, KeyConditionExpression: 'pk = :pk', ExpressionAttributeValues: { ':pk': { S: key } }, ConsistentRead: true }),
        );
        return Items ?? [];
      }),
    );
    // No bucket holds more than half of 300 members named alike.
    expect(Math.max(...buckets.map((items) => items.length))).toBeLessThan(150);
    // itemBytes counts a number's digits plus one, over what DynamoDB counts (about one byte for two
    // digits, plus one): a version of up to 12 digits, counted up to 6 bytes over.
    const most = buckets.reduce((sum, items) => sum + Math.ceil(items.reduce((bytes, item) => bytes + itemBytes(item), 0) / 4096), 0);
    const least = buckets.reduce((sum, items) => sum + Math.ceil((items.reduce((bytes, item) => bytes + itemBytes(item), 0) - items.length * 6) / 4096), 0);
    const units = metered.log.reduce((sum, entry) => sum + (entry.units ?? 0), 0);
    expect(units).toBeLessThanOrEqual(most);
    expect(units).toBeGreaterThanOrEqual(least);
  });

  it('50 members heartbeating at once, each on its own item: every write applies and moves its own version up', async () => {
    const g = group();
    const workers = Array.from({ length: 50 }, (_, i) => ({ workerId: `worker-${i}`, storage: new DynamoDBStorage({ client: client(), tableName }) }));
    let records: MemberRecord[] = await Promise.all(workers.map(async ({ workerId, storage }) => appliedRecord(await storage.putMember(g, workerId, null, memberState({ incarnation: `${workerId}-a` })))));
    // Each join over no item took its first version from the group's join counter: fifty different ones.
    const joinedAt = records.map((record) => record.version);
    expect(new Set(joinedAt).size).toBe(50);
    expect(joinedAt.every((version) => version % MEMBER_VERSION_SPAN === 0)).toBe(true);
    for (let round = 1; round <= 3; round++) {
      const outcomes = await Promise.all(
        workers.map(({ workerId, storage }, i) => storage.putMember(g, workerId, (records[i] as MemberRecord).version, { ...memberStateOf(records[i] as MemberRecord), held: round })),
      );
      expect(outcomes.map((outcome) => outcome.status)).toEqual(Array(50).fill('applied'));
      records = outcomes.map((outcome) => appliedRecord(outcome));
      expect(records.map((record) => record.version)).toEqual(joinedAt.map((version) => version + round));
    }
    const roster = await workers[0]!.storage.getRoster(g);
    expect(roster.corrupt).toEqual([]);
    expect([...roster.members].sort((a, b) => (a.workerId < b.workerId ? -1 : 1))).toEqual([...records].sort((a, b) => (a.workerId < b.workerId ? -1 : 1)));
  });

  it('32 clients joining one worker id at once: exactly one applies and every other conflict carries the member it made', async () => {
    const g = group();
    const outcomes = await Promise.all(
      Array.from({ length: 32 }, (_, i) => new DynamoDBStorage({ client: client(), tableName }).putMember(g, 'w', null, memberState({ incarnation: `inc-${i}` }))),
    );
    const applied = outcomes.filter((outcome) => outcome.status === 'applied');
    expect(applied).toHaveLength(1);
    const winner = (applied[0] as { record: MemberRecord }).record;
    expect(outcomes.filter((outcome) => outcome.status === 'conflict')).toEqual(Array(31).fill({ status: 'conflict', current: winner }));
  });

  it('a member that joined over no item is deleted when removed, leaving nothing for a roster read to pay for; its worker id joins again above every version it had', async () => {
    const storage = new DynamoDBStorage({ client: client(), tableName });
    const g = group();
    const first = appliedRecord(await storage.putMember(g, 'w1', null, memberState()));
    const beat = appliedRecord(await storage.putMember(g, 'w1', first.version, memberState({ held: 1 })));
    expect(beat.version).toBe(first.version + 1);
    const other = appliedRecord(await storage.putMember(g, 'w2', null, memberState()));
    expect(await storage.removeMember(g, 'w1', beat.version)).toEqual({ status: 'applied' });
    expect(await readMember(g, 'w1')).toBeUndefined();
    expect(await storage.getRoster(g)).toEqual({ group: g, members: [other], corrupt: [] });
    // A writer holding the removed version, or any older one, writes nothing and creates nothing.
    for (const stale of [first.version, beat.version]) {
      expect(await storage.putMember(g, 'w1', stale, memberState())).toEqual({ status: 'conflict', current: null });
      expect(await storage.removeMember(g, 'w1', stale)).toEqual({ status: 'conflict', current: null });
    }
    expect(await readMember(g, 'w1')).toBeUndefined();
    const again = appliedRecord(await storage.putMember(g, 'w1', null, memberState({ incarnation: 'inc-2' })));
    expect(again.version).toBeGreaterThan(beat.version);
    expect(again.version % MEMBER_VERSION_SPAN).toBe(0);
    for (const old of [first.version, beat.version]) expect(await storage.putMember(g, 'w1', old, memberState())).toEqual({ status: 'conflict', current: again });
    expect(await storage.getRoster(g)).toEqual({ group: g, members: [again, other], corrupt: [] });
    // The group's join counter lives on its digest item, whose digest it created at 0 (never advanced).
    expect(await storage.getRosterDigest(g)).toBe(0);
    expect((await client().send(new GetItemCommand({ TableName: tableName, Key: { pk: { S: `${g}#digest` }, sk: { S: 'digest' } }, ConsistentRead: true }))).Item).toMatchObject({ digest: { N: '0' }, joins: { N: '3' } });
  });

  it('a member that joined over a tombstone (one an earlier release left) is a tombstone again when removed, keeping its version; the next join of its worker id continues above it', async () => {
    const storage = new DynamoDBStorage({ client: client(), tableName });
    const g = group();
    await client().send(new PutItemCommand({ TableName: tableName, Item: { ...memberKey(g, 'w1'), version: { N: '2' }, removed: { BOOL: true } } }));
    const first = appliedRecord(await storage.putMember(g, 'w1', null, memberState()));
    expect(first.version).toBe(3);
    const beat = appliedRecord(await storage.putMember(g, 'w1', first.version, memberState({ held: 1 })));
    const other = appliedRecord(await storage.putMember(g, 'w2', null, memberState()));
    expect(await storage.removeMember(g, 'w1', beat.version)).toEqual({ status: 'applied' });
    const tombstone = await readMember(g, 'w1');
    expect(tombstone).toEqual({ ...memberKey(g, 'w1'), version: { N: '4' }, removed: { BOOL: true } });
    expect(itemBytes(tombstone ?? {})).toBe(2 + Buffer.byteLength(`${g}#members#${memberBucket('w1')}`) + 2 + 'member:w1'.length + 'version'.length + 2 + 'removed'.length + 1);
    expect(await storage.getRoster(g)).toEqual({ group: g, members: [other], corrupt: [] });
    for (const stale of [first.version, beat.version]) {
      expect(await storage.putMember(g, 'w1', stale, memberState())).toEqual({ status: 'conflict', current: null });
      expect(await storage.removeMember(g, 'w1', stale)).toEqual({ status: 'conflict', current: null });
    }
    expect(await readMember(g, 'w1')).toEqual(tombstone);
    const again = appliedRecord(await storage.putMember(g, 'w1', null, memberState({ incarnation: 'inc-2' })));
    expect(again.version).toBe(5);
    expect(Object.keys((await readMember(g, 'w1')) ?? {}).sort()).toEqual(['pk', 'sk', 'state', 'version', 'writeId']);
    for (const old of [first.version, beat.version]) expect(await storage.putMember(g, 'w1', old, memberState())).toEqual({ status: 'conflict', current: again });
    expect(await storage.getRoster(g)).toEqual({ group: g, members: [again, other], corrupt: [] });
  });

  it('a fresh member whose next write would leave its join\'s span of versions is fresh no more, and leaves a tombstone when removed', async () => {
    const storage = new DynamoDBStorage({ client: client(), tableName });
    const g = group();
    const joined = appliedRecord(await storage.putMember(g, 'w', null, memberState()));
    // As if it had written all but the last version of its span (seven years of heartbeats).
    const last = joined.version + MEMBER_VERSION_SPAN - 1;
    await client().send(
      new UpdateItemCommand({ TableName: tableName, Key: memberKey(g, 'w'), UpdateExpression: 'SET #v = :v', ExpressionAttributeNames: { '#v': 'version' }, ExpressionAttributeValues: { ':v': { N: String(last - 1) } } }),
    );
    const inSpan = appliedRecord(await storage.putMember(g, 'w', last - 1, memberState({ held: 1 })));
    expect(inSpan.version).toBe(last);
    expect((await readMember(g, 'w'))?.fresh).toEqual({ BOOL: true });
    const past = appliedRecord(await storage.putMember(g, 'w', last, memberState({ held: 2 })));
    expect(past.version).toBe(joined.version + MEMBER_VERSION_SPAN);
    expect((await readMember(g, 'w'))?.fresh).toBeUndefined();
    expect(await storage.removeMember(g, 'w', past.version)).toEqual({ status: 'applied' });
    expect(await readMember(g, 'w')).toEqual({ ...memberKey(g, 'w'), version: { N: String(past.version) }, removed: { BOOL: true } });
  });

  it('a join counter that is not a number makes a join over no item unknown carrying a CorruptRecordError naming it, and writes no member', async () => {
    const storage = new DynamoDBStorage({ client: client(), tableName });
    const g = group();
    await client().send(new PutItemCommand({ TableName: tableName, Item: { pk: { S: `${g}#digest` }, sk: { S: 'digest' }, digest: { N: '4' }, joins: { S: 'many' } } }));
    const outcome = await storage.putMember(g, 'w', null, memberState());
    expect(outcome.status === 'unknown' && outcome.error).toBeInstanceOf(CorruptRecordError);
    expect(outcome.status === 'unknown' && outcome.error.message).toBe(
      `[storage-dynamodb] the join counter of group "${g}" is {"S":"many"}: a number from 1 to ${2 ** 27 - 1} was expected; the join of member "w" in group "${g}" was not written`,
    );
    expect(await readMember(g, 'w')).toBeUndefined();
    expect(await storage.getRosterDigest(g)).toBe(4);
    // A digest that is not a number is named as such, and the counter is left as it was.
    const h = group();
    await client().send(new PutItemCommand({ TableName: tableName, Item: { pk: { S: `${h}#digest` }, sk: { S: 'digest' }, digest: { S: 'four' }, joins: { N: '2' } } }));
    const refused = await storage.putMember(h, 'w', null, memberState());
    expect(refused.status === 'unknown' && refused.error.message).toBe(`[storage-dynamodb] stored roster digest of group "${h}" is corrupt: digest is {"S":"four"}`);
    expect(await readMember(h, 'w')).toBeUndefined();
  });

  it('a write or removal at a stale version is a conflict carrying the member as stored; of a missing member, one with none', async () => {
    const storage = new DynamoDBStorage({ client: client(), tableName });
    const g = group();
    const joined = appliedRecord(await storage.putMember(g, 'w', null, memberState()));
    const beaten = appliedRecord(await storage.putMember(g, 'w', joined.version, memberState({ held: 2, metadata: { host: 'a' } })));
    expect(await storage.putMember(g, 'w', joined.version, memberState({ status: 'dead' }))).toEqual({ status: 'conflict', current: beaten });
    expect(await storage.putMember(g, 'w', null, memberState())).toEqual({ status: 'conflict', current: beaten });
    expect(await storage.removeMember(g, 'w', joined.version)).toEqual({ status: 'conflict', current: beaten });
    expect(await storage.putMember(g, 'nobody', 1, memberState())).toEqual({ status: 'conflict', current: null });
    expect(await storage.removeMember(g, 'nobody', 1)).toEqual({ status: 'conflict', current: null });
    expect(await storage.removeMember(group(), 'nobody', 1)).toEqual({ status: 'conflict', current: null });
    expect(await readMember(g, 'nobody')).toBeUndefined();
    expect(await storage.getRoster(g)).toEqual({ group: g, members: [beaten], corrupt: [] });
  });

  it('a conflict takes the member from ALL_OLD when DynamoDB returns it, with no extra read', async () => {
    const g = group();
    const raw = client();
    let reads = 0;
    const storage = new DynamoDBStorage({
      client: injectingClient(async (command, send, input) => {
        if (command === 'GetItemCommand' && sortKeyOf(input)?.startsWith('member:')) reads++;
        try {
          return await send();
        } catch (error) {
          if (!(error instanceof ConditionalCheckFailedException)) throw error;
          const { Item } = await raw.send(new GetItemCommand({ TableName: tableName, Key: memberKey(g, 'w'), ConsistentRead: true }));
          throw new ConditionalCheckFailedException({ message: error.message, $metadata: error.$metadata, Item });
        }
      }),
      tableName,
    });
    const joined = appliedRecord(await storage.putMember(g, 'w', null, memberState()));
    expect(await storage.putMember(g, 'w', joined.version + 1, memberState())).toEqual({ status: 'conflict', current: joined });
    expect(await storage.putMember(g, 'w', null, memberState())).toEqual({ status: 'conflict', current: joined });
    expect(await storage.removeMember(g, 'w', joined.version + 1)).toEqual({ status: 'conflict', current: joined });
    expect(reads).toBe(0);
  });

  it('a member write whose response was lost and that the SDK retried is recognised as applied, with the version it made', async () => {
    const attempted = new WeakSet<object>();
    let lost = 0;
    const storage = new DynamoDBStorage({
      client: injectingClient(async (command, send, input) => {
        if ((command !== 'UpdateItemCommand' && command !== 'DeleteItemCommand') || attempted.has(input as object)) return send();
        attempted.add(input as object);
        lost++;
        await send();
        throw lostResponse();
      }),
      tableName,
    });
    const other = new DynamoDBStorage({ client: client(), tableName });
    const g = group();
    const first = appliedRecord(await other.putMember(g, 'other', null, memberState()));
    // The join counter's move and the join were each sent twice: the counter counted both.
    const joined = appliedRecord(await storage.putMember(g, 'w', null, memberState()));
    expect(joined).toEqual({ group: g, workerId: 'w', version: first.version + 2 * MEMBER_VERSION_SPAN, ...memberState() });
    const beat = appliedRecord(await storage.putMember(g, 'w', joined.version, memberState({ held: 1 })));
    expect(beat.version).toBe(joined.version + 1);
    expect((await other.getRoster(g)).members.find((member) => member.workerId === 'w')).toEqual(beat);
    expect(lost).toBe(3);
    // A deleted member does not say whose removal deleted it: after a retry its outcome is unknown, and it did apply.
    const removed = await storage.removeMember(g, 'w', beat.version);
    expect(removed.status === 'unknown' && removed.error).toBeInstanceOf(StorageOutcomeUnknownError);
    expect((await other.getRoster(g)).members.map((member) => member.workerId)).toEqual(['other']);
    // A retried join over no item is recognised too.
    const back = appliedRecord(await storage.putMember(g, 'w', null, memberState({ incarnation: 'inc-2' })));
    expect(back.version).toBeGreaterThan(beat.version);
    expect(lost).toBe(6);
  });

  it('a retried member write that finds the member written by another since is unknown, since its first attempt may have applied', async () => {
    const g = group();
    const other = new DynamoDBStorage({ client: client(), tableName });
    const joined = appliedRecord(await other.putMember(g, 'w', null, memberState()));
    const storage = storageFailingFirstUpdate(async (send) => {
      await send();
      // The heartbeat applied but its response was lost; another worker declares the member dead before the retry.
      const mine = (await other.getRoster(g)).members[0] as MemberRecord;
      appliedRecord(await other.putMember(g, 'w', mine.version, { ...memberStateOf(mine), status: 'dead' }));
      throw lostResponse();
    });
    const outcome = await storage.putMember(g, 'w', joined.version, memberState({ held: 4 }));
    expect(outcome.status === 'unknown' && outcome.error.message).toBe(
      `[storage-dynamodb] write of member "w" at version ${joined.version} in group "${g}" was retried and the record has moved on since; its first attempt may have applied`,
    );
    expect((await other.getRoster(g)).members[0]).toMatchObject({ version: joined.version + 2, status: 'dead' });
  });

  it('a corrupt member is listed in corrupt by its worker id beside every other member; a write at another version is unknown and leaves it, one at its stored version replaces it', async () => {
    const storage = new DynamoDBStorage({ client: client(), tableName });
    const g = group();
    const members = [];
    for (const workerId of ['a', 'bad', 'c']) members.push(appliedRecord(await storage.putMember(g, workerId, null, memberState())));
    // Damaged by another program, which moves the version as a writer does.
    const damage = async (workerId: string, update: string, names: Record<string, string>, values?: Record<string, AttributeValue>): Promise<void> => {
      await client().send(
        new UpdateItemCommand({ TableName: tableName, Key: memberKey(g, workerId), UpdateExpression: update, ExpressionAttributeNames: names, ExpressionAttributeValues: values }),
      );
    };
    await damage('bad', 'SET #v = #v + :one, #s = :bad', { '#v': 'version', '#s': 'state' }, { ':one': { N: '1' }, ':bad': { S: '{"status":' } });
    const stored = await readMember(g, 'bad');

    const roster = await storage.getRoster(g);
    expect(roster.members.map((member) => member.workerId).sort()).toEqual(['a', 'c']);
    expect(roster.corrupt).toHaveLength(1);
    expect(roster.corrupt[0]).toBeInstanceOf(CorruptRecordError);
    expect(roster.corrupt[0]).toMatchObject({ group: g, workerId: 'bad', leaseKey: undefined });
    expect(roster.corrupt[0]?.message).toContain(`[storage-dynamodb] stored member "bad" of group "${g}" is corrupt: state is not valid JSON`);
    for (const outcome of [
      await storage.putMember(g, 'bad', members[1]!.version, memberState()),
      await storage.putMember(g, 'bad', null, memberState()),
      await storage.removeMember(g, 'bad', members[1]!.version),
    ]) {
      expect(outcome.status === 'unknown' && outcome.error).toMatchObject({ name: 'CorruptRecordError', workerId: 'bad' });
    }
    expect(await readMember(g, 'bad')).toEqual(stored);

    const replaced = appliedRecord(await storage.putMember(g, 'bad', members[1]!.version + 1, memberState({ incarnation: 'inc-2' })));
    expect(replaced.version).toBe(members[1]!.version + 2);
    expect((await storage.getRoster(g)).corrupt).toEqual([]);
    // A version of the wrong type, or a member with no state at all, is corrupt too.
    await damage('bad', 'SET #v = :s', { '#v': 'version' }, { ':s': { S: 'three' } });
    await damage('c', 'REMOVE #s', { '#s': 'state' });
    const again = await storage.getRoster(g);
    expect(again.members.map((member) => member.workerId)).toEqual(['a']);
    expect(again.corrupt.map((error) => error.workerId).sort()).toEqual(['bad', 'c']);
  });

  it('a tombstone whose version is not a number makes a join of its worker id unknown carrying a CorruptRecordError, and is left as it was', async () => {
    const storage = new DynamoDBStorage({ client: client(), tableName });
    const g = group();
    // A tombstone as an earlier release left it, damaged by another program.
    await client().send(new PutItemCommand({ TableName: tableName, Item: { ...memberKey(g, 'w'), version: { S: 'one' }, removed: { BOOL: true } } }));
    const stored = await readMember(g, 'w');
    const outcome = await storage.putMember(g, 'w', null, memberState());
    expect(outcome.status === 'unknown' && outcome.error).toBeInstanceOf(CorruptRecordError);
    expect(outcome.status === 'unknown' && outcome.error.message).toBe(`[storage-dynamodb] stored tombstone of member "w" of group "${g}" is corrupt: version is {"S":"one"}`);
    expect(outcome.status === 'unknown' && outcome.error).toMatchObject({ group: g, workerId: 'w' });
    expect(await readMember(g, 'w')).toEqual(stored);
    expect(await storage.getRoster(g)).toEqual({ group: g, members: [], corrupt: [] });
  });

  it(`${limits.maxMembers} members at the largest size the contract allows (512-byte group and worker ids, 2 KiB states) read back whole over several 1 MB pages, each member once`, async () => {
    let queries = 0;
    const storage = new DynamoDBStorage({
      client: injectingClient(async (command, send) => {
        if (command === 'QueryCommand') queries++;
        return send();
      }),
      tableName,
    });
    const prefix = `${group()}-`;
    const g = prefix.padEnd(limits.maxNameBytes, 'g');
    const workerId = (i: number): string => `${String(i).padStart(4, '0')}-`.padEnd(limits.maxNameBytes, 'w');
    const largest = (i: number): MemberState => {
      const base = memberState({ incarnation: `inc-${i}`, requests: Array.from({ length: limits.maxRequests }, (_, r) => ({ leaseKey: `shard-${r}`, from: `worker-${r}` })) });
      const room = limits.maxMemberBytes - Buffer.byteLength(JSON.stringify(memberStateOf({ ...base, metadata: { pad: '' } })));
      return { ...base, metadata: { pad: 'x'.repeat(room) } };
    };
    expect(Buffer.byteLength(JSON.stringify(memberStateOf(largest(0))))).toBe(limits.maxMemberBytes);
    for (let start = 0; start < limits.maxMembers; start += 50) {
      const outcomes = await Promise.all(Array.from({ length: 50 }, (_, k) => storage.putMember(g, workerId(start + k), null, largest(start + k))));
      expect(outcomes.map((outcome) => outcome.status)).toEqual(Array(50).fill('applied'));
    }
    const bytes = itemBytes((await readMember(g, workerId(0))) ?? {});
    // The largest member item: still a few write units per heartbeat, and 1,000 of them span pages.
    expect(bytes).toBeGreaterThan(3 * 1024);
    expect(bytes).toBeLessThan(4 * 1024);
    queries = 0;
    const roster = await storage.getRoster(g);
    expect(queries).toBeGreaterThan(Math.floor((limits.maxMembers * bytes) / (1024 * 1024)));
    expect(roster.corrupt).toEqual([]);
    expect(roster.members.map((member) => member.workerId)).toEqual(Array.from({ length: limits.maxMembers }, (_, i) => workerId(i)));
    expect(roster.members.every((member, i) => member.version % MEMBER_VERSION_SPAN === 0 && member.metadata.pad === largest(i).metadata.pad)).toBe(true);
  });

  it('refuses bad member input before sending anything', async () => {
    let sent = 0;
    const storage = new DynamoDBStorage({
      client: injectingClient(async (_command, send) => {
        sent++;
        return send();
      }),
      tableName,
    });
    const g = group();
    await expect(storage.putMember(g, '', null, memberState())).rejects.toThrow(InvalidInputError);
    await expect(storage.putMember(g, 'w', 0.5, memberState())).rejects.toThrow(InvalidInputError);
    await expect(storage.putMember(g, 'w', null, memberState({ metadata: { pad: 'x'.repeat(limits.maxMemberBytes) } }))).rejects.toThrow(InvalidInputError);
    await expect(storage.removeMember(g, 'w\u0000', 1)).rejects.toThrow(InvalidInputError);
    await expect(storage.removeMember(g, 'w', -1)).rejects.toThrow(InvalidInputError);
    await expect(storage.getRoster('')).rejects.toThrow(InvalidInputError);
    expect(sent).toBe(0);
  });
});
