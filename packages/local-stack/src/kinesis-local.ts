/**
 * kinesis-local (the npm build of kinesis-mock), a Kinesis emulator, started as a child process on free
 * ports of 127.0.0.1, for tests, the demo and benchmarks. Its data lives in memory and dies with it.
 *
 * Things worth knowing about the emulator: PutRecords slows down as a shard fills, so create a fresh
 * stream per test; SubscribeToShard works over HTTP/1.1 only and never signals the end of a shard; a
 * process that served SubscribeToShard may ignore SIGTERM, so `close()` falls back to SIGKILL.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import type { Socket } from 'node:net';
import { dirname, join } from 'node:path';
import { freePort } from './ports.js';

/** Options of {@link startKinesisLocal}. */
export interface KinesisLocalOptions {
  /** The plain HTTP port. Default 0: a free port. */
  port?: number;
  /** The TLS port, which the emulator always opens. Default 0: a free port. */
  tlsPort?: number;
  /** The region the emulator answers for by default. Default `us-east-1`. */
  region?: string;
  /** How long `CreateStream`, `SplitShard`, `MergeShards` and consumer registration take. Default 100 ms (the emulator's own default is 500). */
  operationDurationMs?: number;
  /** More environment variables for the emulator (see kinesis-mock's README), such as `SHARD_LIMIT`. */
  env?: Readonly<Record<string, string>>;
  /** How long to wait for the emulator to answer. Default 60,000 ms. */
  startTimeoutMs?: number;
  /** How long `close()` waits after SIGTERM before it sends SIGKILL. Default 1,000 ms. */
  stopTimeoutMs?: number;
}

/** A running kinesis-local; close it (or `await using` it) to stop it. */
export interface RunningKinesisLocal extends AsyncDisposable {
  /** The plain HTTP endpoint to give a `KinesisClient` (with a `NodeHttpHandler`), such as `http://127.0.0.1:49152`. */
  readonly endpoint: string;
  /** The plain HTTP port. */
  readonly port: number;
  /** The TLS port (self-signed certificate). */
  readonly tlsPort: number;
  /** The region the emulator answers for. */
  readonly region: string;
  /** Dummy credentials the emulator accepts. */
  readonly credentials: { readonly accessKeyId: string; readonly secretAccessKey: string };
  /** The process id of the emulator. */
  readonly pid: number;
  /** Stops the emulator: SIGTERM, then SIGKILL if it has not exited within `stopTimeoutMs`. */
  close(): Promise<void>;
}

const require = createRequire(import.meta.url);

// The child runs the emulator behind a tiny watchdog: when the parent dies, even by SIGKILL, the child's
// stdin reaches its end and the child exits, so no emulator outlives the process that started it.
const WATCHDOG = [
  "process.stdin.on('end', () => process.exit(0));",
  "process.stdin.on('error', () => process.exit(0));",
  'process.stdin.resume();',
  'require(process.argv[1]);',
].join(' ');

const running = new Set<ChildProcess>();
let exitHookInstalled = false;

/** Starts kinesis-local as a child process and resolves once it answers on its plain HTTP port. */
export async function startKinesisLocal(options: KinesisLocalOptions = {}): Promise<RunningKinesisLocal> {
  checkPort('port', options.port);
  checkPort('tlsPort', options.tlsPort);
  const attempts = options.port === undefined || options.port === 0 ? 3 : 1;
  let lastError: unknown;
  for (let attempt = 0; attempt < attempts; attempt++) {
    try {
      return await startOnce(options);
    } catch (error) {
      // A free port found a moment ago can be taken by another process before the emulator binds it.
      lastError = error;
    }
  }
  throw lastError;
}

async function startOnce(options: KinesisLocalOptions): Promise<RunningKinesisLocal> {
  const port = options.port || (await freePort());
  let tlsPort = options.tlsPort || (await freePort());
  while (tlsPort === port) tlsPort = await freePort();
  const region = options.region ?? 'us-east-1';
  const duration = `${Math.max(0, Math.trunc(options.operationDurationMs ?? 100))}ms`;
  const packageDir = dirname(require.resolve('kinesis-local/package.json'));

  const child = spawn(process.execPath, ['-e', WATCHDOG, join(packageDir, 'main.js')], {
    cwd: packageDir,
    env: {
      ...process.env,
      KINESIS_MOCK_PLAIN_PORT: String(port),
      KINESIS_MOCK_TLS_PORT: String(tlsPort),
      AWS_REGION: region,
      CREATE_STREAM_DURATION: duration,
      DELETE_STREAM_DURATION: duration,
      REGISTER_STREAM_CONSUMER_DURATION: duration,
      DEREGISTER_STREAM_CONSUMER_DURATION: duration,
      MERGE_SHARDS_DURATION: duration,
      SPLIT_SHARD_DURATION: duration,
      UPDATE_SHARD_COUNT_DURATION: duration,
      LOG_LEVEL: 'WARN',
      ...options.env,
    },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  track(child);

  let output = '';
  const collect = (chunk: Buffer): void => {
    output = (output + chunk.toString('utf8')).slice(-4_000);
  };
  child.stdout?.on('data', collect);
  child.stderr?.on('data', collect);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  let hasExited = false;
  void exited.then(() => {
    hasExited = true;
    running.delete(child);
  });

  const endpoint = `http://127.0.0.1:${port}`;
  const stopTimeoutMs = options.stopTimeoutMs ?? 1_000;
  const stop = async (): Promise<void> => {
    if (hasExited) return;
    // Referenced again, so that this process stays alive until the child's exit is seen.
    child.ref();
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), stopTimeoutMs);
    await exited;
    clearTimeout(timer);
  };

  try {
    await waitUntilAnswering(endpoint, options.startTimeoutMs ?? 60_000, () => hasExited);
  } catch (error) {
    await stop();
    throw new Error(
      `[local-stack] kinesis-local did not start on port ${port}: ${(error as Error).message}${output ? `\n${output}` : ''}`,
      { cause: error },
    );
  }

  // Once running, the emulator must not keep this process alive on its own.
  child.unref();
  for (const stream of [child.stdin, child.stdout, child.stderr]) (stream as unknown as Socket | null)?.unref();

  return {
    endpoint,
    port,
    tlsPort,
    region,
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
    pid: child.pid ?? -1,
    close: stop,
    [Symbol.asyncDispose]: stop,
  };
}

function track(child: ChildProcess): void {
  running.add(child);
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // 'exit' handlers must be synchronous: a SIGKILL is the only thing that surely ends the child in time.
  process.once('exit', () => {
    for (const each of running) each.kill('SIGKILL');
  });
}

async function waitUntilAnswering(endpoint: string, timeoutMs: number, hasExited: () => boolean): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (hasExited()) throw new Error('the process exited');
    try {
      const response = await fetch(`${endpoint}/healthcheck`, { signal: AbortSignal.timeout(2_000) });
      await response.body?.cancel();
      if (response.ok) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`no answer within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}


function checkPort(name: string, port: number | undefined): void {
  if (port === undefined) return;
  if (!Number.isInteger(port) || port < 0 || port > 65_535) {
    throw new RangeError(`[local-stack] kinesis-local ${name} must be an integer from 0 to 65535, got ${String(port)}`);
  }
}
