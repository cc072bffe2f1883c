import { describeValue, InvalidConfigError, LeaseholdError } from '../errors.js';
import { positive, positiveInteger } from '../lease/timing.js';
import type { SourceRecord } from '../source.js';
import type { FailedRecords, FailurePolicy, PoisonPolicy } from './options.js';

const PKG = 'core';

/** A {@link PoisonPolicy} with its defaults filled in. */
export interface ResolvedPoisonPolicy<R extends SourceRecord = SourceRecord> {
  readonly kind: 'poison';
  readonly bisect: boolean;
  readonly maxAttempts: number;
  readonly maxRecordAgeMs: number;
  readonly deadLetter: ((failure: FailedRecords<R>) => void | Promise<void>) | undefined;
}

/** The failure policy as the shard pump runs it. */
export type ResolvedFailurePolicy<R extends SourceRecord = SourceRecord> = 'retry' | 'skip' | 'stop' | ResolvedPoisonPolicy<R>;

/** The keys of a {@link PoisonPolicy}. */
export const POISON_KEYS: ReadonlySet<string> = new Set(['bisect', 'maxAttempts', 'maxRecordAgeMs', 'deadLetter']);

/**
 * Validates `onHandlerError` and fills in its defaults. An unknown key is refused (a typo such as
 * `maxRetries` would otherwise retry for ever), and so is a `deadLetter` that could never be called
 * because nothing is ever given up.
 */
export function resolveFailurePolicy<R extends SourceRecord>(policy: FailurePolicy<R> | undefined): ResolvedFailurePolicy<R> {
  const value: unknown = policy ?? 'retry';
  if (value === 'retry' || value === 'skip' || value === 'stop') return value;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new InvalidConfigError(
      `[${PKG}] onHandlerError must be 'retry', 'skip', 'stop' or { bisect?, maxAttempts?, maxRecordAgeMs?, deadLetter? }, got ${describeValue(value)}`,
    );
  }
  for (const key of Object.keys(value)) {
    if (!POISON_KEYS.has(key)) {
      throw new InvalidConfigError(`[${PKG}] onHandlerError has no option ${describeValue(key)}; it takes bisect, maxAttempts, maxRecordAgeMs and deadLetter`);
    }
  }
  const given = value as PoisonPolicy<R>;
  if (given.bisect !== undefined && typeof given.bisect !== 'boolean') {
    throw new InvalidConfigError(`[${PKG}] onHandlerError.bisect must be a boolean, got ${describeValue(given.bisect)}`);
  }
  if (given.deadLetter !== undefined && typeof given.deadLetter !== 'function') {
    throw new InvalidConfigError(`[${PKG}] onHandlerError.deadLetter must be a function, got ${describeValue(given.deadLetter)}`);
  }
  const maxAttempts = given.maxAttempts === undefined ? Infinity : positiveInteger(PKG, 'onHandlerError.maxAttempts', given.maxAttempts);
  const maxRecordAgeMs = given.maxRecordAgeMs === undefined ? Infinity : positive(PKG, 'onHandlerError.maxRecordAgeMs', given.maxRecordAgeMs);
  if (given.deadLetter !== undefined && maxAttempts === Infinity && maxRecordAgeMs === Infinity) {
    throw new InvalidConfigError(
      `[${PKG}] onHandlerError.deadLetter is never called without maxAttempts or maxRecordAgeMs: nothing is ever given up`,
    );
  }
  return { kind: 'poison', bisect: given.bisect ?? false, maxAttempts, maxRecordAgeMs, deadLetter: given.deadLetter };
}

/** When records may be given up, under the skip and the poison policies. */
export interface GivingUp {
  /** The user's word on whether a handler failure is the fault of the records it was handed. */
  readonly isRecordError: ((error: Error) => boolean) | undefined;
  /** Records given up in a row, at most, before the shard holds and retries instead (Infinity: no limit). */
  readonly maxInARow: number;
}

/** Validates `isRecordError` and `maxRecordsGivenUpInARow` (default 10). */
export function resolveGivingUp(isRecordErrorOption: unknown, maxInARow: unknown): GivingUp {
  if (isRecordErrorOption !== undefined && typeof isRecordErrorOption !== 'function') {
    throw new InvalidConfigError(`[${PKG}] isRecordError must be a function, got ${describeValue(isRecordErrorOption)}`);
  }
  const limit = maxInARow ?? 10;
  if (limit !== Infinity && !(typeof limit === 'number' && Number.isInteger(limit) && limit > 0)) {
    throw new InvalidConfigError(`[${PKG}] maxRecordsGivenUpInARow must be a positive integer or Infinity, got ${describeValue(limit)}`);
  }
  return { isRecordError: isRecordErrorOption as GivingUp['isRecordError'], maxInARow: limit };
}

/**
 * Whether a handler failure is the fault of the records it was handed, so that they may be given up
 * (DESIGN section 5, rule 10). Not when Leasehold's own typed error is among it and its causes (a lease
 * lost, storage unavailable, a schema or configuration error, a handler's report naming no record of its
 * call), except the one core makes for a report that gave no error (`ERR_RECORD_FAILED`); not when the
 * user's `isRecordError` says so. Anything else is: a handler's error is the record's unless told otherwise.
 */
export function isRecordError(error: Error, userSays: GivingUp['isRecordError']): boolean {
  let cause: unknown = error;
  for (let depth = 0; depth < 8 && cause instanceof Error; depth++, cause = cause.cause) {
    if (cause instanceof LeaseholdError && cause.code !== 'ERR_RECORD_FAILED') return false;
  }
  return userSays === undefined || userSays(error);
}
