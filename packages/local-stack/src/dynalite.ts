/**
 * dynalite, a DynamoDB emulator, started in this process on a free port of 127.0.0.1 and kept in memory,
 * for tests, the demo and benchmarks. Table creation, deletion and updates are instant, so a test never
 * waits for a table to become active.
 */
import { createRequire } from 'node:module';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/** The options of dynalite's factory that this launcher uses. */
interface DynaliteFactoryOptions {
  createTableMs?: number;
  deleteTableMs?: number;
  updateTableMs?: number;
  maxItemSizeKb?: number;
  verbose?: boolean;
}

// dynalite is CommonJS and ships no types: its factory returns a plain http.Server.
const dynalite = createRequire(import.meta.url)('dynalite') as (options: DynaliteFactoryOptions) => Server;

/** Options of {@link startDynalite}. */
export interface DynaliteOptions {
  /** The port to listen on. Default 0: a free port chosen by the system. */
  port?: number;
  /** The largest item dynalite accepts, in KB. Default 400, as in DynamoDB. */
  maxItemSizeKb?: number;
  /** Log every request to the console. Default false. */
  verbose?: boolean;
}

/** A running dynalite; close it (or `await using` it) to stop it and drop its data. */
export interface RunningDynalite extends AsyncDisposable {
  /** The endpoint to give a `DynamoDBClient`, such as `http://127.0.0.1:49152`. */
  readonly endpoint: string;
  /** The port it listens on. */
  readonly port: number;
  /** Stops the server, ends open connections and drops the in-memory data. */
  close(): Promise<void>;
}

/** Starts an in-memory dynalite on 127.0.0.1 with instant table operations. */
export async function startDynalite(options: DynaliteOptions = {}): Promise<RunningDynalite> {
  const requestedPort = options.port ?? 0;
  if (!Number.isInteger(requestedPort) || requestedPort < 0 || requestedPort > 65_535) {
    throw new RangeError(`[local-stack] dynalite port must be an integer from 0 to 65535, got ${String(requestedPort)}`);
  }
  const server = dynalite({
    createTableMs: 0,
    deleteTableMs: 0,
    updateTableMs: 0,
    maxItemSizeKb: options.maxItemSizeKb ?? 400,
    verbose: options.verbose ?? false,
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(requestedPort, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  // Never close an idle connection: a client that reuses one just as the server closes it (Node's default,
  // after 5 s) hears "socket hang up", and a write sent on it has an unknown outcome. A busy machine, slow
  // to read the server's FIN, widens that race. close() ends every connection itself.
  server.keepAliveTimeout = 0;
  const { port } = server.address() as AddressInfo;
  let closing: Promise<void> | undefined;
  const close = (): Promise<void> => {
    closing ??= new Promise<void>((resolve, reject) => {
      server.close((error) => (error ? reject(error) : resolve()));
      // Clients keep connections alive; without this, close() would wait for them to time out.
      server.closeAllConnections();
    });
    return closing;
  };
  return { endpoint: `http://127.0.0.1:${port}`, port, close, [Symbol.asyncDispose]: close };
}
