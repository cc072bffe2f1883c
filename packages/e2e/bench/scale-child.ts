/**
 * One process of the multi-process scale benchmark (`scale-procs.ts`): it opens its own clients of the
 * run's records (`attach`), builds a lease coordinator with the default timing for each index of
 * `--workers` (comma-separated; index N is named `worker-NNN`), and talks to its parent over the IPC channel:
 *
 * - it sends `ready` once its coordinators are built, and starts them all at once on `go`;
 * - it sends its coordinators' events in batches every 100 ms (`events`: acquired, lost, handed-off,
 *   released, joined, member-dead and error, each with its worker's index and the wall-clock time);
 * - on `collect` it answers with its storage calls and items, CPU time and event-loop delay since the
 *   previous `collect` (`collected`), and starts counting anew;
 * - on `held` it answers with the lease keys each of its coordinators holds and when each last wrote its
 *   own member record (`held`);
 * - on `stop` it stops one of its coordinators gracefully (`stop()`: drains, hands over, leaves) and
 *   answers `stopped` once that returned;
 * - SIGTERM stops its coordinators and closes its clients; the end of the IPC channel (its parent died)
 *   ends it at once.
 *
 *   node --import tsx bench/scale-child.ts --location JSON --group G --workers 0,1,2,3 [--no-change-feed] [--domain D]
 *
 * `--no-change-feed` runs the coordinators without the store's change feed, as on a store that has none
 * (DynamoDB), on any backend.
 */
import { LeaseCoordinator, type Storage } from '@leasehold/core';
import { withUnsafe } from '@leasehold/core/testing';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { now } from '../src/reports.js';
import { attach, type Location } from './backends.js';
import { counting, emptyTally, loopDelay, LOOP_RESOLUTION_MS, type LoopDelay, type Tally } from './counting.js';

/**
 * One event: [what, worker index, subject, wall-clock ms, detail]. The subject is a lease key, the
 * incarnation joined (`joined`), the worker declared dead (`member-dead`) or `operation: error name`
 * (`error`); the detail is the reason of a `lost`, or for `written` (a lease write of this process that
 * names a new owner for someone else to hear of, or writes the lease free: a deal, a handover, a free;
 * worker -1, the writer not being known to the shared client) the worker the write names, empty when free.
 */
export type ChildEvent = [
  kind: 'acquired' | 'lost' | 'handed-off' | 'released' | 'joined' | 'member-dead' | 'error' | 'written',
  worker: number,
  subject: string,
  at: number,
  detail?: string,
];

export type ToChild = { type: 'go' } | { type: 'collect' } | { type: 'held' } | { type: 'stop'; worker: number } | { type: 'join'; worker: number };

export interface Collected {
  type: 'collected';
  tally: Tally;
  cpuSeconds: number;
  eventLoopDelay: LoopDelay;
}

export type FromChild =
  | { type: 'ready' }
  | { type: 'events'; events: ChildEvent[] }
  | Collected
  | { type: 'held'; held: Record<string, string[]>; heartbeats: Record<string, number> }
  | { type: 'stopped'; worker: number }
  | { type: 'fatal'; worker: string; message: string };

const { values } = parseArgs({
  options: {
    location: { type: 'string' },
    group: { type: 'string' },
    workers: { type: 'string' },
    'postgres-pool': { type: 'string', default: '8' },
    'no-change-feed': { type: 'boolean', default: false },
    domain: { type: 'string' },
  },
});
const indices = (values.workers ?? '').split(',').filter((part) => part !== '').map(Number);
if (values.location === undefined || values.group === undefined || indices.length === 0 || !indices.every((i) => Number.isInteger(i) && i >= 0) || !process.send) {
  process.stderr.write('scale-child: --location, --group and --workers (whole numbers, comma-separated) are required, and it runs with an IPC channel (spawned by scale-procs.ts)\n');
  process.exit(2);
}
const send = (message: FromChild): void => void process.send!(message);
const location = JSON.parse(values.location) as Location;
const group = values.group;

process.on('disconnect', () => process.exit(1));

const attached = await attach(location, { postgresPool: Number(values['postgres-pool']) });
let tally = emptyTally();
/** When each coordinator's own member record last took a write (join or heartbeat), by wall clock when the answer came. */
const heartbeats = new Map<string, number>();
const noted = (inner: Storage): Storage => ({
  ...inner,
  putMember: async (group, workerId, version, next) => {
    const result = await inner.putMember(group, workerId, version, next);
    if (result.status === 'applied' && next.status === 'alive' && coordinators.some((c) => c.workerId === workerId)) heartbeats.set(workerId, now());
    return result;
  },
  updateLeases: async (group, updates) => {
    const results = await inner.updateLeases(group, updates);
    const at = now();
    updates.forEach((update, i) => {
      if (update.notify !== undefined && results[i]?.status === 'applied') pending.push(['written', -1, update.leaseKey, at, update.next.owner ?? '']);
    });
    return results;
  },
});
const storage = noted(counting(attached.storage, () => tally));
let pending: ChildEvent[] = [];
const coordinators: LeaseCoordinator[] = [];
/** Builds worker `i`'s coordinator, reporting its events to the parent. */
function coordinatorOf(i: number): LeaseCoordinator {
  const workerId = `worker-${String(i).padStart(3, '0')}`;
  const options = {
    storage: attached.storageFor ? noted(counting(attached.storageFor(i), () => tally)) : storage,
    group,
    workerId,
    ...(values['no-change-feed'] ? { useChangeFeed: false } : {}),
    // What fails together with it: this process (scale-procs gives each its own, unless BENCH_NO_DOMAINS=1).
    ...(values.domain === undefined ? {} : { failureDomain: values.domain }),
  };
  // For side-by-side runs of one build, each bringing back what a rule replaced (an unsafe switch):
  // BENCH_LOST_DOMAINS_DEALT=1, a lost domain's members are dealt its leases (`lostDomainsDealt`);
  // BENCH_DUE_READS_SKIPPED=1, watchers read their watched members at the take ticks only (`dueReadsSkipped`);
  const unsafe = {
    ...(process.env.BENCH_LOST_DOMAINS_DEALT === '1' ? { lostDomainsDealt: true } : {}),
    ...(process.env.BENCH_DUE_READS_SKIPPED === '1' ? { dueReadsSkipped: true } : {}),
    // BENCH_FEED_UNADDRESSED=1, every worker hears every handover (`feedUnaddressed`).
    ...(process.env.BENCH_FEED_UNADDRESSED === '1' ? { feedUnaddressed: true } : {}),
  };
  const coordinator = new LeaseCoordinator(Object.keys(unsafe).length > 0 ? withUnsafe(options, unsafe) : options);
  coordinator.on('acquired', ({ leaseKey }) => pending.push(['acquired', i, leaseKey, now()]));
  coordinator.on('lost', ({ leaseKey, reason }) => pending.push(['lost', i, leaseKey, now(), reason]));
  coordinator.on('handed-off', ({ leaseKey }) => pending.push(['handed-off', i, leaseKey, now()]));
  coordinator.on('released', ({ leaseKey }) => pending.push(['released', i, leaseKey, now()]));
  coordinator.on('joined', ({ incarnation }) => pending.push(['joined', i, incarnation, now()]));
  coordinator.on('member-dead', ({ workerId: dead }) => pending.push(['member-dead', i, dead, now()]));
  coordinator.on('error', ({ operation, error }) => pending.push(['error', i, `${operation}: ${error.name}`, now()]));
  coordinator.on('fatal', ({ error }) => send({ type: 'fatal', worker: workerId, message: error.message }));
  return coordinator;
}
for (const i of indices) coordinators.push(coordinatorOf(i));

const flush = setInterval(() => {
  if (pending.length === 0) return;
  send({ type: 'events', events: pending });
  pending = [];
}, 100);

const delay = monitorEventLoopDelay({ resolution: LOOP_RESOLUTION_MS });
delay.enable();
let cpu = process.cpuUsage();

process.on('message', (message: ToChild) => {
  switch (message.type) {
    case 'go':
      for (const coordinator of coordinators) {
        coordinator.start().catch((error: Error) => send({ type: 'fatal', worker: coordinator.workerId, message: `start: ${error.message}` }));
      }
      return;
    case 'collect': {
      const used = process.cpuUsage(cpu);
      send({ type: 'collected', tally, cpuSeconds: (used.user + used.system) / 1e6, eventLoopDelay: loopDelay(delay) });
      tally = emptyTally();
      cpu = process.cpuUsage();
      delay.reset();
      return;
    }
    case 'stop': {
      const coordinator = coordinators[indices.indexOf(message.worker)];
      if (!coordinator) return;
      void coordinator
        .stop()
        .catch(() => undefined)
        .then(() => send({ type: 'stopped', worker: message.worker }));
      return;
    }
    case 'join': {
      const coordinator = coordinatorOf(message.worker);
      indices.push(message.worker);
      coordinators.push(coordinator);
      coordinator.start().catch((error: Error) => send({ type: 'fatal', worker: coordinator.workerId, message: `start: ${error.message}` }));
      return;
    }
    case 'held':
      send({
        type: 'held',
        held: Object.fromEntries(coordinators.map((c) => [c.workerId, c.heldLeases().map((lease) => lease.leaseKey)])),
        heartbeats: Object.fromEntries(heartbeats),
      });
      return;
  }
});

process.once('SIGTERM', () => {
  clearInterval(flush);
  void Promise.all(coordinators.map((coordinator) => coordinator.stop({ timeoutMs: 5_000 }).catch(() => undefined)))
    .then(() => attached.close())
    .finally(() => process.exit(0));
});

send({ type: 'ready' });
