/**
 * Values and errors of the storage contract as JSON text, for clients that live in another process: a
 * typed error crosses as its code, message and fields, and comes back as the same class, so that the
 * suite judges a remote client's results exactly as it judges a local one's.
 */
import {
  CorruptRecordError,
  InvalidConfigError,
  InvalidInputError,
  LeaseholdError,
  RecordFormatError,
  RegressionError,
  StorageOutcomeUnknownError,
  StorageSchemaError,
  StorageUnavailableError,
} from '../errors.js';

/** An error as it crosses a process boundary. */
export interface WireError {
  readonly name: string;
  readonly message: string;
  readonly code?: string;
  readonly group?: string;
  readonly leaseKey?: string;
  readonly workerId?: string;
  readonly format?: number;
}

const ERROR_MARK = '__leaseholdWireError';

/** The fields of an error that cross, whatever it is. */
export function errorToWire(error: unknown): WireError {
  if (!(error instanceof Error)) return { name: 'Error', message: `a non-error was thrown: ${String(error)}` };
  const fields = error as Error & Partial<Record<'code' | 'group' | 'leaseKey' | 'workerId' | 'format', unknown>>;
  return {
    name: error.name,
    message: error.message,
    ...(typeof fields.code === 'string' ? { code: fields.code } : {}),
    ...(typeof fields.group === 'string' ? { group: fields.group } : {}),
    ...(typeof fields.leaseKey === 'string' ? { leaseKey: fields.leaseKey } : {}),
    ...(typeof fields.workerId === 'string' ? { workerId: fields.workerId } : {}),
    ...(typeof fields.format === 'number' ? { format: fields.format } : {}),
  };
}

/** The error a {@link WireError} stands for: the same Leasehold class when it was one, a plain `Error` otherwise. */
export function errorFromWire(wire: WireError): Error {
  const { message } = wire;
  let error: Error;
  switch (wire.code) {
    case 'ERR_INVALID_CONFIG': error = new InvalidConfigError(message); break;
    case 'ERR_INVALID_INPUT': error = new InvalidInputError(message); break;
    case 'ERR_STORAGE_UNAVAILABLE': error = new StorageUnavailableError(message); break;
    case 'ERR_STORAGE_SCHEMA': error = new StorageSchemaError(message); break;
    case 'ERR_CORRUPT_RECORD': error = new CorruptRecordError(message, { group: wire.group ?? '', leaseKey: wire.leaseKey, workerId: wire.workerId }); break;
    case 'ERR_REGRESSION': error = new RegressionError(message); break;
    case 'ERR_RECORD_FORMAT': error = new RecordFormatError(message, wire.format ?? 0); break;
    case 'ERR_STORAGE_OUTCOME_UNKNOWN': error = new StorageOutcomeUnknownError(message); break;
    default:
      error = wire.code === undefined ? new Error(message) : new LeaseholdError(wire.code, message);
      error.name = wire.name;
  }
  return error;
}

/** JSON text of a value whose errors (an `unknown` result's, for instance) cross as {@link WireError}s. */
export function toWire(value: unknown): string {
  return JSON.stringify(value === undefined ? null : value, (_key, field: unknown) =>
    field instanceof Error ? { [ERROR_MARK]: errorToWire(field) } : field,
  );
}

/** The value of {@link toWire}'s text, with its errors rebuilt. */
export function fromWire(text: string): unknown {
  return JSON.parse(text, (_key, field: unknown) => {
    if (typeof field === 'object' && field !== null && ERROR_MARK in field) {
      return errorFromWire((field as Record<typeof ERROR_MARK, WireError>)[ERROR_MARK]);
    }
    return field;
  });
}
