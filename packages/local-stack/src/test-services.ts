/**
 * The servers the test suite needs, on any machine: the PostgreSQL and Redis the environment names
 * (`PGHOST`/`PGPORT`/`PGUSER`/`PGDATABASE`, `REDIS_HOST`/`REDIS_PORT`; by default 127.0.0.1:5432 as
 * `root` in database `test`, and 127.0.0.1:6379) when they answer, or else throwaway ones started from
 * the binaries found on this machine (a cluster of its own from `initdb`, a `redis-server` from the
 * PATH). What they resolved to is given as environment variables for the test processes.
 */
import { connect } from 'node:net';
import pg from 'pg';
import { startPostgresCluster, type PostgresCluster } from './postgres-cluster.js';
import { startRedisServer, type RedisServer } from './redis-server.js';
import { postgresTarget, redisTarget } from './test-servers.js';

/** The servers in use, and how to stop those this call started. */
export interface TestServices extends AsyncDisposable {
  /** `PGHOST`, `PGPORT`, `PGUSER`, `PGDATABASE`, `REDIS_HOST` and `REDIS_PORT` of the servers in use. */
  readonly env: Readonly<Record<string, string>>;
  /** One line per server: where it is and whether it was started for this run. */
  readonly summary: readonly string[];
  /** Stops the servers this call started (never the environment's own). */
  close(): Promise<void>;
}

/** Finds or starts the test suite's PostgreSQL and Redis; throws one message per missing server saying how to get it. */
export async function ensureTestServices(env: NodeJS.ProcessEnv = process.env): Promise<TestServices> {
  const summary: string[] = [];
  const stops: Array<() => Promise<void>> = [];
  const close = async (): Promise<void> => {
    for (const stop of stops.reverse()) await stop().catch(() => undefined);
  };
  const failures: string[] = [];
  const resolved: Record<string, string> = {};

  const postgres = postgresTarget(env);
  const reached = await reachPostgres(postgres);
  if (reached === true) {
    summary.push(`PostgreSQL: ${postgres.user}@${postgres.host}:${postgres.port}/${postgres.database} (already running)`);
    Object.assign(resolved, { PGHOST: postgres.host, PGPORT: String(postgres.port), PGUSER: postgres.user, PGDATABASE: postgres.database });
  } else {
    let cluster: PostgresCluster | undefined;
    try {
      cluster = await startPostgresCluster({ maxConnections: 200 });
      stops.push(() => (cluster as PostgresCluster).destroy());
      const admin = new pg.Client({ host: '127.0.0.1', port: cluster.port, user: 'postgres', database: 'postgres' });
      await admin.connect();
      try {
        await admin.query('CREATE DATABASE test');
      } finally {
        await admin.end();
      }
      summary.push(`PostgreSQL: postgres@127.0.0.1:${cluster.port}/test (started for this run; ${postgres.host}:${postgres.port} said: ${reached})`);
      Object.assign(resolved, { PGHOST: '127.0.0.1', PGPORT: String(cluster.port), PGUSER: 'postgres', PGDATABASE: 'test' });
    } catch (error) {
      failures.push(`PostgreSQL: none at ${postgres.host}:${postgres.port} (${reached}), and none could be started: ${(error as Error).message}`);
    }
  }

  const redis = redisTarget(env);
  if (await pingRedis(redis.host, redis.port)) {
    summary.push(`Redis: ${redis.host}:${redis.port} (already running)`);
    Object.assign(resolved, { REDIS_HOST: redis.host, REDIS_PORT: String(redis.port) });
  } else {
    try {
      const server: RedisServer = await startRedisServer();
      stops.push(() => server.stop());
      summary.push(`Redis: 127.0.0.1:${server.port} (started for this run; nothing answered on ${redis.host}:${redis.port})`);
      Object.assign(resolved, { REDIS_HOST: '127.0.0.1', REDIS_PORT: String(server.port) });
    } catch (error) {
      failures.push(`Redis: none at ${redis.host}:${redis.port}, and none could be started: ${(error as Error).message}`);
    }
  }

  if (failures.length > 0) {
    await close();
    throw new Error(`the tests need PostgreSQL and Redis:\n  ${failures.join('\n  ')}\nor run them yourself and point PGHOST/PGPORT/PGUSER/PGDATABASE and REDIS_HOST/REDIS_PORT at them`);
  }
  return { env: resolved, summary, close, [Symbol.asyncDispose]: close };
}

/** `true` when the database answers; otherwise why not, in a few words. */
async function reachPostgres(config: { host: string; port: number; user: string; database: string }): Promise<true | string> {
  const client = new pg.Client({ ...config, connectionTimeoutMillis: 3_000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
    await client.query('SELECT 1');
    return true;
  } catch (error) {
    return (error as Error).message || String(error);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** Whether a Redis server answers PING at host:port within a few seconds. */
function pingRedis(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    let answer = '';
    const done = (ok: boolean): void => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(3_000, () => done(false));
    socket.once('error', () => done(false));
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.on('data', (chunk) => {
      answer += chunk.toString();
      if (answer.includes('\r\n')) done(answer.startsWith('+PONG'));
    });
  });
}
