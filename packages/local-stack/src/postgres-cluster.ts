/**
 * A throwaway PostgreSQL cluster for destructive tests and chaos runs: `initdb` into a temporary folder,
 * started on a free port of 127.0.0.1 with its socket in that folder, never the shared server. Needs the
 * server binaries (found by {@link postgresBinDir}); as root it runs them as `postgres`, since initdb
 * refuses to run as root.
 */
import { execFile } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
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

/** Where PostgreSQL's server binaries are commonly installed, newest version first within each place. */
function candidateBinDirs(): string[] {
  const dirs: string[] = [];
  if (process.env.PG_BIN) dirs.push(process.env.PG_BIN);
  for (const entry of (process.env.PATH ?? '').split(delimiter)) if (entry) dirs.push(entry);
  const versioned = (root: string, inner: (name: string) => string): void => {
    if (!existsSync(root)) return;
    const names = readdirSync(root).filter((name) => /\d/.test(name));
    names.sort((a, b) => Number(b.replace(/\D+/g, '')) - Number(a.replace(/\D+/g, '')));
    for (const name of names) dirs.push(inner(name));
  };
  versioned('/usr/lib/postgresql', (name) => join('/usr/lib/postgresql', name, 'bin')); // Debian, Ubuntu
  versioned('/usr', (name) => (name.startsWith('pgsql-') ? join('/usr', name, 'bin') : '')); // Fedora, RHEL (PGDG)
  for (const prefix of ['/opt/homebrew/opt', '/usr/local/opt']) versioned(prefix, (name) => (name.startsWith('postgresql') ? join(prefix, name, 'bin') : '')); // Homebrew
  dirs.push('/usr/local/pgsql/bin', '/Applications/Postgres.app/Contents/Versions/latest/bin');
  return dirs.filter((dir) => dir !== '');
}

/**
 * The folder of `initdb` and `pg_ctl`: `PG_BIN` if set, else the PATH, else the places Debian, Fedora,
 * Homebrew and Postgres.app install them. Throws one message saying how to get them.
 */
export function postgresBinDir(): string {
  for (const dir of candidateBinDirs()) {
    if (existsSync(join(dir, 'initdb')) && existsSync(join(dir, 'pg_ctl'))) return dir;
  }
  throw new Error(
    'no PostgreSQL server binaries (initdb and pg_ctl) on the PATH or where Debian, Fedora, Homebrew or Postgres.app put them; ' +
      'install the server (apt-get install postgresql, dnf install postgresql-server, brew install postgresql@16) or set PG_BIN to the folder of initdb',
  );
}

/** Creates and starts a cluster of its own. */
export async function startPostgresCluster(options: PostgresClusterOptions = {}): Promise<PostgresCluster> {
  const bin = postgresBinDir();
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
