/**
 * `leasehold checkpoint set|reset`: moves checkpoints by hand, guarded against live workers, every write
 * conditional on the version this command read. A finished lease (`SHARD_END`) is never moved back by a
 * reset, and by `set` only on request: its children may have started, and reading it again would hand its
 * records over after theirs.
 */
import {
  Checkpoint,
  InvalidConfigError,
  LeaseholdError,
  type CorruptRecordError,
  type LeaseRecord,
  type LeaseUpdate,
  type Storage,
  type WriteResult,
} from '@leasehold/core';
import { describeValue, leaseStateOf } from '@leasehold/core/adapter';
import { openBackend } from '../connect.js';
import { refuseIfLive, type GuardOptions } from '../guard.js';
import { isFinished, isNewerFormat, newerFormatError } from '../health.js';
import { byLeaseKey, checkGroup, readKnownGroup, type Io } from '../shared.js';
import { parseStorageUrl } from '@leasehold/connect';
import { PKG } from '../pkg.js';

/** Options of {@link checkpointSet}. */
export interface CheckpointSetOptions extends GuardOptions {
  readonly storage: string;
  readonly group: string;
  readonly lease: string;
  readonly position: string;
  /** Move the checkpoint of a finished (`SHARD_END`) lease too. */
  readonly reopenFinished: boolean;
}

/** Options of {@link checkpointReset}. */
export interface CheckpointResetOptions extends GuardOptions {
  readonly storage: string;
  readonly group: string;
  /** One lease; `undefined` resets every lease of the group. */
  readonly lease: string | undefined;
  /** `TRIM_HORIZON`, `LATEST` or `AT_TIMESTAMP:<ms>`. */
  readonly to: string;
}

/** Sets one lease's checkpoint to any position, forwards or backwards; a finished lease only with `reopenFinished`. */
export async function checkpointSet(options: CheckpointSetOptions, io: Io): Promise<void> {
  await moveCheckpoints(options, { leaseKey: options.lease, position: options.position, finished: options.reopenFinished ? 'move' : 'refuse-set' }, io);
}

/**
 * Sets the checkpoint of one lease, or of every lease of the group, back to a sentinel position. A finished
 * lease is never reset: named alone it is refused; in a whole group it is skipped, and said so.
 */
export async function checkpointReset(options: CheckpointResetOptions, io: Io): Promise<void> {
  const to = options.to;
  if (to !== Checkpoint.TRIM_HORIZON && to !== Checkpoint.LATEST && Checkpoint.timestampOf(to) === undefined) {
    throw new InvalidConfigError(`[${PKG}] --to must be TRIM_HORIZON, LATEST or AT_TIMESTAMP:<ms>, got ${describeValue(to)}`);
  }
  await moveCheckpoints(options, { leaseKey: options.lease, position: to, finished: options.lease === undefined ? 'skip' : 'refuse-reset' }, io);
}

interface MoveOptions extends GuardOptions {
  readonly storage: string;
  readonly group: string;
}

/** What to do with a finished lease: move it anyway, skip it (a group reset), or refuse the command. */
type FinishedPolicy = 'move' | 'skip' | 'refuse-set' | 'refuse-reset';

interface Move {
  /** One lease; `undefined` for every lease of the group. */
  readonly leaseKey: string | undefined;
  readonly position: string;
  readonly finished: FinishedPolicy;
}

/** Which leases a move writes, which it leaves as they are and which it skips. */
interface MovePlan {
  readonly moving: LeaseRecord[];
  readonly unchanged: LeaseRecord[];
  readonly skipped: LeaseRecord[];
}

async function moveCheckpoints(options: MoveOptions, move: Move, io: Io): Promise<void> {
  checkGroup(options.group);
  const target = parseStorageUrl(options.storage);
  const backend = await openBackend(target);
  try {
    const storage: Storage = backend.storage;
    const known = await readKnownGroup(storage, options.group, target.display);
    const { leaseKey } = move;
    const corrupt = known.corrupt.find((error) => error.leaseKey === leaseKey);
    if (corrupt !== undefined) throw corruptLeaseError(options.group, corrupt);
    if (leaseKey !== undefined && !known.leases.some((lease) => lease.leaseKey === leaseKey)) {
      throw new LeaseholdError(
        'ERR_UNKNOWN_LEASE',
        `[${PKG}] group ${describeValue(options.group)} has no lease ${describeValue(leaseKey)} in ${describeValue(target.display)}`,
      );
    }
    // Refusals come before the wait for liveness, and again on the listing that is written against.
    planOf(known.leases, move, options.group);
    const { leases } = await refuseIfLive(storage, options.group, options, io);
    if (leaseKey !== undefined && !leases.some((lease) => lease.leaseKey === leaseKey)) {
      throw new LeaseholdError('ERR_UNKNOWN_LEASE', `[${PKG}] lease ${describeValue(leaseKey)} was deleted while the group was watched`);
    }
    const plan = planOf(leases, move, options.group);
    for (const lease of plan.unchanged) io.out(`${lease.leaseKey}: checkpoint already ${show(move.position)}, unchanged\n`);
    for (const lease of plan.skipped) io.out(`${lease.leaseKey}: finished (SHARD_END), skipped: a reset would read its shard again after its children\n`);
    const untouched = leaseKey === undefined ? known.corrupt : [];
    for (const error of untouched) io.out(`${error.leaseKey ?? '?'}: corrupt, skipped: ${error.message}\n`);

    const updates: LeaseUpdate[] = plan.moving.map((lease) => ({
      leaseKey: lease.leaseKey,
      expectedVersion: lease.version,
      // Every field of the record is kept, the ones this command line does not know included.
      next: { ...leaseStateOf(lease), checkpoint: move.position },
    }));
    const results = updates.length === 0 ? [] : await storage.updateLeases(options.group, updates);
    const failures: string[] = [];
    plan.moving.forEach((lease, i) => {
      const outcome = results[i] as WriteResult<LeaseRecord>;
      if (outcome.status === 'applied') {
        io.out(`${lease.leaseKey}: checkpoint ${show(lease.checkpoint)} -> ${show(move.position)} (version ${lease.version} -> ${outcome.record.version})\n`);
      } else failures.push(failureOf(lease, outcome));
    });
    for (const error of untouched) failures.push(`lease ${describeValue(error.leaseKey)} is corrupt and was not written (see leasehold doctor --group)`);
    if (failures.length > 0) {
      throw new LeaseholdError(
        'ERR_CHECKPOINT_NOT_WRITTEN',
        `[${PKG}] ${failures.length} of ${plan.moving.length + untouched.length} checkpoints were not written: ${failures.join('; ')}`,
      );
    }
  } finally {
    await backend.close();
  }
}

/** Sorts the leases a move names into moving, unchanged and skipped; throws when the move must not happen at all. */
function planOf(leases: readonly LeaseRecord[], move: Move, group: string): MovePlan {
  const plan: MovePlan = { moving: [], unchanged: [], skipped: [] };
  const named = leases.filter((lease) => move.leaseKey === undefined || lease.leaseKey === move.leaseKey).sort(byLeaseKey);
  // A newer Leasehold's record has rules this command line does not know: it writes none of the group's.
  const newer = named.find(isNewerFormat);
  if (newer !== undefined) throw newerFormatError(newer);
  for (const lease of named) {
    if (lease.checkpoint === move.position) plan.unchanged.push(lease);
    else if (!isFinished(lease) || move.finished === 'move') plan.moving.push(lease);
    else if (move.finished === 'skip') plan.skipped.push(lease);
    else throw finishedLeaseError(group, lease, move.finished);
  }
  return plan;
}

function finishedLeaseError(group: string, lease: LeaseRecord, policy: 'refuse-set' | 'refuse-reset'): LeaseholdError {
  const why = 'its children may have started, and reading it again would hand its records over after theirs';
  const instead = policy === 'refuse-set' ? 'pass --reopen-finished to move it anyway' : 'use checkpoint set --reopen-finished to move it anyway';
  return new LeaseholdError(
    'ERR_LEASE_FINISHED',
    `[${PKG}] lease ${describeValue(lease.leaseKey)} of group ${describeValue(group)} is finished (SHARD_END): ${why}; ${instead}`,
  );
}

/** The error for a command aimed at a lease that cannot be read back. */
export function corruptLeaseError(group: string, error: CorruptRecordError): LeaseholdError {
  return new LeaseholdError(
    'ERR_CORRUPT_RECORD',
    `[${PKG}] lease ${describeValue(error.leaseKey)} of group ${describeValue(group)} cannot be read back, so nothing was written to it (${error.message}); see leasehold doctor --group`,
    { cause: error },
  );
}

function show(position: string | null): string {
  return position === null ? '(none)' : describeValue(position);
}

function failureOf(lease: LeaseRecord, outcome: Exclude<WriteResult<LeaseRecord>, { status: 'applied' }>): string {
  if (outcome.status === 'conflict') {
    const now = outcome.current === null ? 'it was deleted' : `it is at version ${outcome.current.version} now`;
    return `lease ${describeValue(lease.leaseKey)} changed after it was read at version ${lease.version} (${now}); nothing was written to it, run the command again`;
  }
  return `lease ${describeValue(lease.leaseKey)}: the outcome is unknown (${outcome.error.message}); check with leasehold status`;
}
