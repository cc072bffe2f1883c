/**
 * The types of the rewind tool's public calls: what a rewind targets and selects, the plan
 * `planRewind` returns, the rewind `applyRewind` wrote, the progress `awaitRewind` reports, and the
 * options of each.
 */
import type { Clock, Random } from '../clock.js';
import type { CheckpointStorage, LeaderStore, Position } from '../storage.js';

/**
 * Where a rewind moves the checkpoints: a time (records from that moment on are handed over again),
 * `trim-horizon` (the oldest record the stream holds), `latest` (skip to the moment of the request), or,
 * for one lease only, a position of it (the records after it, as a checkpoint at it means).
 */
export type RewindTarget = { readonly time: Date | number } | 'trim-horizon' | 'latest' | { readonly position: Position };

/** Which leases of a group a rewind moves. Default: every lease. */
export interface RewindSelection {
  /** Only the leases of this stream: keys `${streamId}:${shardId}` (split at their last `:`), in groups that read several streams. */
  readonly streamId?: string | undefined;
  /** Only these leases (keys, as the group's leases name them); each must exist. */
  readonly leaseKeys?: readonly string[] | undefined;
}

/**
 * How a lease moves: `direct` (nobody holds it: written now), `request` (its owner applies the request
 * between two batches), `after-descendants` (a finished lease, whoever holds it: marked now and moved once
 * nobody reads any lease that descends from it, so that those are never read before it again).
 */
export type RewindHow = 'direct' | 'request' | 'after-descendants';

/** One lease a rewind moves. */
export interface RewindMove {
  readonly leaseKey: string;
  /** The worker that holds it now, or `null` when nobody does. */
  readonly owner: string | null;
  /** Its checkpoint now. */
  readonly from: Position | null;
  /** Its checkpoint once moved. */
  readonly to: Position;
  readonly how: RewindHow;
  /**
   * Set for a lease that moves because it descends from a finished lease the rewind moves back (its
   * children read again after it): the key of that lease. Such a lease moves to the rewind's time, or to
   * its start.
   */
  readonly descendantOf: string | undefined;
}

/** A lease the rewind leaves as it is, or a part of the stream it cannot read again, and why. */
export interface RewindNote {
  readonly leaseKey: string;
  readonly reason: string;
}

/** What a rewind will do, as {@link planRewind} decided on the group as it was read. */
export interface RewindPlan {
  /** Names the rewind: written on every lease it moves. */
  readonly rewindId: string;
  readonly group: string;
  /** When it was asked for, by the tool's wall clock (ISO). */
  readonly requestedAt: string;
  /** The target as asked: `trim-horizon`, `latest`, an ISO time or a position. */
  readonly target: string;
  /** The checkpoint the selected leases move to (`latest` is pinned to `requestedAt`). */
  readonly to: Position;
  /** The leases selected, sorted. */
  readonly selected: readonly string[];
  /** Every lease that moves, ancestors before their descendants. */
  readonly moves: readonly RewindMove[];
  /** Selected leases left as they are. */
  readonly unchanged: readonly RewindNote[];
  /** What the rewind cannot read again: parents already cleaned up, leases that cannot be read back. */
  readonly notReplayable: readonly RewindNote[];
}

/** A rewind as {@link applyRewind} wrote it. */
export interface AppliedRewind extends RewindPlan {
  /** When the writes began, on the tool's monotonic clock: {@link awaitRewind} counts from it. */
  readonly startedAt: number;
  /**
   * `written` once the group-wide marker is on the leader record (workers without a change feed learn of
   * the rewind from it); `no-leader-record` when the group has none (no worker elects a leader).
   */
  readonly marker: 'written' | 'no-leader-record';
}

/** Options of {@link planRewind}. */
export interface PlanRewindOptions {
  readonly storage: CheckpointStorage;
  readonly group: string;
  readonly select?: RewindSelection | undefined;
  readonly to: RewindTarget;
  /** The wall clock of `requestedAt` and of `latest`. Default: the process's. */
  readonly clock?: Clock | undefined;
  /** The random part of the rewind's id. Default: `Math.random`. */
  readonly random?: Random | undefined;
}

/** Options of {@link applyRewind}. */
export interface ApplyRewindOptions {
  /** The group's leases and its leader record (for the marker). */
  readonly storage: CheckpointStorage & Partial<LeaderStore>;
  /**
   * How many times the writes are tried again on a fresh read of the group, after a short random pause,
   * when leases kept changing (each write is also sent again at once, a few times, on the record its
   * conflict carries). Default 5.
   */
  readonly maxAttempts?: number | undefined;
  readonly clock?: Clock | undefined;
  /** The pauses' jitter. Default: `Math.random`. */
  readonly random?: Random | undefined;
}

/** Where one lease of a rewind stands. */
export interface RewindLeaseProgress {
  readonly leaseKey: string;
  readonly how: RewindHow;
  /**
   * `pending` until it moved; `applied` once it carries the rewind's id and no request; `superseded` when
   * a later rewind replaced the request or moved it since; `gone` when its lease was deleted.
   */
  readonly state: 'pending' | 'applied' | 'superseded' | 'gone';
  /** From the start of {@link applyRewind} until it was seen moved (to within a poll), in ms; `undefined` while pending. */
  readonly appliedAfterMs: number | undefined;
}

/** The progress of a rewind, as {@link awaitRewind} reports it and returns it. */
export interface RewindProgress {
  readonly rewindId: string;
  readonly leases: readonly RewindLeaseProgress[];
  /** How many leases are no longer pending. */
  readonly done: number;
  readonly total: number;
  /** Whether no lease is pending. */
  readonly complete: boolean;
  /** Since the start of {@link applyRewind}, in ms. */
  readonly elapsedMs: number;
}

/** Options of {@link awaitRewind}. */
export interface AwaitRewindOptions {
  /** The group's leases, and its leader record (marked again when a finished lease is moved back). */
  readonly storage: CheckpointStorage & Partial<LeaderStore>;
  /** How long to wait, in ms from the call; the progress so far is returned then (`complete: false`). */
  readonly timeoutMs: number;
  /** The pause between two looks at the group. Default 500. */
  readonly pollIntervalMs?: number | undefined;
  /** Hears the progress whenever a lease moved, and once at the start. */
  readonly onProgress?: ((progress: RewindProgress) => void) | undefined;
  /** The clock `applyRewind` ran on. Default: the process's. */
  readonly clock?: Clock | undefined;
  /** Stops waiting; the progress so far is returned. */
  readonly signal?: AbortSignal | undefined;
}
