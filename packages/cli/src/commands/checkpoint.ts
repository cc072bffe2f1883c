/**
 * `leasehold checkpoint set|reset`: moves checkpoints by hand, guarded against live workers, every write
 * conditional on the version this command read.
 */
import {
  Checkpoint,
  describeValue,
  InvalidConfigError,
  LeaseholdError,
  pickLeaseState,
  type LeaseRecord,
  type LeaseUpdate,
  type Storage,
  type WriteResult,
} from '@leasehold/core';
import { openBackend } from '../connect.js';
import { refuseIfLive, type GuardOptions } from '../guard.js';
import { byLeaseKey, checkGroup, readKnownGroup, type Io } from '../shared.js';
import { parseStorageUrl, PKG } from '../url.js';

/** Options of {@link checkpointSet}. */
export interface CheckpointSetOptions extends GuardOptions {
  readonly storage: string;
  readonly group: string;
  readonly lease: string;
  readonly position: string;
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

/** Sets one lease's checkpoint to any position, forwards or backwards. */
export async function checkpointSet(options: CheckpointSetOptions, io: Io): Promise<void> {
  await moveCheckpoints(options, options.lease, options.position, io);
}

/** Sets the checkpoint of one lease, or of every lease of the group, back to a sentinel position. */
export async function checkpointReset(options: CheckpointResetOptions, io: Io): Promise<void> {
  const to = options.to;
  if (to !== Checkpoint.TRIM_HORIZON && to !== Checkpoint.LATEST && Checkpoint.timestampOf(to) === undefined) {
    throw new InvalidConfigError(`[${PKG}] --to must be TRIM_HORIZON, LATEST or AT_TIMESTAMP:<ms>, got ${describeValue(to)}`);
  }
  await moveCheckpoints(options, options.lease, to, io);
}

interface MoveOptions extends GuardOptions {
  readonly storage: string;
  readonly group: string;
}

async function moveCheckpoints(options: MoveOptions, leaseKey: string | undefined, position: string, io: Io): Promise<void> {
  checkGroup(options.group);
  const target = parseStorageUrl(options.storage);
  const backend = await openBackend(target);
  try {
    const storage: Storage = backend.storage;
    const known = await readKnownGroup(storage, options.group, target.display);
    if (leaseKey !== undefined && !known.leases.some((lease) => lease.leaseKey === leaseKey)) {
      throw new LeaseholdError(
        'ERR_UNKNOWN_LEASE',
        `[${PKG}] group ${describeValue(options.group)} has no lease ${describeValue(leaseKey)} in ${describeValue(target.display)}`,
      );
    }
    const leases = (await refuseIfLive(storage, options.group, options, io))
      .filter((lease) => leaseKey === undefined || lease.leaseKey === leaseKey)
      .sort(byLeaseKey);
    if (leaseKey !== undefined && leases.length === 0) {
      throw new LeaseholdError('ERR_UNKNOWN_LEASE', `[${PKG}] lease ${describeValue(leaseKey)} was deleted while the group was watched`);
    }
    const unchanged = leases.filter((lease) => lease.checkpoint === position);
    for (const lease of unchanged) io.out(`${lease.leaseKey}: checkpoint already ${show(position)}, unchanged\n`);
    const moving = leases.filter((lease) => lease.checkpoint !== position);
    const updates: LeaseUpdate[] = moving.map((lease) => ({
      leaseKey: lease.leaseKey,
      expectedVersion: lease.version,
      next: { ...pickLeaseState(lease), checkpoint: position },
    }));
    const results = updates.length === 0 ? [] : await storage.updateLeases(options.group, updates);
    const failures: string[] = [];
    moving.forEach((lease, i) => {
      const outcome = results[i] as WriteResult<LeaseRecord>;
      if (outcome.status === 'applied') {
        io.out(`${lease.leaseKey}: checkpoint ${show(lease.checkpoint)} -> ${show(position)} (version ${lease.version} -> ${outcome.record.version})\n`);
      } else failures.push(failureOf(lease, outcome));
    });
    if (failures.length > 0) {
      throw new LeaseholdError(
        'ERR_CHECKPOINT_NOT_WRITTEN',
        `[${PKG}] ${failures.length} of ${moving.length} checkpoints were not written: ${failures.join('; ')}`,
      );
    }
  } finally {
    await backend.close();
  }
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
