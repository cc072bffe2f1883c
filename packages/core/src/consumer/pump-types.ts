/**
 * What a shard's reader tells the consumer about its processing, and how it ends: the types the consumer
 * and the reader (shard-pump.ts, shard-end.ts) share, and how a reader turns what was thrown into an error.
 */
import { LeaseholdError } from '../errors.js';
import type { Position } from '../storage.js';
import type { GiveUpReason } from './options.js';

/** What a reader reports of anything thrown: an Error as it is, anything else wrapped. */
export function asError(error: unknown): Error {
  return error instanceof Error ? error : new LeaseholdError('ERR_UNKNOWN', String(error));
}

/** The runtime's events about one shard's processing, reported to the consumer. */
export interface PumpReporter {
  started(shardId: string, position: Position): void;
  batch(shardId: string, records: number, bytes: number, millisBehindLatest: number | undefined, durationMs: number): void;
  checkpointed(shardId: string, position: Position): void;
  handlerFailed(shardId: string, attempt: number, error: Error): void;
  /** A failing call of `records` records was split in two, of `left` and `right` records. */
  bisected(shardId: string, records: number, left: number, right: number, error: Error): void;
  /** `records` records are handed to the handler again after `delayMs`, for their `attempt`th time. */
  retried(shardId: string, records: number, attempt: number, delayMs: number): void;
  deadLettered(shardId: string, positions: readonly Position[], attempts: number, reason: GiveUpReason, error: Error): void;
  deadLetterFailed(shardId: string, positions: readonly Position[], attempt: number, error: Error, retryInMs: number): void;
  recordSkipped(shardId: string, position: Position, error: Error, how: { reason: GiveUpReason; attempts: number; deadLettered: boolean }): void;
  ended(shardId: string, childShardIds: readonly string[]): void;
  stopped(shardId: string, error: Error): void;
  /** The shard holds at records it does not give up (their error is not theirs, or too many were given up in a row), and retries them. */
  heldBack(shardId: string, reason: HoldReason, error: Error): void;
  /** A shard held back moves again. */
  resumed(shardId: string): void;
  error(error: Error, operation: string): void;
}

/**
 * Why a shard holds at records instead of giving them up: their handler's error is not their fault
 * (`handler-error`), or giving up ran away (`give-up-limit`: `maxRecordsGivenUpInARow` given up in a row).
 */
export type HoldReason = 'handler-error' | 'give-up-limit';

/** How a pump ended: the consumer restarts a failed one (with backoff) or gives its lease back. */
export type PumpOutcome =
  | { kind: 'finished' } // the shard reached its end and its lease was given back
  | { kind: 'left' } // the lease was lost, handed over or released: nothing more to do here
  | { kind: 'stopped'; error: Error } // the handler failed under the 'stop' policy: the lease is kept
  | { kind: 'failed'; error: Error }; // reading or finishing failed
