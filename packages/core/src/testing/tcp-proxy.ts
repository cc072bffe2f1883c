/**
 * The conformance suite's fault hook for networked adapters: a TCP proxy in front of the backend that the
 * suite can cut at the worst moment, after a request reached the backend and before its response reached
 * the client. An adapter author writes no code for it; the target only builds a client that connects
 * through the proxy's port instead of the backend's.
 */
import { once } from 'node:events';
import { createConnection, createServer, type AddressInfo, type Server, type Socket } from 'node:net';

/** Where a backend listens. */
export interface TcpAddress {
  readonly host: string;
  readonly port: number;
}

interface Connection {
  readonly client: Socket;
  readonly upstream: Socket;
  /** Whether the client sent bytes since the cut was armed: only its answers can trigger the cut. */
  requested: boolean;
}

interface ArmedCut {
  /** Bytes of answers let through before the cut; 0 cuts before the first byte of an answer. */
  readonly afterBytes: number;
  passed: number;
  readonly done: () => void;
}

/**
 * A TCP proxy on a free port of 127.0.0.1, forwarding to a backend. It passes bytes both ways until
 * {@link TcpProxy.cutOnResponse} arms a cut: then, once the backend answers a request sent after the
 * arming, it lets through at most `afterBytes` of the answer and destroys every open connection, so the
 * client hears a reset connection while the backend has done the work. New connections pass again.
 */
export class TcpProxy {
  readonly #server: Server;
  readonly #connections = new Set<Connection>();
  #armed: ArmedCut | undefined;
  /** Between the last bytes let through and the cut itself: every other answer is held back. */
  #cutting = false;
  #cuts = 0;
  #answeredBytes = 0;

  private constructor(
    server: Server,
    /** The backend the proxy forwards to. */
    readonly upstream: TcpAddress,
  ) {
    this.#server = server;
  }

  /** Starts a proxy to `upstream` on a free port of 127.0.0.1. */
  static async start(upstream: TcpAddress): Promise<TcpProxy> {
    const server = createServer();
    const proxy = new TcpProxy(server, upstream);
    server.on('connection', (client) => proxy.#accept(client));
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    return proxy;
  }

  /** The address clients connect to instead of the backend's. */
  get address(): TcpAddress {
    return { host: '127.0.0.1', port: (this.#server.address() as AddressInfo).port };
  }

  /** How many cuts have happened. */
  get cuts(): number {
    return this.#cuts;
  }

  /** How many bytes the backend has sent to clients through the proxy. */
  get answeredBytes(): number {
    return this.#answeredBytes;
  }

  /** How many connections are open through the proxy. */
  get openConnections(): number {
    return this.#connections.size;
  }

  /**
   * Arms a cut: the next time the backend answers a request sent from now on, every connection is
   * destroyed after `afterBytes` bytes of answers (default 0: none of the answer arrives). Resolves once
   * the cut has happened.
   */
  cutOnResponse(options: { afterBytes?: number } = {}): Promise<void> {
    for (const connection of this.#connections) connection.requested = false;
    return new Promise((resolve) => {
      this.#armed = { afterBytes: options.afterBytes ?? 0, passed: 0, done: resolve };
    });
  }

  /** Disarms a cut that has not happened. */
  disarm(): void {
    this.#armed = undefined;
  }

  /** Destroys every open connection now. */
  cutNow(): void {
    this.#cuts++;
    for (const connection of [...this.#connections]) this.#end(connection);
  }

  /** Stops listening and destroys every connection. */
  async close(): Promise<void> {
    this.#armed = undefined;
    for (const connection of [...this.#connections]) this.#end(connection);
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #accept(client: Socket): void {
    const upstream = createConnection({ host: this.upstream.host, port: this.upstream.port });
    const connection: Connection = { client, upstream, requested: false };
    this.#connections.add(connection);
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    client.on('data', (chunk: Buffer) => {
      if (this.#armed) connection.requested = true;
      upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => this.#answer(connection, chunk));
    const end = (): void => this.#end(connection);
    for (const socket of [client, upstream]) {
      socket.on('error', end);
      socket.on('close', end);
    }
  }

  #answer(connection: Connection, chunk: Buffer): void {
    if (this.#cutting) return;
    const armed = this.#armed;
    if (!armed || !connection.requested) {
      this.#answeredBytes += chunk.length;
      connection.client.write(chunk);
      return;
    }
    const room = armed.afterBytes - armed.passed;
    if (room > chunk.length) {
      armed.passed += chunk.length;
      this.#answeredBytes += chunk.length;
      connection.client.write(chunk);
      return;
    }
    this.#armed = undefined;
    this.#cutting = true;
    const last = chunk.subarray(0, room);
    this.#answeredBytes += last.length;
    const cut = (): void => {
      this.#cutting = false;
      this.cutNow();
      armed.done();
    };
    // What fits is written first, so that the client really holds a partial answer when the cut lands.
    if (last.length > 0) connection.client.write(last, cut);
    else cut();
  }

  #end(connection: Connection): void {
    if (!this.#connections.delete(connection)) return;
    connection.client.destroy();
    connection.upstream.destroy();
  }
}
