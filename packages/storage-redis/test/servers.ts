/**
 * Redis servers for the tests: the shared one (127.0.0.1:6379 unless REDIS_HOST/REDIS_PORT say otherwise), and private ones (standalone or a
 * three-primary cluster) started on free ports in temporary directories for tests that restart, kill or
 * flush, so that they never disturb anyone else.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { redisTarget, START_REDIS, startRedisServer, type RedisServer } from '@leasehold/local-stack';
import { Cluster, Redis } from 'ioredis';

const run = promisify(execFile);

/** The shared server's host and port (`npm test` sets them to one it started when none ran). */
export const { host: SHARED_HOST, port: SHARED_PORT } = redisTarget();

/**
 * Sends a write while the server sleeps, and a CLIENT KILL right behind it, so that both are read in one
 * turn of the server's event loop: in one order the script runs and its reply is lost with the
 * connection, in the other the kill comes first; either way the client resends the write after it
 * reconnects. A small write fits in one read, which makes the first order the usual one.
 */
export async function sendDuringKill<T>(admin: Redis, killer: Redis, send: () => Promise<T>, delayMs = 0): Promise<T> {
  const asleep = admin.call('DEBUG', 'SLEEP', '0.05');
  await new Promise((resolve) => setTimeout(resolve, 10));
  const pending = send();
  await new Promise((resolve) => setTimeout(resolve, delayMs));
  const killed = killer.call('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
  try {
    return await pending;
  } finally {
    await Promise.allSettled([asleep, killed]);
  }
}

/**
 * Damages one member of a roster as a bad writer would, moving its version as every writer does: the
 * member's value keeps a header with the next version of the group's counter, and its state is not a
 * member's. Returns that version.
 */
const CORRUPT_MEMBER = `
local counter = redis.call('HGET', KEYS[1], '') or '0'
local version = string.format('%d', tonumber(string.match(counter, '^(%d+)')) + 1)
redis.call('HSET', KEYS[1], '', version, ARGV[1], version .. ':another-program:not a member')
return version
`;

export async function corruptMember(client: Redis | Cluster, rosterKey: string, workerId: string): Promise<{ version: number }> {
  return { version: Number(await client.eval(CORRUPT_MEMBER, 1, rosterKey, workerId)) };
}

/** A client of the shared server; fails loudly, with the command that starts one, if it is not running. */
export async function connectShared(): Promise<Redis> {
  const client = new Redis({ host: SHARED_HOST, port: SHARED_PORT, lazyConnect: true, maxRetriesPerRequest: 1, retryStrategy: () => null });
  try {
    await client.connect();
    await client.ping();
  } catch (error) {
    client.disconnect();
    throw new Error(
      `These tests need Redis on ${SHARED_HOST}:${SHARED_PORT}; ${START_REDIS} (${(error as Error).message})`,
      { cause: error },
    );
  }
  // Reconnect normally from here on: the tests kill and flush only their own servers, never this one.
  client.options.retryStrategy = (attempt: number) => Math.min(attempt * 50, 1000);
  client.options.maxRetriesPerRequest = 20;
  return client;
}

/** Deletes every key under the prefix (tests use a prefix of their own). */
export async function deletePrefix(client: Redis, prefix: string): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    if (keys.length > 0) await client.unlink(...keys);
    cursor = next;
  } while (cursor !== '0');
}

/** A redis-server of the tests' own, without persistence unless asked, with DEBUG allowed (the tests stall it with DEBUG SLEEP). */
export type OwnServer = RedisServer;

export const OwnServer = {
  async start(extra: readonly string[] = []): Promise<OwnServer> {
    return startRedisServer({ args: ['--enable-debug-command', 'local', ...extra], clusterBus: extra.includes('--cluster-enabled') });
  },
};

/** A three-primary Redis Cluster of the tests' own. */
export class OwnCluster {
  readonly nodes: OwnServer[];

  private constructor(nodes: OwnServer[]) {
    this.nodes = nodes;
  }

  static async start(): Promise<OwnCluster> {
    const nodes: OwnServer[] = [];
    try {
      for (let i = 0; i < 3; i++) {
        nodes.push(await OwnServer.start(['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '5000']));
      }
      await run('redis-cli', ['--cluster', 'create', ...nodes.map((node) => `127.0.0.1:${node.port}`), '--cluster-replicas', '0', '--cluster-yes']);
      await waitForClusterOk(nodes);
      return new OwnCluster(nodes);
    } catch (error) {
      await Promise.all(nodes.map((node) => node.stop()));
      throw error;
    }
  }

  client(): Cluster {
    const cluster = new Cluster(this.nodes.map((node) => ({ host: '127.0.0.1', port: node.port })));
    cluster.on('error', () => undefined);
    return cluster;
  }

  async stop(): Promise<void> {
    await Promise.all(this.nodes.map((node) => node.stop()));
  }
}

async function waitForClusterOk(nodes: readonly OwnServer[]): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const states = await Promise.all(
      nodes.map(async (node) => {
        const { stdout } = await run('redis-cli', ['-p', String(node.port), 'cluster', 'info']);
        return /cluster_state:ok/.test(stdout);
      }),
    );
    if (states.every(Boolean)) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error('the test cluster did not reach cluster_state:ok within 30 s');
}
