/// <reference lib="dom" />
/// <reference lib="dom.iterable" />
/**
 * The dashboard in a real browser (headless Chromium driven by playwright-core), over a real group: three
 * workers of core's Consumer in this process, on a stream in memory and a store in memory. It checks what
 * a person watching the page would: a killed worker turns expired and its shards move to the others, a
 * split shows as two children of their parent in the lineage, a rewind shows on the shards it moves.
 */
import { existsSync } from 'node:fs';
import { applyRewind, MemoryStorage, parseRewindTarget, planRewind } from '@leasehold/core';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDashboard, type RunningDashboard } from '../src/dashboard/server.js';
import { startInProcessGroup, type InProcessGroup } from './dashboard-support.js';
import { freshName } from './support.js';

const CHROMIUM = process.env.LEASEHOLD_CHROMIUM ?? '/usr/bin/chromium';
const INSTALL = `no Chromium at ${CHROMIUM}: install it with \`apt-get install -y chromium\` (or scripts/install-chromium.sh), or point LEASEHOLD_CHROMIUM at one`;
const present = existsSync(CHROMIUM);
// In CI a missing browser fails the run; on a developer's machine the test is skipped, saying how to get one.
if (!present && process.env.CI === undefined) process.stderr.write(`dashboard browser test skipped: ${INSTALL}\n`);

/** The flags Chromium needs in a container without a GPU, a sandbox or a network to update itself from. */
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const WAIT = { timeout: 30_000, intervals: [100, 250, 500] };

describe.skipIf(!present && process.env.CI === undefined)('leasehold dashboard in a browser', () => {
  const storage = new MemoryStorage();
  let running: InProcessGroup | undefined;
  let dashboard: RunningDashboard | undefined;
  let browser: Browser | undefined;
  let page: Page;
  const group = (): InProcessGroup => running as InProcessGroup;

  beforeAll(async () => {
    if (!present) throw new Error(INSTALL);
    running = await startInProcessGroup(storage, freshName('orders'), ['worker-a', 'worker-b', 'worker-c'], { shards: 4, severable: ['worker-c'] });
    dashboard = await startDashboard({ storage, display: 'memory:', group: running.group, intervalMs: 200, stallMs: 60_000 });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, timeout: 30_000 });
    page = await browser.newPage();
    await page.goto(dashboard.url);
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await dashboard?.close();
    await running?.stop();
  });

  /** The lease rows of the page: key, owner and state as drawn. */
  const leaseRows = (): Promise<Array<{ lease: string; owner: string; state: string; rewind: string }>> =>
    page.$$eval('tr[data-lease]', (rows) =>
      rows.map((row) => ({ lease: row.getAttribute('data-lease') ?? '', owner: row.getAttribute('data-owner') ?? '', state: row.getAttribute('data-state') ?? '', rewind: row.getAttribute('data-rewind') ?? '' })),
    );
  const liveness = (workerId: string): Promise<string | null> =>
    page.$eval(`tr[data-worker="${workerId}"]`, (row) => row.getAttribute('data-liveness')).catch(() => null);

  it("shows a killed worker expired, and its shards under the other workers' names", async () => {
    // Every shard held, worker-c among the owners: the group as it runs.
    await expect.poll(async () => (await leaseRows()).filter((row) => row.state === 'alive').length, WAIT).toBe(4);
    await expect.poll(async () => (await leaseRows()).some((row) => row.owner === 'worker-c'), WAIT).toBe(true);
    const ofC = (await leaseRows()).filter((row) => row.owner === 'worker-c').map((row) => row.lease);
    expect(await liveness('worker-c')).toBe('alive');

    group().workers.get('worker-c')?.cut?.();

    // Observed not heartbeating for its lease duration; the others may declare it dead as soon.
    await expect.poll(() => liveness('worker-c'), WAIT).toMatch(/^(expired|dead)$/);
    await expect
      .poll(async () => (await leaseRows()).filter((row) => ofC.includes(row.lease)).map((row) => [row.owner === 'worker-a' || row.owner === 'worker-b', row.state]), WAIT)
      .toEqual(ofC.map(() => [true, 'alive']));
    await expect.poll(() => page.locator('#timeline li[data-worker="worker-c"]').filter({ hasText: /expired|declared dead/ }).count(), WAIT).toBeGreaterThan(0);
  });

  it('draws a split shard as its two children, one generation after it, in the lineage graph', async () => {
    const parent = (await leaseRows()).find((row) => row.state === 'alive')?.lease as string;
    const [first, second] = group().source.split(parent);
    // The graph as drawn: the nodes naming the parent, with their generations, and the parent's generation.
    const lineage = (): Promise<{ children: string[]; generations: number[] }> =>
      page.evaluate((key) => {
        const parentNode = document.querySelector(`svg g[data-node="${key}"]`);
        const nodes = [...document.querySelectorAll(`svg g[data-parents="${key}"]`)];
        const base = Number(parentNode?.getAttribute('data-generation') ?? Number.NaN);
        return {
          children: nodes.map((node) => node.getAttribute('data-node') ?? '').sort(),
          generations: nodes.map((node) => Number(node.getAttribute('data-generation')) - base),
        };
      }, parent);
    await expect.poll(lineage, WAIT).toEqual({ children: [first, second].sort(), generations: [1, 1] });
    expect(await page.locator(`svg line[data-edge="${parent}>${first}"]`).count()).toBe(1);
    // Read to its end, then (once its children started) cleaned up by the leader: drawn either way.
    await expect.poll(() => page.$eval(`svg g[data-node="${parent}"]`, (node) => node.getAttribute('data-state')), WAIT).toMatch(/^(finished|deleted)$/);
  });

  it('shows a rewind on the shards it moves', async () => {
    const target = (await leaseRows()).find((row) => row.state === 'alive' && row.owner === 'worker-a')?.lease as string;
    const plan = await planRewind({ storage, group: group().group, to: parseRewindTarget('trim-horizon'), select: { leaseKeys: [target] } });
    await applyRewind(plan, { storage });
    await expect.poll(async () => (await leaseRows()).find((row) => row.lease === target)?.rewind, WAIT).toBe(plan.rewindId);
    await expect.poll(() => page.locator(`#timeline li[data-lease="${target}"]`).filter({ hasText: plan.rewindId }).count(), WAIT).toBeGreaterThan(0);
  });
});
