/**
 * A small TCP proxy in front of a backend, one per worker, so that the harness can cut one worker off
 * from its storage while it keeps running. Modes:
 * - `pass`: bytes flow both ways.
 * - `pause`: bytes are held (the connections stay open, nothing arrives) until the mode changes.
 * - `drop`: every connection is destroyed, and new ones are destroyed as they arrive.
 * - `delay`: every chunk arrives `delayMs` late, in order.
 */
import { createConnection, createServer, type AddressInfo, type Server, type Socket } from 'node:net';

export type ProxyMode = { readonly kind: 'pass' } | { readonly kind: 'pause' } | { readonly kind: 'drop' } | { readonly kind: 'delay'; readonly delayMs: number };

interface Pending {
  readonly chunk: Buffer;
  readonly due: number;
}

/** One direction of one connection: chunks wait here until the mode lets them through. */
class Pipe {
  readonly #queue: Pending[] = [];
  #timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly proxy: TcpProxy,
    private readonly to: Socket,
  ) {}

  push(chunk: Buffer): void {
    const mode = this.proxy.mode;
    this.#queue.push({ chunk, due: Date.now() + (mode.kind === 'delay' ? mode.delayMs : 0) });
    this.pump();
  }

  pump(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.proxy.mode.kind === 'pause' || this.to.destroyed) return;
    const now = Date.now();
    while (this.#queue.length > 0 && this.#queue[0]!.due <= now) this.to.write(this.#queue.shift()!.chunk);
    if (this.#queue.length > 0) this.#timer = setTimeout(() => this.pump(), this.#queue[0]!.due - now);
  }

  clear(): void {
    clearTimeout(this.#timer);
    this.#queue.length = 0;
  }
}

/** A proxy listening on a free port of 127.0.0.1 and forwarding to `target`. */
export class TcpProxy {
  #mode: ProxyMode = { kind: 'pass' };
  readonly #connections = new Set<{ client: Socket; upstream: Socket; pipes: Pipe[] }>();

  private constructor(
    private readonly server: Server,
    readonly target: { readonly host: string; readonly port: number },
  ) {}

  static async start(target: { host: string; port: number }): Promise<TcpProxy> {
    const server = createServer();
    const proxy = new TcpProxy(server, target);
    server.on('connection', (client) => proxy.#accept(client));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    return proxy;
  }

  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }

  get mode(): ProxyMode {
    return this.#mode;
  }

  /** Changes the mode: `drop` destroys every open connection, `pass` and `delay` release held bytes. */
  set(mode: ProxyMode): void {
    this.#mode = mode;
    for (const connection of this.#connections) {
      if (mode.kind === 'drop') {
        connection.client.destroy();
        connection.upstream.destroy();
      } else {
        for (const pipe of connection.pipes) pipe.pump();
      }
    }
  }

  #accept(client: Socket): void {
    if (this.#mode.kind === 'drop') {
      client.destroy();
      return;
    }
    const upstream = createConnection({ host: this.target.host, port: this.target.port });
    const pipes = [new Pipe(this, upstream), new Pipe(this, client)];
    const connection = { client, upstream, pipes };
    this.#connections.add(connection);
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    client.on('data', (chunk: Buffer) => pipes[0]!.push(chunk));
    upstream.on('data', (chunk: Buffer) => pipes[1]!.push(chunk));
    const end = (): void => {
      if (!this.#connections.delete(connection)) return;
      for (const pipe of pipes) pipe.clear();
      client.destroy();
      upstream.destroy();
    };
    for (const socket of [client, upstream]) {
      socket.on('error', end);
      socket.on('close', end);
    }
  }

  /** Stops listening and destroys every connection. */
  async close(): Promise<void> {
    this.set({ kind: 'drop' });
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
