/**
 * The dashboard's server: one poll loop reads the group every `intervalMs` and sends each snapshot (and
 * the timeline of changes since the server started) to every open page over server-sent events. The
 * group is read once per interval however many pages are open. `node:http` only.
 *
 * Access: bound to a loopback address it answers requests naming a loopback host (a page of another
 * site cannot reach it through DNS rebinding); bound elsewhere it refuses to start without a token. With
 * a token every request carries it: `?token=` once (then a cookie), the `x-leasehold-token` header, or
 * the cookie. Actions are off unless asked for, need the token and a same-origin POST, and a write needs
 * `"confirm": true` in its body.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { InvalidConfigError, InvalidInputError, type Storage } from '@leasehold/core';
import { describeValue } from '@leasehold/core/adapter';
import { PKG } from '../pkg.js';
import type { Now } from '../observe.js';
import { runAction, type ActionResult } from './actions.js';
import { PAGE } from './page.js';
import { GroupWatch, type Snapshot } from './snapshot.js';
import { changesBetween, type TimelineEvent } from './timeline.js';

/** Options of {@link startDashboard}. */
export interface DashboardOptions {
  /** The one storage reader every page shares. */
  readonly storage: Storage;
  /** The storage URL with its password hidden: the only form of it the page and the JSON show. */
  readonly display: string;
  readonly group: string;
  /** How often the group is read, in milliseconds. */
  readonly intervalMs: number;
  /** A held shard whose checkpoint stood this long while others moved is shown stalled. */
  readonly stallMs: number;
  /** Default `127.0.0.1`. */
  readonly host?: string;
  /** Default 0: a free port. */
  readonly port?: number;
  /** Needed by every request when given; needed to start on a host other than loopback. */
  readonly token?: string;
  /**
   * Where actions go (the storage URL the commands open); without it the dashboard is read-only. A
   * dashboard with actions and no token makes one up: its URL carries it.
   */
  readonly actions?: { readonly storageUrl: string; readonly rewindTimeoutMs?: number };
  /** How many timeline events are kept (the oldest go first). Default 500. */
  readonly timelineLimit?: number;
  readonly now?: Now;
}

/** A running dashboard. */
export interface RunningDashboard extends AsyncDisposable {
  /** The page's URL, with `?token=` when a token is needed. */
  readonly url: string;
  readonly port: number;
  /** The token every request needs, or `undefined` when none is needed. */
  readonly token: string | undefined;
  /** Resolves once the first read of the group answered (or failed). */
  readonly ready: Promise<void>;
  close(): Promise<void>;
}

const LOOPBACK_HOSTS = new Set(['127.0.0.1', '::1', 'localhost', '[::1]']);
const COOKIE = 'leasehold_dashboard_token';
const MAX_BODY_BYTES = 64 * 1024;

/** The smallest and largest poll interval: faster reads load the group's storage, slower ones show a stale page. */
export const INTERVAL_LIMITS = { minMs: 100, maxMs: 60_000 } as const;

/** Throws an `InvalidConfigError` naming the value unless `intervalMs` is a whole number within {@link INTERVAL_LIMITS}. */
export function checkIntervalMs(intervalMs: number): void {
  if (!Number.isSafeInteger(intervalMs) || intervalMs < INTERVAL_LIMITS.minMs || intervalMs > INTERVAL_LIMITS.maxMs) {
    throw new InvalidConfigError(
      `[${PKG}] --interval-ms must be a whole number from ${INTERVAL_LIMITS.minMs} to ${INTERVAL_LIMITS.maxMs}, got ${describeValue(intervalMs)}`,
    );
  }
}

/** Whether a host to bind to is a loopback address, reachable only from this machine. */
export function isLoopback(host: string): boolean {
  return LOOPBACK_HOSTS.has(host);
}

/**
 * Throws an `InvalidConfigError` naming the bad value for options the dashboard cannot start with: an
 * interval out of range, a stall threshold below 1 ms, a token shorter than 8 characters, or a host
 * other than loopback without a token.
 */
export function checkDashboardOptions(options: Pick<DashboardOptions, 'intervalMs' | 'stallMs' | 'host' | 'token'>): void {
  checkIntervalMs(options.intervalMs);
  if (!Number.isSafeInteger(options.stallMs) || options.stallMs < 1) {
    throw new InvalidConfigError(`[${PKG}] --stall-ms must be a whole number of at least 1, got ${describeValue(options.stallMs)}`);
  }
  const host = options.host ?? '127.0.0.1';
  if (options.token !== undefined && options.token.length < 8) {
    throw new InvalidConfigError(`[${PKG}] --token must be at least 8 characters long, got ${options.token.length}`);
  }
  if (!isLoopback(host) && options.token === undefined) {
    throw new InvalidConfigError(
      `[${PKG}] --host ${describeValue(host)} is reachable from other machines: the dashboard shows the group's records there only with --token`,
    );
  }
}

/** Starts the dashboard's server and its poll loop; refuses a host other than loopback without a token. */
export async function startDashboard(options: DashboardOptions): Promise<RunningDashboard> {
  checkDashboardOptions(options);
  const host = options.host ?? '127.0.0.1';
  const token = options.token ?? (options.actions !== undefined ? randomBytes(18).toString('base64url') : undefined);
  const stop = new AbortController();
  const feed = new Feed(options);
  const server = createServer((request, response) => {
    handle(request, response, { options, token, host, feed, signal: stop.signal }).catch((error: unknown) => {
      if (!response.headersSent) send(response, 500, { error: error instanceof Error ? error.message : String(error) });
      else response.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const ready = feed.start(stop.signal);
  const { port } = server.address() as AddressInfo;
  const shown = host.includes(':') ? `[${host}]` : host;
  const url = `http://${shown}:${port}/${token === undefined ? '' : `?token=${encodeURIComponent(token)}`}`;
  let closing: Promise<void> | undefined;
  const close = (): Promise<void> => {
    closing ??= (async () => {
      stop.abort();
      feed.end();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await feed.stopped;
    })();
    return closing;
  };
  return { url, port, token, ready, close, [Symbol.asyncDispose]: close };
}

/** The poll loop, the latest snapshot, the timeline, and the open event streams it writes to. */
class Feed {
  readonly #options: DashboardOptions;
  readonly #watch: GroupWatch;
  readonly #clients = new Set<ServerResponse>();
  readonly #timeline: TimelineEvent[] = [];
  #latest: Snapshot | undefined;
  #error: string | undefined;
  stopped: Promise<void> = Promise.resolve();

  constructor(options: DashboardOptions) {
    this.#options = options;
    this.#watch = new GroupWatch({ group: options.group, display: options.display, stallMs: options.stallMs, ...(options.now ? { now: options.now } : {}) });
  }

  /** Starts reading; resolves once the first read answered. */
  start(signal: AbortSignal): Promise<void> {
    let first!: () => void;
    const ready = new Promise<void>((resolve) => (first = resolve));
    this.stopped = (async () => {
      while (!signal.aborted) {
        await this.#poll();
        first();
        await sleep(this.#options.intervalMs, signal);
      }
      first();
    })();
    return ready;
  }

  async #poll(): Promise<void> {
    let added: TimelineEvent[] = [];
    try {
      const snapshot = await this.#watch.read(this.#options.storage);
      added = this.#latest === undefined ? [] : changesBetween(this.#latest, snapshot);
      this.#timeline.push(...added);
      const limit = this.#options.timelineLimit ?? 500;
      if (this.#timeline.length > limit) this.#timeline.splice(0, this.#timeline.length - limit);
      this.#latest = snapshot;
      this.#error = undefined;
    } catch (error) {
      // The page keeps the last snapshot and says the storage did not answer; the loop goes on.
      this.#error = error instanceof Error ? error.message : String(error);
    }
    // Open pages have the timeline up to the last read: each read sends them only the events it added.
    const { timeline: _whole, ...rest } = this.state();
    const message = `event: state\ndata: ${JSON.stringify({ ...rest, added })}\n\n`;
    for (const client of this.#clients) client.write(message);
  }

  /** The state every page gets: the latest snapshot, the timeline, and the last read's error. */
  state(): { snapshot: Snapshot | null; timeline: TimelineEvent[]; error: string | null; actions: boolean; intervalMs: number } {
    return { snapshot: this.#latest ?? null, timeline: this.#timeline, error: this.#error ?? null, actions: this.#options.actions !== undefined, intervalMs: this.#options.intervalMs };
  }

  /** The first message of a page that opens: the whole state, the timeline so far included. */
  message(): string {
    return `event: state\ndata: ${JSON.stringify(this.state())}\n\n`;
  }

  subscribe(response: ServerResponse): void {
    this.#clients.add(response);
    response.on('close', () => this.#clients.delete(response));
  }

  end(): void {
    for (const client of this.#clients) client.end();
    this.#clients.clear();
  }
}

interface Context {
  readonly options: DashboardOptions;
  readonly token: string | undefined;
  readonly host: string;
  readonly feed: Feed;
  readonly signal: AbortSignal;
}

async function handle(request: IncomingMessage, response: ServerResponse, context: Context): Promise<void> {
  const url = new URL(request.url ?? '/', 'http://dashboard');
  response.setHeader('x-content-type-options', 'nosniff');
  response.setHeader('referrer-policy', 'no-referrer');
  if (isLoopback(context.host) && !loopbackHostHeader(request.headers.host)) {
    send(response, 403, { error: `the dashboard answers only requests for a loopback host, got Host ${describeValue(request.headers.host)}` });
    return;
  }
  const given = tokenOf(request, url);
  if (context.token !== undefined && !sameToken(given, context.token)) {
    send(response, 401, { error: 'this dashboard needs its token: open the URL it printed (with ?token=), or send the x-leasehold-token header' });
    return;
  }
  if (context.token !== undefined && url.searchParams.has('token') && request.method === 'GET') {
    // The token moves to a cookie, and out of the address bar and the history.
    response.setHeader('set-cookie', `${COOKIE}=${encodeURIComponent(context.token)}; HttpOnly; SameSite=Strict; Path=/`);
    url.searchParams.delete('token');
    response.writeHead(303, { location: `${url.pathname}${url.search}` }).end();
    return;
  }
  const route = `${request.method ?? 'GET'} ${url.pathname}`;
  switch (route) {
    case 'GET /':
      response.writeHead(200, {
        'content-type': 'text/html; charset=utf-8',
        'cache-control': 'no-store',
        'content-security-policy': "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; form-action 'none'; frame-ancestors 'none'",
      });
      response.end(PAGE);
      return;
    case 'GET /events':
      response.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive' });
      response.write(`retry: 2000\n\n${context.feed.message()}`);
      context.feed.subscribe(response);
      return;
    case 'GET /api/state':
      send(response, 200, context.feed.state());
      return;
    case 'POST /api/actions':
      await postAction(request, response, context);
      return;
    default:
      send(response, 404, { error: `no such page: ${request.method ?? 'GET'} ${url.pathname}` });
  }
}

async function postAction(request: IncomingMessage, response: ServerResponse, context: Context): Promise<void> {
  const actions = context.options.actions;
  if (actions === undefined) {
    send(response, 403, { error: 'this dashboard is read-only: start it with --allow-actions to act on the group' });
    return;
  }
  const origin = request.headers.origin;
  if (origin === undefined || origin !== `http://${request.headers.host ?? ''}`) {
    send(response, 403, { error: `actions are accepted only from the dashboard's own page, got Origin ${describeValue(origin)}` });
    return;
  }
  if (!(request.headers['content-type'] ?? '').startsWith('application/json')) {
    send(response, 415, { error: `an action is posted as application/json, got ${describeValue(request.headers['content-type'])}` });
    return;
  }
  let result: ActionResult;
  try {
    const body = JSON.parse(await readBody(request)) as unknown;
    result = await runAction(body, { storageUrl: actions.storageUrl, group: context.options.group, rewindTimeoutMs: actions.rewindTimeoutMs ?? 60_000, signal: context.signal });
  } catch (error) {
    if (error instanceof InvalidInputError || error instanceof SyntaxError) {
      send(response, 400, { error: error.message });
      return;
    }
    throw error;
  }
  send(response, 200, result);
}

function readBody(request: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    request.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        reject(new InvalidInputError(`[${PKG}] an action's body is at most ${MAX_BODY_BYTES} bytes, got more`));
        request.destroy();
        return;
      }
      chunks.push(chunk);
    });
    request.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    request.on('error', reject);
  });
}

function loopbackHostHeader(header: string | undefined): boolean {
  if (header === undefined) return false;
  const name = header.startsWith('[') ? header.slice(0, header.indexOf(']') + 1) : header.replace(/:\d+$/, '');
  return isLoopback(name);
}

function tokenOf(request: IncomingMessage, url: URL): string | undefined {
  const header = request.headers['x-leasehold-token'];
  if (typeof header === 'string') return header;
  const query = url.searchParams.get('token');
  if (query !== null) return query;
  for (const part of (request.headers.cookie ?? '').split(';')) {
    const [name, ...value] = part.trim().split('=');
    if (name === COOKIE) return decodeURIComponent(value.join('='));
  }
  return undefined;
}

function sameToken(given: string | undefined, token: string): boolean {
  if (given === undefined) return false;
  const a = Buffer.from(given);
  const b = Buffer.from(token);
  return a.length === b.length && timingSafeEqual(a, b);
}

function send(response: ServerResponse, status: number, body: unknown): void {
  response.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' }).end(JSON.stringify(body));
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}
