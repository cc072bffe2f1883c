/**
 * What one listing of 10,000 leases costs the client, per backend: the wall time and this process's CPU
 * of ten listings one after another, then of 25 at once (as the 25 coordinators of one scale-procs child
 * list on a roster change), with the longest the event loop was held up meanwhile. It is the figure that bounds the scale benchmarks' cold start and take-over
 * on a small machine: every coordinator lists every lease on each membership change.
 *
 *   node scripts/with-services.mjs node --import tsx packages/e2e/bench/listing-cpu.ts [postgres,redis]
 */
import { cpuUsage } from 'node:process';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { createLeases, OPEN } from './backends.js';

const LEASES = 10_000;
const backends = (process.argv[2] ?? 'postgres,redis').split(',') as ('postgres' | 'redis')[];

for (const backend of backends) {
  const opened = await OPEN[backend]();
  const { storage } = opened;
  const group = `listing-cpu-${Date.now()}`;
  await createLeases(storage, group, LEASES);
  for (let i = 0; i < 3; i++) await storage.listLeases(group); // warm-up: connections, prepared statements, JIT
  const rounds = 10;
  const cpuFrom = cpuUsage();
  const wallFrom = performance.now();
  for (let i = 0; i < rounds; i++) await storage.listLeases(group);
  const cpu = cpuUsage(cpuFrom);
  const wall = performance.now() - wallFrom;
  console.log(`${backend}: one listing of ${LEASES}: wall ${(wall / rounds).toFixed(1)} ms, client CPU ${((cpu.user + cpu.system) / 1000 / rounds).toFixed(1)} ms`);
  // The longest the event loop was held up meanwhile: what a heartbeat's timer waits for, in a process
  // of 25 coordinators.
  const delay = monitorEventLoopDelay({ resolution: 5 });
  delay.enable();
  const burstCpuFrom = cpuUsage();
  const burstFrom = performance.now();
  await Promise.all(Array.from({ length: 25 }, () => storage.listLeases(group)));
  const burstCpu = cpuUsage(burstCpuFrom);
  delay.disable();
  console.log(
    `${backend}: 25 listings at once: wall ${(performance.now() - burstFrom).toFixed(0)} ms, client CPU ${((burstCpu.user + burstCpu.system) / 1000).toFixed(0)} ms, ` +
      `event loop held up at most ${(delay.max / 1e6).toFixed(0)} ms`,
  );
  await opened.close();
}
