// Temporary probe: CPU and wall time of listLeases of 10,000 leases, per backend.
import { OPEN, createLeases } from './backends.js';
import { cpuUsage } from 'node:process';
for (const backend of (process.env.PROBE_BACKENDS ?? 'postgres,redis').split(',') as ('postgres' | 'redis')[]) {
  const opened = await OPEN[backend]();
  const storage = opened.storage;
  const group = `probe-${Date.now()}`;
  await createLeases(storage, group, 10_000);
  for (let i = 0; i < 3; i++) await storage.listLeases(group);
  const c0 = cpuUsage(); const t0 = performance.now();
  const n = 10;
  for (let i = 0; i < n; i++) await storage.listLeases(group);
  const c = cpuUsage(c0); const t = performance.now() - t0;
  console.log(backend, 'per listing of 10,000: wall', (t / n).toFixed(1), 'ms, client CPU', ((c.user + c.system) / 1000 / n).toFixed(1), 'ms');
  const r0 = cpuUsage(); const w0 = performance.now();
  await Promise.all(Array.from({ length: 25 }, () => storage.listLeases(group)));
  const r = cpuUsage(r0);
  console.log(backend, '25 at once: wall', (performance.now() - w0).toFixed(0), 'ms, client CPU', ((r.user + r.system) / 1000).toFixed(0), 'ms');
  await opened.close();
}
