/**
 * `pnpm bench`: DynamoDBStorage against dynalite in this process, every comparison measured side by side
 * in one run and printed as a ratio. Absolute times depend on the machine; the ratios are the point.
 */
import { performance } from 'node:perf_hooks';
import { DynamoDBClient, QueryCommand, UpdateItemCommand, type AttributeValue } from '@aws-sdk/client-dynamodb';
import {
  type LeaseRecord,
  type LeaseState,
  type MemberRecord,
  type MemberState,
  type WriteResult,
} from '@leasehold/core';
import { encodeLeaseState, encodeMemberState, leaseStateOf, RECORD_FORMAT } from '@leasehold/core/adapter';
import { startDynalite } from '@leasehold/local-stack';
import { DynamoDBStorage } from '../src/index.js';
import { itemBytes } from '../src/schema.js';
import { memberBucketKeys, memberItemKey } from '../src/items.js';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

const LEASES = 1000;
const BATCH_ROUNDS = 3;
const SINGLE_WARMUP = 100;
const SINGLE_ROUNDS = 1000;
// Core's defaults: leaseDurationMs 10,000 and a renewal every third of it. KCL renews every 3,308 ms
// (failoverTimeMillis 10,000 / 3 - epsilon), one UpdateItem per lease.
const RENEW_INTERVAL_MS = 10_000 / 3;
const KCL_RENEW_INTERVAL_MS = 3_308;

const dynalite = await startDynalite();
const client = new DynamoDBClient({
  region: 'us-east-1',
  endpoint: dynalite.endpoint,
  credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
});
const tableName = `bench-${process.pid}`;
const storage = new DynamoDBStorage({ client, tableName });

function applied<T = LeaseRecord>(outcome: WriteResult<T> | undefined): T {
  if (outcome?.status !== 'applied') throw new Error(`expected applied, got ${JSON.stringify(outcome)}`);
  return outcome.record;
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
}

const ms = (value: number): string => `${value.toFixed(value < 10 ? 3 : 0)} ms`;

// A lease as a Kinesis consumer holds it: host-pid-suffix owner, a full sequence number, one parent.
const held: LeaseState = {
  format: RECORD_FORMAT,
  owner: 'ip-10-0-12-34.eu-west-1.compute.internal-48213-5f3a9c',
  epoch: 3,
  checkpoint: '49590338271490256608559692538361571095921575989136588898',
  parentKeys: ['shardId-000000000007'],
  incarnation: '7c1e2f40-4b1a-4f53-9d6e-2a9c8b1f0e35',
  metadata: {},
};

async function batchedAgainstSequential(): Promise<void> {
  const group = 'bench-batch';
  const keys = Array.from({ length: LEASES }, (_, i) => `shardId-${String(i).padStart(12, '0')}`);
  for (let start = 0; start < keys.length; start += 100) {
    await Promise.all(keys.slice(start, start + 100).map(async (leaseKey) => applied(await storage.createLease({ group, leaseKey, ...held }))));
  }
  let { leases } = await storage.listLeases(group);
  const batched: number[] = [];
  const sequential: number[] = [];
  for (let round = 0; round < BATCH_ROUNDS; round++) {
    let started = performance.now();
    const results = await storage.updateLeases(group, leases.map((lease) => ({ leaseKey: lease.leaseKey, expectedVersion: lease.version, next: leaseStateOf(lease) })));
    batched.push(performance.now() - started);
    leases = results.map(applied);
    started = performance.now();
    const renewed: LeaseRecord[] = [];
    for (const lease of leases) {
      const [outcome] = await storage.updateLeases(group, [{ leaseKey: lease.leaseKey, expectedVersion: lease.version, next: leaseStateOf(lease) }]);
      renewed.push(applied(outcome));
    }
    sequential.push(performance.now() - started);
    leases = renewed;
  }
  const b = median(batched);
  const s = median(sequential);
  console.log(`renew ${LEASES} leases, one batch at writeConcurrency 16: ${ms(b)} (median of ${BATCH_ROUNDS})`);
  console.log(`renew ${LEASES} leases, one write after another:          ${ms(s)} (median of ${BATCH_ROUNDS})`);
  console.log(`  ratio sequential / batched: ${(s / b).toFixed(1)}x faster batched`);
}

async function adapterAgainstRawUpdate(): Promise<void> {
  const group = 'bench-single';
  let lease = applied(await storage.createLease({ group, leaseKey: 'adapter', ...held }));
  let rawVersion = applied(await storage.createLease({ group, leaseKey: 'raw', ...held })).version;
  const rawState = encodeLeaseState(held);
  // The same conditional write as the adapter's renew, hand-written with everything precomputed.
  const raw = async (): Promise<void> => {
    await client.send(
      new UpdateItemCommand({
        TableName: tableName,
        Key: { pk: { S: group }, sk: { S: 'lease:raw' } },
        UpdateExpression: 'SET #version = :version, #epoch = :epoch, #state = :state, #writeId = :writeId',
        ConditionExpression: '#version = :expected AND attribute_not_exists(#deleted)',
        ExpressionAttributeNames: { '#version': 'version', '#epoch': 'epoch', '#state': 'state', '#writeId': 'writeId', '#deleted': 'deleted' },
        ExpressionAttributeValues: {
          ':version': { N: String(rawVersion + 1) },
          ':epoch': { N: '3' },
          ':state': { S: rawState },
          ':writeId': { S: 'raw' },
          ':expected': { N: String(rawVersion) },
        },
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
    );
    rawVersion++;
  };
  const adapter = async (): Promise<void> => {
    const [outcome] = await storage.updateLeases(group, [{ leaseKey: 'adapter', expectedVersion: lease.version, next: leaseStateOf(lease) }]);
    lease = applied(outcome);
  };
  const viaAdapter: number[] = [];
  const viaRaw: number[] = [];
  for (let i = 0; i < SINGLE_WARMUP + SINGLE_ROUNDS; i++) {
    // Alternate which goes first, so that neither always runs on a warmer process.
    const order = i % 2 === 0 ? ([adapter, raw] as const) : ([raw, adapter] as const);
    for (const run of order) {
      const started = performance.now();
      await run();
      if (i >= SINGLE_WARMUP) (run === adapter ? viaAdapter : viaRaw).push(performance.now() - started);
    }
  }
  const a = median(viaAdapter);
  const r = median(viaRaw);
  console.log(`one conditional renew through DynamoDBStorage: ${ms(a)} (median of ${SINGLE_ROUNDS})`);
  console.log(`the same UpdateItem sent raw:                  ${ms(r)} (median of ${SINGLE_ROUNDS})`);
  console.log(`  ratio adapter / raw: ${(a / r).toFixed(2)} (target at most 1.3)`);
}

async function writeUnitsPerHeldLease(): Promise<void> {
  const group = 'bench-capacity';
  let consumed = 0;
  const metered = new DynamoDBClient({
    region: 'us-east-1',
    endpoint: dynalite.endpoint,
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
  });
  type Add = (middleware: unknown, options: { step: 'initialize'; name: string }) => void;
  const meter = (next: (args: { input: Record<string, unknown> }) => Promise<{ output: { ConsumedCapacity?: { CapacityUnits?: number } } }>) =>
    async (args: { input: Record<string, unknown> }) => {
      args.input.ReturnConsumedCapacity = 'TOTAL';
      const result = await next(args);
      consumed += result.output.ConsumedCapacity?.CapacityUnits ?? 0;
      return result;
    };
  (metered.middlewareStack.add as Add).call(metered.middlewareStack, meter, { step: 'initialize', name: 'meterCapacity' });
  const meteredStorage = new DynamoDBStorage({ client: metered, tableName });
  let lease = applied(await meteredStorage.createLease({ group, leaseKey: 'shardId-000000000042', ...held }));
  consumed = 0;
  const renewals = 100;
  for (let i = 0; i < renewals; i++) {
    const [outcome] = await meteredStorage.updateLeases(group, [{ leaseKey: lease.leaseKey, expectedVersion: lease.version, next: leaseStateOf(lease) }]);
    lease = applied(outcome);
  }
  metered.destroy();
  const perRenew = consumed / renewals;
  const ours = (perRenew * 60_000) / RENEW_INTERVAL_MS;
  const kcl = 60_000 / KCL_RENEW_INTERVAL_MS;
  console.log(`write request units per renewal of a held lease: ${perRenew.toFixed(2)} (item under 1 KB)`);
  console.log(`write request units per held lease per minute: ${ours.toFixed(1)} (renew every ${RENEW_INTERVAL_MS.toFixed(0)} ms)`);
  console.log(`KCL, one UpdateItem per lease every ${KCL_RENEW_INTERVAL_MS} ms:   ${kcl.toFixed(1)}`);
  console.log(`  ratio ours / KCL: ${(ours / kcl).toFixed(2)}`);
}

// A member as a worker heartbeats it: a random incarnation, a dozen leases held, no requests.
const beating: MemberState = {
  format: RECORD_FORMAT,
  incarnation: '0b7d4c1e-93a2-4d8f-b6e1-5c2f7a9e3d10',
  leaseDurationMs: 10_000,
  status: 'alive',
  held: 12,
  changes: 41,
  requests: [],
  metadata: {},
};
const ROSTER_MEMBERS = 100;
const workerIdOf = (i: number): string => `ip-10-0-${Math.floor(i / 250)}-${i % 250}.eu-west-1.compute.internal-48213-${String(i).padStart(6, '0')}`;

/** A client that asks for, and adds up, the capacity units DynamoDB (here dynalite) reports for each request. */
function meteredClient(): { client: DynamoDBClient; consumed: () => number; reset: () => void } {
  let consumed = 0;
  const metered = new DynamoDBClient({
    region: 'us-east-1',
    endpoint: dynalite.endpoint,
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
  });
  type Add = (middleware: unknown, options: { step: 'initialize'; name: string }) => void;
  const meter = (next: (args: { input: Record<string, unknown> }) => Promise<{ output: { ConsumedCapacity?: { CapacityUnits?: number } } }>) =>
    async (args: { input: Record<string, unknown> }) => {
      args.input.ReturnConsumedCapacity = 'TOTAL';
      const result = await next(args);
      consumed += result.output.ConsumedCapacity?.CapacityUnits ?? 0;
      return result;
    };
  (metered.middlewareStack.add as Add).call(metered.middlewareStack, meter, { step: 'initialize', name: 'meterCapacity' });
  return { client: metered, consumed: () => consumed, reset: () => (consumed = 0) };
}

async function putMemberAgainstRawUpdate(): Promise<void> {
  const group = 'bench-member';
  // A roster of ROSTER_MEMBERS, as a real group's; each heartbeat writes its own item whatever the size.
  for (let i = 2; i < ROSTER_MEMBERS; i++) applied(await storage.putMember(group, workerIdOf(i), null, beating));
  let mine = applied(await storage.putMember(group, workerIdOf(0), null, beating));
  let rawVersion = applied(await storage.putMember(group, workerIdOf(1), null, beating)).version;
  const rawState = encodeMemberState(beating);
  // The same conditional UpdateItem as the adapter's heartbeat, hand-written with everything precomputed.
  const raw = async (): Promise<void> => {
    await client.send(
      new UpdateItemCommand({
        TableName: tableName,
        Key: memberItemKey(group, workerIdOf(1)),
        UpdateExpression: 'SET #version = :version, #state = :state, #writeId = :writeId',
        ConditionExpression: '#version = :expected AND attribute_not_exists(#removed)',
        ExpressionAttributeNames: { '#version': 'version', '#state': 'state', '#writeId': 'writeId', '#removed': 'removed' },
        ExpressionAttributeValues: {
          ':version': { N: String(rawVersion + 1) },
          ':state': { S: rawState },
          ':writeId': { S: 'raw-write-id-000' },
          ':expected': { N: String(rawVersion) },
        },
        ReturnValues: 'UPDATED_NEW',
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
    );
    rawVersion++;
  };
  const adapter = async (): Promise<void> => {
    mine = applied(await storage.putMember(group, mine.workerId, mine.version, beating));
  };
  const [a, r] = await sideBySide(adapter, raw);
  console.log(`one heartbeat (putMember) in a roster of ${ROSTER_MEMBERS}: ${ms(a)} (median of ${SINGLE_ROUNDS})`);
  console.log(`the same UpdateItem sent raw:                 ${ms(r)} (median of ${SINGLE_ROUNDS})`);
  console.log(`  ratio adapter / raw: ${(a / r).toFixed(2)} (target at most 1.3)`);
}

async function getRosterAgainstRawQuery(): Promise<void> {
  const group = 'bench-member';
  let members = 0;
  const adapter = async (): Promise<void> => {
    members = (await storage.getRoster(group)).members.length;
  };
  // The same four strongly consistent Queries, one per members' key, sent together.
  const raw = async (): Promise<void> => {
    await Promise.all(
      memberBucketKeys(group).map(async (key) => {
        let startKey: Record<string, AttributeValue> | undefined;
        do {
          const page = await client.send(
            new QueryCommand({
              TableName: tableName,
              KeyConditionExpression: 'pk = :pk AND begins_with(sk, :member)',
              ExpressionAttributeValues: { ':pk': { S: key }, ':member': { S: 'member:' } },
              ConsistentRead: true,
              ExclusiveStartKey: startKey,
            }),
          );
          startKey = page.LastEvaluatedKey;
        } while (startKey !== undefined);
      }),
    );
  };
  const [a, r] = await sideBySide(adapter, raw);
  if (members !== ROSTER_MEMBERS) throw new Error(`expected ${ROSTER_MEMBERS} members, read ${members}`);
  console.log(`getRoster of ${ROSTER_MEMBERS} members (four Queries + decoding each): ${ms(a)} (median of ${SINGLE_ROUNDS})`);
  console.log(`the same strongly consistent Queries sent raw:      ${ms(r)} (median of ${SINGLE_ROUNDS})`);
  console.log(`  ratio adapter / raw: ${(a / r).toFixed(2)}`);
}

async function capacityPerHeartbeat(): Promise<void> {
  const kcl = 60_000 / KCL_RENEW_INTERVAL_MS;
  const perMinute = 60_000 / RENEW_INTERVAL_MS;
  console.log(`capacity units of the roster, a heartbeat every ${RENEW_INTERVAL_MS.toFixed(0)} ms (renewIntervalMs), worker ids of ${workerIdOf(0).length} bytes, states of ${encodeMemberState(beating).length} bytes:`);
  console.log('  members | member item bytes | all members bytes | WCU/heartbeat | WCU/worker/min | WCU/s on the hottest item | RCU/getRoster (strong) | RCU/s, every worker every 2 s');
  for (const size of [10, 100, 128, 1000]) {
    const group = `bench-capacity-${size}`;
    const metered = meteredClient();
    const meteredStorage = new DynamoDBStorage({ client: metered.client, tableName });
    const members: MemberRecord[] = [];
    for (let start = 0; start < size; start += 100) {
      const chunk = Array.from({ length: Math.min(100, size - start) }, (_, k) => start + k);
      members.push(...(await Promise.all(chunk.map(async (i) => applied(await meteredStorage.putMember(group, workerIdOf(i), null, beating))))));
    }
    metered.reset();
    // Every member heartbeats once, as each worker does every renewIntervalMs.
    for (let start = 0; start < size; start += 100) {
      await Promise.all(members.slice(start, start + 100).map(async (member) => applied(await meteredStorage.putMember(group, member.workerId, member.version, beating))));
    }
    const perHeartbeat = metered.consumed() / size;
    metered.reset();
    await meteredStorage.getRoster(group);
    const perRead = metered.consumed();
    metered.client.destroy();
    let total = 0;
    let largest = 0;
    for (const key of memberBucketKeys(group)) {
      let startKey: Record<string, AttributeValue> | undefined;
      do {
        const page = await client.send(
          new QueryCommand({ TableName: tableName, KeyConditionExpression: 'pk = :pk', ExpressionAttributeValues: { ':pk': { S: key } }, ConsistentRead: true, ExclusiveStartKey: startKey }),
        );
        for (const item of page.Items ?? []) {
          total += itemBytes(item);
          largest = Math.max(largest, itemBytes(item));
        }
        startKey = page.LastEvaluatedKey;
      } while (startKey !== undefined);
    }
    const perWorkerMinute = perHeartbeat * perMinute;
    console.log(
      `  ${String(size).padStart(7)} | ${String(largest).padStart(17)} | ${String(total).padStart(17)} | ${perHeartbeat.toFixed(1).padStart(13)} | ${perWorkerMinute.toFixed(0).padStart(14)} | ${(perHeartbeat / (RENEW_INTERVAL_MS / 1000)).toFixed(1).padStart(25)} | ${String(perRead).padStart(22)} | ${((size * perRead) / 2).toFixed(0)}`,
    );
  }
  console.log(`KCL, one UpdateItem per lease every ${KCL_RENEW_INTERVAL_MS} ms: ${kcl.toFixed(1)} WCU per lease per minute`);
  console.log('  (a partition takes at most 1,000 WCU/s and 3,000 RCU/s: the members of a group are spread over four partition keys)');
}

/** Runs the two alternately, SINGLE_ROUNDS times after a warm-up, and returns their medians. */
async function sideBySide(first: () => Promise<void>, second: () => Promise<void>): Promise<[number, number]> {
  const times: [number[], number[]] = [[], []];
  for (let i = 0; i < SINGLE_WARMUP + SINGLE_ROUNDS; i++) {
    // Alternate which goes first, so that neither always runs on a warmer process.
    const order = i % 2 === 0 ? ([0, 1] as const) : ([1, 0] as const);
    for (const which of order) {
      const started = performance.now();
      await (which === 0 ? first : second)();
      if (i >= SINGLE_WARMUP) times[which].push(performance.now() - started);
    }
  }
  return [median(times[0]), median(times[1])];
}

try {
  await storage.createTable();
  console.log('@leasehold/storage-dynamodb on dynalite (in process)\n');
  await batchedAgainstSequential();
  console.log();
  await adapterAgainstRawUpdate();
  console.log();
  await writeUnitsPerHeldLease();
  console.log();
  await putMemberAgainstRawUpdate();
  console.log();
  await getRosterAgainstRawQuery();
  console.log();
  await capacityPerHeartbeat();
} finally {
  client.destroy();
  await dynalite.close();
}
