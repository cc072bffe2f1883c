/**
 * The read of many leases by key (`getLeases`): one strongly consistent `BatchGetItem`, beyond what the
 * conformance suite asks of every adapter: what is sent, keys DynamoDB leaves unprocessed, answers cut by
 * size, and what it costs.
 */
import { describe, expect, it } from 'vitest';
import { GetItemCommand, ProvisionedThroughputExceededException, UpdateItemCommand, type AttributeValue, type BatchGetItemCommandOutput } from '@aws-sdk/client-dynamodb';
import { CorruptRecordError, InvalidInputError, StorageUnavailableError, type LeaseRecord, type LeaseState, type WriteResult } from '@leasehold/core';
import { leaseStateOf, limits } from '@leasehold/core/adapter';
import { BATCH_GET_ATTEMPTS } from '../src/batch-get.js';
import { DynamoDBStorage } from '../src/index.js';
import { leaseItemKey } from '../src/items.js';
import { itemBytes } from '../src/schema.js';
import { injectFaults, meter, useDynalite, type Injection } from './support.js';

const dynamo = useDynalite('lease-reads');
let groupCount = 0;

function group(): string {
  return `read-${process.pid}-${groupCount++}`;
}

function storage(inject?: Injection, config: Parameters<typeof dynamo.client>[0] = {}): DynamoDBStorage {
  const client = dynamo.client(config);
  return new DynamoDBStorage({ client: inject ? injectFaults(client, inject) : client, tableName: dynamo.tableName });
}

function applied<T>(outcome: WriteResult<T> | undefined): T {
  expect(outcome?.status).toBe('applied');
  return (outcome as { record: T }).record;
}

function byKey(leases: readonly LeaseRecord[]): LeaseRecord[] {
  return [...leases].sort((a, b) => (a.leaseKey < b.leaseKey ? -1 : a.leaseKey > b.leaseKey ? 1 : 0));
}

type BatchInput = { RequestItems: Record<string, { Keys: Record<string, AttributeValue>[]; ConsistentRead?: boolean }> };

function requestOf(input: unknown): { Keys: Record<string, AttributeValue>[]; ConsistentRead?: boolean } {
  return Object.values((input as BatchInput).RequestItems)[0] ?? { Keys: [] };
}

function keyOf(item: Record<string, AttributeValue>): Record<string, AttributeValue> {
  return { pk: item.pk as AttributeValue, sk: item.sk as AttributeValue };
}

function throttle(): ProvisionedThroughputExceededException {
  return new ProvisionedThroughputExceededException({ message: 'injected throttle', $metadata: { httpStatusCode: 400 } });
}

/**
 * A lease state at the contract's limits, every string of it escaped to six bytes a character in the
 * stored JSON (`\u0001`): about 113 KB an item, the largest a lease can be.
 */
function largest(variant: number): LeaseState & Record<string, unknown> {
  const escaped = (bytes: number, tag: string): string => `${tag}${'\u0001'.repeat(bytes - tag.length)}`;
  const tag = String(variant).padStart(3, '0');
  return {
    ...leaseStateOf({}),
    owner: escaped(limits.maxNameBytes, tag),
    incarnation: escaped(limits.maxNameBytes, tag),
    checkpoint: escaped(limits.maxCheckpointBytes, tag),
    parentKeys: Array.from({ length: limits.maxParentKeys }, (_, i) => escaped(limits.maxNameBytes, `${tag}${i.toString(16)}`)),
    metadata: { pad: `${tag}${'m'.repeat(limits.maxMetadataBytes - 10 - tag.length)}` },
    'x-pad': `${tag}${'x'.repeat(limits.maxExtensionBytes - 12 - tag.length)}`,
  };
}

describe('DynamoDBStorage getLeases', () => {
  it('is one strongly consistent BatchGetItem of the named keys, each once; keys with no lease, tombstones and corrupt items as getLease has them', async () => {
    const batches: { keys: string[]; consistent: boolean | undefined }[] = [];
    const reader = storage(async (command, send, input) => {
      if (command === 'BatchGetItemCommand') {
        const request = requestOf(input);
        batches.push({ keys: request.Keys.map((key) => key.sk?.S ?? ''), consistent: request.ConsistentRead });
      }
      return send();
    });
    const writer = storage();
    const g = group();
    for (const leaseKey of ['a', 'b', 'c', 'gone', 'bad']) applied(await writer.createLease({ group: g, leaseKey, owner: `${leaseKey}-owner` }));
    expect((await writer.deleteLease(g, 'gone', 1)).status).toBe('applied');
    await dynamo.client().send(
      new UpdateItemCommand({
        TableName: dynamo.tableName,
        Key: leaseItemKey(g, 'bad'),
        UpdateExpression: 'SET #s = :bad',
        ExpressionAttributeNames: { '#s': 'state' },
        ExpressionAttributeValues: { ':bad': { S: '{"owner":' } },
      }),
    );
    const listed = await writer.listLeases(g);

    const read = await reader.getLeases(g, ['c', 'nobody', 'a', 'gone', 'bad', 'c', 'a', 'b']);

    expect(read.leases).toEqual(['c', 'a', 'b'].map((leaseKey) => listed.leases.find((lease) => lease.leaseKey === leaseKey)));
    expect(read.corrupt).toHaveLength(1);
    expect(read.corrupt[0]).toBeInstanceOf(CorruptRecordError);
    expect(read.corrupt[0]).toMatchObject({ group: g, leaseKey: 'bad', message: listed.corrupt[0]?.message });
    await expect(reader.getLease(g, 'bad')).rejects.toMatchObject({ name: 'CorruptRecordError', leaseKey: 'bad', message: read.corrupt[0]?.message });
    expect(batches).toEqual([{ keys: ['lease:c', 'lease:nobody', 'lease:a', 'lease:gone', 'lease:bad', 'lease:b'], consistent: true }]);
  });

  it(`reads up to ${limits.maxLeasesPerRead} keys; more, or a bad one, is an InvalidInputError before anything is sent, and none is an empty listing read without sending`, async () => {
    let sent = 0;
    const counting = storage(async (_command, send) => {
      sent++;
      return send();
    });
    const g = group();
    const keys = Array.from({ length: limits.maxLeasesPerRead + 1 }, (_, i) => `k${i}`);
    await expect(counting.getLeases(g, keys)).rejects.toThrow(new InvalidInputError(`[storage-dynamodb] at most 100 lease keys may be read at once, got 101`));
    await expect(counting.getLeases(g, ['k', ''])).rejects.toThrow(InvalidInputError);
    await expect(counting.getLeases(g, 'k' as never)).rejects.toThrow(InvalidInputError);
    await expect(counting.getLeases('', ['k'])).rejects.toThrow(InvalidInputError);
    expect(await counting.getLeases(g, [])).toEqual({ leases: [], corrupt: [] });
    expect(sent).toBe(0);

    const writer = storage();
    const created = await Promise.all(keys.slice(0, limits.maxLeasesPerRead).map(async (leaseKey) => applied(await writer.createLease({ group: g, leaseKey }))));
    expect(byKey((await counting.getLeases(g, keys.slice(0, limits.maxLeasesPerRead))).leases)).toEqual(byKey(created));
    expect(sent).toBe(1);
  });

  it('keys DynamoDB leaves unprocessed are sent again, and the leases come back whole', async () => {
    const sentKeys: number[] = [];
    const reader = storage(async (command, send, input) => {
      if (command !== 'BatchGetItemCommand') return send();
      sentKeys.push(requestOf(input).Keys.length);
      const answer = (await send()) as { output: BatchGetItemCommandOutput };
      // The first answer keeps two items back, the second gives back none, as a throttled partition would.
      const [table, items = []] = Object.entries(answer.output.Responses ?? {})[0] ?? [];
      if (table !== undefined && sentKeys.length === 1) {
        const held = items.splice(0, 2);
        answer.output.UnprocessedKeys = { [table]: { Keys: held.map(keyOf), ConsistentRead: true } };
      } else if (table !== undefined && sentKeys.length === 2) {
        answer.output.UnprocessedKeys = { [table]: { Keys: items.map(keyOf), ConsistentRead: true } };
        answer.output.Responses = { [table]: [] };
      }
      return answer;
    });
    const writer = storage();
    const g = group();
    const created = [];
    for (const leaseKey of ['a', 'b', 'c', 'd']) created.push(applied(await writer.createLease({ group: g, leaseKey })));

    const read = await reader.getLeases(g, ['a', 'b', 'c', 'd', 'absent']);

    expect(read.corrupt).toEqual([]);
    expect(byKey(read.leases)).toEqual(created);
    expect(sentKeys).toEqual([5, 2, 2]);
  });

  it(`keys still unprocessed after ${BATCH_GET_ATTEMPTS} answers that give back nothing, and a batch the SDK gave up on, are a StorageUnavailableError naming the group: never a part of the leases`, async () => {
    let attempts = 0;
    const starved = storage(async (command, send) => {
      if (command !== 'BatchGetItemCommand') return send();
      attempts++;
      const answer = (await send()) as { output: BatchGetItemCommandOutput };
      const [table, items] = Object.entries(answer.output.Responses ?? {})[0] ?? [];
      // The first answer gives back one lease; every later one keeps back all it found.
      if (table !== undefined && items !== undefined) {
        const given = attempts === 1 ? items.splice(0, 1) : [];
        answer.output.UnprocessedKeys = { [table]: { Keys: items.map(keyOf), ConsistentRead: true } };
        answer.output.Responses = { [table]: given };
      }
      return answer;
    });
    const g = group();
    const writer = storage();
    for (const leaseKey of ['a', 'b', 'c']) applied(await writer.createLease({ group: g, leaseKey }));
    await expect(starved.getLeases(g, ['a', 'b', 'c', 'd'])).rejects.toThrow(
      new StorageUnavailableError(`[storage-dynamodb] could not read 4 lease(s) of group "${g}": UnprocessedKeys: 2 of 4 keys were still unprocessed after ${BATCH_GET_ATTEMPTS + 1} BatchGetItem attempts`),
    );
    expect(attempts).toBe(BATCH_GET_ATTEMPTS + 1);

    const throttled = storage(async (command, send) => {
      if (command === 'BatchGetItemCommand') throw throttle();
      return send();
    }, { maxAttempts: 2 });
    await expect(throttled.getLeases(g, ['a'])).rejects.toThrow(
      new StorageUnavailableError(`[storage-dynamodb] could not read 1 lease(s) of group "${g}": ProvisionedThroughputExceededException: injected throttle`),
    );
  });

  it(`${limits.maxLeasesPerRead} leases of the largest size (about 113 KB each, 11 MB in all) read back whole over the answers dynalite cuts at about 1.4 MB, each once`, async () => {
    const answers: { sent: number; given: number }[] = [];
    const reader = storage(async (command, send, input) => {
      if (command !== 'BatchGetItemCommand') return send();
      const answer = (await send()) as { output: BatchGetItemCommandOutput };
      answers.push({ sent: requestOf(input).Keys.length, given: Object.values(answer.output.Responses ?? {})[0]?.length ?? 0 });
      return answer;
    });
    const writer = storage();
    const g = group();
    const keys = Array.from({ length: limits.maxLeasesPerRead }, (_, i) => `lease-${String(i).padStart(3, '0')}`);
    for (let start = 0; start < keys.length; start += 10) {
      await Promise.all(keys.slice(start, start + 10).map(async (leaseKey, k) => applied(await writer.createLease({ group: g, leaseKey, ...largest(start + k) }))));
    }
    const { Item } = await dynamo.client().send(new GetItemCommand({ TableName: dynamo.tableName, Key: leaseItemKey(g, keys[0] as string), ConsistentRead: true }));
    expect(itemBytes(Item ?? {})).toBeGreaterThan(110_000);

    const read = await reader.getLeases(g, [...keys].reverse());

    expect(read.corrupt).toEqual([]);
    expect(read.leases.map((lease) => lease.leaseKey).sort()).toEqual(keys);
    expect(byKey(read.leases)).toEqual(byKey((await writer.listLeases(g)).leases));
    expect(read.leases.every((lease) => lease.owner?.startsWith(lease.leaseKey.slice(-3)))).toBe(true);
    // Several answers, each giving back some leases and leaving the rest, which are sent again.
    expect(answers.length).toBeGreaterThan(BATCH_GET_ATTEMPTS);
    expect(answers.every(({ given }) => given > 0)).toBe(true);
    expect(answers.reduce((sum, { given }) => sum + given, 0)).toBe(keys.length);
    expect(answers.slice(1).map(({ sent }) => sent)).toEqual(answers.slice(0, -1).map(({ sent, given }) => sent - given));
  });
});

describe('DynamoDBStorage getLeases: what it costs', () => {
  it('getLeases of 3 typical leases is 3 read units, one per item rounded up to 4 KB, as 3 GetItems would be; a key with no lease costs 1; a 113 KB lease 28', async () => {
    const g = group();
    const writer = storage();
    const typical = { owner: 'ip-10-0-0-1.eu-west-1.compute.internal-48213-000001', epoch: 7, checkpoint: '49654565448233154883216485920462935237926049034113024002' };
    const leaseKeys = ['shardId-000000000001', 'shardId-000000000002', 'shardId-000000000003'];
    for (const leaseKey of leaseKeys) applied(await writer.createLease({ group: g, leaseKey, ...typical }));
    applied(await writer.createLease({ group: g, leaseKey: 'big', ...largest(0) }));
    const metered = meter(dynamo.client());
    const s = new DynamoDBStorage({ client: metered.client, tableName: dynamo.tableName });

    await s.getLeases(g, leaseKeys);
    for (const leaseKey of leaseKeys) await s.getLease(g, leaseKey);
    await s.getLeases(g, ['absent']);
    await s.getLeases(g, ['big', ...leaseKeys]);

    expect(metered.log.map(({ command, units }) => [command, units])).toEqual([
      ['BatchGetItemCommand', 3],
      ['GetItemCommand', 1],
      ['GetItemCommand', 1],
      ['GetItemCommand', 1],
      ['BatchGetItemCommand', 1],
      ['BatchGetItemCommand', 28 + 3],
    ]);
  });
});
