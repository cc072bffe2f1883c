/**
 * A throwaway PostgreSQL cluster for destructive tests and chaos runs: `initdb` into a temporary folder,
 * started on a free port of 127.0.0.1 with its socket in that folder, never the shared server. Needs the
 * server binaries (Debian's `postgresql` package puts them in /usr/lib/postgresql/<version>/bin); as root
 * it runs them as `postgres`, since initdb refuses to run as root.
 */
import { execFile } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from './ports.js';

const run = promisify(execFile);

/** Options of {@link startPostgresCluster}. */
export interface PostgresClusterOptions {
  /** `max_connections` of the server. Default 30. */
  maxConnections?: number;
  /** Extra server settings, as `-c name=value`. */
  settings?: Readonly<Record<string, string>>;
}

/** A running throwaway cluster. */
export interface PostgresCluster extends AsyncDisposable {
  readonly port: number;
  /** A URL of its `postgres` database as the `postgres` user (trust auth). */
  readonly url: string;
  /**
   * Stops the server: `immediate` as a crash would (in-flight statements are cut, recovery replays the WAL),
   * `fast` as an operator's stop (sessions end with admin_shutdown, then a checkpoint).
   */
  stop(mode: 'immediate' | 'fast'): Promise<void>;
  start(): Promise<void>;
  /** `pg_ctl restart` in the given mode: what `pg_ctlcluster ... restart` does to a packaged cluster. */
  restart(mode: 'immediate' | 'fast'): Promise<void>;
  /** Stops the server and removes its folder. */
  destroy(): Promise<void>;
}

function binDir(): string {
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root)
    ? readdirSync(root).filter((name) => existsSync(join(root, name, 'bin', 'initdb'))).sort((a, b) => Number(b) - Number(a))
    : [];
  if (versions.length === 0) throw new Error(`no initdb under ${root}/*/bin; install the server with \`apt-get install -y postgresql\``);
  return join(root, versions[0] as string, 'bin');
}

/** Creates and starts a cluster of its own. */
export async function startPostgresCluster(options: PostgresClusterOptions = {}): Promise<PostgresCluster> {
  const bin = binDir();
  const folder = mkdtempSync(join(tmpdir(), 'leasehold-pg-'));
  // The server runs as `postgres` when we are root, and must be able to write the folder.
  chmodSync(folder, 0o777);
  const data = join(folder, 'data');
  const log = join(folder, 'server.log');
  const port = await freePort();
  const asServerUser = process.getuid?.() === 0;
  const exec = async (tool: string, args: string[]): Promise<void> => {
    const command = asServerUser ? 'runuser' : join(bin, tool);
    const argv = asServerUser ? ['-u', 'postgres', '--', join(bin, tool), ...args] : args;
    await run(command, argv, { cwd: folder, timeout: 60_000 });
  };
  const settings = { listen_addresses: '127.0.0.1', max_connections: String(options.maxConnections ?? 30), ...options.settings };
  const serverOptions = [`-p ${port}`, `-k ${folder}`, ...Object.entries(settings).map(([name, value]) => `-c ${name}=${value}`)].join(' ');
  const start = (): Promise<void> => exec('pg_ctl', ['-D', data, '-l', log, '-o', serverOptions, '-w', '-t', '60', 'start']);
  try {
    await exec('initdb', ['-D', data, '--auth=trust', '-U', 'postgres', '-E', 'UTF8', '--locale=C', '--no-sync']);
    await start();
  } catch (error) {
    rmSync(folder, { recursive: true, force: true });
    throw error;
  }
  const destroy = async (): Promise<void> => {
    await exec('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']).catch(() => undefined);
    rmSync(folder, { recursive: true, force: true });
  };
  return {
    port,
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    stop: (mode) => exec('pg_ctl', ['-D', data, '-m', mode, '-w', 'stop']),
    start,
    restart: (mode) => exec('pg_ctl', ['-D', data, '-l', log, '-o', serverOptions, '-m', mode, '-w', '-t', '60', 'restart']),
    destroy,
    [Symbol.asyncDispose]: destroy,
  };
}
