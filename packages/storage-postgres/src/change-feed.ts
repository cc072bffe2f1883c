/**
 * The change feed over LISTEN/NOTIFY. LISTEN is the one piece of session state the adapter keeps: it needs
 * one connection held for as long as anyone listens, so it takes a dedicated client from a pool (a direct
 * or session-mode connection when the main pool goes through PgBouncer in transaction mode), reconnects
 * when that connection drops, and gives it back when the last subscription closes.
 */
import type { LeaseChange, LeaseChangeKind } from '@leasehold/core';
import type { Notification, Pool, PoolClient } from 'pg';

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
async function unlistenAndRelease(client: PoolClient, unlisten: string, release: (error?: unknown) => void): Promise<void> {
  try {
    await client.query(unlisten);
    release();
  } catch (error) {
    release(error ?? true);
  }
}

/** One LISTEN connection shared by every subscription of one storage, dispatching by group. */
export class ChangeFeed {
  readonly #pool: Pool;
  readonly #listen: string;
  readonly #unlisten: string;
  readonly #channel: string;
  readonly #listeners = new Map<string, Set<(change: LeaseChange) => void>>();
  #client: PoolClient | null = null;
  #release: ((error?: unknown) => void) | null = null;
  #starting: Promise<void> | null = null;
  #retryTimer: NodeJS.Timeout | null = null;
  #retryMs = FIRST_RETRY_MS;

  constructor(pool: Pool, channel: string, listen: string, unlisten: string) {
    this.#pool = pool;
    this.#channel = channel;
    this.#listen = listen;
    this.#unlisten = unlisten;
  }

  /** Whether a connection is currently listening (for tests and health checks). */
  get listening(): boolean {
    return this.#client !== null;
  }

  /** Adds a listener for a group and resolves once the channel is listened to; returns its remover. */
  async add(group: string, listener: (change: LeaseChange) => void): Promise<() => Promise<void>> {
    let set = this.#listeners.get(group);
    if (!set) {
      set = new Set();
      this.#listeners.set(group, set);
    }
    const own = (change: LeaseChange): void => listener(change);
    set.add(own);
    const remove = async (): Promise<void> => {
      const current = this.#listeners.get(group);
      if (!current?.delete(own)) return;
      if (current.size === 0) this.#listeners.delete(group);
      if (this.#listeners.size === 0) await this.#stop();
    };
    try {
      await this.#ensure();
    } catch (error) {
      await remove();
      throw error;
    }
    return remove;
  }

  /** Drops every listener and releases the connection. */
  async close(): Promise<void> {
    this.#listeners.clear();
    await this.#stop();
  }

  #ensure(): Promise<void> {
    if (this.#client) return Promise.resolve();
    this.#starting ??= this.#connect().finally(() => {
      this.#starting = null;
    });
    return this.#starting;
  }

  async #connect(): Promise<void> {
    const client = await this.#pool.connect();
    const onError = (error: Error): void => this.#dropped(client, error);
    const onEnd = (): void => this.#dropped(client, new Error('the change feed connection ended'));
    const onNotification = (message: Notification): void => {
      if (message.channel === this.#channel) this.#dispatch(parseChange(message.payload));
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
    try {
      await client.query(this.#listen);
    } catch (error) {
      release(error);
      throw error;
    }
    // Everyone may have left while the connection was being made.
    if (this.#listeners.size === 0) {
      await unlistenAndRelease(client, this.#unlisten, release);
      return;
    }
    this.#client = client;
    this.#release = release;
    this.#retryMs = FIRST_RETRY_MS;
  }

  #dropped(client: PoolClient, error: Error): void {
    if (this.#client !== client) return;
    const release = this.#release;
    this.#client = null;
    this.#release = null;
    release?.(error);
    this.#scheduleReconnect();
  }

  #scheduleReconnect(): void {
    if (this.#listeners.size === 0 || this.#retryTimer) return;
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = null;
      if (this.#listeners.size === 0) return;
      this.#ensure().catch(() => {
        this.#retryMs = Math.min(this.#retryMs * 2, MAX_RETRY_MS);
        this.#scheduleReconnect();
      });
    }, this.#retryMs);
    this.#retryTimer.unref();
  }

  async #stop(): Promise<void> {
    if (this.#retryTimer) clearTimeout(this.#retryTimer);
    this.#retryTimer = null;
    if (this.#starting) await this.#starting.catch(() => undefined);
    const client = this.#client;
    const release = this.#release;
    if (!client || !release || this.#listeners.size > 0) return;
    this.#client = null;
    this.#release = null;
    await unlistenAndRelease(client, this.#unlisten, release);
  }

  #dispatch(change: LeaseChange | undefined): void {
    if (!change) return;
    for (const listener of this.#listeners.get(change.group) ?? []) {
      queueMicrotask(() => {
        try {
          listener(change);
        } catch {
          // The feed is best effort; the listener owns its errors.
        }
      });
    }
  }
}
