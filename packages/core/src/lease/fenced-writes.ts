/**
 * The writes on a lease this worker holds (DESIGN section 4, "Checkpointing", and its "Rewinding"): each is
 * conditional on the version this worker last wrote and on the tenure the caller's work belongs to, so that
 * work of an earlier tenure, or of a lease lost, never writes into a later one. An unknown outcome is read
 * back, never assumed. The writes on one lease run one after another, each on the version the previous one
 * made; every lease write of the coordinator (takes, handovers, releases) goes through {@link
 * FencedWrites.update}, which counts the outcomes and refuses to overwrite a newer record format.
 */
import type { Clock } from '../clock.js';
import {
  CheckpointBehindError,
  describeValue,
  LeaseholdError,
  LeaseLostError,
  type RecordFormatError,
  StorageOutcomeUnknownError,
  StorageUnavailableError,
} from '../errors.js';
import {
  Checkpoint,
  RECORD_FORMAT,
  type CheckpointStorage,
  type LeaseRecord,
  type LeaseState,
  type LeaseUpdate,
  type Position,
  type WriteResult,
} from '../storage.js';
import type { LeaseCoordinatorEvents } from './events.js';
import type { Held, LeaseTenure } from './held.js';
import type { Hold } from './hold.js';
import { RESUME_FIELD, stateWithoutResume } from './resume-hint.js';

const PKG = 'core';

/** The state core writes: every write but a handover's drops a resume hint (it is for one tenure's first read only). */
const stateOf = stateWithoutResume;

/**
 * A conditional write of a lease made by the caller in one atomic step with its own writes (see
 * `LeaseCoordinator.checkpointThrough`): applies `next` only if the stored lease still has `current`'s
 * version, owner, incarnation and epoch, and reports the outcome exactly, as a storage write does
 * (`conflict` with the stored lease, `unknown` when the answer was lost).
 */
export type CheckpointWrite = (current: LeaseRecord, next: LeaseState) => Promise<WriteResult<LeaseRecord>>;

/** What the fenced writes need back from the coordinator that owns them. */
export interface FencedWritesHost {
  /** Announces a partition's end, or a finished lease moved back, to the group. */
  noteLeasesChanged(): void;
  emit<K extends keyof LeaseCoordinatorEvents>(name: K, event: LeaseCoordinatorEvents[K]): void;
  report(error: unknown, operation: string): void;
  /** A record this worker must not write was met: stop. */
  fail(error: LeaseholdError): void;
  /** The error for a record of a newer format than this worker knows. */
  formatError(what: string, format: number): RecordFormatError;
}

export interface FencedWritesOptions {
  readonly storage: CheckpointStorage;
  readonly group: string;
  readonly clock: Clock;
  readonly hold: Hold;
  /** Orders two checkpoints of a lease. */
  readonly compare: (a: Position, b: Position, leaseKey: string) => number;
  /** Unsafe: a checkpoint is accepted on the lease's key alone, whatever tenure it belongs to. */
  readonly checkpointPerKey: boolean;
  readonly host: FencedWritesHost;
}

/** Conditional writes on the leases this worker holds, one after another per lease. */
export class FencedWrites {
  readonly #storage: CheckpointStorage;
  readonly #group: string;
  readonly #clock: Clock;
  readonly #hold: Hold;
  readonly #held: ReadonlyMap<string, Held>;
  readonly #compare: (a: Position, b: Position, leaseKey: string) => number;
  readonly #checkpointPerKey: boolean;
  readonly #host: FencedWritesHost;

  constructor(options: FencedWritesOptions) {
    this.#storage = options.storage;
    this.#group = options.group;
    this.#clock = options.clock;
    this.#hold = options.hold;
    this.#held = options.hold.leases;
    this.#compare = options.compare;
    this.#checkpointPerKey = options.checkpointPerKey;
    this.#host = options.host;
  }

  /**
   * Moves the lease's checkpoint forward, conditionally on this worker still holding it in the same
   * tenure (`lease.fencingToken`) at the version it last wrote: a handler of an earlier tenure can never
   * write into a later one. Refuses a position behind the stored one (`CheckpointBehindError`, checked
   * again on every retry) and any write after loss (`LeaseLostError`); an unknown outcome is re-read and
   * retried, never assumed. A partition's end is announced to the group (its children become takeable).
   */
  async checkpoint(lease: LeaseTenure, position: Position): Promise<void> {
    const { leaseKey } = lease;
    if (typeof position !== 'string' || position.length === 0) {
      throw new CheckpointBehindError(`[${PKG}] checkpoint position must be a non-empty string, got ${describeValue(position)}`);
    }
    const held = this.#requireHeld(lease);
    const startedAt = this.#clock.now();
    let wrote = false;
    await this.onLease(held, async () => {
      this.#requireHeld(lease);
      const next = (record: LeaseRecord): LeaseState | null => {
        const current = record.checkpoint;
        if (current !== null && (!Checkpoint.isSentinel(current) || current === Checkpoint.SHARD_END)) {
          const order = this.#compare(position, current, leaseKey);
          if (order < 0) {
            throw new CheckpointBehindError(
              `[${PKG}] checkpoint ${describeValue(position)} of lease ${describeValue(leaseKey)} is behind the stored ${describeValue(current)}`,
            );
          }
          if (order === 0) return null;
        }
        return { ...stateOf(record), checkpoint: position };
      };
      wrote = await this.#writeHeld(leaseKey, held, next, 'checkpoint');
    });
    if (wrote) {
      if (position === Checkpoint.SHARD_END) this.#host.noteLeasesChanged();
      this.#host.emit('checkpointed', { leaseKey, position, durationMs: this.#clock.now() - startedAt });
    }
  }

  /**
   * Moves the lease's checkpoint forward through `write`, a conditional write of the lease made elsewhere
   * in one atomic step with the caller's own writes (a transaction on the lease's database; see
   * `PostgresStorage.transaction`). `write` is given the lease as this worker holds it and the state to
   * store, must apply it only if the stored lease still has that version, owner, incarnation and epoch,
   * and must report the exact outcome. It runs at most once per call, after every write already queued on
   * the lease, and only while the lease is held in `lease`'s tenure; `position` must be ahead of the
   * stored checkpoint (`CheckpointBehindError` otherwise: what led up to it was applied already). A
   * conflict drops the lease (`LeaseLostError`); an unknown outcome is read back and adopted when it
   * applied, or thrown as a `StorageOutcomeUnknownError` when it did not or cannot be told. The lease
   * record written is adopted, so this worker's next write on the lease follows it.
   */
  async checkpointThrough(lease: LeaseTenure, position: Position, write: CheckpointWrite): Promise<void> {
    const { leaseKey } = lease;
    const held = this.#requireHeld(lease);
    const startedAt = this.#clock.now();
    await this.onLease(held, async () => {
      this.#requireHeld(lease);
      const before = held.record;
      const current = before.checkpoint;
      if (current !== null && (!Checkpoint.isSentinel(current) || current === Checkpoint.SHARD_END) && this.#compare(position, current, leaseKey) <= 0) {
        throw new CheckpointBehindError(
          `[${PKG}] checkpoint ${describeValue(position)} of lease ${describeValue(leaseKey)} is not ahead of the stored ${describeValue(current)}`,
        );
      }
      const next: LeaseState = { ...stateOf(before), checkpoint: position };
      const outcome = await write(before, next);
      if (this.#held.get(leaseKey) !== held) throw this.#hold.lostError(leaseKey);
      let stored: LeaseRecord | null;
      if (outcome.status === 'applied') {
        stored = outcome.record;
      } else if (outcome.status === 'conflict') {
        stored = outcome.current;
      } else {
        try {
          stored = await this.#storage.getLease(this.#group, leaseKey);
        } catch (error) {
          throw new StorageOutcomeUnknownError(
            `[${PKG}] checkpoint of lease ${describeValue(leaseKey)} may or may not have applied, and it could not be read back`,
            { cause: error },
          );
        }
      }
      const applied = stored !== null && stored.version === before.version + 1 && this.#hold.stillMine(held, stored) && sameState(stored, next);
      if (!this.#hold.stillMine(held, stored)) {
        this.#hold.lose(leaseKey, held, stored === null ? 'deleted' : 'taken');
        throw this.#hold.lostError(leaseKey);
      }
      held.record = stored;
      if (!applied) {
        throw new StorageOutcomeUnknownError(`[${PKG}] checkpoint of lease ${describeValue(leaseKey)} through the caller's write did not apply`, {
          cause: outcome.status === 'unknown' ? outcome.error : undefined,
        });
      }
    });
    if (position === Checkpoint.SHARD_END) this.#host.noteLeasesChanged();
    this.#host.emit('checkpointed', { leaseKey, position, durationMs: this.#clock.now() - startedAt });
  }

  /**
   * Writes metadata fields on a lease this worker holds in `lease`'s tenure (a field set to `null` is
   * removed), conditionally like a checkpoint; for facts the owner publishes about its lease, such as a
   * stall. A no-op when nothing changes.
   */
  async annotate(lease: LeaseTenure, fields: Readonly<Record<string, string | null>>): Promise<void> {
    const held = this.#requireHeld(lease);
    await this.onLease(held, async () => {
      this.#requireHeld(lease);
      await this.#writeHeld(
        lease.leaseKey,
        held,
        (record) => {
          const metadata: Record<string, string> = { ...stateOf(record).metadata };
          let changed = Object.hasOwn(record.metadata, RESUME_FIELD);
          for (const [name, value] of Object.entries(fields)) {
            if (value === null ? name in metadata : metadata[name] !== value) changed = true;
            if (value === null) delete metadata[name];
            else metadata[name] = value;
          }
          return changed ? { ...stateOf(record), metadata } : null;
        },
        'annotate',
      );
    });
  }

  /**
   * Sets the checkpoint of a lease this worker holds in `lease`'s tenure to any position, behind the stored
   * one included, with metadata fields in the same conditional write (a field set to `null` is removed):
   * an operator's rewind, applied by the owner once its work in flight is done (DESIGN section 4,
   * "Rewinding"). The lease is read first, and a newer record of the same tenure adopted, so that `decide`
   * sees what another writer added (the request itself); `decide` is given the stored record on each
   * attempt and returns the checkpoint and fields, or `null` when there is nothing to write. Returns the
   * record written, or `null`. Refused once the lease is lost (`LeaseLostError`), as every write.
   */
  async moveCheckpoint(
    lease: LeaseTenure,
    decide: (stored: LeaseRecord) => { checkpoint: Position; metadata: Readonly<Record<string, string | null>> } | null,
  ): Promise<LeaseRecord | null> {
    const { leaseKey } = lease;
    const held = this.#requireHeld(lease);
    let written: LeaseRecord | null = null;
    let reopened = false;
    await this.onLease(held, async () => {
      this.#requireHeld(lease);
      let stored: LeaseRecord | null;
      try {
        stored = await this.#storage.getLease(this.#group, leaseKey);
      } catch (error) {
        throw new StorageUnavailableError(`[${PKG}] lease ${describeValue(leaseKey)} could not be read before moving its checkpoint`, { cause: error });
      }
      if (this.#held.get(leaseKey) !== held) throw this.#hold.lostError(leaseKey);
      if (!this.#hold.stillMine(held, stored)) {
        this.#hold.lose(leaseKey, held, stored === null ? 'deleted' : 'taken');
        throw this.#hold.lostError(leaseKey);
      }
      if (stored.version > held.record.version) held.record = stored;
      const wrote = await this.#writeHeld(
        leaseKey,
        held,
        (record) => {
          const change = decide(record);
          if (change === null) return null;
          const metadata: Record<string, string> = { ...stateOf(record).metadata };
          for (const [name, value] of Object.entries(change.metadata)) {
            if (value === null) delete metadata[name];
            else metadata[name] = value;
          }
          reopened = record.checkpoint === Checkpoint.SHARD_END && change.checkpoint !== Checkpoint.SHARD_END;
          return { ...stateOf(record), checkpoint: change.checkpoint, metadata };
        },
        'move-checkpoint',
      );
      if (wrote) written = held.record;
    });
    // A finished lease moved back holds its children back again: the group looks at its leases.
    if (written && reopened) this.#host.noteLeasesChanged();
    return written;
  }

  /**
   * One conditional write on a held lease, retried (at most twice) when only an
   * unknown outcome of our own moved its version. `next` sees the stored record each time and may refuse
   * (throw) or find nothing to write (`null`). Returns whether a write applied.
   */
  async #writeHeld(leaseKey: string, held: Held, next: (record: LeaseRecord) => LeaseState | null, operation: string): Promise<boolean> {
    for (let attempt = 0; attempt < 3; attempt++) {
      const expected = held.record.version;
      const state = next(held.record);
      if (state === null) return false;
      const [outcome] = await this.update([{ leaseKey, expectedVersion: expected, next: state }], operation);
      if (this.#held.get(leaseKey) !== held) throw this.#hold.lostError(leaseKey);
      if (outcome?.status === 'applied') {
        held.record = outcome.record;
        return true;
      }
      let current: LeaseRecord | null;
      if (outcome?.status === 'conflict') {
        current = outcome.current;
      } else {
        // Unknown: read back what is stored before deciding anything.
        try {
          current = await this.#storage.getLease(this.#group, leaseKey);
        } catch (error) {
          throw new StorageOutcomeUnknownError(
            `[${PKG}] ${operation} of lease ${describeValue(leaseKey)} may or may not have applied, and it could not be read back`,
            { cause: error },
          );
        }
        if (current && current.version === expected + 1 && this.#hold.stillMine(held, current) && sameState(current, state)) {
          held.record = current;
          return true;
        }
      }
      if (!this.#hold.stillMine(held, current)) {
        this.#hold.lose(leaseKey, held, current === null ? 'deleted' : 'taken');
        throw this.#hold.lostError(leaseKey);
      }
      this.#hold.adopt(held, current);
      if (!this.#hold.isHeld(leaseKey)) throw this.#hold.lostError(leaseKey);
    }
    throw new StorageOutcomeUnknownError(`[${PKG}] ${operation} of lease ${describeValue(leaseKey)} did not apply after 3 attempts`);
  }

  /** One batched conditional write of leases, its outcomes counted in a `storage` event; never throws. */
  async update(updates: LeaseUpdate[], operation: string): Promise<WriteResult<LeaseRecord>[]> {
    const newer = updates.find((update) => update.next.format > RECORD_FORMAT);
    if (newer) {
      // Written by a newer core whose rules this one does not know: never overwrite it; stop instead.
      const error = this.#host.formatError(`lease ${describeValue(newer.leaseKey)}`, newer.next.format);
      this.#host.fail(error);
      return updates.map(() => ({ status: 'unknown', error }));
    }
    try {
      const results = await this.#storage.updateLeases(this.#group, updates);
      const tally = { operation, applied: 0, conflict: 0, unknown: 0 };
      for (const outcome of results) {
        tally[outcome.status]++;
        if (outcome.status === 'unknown') this.#host.report(outcome.error, operation);
      }
      this.#host.emit('storage', tally);
      return results;
    } catch (error) {
      this.#host.emit('storage', { operation, applied: 0, conflict: 0, unknown: updates.length });
      this.#host.report(error, operation);
      const unknown = error instanceof LeaseholdError ? error : new StorageUnavailableError(`[${PKG}] ${operation} failed`, { cause: error });
      return updates.map(() => ({ status: 'unknown', error: unknown }));
    }
  }

  /** Runs `fn` after every write already queued on the lease, and before any queued later. */
  onLease<T>(held: Held, fn: () => Promise<T>): Promise<T> {
    return this.onLeases([held], fn);
  }

  /** Runs `fn` (one batched write) once every lease in `leases` is free of earlier writes. */
  onLeases<T>(leases: readonly Held[], fn: () => Promise<T>): Promise<T> {
    const before = Promise.all(leases.map((held) => held.chain));
    for (const held of leases) held.busy++;
    const run = before.then(fn);
    const done = run.then(
      () => undefined,
      () => undefined,
    );
    for (const held of leases) {
      held.chain = done.then(() => {
        held.busy--;
      });
    }
    return run;
  }

  /** The held lease of `lease`'s tenure, or a `LeaseLostError`: held by key alone is not enough. */
  #requireHeld(lease: LeaseTenure): Held {
    const { leaseKey } = lease;
    const held = this.#held.get(leaseKey);
    if (!held || !this.#hold.isHeld(leaseKey)) {
      if (held && !held.leaving) this.#hold.fenceExpired();
      throw this.#hold.lostError(leaseKey);
    }
    if (!this.#checkpointPerKey && held.record.epoch !== lease.fencingToken) {
      throw new LeaseLostError(
        `[${PKG}] lease ${describeValue(leaseKey)} is held in tenure ${held.record.epoch}, not in tenure ${describeValue(lease.fencingToken)} the write belongs to`,
        leaseKey,
      );
    }
    return held;
  }
}

function sameState(record: LeaseRecord, state: LeaseState): boolean {
  return (
    record.owner === state.owner &&
    record.epoch === state.epoch &&
    record.checkpoint === state.checkpoint &&
    record.incarnation === state.incarnation &&
    sameFields(record.metadata, state.metadata)
  );
}

function sameFields(a: Readonly<Record<string, string>>, b: Readonly<Record<string, string>>): boolean {
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((key) => a[key] === b[key]);
}
