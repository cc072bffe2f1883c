/**
 * What every command shares: where output goes, how a group is read, how numbers on the command line are
 * checked, and which exit code an error earns.
 */
import {
  CorruptRecordError,
  InvalidConfigError,
  InvalidInputError,
  LeaseholdError,
  type LeaderRecord,
  type LeaseRecord,
  type MemberRecord,
  type Storage,
} from '@leasehold/core';
import { describeValue, validateGroup } from '@leasehold/core/adapter';
import { PKG } from './pkg.js';

/** Where a command writes; the binary passes the process's streams, tests may pass their own. */
export interface Io {
  /** Writes text to standard output as it is (add the newline yourself). */
  out(text: string): void;
  /** Writes text to standard error as it is. */
  err(text: string): void;
  /** Whether standard output is a terminal (then `--watch` redraws in place). */
  readonly isTTY: boolean;
  /** Fires when the user interrupts (Ctrl-C): `--watch` stops and the command exits cleanly. */
  readonly signal: AbortSignal;
}

/** Exit codes: 0 success, 1 a failure or a refusal, 2 a bad command line (usage, URL, option value). */
export const EXIT = { ok: 0, failure: 1, usage: 2 } as const;

/** The exit code an error earns: a bad command line is 2, everything else 1. */
export function exitCodeOf(error: unknown): number {
  if (error instanceof InvalidConfigError || error instanceof InvalidInputError) return EXIT.usage;
  return EXIT.failure;
}

/** The one line printed for an error: its message, on one line. */
export function errorLine(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  return `leasehold: ${message.replace(/\s*\n\s*/g, ' ')}`;
}

/** A group's records, read once. */
export interface GroupState {
  /** The leases that read back, sorted by key. */
  readonly leases: LeaseRecord[];
  /** One error per stored lease that cannot be read back, sorted by key: reported, never written. */
  readonly corrupt: CorruptRecordError[];
  readonly leader: LeaderRecord | null;
  /** The error of a leader record that cannot be read back (then `leader` is `null`). */
  readonly corruptLeader: CorruptRecordError | null;
  /** The members of the group's roster that read back, sorted by worker id. */
  readonly members: MemberRecord[];
  /** One error per member that cannot be read back, sorted by worker id. */
  readonly corruptMembers: CorruptRecordError[];
}

/** Throws an `InvalidConfigError` unless `group` is a valid group name. */
export function checkGroup(group: string): void {
  try {
    validateGroup(group, PKG);
  } catch (error) {
    throw new InvalidConfigError((error as Error).message, { cause: error });
  }
}

/**
 * Reads a group's leases (sorted by key), leader record and roster (sorted by worker id); corrupt records
 * are reported in the state, not thrown. The roster is read after the leases, as core's workers read it:
 * a lease listed with an owner was taken after its owner joined.
 */
export async function readGroup(storage: Storage, group: string): Promise<GroupState> {
  const [listing, leader] = await Promise.all([storage.listLeases(group), readLeader(storage, group)]);
  const roster = await storage.getRoster(group);
  return {
    leases: [...listing.leases].sort(byLeaseKey),
    corrupt: [...listing.corrupt].sort((a, b) => byLeaseKey({ leaseKey: a.leaseKey ?? '' }, { leaseKey: b.leaseKey ?? '' })),
    ...leader,
    members: [...roster.members].sort((a, b) => byWorkerId(a.workerId, b.workerId)),
    corruptMembers: [...roster.corrupt].sort((a, b) => byWorkerId(a.workerId ?? '', b.workerId ?? '')),
  };
}

/** Orders worker ids bytewise. */
export function byWorkerId(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

async function readLeader(storage: Storage, group: string): Promise<Pick<GroupState, 'leader' | 'corruptLeader'>> {
  try {
    return { leader: await storage.getLeader(group), corruptLeader: null };
  } catch (error) {
    if (error instanceof CorruptRecordError) return { leader: null, corruptLeader: error };
    throw error;
  }
}

/** Reads a group and throws an error naming it when the storage holds nothing of it. */
export async function readKnownGroup(storage: Storage, group: string, display: string): Promise<GroupState> {
  const state = await readGroup(storage, group);
  const empty =
    state.leases.length === 0 &&
    state.corrupt.length === 0 &&
    state.leader === null &&
    state.corruptLeader === null &&
    state.members.length === 0 &&
    state.corruptMembers.length === 0;
  if (empty) throw unknownGroup(group, display);
  return state;
}

/** The error for a group of which the storage holds no lease, no leader record and no member. */
export function unknownGroup(group: string, display: string): LeaseholdError {
  return new LeaseholdError(
    'ERR_UNKNOWN_GROUP',
    `[${PKG}] group ${describeValue(group)} has no leases, no leader record and no members in ${describeValue(display)}`,
  );
}

/** Orders leases by key, bytewise, as the Postgres adapter pages them. */
export function byLeaseKey(a: { readonly leaseKey: string }, b: { readonly leaseKey: string }): number {
  return a.leaseKey < b.leaseKey ? -1 : a.leaseKey > b.leaseKey ? 1 : 0;
}

/** Parses a whole number option, refusing anything else with an `InvalidConfigError` naming the option. */
export function parseCount(option: string, value: string, min: number): number {
  const parsed = /^\d+$/.test(value) ? Number(value) : Number.NaN;
  if (!Number.isSafeInteger(parsed) || parsed < min) {
    throw new InvalidConfigError(`[${PKG}] ${option} must be a whole number of at least ${min}, got ${describeValue(value)}`);
  }
  return parsed;
}

/** Formats a duration for people: `850ms`, `12.4s`, `3m05s`. */
export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)}ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)}s`;
  const minutes = Math.floor(ms / 60_000);
  const seconds = Math.floor((ms % 60_000) / 1000);
  return `${minutes}m${String(seconds).padStart(2, '0')}s`;
}

/** Lays rows out as left-aligned columns separated by two spaces. */
export function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((title, column) => Math.max(width(title), ...rows.map((row) => width(row[column] ?? ''))));
  const line = (cells: readonly string[]): string =>
    cells.map((cell, column) => (column === cells.length - 1 ? cell : cell + ' '.repeat((widths[column] ?? 0) - width(cell)))).join('  ');
  return [line(header), ...rows.map(line)].join('\n');
}

function width(text: string): number {
  return [...text].length;
}
