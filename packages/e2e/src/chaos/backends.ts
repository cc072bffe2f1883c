/**
 * The backends a chaos run owns: a throwaway PostgreSQL cluster, a Redis server with durable persistence,
 * or dynalite, each on a free port of 127.0.0.1, so that the run can restart them without touching any
 * shared server. Each hands out storage URLs for a given port, so that workers reach it through their
 * own proxy while the monitor reaches it directly.
 */
import { freePort, startDynalite, startPostgresCluster } from '@leasehold/local-stack';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
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

async function waitForPort(port: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const open = await new Promise<boolean>((resolve) => {
      const socket = createConnection({ host: '127.0.0.1', port });
      socket.once('connect', () => {
        socket.destroy();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
    });
    if (open) return;
    if (Date.now() > deadline) throw new Error(`nothing listens on 127.0.0.1:${port} after ${timeoutMs} ms`);
    await sleep(50);
  }
}

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
  const folder = mkdtempSync(join(tmpdir(), 'leasehold-chaos-redis-'));
  const port = await freePort();
  let server: ChildProcess | undefined;
  const start = async (): Promise<void> => {
    const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', folder, '--appendonly', 'yes', '--appendfsync', 'always', '--save', ''], {
      stdio: 'ignore',
    });
    child.on('error', () => undefined);
    server = child;
    await waitForPort(port, 15_000);
  };
  const kill = async (): Promise<void> => {
    const child = server;
    if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
  };
  await start();
  return {
    kind: 'redis',
    port,
    urlFor: (at) => `redis://127.0.0.1:${at}`,
    restartKind: 'SIGKILL and start again (appendonly yes, appendfsync always)',
    restart: async () => {
      await kill();
      await start();
    },
    close: async () => {
      await kill();
      rmSync(folder, { recursive: true, force: true });
    },
  };
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
