/**
 * The scale benchmark with its coordinators spread over processes, as real workers are: 100 lease
 * coordinators sharing 10,000 leases, in `--processes` child processes (default 4, each holding an equal
 * part: `scale-child.ts`, with its own storage clients), against each real backend (PostgreSQL on
 * 127.0.0.1:5432 database `test`, Redis on 127.0.0.1:6379, and one dynalite started by this process), in
 * real time with the default timing (lease 10,000 ms, heartbeat 6,500 ms, take tick 2,000 ms).
 *
 * Per backend:
 * 1. Cold start: the leases are created, every child builds its coordinators, and all start at once. The
 *    time until every lease is held by exactly one worker with max - min <= 1 per worker, from the start,
 *    from the last join, and in take ticks after the last join; and the acquisitions per lease.
 * 2. Steady state for `--steady` seconds (default 60), from 10 s after balance: storage calls and items
 *    per second, counted as `scale.ts` counts them, and the children's CPU.
 * 3. Crash take-over: the child holding the last workers is killed with SIGKILL, then (with 3 or more
 *    processes) the child holding `worker-000`, the worker whose id sorts first (rank 0 of the group's deal
 *    order). Each child holds a contiguous part of the workers, or with `--assign shuffled` a part of
 *    them shuffled by `--assign-seed`: the ring is a hash of the ids, so the contiguous parts always leave
 *    the same member (worker-076) with all three of its watchers in the first crash's process. For each lease the killed child held (asked just before the kill), the time from the kill
 *    until a live worker acquired it: p50, p99 and max in lease durations, split into when its owner was
 *    first declared dead and the time from that declaration to the take; then the time until the
 *    survivors are balanced again. `--crashes 1` runs the first only, `--crashes 0` neither.
 * 4. Graceful stops (`--stops`, default 1): one worker of the first live process calls `stop()`. The time
 *    from the call until each of its leases was acquired by a live worker (p50 and max, in milliseconds),
 *    and from the call to five take ticks after it (or to balance, if later) the survivors' listings of
 *    the group and the items they read: without a change feed (`--no-change-feed`, every backend runs its
 *    coordinators without the store's feed, as on DynamoDB) nothing but the stopping worker's leave tells a
 *    recipient which leases it was handed.
 * 5. Joins (`--joins`, default 0): a worker under an id new to the group starts in the first live
 *    process. The time from its start until the group is balanced with it, and from its start to five take
 *    ticks after it (or to balance, if later) the listings of the group and the items read by every worker,
 *    the joiner's one listing among them.
 *
 * 6. A rolling restart (`--rolling`, default 0 restarts; `--rolling-every`, default 6 s), as a deploy
 *    makes one: every `--rolling-every` seconds the longest-running worker calls `stop()` and a worker under
 *    a new id starts in the same process. Over the restarts' window, per live worker: the whole roster
 *    reads (`getRoster`) and the listings of the group a minute, the items read a second, beside the steady
 *    window's; per stop, the time from `stop()` until each of its leases was acquired by a live worker; and
 *    the time from the last restart until the group is balanced again.
 *
 * Every phase is given a time limit (`--limit`, default 600 s, for the cold start; `--crash-limit`,
 * default 120 s, for each crash, from the kill to the survivors' balance) and reports where it stood when
 * it ran out. The parent knows who holds what from the children's lease events
 * (acquired, lost, handed off, released), stamped with the wall clock every process shares, and checks a
 * balance it saw against the children's own lists of what they hold.
 *
 *   pnpm --filter @leasehold/e2e bench:scale-procs                               all three backends
 *   pnpm --filter @leasehold/e2e bench:scale-procs -- --backend redis --label before
 *
 * Writes bench/results/scale-procs-<label>.json (label default `run`).
 */
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism, getPriority, loadavg } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { seededRandom, shuffled, watchersOf } from '@leasehold/core/testing';
import { WorkerProcess } from '../src/cluster.js';
import { now } from '../src/reports.js';
import { BACKENDS, createLeases, OPEN, runId, type Backend, type Opened } from './backends.js';
import { addTallies, balance, type Balance, type LoopDelay, type Tally } from './counting.js';
import type { ChildEvent, Collected, FromChild, ToChild } from './scale-child.js';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';

/** The coordinators' default timing, which this bench does not change. */
const LEASE_DURATION_MS = 10_000;
const TAKE_TICK_MS = 2_000;
/** How many members watch each member's liveness (the default). */
const WATCHERS = 3;

const { values } = parseArgs({
  options: {
    backend: { type: 'string', multiple: true },
    workers: { type: 'string', default: '100' },
    leases: { type: 'string', default: '10000' },
    processes: { type: 'string', default: '4' },
    steady: { type: 'string', default: '60' },
    limit: { type: 'string', default: '600' },
    'crash-limit': { type: 'string', default: '120' },
    crashes: { type: 'string', default: '2' },
    assign: { type: 'string', default: 'contiguous' },
    'assign-seed': { type: 'string', default: '1' },
    label: { type: 'string', default: 'run' },
    stops: { type: 'string', default: '1' },
    joins: { type: 'string', default: '0' },
    rolling: { type: 'string', default: '0' },
    'rolling-every': { type: 'string', default: '6' },
    'no-change-feed': { type: 'boolean', default: false },
  },
});

function wholeNumber(name: string, raw: string, least: number): number {
  const n = Number(raw);
  if (!Number.isInteger(n) || n < least) throw new RangeError(`--${name} must be a whole number of at least ${least}, not ${JSON.stringify(raw)}`);
  return n;
}
const WORKERS = wholeNumber('workers', values.workers, 2);
const LEASES = wholeNumber('leases', values.leases, 1);
const PROCESSES = wholeNumber('processes', values.processes, 2);
const STEADY_S = wholeNumber('steady', values.steady, 1);
const LIMIT_S = wholeNumber('limit', values.limit, 1);
const CRASH_LIMIT_S = wholeNumber('crash-limit', values['crash-limit'], 1);
/** How many graceful stops to run after the crashes, one worker each. */
const STOPS = wholeNumber('stops', values.stops, 0);
/** How many workers to add after the stops, one at a time, each under a new id. */
const JOINS = wholeNumber('joins', values.joins, 0);
const NO_FEED = values['no-change-feed'];
/** How many restarts the rolling restart makes, and how many seconds apart. */
const ROLLING = wholeNumber('rolling', values.rolling, 0);
const ROLLING_EVERY_S = wholeNumber('rolling-every', values['rolling-every'], 1);
/** How many of the two crashes to run: 0 measures the cold start and the steady window only. */
const CRASHES = wholeNumber('crashes', values.crashes, 0);
if (CRASHES > 2) throw new RangeError(`--crashes must be 0, 1 or 2, not ${CRASHES}`);
/**
 * Which workers each process holds: `contiguous` (worker-000.. in the first, and so on), or `shuffled`
 * by `--assign-seed`. The ring is a hash of the ids, so contiguous parts always leave the same members
 * with all their watchers in the first crash's process; shuffled ones draw other crashes.
 */
if (values.assign !== 'contiguous' && values.assign !== 'shuffled') throw new RangeError(`--assign must be contiguous or shuffled, not ${JSON.stringify(values.assign)}`);
const ASSIGN_SEED = wholeNumber('assign-seed', values['assign-seed'], 0);
const ORDER = values.assign === 'shuffled' ? shuffled(Array.from({ length: WORKERS }, (_, i) => i), seededRandom(ASSIGN_SEED)) : Array.from({ length: WORKERS }, (_, i) => i);
if (PROCESSES > WORKERS) throw new RangeError(`--processes (${PROCESSES}) must not exceed --workers (${WORKERS})`);
if (!/^[\w.-]+$/.test(values.label)) throw new RangeError(`--label must be letters, digits, '.', '_' or '-', not ${JSON.stringify(values.label)}`);
for (const backend of values.backend ?? []) {
  if (!BACKENDS.includes(backend as Backend)) throw new RangeError(`--backend must be one of ${BACKENDS.join(', ')}, not ${JSON.stringify(backend)}`);
}
const backends = (values.backend ?? BACKENDS) as Backend[];
const log = (line: string): void => void process.stdout.write(`${line}\n`);
const workerId = (i: number): string => `worker-${String(i).padStart(3, '0')}`;

const PACKAGE_DIR = fileURLToPath(new URL('..', import.meta.url));
/**
 * Each process is its coordinators' failure domain (`failureDomain`: the watchers' ring spreads each
 * process's members, so that a process killed leaves none of its members without a live watcher), unless
 * BENCH_NO_DOMAINS=1 runs them without, as every run of this bench before, for a side-by-side run.
 */
const NO_DOMAINS = process.env.BENCH_NO_DOMAINS === '1';
/** Each worker's process, the failure domain it names (by worker id). */
const processOf = new Map<string, string>();
const CHILD = fileURLToPath(new URL('./scale-child.ts', import.meta.url));

// ------------------------------------------------------------------------------------------ CPU

/** The machine's busy and total CPU time so far, in seconds (from /proc/stat; zeros where there is none). */
function machineCpu(): { busy: number; total: number } {
  try {
    const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
    const total = fields.reduce((sum, n) => sum + n, 0);
    const idle = (fields[3] ?? 0) + (fields[4] ?? 0);
    return { busy: (total - idle) / 100, total: total / 100 };
  } catch {
    return { busy: 0, total: 0 };
  }
}

/** A process's CPU time so far, in seconds (from /proc; 0 where there is none). */
function processCpu(pid: number | undefined): number {
  if (pid === undefined) return 0;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return 0;
  }
}

// ------------------------------------------------------------------------------------------ children

/** One child process and the requests it answers. */
class Child {
  readonly workers: number[];
  readonly #replies = new Map<string, Array<(message: FromChild) => void>>();

  constructor(
    readonly index: number,
    readonly process: WorkerProcess,
    workers: readonly number[],
    onMessage: (message: FromChild) => void,
  ) {
    this.workers = [...workers].sort((a, b) => a - b);
    process.child.on('message', (message: FromChild) => {
      const waiting = this.#replies.get(message.type)?.shift();
      if (waiting) waiting(message);
      onMessage(message);
    });
  }

  send(message: ToChild): void {
    this.process.child.send(message);
  }

  /** Sends `message` and resolves with the child's next message of type `reply`. */
  request<T extends FromChild>(message: ToChild, reply: T['type'], timeoutMs = 60_000): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`child ${this.index} did not answer ${message.type} within ${timeoutMs} ms:\n${this.process.stderr}`)), timeoutMs);
      const queue = this.#replies.get(reply) ?? [];
      queue.push((answer) => {
        clearTimeout(timer);
        resolve(answer as T);
      });
      this.#replies.set(reply, queue);
      this.send(message);
    });
  }
}

// ------------------------------------------------------------------------------------------ one run

interface Window {
  seconds: number;
  tally: Tally;
  calls: number;
  callsPerSecond: Record<string, number>;
  itemsReadPerSecond: number;
  itemsWrittenPerSecond: number;
  /** The coordinators' processes' CPU time, in cores (1 = one core busy all the window). */
  childrenCores: number;
  /** The whole machine's busy CPU, in cores (every process: children, backend, anything else running). */
  machineCores: number;
  /** The emulator's CPU, in cores, when this run started it (dynalite). */
  serverCores: number | null;
  /** The worst child's event-loop delay. */
  eventLoopDelayP99Ms: number;
  eventLoopDelayMaxMs: number;
  /** Leases the live workers lost, by reason, and the errors they reported, by `operation: name`. */
  lostByReason: Record<string, number>;
  errors: Record<string, number>;
  loadAverageAtEnd: number;
}

/** The leases lost and the errors of a window, when there were any. */
const troubles = (window: Window): string =>
  (Object.keys(window.lostByReason).length > 0 ? `; lost ${JSON.stringify(window.lostByReason)}` : '') +
  (Object.keys(window.errors).length > 0 ? `; errors ${JSON.stringify(window.errors)}` : '');

/** Stops the current run's children and drops its records: on the way out of `run`, or on SIGINT/SIGTERM. */
let cleanUp: (() => Promise<void>) | null = null;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => void (cleanUp?.() ?? Promise.resolve()).finally(() => process.exit(130)));
}

const percentile = (sorted: readonly number[], q: number): number => sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)] ?? NaN;
const round = (n: number, digits = 3): number => Number(n.toFixed(digits));

async function run(backend: Backend): Promise<Record<string, unknown>> {
  const opened: Opened = await OPEN[backend]();
  const group = `scale-${runId}`;
  const children: Child[] = [];
  /** The leases each live worker holds, by its index, as its lease events say. */
  const held = new Map<number, Set<string>>();
  const killed = new Set<number>();
  const firstJoin = new Map<number, number>();
  /** Each worker's first acquisition: when the cold start's deal reached it. */
  const firstAcquired = new Map<number, number>();
  const memberDead: Array<{ dead: string; at: number; by: number }> = [];
  const fatal: string[] = [];
  let acquisitions = 0;
  let lastEventAt = 0;
  let lost = new Map<string, number>();
  let errors = new Map<string, number>();
  const bump = (counts: Map<string, number>, key: string): void => void counts.set(key, (counts.get(key) ?? 0) + 1);
  let onAcquired: ((worker: number, leaseKey: string, at: number) => void) | null = null;
  let onWritten: ((leaseKey: string, at: number, to: string) => void) | null = null;

  const apply = ([kind, worker, subject, at, detail]: ChildEvent): void => {
    if (kind === 'written') {
      onWritten?.(subject, at, detail ?? '');
      return;
    }
    if (killed.has(worker)) return;
    lastEventAt = Math.max(lastEventAt, at);
    const mine = held.get(worker)!;
    switch (kind) {
      case 'acquired':
        mine.add(subject);
        acquisitions++;
        if (!firstAcquired.has(worker)) firstAcquired.set(worker, at);
        onAcquired?.(worker, subject, at);
        return;
      case 'lost':
        mine.delete(subject);
        bump(lost, detail ?? 'unknown');
        return;
      case 'error':
        bump(errors, subject);
        return;
      case 'handed-off':
      case 'released':
        mine.delete(subject);
        return;
      case 'joined':
        if (!firstJoin.has(worker)) firstJoin.set(worker, at);
        return;
      case 'member-dead':
        memberDead.push({ dead: subject, at, by: worker });
        return;
    }
  };
  const onMessage = (message: FromChild): void => {
    if (message.type === 'events') for (const event of message.events) apply(event);
    if (message.type === 'fatal') fatal.push(`${message.worker}: ${message.message}`);
  };
  const standing = (): Balance => balance(held.values(), LEASES);
  const live = (): Child[] => children.filter((child) => child.process.running);

  /** Every live child's counts since the previous call, summed, over the time since `from`. */
  let windowFrom = { at: now(), machine: machineCpu(), server: processCpu(opened.serverPid) };
  const collect = async (): Promise<Window> => {
    const answers = await Promise.all(live().map((child) => child.request<Collected>({ type: 'collect' }, 'collected')));
    const at = now();
    const machine = machineCpu();
    const server = processCpu(opened.serverPid);
    const seconds = (at - windowFrom.at) / 1_000;
    const tally = addTallies(answers.map((answer) => answer.tally));
    const delays: LoopDelay[] = answers.map((answer) => answer.eventLoopDelay);
    const window: Window = {
      seconds: round(seconds, 1),
      tally,
      calls: Object.values(tally.calls).reduce((sum, n) => sum + n, 0),
      callsPerSecond: Object.fromEntries(Object.entries(tally.calls).map(([name, n]) => [name, round(n / seconds, 2)])),
      itemsReadPerSecond: round(tally.itemsRead / seconds, 1),
      itemsWrittenPerSecond: round(tally.itemsWritten / seconds, 1),
      childrenCores: round(answers.reduce((sum, answer) => sum + answer.cpuSeconds, 0) / seconds, 2),
      machineCores: machine.total === 0 ? NaN : round(((machine.busy - windowFrom.machine.busy) / (machine.total - windowFrom.machine.total)) * availableParallelism(), 2),
      serverCores: opened.serverPid === undefined ? null : round((server - windowFrom.server) / seconds, 2),
      eventLoopDelayP99Ms: round(Math.max(...delays.map((d) => d.p99Ms)), 1),
      eventLoopDelayMaxMs: round(Math.max(...delays.map((d) => d.maxMs)), 1),
      lostByReason: Object.fromEntries(lost),
      errors: Object.fromEntries(errors),
      loadAverageAtEnd: round(loadavg()[0]!, 1),
    };
    windowFrom = { at, machine, server };
    lost = new Map();
    errors = new Map();
    return window;
  };

  /** Waits until `done` holds or `limitS` passed since `from`, logging where it stands every 15 s. */
  const waitUntil = async (done: () => boolean, from: number, limitS: number, what: () => string): Promise<boolean> => {
    let loggedAt = now();
    while (now() - from < limitS * 1_000) {
      if (done()) return true;
      if (now() - loggedAt >= 15_000) {
        loggedAt = now();
        log(`${backend}:   ${((loggedAt - from) / 1_000).toFixed(0)} s: ${what()}`);
      }
      await sleep(250);
    }
    return done();
  };
  const where = (): string => {
    const s = standing();
    return (
      `held ${s.held} of ${LEASES}, ${s.fewest}-${s.most} per worker; ${acquisitions} acquisitions; ${firstJoin.size} joined` +
      (lost.size > 0 ? `; lost ${JSON.stringify(Object.fromEntries(lost))}` : '') +
      (errors.size > 0 ? `; errors ${JSON.stringify(Object.fromEntries(errors))}` : '') +
      (fatal.length > 0 ? `; fatal ${fatal.length}` : '')
    );
  };
  /** Whether the children's own lists agree with the events: every lease held once, as the events say. */
  const confirm = async (): Promise<boolean> => {
    const lists = await Promise.all(live().map((child) => child.request<{ type: 'held'; held: Record<string, string[]>; heartbeats: Record<string, number> }>({ type: 'held' }, 'held')));
    const all = lists.flatMap((list) => Object.values(list.held));
    return balance(all, LEASES).ok;
  };

  cleanUp = async () => {
    cleanUp = null;
    await Promise.all(children.map((child) => child.process.stop(15_000)));
    await opened.close();
  };
  try {
    const createdAt = now();
    await createLeases(opened.storage, group, LEASES);
    log(`${backend}: ${LEASES} leases created in ${((now() - createdAt) / 1_000).toFixed(1)} s`);

    // The children, each with an equal part of the workers (the first ones one more when it does not divide).
    let next = 0;
    for (let index = 0; index < PROCESSES; index++) {
      const count = Math.floor(WORKERS / PROCESSES) + (index < WORKERS % PROCESSES ? 1 : 0);
      const child = spawn(
        process.execPath,
        ['--import', 'tsx', CHILD, '--location', JSON.stringify(opened.location), '--group', group, '--workers', ORDER.slice(next, next + count).join(','), ...(NO_FEED ? ['--no-change-feed'] : []), ...(NO_DOMAINS ? [] : ['--domain', `process-${index}`])],
        { cwd: PACKAGE_DIR, env: { ...process.env, TSX_TSCONFIG_PATH: `${PACKAGE_DIR}tsconfig.json` }, stdio: ['ignore', 'inherit', 'pipe', 'ipc'] },
      );
      children.push(new Child(index, new WorkerProcess(`process-${index}`, child), ORDER.slice(next, next + count), onMessage));
      for (const worker of ORDER.slice(next, next + count)) processOf.set(workerId(worker), `process-${index}`);
      for (const i of ORDER.slice(next, next + count)) held.set(i, new Set());
      next += count;
    }
    await Promise.all(
      children.map(
        (child) =>
          new Promise<void>((resolve, reject) => {
            child.process.child.on('message', (message: FromChild) => message.type === 'ready' && resolve());
            void child.process.exited.then(() => reject(new Error(`child ${child.index} exited before it was ready:\n${child.process.stderr}`)));
          }),
      ),
    );
    log(`${backend}: ${PROCESSES} processes ready, ${children.map((child) => child.workers.length).join(' + ')} coordinators`);

    // 1. Cold start.
    await collect();
    const startedAt = now();
    for (const child of children) child.send({ type: 'go' });
    let balanced = await waitUntil(() => standing().ok, startedAt, LIMIT_S, where);
    const balancedAt = lastEventAt;
    const coldWindow = await collect();
    const confirmed = balanced ? await confirm() : false;
    // Events that said balanced while the children's own lists did not (a lease lost and taken back, its
    // events not yet flushed): not balanced, and not a wait that ran out either.
    const unconfirmed = balanced && !confirmed;
    if (unconfirmed) log(`${backend}: the events said balanced, the children's own lists do not agree`);
    balanced &&= confirmed;
    const lastJoinAt = Math.max(...firstJoin.values());
    // When each worker first held a lease, after the last join: whether the deal was late for everyone or for a few.
    const firstTakes = [...firstAcquired.values()].map((at) => (at - lastJoinAt) / 1_000).sort((a, b) => a - b);
    const firstTakeSeconds = { first: round(firstTakes[0] ?? NaN, 2), p50: round(percentile(firstTakes, 0.5), 2), p90: round(percentile(firstTakes, 0.9), 2), last: round(firstTakes.at(-1) ?? NaN, 2) };
    const cold = {
      balanced,
      limitSeconds: LIMIT_S,
      secondsToBalanced: balanced ? round((balancedAt - startedAt) / 1_000, 2) : null,
      lastJoinSeconds: firstJoin.size > 0 ? round((lastJoinAt - startedAt) / 1_000, 2) : null,
      secondsAfterLastJoin: balanced ? round((balancedAt - lastJoinAt) / 1_000, 2) : null,
      takeTicksAfterLastJoin: balanced ? round((balancedAt - lastJoinAt) / TAKE_TICK_MS, 2) : null,
      acquisitions,
      acquisitionsPerLease: round(acquisitions / LEASES),
      firstTakeSeconds,
      standing: standing(),
      joined: firstJoin.size,
      changesHeardPerWorker: round(coldWindow.tally.changesHeard / WORKERS, 1),
      subscriptionsPerWorker: round(coldWindow.tally.subscriptions / WORKERS, 2),
      window: coldWindow,
    };
    log(
      `${backend}: cold start ${balanced ? `balanced in ${cold.secondsToBalanced} s, ${cold.secondsAfterLastJoin} s (${cold.takeTicksAfterLastJoin} take ticks) after the last join at ${cold.lastJoinSeconds} s` : unconfirmed ? `not balanced: the events said so ${round((balancedAt - startedAt) / 1_000, 2)} s after the start, the children's own lists did not (${where()})` : `did not balance within ${LIMIT_S} s (${where()})`}; ` +
        `${acquisitions} acquisitions (${cold.acquisitionsPerLease} per lease); each worker's first take after the last join: first ${firstTakeSeconds.first} s, p50 ${firstTakeSeconds.p50}, p90 ${firstTakeSeconds.p90}, last ${firstTakeSeconds.last}; ${coldWindow.tally.itemsRead} items read, ${coldWindow.tally.itemsWritten} written (${JSON.stringify(coldWindow.tally.calls)}); ` +
        `changes heard per worker ${cold.changesHeardPerWorker}, subscriptions per worker ${cold.subscriptionsPerWorker}; ` +
        `CPU: children ${coldWindow.childrenCores} cores, machine ${coldWindow.machineCores} of ${availableParallelism()}` +
        (coldWindow.serverCores === null ? '' : `, dynalite ${coldWindow.serverCores}`) +
        troubles(coldWindow),
    );

    // 2. Steady state.
    await sleep(10_000);
    await collect();
    const steadyAcquisitions = acquisitions;
    await sleep(STEADY_S * 1_000);
    const steadyWindow = await collect();
    const steady = { ...steadyWindow, acquisitions: acquisitions - steadyAcquisitions, stillBalanced: standing().ok };
    log(
      `${backend}: steady ${steady.seconds} s: ${(steady.calls / steady.seconds).toFixed(1)} calls/s (${Object.entries(steady.callsPerSecond).map(([n, v]) => `${n} ${v}`).join(', ')}), ` +
        `${steady.itemsReadPerSecond} items read/s, ${steady.itemsWrittenPerSecond} written/s; CPU: children ${steady.childrenCores} cores, machine ${steady.machineCores}` +
        (steady.serverCores === null ? '' : `, dynalite ${steady.serverCores}`) +
        `; still balanced: ${steady.stillBalanced}, ${steady.acquisitions} acquisitions` +
        troubles(steady),
    );

    // 3. Crash take-over: the last child, then the one holding worker-000 (rank 0 of the deal).
    const holdingZero = children.findIndex((child) => child.workers.includes(0));
    const victims = (PROCESSES >= 3 ? [children.length - 1, holdingZero === children.length - 1 ? 0 : holdingZero] : [children.length - 1]).slice(0, CRASHES);
    const crashes: Record<string, unknown>[] = [];
    for (const victimIndex of victims) {
      const victim = children[victimIndex]!;
      const survivors = live().filter((child) => child !== victim);
      const liveWorkers = held.size;
      const list = await victim.request<{ type: 'held'; held: Record<string, string[]>; heartbeats: Record<string, number> }>({ type: 'held' }, 'held');
      // The ring as it stood before the kill: who watched each of the victims.
      const ringBefore = [...held.keys()].map(workerId);
      // The ring as the members order it: each process's members spread round it when each is a domain.
      const domainOf = NO_DOMAINS ? undefined : (id: string): string | undefined => processOf.get(id);
      const leases = new Set(Object.values(list.held).flat());
      await collect();
      const takenAt = new Map<string, number>();
      const takenBy = new Map<string, string>();
      /** The writes of each of the victims' leases after the kill that named an owner for others to hear of, or freed it. */
      const written = new Map<string, Array<{ at: number; to: string }>>();
      const acquiredBefore = acquisitions;
      const deadBefore = memberDead.length;
      const killedAt = now();
      onAcquired = (worker, leaseKey, at) => {
        if (!leases.has(leaseKey) || takenAt.has(leaseKey) || at < killedAt) return;
        takenAt.set(leaseKey, at);
        takenBy.set(leaseKey, workerId(worker));
      };
      onWritten = (leaseKey, at, to) => {
        if (!leases.has(leaseKey) || takenAt.has(leaseKey) || at < killedAt) return;
        const writes = written.get(leaseKey) ?? [];
        writes.push({ at, to });
        written.set(leaseKey, writes);
      };
      await victim.process.kill();
      for (const worker of victim.workers) {
        killed.add(worker);
        held.delete(worker);
      }
      const which = values.assign === 'shuffled' ? `workers shuffled by seed ${ASSIGN_SEED}` : `${workerId(victim.workers[0]!)}..${workerId(victim.workers.at(-1)!)}`;
      const label = `process ${victimIndex} (${which}, ${victim.workers.length} of ${liveWorkers} live workers${victim.workers.includes(0) ? ', holding worker-000, rank 0 of the deal' : ''})`;
      log(`${backend}: killed ${label}, which held ${leases.size} leases; ${survivors.length} processes left`);
      const takenOver = await waitUntil(() => takenAt.size === leases.size, killedAt, CRASH_LIMIT_S, () => `${takenAt.size} of ${leases.size} taken over; ${where()}`);
      const takenOverAt = now();
      const rebalanced = await waitUntil(() => standing().ok, killedAt, CRASH_LIMIT_S, where);
      const rebalancedAt = lastEventAt;
      const window = await collect();
      const durations = [...takenAt.values()].map((at) => (at - killedAt) / LEASE_DURATION_MS).sort((a, b) => a - b);
      const deadSeen = memberDead.slice(deadBefore).filter((entry) => victim.workers.some((w) => workerId(w) === entry.dead));
      // Where the take-over's time goes: until the owner was declared dead, and from then until the take.
      const declaredAt = new Map<string, number>();
      for (const entry of deadSeen) declaredAt.set(entry.dead, Math.min(declaredAt.get(entry.dead) ?? Infinity, entry.at));
      const ownerOf = new Map(Object.entries(list.held).flatMap(([owner, keys]) => keys.map((leaseKey) => [leaseKey, owner] as const)));
      const afterDeclaration = [...takenAt].flatMap(([leaseKey, at]) => {
        const declared = declaredAt.get(ownerOf.get(leaseKey) ?? '');
        return declared === undefined ? [] : [Math.max(0, at - declared) / LEASE_DURATION_MS];
      }).sort((a, b) => a - b);
      // The other part, per lease: from the kill to its owner's declaration.
      const untilDeclaration = [...takenAt.keys()].flatMap((leaseKey) => {
        const declared = declaredAt.get(ownerOf.get(leaseKey) ?? '');
        return declared === undefined ? [] : [Math.max(0, declared - killedAt) / LEASE_DURATION_MS];
      }).sort((a, b) => a - b);
      // Per dead member: when its last heartbeat before the kill was answered, when it was declared and by
      // whom, and how many of its watchers on the ring before the kill died with it. A watcher's expiry is
      // a lease duration from its first read of that heartbeat, at most a take tick after it: past 1.2 L
      // from the heartbeat, a declaration is late.
      const victims = new Set(victim.workers.map(workerId));
      const members = victim.workers.map(workerId).map((dead) => {
        const watchers = watchersOf(dead, ringBefore, WATCHERS, domainOf);
        const first = deadSeen.filter((entry) => entry.dead === dead).sort((a, b) => a.at - b.at)[0];
        const heartbeat = list.heartbeats[dead];
        return {
          dead,
          leases: list.held[dead]?.length ?? 0,
          watchersDead: watchers.filter((watcher) => victims.has(watcher)).length,
          declaredBy: first === undefined ? null : workerId(first.by),
          byWatcher: first === undefined ? null : watchers.includes(workerId(first.by)),
          heartbeatBeforeKill: heartbeat === undefined ? null : round((killedAt - heartbeat) / LEASE_DURATION_MS),
          declaredAfterKill: first === undefined ? null : round((first.at - killedAt) / LEASE_DURATION_MS),
          declaredAfterHeartbeat: first === undefined || heartbeat === undefined ? null : round((first.at - heartbeat) / LEASE_DURATION_MS),
        };
      });
      // Each lease's way to its new owner: taken by it on a listing with nothing written for it before
      // ('taken'), dealt to it by a declarer or a handover ('dealt'), or first written to a member that died
      // in this crash ('via a victim', a second move), or free ('via free'), or to a live member other than
      // the one that took it ('via another'); the take-over's tail is told apart by way.
      const wayOf = (leaseKey: string): string => {
        const writes = written.get(leaseKey) ?? [];
        if (writes.some((write) => victims.has(write.to))) return 'via a victim';
        if (writes.some((write) => write.to === '')) return 'via free';
        if (writes.some((write) => write.to !== takenBy.get(leaseKey))) return 'via another';
        return writes.length === 0 ? 'taken' : 'dealt';
      };
      const slowest = [...takenAt].sort((a, b) => b[1] - a[1]).slice(0, Math.max(1, Math.ceil(takenAt.size * 0.05)));
      const byWay = new Map<string, number[]>();
      for (const [leaseKey, at] of takenAt) {
        const way = wayOf(leaseKey);
        byWay.set(way, [...(byWay.get(way) ?? []), (at - killedAt) / LEASE_DURATION_MS]);
      }
      // For the leases dealt: from the owner's declaration to the deal's write, and from that write to the recipient's take.
      const dealtSteps = [...takenAt].flatMap(([leaseKey, at]) => {
        const write = written.get(leaseKey)?.at(-1);
        const declared = declaredAt.get(ownerOf.get(leaseKey) ?? '');
        return write === undefined || declared === undefined || wayOf(leaseKey) !== 'dealt' ? [] : [{ toWrite: Math.max(0, write.at - declared) / LEASE_DURATION_MS, toTake: Math.max(0, at - write.at) / LEASE_DURATION_MS }];
      });
      const spread = (values: number[]): { n: number; p50: number; p99: number; max: number } => {
        const sorted = [...values].sort((a, b) => a - b);
        return { n: sorted.length, p50: round(percentile(sorted, 0.5)), p99: round(percentile(sorted, 0.99)), max: round(sorted.at(-1) ?? NaN) };
      };
      // For the leases dealt first to a member that died in this crash: from that member's declaration to the take.
      const viaVictimSteps = [...takenAt].flatMap(([leaseKey, at]) => {
        const victim = (written.get(leaseKey) ?? []).filter((write) => victims.has(write.to)).at(-1)?.to;
        const declared = victim === undefined ? undefined : declaredAt.get(victim);
        return declared === undefined ? [] : [Math.max(0, at - declared) / LEASE_DURATION_MS];
      });
      // For the same leases: from that member's declaration to the write that dealt it to the member (negative:
      // written before the declaration, to be dealt by its declarer; positive: after, to be dealt late).
      const viaVictimWrites = [...takenAt].flatMap(([leaseKey]) => {
        const write = (written.get(leaseKey) ?? []).filter((entry) => victims.has(entry.to)).at(-1);
        const declared = write === undefined ? undefined : declaredAt.get(write.to);
        return write === undefined || declared === undefined ? [] : [(write.at - declared) / LEASE_DURATION_MS];
      });
      const ways = {
        takeOverByWay: Object.fromEntries([...byWay].map(([way, values]) => [way, spread(values)])),
        slowestFivePercentByWay: Object.fromEntries([...new Set(slowest.map(([leaseKey]) => wayOf(leaseKey)))].map((way) => [way, slowest.filter(([leaseKey]) => wayOf(leaseKey) === way).length])),
        dealtDeclarationToWrite: dealtSteps.length === 0 ? null : spread(dealtSteps.map((step) => step.toWrite)),
        dealtWriteToTake: dealtSteps.length === 0 ? null : spread(dealtSteps.map((step) => step.toTake)),
        viaVictimFromItsDeclaration: viaVictimSteps.length === 0 ? null : spread(viaVictimSteps),
        viaVictimWrittenAfterItsDeclaration: viaVictimWrites.length === 0 ? null : { ...spread(viaVictimWrites), before: viaVictimWrites.filter((value) => value < 0).length },
      };
      const crash = {
        killed: label,
        killedWorkers: victim.workers.map(workerId),
        leases: leases.size,
        takenOver: takenAt.size,
        allTakenOver: takenOver,
        takeOverInLeaseDurations:
          durations.length === 0 ? null : { p50: round(percentile(durations, 0.5)), p99: round(percentile(durations, 0.99)), max: round(durations.at(-1)!) },
        firstDeclaredDeadSeconds: deadSeen.length === 0 ? null : round((Math.min(...deadSeen.map((entry) => entry.at)) - killedAt) / 1_000, 2),
        lastDeclaredDeadSeconds: declaredAt.size === 0 ? null : round((Math.max(...declaredAt.values()) - killedAt) / 1_000, 2),
        declaredDeadSeconds: [...declaredAt.values()].map((at) => round((at - killedAt) / 1_000, 2)).sort((a, b) => a - b),
        declarations: members.sort((a, b) => (b.declaredAfterKill ?? Infinity) - (a.declaredAfterKill ?? Infinity)),
        untilDeclarationInLeaseDurations:
          untilDeclaration.length === 0 ? null : { p50: round(percentile(untilDeclaration, 0.5)), p99: round(percentile(untilDeclaration, 0.99)), max: round(untilDeclaration.at(-1)!) },
        fromDeclarationInLeaseDurations:
          afterDeclaration.length === 0 ? null : { p50: round(percentile(afterDeclaration, 0.5)), p99: round(percentile(afterDeclaration, 0.99)), max: round(afterDeclaration.at(-1)!) },
        rebalanced,
        secondsToRebalanced: rebalanced ? round((Math.max(rebalancedAt, killedAt) - killedAt) / 1_000, 2) : null,
        limitSeconds: CRASH_LIMIT_S,
        waitedSeconds: round((takenOverAt - killedAt) / 1_000, 1),
        acquisitions: acquisitions - acquiredBefore,
        acquisitionsPerLeaseTakenOver: leases.size === 0 ? null : round((acquisitions - acquiredBefore) / leases.size),
        // What the survivors' feeds delivered from the kill until balanced again (the victims' counts died with them).
        changesHeardPerSurvivor: round(window.tally.changesHeard / Math.max(1, WORKERS - killed.size), 1),
        ...ways,
        standing: standing(),
        window,
      };
      crashes.push(crash);
      const t = crash.takeOverInLeaseDurations;
      log(
        `${backend}: take-over of ${crash.takenOver} of ${crash.leases} leases${takenOver ? '' : ` (the rest not within ${CRASH_LIMIT_S} s)`}: ` +
          (t === null ? 'none' : `p50 ${t.p50}, p99 ${t.p99}, max ${t.max} lease durations`) +
          `; declared dead ${crash.firstDeclaredDeadSeconds}-${crash.lastDeclaredDeadSeconds} s after the kill` +
          (crash.untilDeclarationInLeaseDurations === null ? '' : ` (a lease's owner declared p50 ${crash.untilDeclarationInLeaseDurations.p50}, p99 ${crash.untilDeclarationInLeaseDurations.p99} lease durations after the kill)`) +
          (crash.fromDeclarationInLeaseDurations === null ? '' : `, taken p50 ${crash.fromDeclarationInLeaseDurations.p50}, p99 ${crash.fromDeclarationInLeaseDurations.p99} lease durations after its owner's declaration`) +
          '; ' +
          (rebalanced ? `balanced again ${crash.secondsToRebalanced} s after the kill` : `not balanced again within ${CRASH_LIMIT_S} s (${where()})`) +
          `; ${crash.declarations.filter((entry) => entry.watchersDead === WATCHERS).length} dead with all ${WATCHERS} watchers; ${crash.acquisitions} acquisitions; ways (p99 L): ${Object.entries(crash.takeOverByWay).map(([way, x]) => `${way} ${x.n} (${x.p99})`).join(', ')}, slowest 5% ${JSON.stringify(crash.slowestFivePercentByWay)}` +
          `; changes heard per survivor ${crash.changesHeardPerSurvivor}` +
          `; CPU: children ${window.childrenCores} cores, machine ${window.machineCores}` +
          (window.serverCores === null ? '' : `, dynalite ${window.serverCores}`) +
          troubles(window),
      );
      onAcquired = null;
      onWritten = null;
    }

    // 4. Graceful stops: one worker of the first live process at a time.
    const stops: Record<string, unknown>[] = [];
    for (let n = 0; n < STOPS; n++) {
      const child = live()[0];
      const worker = child?.workers.find((w) => held.has(w));
      if (child === undefined || worker === undefined) break;
      await waitUntil(() => standing().ok, now(), CRASH_LIMIT_S, where);
      const list = await child.request<{ type: 'held'; held: Record<string, string[]>; heartbeats: Record<string, number> }>({ type: 'held' }, 'held');
      const leases = new Set(list.held[workerId(worker)] ?? []);
      await collect();
      const acquiredAt = new Map<string, number>();
      const stoppedAt = now();
      onAcquired = (by, leaseKey, at) => {
        if (by !== worker && leases.has(leaseKey) && !acquiredAt.has(leaseKey) && at >= stoppedAt) acquiredAt.set(leaseKey, at);
      };
      const returned = child.request<{ type: 'stopped'; worker: number }>({ type: 'stop', worker }, 'stopped', 60_000).then(() => now());
      const heldElsewhere = await waitUntil(() => acquiredAt.size === leases.size, stoppedAt, CRASH_LIMIT_S, () => `${acquiredAt.size} of ${leases.size} held elsewhere; ${where()}`);
      const stopReturnedAt = await returned;
      killed.add(worker);
      held.delete(worker);
      const rebalanced = await waitUntil(() => standing().ok, stoppedAt, CRASH_LIMIT_S, where);
      const wait = stoppedAt + 5 * TAKE_TICK_MS - now();
      if (wait > 0) await sleep(wait);
      const window = await collect();
      const waits = [...acquiredAt.values()].map((at) => at - stoppedAt).sort((a, b) => a - b);
      const survivors = held.size;
      const stop = {
        worker: workerId(worker),
        changeFeed: !NO_FEED,
        leases: leases.size,
        heldElsewhere: acquiredAt.size,
        allHeldElsewhere: heldElsewhere,
        heldElsewhereMs: waits.length === 0 ? null : { p50: round(percentile(waits, 0.5), 0), max: round(waits.at(-1)!, 0) },
        stopReturnedMs: round(stopReturnedAt - stoppedAt, 0),
        rebalanced,
        survivors,
        listingsPerSurvivor: round((window.tally.calls.listLeases ?? 0) / survivors, 2),
        leaseReadsByKey: (window.tally.itemsReadBy.getLease ?? 0) + (window.tally.itemsReadBy.getLeases ?? 0),
        itemsRead: window.tally.itemsRead,
        window,
      };
      stops.push(stop);
      log(
        `${backend}: graceful stop of ${stop.worker} (${stop.leases} leases, ${NO_FEED ? 'no change feed' : 'change feed'}): ${stop.heldElsewhere} held elsewhere` +
          (stop.heldElsewhereMs === null ? '' : `, p50 ${stop.heldElsewhereMs.p50} ms, max ${stop.heldElsewhereMs.max} ms after stop()`) +
          `; stop() returned in ${stop.stopReturnedMs} ms; ${rebalanced ? 'balanced' : 'not balanced'}; over ${window.seconds} s: ${stop.listingsPerSurvivor} listings per survivor, ${stop.leaseReadsByKey} leases read by key, ${stop.itemsRead} items read (${JSON.stringify(window.tally.calls)})` +
          troubles(window),
      );
      onAcquired = null;
    }

    // 5. Joins: a worker under a new id starts in the first live process, one at a time.
    const joins: Record<string, unknown>[] = [];
    for (let n = 0; n < JOINS; n++) {
      const child = live()[0];
      if (child === undefined) break;
      await waitUntil(() => standing().ok, now(), CRASH_LIMIT_S, where);
      await collect();
      const worker = WORKERS + n;
      held.set(worker, new Set());
      child.workers.push(worker);
      const startedAt = now();
      child.send({ type: 'join', worker });
      const rebalanced = await waitUntil(() => (held.get(worker)?.size ?? 0) > 0 && standing().ok, startedAt, CRASH_LIMIT_S, where);
      const balancedMs = now() - startedAt;
      const wait = startedAt + 5 * TAKE_TICK_MS - now();
      if (wait > 0) await sleep(wait);
      const window = await collect();
      const members = held.size;
      const join = {
        worker: workerId(worker),
        changeFeed: !NO_FEED,
        rebalanced,
        balancedMs: round(balancedMs, 0),
        held: held.get(worker)?.size ?? 0,
        members,
        listings: window.tally.calls.listLeases ?? 0,
        leaseReadsByKey: (window.tally.itemsReadBy.getLease ?? 0) + (window.tally.itemsReadBy.getLeases ?? 0),
        itemsRead: window.tally.itemsRead,
        window,
      };
      joins.push(join);
      log(
        `${backend}: join of ${join.worker} (${NO_FEED ? 'no change feed' : 'change feed'}): ${rebalanced ? `balanced ${join.balancedMs} ms after its start` : 'not balanced'}, holding ${join.held}; over ${window.seconds} s: ${join.listings} listings of the group by ${members} workers (the joiner's among them), ${join.leaseReadsByKey} leases read by key, ${join.itemsRead} items read (${JSON.stringify(window.tally.calls)})` +
          troubles(window),
      );
    }

    // 6. A rolling restart: every ROLLING_EVERY_S the longest-running worker stops and a new id starts in its process.
    let rolling: Record<string, unknown> | null = null;
    if (ROLLING > 0) {
      await waitUntil(() => standing().ok, now(), CRASH_LIMIT_S, where);
      const startOrder = [...held.keys()].sort((a, b) => (firstJoin.get(a) ?? 0) - (firstJoin.get(b) ?? 0) || a - b);
      const perStop: Array<{ leases: Set<string>; stoppedAt: number; acquiredAt: Map<string, number>; worker: number }> = [];
      onAcquired = (by, leaseKey, at) => {
        for (const stop of perStop) if (by !== stop.worker && stop.leases.has(leaseKey) && !stop.acquiredAt.has(leaseKey) && at >= stop.stoppedAt) stop.acquiredAt.set(leaseKey, at);
      };
      await collect();
      const windowStartedAt = now();
      const returned: Array<Promise<void>> = [];
      for (let n = 0; n < ROLLING; n++) {
        const stepAt = windowStartedAt + n * ROLLING_EVERY_S * 1_000;
        if (stepAt > now()) await sleep(stepAt - now());
        const worker = startOrder.shift();
        const child = worker === undefined ? undefined : live().find((c) => c.workers.includes(worker));
        if (worker === undefined || child === undefined) break;
        const list = await child.request<{ type: 'held'; held: Record<string, string[]>; heartbeats: Record<string, number> }>({ type: 'held' }, 'held');
        const stop = { leases: new Set(list.held[workerId(worker)] ?? []), stoppedAt: now(), acquiredAt: new Map<string, number>(), worker };
        perStop.push(stop);
        returned.push(
          child.request<{ type: 'stopped'; worker: number }>({ type: 'stop', worker }, 'stopped', 60_000).then(() => {
            killed.add(worker);
            held.delete(worker);
          }),
        );
        const joiner = WORKERS + JOINS + n;
        held.set(joiner, new Set());
        child.workers.push(joiner);
        startOrder.push(joiner);
        child.send({ type: 'join', worker: joiner });
      }
      const lastAt = windowStartedAt + ROLLING * ROLLING_EVERY_S * 1_000;
      if (lastAt > now()) await sleep(lastAt - now());
      await Promise.all(returned);
      const window = await collect();
      const lastRestartAt = windowStartedAt + (ROLLING - 1) * ROLLING_EVERY_S * 1_000;
      const rebalanced = await waitUntil(() => standing().ok, lastRestartAt, CRASH_LIMIT_S, where);
      const rebalancedSeconds = rebalanced ? round((lastEventAt - lastRestartAt) / 1_000, 2) : null;
      onAcquired = null;
      const members = held.size;
      const minutes = window.seconds / 60;
      const waits = perStop.flatMap((stop) => [...stop.acquiredAt.values()].map((at) => at - stop.stoppedAt)).sort((a, b) => a - b);
      const notTaken = perStop.reduce((sum, stop) => sum + stop.leases.size - stop.acquiredAt.size, 0);
      const perWorkerMinute = (calls: number | undefined): number => round((calls ?? 0) / members / minutes, 2);
      // DynamoDB has no feed, whatever the flag says.
      const feed = !NO_FEED && opened.storage.subscribe !== undefined;
      const result = {
        restarts: perStop.length,
        everySeconds: ROLLING_EVERY_S,
        changeFeed: feed,
        rosterReadsPerWorkerMinute: perWorkerMinute(window.tally.calls.getRoster),
        steadyRosterReadsPerWorkerMinute: round((steady.tally.calls.getRoster ?? 0) / WORKERS / (steady.seconds / 60), 2),
        listingsPerWorkerMinute: perWorkerMinute(window.tally.calls.listLeases),
        itemsReadPerWorkerSecond: round(window.tally.itemsRead / members / window.seconds, 1),
        steadyItemsReadPerWorkerSecond: round(steady.tally.itemsRead / WORKERS / steady.seconds, 1),
        stoppedLeasesHeldElsewhereMs: waits.length === 0 ? null : { p50: round(percentile(waits, 0.5), 0), p99: round(percentile(waits, 0.99), 0), max: round(waits.at(-1)!, 0) },
        stoppedLeasesNotHeldElsewhere: notTaken,
        rebalanced,
        secondsToRebalancedAfterLast: rebalancedSeconds,
        window,
      };
      rolling = result;
      log(
        `${backend}: rolling restart, ${perStop.length} restarts ${ROLLING_EVERY_S} s apart (${feed ? 'change feed' : 'no change feed'}) over ${window.seconds} s: per worker, ${result.rosterReadsPerWorkerMinute} whole roster reads a minute (steady ${result.steadyRosterReadsPerWorkerMinute}), ` +
          `${result.listingsPerWorkerMinute} listings a minute, ${result.itemsReadPerWorkerSecond} items read a second (steady ${result.steadyItemsReadPerWorkerSecond}); a stopped worker's leases held elsewhere ` +
          (waits.length === 0 ? 'never' : `p50 ${percentile(waits, 0.5).toFixed(0)} ms, p99 ${percentile(waits, 0.99).toFixed(0)} ms, max ${waits.at(-1)!.toFixed(0)} ms after stop()`) +
          (notTaken > 0 ? ` (${notTaken} never within the window)` : '') +
          `; ${rebalanced ? `balanced ${rebalancedSeconds} s after the last restart` : 'not balanced'} (${JSON.stringify(window.tally.calls)})` +
          troubles(window),
      );
    }

    const extra = opened.inspect ? await opened.inspect(group) : {};
    return { backend, workers: WORKERS, leases: LEASES, processes: PROCESSES, assign: values.assign, assignSeed: ASSIGN_SEED, changeFeed: !NO_FEED, coldStart: cold, steady, crashes, stops, joins, rolling, fatal, ...extra };
  } finally {
    await cleanUp?.();
  }
}

const results: Record<string, unknown>[] = [];
log(
  `scale-procs: ${WORKERS} coordinators in ${PROCESSES} processes x ${LEASES} leases, default timing, ${STEADY_S} s of steady state, ` +
    `limits ${LIMIT_S} s for the cold start and ${CRASH_LIMIT_S} s per crash, ${availableParallelism()} cores, load average ${loadavg().map((n) => n.toFixed(1)).join(' ')}, nice ${getPriority()}`,
);
const dir = new URL('./results/', import.meta.url);
mkdirSync(dir, { recursive: true });
const file = new URL(`scale-procs-${values.label}.json`, dir);
for (const backend of backends) {
  results.push(await run(backend));
  writeFileSync(file, JSON.stringify({ label: values.label, nice: getPriority(), workers: WORKERS, leases: LEASES, processes: PROCESSES, changeFeed: !NO_FEED, steadySeconds: STEADY_S, limitSeconds: LIMIT_S, crashLimitSeconds: CRASH_LIMIT_S, results }, null, 2) + '\n');
}

type Result = {
  backend: string;
  coldStart: { secondsToBalanced: number | null; secondsAfterLastJoin: number | null; takeTicksAfterLastJoin: number | null; acquisitionsPerLease: number };
  steady: Window;
  crashes: Array<{ leases: number; takenOver: number; takeOverInLeaseDurations: { p50: number; p99: number; max: number } | null; secondsToRebalanced: number | null }>;
};
log('\nbackend   cold (s)  after last join (s)  ticks  acq/lease  calls/s  items read/s  items written/s  crash: p50  p99   max (L)  rebalanced (s)');
for (const r of results as Result[]) {
  const c = r.coldStart;
  const s = r.steady;
  const crash = (i: number): string => {
    const k = r.crashes[i];
    const t = k?.takeOverInLeaseDurations;
    if (!k || !t) return '';
    return `${t.p50.toFixed(2).padStart(11)} ${t.p99.toFixed(2).padStart(4)} ${t.max.toFixed(2).padStart(5)}${k.takenOver < k.leases ? '+' : ' '} ${(k.secondsToRebalanced?.toFixed(1) ?? 'never').padStart(15)}`;
  };
  for (let i = 0; i < Math.max(1, r.crashes.length); i++) {
    log(
      i === 0
        ? [
            r.backend.padEnd(8),
            (c.secondsToBalanced?.toFixed(1) ?? 'never').padStart(9),
            (c.secondsAfterLastJoin?.toFixed(1) ?? '-').padStart(20),
            (c.takeTicksAfterLastJoin?.toFixed(1) ?? '-').padStart(6),
            c.acquisitionsPerLease.toFixed(2).padStart(10),
            (s.calls / s.seconds).toFixed(1).padStart(8),
            s.itemsReadPerSecond.toFixed(1).padStart(13),
            s.itemsWrittenPerSecond.toFixed(1).padStart(16),
            crash(0),
          ].join(' ')
        : `${''.padEnd(108)}${crash(i)}`,
    );
  }
}
log(`\nwritten to ${fileURLToPath(file)}`);
if (results.some((r) => (r as Result).coldStart.secondsToBalanced === null)) process.exitCode = 1;
