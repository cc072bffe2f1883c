/**
 * A throwaway PostgreSQL cluster for destructive tests: `initdb` into a temporary folder, started on a free
 * port with its socket in that folder, never the shared server. Needs the server binaries (Debian's
 * `postgresql` package puts them in /usr/lib/postgresql/<version>/bin); as root it runs them as `postgres`.
 */
import { execFile } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

function binDir(): string {
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root)
    ? readdirSync(root).filter((name) => existsSync(join(root, name, 'bin', 'initdb'))).sort((a, b) => Number(b) - Number(a))
    : [];
  if (versions.length === 0) {
    throw new Error(`no initdb under ${root}/*/bin; install the server with \`apt-get install -y postgresql\``);
  }
  return join(root, versions[0] as string, 'bin');
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

export interface Cluster {
  readonly port: number;
  /**
   * Stops the server: `immediate` as a crash would (in-flight statements are cut, recovery replays the WAL),
   * `fast` as an operator's restart (sessions are ended with admin_shutdown, then a checkpoint).
   */
  stop(mode: 'immediate' | 'fast'): Promise<void>;
  start(): Promise<void>;
  /** Stops the server and removes its folder. */
  destroy(): Promise<void>;
}

export async function startCluster(): Promise<Cluster> {
  const bin = binDir();
  const folder = mkdtempSync(join(tmpdir(), 'leasehold-pg-'));
  // initdb refuses to run as root: the server runs as `postgres`, which must be able to write the folder.
  chmodSync(folder, 0o777);
  const data = join(folder, 'data');
  const port = await freePort();
  const asServerUser = process.getuid?.() === 0;
  const exec = async (tool: string, args: string[]): Promise<void> => {
    const command = asServerUser ? 'runuser' : join(bin, tool);
    const argv = asServerUser ? ['-u', 'postgres', '--', join(bin, tool), ...args] : args;
    await run(command, argv, { cwd: folder, timeout: 60_000 });
  };
  const options = `-p ${port} -k ${folder} -c listen_addresses=127.0.0.1 -c max_connections=30`;
  const start = (): Promise<void> => exec('pg_ctl', ['-D', data, '-l', join(folder, 'server.log'), '-o', options, '-w', '-t', '60', 'start']);
  try {
    await exec('initdb', ['-D', data, '--auth=trust', '-U', 'postgres', '-E', 'UTF8', '--locale=C', '--no-sync']);
    await start();
  } catch (error) {
    rmSync(folder, { recursive: true, force: true });
    throw error;
  }
  return {
    port,
    stop: (mode) => exec('pg_ctl', ['-D', data, '-m', mode, '-w', 'stop']),
    start,
    destroy: async () => {
      await exec('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']).catch(() => undefined);
      rmSync(folder, { recursive: true, force: true });
    },
  };
}
