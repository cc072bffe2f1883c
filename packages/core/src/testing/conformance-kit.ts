/**
 * What the conformance suite's rule files (`conformance-*.ts`, one per group of tests) share: the target
 * and runner types, the harness that defines a test (`define`) and the assertions and fixtures more than
 * one file uses. Rules live in the rule files, not here.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { checkContractVersion } from '../contract-version.js';
import { ContractVersionError, LeaseholdError } from '../errors.js';
import { encodeMemberState } from '../codec.js';
import { limits } from '../validation.js';
import { leaseStateOf, memberStateOf, RECORD_FORMAT } from '../storage.js';
import type { DeleteResult, LeaseRecord, LeaseState, MemberRecord, MemberState, Storage, WriteResult } from '../storage.js';
import { openProcessClients, type CrossProcessClients } from './cross-process.js';
import { TcpProxy, type TcpAddress } from './tcp-proxy.js';

/** The test functions of the caller's runner (vitest, jest, mocha, node:test all fit). */
export interface TestApi {
  describe(name: string, fn: () => void): void;
  /**
   * Defines a test. `fn` is called with the runner's test context, if it passes one: when the context has
   * a `skip(note)` method (vitest, node:test), a test whose hook is missing is reported as skipped with a
   * note saying what was not checked; otherwise it passes with that note unseen.
   */
  it(name: string, fn: (context?: unknown) => Promise<void>, timeoutMs?: number): void;
  /**
   * Optional: registers a function to run after the tests of the enclosing `describe`. When given, the
   * cross-process tests share their processes instead of starting new ones for each test.
   */
  afterAll?(fn: () => Promise<void>, timeoutMs?: number): void;
}

/**
 * The fault hook of a networked adapter: the suite starts its own `TcpProxy` (`tcp-proxy.ts`) in front of
 * the backend for each test, asks for a client that connects through it, and cuts the proxy at the worst
 * moments.
 */
export interface ProxyFaults {
  readonly kind: 'proxy';
  /** Where the backend listens (called when a test starts, so it may be known only after setup). */
  upstream(): TcpAddress;
  /** Opens a new client of the backend that connects to `through` instead of the backend's own address. */
  createStorage(through: TcpAddress): Promise<Storage>;
  /**
   * Opens a client through `through` whose driver never sends a command again after its connection was
   * cut (ioredis with `autoResendUnfulfilledCommands: false` and `maxRetriesPerRequest: 0`, an AWS SDK
   * client with `maxAttempts: 1`), so that the adapter's own handling of a failed call is what answers.
   * Give it when the clients of `createStorage` resend; without it, those are taken to be such clients.
   */
  createStorageWithoutResend?(through: TcpAddress): Promise<Storage>;
}

/** The fault hook of an in-process store, which has no connection to cut from outside. */
export interface BreakableFaults {
  readonly kind: 'break';
  /**
   * Opens a new client and a function that breaks its connection to the store, as a lost connection
   * would: every later call of that client fails in the store's own way.
   */
  createStorage(): Promise<{ storage: Storage; breakConnection(): void | Promise<void> }>;
}

/** What the suite tests, and how to reach it. */
export interface ConformanceTarget {
  /** The adapter's name, shown in test titles. */
  name: string;
  /**
   * Returns a NEW client of the same backend on every call (a new connection or pool, as another worker
   * process would have): the concurrency tests race one client per worker, and the cache test checks that
   * one client sees what another wrote.
   */
  createStorage: () => Promise<Storage>;
  /** Closes a client that `createStorage` (or a fault hook) returned. */
  closeStorage?: (storage: Storage) => Promise<void>;
  /**
   * Declares that the adapter has a change feed: the suite then fails if its clients have no
   * `subscribe()`. The feed is tested whenever `subscribe()` exists, declared or not.
   */
  changeFeed?: boolean;
  /**
   * Declares that the change feed addresses handovers: a subscription with `addressedTo` then hears no
   * `handed-off` change that names another owner, which the suite checks. Without it the suite checks only
   * that such a subscription hears everything it asked for (an adapter may deliver every change).
   */
  addressedHandovers?: boolean;
  /**
   * Makes a stored lease unreadable as a record, as a bad write by another program would, by writing the
   * backend directly (the lease exists when it is called; what it returns is ignored). Without it the
   * corrupt-record rules are not checked.
   */
  corruptLease?: (group: string, leaseKey: string) => Promise<unknown>;
  /**
   * Makes a stored member of a group's roster unreadable, as a bad write by another program would, by
   * writing the backend directly (the member exists when it is called). It returns `{ version }`, the
   * version the damaged member is stored at, when the damage moved it (as `MemoryStorage.corruptMember`
   * does); returning nothing says the member kept the version it had. Without it the corrupt-member rules
   * are not checked.
   */
  corruptMember?: (group: string, workerId: string) => Promise<unknown>;
  /**
   * Declares that the adapter offers the transactional checkpoint (the `CheckpointWrite` that
   * `LeaseCoordinator.checkpointThrough` calls: the user's writes and the checkpoint in one atomic step),
   * and how the suite makes one with a user's write of its own and reads that write back. Without it the
   * transactional checkpoint rules are not checked.
   */
  transactionalCheckpoint?: TransactionalCheckpoint;
  /** How the suite breaks a client's connection. Without it the fault rules are not checked. */
  faults?: ProxyFaults | BreakableFaults;
  /**
   * How to open a client in another process. Without it the concurrency tests race clients of this
   * process only.
   */
  crossProcess?: CrossProcessClients;
  /**
   * Why a hook does not apply to this adapter (for example `MemoryStorage` lives in one process and has
   * no connection): shown in the skip notes instead of the generic "not provided".
   */
  notApplicable?: { readonly faults?: string; readonly crossProcess?: string; readonly corruptLease?: string; readonly corruptMember?: string; readonly transactionalCheckpoint?: string };
  /** Per-test timeout in milliseconds. Default 60,000. */
  timeoutMs?: number;
}

/** A write of the user's own, made by a transactional checkpoint together with the checkpoint. */
export interface UserWrite {
  /** Where the value goes: a key of the target's choosing (a row of a small table, a key), unique per test. */
  readonly key: string;
  readonly value: string;
}

/** The target's transactional checkpoint, as the suite drives it. */
export interface TransactionalCheckpoint {
  /**
   * Runs the adapter's transactional checkpoint on `storage` as a `CheckpointWrite` (`current` is the lease
   * as the worker holds it, `next` the state to store), with `write` as the user's own write inside it:
   * both apply only if the stored lease still has `current`'s version, owner, incarnation and epoch, and
   * the outcome is reported exactly (`conflict` with the stored lease, `unknown` when the answer was lost).
   */
  checkpoint(storage: Storage, current: LeaseRecord, next: LeaseState, write: UserWrite): Promise<WriteResult<LeaseRecord>>;
  /** The value a user's write stored under `key`, read on `storage`, or `null` when none is visible. */
  read(storage: Storage, key: string): Promise<string | null>;
}

/** Thrown by a test body that cannot check its rule on this target; reported as a skip. */
class NotChecked extends Error {}

/** What a test body gets, in every rule file. */
export interface Context {
  /** New clients of the target, one per racing worker (in other processes in cross-process tests). */
  readonly clients: (count: number) => Promise<Storage[]>;
  /** A fresh, random group name. */
  readonly group: () => string;
  /** Ends the test as skipped, with a note saying what was not checked. */
  readonly notChecked: (reason: string) => never;
  /** Runs `fn` when the test ends, pass or fail. */
  readonly cleanup: (fn: () => Promise<void> | void) => void;
}

export type Body = (context: Context) => Promise<void>;

/** Where a test's clients live: in this process, or in other processes (opened per test, or shared by a group's tests). */
type Mode = 'in-process' | 'cross-process' | { readonly processes: (count: number) => Promise<Storage[]> };

/** Targets whose run starts with the contract version test (`contractVersionContract`). */
const versionTested = new WeakSet<ConformanceTarget>();
/** Each target's contract version check, made once on one client of its own. */
const versionChecks = new WeakMap<ConformanceTarget, Promise<ContractVersionError | undefined>>();

/** Says that `target`'s run has the contract version test, so that its other tests skip on a mismatch instead of failing with the same error. */
export function versionTestedOn(target: ConformanceTarget): void {
  versionTested.add(target);
}

/**
 * The `ContractVersionError` core would throw when handed a client of `target`, or `undefined` when the
 * target declares the contract version of this core. Checked once per target; a target that could not open
 * a client is asked again by the next test.
 */
export function contractVersionOf(target: ConformanceTarget): Promise<ContractVersionError | undefined> {
  let check = versionChecks.get(target);
  if (check === undefined) {
    check = (async () => {
      const storage = await target.createStorage();
      try {
        checkContractVersion(storage, `${target.name}'s storage`, 'testing');
        return undefined;
      } catch (error) {
        if (error instanceof ContractVersionError) return error;
        throw error;
      } finally {
        await target.closeStorage?.(storage).catch(() => undefined);
      }
    })();
    check.catch(() => versionChecks.delete(target));
    versionChecks.set(target, check);
  }
  return check;
}

export function define(t: TestApi, target: ConformanceTarget, title: string, body: Body, mode: Mode = 'in-process'): void {
  t.it(
    title,
    async (runnerContext?: unknown) => {
      const cleanups: Array<() => Promise<void> | void> = [];
      const opened: Storage[] = [];
      const context: Context = {
        clients: async (count) => {
          if (typeof mode === 'object') return mode.processes(count);
          if (mode === 'cross-process') {
            const spec = target.crossProcess as CrossProcessClients;
            const remote = await openProcessClients(spec, count);
            cleanups.push(() => remote.close());
            return remote.clients;
          }
          const made = await Promise.all(Array.from({ length: count }, () => target.createStorage()));
          opened.push(...made);
          return made;
        },
        group: () => `conformance-${randomUUID().slice(0, 13)}`,
        notChecked: (reason) => {
          throw new NotChecked(reason);
        },
        cleanup: (fn) => {
          cleanups.push(fn);
        },
      };
      try {
        // An adapter of another contract version fails the one test that says so; the rules it was not
        // written for are not judged (or, when that test is not in the run, each fails with its error).
        const mismatch = await contractVersionOf(target);
        if (mismatch !== undefined) {
          if (versionTested.has(target)) context.notChecked(`not checked: the adapter is of another storage contract version (${mismatch.message})`);
          throw mismatch;
        }
        if (mode !== 'in-process' && !target.crossProcess) {
          context.notChecked(
            `not checked between processes: ${target.notApplicable?.crossProcess ?? 'the target does not say how to open a client in another process (crossProcess)'}`,
          );
        }
        await body(context);
      } catch (error) {
        if (!(error instanceof NotChecked)) throw error;
        const skip = (runnerContext as { skip?: unknown } | undefined)?.skip;
        if (typeof skip === 'function') (skip as (note: string) => void).call(runnerContext, error.message);
      } finally {
        // Subscriptions, proxies and processes first, newest first; then the clients.
        for (const fn of cleanups.reverse()) await Promise.resolve().then(fn).catch(() => undefined);
        const close = target.closeStorage;
        if (close) await Promise.allSettled(opened.map((storage) => close(storage)));
      }
    },
    target.timeoutMs ?? 60_000,
  );
}

// ---------------------------------------------------------------------------------------------------
// Assertions and fixtures

export function applied<T>(outcome: WriteResult<T> | undefined, what: string): T {
  if (outcome?.status !== 'applied') {
    assert.fail(`${what}: expected applied, got ${show(outcome)}`);
  }
  return outcome.record;
}

export function conflict<T>(outcome: WriteResult<T> | DeleteResult | undefined, what: string): T | null {
  if (outcome?.status !== 'conflict') {
    assert.fail(`${what}: expected conflict, got ${show(outcome)}`);
  }
  return outcome.current as T | null;
}

export function show(value: unknown): string {
  try {
    const text = JSON.stringify(value, (_key, field: unknown) => (field instanceof Error ? `${field.name}: ${field.message}` : field));
    return text === undefined ? String(value) : text.length > 600 ? `${text.slice(0, 600)}…` : text;
  } catch {
    return String(value);
  }
}

/** A value as it would read back after a round trip through JSON: what a faithful store returns. */
export function plain<T>(value: T): T {
  return JSON.parse(JSON.stringify(value)) as T;
}

/** A string of exactly `bytes` UTF-8 bytes: `unit` repeated, topped up with ASCII, ending in `last`. */
export function sized(bytes: number, unit: string, last: string): string {
  const unitBytes = Buffer.byteLength(unit);
  const body = bytes - Buffer.byteLength(last);
  const repeated = unit.repeat(Math.floor(body / unitBytes));
  const value = repeated + 'x'.repeat(body - Buffer.byteLength(repeated)) + last;
  assert.equal(Buffer.byteLength(value), bytes);
  return value;
}

export function chunks<T>(items: readonly T[], size: number): T[][] {
  return Array.from({ length: Math.ceil(items.length / size) }, (_, i) => items.slice(i * size, i * size + size));
}

/** Fields a later core might add: JSON values of every kind, nested. */
export const laterFields = {
  assignedAt: 1767225600123,
  lineage: { depth: 2, via: ['shardId-000000000001', null, true, { nested: [1.5, -2, 'ü'] }] },
  'x-flag': false,
  'x-empty': {},
  'x-none': null,
};

// ---------------------------------------------------------------------------------------------------
// Leases

export const full: LeaseState = {
  format: RECORD_FORMAT,
  owner: 'worker-ü-1',
  epoch: 7,
  checkpoint: '49590338271490256608559692538361571095921575989136588898:3',
  parentKeys: ['shardId-000000000001', 'shardId-000000000002'],
  incarnation: 'incarnation-ü "quoted"',
  metadata: { 'leasehold.note': 'línea\nnext', empty: '', 'with space': '{"json":true}' },
};

export function byKey(leases: readonly LeaseRecord[]): Map<string, LeaseRecord> {
  return new Map(leases.map((lease) => [lease.leaseKey, lease]));
}

export async function update(storage: Storage, group: string, record: LeaseRecord, next: Partial<LeaseState>, what: string): Promise<LeaseRecord> {
  const [outcome] = await storage.updateLeases(group, [{ leaseKey: record.leaseKey, expectedVersion: record.version, next: { ...leaseStateOf(record), ...next } }]);
  return applied(outcome, what);
}

export async function createMany(storage: Storage, group: string, keys: readonly string[], state: (leaseKey: string) => Partial<LeaseState> = () => ({})): Promise<void> {
  const chunk = 100;
  for (let start = 0; start < keys.length; start += chunk) {
    await Promise.all(
      keys.slice(start, start + chunk).map(async (leaseKey) => {
        applied(await storage.createLease({ group, leaseKey, ...state(leaseKey) }), `create ${leaseKey}`);
      }),
    );
  }
}

export async function listed(storage: Storage, group: string): Promise<LeaseRecord[]> {
  const listing = await storage.listLeases(group);
  assert.deepEqual(listing.corrupt, [], 'no lease of this group is corrupt');
  return listing.leases;
}

// ---------------------------------------------------------------------------------------------------
// The read of many leases by key (optional)

/** A client with the read of many leases by key. */
export type Reading = Storage & Required<Pick<Storage, 'getLeases'>>;

/** The client, with its `getLeases`; a test of a client without it ends as skipped, saying why. */
export function reading(storage: Storage, context: Context): Reading {
  if (typeof storage.getLeases !== 'function') {
    context.notChecked('not checked: the adapter has no getLeases (optional: core then reads each lease with getLease)');
  }
  return storage as Reading;
}

/**
 * Checks `getLeases` on a client of this process: a client in another process forwards every method the
 * suite knows, whether or not the adapter has it.
 */
export async function readingHere(target: ConformanceTarget, context: Context): Promise<void> {
  const local = await target.createStorage();
  context.cleanup(() => target.closeStorage?.(local));
  reading(local, context);
}

// ---------------------------------------------------------------------------------------------------
// Members

/** A member state with every field core names, and `overrides` on top. */
export function memberState(overrides: Partial<MemberState> & object = {}): MemberState {
  return { format: RECORD_FORMAT, incarnation: 'incarnation-1', leaseDurationMs: 10_000, status: 'alive', held: 0, changes: 0, requests: [], metadata: {}, ...overrides };
}

export function byWorker(members: readonly MemberRecord[]): MemberRecord[] {
  return [...members].sort((a, b) => (a.workerId < b.workerId ? -1 : a.workerId > b.workerId ? 1 : 0));
}

/** The members of a group, by worker id, checking that none is corrupt and the roster names its group. */
export async function members(storage: Storage, group: string): Promise<MemberRecord[]> {
  const roster = await storage.getRoster(group);
  assert.equal(roster.group, group, 'the roster names its group');
  assert.deepEqual(roster.corrupt, [], 'no member of this group is corrupt');
  return byWorker(roster.members);
}

export async function memberOfRoster(storage: Storage, group: string, workerId: string): Promise<MemberRecord | null> {
  return (await members(storage, group)).find((member) => member.workerId === workerId) ?? null;
}

export async function join(storage: Storage, group: string, workerId: string, state: Partial<MemberState> & object = {}): Promise<MemberRecord> {
  return applied(await storage.putMember(group, workerId, null, memberState(state)), `join ${JSON.stringify(workerId.slice(0, 40))}`);
}

export async function heartbeat(storage: Storage, record: MemberRecord, next: Partial<MemberState> = {}, what = 'heartbeat'): Promise<MemberRecord> {
  return applied(await storage.putMember(record.group, record.workerId, record.version, { ...memberStateOf(record), ...next }), what);
}

/** A member state whose encoding (`encodeMemberState`) is exactly `bytes` long: `state` plus an ASCII filler field. */
export function memberOfSize(bytes: number, state: MemberState): MemberState & Record<string, unknown> {
  const bare = Buffer.byteLength(encodeMemberState({ ...state, 'x-filler': '' } as MemberState));
  assert.ok(bare <= bytes, `a member state of ${bare} bytes before its filler`);
  const value = { ...state, 'x-filler': 'f'.repeat(bytes - bare) };
  assert.equal(Buffer.byteLength(encodeMemberState(value)), bytes);
  return value;
}

/** A member state of exactly `limits.maxMemberBytes`, every named field at its largest, `variant` making it unique. */
export function largestMember(variant: string): MemberState & Record<string, unknown> {
  return memberOfSize(limits.maxMemberBytes, {
    format: Number.MAX_SAFE_INTEGER,
    incarnation: sized(160, '€', variant),
    leaseDurationMs: Number.MAX_SAFE_INTEGER,
    status: 'dead',
    held: Number.MAX_SAFE_INTEGER,
    changes: Number.MAX_SAFE_INTEGER - 1,
    requests: Array.from({ length: limits.maxRequests }, (_, i) => ({ leaseKey: sized(90, 'é', `${variant}${i}`), from: sized(60, '𝄞', `${variant}${i}`) })),
    metadata: { ...awkwardMemberMetadata(), variant },
    numbers: [Number.MAX_SAFE_INTEGER, 0.1, 1e21, 5e-324],
    'x-variant': variant,
  } as MemberState & Record<string, unknown>);
}

/** Awkward metadata for a member: keys that a copy by assignment, a query language or a path syntax would mangle. */
export function awkwardMemberMetadata(): Record<string, string> {
  const metadata: Record<string, string> = {};
  for (const [i, key] of ['__proto__', 'constructor', 'toString', 'a.b', '$', '$set', '[0]', '{x}', '"', '\\', '1', 'ü', '𝄞'].entries()) {
    Object.defineProperty(metadata, key, { value: `v${i}\u0000\ud800`, enumerable: true, writable: true, configurable: true });
  }
  return metadata;
}

// ---------------------------------------------------------------------------------------------------
// Processes shared by a group's tests

/** The most clients a race uses. */
const MOST_RACERS = 32;

/**
 * With the runner's `afterAll`, one set of processes (hosting as many clients as the largest race needs)
 * serves every cross-process test of the group and ends after them; without it, each test starts its own.
 */
export function sharedProcesses(t: TestApi, target: ConformanceTarget): Mode {
  const spec = target.crossProcess;
  if (!t.afterAll || !spec) return 'cross-process';
  let opened: ReturnType<typeof openProcessClients> | undefined;
  t.afterAll(async () => {
    const processes = await opened?.catch(() => undefined);
    await processes?.close();
  }, 30_000);
  return {
    processes: async (count) => {
      opened ??= openProcessClients(spec, MOST_RACERS);
      return (await opened).clients.slice(0, count);
    },
  };
}

// ---------------------------------------------------------------------------------------------------
// Lost connections

/** How long a call may take to settle once its connection is cut: a call that hangs fails the test. */
const SETTLE_MS = 30_000;

export async function settles<T>(promise: Promise<T>, what: string): Promise<{ value: T } | { thrown: unknown }> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not settle within ${SETTLE_MS} ms of its connection being cut`)), SETTLE_MS);
  });
  try {
    return await Promise.race([promise.then((value) => ({ value }), (thrown: unknown) => ({ thrown })), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

interface Proxied {
  readonly proxy: TcpProxy;
  /** A client connected through the proxy, warmed up so that its connections are open. */
  readonly client: Storage;
  /** A client connected to the backend directly, to see what really happened. */
  readonly direct: Storage;
}

export async function proxied(target: ConformanceTarget, context: Context): Promise<Proxied> {
  const faults = target.faults;
  if (faults?.kind !== 'proxy') {
    context.notChecked(
      `not checked: ${
        target.notApplicable?.faults ??
        (faults
          ? `the target breaks its clients' connections in process (faults.kind 'break'), so no call was cut after the backend received it`
          : `the target has no proxy fault hook (faults.kind 'proxy'), so calls whose connection is cut after the backend received them were not tried`)
      }`,
    );
  }
  const proxy = await TcpProxy.start(faults.upstream());
  context.cleanup(() => proxy.close());
  const client = await faults.createStorage(proxy.address);
  context.cleanup(async () => target.closeStorage?.(client));
  const [direct] = (await context.clients(1)) as [Storage];
  return { proxy, client, direct };
}

// ---------------------------------------------------------------------------------------------------
// Bad input

/** Names every operation refuses, what each is, and what the refusal's message mentions. */
export const badNames: ReadonlyArray<readonly [what: string, name: string, mentions: string]> = [
  ['an empty name', '', 'must not be empty'],
  ['a name over 512 bytes', 'n'.repeat(limits.maxNameBytes + 1), 'the limit is 512'],
  ['a name of 257 two-byte characters', 'é'.repeat(limits.maxNameBytes / 2 + 1), 'the limit is 512'],
  ['a name with NUL', 'a\u0000b', 'NUL'],
  ['a name with a lone surrogate', 'a\ud800b', 'well-formed'],
];

export function assertInvalidInput(error: unknown, mentions: string): true {
  assert.ok(error instanceof Error, `expected an Error, got ${String(error)}`);
  const typed = error as Error & { code?: unknown };
  assert.equal(typed.code, 'ERR_INVALID_INPUT', `expected code ERR_INVALID_INPUT, got ${String(typed.code)}: ${typed.message}`);
  assert.equal(typed.name, 'InvalidInputError');
  assert.ok(typed.message.includes(mentions), `message ${JSON.stringify(typed.message)} should mention ${JSON.stringify(mentions)}`);
  return true;
}

// ---------------------------------------------------------------------------------------------------
// Corrupt members

export function corruptMemberHook(target: ConformanceTarget, context: Context): (group: string, workerId: string) => Promise<unknown> {
  if (!target.corruptMember) {
    context.notChecked(`not checked: ${target.notApplicable?.corruptMember ?? 'the target has no corruptMember hook to write a corrupt member'}`);
  }
  return target.corruptMember;
}

export function assertCorruptMember(error: unknown, group: string, workerId: string): void {
  assert.ok(error instanceof LeaseholdError, `expected a CorruptRecordError, got ${show(error)}`);
  const typed = error as LeaseholdError & { group?: unknown; workerId?: unknown; leaseKey?: unknown };
  assert.deepEqual([typed.name, typed.code, typed.group, typed.workerId, typed.leaseKey], ['CorruptRecordError', 'ERR_CORRUPT_RECORD', group, workerId, undefined], typed.message);
}
