/**
 * How PostgreSQL and driver errors become Leasehold's typed errors. A statement the server refused with an
 * error is known not to have applied (each statement is its own transaction); an error after the statement
 * may have reached the server leaves the outcome unknown.
 */
import {
  StorageOutcomeUnknownError,
  StorageSchemaError,
  StorageUnavailableError,
  type LeaseholdError,
} from '@leasehold/core';
import { describeValue } from '@leasehold/core/adapter';
import { PKG } from './schema.js';

/** The fields of a server error that pg exposes. */
interface ServerError {
  readonly code: string;
  readonly severity?: string;
  readonly message: string;
}

/** Whether `error` is an error the server sent (an ErrorResponse), as opposed to a transport failure. */
export function isServerError(error: unknown): error is ServerError {
  if (typeof error !== 'object' || error === null) return false;
  const { code, severity } = error as { code?: unknown; severity?: unknown };
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) && typeof severity === 'string';
}

/** Errors after which the statement certainly rolled back and may be sent again as it was. */
const RETRYABLE = new Set([
  '40P01', // deadlock_detected
  '40001', // serialization_failure
]);

/** Whether the statement was refused by a transient conflict with another transaction, and nothing applied. */
export function isRetryable(error: unknown): boolean {
  return isServerError(error) && RETRYABLE.has(error.code);
}

/**
 * Whether the server refused a named statement it does not know (26000, invalid_sql_statement_name) or
 * already has under that name (42P05, duplicate_prepared_statement). Both come at Parse or Bind, before
 * the statement runs.
 */
export function isLostPreparedStatement(error: unknown): boolean {
  return isServerError(error) && (error.code === '26000' || error.code === '42P05');
}

/** Whether the connection that raised `error` can still be used (an ordinary statement error). */
export function connectionSurvives(error: unknown): boolean {
  return isServerError(error) && error.severity === 'ERROR';
}

function messageOf(error: unknown): string {
  if (error instanceof Error) return error.message;
  return describeValue(error);
}

/**
 * The schema error for a missing table, schema or column, or `undefined` for any other error. 42P01 is
 * undefined_table, 3F000 invalid_schema_name, 42703 undefined_column.
 */
export function schemaError(error: unknown, where: string): StorageSchemaError | undefined {
  if (!isServerError(error)) return undefined;
  if (error.code === '42P01' || error.code === '3F000') {
    return new StorageSchemaError(
      `[${PKG}] the tables of ${where} do not exist (${error.message}); run migrate() before using the storage`,
      { cause: error },
    );
  }
  if (error.code === '42703') {
    return new StorageSchemaError(
      `[${PKG}] the tables of ${where} do not have the expected columns (${error.message}); run migrate() with this release`,
      { cause: error },
    );
  }
  return undefined;
}

/** The error thrown when no connection could be had: nothing was sent. */
export function unavailable(operation: string, error: unknown): StorageUnavailableError {
  return new StorageUnavailableError(`[${PKG}] ${operation} could not get a connection: ${messageOf(error)}`, { cause: error });
}

/** The error thrown when a read failed after it was sent. */
export function readFailed(operation: string, error: unknown): StorageUnavailableError {
  return new StorageUnavailableError(`[${PKG}] ${operation} failed: ${messageOf(error)}`, { cause: error });
}

/** The error carried by an `unknown` result: the write may or may not have applied. */
export function outcomeUnknown(operation: string, error: unknown): LeaseholdError {
  return new StorageOutcomeUnknownError(
    `[${PKG}] the outcome of ${operation} is unknown: ${messageOf(error)}`,
    { cause: error },
  );
}
