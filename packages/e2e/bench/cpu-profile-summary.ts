/**
 * Where the CPU went during a drain, the workers' and the plain loop's three fresh processes': reads the V8
 * CPU profiles and the drains' spans that `BENCH_CPU_PROFILE=DIR` leaves in DIR (run.ts), keeps each
 * profile's samples inside its span, and
 * charges each sample to a component by the first frame up its stack that is not node's own (a socket
 * write under ioredis is the Redis client's; a sample under node's module loader is module loading).
 *
 *   node --import tsx bench/cpu-profile-summary.ts DIR
 *
 * Prints, per span and for all spans of a kind together, each component's share of the sampled CPU and
 * the CPU per 1,000 records it stands for (the share times the drain's CPU figure from /proc).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { chargeProfile, COMPONENTS, type Component, type Profile, type ProfileWindow } from './cpu-profile.js';

function summarize(dir: string): void {
  const files = readdirSync(dir);
  const windows = files.filter((file) => file.startsWith('window-')).map((file) => JSON.parse(readFileSync(join(dir, file), 'utf8')) as ProfileWindow);
  const profileOf = (pid: number): Profile | undefined => {
    const file = files.find((name) => name.endsWith('.cpuprofile') && name.split('.')[3] === String(pid));
    return file === undefined ? undefined : (JSON.parse(readFileSync(join(dir, file), 'utf8')) as Profile);
  };
  const totals = new Map<string, { charged: Map<Component, number>; cpuMs: number; records: number; drains: number }>();
  const rows: string[][] = [];
  for (const window of windows) {
    const charged = new Map<Component, number>();
    for (const pid of window.pids) {
      const profile = profileOf(pid);
      if (profile === undefined) throw new Error(`no CPU profile of process ${pid} in ${dir} (was it stopped before it could write it?)`);
      for (const [component, us] of chargeProfile(profile, window.startUs, window.endUs)) charged.set(component, (charged.get(component) ?? 0) + us);
    }
    const total = totals.get(window.kind) ?? { charged: new Map<Component, number>(), cpuMs: 0, records: 0, drains: 0 };
    for (const [component, us] of charged) total.charged.set(component, (total.charged.get(component) ?? 0) + us);
    total.cpuMs += window.cpuMs;
    total.records += window.records;
    total.drains += 1;
    totals.set(window.kind, total);
    rows.push(...table(`${window.kind} (processes ${window.pids.join(', ')})`, charged, window.cpuMs, window.records));
  }
  for (const [kind, total] of totals) rows.push(...table(`${kind}: ${total.drains} spans together`, total.charged, total.cpuMs, total.records));
  process.stdout.write(`${rows.map((row) => row.join(' | ')).join('\n')}\n`);
}

/** Rows of one span: each component's share of the samples and the CPU per 1,000 records it stands for. */
function table(title: string, charged: ReadonlyMap<Component, number>, cpuMs: number, records: number): string[][] {
  const sampled = [...charged.values()].reduce((sum, us) => sum + us, 0);
  const rows: string[][] = [[`## ${title}: ${(cpuMs / (records / 1000)).toFixed(1)} ms of CPU per 1,000 records (/proc), ${(sampled / 1000).toFixed(0)} ms sampled`]];
  for (const component of COMPONENTS) {
    const us = charged.get(component) ?? 0;
    if (us === 0) continue;
    const share = us / sampled;
    rows.push([component, `${(share * 100).toFixed(1)}%`, `${((share * cpuMs) / (records / 1000)).toFixed(1)} ms / 1,000 records`]);
  }
  return rows;
}

const dir = process.argv[2];
if (dir === undefined) {
  process.stderr.write('usage: cpu-profile-summary.ts DIR (the BENCH_CPU_PROFILE directory of a drain bench)\n');
  process.exit(2);
}
summarize(dir);
