/**
 * The README's dashboard figures, measured: `node --import tsx scripts/dashboard-figures.ts` in
 * packages/cli (Chromium installed, see scripts/install-chromium.sh at the repository's root).
 *
 * 1. What the dashboard costs the group's storage: a dashboard reading every 1000 ms over an in-process
 *    group, its storage calls counted by a wrapping storage, for 10 s with 1 page open and 10 s with 10.
 * 2. A screenshot of the page over the demo's group (`npm run demo -- --dashboard`), saved as
 *    docs/dashboard.png once the demo has killed a worker, split and merged shards and added a worker.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { MemoryStorage } from '@leasehold/core';
import { chromium } from 'playwright-core';
import { startDashboard } from '../src/dashboard/server.js';
import { countingStorage, openEvents, startInProcessGroup, type EventClient } from '../test/dashboard-support.js';

const CHROMIUM = process.env.LEASEHOLD_CHROMIUM ?? '/usr/bin/chromium';
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const root = fileURLToPath(new URL('../../..', import.meta.url));
const screenshot = fileURLToPath(new URL('../docs/dashboard.png', import.meta.url));
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

async function cost(): Promise<void> {
  const storage = new MemoryStorage();
  const group = await startInProcessGroup(storage, 'orders', ['worker-a', 'worker-b', 'worker-c'], { shards: 4 });
  const counted = countingStorage(storage);
  const dashboard = await startDashboard({ storage: counted.storage, display: 'memory:', group: group.group, intervalMs: 1_000, stallMs: 60_000 });
  const clients: EventClient[] = [];
  try {
    await dashboard.ready;
    for (const pages of [1, 10]) {
      while (clients.length < pages) clients.push(await openEvents(dashboard.url));
      const before = counted.total();
      const seen = clients.map((client) => client.states.length);
      await sleep(10_000);
      const reads = counted.total() - before;
      const events = clients.map((client, i) => client.states.length - (seen[i] ?? 0));
      process.stdout.write(`${pages} page(s) open: ${reads} storage calls in 10 s = ${(reads / 10).toFixed(1)} per second; snapshots per page: ${Math.min(...events)}..${Math.max(...events)}\n`);
    }
    process.stdout.write(`calls by method over the run: ${JSON.stringify(Object.fromEntries(counted.calls))}\n`);
  } finally {
    for (const client of clients) client.close();
    await dashboard.close();
    await group.stop();
  }
}

async function picture(): Promise<void> {
  const demo = spawn(process.execPath, ['scripts/pnpm.mjs', '--filter', '@leasehold/e2e', 'run', 'demo', '--', '--dashboard'], { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] });
  let output = '';
  demo.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => demo.on('exit', resolve));
  let url: string | undefined;
  for (let i = 0; i < 600 && url === undefined; i++) {
    url = /dashboard of \S+: (http:\/\/\S+)/.exec(output)?.[1];
    await sleep(100);
  }
  if (url === undefined) throw new Error(`the demo printed no dashboard URL:\n${output}`);
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ARGS });
  try {
    const page = await browser.newPage({ viewport: { width: 1500, height: 1100 } });
    await page.goto(url);
    // Once a worker joined after the kill, the split and the merge, the page has something of each to show.
    await page.waitForFunction(() => document.querySelector('tr[data-worker="worker-4"]') !== null && document.querySelectorAll('svg g[data-generation="1"]').length >= 3, undefined, { timeout: 120_000, polling: 250 });
    await sleep(2_000);
    await page.screenshot({ path: screenshot, fullPage: true });
    process.stdout.write(`screenshot: ${screenshot}\n`);
  } finally {
    await browser.close();
  }
  const code = await exited;
  if (code !== 0) throw new Error(`the demo exited with ${String(code)}`);
}

await cost();
await picture();
