/**
 * Every error Leasehold throws or reports is a `LeaseholdError`: match on the subclass or on `code`.
 * Messages name the package that raised them and the bad value, for example
 * `[storage-postgres] table name "a\"b" is not a valid identifier`.
 */
export class LeaseholdError extends Error {
  /** A stable, machine-readable code such as `ERR_INVALID_CONFIG`. */
  readonly code: string;

  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
}

/** An option passed to a constructor or a function is invalid; nothing was started or written. */
export class InvalidConfigError extends LeaseholdError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_INVALID_CONFIG', message, options);
  }
}

/** A value handed to a storage operation (group, key, checkpoint, metadata) breaks the contract's limits; nothing was written. */
export class InvalidInputError extends LeaseholdError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_INVALID_INPUT', message, options);
  }
}

/** The backend could not be reached or refused the request before anything was written. */
export class StorageUnavailableError extends LeaseholdError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_STORAGE_UNAVAILABLE', message, options);
  }
}

/** The backend's tables, keys or scripts are missing or of the wrong shape (for example `migrate()` was not run). */
export class StorageSchemaError extends LeaseholdError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_STORAGE_SCHEMA', message, options);
  }
}

/** A stored record cannot be read back as a valid record; it is reported, never repaired or overwritten. */
export class CorruptRecordError extends LeaseholdError {
  /** The group of the corrupt record. */
  readonly group: string;
  /** The lease key of the corrupt record, or `undefined` for a leader or member record. */
  readonly leaseKey: string | undefined;
  /** The worker id of a corrupt member of the roster, or `undefined` for a lease or leader record. */
  readonly workerId: string | undefined;

  constructor(
    message: string,
    where: { group: string; leaseKey?: string | undefined; workerId?: string | undefined },
    options?: { cause?: unknown },
  ) {
    super('ERR_CORRUPT_RECORD', message, options);
    this.group = where.group;
    this.leaseKey = where.leaseKey;
    this.workerId = where.workerId;
  }
}

/**
 * A value that may only grow (a record's version, a lease's epoch, a leader's term) was found smaller
 * than one already seen: the backend lost acknowledged writes (a restart without durable persistence, a
 * failover to a lagging replica). Safety can no longer be promised for that group until an operator acts.
 */
export class RegressionError extends LeaseholdError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_REGRESSION', message, options);
  }
}

/**
 * A stored record is in a format this worker cannot share a group with: written by a newer release than
 * this version of core knows (a rolling upgrade in progress: upgrade this worker), or an earlier
 * release's layout still in use by live workers (an adapter that moved its records refuses to join beside
 * them: stop those workers first). Core stops rather than overwrite what it cannot understand or split
 * one group into two.
 */
export class RecordFormatError extends LeaseholdError {
  /** The format found in storage. */
  readonly format: number;

  constructor(message: string, format: number, options?: { cause?: unknown }) {
    super('ERR_RECORD_FORMAT', message, options);
    this.format = format;
  }
}

/**
 * A storage handed to core was written for another version of the storage contract than the one this core
 * implements (`STORAGE_CONTRACT_VERSION`), or declares none: nothing was started. The message names both
 * versions, the adapter, and the sections of `UPGRADING.md` that say what changed.
 */
export class ContractVersionError extends LeaseholdError {
  /** The contract version the storage declares (`contractVersion`), or `undefined` when it declares none. */
  readonly adapterVersion: number | undefined;
  /** The contract version this core implements. */
  readonly coreVersion: number;

  constructor(message: string, versions: { adapterVersion: number | undefined; coreVersion: number }, options?: { cause?: unknown }) {
    super('ERR_CONTRACT_VERSION', message, options);
    this.adapterVersion = versions.adapterVersion;
    this.coreVersion = versions.coreVersion;
  }
}

/** The worker no longer holds the lease: the write it tried (renew, checkpoint, release) was refused. */
export class LeaseLostError extends LeaseholdError {
  /** The lease that was lost. */
  readonly leaseKey: string;

  constructor(message: string, leaseKey: string, options?: { cause?: unknown }) {
    super('ERR_LEASE_LOST', message, options);
    this.leaseKey = leaseKey;
  }
}

/**
 * This worker's membership of its group was declared dead (it did not heartbeat for a lease duration, as
 * others saw it) or replaced: it dropped every lease and joins again as a new incarnation.
 */
export class MemberExpelledError extends LeaseholdError {
  /** The worker that was expelled. */
  readonly workerId: string;

  constructor(message: string, workerId: string, options?: { cause?: unknown }) {
    super('ERR_MEMBER_EXPELLED', message, options);
    this.workerId = workerId;
  }
}

/** A checkpoint behind the current one was refused: checkpoints of a partition only move forward. */
export class CheckpointBehindError extends LeaseholdError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_CHECKPOINT_BEHIND', message, options);
  }
}

/** A storage write whose outcome is unknown (it may or may not have applied); the caller must re-read. */
export class StorageOutcomeUnknownError extends LeaseholdError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_STORAGE_OUTCOME_UNKNOWN', message, options);
  }
}

/** The stream source failed in a way the caller must see (missing stream or shard, access denied, ...). */
export class SourceError extends LeaseholdError {}

/** An operation was cancelled through its `AbortSignal` or because its owner is shutting down. */
export class AbortedError extends LeaseholdError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_ABORTED', message, options);
  }
}

/** Quotes a value for an error message so that empty strings, quotes and control characters stay visible. */
export function describeValue(value: unknown): string {
  if (typeof value === 'string') {
    const shown = value.length > 80 ? `${value.slice(0, 80)}…(${value.length} chars)` : value;
    return JSON.stringify(shown);
  }
  if (typeof value === 'number' || typeof value === 'bigint' || typeof value === 'boolean') return String(value);
  if (value === null) return 'null';
  if (value === undefined) return 'undefined';
  try {
    const json = JSON.stringify(value);
    return json.length > 120 ? `${json.slice(0, 120)}…` : json;
  } catch {
    return Object.prototype.toString.call(value);
  }
}
