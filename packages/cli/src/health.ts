/**
 * What the command line reads off a lease about its health: a stall the worker reported on it, a record
 * format newer than this command line's core knows, a finished shard.
 */
import { Checkpoint, RecordFormatError, type LeaseRecord } from '@leasehold/core';
import { describeValue, RECORD_FORMAT, STALL_FIELDS } from '@leasehold/core/adapter';
import { PKG } from './pkg.js';

/** A stall a worker reported on a lease it holds (core writes `leasehold.stalledSince` and `leasehold.stalledReason`). */
export interface Stall {
  /**
   * `handler` (a handler call has not returned), `reader` (the source has not answered), `failed` (nobody reads
   * the shard), `handler-error` or `give-up-limit` (the shard holds at records it does not give up).
   */
  readonly reason: string;
  /** When the shard stalled, as the worker wrote it: ISO 8601 UTC by the worker's wall clock. */
  readonly since: string;
  /**
   * How long ago that is by this machine's wall clock, or `null` when `since` is not a time. Two machines'
   * clocks differ: this is for people, not for decisions.
   */
  readonly forMs: number | null;
}

/** The stall reported on the lease, or `null` when its worker reports none. */
export function stallOf(lease: Pick<LeaseRecord, 'metadata'>, wallNow: number): Stall | null {
  const since = lease.metadata[STALL_FIELDS.since];
  const reason = lease.metadata[STALL_FIELDS.reason];
  if (since === undefined && reason === undefined) return null;
  const at = since === undefined ? Number.NaN : Date.parse(since);
  return { reason: reason ?? '?', since: since ?? '?', forMs: Number.isNaN(at) ? null : Math.max(0, wallNow - at) };
}

/** What a stall means and where to look, for `doctor`. */
export function stallAdvice(reason: string): string {
  switch (reason) {
    case 'handler':
      return "a call of the handler has not returned: look at the owner's handler (a hung downstream call, a deadlock)";
    case 'reader':
      return "the stream has not answered the owner's reads: check the stream, and the owner's network and credentials";
    case 'failed':
      return "nobody reads the shard (its reads keep failing, or the handler's failure policy stopped it): see the owner's shard-failed and shard-stopped events";
    case 'handler-error':
      return "the handler keeps failing with an error that is not the records' fault (a sink's schema or table, credentials, a connection): nothing is given up while it lasts; see the owner's shard-stalled event and error log for the error";
    case 'give-up-limit':
      return "too many records were given up in a row, so the shard holds and retries instead of dead-lettering or skipping more: see the owner's shard-stalled event and error log for the error, and fix the handler or its downstream";
    default:
      return `the reason ${describeValue(reason)} is not one this command line knows (handler, reader, failed, handler-error, give-up-limit)`;
  }
}

/** Whether the lease was written by a newer Leasehold than this command line's core. */
export function isNewerFormat(record: { readonly format: number }): boolean {
  return record.format > RECORD_FORMAT;
}

/** The error for a lease this command line must not write: it was written by a newer Leasehold. */
export function newerFormatError(lease: Pick<LeaseRecord, 'leaseKey' | 'format'>): RecordFormatError {
  return new RecordFormatError(
    `[${PKG}] lease ${describeValue(lease.leaseKey)} was written by a newer Leasehold (record format ${lease.format}; this command line knows up to ${RECORD_FORMAT}): upgrade @leasehold/cli; nothing was written`,
    lease.format,
  );
}

/** Whether the lease's shard was read to its end. */
export function isFinished(lease: Pick<LeaseRecord, 'checkpoint'>): boolean {
  return lease.checkpoint === Checkpoint.SHARD_END;
}
