/**
 * `pnpm bench`: how fast leases move, in simulated time, with the default timing (leaseDurationMs 10,000,
 * takeIntervalMs 2,000, renew every third of the lease). Every run is seeded: request latency, clock rates
 * (within maxClockDrift), clock offsets and start offsets are drawn from the seed.
 *
 *   pnpm bench                 200 seeds per scenario
 *   pnpm bench --seeds 50      fewer, for a quick look
 *
 * Prints p50/p99 in multiples of leaseDurationMs beside KCL's figures, and writes bench/results/lease-coordinator.json.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { LeaseCoordinator, MemoryStorage, seededRandom, type Random } from '../src/index.js';
import { FaultyStorage, noFaults, VirtualClock, VirtualScheduler } from '../src/testing/index.js';

const GROUP = 'bench';
const LEASE_MS = 10_000;
const TAKE_MS = 2_000;
const MAX_DRIFT = 0.01;
/** Give up waiting for a condition after this much simulated time (counted as a failure). */
const CAP_MS = 20 * LEASE_MS;

// ------------------------------------------------------------------------------------------ the cluster

/** A FaultyStorage that counts list calls: the coordinator lists once per take tick. */
class CountingStorage extends FaultyStorage {
  lists = 0;
  override listLeases(group: string): ReturnType<FaultyStorage['listLeases']> {
    this.lists++;
    return super.listLeases(group);
  }
}

interface Worker {
  coordinator: LeaseCoordinator;
  clock: VirtualClock;
  storage: CountingStorage;
  alive: boolean;
}

interface Cluster {
  scheduler: VirtualScheduler;
  store: MemoryStorage;
  keys: string[];
  workers: Worker[];
  random: Random;
  /** Adds a worker with its own clock, rate and latency; it starts at once (on virtual time). */
  add: () => Worker;
  live: () => Worker[];
}

/** N workers sharing one MemoryStorage, each with its own clock (rate within ±MAX_DRIFT) and 1-20 ms latency. */
async function cluster(seed: number, workerCount: number, leaseCount: number): Promise<Cluster> {
  const random = seededRandom(seed);
  const scheduler = new VirtualScheduler();
  const store = new MemoryStorage();
  const keys = Array.from({ length: leaseCount }, (_, i) => `shard-${i}`);
  for (const leaseKey of keys) await store.createLease({ group: GROUP, leaseKey });
  const workers: Worker[] = [];
  const add = (): Worker => {
    const clock = new VirtualClock(scheduler, { rate: 1 + (random.next() * 2 - 1) * MAX_DRIFT, offsetMs: random.next() * 1e6 });
    const workerRandom = seededRandom(Math.floor(random.next() * 2 ** 32));
    const storage = new CountingStorage(store, clock, workerRandom, { ...noFaults(), latencyMs: (r) => 1 + r.next() * 19 });
    const coordinator = new LeaseCoordinator({ storage, group: GROUP, workerId: `w${workers.length}`, clock, random: workerRandom });
    const worker = { coordinator, clock, storage, alive: true };
    workers.push(worker);
    void coordinator.start().catch((error: unknown) => {
      throw new Error(`seed ${seed}: ${coordinator.workerId} failed to start`, { cause: error });
    });
    return worker;
  };
  // Start offsets: each worker starts at a random moment of the first two take intervals.
  for (let i = 0; i < workerCount; i++) scheduler.schedule(random.next() * 2 * TAKE_MS, () => add());
  return { scheduler, store, keys, workers, random, add, live: () => workers.filter((worker) => worker.alive) };
}

/**
 * Advances virtual time until `predicate` holds; returns the simulated milliseconds it took, or null past
 * `capMs`. Precise: checked after every instant at which anything happened; otherwise every 500 ms (cheaper).
 */
async function advanceUntil(scheduler: VirtualScheduler, predicate: () => boolean, { capMs = CAP_MS, precise = true } = {}): Promise<number | null> {
  const from = scheduler.now;
  let hitAt = predicate() ? from : -1;
  const check = (): void => {
    if (hitAt < 0 && predicate()) hitAt = scheduler.now;
  };
  while (hitAt < 0 && scheduler.now - from < capMs) {
    await scheduler.advance(500, precise ? check : undefined);
    if (!precise) check();
  }
  return hitAt < 0 ? null : hitAt - from;
}

/** Every lease held by exactly one live worker, and max - min <= 1 leases per live worker. */
function balanced(c: Cluster): boolean {
  const live = c.live();
  if (live.length === 0) return false;
  const held = live.map((worker) => worker.coordinator.heldLeases().map((lease) => lease.leaseKey));
  const counts = held.map((keys) => keys.length);
  const total = counts.reduce((sum, count) => sum + count, 0);
  // As many holdings as leases, and as many distinct leases: each lease held once.
  return total === c.keys.length && new Set(held.flat()).size === total && Math.max(...counts) - Math.min(...counts) <= 1;
}

/** Starts the cluster, waits for balance, then a random while more (so the next event lands at a random phase). */
async function settled(c: Cluster, workerCount: number): Promise<void> {
  const ready = await advanceUntil(c.scheduler, () => c.workers.length === workerCount && balanced(c), { precise: false });
  if (ready === null) throw new Error('the cluster never balanced before the measured event');
  await c.scheduler.advance(c.random.next() * LEASE_MS);
}

/** Ends a run: no timer of any worker fires again, so the run's scheduler and promises can be collected. */
function dispose(c: Cluster): void {
  for (const worker of c.workers) worker.clock.kill();
}

/** The leases storage shows as owned by `worker` now. */
async function ownedBy(c: Cluster, worker: Worker): Promise<string[]> {
  const { leases } = await c.store.listLeases(GROUP);
  return leases.filter((lease) => lease.owner === worker.coordinator.workerId).map((lease) => lease.leaseKey);
}

/** Whether every lease in `keys` is held by a live worker other than `gone`. */
function heldElsewhere(c: Cluster, keys: readonly string[], gone: Worker): boolean {
  return keys.every((leaseKey) => c.live().some((worker) => worker !== gone && worker.coordinator.isHeld(leaseKey)));
}

// ------------------------------------------------------------------------------------------ the scenarios

interface Sample {
  /** Simulated ms from the event until the measured condition held, or null if it never did within the cap. */
  ms: number | null;
  /** Simulated ms from the event until the assignment was balanced again. */
  balancedMs: number | null;
  /** Join only: the joiner's take ticks, the leases moved, and the fewest moves that balance. */
  takeTicks?: number;
  moved?: number;
  minimumMoves?: number;
}

/** 4 workers, 32 leases; one is killed at a random moment after balance. Until its leases are held elsewhere. */
async function crash(seed: number): Promise<Sample> {
  const c = await cluster(seed, 4, 32);
  try {
    await settled(c, 4);
    const victim = c.workers[Math.floor(c.random.next() * c.workers.length)]!;
    const orphans = await ownedBy(c, victim);
    victim.clock.kill();
    victim.alive = false;
    const ms = await advanceUntil(c.scheduler, () => heldElsewhere(c, orphans, victim));
    const rest = await advanceUntil(c.scheduler, () => balanced(c));
    return { ms, balancedMs: ms === null || rest === null ? null : ms + rest };
  } finally {
    dispose(c);
  }
}

/** 4 workers, 32 leases; one calls stop() at a random moment after balance. Until its leases are held elsewhere. */
async function gracefulStop(seed: number): Promise<Sample> {
  const c = await cluster(seed, 4, 32);
  try {
    await settled(c, 4);
    const leaving = c.workers[Math.floor(c.random.next() * c.workers.length)]!;
    const orphans = await ownedBy(c, leaving);
    leaving.alive = false; // no longer counts as a holder: its leases must be held by the others
    void leaving.coordinator.stop();
    const ms = await advanceUntil(c.scheduler, () => heldElsewhere(c, orphans, leaving));
    const rest = await advanceUntil(c.scheduler, () => balanced(c));
    return { ms, balancedMs: ms === null || rest === null ? null : ms + rest };
  } finally {
    dispose(c);
  }
}

/** 10 workers hold 100 leases; an 11th joins at a random moment. Until balanced, with the joiner's ticks and the moves. */
async function join(seed: number): Promise<Sample> {
  const workers = 10;
  const leases = 100;
  const c = await cluster(seed, workers, leases);
  try {
    await settled(c, workers);
    let moved = 0;
    for (const worker of c.workers) worker.coordinator.on('acquired', () => moved++);
    const joiner = c.add();
    joiner.coordinator.on('acquired', () => moved++);
    const ms = await advanceUntil(c.scheduler, () => balanced(c));
    // Balanced means the joiner holds floor(100 / 11) = 9 (or 10): each of those is one move at least.
    const minimumMoves = Math.floor(leases / (workers + 1));
    return { ms, balancedMs: ms, takeTicks: joiner.storage.lists, moved, minimumMoves };
  } finally {
    dispose(c);
  }
}

// ------------------------------------------------------------------------------------------ figures

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

interface Summary {
  n: number;
  failures: number;
  p50: number;
  p99: number;
  min: number;
  max: number;
}

function summarize(values: ReadonlyArray<number | null | undefined>): Summary {
  const sorted = values.filter((value): value is number => typeof value === 'number').sort((a, b) => a - b);
  return {
    n: sorted.length,
    failures: values.length - sorted.length,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    min: sorted[0] ?? NaN,
    max: sorted[sorted.length - 1] ?? NaN,
  };
}

const inLeases = (ms: number): number => ms / LEASE_MS;
const fmt = (value: number, digits = 2): string => (Number.isFinite(value) ? value.toFixed(digits) : '-');

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { seeds: { type: 'string', default: '200' }, from: { type: 'string', default: '1' } } });
  const seeds = Array.from({ length: Number(values.seeds) }, (_, i) => Number(values.from) + i);
  const started = performance.now();
  const runs: Record<string, Sample[]> = { crash: [], gracefulStop: [], join: [] };
  for (const seed of seeds) {
    runs.crash!.push(await crash(seed));
    runs.gracefulStop!.push(await gracefulStop(seed + 1_000_000));
    runs.join!.push(await join(seed + 2_000_000));
  }
  const wallSeconds = (performance.now() - started) / 1_000;

  const crashTake = summarize(runs.crash!.map((s) => s.ms));
  const crashBalance = summarize(runs.crash!.map((s) => s.balancedMs));
  const stopTake = summarize(runs.gracefulStop!.map((s) => s.ms));
  const stopBalance = summarize(runs.gracefulStop!.map((s) => s.balancedMs));
  const joinBalance = summarize(runs.join!.map((s) => s.ms));
  const joinTicks = summarize(runs.join!.map((s) => s.takeTicks));
  const joinMoved = summarize(runs.join!.map((s) => s.moved));
  const minimumMoves = runs.join![0]?.minimumMoves ?? 9;

  // KCL, as the comparison states it: a crashed worker's leases are taken 10 to 30 s later (1 to 3 ×
  // leaseDuration), one lease is stolen per 20 s tick, and a gracefully stopped worker's leases wait for expiry.
  const kclJoin = (minimumMoves * 20_000) / LEASE_MS;
  const rows: Array<{ scenario: string; s: Summary; kcl: string; ratio: string; unit?: string }> = [
    { scenario: 'crash: leases held elsewhere (4 w, 32 l)', s: crashTake, kcl: '1-3', ratio: ratioRange(crashTake.p50, 1, 3) },
    { scenario: 'crash: balanced again', s: crashBalance, kcl: '', ratio: '' },
    { scenario: 'stop(): leases held elsewhere (4 w, 32 l)', s: stopTake, kcl: '1-3', ratio: ratioRange(stopTake.p50, 1, 3) },
    { scenario: 'stop(): balanced again', s: stopBalance, kcl: '', ratio: '' },
    { scenario: 'join 10 w / 100 l: balanced', s: joinBalance, kcl: fmt(kclJoin, 0), ratio: fmt(inLeases(joinBalance.p50) / kclJoin, 4) },
  ];
  const header = ['scenario (x leaseDuration)', 'p50', 'p99', 'max', 'fail', 'KCL', 'ours/KCL (p50)'];
  const table = rows.map((row) => [
    row.scenario,
    fmt(inLeases(row.s.p50), 3),
    fmt(inLeases(row.s.p99), 3),
    fmt(inLeases(row.s.max), 3),
    String(row.s.failures),
    row.kcl,
    row.ratio,
  ]);
  // The joiner's take ticks include the ones the change feed woke early (each handoff wakes it), not only the 2 s ones.
  table.push(['join: joiner take ticks (count)', fmt(joinTicks.p50, 0), fmt(joinTicks.p99, 0), fmt(joinTicks.max, 0), String(joinTicks.failures), `${minimumMoves}`, fmt(joinTicks.p50 / minimumMoves, 2)]);
  table.push(['join: leases moved (count)', fmt(joinMoved.p50, 0), fmt(joinMoved.p99, 0), fmt(joinMoved.max, 0), String(joinMoved.failures), `min ${minimumMoves}`, fmt(joinMoved.p50 / minimumMoves, 2) + ' x min']);
  const widths = header.map((title, i) => Math.max(title.length, ...table.map((line) => line[i]!.length)));
  const line = (cells: readonly string[]): string => cells.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  ');
  console.log(`lease coordinator, simulated time, ${seeds.length} seeds per scenario (leaseDuration ${LEASE_MS} ms, take every ${TAKE_MS} ms, renew every ${(LEASE_MS / 3).toFixed(0)} ms, latency 1-20 ms, clock rates 1 ± ${MAX_DRIFT})`);
  console.log(line(header));
  for (const cells of table) console.log(line(cells));
  console.log(`KCL: a crashed worker's leases are taken 10 to 30 s later (1 to 3 x leaseDuration), one lease is stolen per 20 s tick (join: ${minimumMoves} x 20 s = ${kclJoin} x leaseDuration), and a gracefully stopped worker's leases wait for expiry (1 to 3 x leaseDuration).`);
  console.log(`(${wallSeconds.toFixed(1)} s of wall time)`);

  const results = {
    timing: { leaseDurationMs: LEASE_MS, takeIntervalMs: TAKE_MS, renewIntervalMs: LEASE_MS / 3, maxClockDrift: MAX_DRIFT, latencyMs: [1, 20] },
    seeds: { from: seeds[0], count: seeds.length },
    unit: 'ms of simulated time; *InLeases fields in multiples of leaseDurationMs',
    scenarios: {
      crash: { workers: 4, leases: 32, heldElsewhere: withLeases(crashTake), balancedAgain: withLeases(crashBalance), kclInLeases: [1, 3] },
      gracefulStop: { workers: 4, leases: 32, heldElsewhere: withLeases(stopTake), balancedAgain: withLeases(stopBalance), kclInLeases: [1, 3] },
      join: {
        workers: 10,
        leases: 100,
        balanced: withLeases(joinBalance),
        joinerTakeTicks: joinTicks,
        leasesMoved: joinMoved,
        minimumMoves,
        kclInLeases: kclJoin,
        ratioP50: inLeases(joinBalance.p50) / kclJoin,
      },
    },
    samples: Object.fromEntries(Object.entries(runs).map(([name, samples]) => [name, samples])),
    wallSeconds,
  };
  const dir = new URL('./results/', import.meta.url);
  mkdirSync(dir, { recursive: true });
  writeFileSync(new URL('lease-coordinator.json', dir), JSON.stringify(results, null, 2) + '\n');
  const failures = crashTake.failures + stopTake.failures + joinBalance.failures;
  if (failures > 0) {
    console.error(`${failures} runs did not reach their condition within ${CAP_MS / LEASE_MS} x leaseDuration`);
    process.exitCode = 1;
  }
}

/** ours / KCL against both ends of KCL's range. */
function ratioRange(oursMs: number, kclLow: number, kclHigh: number): string {
  return `${fmt(inLeases(oursMs) / kclHigh, 3)}-${fmt(inLeases(oursMs) / kclLow, 3)}`;
}

function withLeases(s: Summary): Summary & { p50InLeases: number; p99InLeases: number } {
  return { ...s, p50InLeases: inLeases(s.p50), p99InLeases: inLeases(s.p99) };
}

await main();
