/**
 * A networked store for the suite's own tests: a `MemoryStorage` served over TCP (one JSON line per
 * request and per answer) and a client that speaks to it. With it, the suite's proxy fault tests and its
 * cross-process mode run against a real connection, and deliberately broken clients show that those tests
 * catch what they claim to.
 */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createConnection, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import {
  STORAGE_CONTRACT_VERSION,
  LeaseholdError,
  MemoryStorage,
  StorageOutcomeUnknownError,
  StorageUnavailableError,
  type CreateLeaseOptions,
  type DeleteResult,
  type LeaderRecord,
  type LeaderState,
  type LeaseListing,
  type LeaseRecord,
  type LeaseState,
  type LeaseUpdate,
  type MemberRecord,
  type MemberState,
  type NewLeader,
  type NewLease,
  type Roster,
  type Storage,
  type WriteResult,
} from '../../src/index.js';
import {
  result,
  validateGroup,
  validateLeaderState,
  validateLeaseKey,
  validateLeaseUpdates,
  validateMemberWrite,
  validateNewLeader,
  validateNewLease,
  validateVersion,
  validateWorkerId,
  validateWorkerIds,
} from '../../src/adapter.js';
import type { UserWrite } from '../../src/testing/index.js';
import { errorFromWire, errorToWire, fromWire, toWire, type WireError } from '../../src/testing/wire.js';

const PKG = 'remote-storage';

/** Leases per page of a listing: a listing of a large group takes several requests. */
const PAGE = 100;

interface Request {
  readonly id: number;
  readonly method: string;
  readonly args: string;
  /**
   * Set by a client that may send this request again after its connection drops: the server answers a
   * request with the same key once, and a second time with the first answer, as a write token lets a
   * backend recognise its own write.
   */
  readonly once?: string;
}

interface Answer {
  readonly id: number;
  readonly value?: string;
  readonly error?: WireError;
}

/** Serves `storage` on a free port of 127.0.0.1. */
export async function serveStorage(storage: MemoryStorage = new MemoryStorage()): Promise<{ storage: MemoryStorage; port: number; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const answered = new Map<string, Promise<Answer>>();
  const userWrites = new Map<string, string>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => socket.destroy());
    lines(socket, (line) => {
      const request = JSON.parse(line) as Request;
      let reply = request.once === undefined ? undefined : answered.get(request.once);
      if (!reply) {
        reply = answer(storage, userWrites, request);
        if (request.once !== undefined) answered.set(request.once, reply);
      }
      void reply.then((first) => {
        if (!socket.destroyed) socket.write(`${JSON.stringify({ ...first, id: request.id })}\n`);
      });
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    storage,
    port: (server.address() as AddressInfo).port,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

async function answer(storage: MemoryStorage, userWrites: Map<string, string>, request: Request): Promise<Answer> {
  try {
    const args = fromWire(request.args) as unknown[];
    if (request.method === 'checkpointWith') {
      const [current, next, write] = args as [LeaseRecord, LeaseState, UserWrite];
      return { id: request.id, value: toWire(await checkpointWith(storage, userWrites, current, next, write)) };
    }
    if (request.method === 'readUserWrite') {
      const [key] = args as [string];
      return { id: request.id, value: toWire(userWrites.get(key) ?? null) };
    }
    if (request.method === 'listPage') {
      const [group, after] = args as [string, string | null];
      const listing = await storage.listLeases(group);
      const sorted = [...listing.leases].sort((a, b) => (a.leaseKey < b.leaseKey ? -1 : a.leaseKey > b.leaseKey ? 1 : 0));
      const rest = after === null ? sorted : sorted.filter((lease) => lease.leaseKey > after);
      return { id: request.id, value: toWire({ leases: rest.slice(0, PAGE), corrupt: after === null ? listing.corrupt : [], more: rest.length > PAGE }) };
    }
    const method = (storage as unknown as Record<string, (...input: unknown[]) => Promise<unknown>>)[request.method];
    if (typeof method !== 'function') throw new Error(`no method ${request.method}`);
    return { id: request.id, value: toWire(await method.apply(storage, args)) };
  } catch (error) {
    return { id: request.id, error: errorToWire(error) };
  }
}

/**
 * The server's transactional checkpoint: the user's write and `next` apply together, only if the lease is
 * as the worker holds it (nothing else runs in between on the server's one event loop).
 */
async function checkpointWith(storage: MemoryStorage, userWrites: Map<string, string>, current: LeaseRecord, next: LeaseState, write: UserWrite): Promise<WriteResult<LeaseRecord>> {
  const stored = await storage.getLease(current.group, current.leaseKey);
  if (!stored || stored.version !== current.version || stored.owner !== current.owner || stored.incarnation !== current.incarnation || stored.epoch !== current.epoch) {
    return result.conflict(stored);
  }
  const [outcome] = await storage.updateLeases(current.group, [{ leaseKey: current.leaseKey, expectedVersion: current.version, next }]);
  if (outcome?.status === 'applied') userWrites.set(write.key, write.value);
  return outcome as WriteResult<LeaseRecord>;
}

function lines(socket: Socket, onLine: (line: string) => void): void {
  let buffered = '';
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => {
    buffered += chunk;
    for (let end = buffered.indexOf('\n'); end >= 0; end = buffered.indexOf('\n')) {
      onLine(buffered.slice(0, end));
      buffered = buffered.slice(end + 1);
    }
  });
}

/** How a {@link RemoteStorage} client is broken. */
export type RemoteBug =
  /** A write whose connection drops is thrown as unavailable, although it may have applied. */
  | 'throws-on-cut'
  /** A write whose connection drops is sent again on a new connection, and its second answer returned. */
  | 'retries-writes'
  /** A listing whose connection drops returns the pages it has. */
  | 'partial-listing'
  /** A read whose connection drops returns "nothing there". */
  | 'empty-reads-on-cut'
  /** A batch whose connection drops, and is not sent again, reports every item a conflict with no current lease. */
  | 'conflict-on-failed-batch'
  /** A transactional checkpoint whose connection drops is reported as a conflict with no current lease. */
  | 'conflict-on-lost-commit';

/** Thrown inside the client when its connection drops with calls in flight. */
class ConnectionLost extends Error {}

/**
 * A client of {@link serveStorage}: one connection, opened on the first call and again after it drops.
 * With `resends`, a write whose connection drops is sent again on a new connection, marked so that the
 * server answers it with its first answer (as ioredis resends a command, and the Redis adapter recognises
 * its own write by its token).
 */
export class RemoteStorage implements Storage {
  readonly contractVersion = STORAGE_CONTRACT_VERSION;
  readonly #address: { host: string; port: number };
  readonly #bug: RemoteBug | undefined;
  readonly #resends: boolean;
  readonly #clientId = randomUUID();
  readonly #pending = new Map<number, { resolve: (answer: Answer) => void; reject: (error: Error) => void }>();
  #socket: Promise<Socket> | undefined;
  #nextId = 0;

  constructor(address: { host: string; port: number }, bug?: RemoteBug, options: { resends?: boolean } = {}) {
    this.#address = address;
    this.#bug = bug;
    this.#resends = options.resends === true;
  }

  async listLeases(group: string): Promise<LeaseListing> {
    validateGroup(group, PKG);
    const listing: LeaseListing = { leases: [], corrupt: [] };
    for (let after: string | null = null; ; ) {
      let page: LeaseListing & { more: boolean };
      try {
        page = (await this.#call('listPage', [group, after])) as LeaseListing & { more: boolean };
      } catch (error) {
        if (this.#bug === 'partial-listing' && error instanceof ConnectionLost) return listing;
        throw this.#readFailure(error, 'listLeases');
      }
      listing.leases.push(...page.leases);
      listing.corrupt.push(...page.corrupt);
      if (!page.more) return listing;
      after = page.leases.at(-1)?.leaseKey ?? null;
    }
  }

  async getLease(group: string, leaseKey: string): Promise<LeaseRecord | null> {
    validateGroup(group, PKG);
    validateLeaseKey(leaseKey, PKG);
    return this.#read('getLease', [group, leaseKey], null);
  }

  async createLease(lease: NewLease, options: CreateLeaseOptions = {}): Promise<WriteResult<LeaseRecord>> {
    const { group, leaseKey, state } = validateNewLease(lease, PKG);
    return this.#write('createLease', [{ ...state, group, leaseKey }, options], (error) => result.unknown(error));
  }

  async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    validateLeaseUpdates(group, updates, PKG);
    return this.#write('updateLeases', [group, updates], (error) =>
      updates.map(() => (this.#bug === 'conflict-on-failed-batch' ? result.conflict<LeaseRecord>(null) : result.unknown(error))),
    );
  }

  async deleteLease(group: string, leaseKey: string, expectedVersion: number): Promise<DeleteResult> {
    validateGroup(group, PKG);
    validateLeaseKey(leaseKey, PKG);
    validateVersion(expectedVersion, PKG);
    return this.#write('deleteLease', [group, leaseKey, expectedVersion], (error) => result.unknown(error));
  }

  async getLeader(group: string): Promise<LeaderRecord | null> {
    validateGroup(group, PKG);
    return this.#read('getLeader', [group], null);
  }

  async createLeader(leader: NewLeader): Promise<WriteResult<LeaderRecord>> {
    const { group, state } = validateNewLeader(leader, PKG);
    return this.#write('createLeader', [{ ...state, group }], (error) => result.unknown(error));
  }

  async updateLeader(group: string, expectedVersion: number, next: LeaderState): Promise<WriteResult<LeaderRecord>> {
    validateGroup(group, PKG);
    validateVersion(expectedVersion, PKG);
    validateLeaderState(next, PKG);
    return this.#write('updateLeader', [group, expectedVersion, next], (error) => result.unknown(error));
  }

  async getRoster(group: string): Promise<Roster> {
    validateGroup(group, PKG);
    return this.#read('getRoster', [group], { group, members: [], corrupt: [] });
  }

  async putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    validateMemberWrite(group, workerId, expectedVersion, next, PKG);
    return this.#write('putMember', [group, workerId, expectedVersion, next], (error) => result.unknown(error));
  }

  async removeMember(group: string, workerId: string, expectedVersion: number): Promise<DeleteResult<MemberRecord>> {
    validateGroup(group, PKG);
    validateWorkerId(workerId, PKG);
    validateVersion(expectedVersion, PKG);
    return this.#write('removeMember', [group, workerId, expectedVersion], (error) => result.unknown(error));
  }

  async getMembers(group: string, workerIds: readonly string[]): Promise<Roster> {
    validateGroup(group, PKG);
    validateWorkerIds(workerIds, PKG);
    return this.#read('getMembers', [group, workerIds], { group, members: [], corrupt: [] });
  }

  async getRosterDigest(group: string): Promise<number> {
    validateGroup(group, PKG);
    return this.#read('getRosterDigest', [group], 0);
  }

  async advanceRosterDigest(group: string): Promise<number> {
    validateGroup(group, PKG);
    // An advance whose answer was lost throws, as the contract asks: core advances again.
    return this.#write('advanceRosterDigest', [group], (error) => {
      throw error;
    });
  }

  /** The server's transactional checkpoint (see the suite's `TransactionalCheckpoint`), with the user's write `write`. */
  async checkpointWith(current: LeaseRecord, next: LeaseState, write: UserWrite): Promise<WriteResult<LeaseRecord>> {
    return this.#write('checkpointWith', [current, next, write], (error) =>
      this.#bug === 'conflict-on-lost-commit' ? result.conflict<LeaseRecord>(null) : result.unknown(error),
    );
  }

  /** The value the user's write `key` stored on the server, or `null`. */
  async readUserWrite(key: string): Promise<string | null> {
    return this.#read('readUserWrite', [key], null);
  }

  async close(): Promise<void> {
    const socket = this.#socket;
    this.#socket = undefined;
    (await socket?.catch(() => undefined))?.destroy();
  }

  async #read<T>(method: string, args: unknown[], empty: T): Promise<T> {
    try {
      return (await this.#call(method, args)) as T;
    } catch (error) {
      if (this.#bug === 'empty-reads-on-cut' && error instanceof ConnectionLost) return empty;
      throw this.#readFailure(error, method);
    }
  }

  async #write<T>(method: string, args: unknown[], unknown: (error: LeaseholdError) => T): Promise<T> {
    const once = this.#resends ? `${this.#clientId}:${this.#nextId}` : undefined;
    try {
      return (await this.#call(method, args, once)) as T;
    } catch (error) {
      if (!(error instanceof ConnectionLost)) throw this.#readFailure(error, method);
      if (once !== undefined) {
        try {
          return (await this.#call(method, args, once)) as T;
        } catch (again) {
          if (!(again instanceof ConnectionLost)) throw this.#readFailure(again, method);
        }
      }
      if (this.#bug === 'throws-on-cut') throw new StorageUnavailableError(`[${PKG}] ${method} failed: ${error.message}`, { cause: error });
      if (this.#bug === 'retries-writes') return (await this.#call(method, args)) as T;
      return unknown(new StorageOutcomeUnknownError(`[${PKG}] the outcome of ${method} is unknown: ${error.message}`, { cause: error }));
    }
  }

  #readFailure(error: unknown, method: string): Error {
    if (error instanceof LeaseholdError) return error;
    return new StorageUnavailableError(`[${PKG}] ${method} failed: ${(error as Error).message}`, { cause: error });
  }

  async #call(method: string, args: unknown[], once?: string): Promise<unknown> {
    let socket: Socket;
    try {
      socket = await this.#connect();
    } catch (error) {
      // Nothing was sent: that is certain, so a write may say so by throwing.
      throw new StorageUnavailableError(`[${PKG}] cannot connect: ${(error as Error).message}`, { cause: error });
    }
    const id = this.#nextId++;
    const answer = await new Promise<Answer>((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      socket.write(`${JSON.stringify({ id, method, args: toWire(args), ...(once === undefined ? {} : { once }) } satisfies Request)}\n`);
    });
    if (answer.error) throw errorFromWire(answer.error);
    return answer.value === undefined ? undefined : fromWire(answer.value);
  }

  #connect(): Promise<Socket> {
    this.#socket ??= new Promise<Socket>((resolve, reject) => {
      const socket = createConnection(this.#address);
      socket.once('connect', () => resolve(socket));
      // Before the connection: the call fails with nothing sent. After: 'close' follows and fails the calls in flight.
      socket.on('error', reject);
      lines(socket, (line) => {
        const reply = JSON.parse(line) as Answer;
        this.#pending.get(reply.id)?.resolve(reply);
        this.#pending.delete(reply.id);
      });
      socket.on('close', () => {
        this.#socket = undefined;
        for (const pending of this.#pending.values()) pending.reject(new ConnectionLost('the connection was lost'));
        this.#pending.clear();
      });
    });
    return this.#socket;
  }
}

/** Opens a client in another process (the suite's cross-process mode). */
export async function openClient(options: { host: string; port: number }): Promise<Storage> {
  return new RemoteStorage(options);
}
