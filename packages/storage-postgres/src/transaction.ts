/**
 * The transactional checkpoint: a handler's own writes and the checkpoint of its batch in one PostgreSQL
 * transaction on the database that holds the leases, refused as a whole when the lease is no longer this
 * worker's tenure. The fencing condition is inside the transaction: the lease row is locked first and
 * compared with the lease as the worker holds it (version, owner, incarnation, epoch), so that no take,
 * handoff or release can move it until the transaction ends.
 */
import {
  InvalidConfigError,
  StorageUnavailableError,
  type CheckpointWrite,
  type LeaseRecord,
  type LeaseState,
  type Position,
  type WriteResult,
} from '@leasehold/core';
import { decodeLease, describeValue, encodeLeaseState, leaseStateOf, result } from '@leasehold/core/adapter';
import type { Pool, PoolClient } from 'pg';
import { outcomeUnknown, schemaError } from './errors.js';
import { runTransaction } from './pg-transaction.js';
import { PKG } from './schema.js';

/** What a transactional checkpoint needs of the batch it belongs to: the `BatchContext` a handler is given. */
export interface TransactionContext {
  checkpointWith(write: CheckpointWrite, position?: Position): Promise<void>;
}

/** Options of `PostgresStorage.transaction`. */
export interface TransactionOptions {
  /** The position to checkpoint: a record of the batch. Default: the end of the batch. */
  readonly position?: Position;
}

/** The statements and names a transactional checkpoint runs with. */
export interface TransactionSettings {
  readonly pool: Pool;
  readonly lockLease: string;
  readonly updateLease: string;
  /** The tables, for error messages. */
  readonly where: string;
}

/** Checks the arguments of `PostgresStorage.transaction` before anything is sent. */
export function validateTransaction(context: unknown, fn: unknown, options: unknown): void {
  if (typeof context !== 'object' || context === null || typeof (context as { checkpointWith?: unknown }).checkpointWith !== 'function') {
    throw new InvalidConfigError(`[${PKG}] transaction needs the batch context handed to processBatch, got ${describeValue(context)}`);
  }
  if (typeof fn !== 'function') throw new InvalidConfigError(`[${PKG}] transaction needs a function, got ${describeValue(fn)}`);
  if (typeof options !== 'object' || options === null) throw new InvalidConfigError(`[${PKG}] transaction options must be an object, got ${describeValue(options)}`);
  const { position } = options as { position?: unknown };
  if (position !== undefined && (typeof position !== 'string' || position.length === 0)) {
    throw new InvalidConfigError(`[${PKG}] transaction position must be a non-empty string, got ${describeValue(position)}`);
  }
}

/**
 * One transaction: lock the lease row, check that it is still `current`, run `fn`, write `next` into the
 * lease, commit. A lease that moved on is a `conflict` (everything rolled back, `fn` not run); an error of
 * `fn` or of the server rolls back and is thrown; only a COMMIT whose answer was lost is `unknown`, and the
 * lease row, read back by the coordinator, tells whether it applied (the user's writes went with it).
 */
export async function checkpointInTransaction(
  settings: TransactionSettings,
  current: LeaseRecord,
  next: LeaseState,
  fn: (client: PoolClient) => Promise<void>,
): Promise<WriteResult<LeaseRecord>> {
  const { group, leaseKey } = current;
  const rules = {
    operation: 'transaction',
    lostCommit: (error: unknown) => result.unknown(outcomeUnknown('transaction', error)),
    thrown: (error: unknown) => schemaError(error, settings.where) ?? error,
  };
  return runTransaction<WriteResult<LeaseRecord>>({ pool: settings.pool }, rules, async (client) => {
    const { rows } = await client.query<{ version: string; state: string | null }>(settings.lockLease, [group, leaseKey]);
    const row = rows[0];
    const stored = row ? decodeLease(group, leaseKey, Number(row.version), row.state, PKG) : null;
    if (!stored || !sameTenure(stored, current)) return { rollback: result.conflict(stored) };
    await fn(client as PoolClient);
    const updated = await client.query<{ applied_version: string }>(settings.updateLease, [group, leaseKey, current.version, encodeLeaseState(next), next.epoch]);
    const applied = updated.rows[0];
    if (!applied) {
      // The row is locked by this transaction: only a user function that ended the transaction early gets here.
      throw new StorageUnavailableError(
        `[${PKG}] the checkpoint of lease ${describeValue(leaseKey)} found its lease row unlocked: the function must not COMMIT or ROLLBACK itself`,
      );
    }
    return { commit: result.applied({ group, leaseKey, version: Number(applied.applied_version), ...leaseStateOf(next) }) };
  });
}

/** Whether the stored lease is the one the worker holds: same version, owner, incarnation and epoch. */
function sameTenure(stored: LeaseRecord, held: LeaseRecord): boolean {
  return stored.version === held.version && stored.owner === held.owner && stored.incarnation === held.incarnation && stored.epoch === held.epoch;
}
