/**
 * Runs the built binary and gives each test fresh state on the real backends: a Postgres schema, a Redis
 * key prefix, a DynamoDB table in an in-process dynalite. Records are seeded through the adapters.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { CreateTableCommand, DynamoDBClient, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import { type LeaseRecord, type MemberRecord, type MemberState, type NewLeader, type NewLease, type Storage } from '@leasehold/core';
import { RECORD_FORMAT } from '@leasehold/core/adapter';
import { openTestPool, postgresTarget, postgresUrl, redisTarget, START_REDIS, startDynalite, type RunningDynalite } from '@leasehold/local-stack';
import { DynamoDBStorage } from '@leasehold/storage-dynamodb';
import { PostgresStorage } from '@leasehold/storage-postgres';
import { RedisStorage } from '@leasehold/storage-redis';
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, beforeAll } from 'vitest';

const BIN = fileURLToPath(new URL('../dist/bin.js', import.meta.url));

/** Dummy credentials for dynalite, which checks none; the binary takes them from the default chain. */
export const AWS_ENV = {
  AWS_ACCESS_KEY_ID: 'test',
  AWS_SECRET_ACCESS_KEY: 'test',
  AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
};

export interface CliResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `leasehold ...args` as a child process and waits for it to exit. */
export function leasehold(...args: string[]): Promise<CliResult> {
  return leaseholdWithEnv({}, ...args);
}

/** Runs `leasehold ...args` with extra environment variables. */
export function leaseholdWithEnv(env: Readonly<Record<string, string>>, ...args: string[]): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [BIN, ...args], { env: { ...process.env, ...AWS_ENV, ...env }, timeout: 50_000 }, (error, stdout, stderr) => {
      if (error && typeof error.code !== 'number') reject(new Error(`leasehold did not run: ${error.message}`, { cause: error }));
      else resolve({ code: typeof error?.code === 'number' ? error.code : 0, stdout, stderr });
    });
  });
}

/** A fresh name: lower case letters and digits, valid as a group, a schema, a prefix or a table. */
export function freshName(kind: string): string {
  return `${kind}${randomBytes(5).toString('hex')}`;
}

/** A backend under test: its URL for the binary, an adapter to seed and read it, and its cleanup. */
export interface TestBackend {
  readonly url: string;
  readonly storage: Storage;
  /**
   * Damages the state of a stored lease the way a bad write by another program would, leaving its version
   * readable: the adapter then lists it as corrupt. Written against the adapter's documented layout.
   */
  corrupt(group: string, leaseKey: string): Promise<void>;
  /** Damages a member of the roster as a bad writer would, moving its version; returns the version it is stored at (Postgres only). */
  corruptMember?(group: string, workerId: string): Promise<number>;
  close(): Promise<void>;
}

const BROKEN_STATE = '{"owner": "half-written';

/** The shared PostgreSQL, or a loud failure that says how to start it. */
export function postgresPool(): Promise<pg.Pool> {
  return openTestPool(4, { connectionTimeoutMillis: 5000 });
}

/** A fresh schema on the shared PostgreSQL, migrated unless `migrated` is false; dropped on close. */
export async function postgresBackend(pool: pg.Pool, { migrated = true } = {}): Promise<TestBackend> {
  const schema = freshName('cli_');
  const storage = new PostgresStorage({ pool, schema });
  if (migrated) await storage.migrate();
  else await pool.query(`CREATE SCHEMA "${schema}"`);
  return {
    url: `${postgresUrl(postgresTarget())}?schema=${schema}`,
    storage,
    async corrupt(group, leaseKey) {
      const { rowCount } = await pool.query(`UPDATE "${schema}".leasehold_leases SET state = $3 WHERE group_name = $1 AND lease_key = $2`, [group, leaseKey, BROKEN_STATE]);
      if (rowCount !== 1) throw new Error(`no lease ${leaseKey} to corrupt`);
    },
    async corruptMember(group, workerId) {
      // Each member is a row of the member table; the member's version moves with every write.
      const { rows } = await pool.query<{ version: string }>(
        `UPDATE "${schema}".leasehold_members SET version = version + 1, state = '{"incarnation":'
         WHERE group_name = $1 AND worker_id = $2 AND NOT removed RETURNING version`,
        [group, workerId],
      );
      if (rows.length !== 1) throw new Error(`no member ${workerId} to corrupt`);
      return Number(rows[0]?.version);
    },
    async close() {
      await storage.close();
      await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
    },
  };
}

const { host: REDIS_HOST, port: REDIS_PORT } = redisTarget();

/** The shared Redis, or a loud failure that says how to start it. */
export async function redisClient(port = REDIS_PORT): Promise<Redis> {
  const client = new Redis({ host: REDIS_HOST, port, lazyConnect: true, maxRetriesPerRequest: 1, retryStrategy: () => null });
  client.on('error', () => undefined);
  try {
    await client.connect();
  } catch (error) {
    throw new Error(
      `Redis is not reachable at ${REDIS_HOST}:${port}: ${START_REDIS}`,
      { cause: error },
    );
  }
  return client;
}

/** A fresh key prefix on a Redis; its keys are deleted on close. */
export function redisBackend(client: Redis, port = REDIS_PORT): TestBackend {
  const prefix = `${freshName('clitest')}:`;
  const storage = new RedisStorage({ client, keyPrefix: prefix });
  return {
    url: `redis://${REDIS_HOST}:${port}?prefix=${prefix}`,
    storage,
    async corrupt(group, leaseKey) {
      // The leases hash holds `version:epoch:write token:state JSON` per lease key.
      const hash = `${prefix}{${Buffer.from(group, 'utf8').toString('base64url')}}:leases`;
      const value = await client.hget(hash, leaseKey);
      const head = value?.split(':').slice(0, 3).join(':');
      if (value === null || head === undefined) throw new Error(`no lease ${leaseKey} to corrupt`);
      await client.hset(hash, leaseKey, `${head}:${BROKEN_STATE}`);
    },
    async close() {
      await storage.close();
      const keys = await client.keys(`${prefix}*`);
      if (keys.length > 0) await client.del(...keys);
    },
  };
}

/** dynalite in this process, and a client for it. */
export async function dynamo(): Promise<{ dynalite: RunningDynalite; client: DynamoDBClient }> {
  const dynalite = await startDynalite();
  const client = new DynamoDBClient({ endpoint: dynalite.endpoint, region: 'us-east-1', credentials: { accessKeyId: 'test', secretAccessKey: 'test' } });
  return { dynalite, client };
}

/**
 * The dynalite of one test file: started before its first test, stopped after its last; `env()` is it
 * (with a client), `backend()` a fresh table in it.
 */
export function useDynamo(): { env: () => { dynalite: RunningDynalite; client: DynamoDBClient }; backend: () => Promise<TestBackend> } {
  let started: { dynalite: RunningDynalite; client: DynamoDBClient } | undefined;
  beforeAll(async () => {
    started = await dynamo();
  });
  afterAll(async () => {
    started?.client.destroy();
    await started?.dynalite.close();
  });
  const env = (): { dynalite: RunningDynalite; client: DynamoDBClient } => {
    if (started === undefined) throw new Error('dynalite is not started: call useDynamo() at the top of the test file');
    return started;
  };
  return { env, backend: () => dynamoBackend(env()) };
}

/** A fresh table in dynalite (unless `created` is false); dynalite drops everything when it stops. */
export async function dynamoBackend(env: { dynalite: RunningDynalite; client: DynamoDBClient }, { created = true } = {}): Promise<TestBackend> {
  const tableName = freshName('cli');
  const storage = new DynamoDBStorage({ client: env.client, tableName });
  if (created) await storage.createTable();
  return {
    url: `dynamodb://${tableName}?region=us-east-1&endpoint=${encodeURIComponent(env.dynalite.endpoint)}`,
    storage,
    async corrupt(group, leaseKey) {
      await env.client.send(
        new UpdateItemCommand({
          TableName: tableName,
          Key: { pk: { S: group }, sk: { S: `lease:${leaseKey}` } },
          UpdateExpression: 'SET #state = :broken',
          ConditionExpression: 'attribute_exists(pk)',
          ExpressionAttributeNames: { '#state': 'state' },
          ExpressionAttributeValues: { ':broken': { S: BROKEN_STATE } },
        }),
      );
    },
    async close() {},
  };
}

/** Creates a DynamoDB table of another key schema, for the doctor's shape check. */
export async function createWrongTable(client: DynamoDBClient, tableName: string): Promise<void> {
  await client.send(
    new CreateTableCommand({
      TableName: tableName,
      BillingMode: 'PAY_PER_REQUEST',
      AttributeDefinitions: [{ AttributeName: 'id', AttributeType: 'S' }],
      KeySchema: [{ AttributeName: 'id', KeyType: 'HASH' }],
    }),
  );
}

/** Creates leases and a leader record; throws unless every write applied. */
export async function seed(storage: Storage, leases: readonly NewLease[], leader?: NewLeader): Promise<LeaseRecord[]> {
  const created: LeaseRecord[] = [];
  for (const lease of leases) {
    const outcome = await storage.createLease(lease);
    if (outcome.status !== 'applied') throw new Error(`seeding ${lease.leaseKey}: ${outcome.status}`);
    created.push(outcome.record);
  }
  if (leader) {
    const outcome = await storage.createLeader(leader);
    if (outcome.status !== 'applied') throw new Error(`seeding the leader: ${outcome.status}`);
  }
  return created;
}

/** Joins a member to the group's roster, as a worker's first write does; throws unless it applied. */
export async function join(storage: Storage, group: string, workerId: string, state: Partial<MemberState> = {}): Promise<MemberRecord> {
  const outcome = await storage.putMember(group, workerId, null, {
    format: RECORD_FORMAT,
    incarnation: `${workerId}-inc`,
    leaseDurationMs: 500,
    status: 'alive',
    held: 0,
    changes: 0,
    requests: [],
    metadata: {},
    ...state,
  });
  if (outcome.status !== 'applied') throw new Error(`joining ${workerId}: ${outcome.status}`);
  return outcome.record;
}

/**
 * A worker stand-in that heartbeats its member record over and over until stopped, as a live worker
 * does: the guard must see its version move. It joins first (with `state`), unless it is a member already.
 */
export function heartbeater(storage: Storage, group: string, workerId: string, state: Partial<MemberState> = {}): { stop(): Promise<void> } {
  let running = true;
  const loop = (async () => {
    let member = (await storage.getRoster(group)).members.find((candidate) => candidate.workerId === workerId) ?? (await join(storage, group, workerId, state));
    while (running) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      const { group: _group, workerId: _workerId, version, ...current } = member;
      const outcome = await storage.putMember(group, workerId, version, current);
      if (outcome.status !== 'applied') return;
      member = outcome.record;
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
    },
  };
}

/**
 * The shared servers' clients of one test file (Postgres pool, Redis client, an in-process dynalite),
 * opened before its tests and closed after them.
 */
export function sharedBackends(): { readonly pool: pg.Pool; readonly redis: Redis; readonly dynamodb: Awaited<ReturnType<typeof dynamo>> } {
  let pool: pg.Pool | undefined;
  let redis: Redis | undefined;
  let dynamodb: Awaited<ReturnType<typeof dynamo>> | undefined;
  beforeAll(async () => {
    pool = await postgresPool();
    redis = await redisClient();
    dynamodb = await dynamo();
  });
  afterAll(async () => {
    await pool?.end();
    redis?.disconnect();
    dynamodb?.client.destroy();
    await dynamodb?.dynalite.close();
  });
  const opened = <T>(value: T | undefined, what: string): T => {
    if (value === undefined) throw new Error(`${what} is not open: use it inside a test`);
    return value;
  };
  return {
    get pool() {
      return opened(pool, 'the Postgres pool');
    },
    get redis() {
      return opened(redis, 'the Redis client');
    },
    get dynamodb() {
      return opened(dynamodb, 'dynalite');
    },
  };
}

/** The roster digest of a store that keeps one (DynamoDB's does); fails for one that keeps none. */
export function rosterDigest(storage: Storage): { read(group: string): Promise<number>; advance(group: string): Promise<number> } {
  if (storage.getRosterDigest === undefined || storage.advanceRosterDigest === undefined) throw new Error('this store keeps no roster digest');
  const store = storage as Required<Pick<Storage, 'getRosterDigest' | 'advanceRosterDigest'>>;
  return { read: (group) => store.getRosterDigest(group), advance: (group) => store.advanceRosterDigest(group) };
}
