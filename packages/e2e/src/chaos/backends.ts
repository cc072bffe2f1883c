/**
 * The backends a chaos run owns: a throwaway PostgreSQL cluster, a Redis server with durable persistence,
 * or dynalite, each on a free port of 127.0.0.1, so that the run can restart them without touching any
 * shared server. Each hands out storage URLs for a given port, so that workers reach it through their
 * own proxy while the monitor reaches it directly.
 */
import { freePort, startDynalite, startPostgresCluster, startRedisServer } from '@leasehold/local-stack';
import type { StorageKind } from '../storage-url.js';

/** A backend of a chaos run. */
export interface ChaosBackend {
  readonly kind: StorageKind;
  /** Where it listens. */
  readonly port: number;
  /** The storage URL that reaches it on `port` (the backend's own port or a proxy in front of it). */
  urlFor(port: number): string;
  /** How a restart is done, or why it cannot be. */
  readonly restartKind: string;
  /** Restarts it with its data, or `undefined` when this backend cannot be restarted. */
  readonly restart: (() => Promise<void>) | undefined;
  close(): Promise<void>;
}

export { freePort };

export async function startBackend(kind: StorageKind): Promise<ChaosBackend> {
  if (kind === 'postgres') return startPostgres();
  if (kind === 'redis') return startRedis();
  return startDynamo();
}

/** A cluster of its own (initdb into a temporary folder), restarted as a crash would. */
async function startPostgres(): Promise<ChaosBackend> {
  const cluster = await startPostgresCluster({ maxConnections: 60, settings: { fsync: 'on' } });
  return {
    kind: 'postgres',
    port: cluster.port,
    urlFor: (at) => `postgres://postgres@127.0.0.1:${at}/postgres`,
    restartKind: 'pg_ctl restart -m immediate (a crash; recovery replays the WAL)',
    // The same as `pg_ctlcluster <version> <name> restart`, on the run's own cluster.
    restart: () => cluster.restart('immediate'),
    close: () => cluster.destroy(),
  };
}

/** A redis-server of its own with `appendonly yes` and `appendfsync always`, restarted by SIGKILL. */
async function startRedis(): Promise<ChaosBackend> {
  const server = await startRedisServer({ args: ['--appendonly', 'yes', '--appendfsync', 'always', '--save', ''] });
  return {
    kind: 'redis',
    port: server.port,
    urlFor: (at) => `redis://127.0.0.1:${at}`,
    restartKind: 'SIGKILL and start again (appendonly yes, appendfsync always)',
    restart: () => server.restart(),
    close: () => server.stop(),
  };
}

/**
 * A PostgreSQL cluster of the run's own for a fenced sink when the leases live elsewhere. Workers reach it
 * directly, not through their proxies: a worker cut off from its leases can still write the sink, and only
 * the fence keeps its writes out once another worker took the shard. It is never restarted.
 */
export async function startSinkDatabase(): Promise<{ readonly url: string; close(): Promise<void> }> {
  const cluster = await startPostgresCluster({ maxConnections: 30 });
  return { url: cluster.url, close: () => cluster.destroy() };
}

/** dynalite in this process. It keeps its tables in memory, so it cannot be restarted with its data. */
async function startDynamo(): Promise<ChaosBackend> {
  const dynalite = await startDynalite();
  return {
    kind: 'dynamodb',
    port: dynalite.port,
    urlFor: (at) => `dynamodb://leasehold-chaos?endpoint=${encodeURIComponent(`http://127.0.0.1:${at}`)}&region=us-east-1`,
    restartKind: 'not possible: dynalite keeps its tables in memory (every proxy drops its connections instead)',
    restart: undefined,
    close: () => dynalite.close(),
  };
}
