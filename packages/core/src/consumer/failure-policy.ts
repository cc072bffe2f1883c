import { describeValue, InvalidConfigError } from '../errors.js';
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
