/**
 * `npm run demo`: a consumer group of worker processes on the embedded local stack. See README.md.
 *
 *   npm run demo                                      # leases in dynalite, started in this process
 *   npm run demo -- --storage postgres://root@127.0.0.1:5432/test
 *   npm run demo -- --storage redis://127.0.0.1:6379
 *   npm run demo -- --dashboard                      # and serve leasehold dashboard's page of the group
 */
import { startDynalite, startKinesisLocal, type RunningDynalite } from '@leasehold/local-stack';
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import type { Cluster } from './cluster.js';
import { formatLeaseTable, formatRoster, readLeaseTable, readRoster } from './lease-table.js';
import { formatLedger, ledgerHolds } from './ledger.js';
import type { Producer } from './producer.js';
import { runScenario } from './scenario.js';
import { hidePassword, openStorage, prepareStorage } from './storage-url.js';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';

// `npm run demo -- --storage URL` reaches here through pnpm, which passes the `--` on.
const argv = process.argv.slice(2);
const { values: args } = parseArgs({
  args: argv[0] === '--' ? argv.slice(1) : argv,
  options: {
    storage: { type: 'string' },
    records: { type: 'string', default: '600' },
    dashboard: { type: 'boolean', default: false },
    help: { type: 'boolean', short: 'h' },
  },
});
if (args.help) {
  process.stdout.write('usage: npm run demo [-- --storage postgres://... | redis://... | dynamodb://TABLE?endpoint=...] [--records N per phase] [--dashboard]\n');
  process.exit(0);
}
const recordsPerPhase = Number(args.records);
if (!Number.isInteger(recordsPerPhase) || recordsPerPhase < 1) throw new Error(`--records must be a positive integer, got ${args.records}`);

/** A log that scrolls above a live block (progress line and lease table) repainted in place on a terminal. */
class Screen {
  readonly #tty = process.stdout.isTTY;
  #live: string[] = [];
  #painted = 0;

  log(line: string): void {
    this.#clear();
    process.stdout.write(`${line}\n`);
    this.#paint();
  }

  live(lines: string[]): void {
    this.#live = lines;
    if (!this.#tty) return;
    this.#clear();
    this.#paint();
  }

  /** Leaves the live block on screen as ordinary output. */
  freeze(): void {
    if (!this.#tty) process.stdout.write(`${this.#live.join('\n')}\n`);
    this.#painted = 0;
    this.#live = [];
  }

  #clear(): void {
    if (this.#tty && this.#painted > 0) process.stdout.write(`\x1b[${this.#painted}A\x1b[0J`);
    this.#painted = 0;
  }

  #paint(): void {
    if (!this.#tty || this.#live.length === 0) return;
    process.stdout.write(`${this.#live.join('\n')}\n`);
    this.#painted = this.#live.length;
  }
}

const screen = new Screen();
const started = Date.now();
const elapsed = (): string => `${((Date.now() - started) / 1000).toFixed(1).padStart(5)}s`;
const runId = `${Date.now().toString(36)}${randomBytes(3).toString('hex')}`;

screen.log(`${elapsed()}  starting kinesis-local`);
const kinesis = await startKinesisLocal();
let dynalite: RunningDynalite | undefined;
let storageUrl = args.storage;
if (storageUrl === undefined) {
  dynalite = await startDynalite();
  storageUrl = `dynamodb://leasehold-demo?endpoint=${encodeURIComponent(dynalite.endpoint)}&region=us-east-1`;
  screen.log(`${elapsed()}  leases in dynalite at ${dynalite.endpoint} (pass --storage postgres://... or redis://... for another backend)`);
}
const prepared = await prepareStorage(storageUrl, runId).catch((error: unknown) => {
  process.stderr.write(`cannot use storage ${hidePassword(storageUrl)}: ${(error as Error).message}\n`);
  process.exit(1);
});
const viewer = await openStorage(prepared);
screen.log(`${elapsed()}  leases in ${viewer.display}`);

let cluster: Cluster | undefined;
let producer: Producer | undefined;
let progress = '';
let table: string[] = [];
let group = '';
let final: string[] = [];
/** With --dashboard: `leasehold dashboard`'s server for the group, on the demo's storage reader, once the group is known. */
let dashboard: Promise<{ close(): Promise<void> } | undefined> = Promise.resolve(undefined);

async function startDemoDashboard(name: string): Promise<{ close(): Promise<void> } | undefined> {
  try {
    // Loaded only when asked for: the demo without the flag runs as it always did.
    const { startDashboard } = await import('@leasehold/cli');
    const running = await startDashboard({ storage: viewer.storage, display: viewer.display, group: name, intervalMs: 1_000, stallMs: 30_000 });
    screen.log(`${elapsed()}  dashboard of ${name}: ${running.url}`);
    return running;
  } catch (error) {
    screen.log(`${elapsed()}  the dashboard did not start: ${(error as Error).message}`);
    return undefined;
  }
}

const refresh = (): void => screen.live([progress, ...table].filter((line) => line !== ''));
let reading = false;
const timer = setInterval(() => {
  if (reading || producer === undefined || group === '') return;
  reading = true;
  const records = producer.produced;
  Promise.all([readLeaseTable(viewer.storage, group, records), readRoster(viewer.storage, group)])
    .then(([rows, members]) => {
      const processed = cluster === undefined ? 0 : new Set(cluster.reports.flatMap((report) => (report.type === 'record' ? [`${report.key}#${report.seq}`] : []))).size;
      const roster = members.length === 0 ? [] : ['', ...formatRoster(members)];
      table = ['', `  lease table of ${group}: ${processed}/${records.length} records processed`, ...formatLeaseTable(rows), ...roster, ''];
      refresh();
    })
    .catch(() => undefined)
    .finally(() => {
      reading = false;
    });
}, 400);

let exitCode = 1;
try {
  const result = await runScenario({
    storageUrl: prepared,
    kinesis: { endpoint: kinesis.endpoint, region: kinesis.region },
    runId,
    recordsPerPhase,
    rewind: true,
    onRewind: (event) => {
      if ('plan' in event) {
        const short = (position: string | null): string => (position === null ? '-' : position.length > 24 ? `...${position.slice(-12)}` : position);
        screen.log(
          [
            `${elapsed()}  the rewind's plan (what leasehold rewind shows without --apply): ${event.plan.moves.length} leases move to ${event.plan.to}`,
            ...event.plan.moves.map((move) => `      ${move.leaseKey.padEnd(24)} ${(move.owner ?? 'free').padEnd(10)} ${short(move.from).padEnd(16)} -> ${move.how}`),
            ...event.plan.notReplayable.map((note) => `      not replayed: ${note.leaseKey}: ${note.reason}`),
          ].join('\n'),
        );
      } else if (event.progress.done > 0) {
        screen.log(`${elapsed()}  rewind: ${event.progress.done}/${event.progress.total} shards moved (${Math.round(event.progress.elapsedMs)} ms)`);
      }
    },
    onStep: (step) => {
      progress = '';
      // Without a terminal to repaint, the table is printed as it stands before each step.
      if (!process.stdout.isTTY && table.length > 0) screen.log(table.join('\n'));
      screen.log(`${elapsed()}  ${step}`);
    },
    onBalanced: async () => {
      // The roster once every worker holds a shard: one member per worker, each with its incarnation.
      screen.log(
        [`${elapsed()}  balanced; the roster of ${group} (each worker heartbeats its own member record; nothing renews the leases):`, ...formatRoster(await readRoster(viewer.storage, group))].join('\n'),
      );
    },
    onSettled: async () => {
      clearInterval(timer);
      final = [
        ...formatLeaseTable(await readLeaseTable(viewer.storage, group, producer?.produced ?? [])),
        '',
        `  roster of ${group}:`,
        ...formatRoster(await readRoster(viewer.storage, group)),
      ];
      table = [];
    },
    onProgress: (done, count) => {
      const width = 30;
      const filled = Math.round((done / count) * width);
      progress = `  producing [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${done}/${count} records`;
      refresh();
    },
    onCluster: (running, records) => {
      cluster = running;
      producer = records;
      group = `group-${runId}`;
      if (args.dashboard) dashboard = startDemoDashboard(group);
      running.onReport((report) => {
        if (report.type === 'ended') screen.log(`${elapsed()}  ${report.worker}: ${report.shardId} reached its end; children ${report.childShardIds.join(', ')}`);
        if (report.type === 'handed-off') screen.log(`${elapsed()}  ${report.worker}: handed ${report.shardId} off to ${report.to}`);
        if (report.type === 'started') screen.log(`${elapsed()}  ${report.worker}: took ${report.shardId} at ${report.position.length > 20 ? `...${report.position.slice(-10)}` : report.position}`);
      });
    },
  });
  progress = '';
  table = ['', `  lease table of ${result.group} once every record was processed`, ...final, ''];
  refresh();
  screen.freeze();
  const rewind = result.rewind;
  const rewindOk = rewind !== undefined && rewind.notReplayed === 0 && rewind.replayedOutOfOrder === 0;
  const ok = ledgerHolds(result.ledger) && rewindOk;
  process.stdout.write(`verification (${elapsed().trim()}):\n${formatLedger(result.ledger)}\n`);
  if (rewind) {
    process.stdout.write(
      `rewind to ${new Date(rewind.targetMs).toISOString()}: every shard moved ${Math.round(rewind.movedAt - rewind.askedAt)} ms after the command; ` +
        `records after the target not handed over again: ${rewind.notReplayed}, replayed out of order per key: ${rewind.replayedOutOfOrder}\n`,
    );
  }
  process.stdout.write('\n');
  process.stdout.write(ok ? 'every record was processed at least once, in order per key, and the rewind replayed every record after its target.\n' : 'FAILED: records were lost, processed out of order, or not replayed by the rewind.\n');
  exitCode = ok ? 0 : 1;
} catch (error) {
  clearInterval(timer);
  screen.freeze();
  process.stderr.write(`demo failed: ${(error as Error).stack ?? String(error)}\n`);
  for (const worker of cluster?.workers.values() ?? []) {
    if (worker.stderr !== '') process.stderr.write(`--- ${worker.workerId} stderr ---\n${worker.stderr}\n`);
  }
} finally {
  clearInterval(timer);
  await (await dashboard)?.close();
  await viewer.close();
  await dynalite?.close();
  await kinesis.close();
}
process.exit(exitCode);
