/**
 * Waiting for a rewind: following its leases until each moved, was replaced by a later rewind or was
 * deleted, settling meanwhile what no owner can, and reporting the progress per lease.
 */
import { systemClock } from '../clock.js';
import { describeValue, InvalidConfigError, InvalidInputError } from '../errors.js';
import { checkContractVersion } from '../contract-version.js';
import { unsafeOf } from '../unsafe.js';
import type { LeaseRecord } from '../storage.js';
import { hasRewindRequest, REWIND_FIELDS, rewindRequestOf } from './request.js';
import { settleAndMark } from './settle.js';
import type { AppliedRewind, AwaitRewindOptions, RewindLeaseProgress, RewindProgress } from './types.js';
import { isList, readView } from './view.js';

const PKG = 'core';

/**
 * Follows a rewind until every lease it moves moved (it carries the rewind's id and no request), or was
 * replaced by a later rewind, or deleted; or until `timeoutMs`. Each look lists the group and settles what
 * no owner can (see {@link settleRewinds}). Returns the progress: per lease, the time from the start of
 * `applyRewind` until it was seen moved.
 */
export async function awaitRewind(rewind: AppliedRewind, options: AwaitRewindOptions): Promise<RewindProgress> {
  if (typeof rewind !== 'object' || rewind === null || typeof rewind.rewindId !== 'string' || !isList(rewind.moves)) {
    throw new InvalidInputError(`[${PKG}] awaitRewind needs a rewind returned by applyRewind, got ${describeValue(rewind)}`);
  }
  const { storage, timeoutMs } = options;
  if (!storage || typeof storage.listLeases !== 'function') throw new InvalidConfigError(`[${PKG}] storage must implement CheckpointStorage, got ${describeValue(storage)}`);
  checkContractVersion(storage, "awaitRewind's storage", PKG);
  if (typeof timeoutMs !== 'number' || !(timeoutMs >= 0)) throw new InvalidConfigError(`[${PKG}] timeoutMs must be a non-negative number of milliseconds, got ${describeValue(timeoutMs)}`);
  const pollIntervalMs = options.pollIntervalMs ?? 500;
  if (typeof pollIntervalMs !== 'number' || !(pollIntervalMs > 0) || !Number.isFinite(pollIntervalMs)) {
    throw new InvalidConfigError(`[${PKG}] pollIntervalMs must be a positive number of milliseconds, got ${describeValue(pollIntervalMs)}`);
  }
  const clock = options.clock ?? systemClock;
  const unstartedLeftAlone = unsafeOf(options).unstartedLeftAlone === true;
  const deadline = clock.now() + timeoutMs;
  const states = new Map<string, RewindLeaseProgress>(
    rewind.moves.map((move) => [move.leaseKey, { leaseKey: move.leaseKey, how: move.how, state: 'pending', appliedAfterMs: undefined }]),
  );
  let reported = false;
  for (;;) {
    const view = await readView(storage, rewind.group);
    for (const record of await settleAndMark(storage, rewind, view, unstartedLeftAlone)) view.leases.set(record.leaseKey, record);
    const now = clock.now();
    let changed = false;
    for (const [leaseKey, progress] of states) {
      if (progress.state !== 'pending') continue;
      const state = stateOf(view.leases.get(leaseKey), rewind.rewindId);
      if (state === 'pending') continue;
      states.set(leaseKey, { ...progress, state, appliedAfterMs: now - rewind.startedAt });
      changed = true;
    }
    const progress = progressOf(rewind, states, now);
    if (changed || !reported) options.onProgress?.(progress);
    reported = true;
    const remaining = deadline - clock.now();
    if (progress.complete || remaining <= 0 || options.signal?.aborted) return progress;
    try {
      await clock.sleep(Math.min(pollIntervalMs, remaining), options.signal);
    } catch {
      return progressOf(rewind, states, clock.now());
    }
  }
}

function stateOf(lease: LeaseRecord | undefined, rewindId: string): RewindLeaseProgress['state'] {
  if (lease === undefined) return 'gone';
  // Moved by this rewind, whatever later rewind's request it carries now.
  if (lease.metadata[REWIND_FIELDS.rewound] === rewindId) return 'applied';
  const request = rewindRequestOf(lease);
  if (request !== undefined) return request.id === rewindId ? 'pending' : 'superseded';
  if (hasRewindRequest(lease)) return 'pending';
  return lease.metadata[REWIND_FIELDS.rewound] === rewindId ? 'applied' : 'superseded';
}

function progressOf(rewind: AppliedRewind, states: ReadonlyMap<string, RewindLeaseProgress>, now: number): RewindProgress {
  const leases = rewind.moves.map((move) => states.get(move.leaseKey) as RewindLeaseProgress);
  const done = leases.filter((lease) => lease.state !== 'pending').length;
  return { rewindId: rewind.rewindId, leases, done, total: leases.length, complete: done === leases.length, elapsedMs: now - rewind.startedAt };
}
