/**
 * Where the tests and benches find PostgreSQL and Redis: the environment `npm test` sets (`PGHOST`,
 * `PGPORT`, `PGUSER`, `PGDATABASE`, `REDIS_HOST`, `REDIS_PORT`), or a developer machine's defaults, and
 * a pool on that PostgreSQL that fails loudly, saying how to start it, when nothing answers.
 */
import pg from 'pg';

/** A PostgreSQL server and database to connect to. */
export interface PostgresTarget {
  readonly host: string;
  readonly port: number;
  readonly user: string;
  readonly database: string;
}

/** What a test that cannot reach PostgreSQL tells its reader to do. */
export const START_POSTGRES =
  '`npm test` starts a throwaway one when the PostgreSQL server binaries are installed; or start your own and set PGHOST, PGPORT, PGUSER and PGDATABASE';

/** What a test that cannot reach Redis tells its reader to do. */
export const START_REDIS = '`npm test` starts a throwaway one when redis-server is on the PATH; or start your own and set REDIS_HOST and REDIS_PORT';

/** The PostgreSQL the environment names: 127.0.0.1:5432, user `root`, database `test` by default. */
export function postgresTarget(env: NodeJS.ProcessEnv = process.env): PostgresTarget {
  return { host: env.PGHOST ?? '127.0.0.1', port: Number(env.PGPORT ?? 5432), user: env.PGUSER ?? 'root', database: env.PGDATABASE ?? 'test' };
}

/** The same as a `postgres://` URL (trust authentication: no password). */
export function postgresUrl(target: PostgresTarget = postgresTarget()): string {
  return `postgres://${target.user}@${target.host}:${target.port}/${target.database}`;
}

/** The Redis the environment names: 127.0.0.1:6379 by default. */
export function redisTarget(env: NodeJS.ProcessEnv = process.env): { readonly host: string; readonly port: number } {
  return { host: env.REDIS_HOST ?? '127.0.0.1', port: Number(env.REDIS_PORT ?? 6379) };
}

/** The same as a `redis://` URL. */
export function redisUrl(target: { readonly host: string; readonly port: number } = redisTarget()): string {
  return `redis://${target.host}:${target.port}`;
}

/**
 * A pool of `max` connections on the environment's PostgreSQL, checked with one query; when nothing
 * answers, it is ended and the error names the server and how to start one. Idle clients a restarting
 * server drops are dropped by the pool.
 */
export async function openTestPool(max: number, options: { connectionTimeoutMillis?: number; target?: PostgresTarget } = {}): Promise<pg.Pool> {
  const target = options.target ?? postgresTarget();
  const pool = new pg.Pool({ ...target, max, connectionTimeoutMillis: options.connectionTimeoutMillis ?? 10_000 });
  pool.on('error', () => undefined);
  try {
    await pool.query('SELECT 1');
  } catch (error) {
    await pool.end();
    throw new Error(`cannot reach PostgreSQL at ${target.host}:${target.port}/${target.database} as ${target.user} (${(error as Error).message}); ${START_POSTGRES}`, { cause: error });
  }
  return pool;
}
