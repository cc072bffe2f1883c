/**
 * `leasehold status`: the lease table of a group, its workers and its leader, once or refreshed in place.
 * Leases that cannot be read back are listed with their error instead of failing the command; stalls the
 * workers reported are shown per lease.
 */
import { RECORD_FORMAT, type LeaderRecord, type LeaseRecord } from '@leasehold/core';
import { openBackend } from '../connect.js';
import { isNewerFormat, stallOf, type Stall } from '../health.js';
import { Observer, type Age } from '../observe.js';
import { checkGroup, formatDuration, readGroup, readKnownGroup, table, type GroupState, type Io } from '../shared.js';
import { parseStorageUrl } from '../url.js';

/** Options of {@link status}. */
export interface StatusOptions {
  readonly storage: string;
  readonly group: string;
  readonly json: boolean;
  readonly watch: boolean;
  readonly intervalMs: number;
  /** With `watch`: stop after this many screens; `undefined` runs until interrupted. */
  readonly iterations: number | undefined;
}

/** One lease as `--json` shows it: the stored record (its `format` included) plus its age as observed by this process. */
export interface LeaseView extends LeaseRecord {
  /** Milliseconds since this process saw the version change; `null` until it has seen a change. */
  readonly ageMs: number | null;
  /** The version is at least this old: the time since this process first saw it. */
  readonly ageAtLeastMs: number;
  /** The stall its worker reports on it (from `leasehold.stalledSince` and `leasehold.stalledReason`), or `null`. */
  readonly stalled: Stall | null;
}

/** A stored record that cannot be read back, as `--json` shows it. */
export interface CorruptView {
  /** The lease key, or `null` for the leader record. */
  readonly leaseKey: string | null;
  /** The error's message: what is wrong with it. */
  readonly error: string;
}

/** A worker as seen from storage: an owner of leases, or the leader. */
export interface WorkerView {
  readonly workerId: string;
  readonly leases: number;
  readonly leader: boolean;
}

/** The whole `--json` document of one screen. */
export interface StatusView {
  readonly group: string;
  readonly storage: string;
  readonly leases: LeaseView[];
  readonly workers: WorkerView[];
  readonly leader: (LeaderRecord & { readonly ageMs: number | null; readonly ageAtLeastMs: number }) | null;
  /** The group's records that cannot be read back (leases, and the leader record): nobody writes them. */
  readonly corrupt: CorruptView[];
}

const CLEAR_SCREEN = '\u001b[H\u001b[2J';

/** Prints the group's status; with `watch`, again every `intervalMs` until interrupted or `iterations` screens. */
export async function status(options: StatusOptions, io: Io): Promise<void> {
  checkGroup(options.group);
  const target = parseStorageUrl(options.storage);
  const backend = await openBackend(target);
  try {
    const leaseObserver = new Observer();
    const leaderObserver = new Observer();
    let state = await readKnownGroup(backend.storage, options.group, target.display);
    for (let screen = 1; ; screen++) {
      const view = viewOf(options.group, target.display, state, leaseObserver, leaderObserver);
      io.out(render(view, options, io, screen));
      if (!options.watch || screen === options.iterations || io.signal.aborted) return;
      if (!(await pause(options.intervalMs, io.signal))) return;
      state = await readGroup(backend.storage, options.group);
    }
  } finally {
    await backend.close();
  }
}

function render(view: StatusView, options: StatusOptions, io: Io, screen: number): string {
  if (options.json) return `${JSON.stringify(view, null, options.watch ? undefined : 2)}\n`;
  const text = `${renderText(view)}\n`;
  if (!options.watch) return text;
  if (io.isTTY) return `${CLEAR_SCREEN}${text}`;
  return screen === 1 ? text : `\n${text}`;
}

function viewOf(group: string, storage: string, state: GroupState, leases: Observer, leaders: Observer): StatusView {
  const wallNow = Date.now();
  const ages = leases.observe(state.leases);
  const leaderAge = state.leader === null ? undefined : leaders.observe([{ leaseKey: 'leader', version: state.leader.version }]).get('leader');
  const counts = new Map<string, number>();
  for (const lease of state.leases) if (lease.owner !== null) counts.set(lease.owner, (counts.get(lease.owner) ?? 0) + 1);
  const holder = state.leader?.holder ?? null;
  if (holder !== null && !counts.has(holder)) counts.set(holder, 0);
  const workers = [...counts]
    .map(([workerId, count]) => ({ workerId, leases: count, leader: workerId === holder }))
    .sort((a, b) => b.leases - a.leases || (a.workerId < b.workerId ? -1 : 1));
  return {
    group,
    storage,
    leases: state.leases.map((lease) => ({ ...lease, ...ageFields(ages.get(lease.leaseKey)), stalled: stallOf(lease, wallNow) })),
    workers,
    leader: state.leader === null ? null : { ...state.leader, ...ageFields(leaderAge) },
    corrupt: [
      ...state.corrupt.map((error) => ({ leaseKey: error.leaseKey ?? null, error: error.message })),
      ...(state.corruptLeader === null ? [] : [{ leaseKey: null, error: state.corruptLeader.message }]),
    ],
  };
}

function ageFields(age: Age | undefined): { ageMs: number | null; ageAtLeastMs: number } {
  return { ageMs: age === undefined ? null : round(age.ageMs), ageAtLeastMs: round(age?.atLeastMs ?? 0) };
}

function round(ms: number): number;
function round(ms: number | null): number | null;
function round(ms: number | null): number | null {
  return ms === null ? null : Math.round(ms);
}

function showAge(ageMs: number | null, atLeastMs: number): string {
  if (ageMs !== null) return formatDuration(ageMs);
  return atLeastMs === 0 ? '—' : `≥${formatDuration(atLeastMs)}`;
}

function showStall(stall: Stall | null): string {
  if (stall === null) return '-';
  return stall.forMs === null ? `${stall.reason} since ${stall.since}` : `${stall.reason} ${formatDuration(stall.forMs)}`;
}

function renderText(view: StatusView): string {
  const lines = [`group ${view.group} in ${view.storage}`];
  const leader = view.leader;
  const corruptLeader = view.corrupt.find((record) => record.leaseKey === null);
  lines.push(
    corruptLeader !== undefined
      ? `leader: unknown, the leader record cannot be read back: ${corruptLeader.error}`
      : leader === null
        ? 'leader: none (no leader record)'
        : `leader: ${leader.holder ?? 'none'} (term ${leader.term}, version ${leader.version}, age ${showAge(leader.ageMs, leader.ageAtLeastMs)})`,
  );
  lines.push('');
  lines.push(
    table(
      ['LEASE', 'OWNER', 'CHECKPOINT', 'EPOCH', 'VERSION', 'AGE', 'PENDING', 'STALLED'],
      view.leases.map((lease) => [
        lease.leaseKey,
        lease.owner ?? '-',
        lease.checkpoint ?? '-',
        String(lease.epoch),
        String(lease.version),
        showAge(lease.ageMs, lease.ageAtLeastMs),
        lease.pendingOwner === null ? '-' : `→ ${lease.pendingOwner}`,
        showStall(lease.stalled),
      ]),
    ),
  );
  const corruptLeases = view.corrupt.filter((record) => record.leaseKey !== null);
  if (corruptLeases.length > 0) {
    lines.push('');
    lines.push(`corrupt leases (they cannot be read back and nobody takes them; see leasehold doctor --group ${view.group}):`);
    for (const record of corruptLeases) lines.push(`  ${record.leaseKey ?? '?'}: ${record.error}`);
  }
  lines.push('');
  if (view.workers.length === 0) lines.push('workers: none (no lease has an owner)');
  else {
    lines.push(
      table(
        ['WORKER', 'LEASES'],
        view.workers.map((worker) => [worker.workerId, `${worker.leases}${worker.leader ? ' (leader)' : ''}`]),
      ),
    );
  }
  const free = view.leases.filter((lease) => lease.owner === null).length;
  const stalled = view.leases.filter((lease) => lease.stalled !== null).length;
  const newer = view.leases.filter(isNewerFormat).length;
  const counts = [`${view.leases.length} leases`, `${free} without owner`, `${view.workers.length} workers`];
  if (corruptLeases.length > 0) counts.push(`${corruptLeases.length} corrupt`);
  if (stalled > 0) counts.push(`${stalled} stalled`);
  if (newer > 0) counts.push(`${newer} of a record format newer than ${RECORD_FORMAT} (upgrade the CLI)`);
  lines.push('');
  lines.push(counts.join(', '));
  return lines.join('\n');
}

/** Waits `ms`, or less when the signal fires; tells whether to go on. */
function pause(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const onAbort = (): void => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve(true);
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
