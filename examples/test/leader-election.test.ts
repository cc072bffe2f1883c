import { spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { MemoryStorage, StorageUnavailableError, type LeaderStore } from '@leasehold/core';
import { VirtualScheduler } from '@leasehold/core/testing';
import { afterEach, describe, expect, it } from 'vitest';
import { startService, type JobContext, type Service } from '../leader-election/service.js';

// The instances in this process run on virtual time: on a busy machine a stalled event loop fires the
// timers of a leader and of its successor in one burst, and "one instance runs the job at a time" is then
// up to the fence, not to the election. The program run as a process is on real time; nothing asserts how
// long anything took, its wait has a generous deadline, and the assertions are about order.
const LEASE_DURATION_MS = 600;

/** Runs virtual time 10 ms at a time until `condition` holds; fails after `limitMs` of virtual time. */
async function advanceUntil(scheduler: VirtualScheduler, what: string, condition: () => boolean, limitMs = 60_000): Promise<void> {
  const deadline = scheduler.now + limitMs;
  while (!condition()) {
    if (scheduler.now >= deadline) throw new Error(`not within ${limitMs} ms of virtual time: ${what}`);
    await scheduler.advance(10);
  }
}

/** Runs virtual time until `promise` settles, and returns what it settled with. */
async function settle<T>(scheduler: VirtualScheduler, promise: Promise<T>): Promise<T> {
  let done = false;
  const tracked = promise.finally(() => {
    done = true;
  });
  await advanceUntil(scheduler, 'the call returned', () => done);
  return tracked;
}

async function waitFor(what: string, condition: () => boolean, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await sleep(10);
  }
}

/** The downstream the job writes to. It refuses a write whose term is below the highest it has seen. */
class FencedTarget {
  readonly accepted: Array<{ term: number; workerId: string }> = [];
  refused = 0;
  #highestTerm = 0;

  write(term: number, workerId: string): void {
    if (term < this.#highestTerm) {
      this.refused++;
      return;
    }
    this.#highestTerm = term;
    this.accepted.push({ term, workerId });
  }

  runsBy(workerId: string): number {
    return this.accepted.filter((entry) => entry.workerId === workerId).length;
  }
}

/** A cluster of instances over one store, with a job that records how many instances run it at once. */
function cluster(store: (workerId: string) => LeaderStore, scheduler: VirtualScheduler) {
  const clock = scheduler.clock();
  const target = new FencedTarget();
  const services: Service[] = [];
  const demotions: string[] = [];
  let active = 0;
  let mostActiveAtOnce = 0;

  const job = async ({ term, workerId }: JobContext): Promise<void> => {
    active++;
    mostActiveAtOnce = Math.max(mostActiveAtOnce, active);
    try {
      await clock.sleep(5);
      target.write(term, workerId);
    } finally {
      active--;
    }
  };

  return {
    target,
    demotions,
    services,
    mostActiveAtOnce: () => mostActiveAtOnce,
    leaders: () => services.filter((service) => service.term !== undefined),
    async start(workerIds: readonly string[]): Promise<void> {
      for (const workerId of workerIds) {
        services.push(
          await settle(scheduler, startService({
            clock,
            store: store(workerId),
            group: 'report-scheduler',
            workerId,
            leaseDurationMs: LEASE_DURATION_MS,
            everyMs: 20,
            job,
            log: (line) => {
              if (line.includes('no longer leads')) demotions.push(line);
            },
          })),
        );
      }
    },
  };
}

/** A view of a store that one instance reaches through, and that a test can cut off like a network. */
function partitionable(store: LeaderStore): LeaderStore & { cut: boolean } {
  const view = {
    contractVersion: store.contractVersion,
    cut: false,
    check(): void {
      if (view.cut) throw new StorageUnavailableError('[test] partitioned from the store');
    },
    getLeader: async (group: string) => (view.check(), store.getLeader(group)),
    createLeader: async (leader: Parameters<LeaderStore['createLeader']>[0]) => (view.check(), store.createLeader(leader)),
    updateLeader: async (...args: Parameters<LeaderStore['updateLeader']>) => (view.check(), store.updateLeader(...args)),
  };
  return view;
}

describe('leader election for a service that is not a stream consumer', () => {
  let running: Service[] = [];
  let time = new VirtualScheduler();
  afterEach(async () => {
    await settle(time, Promise.all(running.map((service) => service.stop())));
    running = [];
    time = new VirtualScheduler();
  });

  it('of three instances exactly one runs the job, and when it stops another takes over with a higher term', async () => {
    const store = new MemoryStorage();
    const scheduler = cluster(() => store, time);
    running = scheduler.services;
    await scheduler.start(['scheduler-a', 'scheduler-b', 'scheduler-c']);

    await advanceUntil(time, 'one instance has run the job three times', () => scheduler.target.accepted.length >= 3);
    const [first, ...others] = scheduler.leaders();
    expect(others).toEqual([]);
    const firstTerm = first!.term!;
    expect(scheduler.target.accepted.every((entry) => entry.workerId === first!.workerId && entry.term === firstTerm)).toBe(true);

    await settle(time, first!.stop());
    const runsOfFirst = scheduler.target.runsBy(first!.workerId);
    await advanceUntil(time, 'another instance has run the job three times', () => scheduler.target.accepted.length >= runsOfFirst + 3);

    const [second, ...rest] = scheduler.leaders();
    expect(rest).toEqual([]);
    expect(second!.workerId).not.toBe(first!.workerId);
    expect(second!.term).toBeGreaterThan(firstTerm);
    // In order: every run of the first leader, then only runs of the second, each under its own term.
    expect(scheduler.target.accepted.slice(0, runsOfFirst).every((entry) => entry.workerId === first!.workerId && entry.term === firstTerm)).toBe(true);
    expect(scheduler.target.accepted.slice(runsOfFirst).every((entry) => entry.workerId === second!.workerId && entry.term === second!.term)).toBe(true);
    expect(scheduler.target.refused).toBe(0);
    expect(scheduler.mostActiveAtOnce()).toBe(1);
    expect(scheduler.demotions).toEqual([`${first!.workerId} no longer leads term ${firstTerm} (stepped-down)`]);
  });

  it('a leader cut off from the store stops its job by itself, and another instance takes over with a higher term', async () => {
    const store = new MemoryStorage();
    const views = new Map<string, ReturnType<typeof partitionable>>();
    const scheduler = cluster((workerId) => {
      const view = partitionable(store);
      views.set(workerId, view);
      return view;
    }, time);
    running = scheduler.services;
    await scheduler.start(['scheduler-a', 'scheduler-b', 'scheduler-c']);
    await advanceUntil(time, 'one instance has run the job', () => scheduler.target.accepted.length >= 1);
    const [first] = scheduler.leaders();
    const firstTerm = first!.term!;

    views.get(first!.workerId)!.cut = true;
    await advanceUntil(time, 'another instance has run the job', () => scheduler.target.accepted.some((entry) => entry.workerId !== first!.workerId));

    expect(scheduler.demotions).toContain(`${first!.workerId} no longer leads term ${firstTerm} (self-fenced)`);
    const [second, ...rest] = scheduler.leaders();
    expect(rest).toEqual([]);
    expect(second!.workerId).not.toBe(first!.workerId);
    expect(second!.term).toBeGreaterThan(firstTerm);
    expect(scheduler.mostActiveAtOnce()).toBe(1);
    expect(scheduler.target.refused).toBe(0);
  });

  it('run as a program, it leads, runs the job, and on SIGTERM steps down and exits cleanly', async () => {
    const program = fileURLToPath(new URL('../leader-election/service.ts', import.meta.url));
    const child = spawn(process.execPath, ['--import', 'tsx', program], {
      env: { ...process.env, LEASEHOLD_STORAGE: 'memory:' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));

    await waitFor('the program has run the job', () => output.includes('runs the job (term 1)'), 30_000);
    child.kill('SIGTERM');
    const code = await exited;

    expect(code).toBe(0);
    const lines = output.trim().split('\n');
    const order = ['leads term 1', 'runs the job (term 1)', 'stopped the job of term 1', 'no longer leads term 1 (stepped-down)', 'stepped down and stopped'];
    for (const text of order) expect(output).toContain(text);
    const positions = order.map((text) => lines.findIndex((line) => line.includes(text)));
    expect([...positions].sort((a, b) => a - b)).toEqual(positions);
  }, 60_000);
});
