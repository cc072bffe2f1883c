/**
 * A watcher's CPU per take tick in its view of the roster, as the group grows: each tick a member of a
 * group of watchers hands its `RosterView` the few members it watches (`readSome`) and asks whether the
 * roster's signature moved (`signature`). Neither should cost more in a larger group: the view keeps the
 * other live members and the signature up to date from the members a read names, instead of sorting the
 * whole roster each tick. Measured in process CPU time (it stays steady on a busy machine where wall time
 * does not), at 10, 100 and 1,000 members in one run, so that the ratio to 10 members is the figure to read.
 */
import { RosterView } from '../src/lease/roster-view.js';
import type { MemberRecord } from '../src/index.js';

/** The members a watcher reads each tick: its 3 watched members and itself, as the coordinator does. */
const READ_PER_TICK = 4;
const TICKS = 20_000;

const id = (i: number): string => `worker-${String(i).padStart(5, '0')}`;

function member(i: number, version: number): MemberRecord {
  return { group: 'bench', workerId: id(i), version, incarnation: `${id(i)}-1`, status: 'alive', leaseDurationMs: 10_000, held: 100, changes: 0, requests: [], metadata: {}, format: 1 };
}

export interface ViewRow {
  readonly members: number;
  /** Microseconds of CPU per tick: one `readSome` of the watched members and one `signature`. */
  readonly microsPerTick: number;
  /** `microsPerTick` over the same at 10 members, in this run. */
  readonly ratioTo10: number;
}

/** One group size: a whole read to start from, then `TICKS` ticks in which every watched member heartbeat. */
function microsPerTick(members: number): number {
  let now = 0;
  const view = new RosterView({ workerId: id(0), now: () => now, expiryMs: () => 10_000 });
  view.read({ group: 'bench', members: Array.from({ length: members }, (_, i) => member(i, 1)), corrupt: [] }, now);
  view.signature();
  const from = process.cpuUsage();
  for (let tick = 0; tick < TICKS; tick++) {
    now += 2_000;
    const read = Array.from({ length: READ_PER_TICK }, (_, k) => (tick * READ_PER_TICK + k) % members);
    view.readSome({ group: 'bench', members: read.map((i) => member(i, tick + 2)), corrupt: [] }, read.map(id), now);
    view.signature();
  }
  const used = process.cpuUsage(from);
  return (used.user + used.system) / TICKS;
}

export function viewSection(): ViewRow[] {
  microsPerTick(100); // warm the JIT, so that the first size measured is not the one that paid for it
  const sizes = [10, 100, 1_000];
  const micros = sizes.map(microsPerTick);
  return sizes.map((members, i) => ({ members, microsPerTick: micros[i]!, ratioTo10: micros[i]! / micros[0]! }));
}
