/**
 * The scale benchmark: 100 lease coordinators sharing 10,000 leases in this one process, against each
 * real backend (PostgreSQL on 127.0.0.1:5432 database `test`, Redis on 127.0.0.1:6379, and dynalite
 * started in a child process), in real time with the default timing (leaseDurationMs 10,000, a heartbeat
 * every 6,500 ms, a take tick every 2,000 ms, a listing every 600,000 ms unless the roster signals a change).
 *
 * Per backend: the leases are created, the coordinators all start at once, and the time until every lease
 * is held with max - min <= 1 per worker is the cold start; then the steady state is measured for
 * `--steady` seconds (default 180): storage operations and items per second (items counted as the core
 * bench counts them: getRoster 1, each listed lease 1, getLease 1; putMember 1, each lease of
 * updateLeases 1, createLease 1), the process's CPU time per worker, and the event loop's delay
 * (perf_hooks monitorEventLoopDelay). The coordinators share one client on PostgreSQL (a pool of 16
 * connections) and Redis (one pipelined connection); on DynamoDB each has its own client, as in
 * production, because the SDK's socket pool is first come first served: shared, it queues every
 * heartbeat behind a hundred listings.
 *
 *   pnpm --filter @leasehold/e2e bench:scale                              all three backends
 *   pnpm --filter @leasehold/e2e bench:scale -- --backend redis --steady 60
 *
 * Writes bench/results/scale.json.
 */
import { LeaseCoordinator, type Storage } from '@leasehold/core';
import { mkdirSync, writeFileSync } from 'node:fs';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { BACKENDS, createLeases, OPEN, runId, type Backend } from './backends.js';
import { balance, counting, emptyTally, loopDelay, LOOP_RESOLUTION_MS, type Balance } from './counting.js';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';

const { values } = parseArgs({
  options: {
    backend: { type: 'string', multiple: true },
    workers: { type: 'string', default: '100' },
    leases: { type: 'string', default: '10000' },
    steady: { type: 'string', default: '180' },
  },
});
const WORKERS = Number(values.workers);
const LEASES = Number(values.leases);
const STEADY_S = Number(values.steady);
const backends = (values.backend ?? BACKENDS) as Backend[];
const log = (line: string): void => void process.stdout.write(`${line}\n`);

// ------------------------------------------------------------------------------------------ one run

function isBalanced(coordinators: readonly LeaseCoordinator[]): Balance {
  return balance(
    coordinators.map((coordinator) => coordinator.heldLeases().map((lease) => lease.leaseKey)),
    LEASES,
  );
}

async function run(backend: Backend): Promise<Record<string, unknown>> {
  const opened = await OPEN[backend]();
  let tally = emptyTally();
  const storage = counting(opened.storage, () => tally);
  const storageOf = (i: number): Storage => (opened.storageFor ? counting(opened.storageFor(i), () => tally) : storage);
  const group = `scale-${runId}`;
  const coordinators: LeaseCoordinator[] = [];
  const errors = new Map<string, number>();
  let acquisitions = 0;
  /** Leases lost, by reason: in a steady state there should be none. */
  const lost = new Map<string, number>();
  try {
    const createdAt = performance.now();
    await createLeases(opened.storage, group, LEASES);
    log(`${backend}: ${LEASES} leases created in ${((performance.now() - createdAt) / 1_000).toFixed(1)} s`);

    for (let i = 0; i < WORKERS; i++) {
      const coordinator = new LeaseCoordinator({ storage: storageOf(i), group, workerId: `worker-${String(i).padStart(3, '0')}` });
      coordinator.on('error', ({ operation, error }) => {
        const key = `${operation}: ${error.name}`;
        errors.set(key, (errors.get(key) ?? 0) + 1);
      });
      coordinator.on('acquired', () => acquisitions++);
      coordinator.on('lost', ({ reason }) => lost.set(reason, (lost.get(reason) ?? 0) + 1));
      coordinators.push(coordinator);
    }
    // Cold start: every coordinator starts at once.
    const coldDelay = monitorEventLoopDelay({ resolution: LOOP_RESOLUTION_MS });
    coldDelay.enable();
    tally = emptyTally();
    const coldCpu = process.cpuUsage();
    const startedAt = performance.now();
    await Promise.all(coordinators.map((coordinator) => coordinator.start()));
    let balancedAt: number | null = null;
    let last = isBalanced(coordinators);
    let lastProgressAt = startedAt;
    while (performance.now() - startedAt < 600_000) {
      last = isBalanced(coordinators);
      if (last.ok) {
        balancedAt = performance.now();
        break;
      }
      if (performance.now() - lastProgressAt >= 15_000) {
        lastProgressAt = performance.now();
        log(
          `${backend}:   ${((lastProgressAt - startedAt) / 1_000).toFixed(0)} s: held ${last.held}, ${last.fewest}-${last.most} per worker; ${acquisitions} acquisitions; ` +
            `calls ${JSON.stringify(tally.calls)}; lost ${JSON.stringify(Object.fromEntries(lost))}; errors ${JSON.stringify(Object.fromEntries(errors))}`,
        );
      }
      await sleep(100);
    }
    coldDelay.disable();
    const coldCpuUs = process.cpuUsage(coldCpu);
    const coldTally = tally;
    const coldS = balancedAt === null ? null : (balancedAt - startedAt) / 1_000;
    const coldAcquisitions = acquisitions;
    log(
      `${backend}: cold start ${coldS === null ? `not balanced after 600 s (held ${last.held}, ${last.fewest}-${last.most} per worker)` : `balanced in ${coldS.toFixed(2)} s`}; ` +
        `${coldAcquisitions} acquisitions, ${coldTally.itemsRead} items read, ${coldTally.itemsWritten} written (${JSON.stringify(coldTally.calls)}); event loop p99 ${loopDelay(coldDelay).p99Ms.toFixed(1)} ms, max ${loopDelay(coldDelay).maxMs.toFixed(1)} ms`,
    );

    // Steady state: a settling minute is not needed at this timing; the first listing after balance is counted.
    await sleep(10_000);
    const delay = monitorEventLoopDelay({ resolution: LOOP_RESOLUTION_MS });
    tally = emptyTally();
    lost.clear();
    const acquiredBefore = acquisitions;
    const cpu = process.cpuUsage();
    const steadyFrom = performance.now();
    delay.enable();
    await sleep(STEADY_S * 1_000);
    delay.disable();
    const seconds = (performance.now() - steadyFrom) / 1_000;
    const cpuUs = process.cpuUsage(cpu);
    const steady = tally;
    const stillBalanced = isBalanced(coordinators);
    const perSecond = (n: number): number => n / seconds;
    const calls = Object.values(steady.calls).reduce((sum, n) => sum + n, 0);
    const extra = opened.inspect ? await opened.inspect(group) : {};
    const result = {
      backend,
      workers: WORKERS,
      leases: LEASES,
      timing: 'default (lease 10,000 ms, heartbeat 6,500 ms, take tick 2,000 ms, listing 600,000 ms)',
      coldStart: {
        secondsToBalanced: coldS,
        itemsRead: coldTally.itemsRead,
        itemsWritten: coldTally.itemsWritten,
        calls: coldTally.calls,
        cpuSeconds: (coldCpuUs.user + coldCpuUs.system) / 1e6,
        eventLoopDelay: loopDelay(coldDelay),
      },
      steady: {
        seconds,
        operationsPerSecond: perSecond(calls),
        callsPerSecond: Object.fromEntries(Object.entries(steady.calls).map(([name, n]) => [name, perSecond(n)])),
        itemsReadPerSecond: perSecond(steady.itemsRead),
        itemsWrittenPerSecond: perSecond(steady.itemsWritten),
        itemsReadPerLeaseMinute: (steady.itemsRead / LEASES / seconds) * 60,
        itemsWrittenPerLeaseMinute: (steady.itemsWritten / LEASES / seconds) * 60,
        cpuPercentOfACorePerWorker: ((cpuUs.user + cpuUs.system) / 1e6 / seconds / WORKERS) * 100,
        cpuPercentOfACoreAllWorkers: ((cpuUs.user + cpuUs.system) / 1e6 / seconds) * 100,
        eventLoopDelay: loopDelay(delay),
        heapUsedMBPerWorker: process.memoryUsage().heapUsed / 1e6 / WORKERS,
        stillBalanced: stillBalanced.ok,
        acquisitions: acquisitions - acquiredBefore,
        lostByReason: Object.fromEntries(lost),
      },
      errors: Object.fromEntries(errors),
      acquisitionsDuringColdStart: coldAcquisitions,
      ...extra,
    };
    const s = result.steady;
    log(
      `${backend}: steady ${seconds.toFixed(0)} s: ${s.operationsPerSecond.toFixed(1)} ops/s (${Object.entries(s.callsPerSecond).map(([n, v]) => `${n} ${v.toFixed(1)}`).join(', ')}), ` +
        `${s.itemsReadPerSecond.toFixed(1)} items read/s, ${s.itemsWrittenPerSecond.toFixed(1)} items written/s; ` +
        `CPU ${s.cpuPercentOfACorePerWorker.toFixed(3)}% of a core per worker (${s.cpuPercentOfACoreAllWorkers.toFixed(1)}% for all ${WORKERS}); ` +
        `event loop delay p50 ${s.eventLoopDelay.p50Ms.toFixed(1)} ms, p99 ${s.eventLoopDelay.p99Ms.toFixed(1)} ms, max ${s.eventLoopDelay.maxMs.toFixed(1)} ms; still balanced: ${s.stillBalanced}; ${s.acquisitions} acquisitions, lost ${JSON.stringify(s.lostByReason)}` +
        (Object.keys(extra).length > 0 ? `; ${JSON.stringify(extra)}` : '') +
        (errors.size > 0 ? `; errors ${JSON.stringify(Object.fromEntries(errors))}` : ''),
    );
    return result;
  } finally {
    await Promise.all(coordinators.map((coordinator) => coordinator.stop({ timeoutMs: 5_000 }).catch(() => undefined)));
    await opened.close();
  }
}

const results: Record<string, unknown>[] = [];
log(`scale: ${WORKERS} coordinators x ${LEASES} leases in one process, default timing, ${STEADY_S} s of steady state per backend`);
for (const backend of backends) results.push(await run(backend));
const dir = new URL('./results/', import.meta.url);
mkdirSync(dir, { recursive: true });
writeFileSync(new URL('scale.json', dir), JSON.stringify({ workers: WORKERS, leases: LEASES, steadySeconds: STEADY_S, results }, null, 2) + '\n');
log('\nbackend    cold start (s)  ops/s  items read/s  items written/s  read/lease/min  written/lease/min  CPU %core/worker  loop p99 (ms)  loop max (ms)');
for (const r of results as Array<{ backend: string; coldStart: { secondsToBalanced: number | null }; steady: Record<string, number & { p99Ms: number; maxMs: number }> }>) {
  const s = r.steady;
  log(
    [
      r.backend.padEnd(9),
      (r.coldStart.secondsToBalanced?.toFixed(2) ?? 'never').padStart(14),
      s.operationsPerSecond!.toFixed(1).padStart(6),
      s.itemsReadPerSecond!.toFixed(1).padStart(12),
      s.itemsWrittenPerSecond!.toFixed(1).padStart(16),
      s.itemsReadPerLeaseMinute!.toFixed(3).padStart(15),
      s.itemsWrittenPerLeaseMinute!.toFixed(3).padStart(18),
      s.cpuPercentOfACorePerWorker!.toFixed(3).padStart(17),
      s.eventLoopDelay!.p99Ms.toFixed(1).padStart(14),
      s.eventLoopDelay!.maxMs.toFixed(1).padStart(14),
    ].join(' '),
  );
}
if (results.some((r) => (r as { coldStart: { secondsToBalanced: number | null } }).coldStart.secondsToBalanced === null)) process.exitCode = 1;
