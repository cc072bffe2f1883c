/**
 * The simulated cluster the core benchmarks run: coordinators on one MemoryStorage, each with its own
 * virtual clock (rate within ±MAX_DRIFT), its own 1-20 ms latency, and a storage wrapper that counts the
 * operations and items it reads and writes.
 */
import { LeaseCoordinator, MemoryStorage, type LeaseCoordinatorOptions, type Random } from '../src/index.js';
import { seededRandom, FaultyStorage, noFaults, VirtualClock, VirtualScheduler, withUnsafe, type CoordinatorUnsafe } from '../src/testing/index.js';
import { withoutLeaseReads, withoutRosterMoves } from '../src/testing/without-watcher-reads.js';
import { COORDINATOR_UNSAFE_KEYS } from '../src/unsafe.js';
import { Ledger, Meter } from './meter.js';
import type { ChangeSubscription, LeaseChange, LeaseListing, SubscribeOptions, LeaseRecord, LeaseUpdate, MemberRecord, MemberState, NewLease, CreateLeaseOptions, Roster, RosterMoves, WriteResult, DeleteResult } from '../src/index.js';

export const GROUP = 'bench';
export const LEASE_MS = 10_000;
export const TAKE_MS = 2_000;
export const MAX_DRIFT = 0.01;
/** Give up waiting for a condition after this much simulated time (counted as a failure). */
export const CAP_MS = 20 * LEASE_MS;

/** Operations and items, by operation name. */
export interface Counts {
  /** Calls, by storage method. */
  calls: Record<string, number>;
  /**
   * Items read: getRoster and getMembers one per member read (a member is a record of its own on DynamoDB
   * and Postgres), getRosterDigest 1 (the digest is a record of its own on every backend), getRosterMoves 1
   * (the digest with the names kept beside it, read in one call on Redis and Postgres), listLeases one
   * per lease in the listing, getLease 1, getLeases 1 per key named.
   */
  itemsRead: number;
  /** Items read, by storage method. */
  itemsReadBy: Record<string, number>;
  /**
   * Items written: putMember 1, removeMember 1, advanceRosterDigest 1, each lease of an updateLeases batch
   * 1, createLease 1, deleteLease 1.
   */
  itemsWritten: number;
  /** Of those, the member writes (putMember, removeMember). */
  memberWrites: number;
  /** Of those, the lease writes (updateLeases items, createLease, deleteLease). */
  leaseWrites: number;
  /** Of those, the digest's advances. */
  digestWrites: number;
  /** Changes the change feed delivered to this worker's subscriptions (at most one subscription open at a time, but for a move's overlap). */
  changesHeard: number;
}

export function emptyCounts(): Counts {
  return { calls: {}, itemsRead: 0, itemsReadBy: {}, itemsWritten: 0, memberWrites: 0, leaseWrites: 0, digestWrites: 0, changesHeard: 0 };
}

export function addCounts(into: Counts, from: Counts): Counts {
  for (const [name, count] of Object.entries(from.calls)) into.calls[name] = (into.calls[name] ?? 0) + count;
  into.itemsRead += from.itemsRead;
  for (const [name, count] of Object.entries(from.itemsReadBy)) into.itemsReadBy[name] = (into.itemsReadBy[name] ?? 0) + count;
  into.itemsWritten += from.itemsWritten;
  into.memberWrites += from.memberWrites;
  into.leaseWrites += from.leaseWrites;
  into.digestWrites += from.digestWrites;
  into.changesHeard += from.changesHeard;
  return into;
}

/**
 * A FaultyStorage (latency only) that counts what one worker asks of storage, and with a `Meter` bills it
 * as each backend would (`meter.ts`). The coordinators of this benchmark never checkpoint, so no counted
 * write is a checkpoint.
 */
export class CountingStorage extends FaultyStorage {
  counts = emptyCounts();
  /** Take ticks that listed the leases. */
  lists = 0;
  meter: Meter | undefined;
  /**
   * Whether `getRosterMoves` answers as a DynamoDB adapter keeping the moves in slots would (`rosterMoves:
   * 'dynamodb'`, README, "Moves read by name on DynamoDB"): `null` when the names, read by key at a read
   * unit each and one for the slots, cost more than the meter's last whole roster read of this worker.
   */
  dynamodbMoves = false;

  constructor(...args: ConstructorParameters<typeof FaultyStorage>) {
    super(...args);
    // The watchers' reads are the fault-injecting store's own properties, set in its constructor when the
    // inner store has them (not methods a subclass could override): counted by wrapping them.
    const { getMembers, getRosterDigest, advanceRosterDigest, getRosterMoves, getLeases } = this;
    // The read of many leases by key, likewise, when the inner store has it: one item per key named.
    if (getLeases !== undefined) {
      Object.defineProperty(this, 'getLeases', {
        value: async (group: string, leaseKeys: readonly string[]): Promise<LeaseListing> => {
          this.#call('getLeases');
          const listing = await getLeases(group, leaseKeys);
          const unique = [...new Set(leaseKeys)];
          this.#read('getLeases', unique.length);
          const byKey = new Map(listing.leases.map((lease) => [lease.leaseKey, lease]));
          this.meter?.getLeases(unique.map((leaseKey) => [leaseKey, byKey.get(leaseKey) ?? null] as const));
          return listing;
        },
      });
    }
    if (getMembers === undefined || getRosterDigest === undefined || advanceRosterDigest === undefined) return;
    const wrap = <Args extends unknown[], T>(name: string, call: (...args: Args) => Promise<T>, after: (result: T, ...args: Args) => void): void => {
      Object.defineProperty(this, name, {
        value: async (...params: Args): Promise<T> => {
          this.#call(name);
          const result = await call(...params);
          after(result, ...params);
          return result;
        },
      });
    };
    wrap('getMembers', getMembers, (roster, _group, workerIds) => {
      this.#read('getMembers', roster.members.length + roster.corrupt.length);
      this.meter?.getMembers(workerIds, roster.members);
    });
    wrap('getRosterDigest', getRosterDigest, (digest) => {
      this.#read('getRosterDigest', 1);
      this.meter?.getRosterDigest(digest);
    });
    if (getRosterMoves !== undefined) {
      Object.defineProperty(this, 'getRosterMoves', {
        value: async (group: string, since: number): Promise<RosterMoves> => {
          this.#call('getRosterMoves');
          const moves = await getRosterMoves(group, since);
          this.#read('getRosterMoves', 1);
          this.meter?.getRosterMoves(moves.digest, since, moves.moved);
          // As a DynamoDB adapter keeping the moves in slots would: no names past its last whole read's cost.
          const whole = this.meter?.lastRosterUnits;
          if (this.dynamodbMoves && moves.moved !== null && whole !== undefined && moves.moved.length + 1 > whole) return { digest: moves.digest, moved: null };
          return moves;
        },
      });
    }
    // Counted once it answered: an advance that threw may not have applied (this bench injects no faults).
    wrap('advanceRosterDigest', advanceRosterDigest, (digest, _group, workerIds) => {
      this.counts.itemsWritten += 1;
      this.counts.digestWrites += 1;
      this.meter?.advanceRosterDigest(digest, getRosterMoves === undefined ? undefined : workerIds);
    });
  }

  #call(name: string): void {
    this.counts.calls[name] = (this.counts.calls[name] ?? 0) + 1;
  }

  #read(name: string, items: number): void {
    this.counts.itemsRead += items;
    this.counts.itemsReadBy[name] = (this.counts.itemsReadBy[name] ?? 0) + items;
  }

  override async subscribe(group: string, listener: (change: LeaseChange) => void, options?: SubscribeOptions): Promise<ChangeSubscription> {
    this.#call('subscribe');
    return super.subscribe(group, (change) => {
      this.counts.changesHeard += 1;
      listener(change);
    }, options);
  }

  override async listLeases(group: string): Promise<LeaseListing> {
    this.#call('listLeases');
    this.lists++;
    const listing = await super.listLeases(group);
    this.#read('listLeases', listing.leases.length + listing.corrupt.length);
    this.meter?.listLeases(listing.leases);
    return listing;
  }

  override async getLease(group: string, leaseKey: string): Promise<LeaseRecord | null> {
    this.#call('getLease');
    this.#read('getLease', 1);
    const lease = await super.getLease(group, leaseKey);
    this.meter?.getLease(leaseKey, lease);
    return lease;
  }

  override async getRoster(group: string): Promise<Roster> {
    this.#call('getRoster');
    const roster = await super.getRoster(group);
    this.#read('getRoster', roster.members.length + roster.corrupt.length);
    this.meter?.getRoster(roster.members);
    return roster;
  }

  override async putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    this.#call('putMember');
    this.counts.itemsWritten += 1;
    this.counts.memberWrites += 1;
    const outcome = await super.putMember(group, workerId, expectedVersion, next);
    this.meter?.putMember(workerId, expectedVersion, outcome);
    return outcome;
  }

  override async removeMember(group: string, workerId: string, expectedVersion: number): Promise<DeleteResult<MemberRecord>> {
    this.#call('removeMember');
    this.counts.itemsWritten += 1;
    this.counts.memberWrites += 1;
    const outcome = await super.removeMember(group, workerId, expectedVersion);
    this.meter?.removeMember(workerId, expectedVersion, outcome);
    return outcome;
  }

  override async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    this.#call('updateLeases');
    this.counts.itemsWritten += updates.length;
    this.counts.leaseWrites += updates.length;
    const outcomes = await super.updateLeases(group, updates);
    if (this.meter !== undefined) {
      this.meter.updateLeasesCall();
      outcomes.forEach((outcome, i) => this.meter!.leaseWrite('updateLeases', updates[i]!.leaseKey, outcome, false));
    }
    return outcomes;
  }

  override async createLease(lease: NewLease, options?: CreateLeaseOptions): Promise<WriteResult<LeaseRecord>> {
    this.#call('createLease');
    this.counts.itemsWritten += 1;
    this.counts.leaseWrites += 1;
    const outcome = await super.createLease(lease, options);
    this.meter?.leaseWrite('createLease', lease.leaseKey, outcome);
    return outcome;
  }

  override async deleteLease(group: string, leaseKey: string, expectedVersion: number): Promise<DeleteResult> {
    this.#call('deleteLease');
    this.counts.itemsWritten += 1;
    this.counts.leaseWrites += 1;
    const outcome = await super.deleteLease(group, leaseKey, expectedVersion);
    this.meter?.leaseWrite('deleteLease', leaseKey, outcome);
    return outcome;
  }
}

export interface Worker {
  coordinator: LeaseCoordinator;
  clock: VirtualClock;
  storage: CountingStorage;
  alive: boolean;
  /** Virtual time at which it started (its join tick). */
  startedAt: number;
  acquisitions: number;
}

export interface Cluster {
  scheduler: VirtualScheduler;
  store: MemoryStorage;
  keys: string[];
  workers: Worker[];
  random: Random;
  /** The sizes of the group's records, shared by the workers' meters (when metered). */
  ledger: Ledger;
  /** Adds a worker with its own clock, rate and latency; it starts at once (on virtual time). */
  add: () => Worker;
  live: () => Worker[];
}

export interface ClusterOptions {
  /** Workers start at random moments within this much virtual time. Default two take intervals. */
  startSpreadMs?: number;
  /** Unsafe switches for every coordinator, for the tests that show a switch brings its defect back. */
  unsafe?: CoordinatorUnsafe;
  /** Extra coordinator options (e.g. `useChangeFeed: false`). */
  coordinator?: Partial<LeaseCoordinatorOptions>;
  /** The worker id of the i-th worker added. Default `w<i>`. */
  workerId?: (index: number) => string;
  /** Bill every worker's calls as each backend would (each worker's `storage.meter`). Default false. */
  meter?: boolean;
  /**
   * Whether the store says whom each move of the roster digest named (`getRosterMoves`, which the memory
   * store has): `true` as Redis and PostgreSQL answer, `'dynamodb'` as a DynamoDB adapter keeping them in
   * slots would (no names where reading them by key costs more than the last whole read). Default false:
   * as an adapter without it (the DynamoDB adapter), and as every earlier run of this bench.
   */
  rosterMoves?: boolean | 'dynamodb';
  /**
   * Whether the store reads many leases by key in one call (`getLeases`, which the memory store has).
   * Default false: as an adapter without it, and as every earlier run of this bench.
   */
  leaseReads?: boolean;
  /** Each call's latency, in virtual ms, drawn from the worker's random source. Default 1-20 ms. */
  latencyMs?: (random: { next(): number }) => number;
  /** The failure domain of the i-th worker added (`failureDomain`). Default none. */
  failureDomain?: (index: number) => string;
}

/**
 * Unsafe switches for every coordinator of a run, from `BENCH_UNSAFE` (JSON, such as
 * `{"dueReadsSkipped":true}`): the same build run again with what a rule replaced, for a side-by-side
 * before and after. A name that is no switch is refused, so that a misspelt one never measures the rule.
 */
const BENCH_UNSAFE: CoordinatorUnsafe = parseBenchUnsafe(process.env.BENCH_UNSAFE);

function parseBenchUnsafe(text: string | undefined): CoordinatorUnsafe {
  if (text === undefined || text === '') return {};
  const parsed: unknown = JSON.parse(text);
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new Error(`BENCH_UNSAFE must be a JSON object of unsafe switches, got ${text}`);
  const known = new Set<string>(COORDINATOR_UNSAFE_KEYS);
  const unknown = Object.keys(parsed).filter((key) => !known.has(key));
  if (unknown.length > 0) throw new Error(`BENCH_UNSAFE names no unsafe switch of the coordinator: ${unknown.join(', ')}`);
  return parsed;
}

/** N workers sharing one MemoryStorage, each with its own clock (rate within ±MAX_DRIFT) and 1-20 ms latency. */
export async function cluster(seed: number, workerCount: number, leaseCount: number, options: ClusterOptions = {}): Promise<Cluster> {
  const random = seededRandom(seed);
  const scheduler = new VirtualScheduler();
  const memory = new MemoryStorage();
  const reads = options.leaseReads === true ? memory : withoutLeaseReads(memory);
  const store = options.rosterMoves === true || options.rosterMoves === 'dynamodb' ? reads : withoutRosterMoves(reads);
  const keys = Array.from({ length: leaseCount }, (_, i) => `shard-${String(i).padStart(6, '0')}`);
  for (const leaseKey of keys) await store.createLease({ group: GROUP, leaseKey });
  const workers: Worker[] = [];
  const ledger = new Ledger(GROUP);
  const workerId = options.workerId ?? ((index: number) => `w${index}`);
  const add = (): Worker => {
    const clock = new VirtualClock(scheduler, { rate: 1 + (random.next() * 2 - 1) * MAX_DRIFT, offsetMs: random.next() * 1e6 });
    const workerRandom = seededRandom(Math.floor(random.next() * 2 ** 32));
    const storage = new CountingStorage(store, clock, workerRandom, { ...noFaults(), latencyMs: options.latencyMs ?? ((r) => 1 + r.next() * 19) });
    if (options.meter === true) storage.meter = new Meter(ledger);
    storage.dynamodbMoves = options.rosterMoves === 'dynamodb';
    const failureDomain = options.failureDomain?.(workers.length);
    const coordinator = new LeaseCoordinator(
      withUnsafe({ ...options.coordinator, ...(failureDomain === undefined ? {} : { failureDomain }), storage, group: GROUP, workerId: workerId(workers.length), clock, random: workerRandom }, { ...BENCH_UNSAFE, ...options.unsafe }),
    );
    const worker: Worker = { coordinator, clock, storage, alive: true, startedAt: scheduler.now, acquisitions: 0 };
    coordinator.on('acquired', () => worker.acquisitions++);
    workers.push(worker);
    void coordinator.start().catch((error: unknown) => {
      throw new Error(`seed ${seed}: ${coordinator.workerId} failed to start`, { cause: error });
    });
    return worker;
  };
  const spread = options.startSpreadMs ?? 2 * TAKE_MS;
  for (let i = 0; i < workerCount; i++) scheduler.schedule(random.next() * spread, () => add());
  return { scheduler, store, keys, workers, random, ledger, add, live: () => workers.filter((worker) => worker.alive) };
}

/**
 * Advances virtual time until `predicate` holds; returns the simulated milliseconds it took, or null past
 * `capMs`. Precise: checked after every instant at which anything happened; otherwise every `stepMs`.
 */
export async function advanceUntil(
  scheduler: VirtualScheduler,
  predicate: () => boolean,
  { capMs = CAP_MS, precise = true, stepMs = 500 } = {},
): Promise<number | null> {
  const from = scheduler.now;
  let hitAt = predicate() ? from : -1;
  const check = (): void => {
    if (hitAt < 0 && predicate()) hitAt = scheduler.now;
  };
  while (hitAt < 0 && scheduler.now - from < capMs) {
    await scheduler.advance(stepMs, precise ? check : undefined);
    if (!precise) check();
  }
  return hitAt < 0 ? null : hitAt - from;
}

/** Every lease held by exactly one live worker, and max - min <= 1 leases per live worker. */
export function balanced(c: Cluster, workerCount = c.live().length): boolean {
  const live = c.live();
  if (live.length === 0 || live.length < workerCount) return false;
  let total = 0;
  let most = 0;
  let fewest = Infinity;
  const seen = new Set<string>();
  for (const worker of live) {
    const held = worker.coordinator.heldLeases();
    total += held.length;
    most = Math.max(most, held.length);
    fewest = Math.min(fewest, held.length);
    if (most - fewest > 1) return false;
    for (const lease of held) seen.add(lease.leaseKey);
  }
  // As many holdings as leases, and as many distinct leases: each lease held once.
  return total === c.keys.length && seen.size === total;
}

/** Starts the cluster and waits for balance, then a random while more (so the next event lands at a random phase). */
export async function settled(c: Cluster, workerCount: number): Promise<void> {
  const ready = await advanceUntil(c.scheduler, () => c.workers.length === workerCount && balanced(c), { precise: false });
  if (ready === null) throw new Error('the cluster never balanced before the measured event');
  await c.scheduler.advance(c.random.next() * LEASE_MS);
}

/** Ends a run: no timer of any worker fires again, so the run's scheduler and promises can be collected. */
export function dispose(c: Cluster): void {
  for (const worker of c.workers) worker.clock.kill();
}

/** The leases storage shows as owned by `worker` now. */
export async function ownedBy(c: Cluster, worker: Worker): Promise<string[]> {
  const { leases } = await c.store.listLeases(GROUP);
  return leases.filter((lease) => lease.owner === worker.coordinator.workerId).map((lease) => lease.leaseKey);
}

/** Whether every lease in `keys` is held by a live worker other than `gone`. */
export function heldElsewhere(c: Cluster, keys: readonly string[], gone: Worker): boolean {
  return keys.every((leaseKey) => c.live().some((worker) => worker !== gone && worker.coordinator.isHeld(leaseKey)));
}
