/**
 * A throwaway `redis-server` for destructive tests and chaos runs: the binary found on the PATH, started
 * on a free port of 127.0.0.1 with its folder in the system's temporary folder, never the shared server.
 * Without persistence unless asked (`--save "" --appendonly no`, then the caller's arguments, which win).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './ports.js';

/** Options of {@link startRedisServer}. */
export interface RedisServerOptions {
  /** Arguments after the defaults, such as `['--appendonly', 'yes', '--appendfsync', 'always']`; a later setting wins. */
  args?: readonly string[];
  /** Pick a port whose cluster bus port (port + 10000) is free too, for `--cluster-enabled yes`. Default `false`. */
  clusterBus?: boolean;
  /** How long to wait for the server to answer `PING`. Default 15,000. */
  startTimeoutMs?: number;
}

/** A running throwaway server. */
export interface RedisServer extends AsyncDisposable {
  readonly port: number;
  /** `redis://127.0.0.1:<port>`. */
  readonly url: string;
  /** Its working folder (snapshots, the append-only file, `nodes.conf`). */
  readonly dir: string;
  /**
   * Kills the server (SIGKILL: nothing is saved on the way down) and starts it again on the same port and
   * folder: it comes back with what it persisted, or empty with `{ fromSnapshot: false }` (the RDB
   * snapshot is removed first).
   */
  restart(options?: { fromSnapshot?: boolean }): Promise<void>;
  /** Kills the server and removes its folder. */
  stop(): Promise<void>;
}

const INSTALL_HINT = 'install Redis 7 or later so that redis-server is on the PATH (apt-get install redis-server, brew install redis, or the redis:7 image)';

/** Starts a `redis-server` of its own and resolves once it answers `PING`. */
export async function startRedisServer(options: RedisServerOptions = {}): Promise<RedisServer> {
  const port = options.clusterBus === true ? await freePortWithBus() : await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-redis-'));
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no', ...(options.args ?? [])];
  const startTimeoutMs = options.startTimeoutMs ?? 15_000;
  let child: ChildProcess | undefined;
  let output = '';

  const launch = async (): Promise<void> => {
    output = '';
    const started = spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    const keep = (chunk: Buffer): void => {
      output = (output + chunk.toString()).slice(-4000);
    };
    started.stdout?.on('data', keep);
    started.stderr?.on('data', keep);
    const failed = new Promise<never>((_, reject) => {
      started.once('error', (error) => reject(new Error(`redis-server could not be started: ${error.message}; ${INSTALL_HINT}`, { cause: error })));
    });
    failed.catch(() => undefined);
    child = started;
    await Promise.race([waitForPing(port, started, () => output, startTimeoutMs), failed]);
  };

  const kill = async (): Promise<void> => {
    const running = child;
    child = undefined;
    if (running === undefined || running.exitCode !== null || running.signalCode !== null || running.pid === undefined) return;
    const exited = new Promise((resolve) => running.once('exit', resolve));
    running.kill('SIGKILL');
    await exited;
  };

  const stop = async (): Promise<void> => {
    await kill();
    rmSync(dir, { recursive: true, force: true });
  };

  try {
    await launch();
  } catch (error) {
    await stop();
    throw error;
  }
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    dir,
    async restart({ fromSnapshot = true } = {}) {
      await kill();
      if (!fromSnapshot) rmSync(join(dir, 'dump.rdb'), { force: true });
      await launch();
    },
    stop,
    [Symbol.asyncDispose]: stop,
  };
}

/** A free port whose cluster bus port (port + 10000) is free too. */
async function freePortWithBus(): Promise<number> {
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = await freePort();
    if (port + 10_000 <= 65_535 && (await isFree(port + 10_000))) return port;
  }
  throw new Error('no free port whose cluster bus port (+10000) is free too was found for a redis-server');
}

async function isFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/** Whether a server on the port answers `PING` with `PONG` (in plain RESP, without a client library). */
function pings(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    let reply = '';
    const done = (answer: boolean): void => {
      socket.destroy();
      resolve(answer);
    };
    socket.setTimeout(1_000, () => done(false));
    socket.once('error', () => done(false));
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.on('data', (chunk: Buffer) => {
      reply += chunk.toString();
      if (reply.includes('\r\n')) done(reply.startsWith('+PONG'));
    });
  });
}

async function waitForPing(port: number, child: ChildProcess, output: () => string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`redis-server on port ${port} exited with code ${child.exitCode}: ${output()}`);
    if (await pings(port)) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`redis-server on port ${port} did not answer PING within ${timeoutMs} ms: ${output()}`);
}
