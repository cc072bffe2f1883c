/**
 * The conformance suite's cross-process mode: racing clients live in separate Node processes, each
 * opening its own client of the backend, so that an adapter whose atomicity comes only from one process's
 * event loop (a synchronous driver such as better-sqlite3, a lock held in memory) meets real contention.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { Storage } from '../storage.js';
import { errorFromWire, fromWire, toWire, type WireError } from './wire.js';

/**
 * How to open a client of the target's backend in a fresh process: a module and the name of its export,
 * a function called there with `options()` (JSON) that returns a new client.
 *
 * ```ts
 * // test/cross-process-client.ts
 * export async function openClient(options: { url: string }): Promise<Storage> { return new MyStorage(...); }
 * ```
 */
export interface CrossProcessClients {
  /** The module, as an absolute path or a `file:` URL. */
  readonly module: string | URL;
  /** The export that opens a client. Default `openClient`. */
  readonly exportName?: string;
  /**
   * An export called with each client when its process is done, to close it (optional: otherwise a
   * `close()` method of the client is called if it has one).
   */
  readonly closeExportName?: string;
  /** The argument of the export, computed in the suite's process when the processes start (JSON). */
  readonly options?: () => unknown;
  /** Node options of the processes, for example `['--import', 'tsx']` for a module written in TypeScript. */
  readonly execArgv?: readonly string[];
  /** How many processes share the racing clients. Default 4. */
  readonly processes?: number;
}

/** Messages from the suite to a child. */
export type ToChild =
  | { readonly type: 'open'; readonly module: string; readonly exportName: string; readonly closeExportName?: string; readonly options: string; readonly count: number }
  | { readonly type: 'call'; readonly id: number; readonly client: number; readonly method: string; readonly args: string }
  | { readonly type: 'close' };

/** Messages from a child to the suite. */
export type FromChild =
  | { readonly type: 'ready' }
  | { readonly type: 'failed'; readonly error: WireError }
  | { readonly type: 'reply'; readonly id: number; readonly value?: string; readonly error?: WireError };

/** The operations a remote client forwards (the change feed stays local to each process). */
export const REMOTE_METHODS = [
  'listLeases',
  'getLease',
  'getLeases',
  'createLease',
  'updateLeases',
  'deleteLease',
  'getLeader',
  'createLeader',
  'updateLeader',
  'getRoster',
  'putMember',
  'removeMember',
  'getMembers',
  'getRosterDigest',
  'advanceRosterDigest',
  'getRosterMoves',
] as const satisfies ReadonlyArray<keyof Storage>;

type Pending = { resolve: (value: unknown) => void; reject: (error: Error) => void };

/** One child process hosting some of the racing clients. */
class Child {
  readonly #process: ChildProcess;
  readonly #pending = new Map<number, Pending>();
  readonly #exited: Promise<void>;
  #nextId = 0;
  #ready: Pending | undefined;

  constructor(execArgv: readonly string[]) {
    const entry = childEntry();
    const typescript = entry.endsWith('.ts') && !execArgv.some((arg) => arg.includes('tsx'));
    this.#process = fork(entry, [], {
      execArgv: [...execArgv, ...(typescript ? ['--import', 'tsx'] : [])],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    this.#process.on('message', (message: FromChild) => this.#receive(message));
    this.#exited = new Promise((resolve) => this.#process.once('exit', () => resolve()));
    void this.#exited.then(() => {
      const gone = new Error(`[testing] a cross-process client's process exited (code ${String(this.#process.exitCode)})`);
      this.#ready?.reject(gone);
      for (const pending of this.#pending.values()) pending.reject(gone);
      this.#pending.clear();
    });
  }

  open(spec: CrossProcessClients, count: number): Promise<void> {
    const module = spec.module instanceof URL ? spec.module.href : spec.module.startsWith('file:') ? spec.module : pathToFileURL(spec.module).href;
    return new Promise((resolve, reject) => {
      this.#ready = { resolve: () => resolve(), reject };
      this.#send({
        type: 'open',
        module,
        exportName: spec.exportName ?? 'openClient',
        ...(spec.closeExportName === undefined ? {} : { closeExportName: spec.closeExportName }),
        options: toWire(spec.options?.()),
        count,
      });
    });
  }

  call(client: number, method: string, args: unknown[]): Promise<unknown> {
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      this.#send({ type: 'call', id, client, method, args: toWire(args) });
    });
  }

  async close(): Promise<void> {
    if (this.#process.exitCode === null && this.#process.connected) this.#send({ type: 'close' });
    const timer = setTimeout(() => this.#process.kill('SIGKILL'), 10_000);
    await this.#exited;
    clearTimeout(timer);
  }

  #send(message: ToChild): void {
    this.#process.send(message);
  }

  #receive(message: FromChild): void {
    if (message.type === 'ready') {
      this.#ready?.resolve(undefined);
      this.#ready = undefined;
    } else if (message.type === 'failed') {
      this.#ready?.reject(errorFromWire(message.error));
      this.#ready = undefined;
    } else {
      const pending = this.#pending.get(message.id);
      this.#pending.delete(message.id);
      if (message.error) pending?.reject(errorFromWire(message.error));
      else pending?.resolve(message.value === undefined ? undefined : fromWire(message.value));
    }
  }
}

/** The child's entry: the compiled `.js` beside this file, or the `.ts` source when the suite runs from sources. */
function childEntry(): string {
  const compiled = fileURLToPath(new URL('./cross-process-child.js', import.meta.url));
  return existsSync(compiled) ? compiled : fileURLToPath(new URL('./cross-process-child.ts', import.meta.url));
}

/** Clients hosted in other processes, and the way to end those processes. */
export interface ProcessClients {
  readonly clients: Storage[];
  close(): Promise<void>;
}

/**
 * Opens `count` clients spread over up to `spec.processes` (default 4) new processes. Each client is a
 * `Storage` whose every call runs in its process, on a client that process opened itself.
 */
export async function openProcessClients(spec: CrossProcessClients, count: number): Promise<ProcessClients> {
  const processes = Math.max(1, Math.min(count, spec.processes ?? 4));
  const children = Array.from({ length: processes }, () => new Child(spec.execArgv ?? []));
  const close = async (): Promise<void> => {
    await Promise.all(children.map((child) => child.close()));
  };
  const perChild = children.map((_, i) => Math.floor(count / processes) + (i < count % processes ? 1 : 0));
  try {
    await Promise.all(children.map((child, i) => child.open(spec, perChild[i] ?? 0)));
  } catch (error) {
    await close();
    throw error;
  }
  const clients: Storage[] = [];
  // Round robin, so that the first few clients of a test are already in different processes.
  const slots = children.map(() => 0);
  for (let i = 0; i < count; i++) {
    const index = i % processes;
    const child = children[index] as Child;
    const client = slots[index] ?? 0;
    slots[index] = client + 1;
    clients.push(remoteClient(child, client));
  }
  return { clients, close };
}

function remoteClient(child: Child, client: number): Storage {
  const remote: Record<string, (...args: unknown[]) => Promise<unknown>> = {};
  for (const method of REMOTE_METHODS) remote[method] = (...args: unknown[]) => child.call(client, method, args);
  return remote as unknown as Storage;
}
