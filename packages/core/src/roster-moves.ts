/**
 * The roster digest's moves (see `CheckpointStorage.getRosterMoves`): which members each advance named, kept
 * by a store for its last advances, and what a reader whose roster was up to date at one digest must read
 * again to be up to date at a later one. Every adapter that keeps the advances answers through
 * {@link rosterMovesOf}, so that all of them answer the same question the same way.
 */
import type { RosterMoves } from './storage.js';
import { limits } from './validation.js';

/** One advance of the digest as a store keeps it: the value it wrote, and the worker ids it named (none: nobody). */
export interface KeptAdvance {
  readonly digest: number;
  readonly workerIds: readonly string[];
}

/**
 * The moves after `since` up to `digest`, from the advances a store kept (in any order; more than
 * {@link limits}.rosterMovesKept may be given): `null` when one of them is missing, named nobody, or `since`
 * is above `digest`.
 */
export function rosterMovesOf(since: number, digest: number, kept: Iterable<KeptAdvance>): RosterMoves {
  if (since > digest) return { digest, moved: null };
  if (since === digest) return { digest, moved: [] };
  const named = new Map<number, readonly string[]>();
  for (const advance of kept) if (advance.digest > since && advance.digest <= digest) named.set(advance.digest, advance.workerIds);
  if (named.size !== digest - since) return { digest, moved: null };
  const moved = new Set<string>();
  for (const workerIds of named.values()) {
    if (workerIds.length === 0) return { digest, moved: null };
    for (const workerId of workerIds) moved.add(workerId);
  }
  return { digest, moved: [...moved] };
}

/** The advances a store keeps after writing `digest`: those within {@link limits}.rosterMovesKept of it. */
export function keptAfter<A extends KeptAdvance>(kept: readonly A[], digest: number): A[] {
  return kept.filter((advance) => advance.digest > digest - limits.rosterMovesKept);
}
