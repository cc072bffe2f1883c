/**
 * The change feed over LISTEN/NOTIFY. LISTEN is the one piece of session state the adapter keeps: it needs
 * one connection held for as long as anyone listens, so it takes a dedicated client from a pool (a direct
 * or session-mode connection when the main pool goes through PgBouncer in transaction mode), reconnects
 * when that connection drops, and gives it back when the last subscription closes.
 *
 * A lease table has a table channel, which carries every change but the handovers that name their owner,
 * and 256 owner channels, which carry those, each on the bucket of its group and owner (owner-buckets.ts).
 * A subscription addressed to some owners needs the table channel and their buckets; one without an
 * address needs every channel. The connection LISTENs on the channels some open subscription needs,
 * counted per channel, so that closing one subscription never silences another.
 */
import type { LeaseChange, LeaseChangeKind } from '@leasehold/core';
import type { Notification, Pool, PoolClient } from 'pg';
import { ownerBucket } from './owner-buckets.js';
import { listenStatements, UNLISTEN_ALL, type TableNames } from './schema.js';

const KINDS: ReadonlySet<string> = new Set<LeaseChangeKind>(['released', 'handed-off', 'created', 'rewind']);
const FIRST_RETRY_MS = 100;
const MAX_RETRY_MS = 5000;

/**
 * Parses a NOTIFY payload, `{"group", "leaseKey", "kind", "owner"}`, into a change, or `undefined` if it is
 * not one of ours. `owner` (the owner the write set, `null` for none) is absent from the payloads of
 * earlier releases, whose parsers ignore it: the change's owner is then unknown. Other fields are ignored
 * too, so a later release may add some.
 */
export function parseChange(payload: string | undefined): LeaseChange | undefined {
  if (payload === undefined) return undefined;
  try {
    const value = JSON.parse(payload) as { group?: unknown; leaseKey?: unknown; kind?: unknown; owner?: unknown };
    if (typeof value.group !== 'string' || typeof value.leaseKey !== 'string' || typeof value.kind !== 'string') return undefined;
    if (!KINDS.has(value.kind)) return undefined;
    const change = { group: value.group, leaseKey: value.leaseKey, kind: value.kind as LeaseChangeKind };
    return typeof value.owner === 'string' || value.owner === null ? { ...change, owner: value.owner } : change;
  } catch {
    return undefined;
  }
}

/** Stops listening so that the connection goes back to the pool clean; destroys it if that fails. */
async function unlistenAndRelease(client: PoolClient, release: (error?: unknown) => void): Promise<void> {
  try {
    await client.query(UNLISTEN_ALL);
    release();
  } catch (error) {
    release(error ?? true);
  }
}

/** A subscription: its listener, the owners whose handovers it asked for (`null`: every change), and the channels it needs. */
interface Subscriber {
  readonly hear: (change: LeaseChange) => void;
  readonly addressed: ReadonlySet<string> | null;
  readonly channels: readonly string[];
}

/** One LISTEN connection shared by every subscription of one storage, dispatching by group and owner. */
export class ChangeFeed {
  readonly #pool: Pool;
  readonly #channel: string;
  readonly #ownerChannels: readonly string[];
  readonly #ours: ReadonlySet<string>;
  readonly #subscribers = new Map<string, Set<Subscriber>>();
  /** How many open subscriptions need each channel; the connection should LISTEN on exactly these. */
  readonly #uses = new Map<string, number>();
  /** The channels the connection LISTENs on, as its last statement that succeeded left them. */
  #listened = new Set<string>();
  #client: PoolClient | null = null;
  #release: ((error?: unknown) => void) | null = null;
  /** Every change of the connection and its channels, one after another (see `#sync`). */
  #queue: Promise<void> = Promise.resolve();
  #retryTimer: NodeJS.Timeout | null = null;
  #retryMs = FIRST_RETRY_MS;

  constructor(pool: Pool, names: Pick<TableNames, 'channel' | 'ownerChannels'>) {
    this.#pool = pool;
    this.#channel = names.channel;
    this.#ownerChannels = names.ownerChannels;
    this.#ours = new Set([names.channel, ...names.ownerChannels]);
  }

  /** Whether a connection is currently listening (for tests and health checks). */
  get listening(): boolean {
    return this.#client !== null;
  }

  /**
   * Adds a listener for a group, of the handovers to `addressedTo` only when it names some, and resolves
   * once the connection LISTENs on every channel it needs; returns its remover.
   */
  async add(group: string, listener: (change: LeaseChange) => void, addressedTo: readonly string[]): Promise<() => Promise<void>> {
    const addressed = addressedTo.length > 0 ? new Set(addressedTo) : null;
    const owners = addressed === null ? this.#ownerChannels : [...new Set([...addressed].map((owner) => this.#ownerChannels[ownerBucket(group, owner)] as string))];
    const subscriber: Subscriber = { hear: listener, addressed, channels: [this.#channel, ...owners] };
    let set = this.#subscribers.get(group);
    if (!set) {
      set = new Set();
      this.#subscribers.set(group, set);
    }
    set.add(subscriber);
    for (const channel of subscriber.channels) this.#uses.set(channel, (this.#uses.get(channel) ?? 0) + 1);
    const remove = async (): Promise<void> => {
      const current = this.#subscribers.get(group);
      // Gone already when `close()` dropped everyone.
      if (!current?.delete(subscriber)) return;
      if (current.size === 0) this.#subscribers.delete(group);
      for (const channel of subscriber.channels) {
        const uses = (this.#uses.get(channel) ?? 0) - 1;
        if (uses > 0) this.#uses.set(channel, uses);
        else this.#uses.delete(channel);
      }
      // A failed UNLISTEN dropped the connection, and the reconnect LISTENs on what is still needed; the
      // subscription is closed either way.
      await this.#sync().catch(() => undefined);
    };
    try {
      await this.#sync();
    } catch (error) {
      await remove();
      throw error;
    }
    return remove;
  }

  /** Drops every listener and releases the connection. */
  async close(): Promise<void> {
    this.#subscribers.clear();
    this.#uses.clear();
    await this.#sync().catch(() => undefined);
  }

  /**
   * Brings the connection in line with the channels needed now, after every change asked for before: one
   * at a time, so that what `#listened` records is what the server did. A subscription added meanwhile is
   * seen by the first of them to run; the later ones find nothing left to do.
   */
  #sync(): Promise<void> {
    const run = this.#queue.then(() => this.#reconcile());
    this.#queue = run.catch(() => undefined);
    return run;
  }

  async #reconcile(): Promise<void> {
    if (this.#uses.size === 0) {
      await this.#stop();
      return;
    }
    const client = this.#client ?? (await this.#connect());
    const listen = [...this.#uses.keys()].filter((channel) => !this.#listened.has(channel));
    const unlisten = [...this.#listened].filter((channel) => !this.#uses.has(channel));
    if (listen.length === 0 && unlisten.length === 0) return;
    try {
      await client.query(listenStatements(listen, unlisten));
    } catch (error) {
      // The connection's channels are no longer known: start again on a new one.
      this.#dropped(client, error instanceof Error ? error : new Error(String(error)));
      throw error;
    }
    for (const channel of listen) this.#listened.add(channel);
    for (const channel of unlisten) this.#listened.delete(channel);
    this.#retryMs = FIRST_RETRY_MS;
  }

  async #connect(): Promise<PoolClient> {
    // A failure is thrown to the caller: a new subscription fails with it, and the reconnect timer of the
    // open ones (set when their connection dropped) tries again later.
    const client = await this.#pool.connect();
    const onError = (error: Error): void => this.#dropped(client, error);
    const onEnd = (): void => this.#dropped(client, new Error('the change feed connection ended'));
    const onNotification = (message: Notification): void => {
      if (this.#ours.has(message.channel)) this.#dispatch(parseChange(message.payload));
    };
    client.on('error', onError);
    client.on('end', onEnd);
    client.on('notification', onNotification);
    // Released with an error, the client is destroyed; the pool's own error listener takes over either way,
    // and until then ours stays, since an unheard 'error' event would crash the process.
    const release = (error?: unknown): void => {
      client.removeListener('notification', onNotification);
      client.removeListener('end', onEnd);
      client.release(error === undefined ? undefined : error instanceof Error ? error : true);
      client.removeListener('error', onError);
    };
    this.#client = client;
    this.#release = release;
    this.#listened = new Set();
    return client;
  }

  #dropped(client: PoolClient, error: Error): void {
    if (this.#client !== client) return;
    const release = this.#release;
    this.#client = null;
    this.#release = null;
    this.#listened = new Set();
    release?.(error);
    this.#scheduleReconnect();
  }

  /** Connects again after a drop, LISTENing on every channel the open subscriptions need, with backoff. */
  #scheduleReconnect(): void {
    if (this.#uses.size === 0 || this.#retryTimer) return;
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = null;
      if (this.#uses.size === 0) return;
      this.#sync().catch(() => {
        this.#retryMs = Math.min(this.#retryMs * 2, MAX_RETRY_MS);
        this.#scheduleReconnect();
      });
    }, this.#retryMs);
    this.#retryTimer.unref();
  }

  async #stop(): Promise<void> {
    if (this.#retryTimer) clearTimeout(this.#retryTimer);
    this.#retryTimer = null;
    const client = this.#client;
    const release = this.#release;
    if (!client || !release) return;
    this.#client = null;
    this.#release = null;
    this.#listened = new Set();
    await unlistenAndRelease(client, release);
  }

  /**
   * Hands a change to the subscriptions of its group that asked for it: a handover that names an owner
   * reaches those addressed to that owner and those without an address; anything else reaches all. The
   * owner is read from the payload, not the channel: an owner channel also carries its bucket-mates'
   * handovers, and a writer of an earlier release publishes every handover on the table channel.
   */
  #dispatch(change: LeaseChange | undefined): void {
    if (!change) return;
    const owner = change.kind === 'handed-off' ? change.owner : undefined;
    for (const { hear, addressed } of this.#subscribers.get(change.group) ?? []) {
      if (addressed !== null && typeof owner === 'string' && !addressed.has(owner)) continue;
      queueMicrotask(() => {
        try {
          hear(change);
        } catch {
          // The feed is best effort; the listener owns its errors.
        }
      });
    }
  }
}
