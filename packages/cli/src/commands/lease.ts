/**
 * `leasehold lease delete|create`: removes a lease (one that cannot be read back, or of a shard gone from
 * the stream) and creates one again, guarded against live workers like `checkpoint set`.
 *
 * The leader never creates a deleted lease again (a lease is deleted when its shard is finished or gone),
 * so deleting the lease of a shard that still has records means that shard is not read again until the
 * lease is created again with `lease create`.
 */
import {
  InvalidConfigError,
  LeaseholdError,
  type CorruptRecordError,
  type LeaseRecord,
  type Storage,
} from '@leasehold/core';
import { describeValue, validateLeaseKey } from '@leasehold/core/adapter';
import { openBackend } from '../connect.js';
import { refuseIfLive, type GuardOptions } from '../guard.js';
import { isFinished, isNewerFormat, newerFormatError } from '../health.js';
import { checkGroup, readKnownGroup, type Io } from '../shared.js';
import { parseStorageUrl } from '@leasehold/connect';
import { PKG } from '../pkg.js';

/** Options of {@link leaseDelete}. */
export interface LeaseDeleteOptions extends GuardOptions {
  readonly storage: string;
  readonly group: string;
  readonly key: string;
  /**
   * The stored version to delete at. Needed for a lease that cannot be read back (its version cannot be
   * read through the storage contract); for a readable lease it must match, when given.
   */
  readonly version: number | undefined;
  /** Delete a readable lease whose shard is not finished (a shard gone from the stream). */
  readonly unfinished: boolean;
}

/** Options of {@link leaseCreate}. */
export interface LeaseCreateOptions extends GuardOptions {
  readonly storage: string;
  readonly group: string;
  readonly key: string;
  /** Where the shard is read from: a position or a sentinel. */
  readonly checkpoint: string;
  /** The lease keys of the shard's parents (its lease waits until they are finished). */
  readonly parents: readonly string[];
}

/** Deletes one lease at the version read (or given), once the group is seen not live. */
export async function leaseDelete(options: LeaseDeleteOptions, io: Io): Promise<void> {
  checkGroup(options.group);
  checkLeaseKey('--key', options.key);
  const target = parseStorageUrl(options.storage);
  const backend = await openBackend(target);
  try {
    const storage: Storage = backend.storage;
    const known = await readKnownGroup(storage, options.group, target.display);
    const corrupt = known.corrupt.find((error) => error.leaseKey === options.key);
    const readable = known.leases.find((lease) => lease.leaseKey === options.key);
    if (corrupt === undefined && readable === undefined) throw unknownLease(options.group, options.key, target.display);
    if (corrupt !== undefined && options.version === undefined) throw versionRequired(options.key, corrupt);
    if (readable !== undefined) refuseToDelete(readable, options);

    const listing = await refuseIfLive(storage, options.group, options, io);
    const current = listing.leases.find((lease) => lease.leaseKey === options.key);
    let version: number;
    if (current !== undefined) {
      refuseToDelete(current, options);
      version = current.version;
    } else {
      const nowCorrupt = listing.corrupt.find((error) => error.leaseKey === options.key);
      if (nowCorrupt === undefined) {
        throw new LeaseholdError('ERR_UNKNOWN_LEASE', `[${PKG}] lease ${describeValue(options.key)} was deleted while the group was watched`);
      }
      if (options.version === undefined) throw versionRequired(options.key, nowCorrupt);
      version = options.version;
    }

    const outcome = await storage.deleteLease(options.group, options.key, version);
    if (outcome.status === 'conflict') {
      const now = outcome.current === null ? 'it was deleted meanwhile' : `it is at version ${outcome.current.version}`;
      throw new LeaseholdError('ERR_LEASE_NOT_DELETED', `[${PKG}] lease ${describeValue(options.key)} was not deleted: ${now}`);
    }
    if (outcome.status === 'unknown') {
      throw new LeaseholdError(
        'ERR_LEASE_NOT_DELETED',
        `[${PKG}] deleting lease ${describeValue(options.key)} at version ${version}: the outcome is unknown (${outcome.error.message}); check with leasehold status`,
        { cause: outcome.error },
      );
    }
    const what = current === undefined ? 'corrupt lease' : `lease (checkpoint ${showPosition(current.checkpoint)}, epoch ${current.epoch})`;
    io.out(`deleted ${what} ${describeValue(options.key)} at version ${version}\n`);
    if (current === undefined || !isFinished(current)) {
      io.out(
        `the leader does not create a deleted lease again: if shard ${describeValue(options.key)} still has records to read, create its lease again with leasehold lease create\n`,
      );
    }
  } finally {
    await backend.close();
  }
}

/** Creates one lease (again, after a delete), at a checkpoint and with parents, once the group is seen not live. */
export async function leaseCreate(options: LeaseCreateOptions, io: Io): Promise<void> {
  checkGroup(options.group);
  checkLeaseKey('--key', options.key);
  for (const parent of options.parents) checkLeaseKey('--parent', parent);
  if (options.checkpoint.length === 0) throw new InvalidConfigError(`[${PKG}] --checkpoint must not be empty`);
  const target = parseStorageUrl(options.storage);
  const backend = await openBackend(target);
  try {
    const storage: Storage = backend.storage;
    const known = await readKnownGroup(storage, options.group, target.display);
    const existing = known.leases.find((lease) => lease.leaseKey === options.key) ?? known.corrupt.find((error) => error.leaseKey === options.key);
    if (existing !== undefined) throw leaseExists(options.key);
    await refuseIfLive(storage, options.group, options, io);

    // `recreate`: a key whose lease was deleted is created again on purpose, with versions and epochs above its old ones.
    const outcome = await storage.createLease(
      { group: options.group, leaseKey: options.key, checkpoint: options.checkpoint, parentKeys: [...options.parents] },
      { recreate: true },
    );
    if (outcome.status === 'conflict') throw leaseExists(options.key);
    if (outcome.status === 'unknown') {
      throw new LeaseholdError(
        'ERR_LEASE_NOT_CREATED',
        `[${PKG}] creating lease ${describeValue(options.key)}: the outcome is unknown (${outcome.error.message}); check with leasehold status`,
        { cause: outcome.error },
      );
    }
    const { record } = outcome;
    const parents = record.parentKeys.length === 0 ? 'no parents' : `parents ${record.parentKeys.map((key) => describeValue(key)).join(', ')}`;
    io.out(`created lease ${describeValue(record.leaseKey)} at checkpoint ${showPosition(record.checkpoint)} with ${parents} (version ${record.version}, epoch ${record.epoch})\n`);
  } finally {
    await backend.close();
  }
}

/** A readable lease is deleted only when this command line may write it and, unless told otherwise, when it is finished. */
function refuseToDelete(lease: LeaseRecord, options: LeaseDeleteOptions): void {
  if (isNewerFormat(lease)) throw newerFormatError(lease);
  if (options.version !== undefined && options.version !== lease.version) {
    throw new LeaseholdError(
      'ERR_LEASE_NOT_DELETED',
      `[${PKG}] lease ${describeValue(lease.leaseKey)} is at version ${lease.version}, not ${options.version}; nothing was deleted`,
    );
  }
  if (!isFinished(lease) && !options.unfinished) {
    throw new LeaseholdError(
      'ERR_LEASE_UNFINISHED',
      `[${PKG}] lease ${describeValue(lease.leaseKey)} is not finished (checkpoint ${showPosition(lease.checkpoint)}): the leader does not create a deleted lease again, so its shard would not be read again; pass --unfinished to delete it anyway (a shard gone from the stream)`,
    );
  }
}

function versionRequired(key: string, corrupt: CorruptRecordError): LeaseholdError {
  return new LeaseholdError(
    'ERR_VERSION_REQUIRED',
    `[${PKG}] lease ${describeValue(key)} cannot be read back (${corrupt.message}), so its version cannot be read through the storage contract: pass --at-version with the version stored in the backend`,
  );
}

function checkLeaseKey(option: string, key: string): void {
  try {
    validateLeaseKey(key, PKG);
  } catch (error) {
    throw new InvalidConfigError(`${(error as Error).message} (${option})`, { cause: error });
  }
}

function unknownLease(group: string, key: string, display: string): LeaseholdError {
  return new LeaseholdError('ERR_UNKNOWN_LEASE', `[${PKG}] group ${describeValue(group)} has no lease ${describeValue(key)} in ${describeValue(display)}`);
}

function leaseExists(key: string): LeaseholdError {
  return new LeaseholdError(
    'ERR_LEASE_EXISTS',
    `[${PKG}] lease ${describeValue(key)} exists; move its checkpoint with leasehold checkpoint set, or delete it first`,
  );
}

function showPosition(position: string | null): string {
  return position === null ? '(none)' : describeValue(position);
}
