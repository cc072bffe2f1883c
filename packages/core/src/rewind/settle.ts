/**
 * Settling rewinds: what no owner does for a rewind (a lease nobody holds, a finished lease whose
 * descendants have all moved, a descendant created meanwhile), done by the tool while it waits and by the
 * leader's shard sync each round.
 */
import { Checkpoint, RECORD_FORMAT, type CheckpointStorage, type LeaderStore, type LeaseRecord, type LeaseUpdate } from '../storage.js';
import { descendantTarget } from './plan.js';
import { carries, hasRewindRequest, REWIND_FIELDS, rewindRequestOf, rewoundState } from './request.js';
import type { RewindHow, RewindPlan } from './types.js';
import { ancestorsFirst, descendantsOf, isFinished, viewOf, type GroupView } from './view.js';
import { mark, updateOf } from './writes.js';

/** Options of {@link settleRewinds}. */
export interface SettleRewindsOptions {
  readonly storage: Pick<CheckpointStorage, 'updateLeases' | 'getLease'>;
  readonly group: string;
  /** The group's leases as listed. */
  readonly leases: readonly LeaseRecord[];
  /** Whether a live worker holds the lease, judged on a roster read after the listing. */
  readonly heldByAnyone: (lease: LeaseRecord) => boolean;
  /**
   * Keys of the group's leases that the listing could not read back. While there is one, no finished lease
   * is moved back: its parents cannot be read, so it may descend from that lease and be read by its owner.
   */
  readonly unreadable?: readonly string[] | undefined;
  /** Asked right before each write (the leader: whether it still leads). Default: always. */
  readonly mayWrite?: (() => boolean) | undefined;
  /**
   * The simulation's unsafe switch: a descendant nobody holds that never started is left as it is (not
   * written): a worker that listed the group before the finished lease's request takes it at the version
   * it listed, and reads it before its parent is read again.
   */
  readonly unstartedLeftAlone?: boolean | undefined;
}

/**
 * Does what no owner does for a rewind, each a write conditional on the listed version and harmless if
 * done twice (the leader's shard sync runs it each round, `awaitRewind` each poll):
 *
 * 1. a lease that descends from a finished lease carrying a request, and does not carry that rewind yet
 *    (created meanwhile, or a write of the tool's did not land), is reset as the tool resets one: a
 *    request when someone holds it, directly otherwise, also when it never started: the write makes a
 *    take at the version a worker listed before the request conflict, as the tool's does;
 * 2. a request on a lease nobody holds (its owner died, or it was never taken since) is applied directly;
 * 3. a finished lease's request is applied once nobody holds it and every lease that descends from it
 *    carries the rewind with no request left (it is reset, and its owner, if any, gave it back without
 *    reading: a parent carrying a request is not finished) or nobody holds it and it never started, and
 *    every lease of the group can be read back (one that cannot may descend from it).
 *
 * Descendants are settled before their ancestors, so that a whole line settles in one call. Returns the
 * leases written.
 */
export async function settleRewinds(options: SettleRewindsOptions): Promise<LeaseRecord[]> {
  const { storage, group, heldByAnyone } = options;
  const mayWrite = options.mayWrite ?? (() => true);
  if (!options.leases.some(hasRewindRequest)) return [];
  const view = viewOf(options.leases, [], [], []);
  const held = (lease: LeaseRecord): boolean => heldByAnyone(lease);
  const written: LeaseRecord[] = [];
  const write = async (update: LeaseUpdate): Promise<boolean> => {
    if (!mayWrite()) return false;
    const [outcome] = await storage.updateLeases(group, [update]);
    if (outcome?.status !== 'applied') return false;
    view.leases.set(outcome.record.leaseKey, outcome.record);
    written.push(outcome.record);
    return true;
  };
  // 1. Lines under finished leases carrying a request are covered by it.
  for (const key of ancestorsFirst(view, view.leases.keys())) {
    const lease = view.leases.get(key) as LeaseRecord;
    const request = rewindRequestOf(lease);
    if (!request || !isFinished(lease) || lease.format > RECORD_FORMAT) continue;
    for (const descendant of ancestorsFirst(view, descendantsOf(view, key))) {
      const found = view.leases.get(descendant) as LeaseRecord;
      if (found.format > RECORD_FORMAT || carries(found, request.id)) continue;
      if (options.unstartedLeftAlone === true && !held(found) && !hasRewindRequest(found) && neverStarted(found)) continue;
      const how: RewindHow = held(found) || isFinished(found) ? 'request' : 'direct';
      if (!(await write(updateOf(found, { how, to: descendantTarget(request.to) }, request.id, request.requestedAt)))) return written;
    }
  }
  // 2 and 3, descendants first.
  for (const key of ancestorsFirst(view, view.leases.keys()).reverse()) {
    const lease = view.leases.get(key) as LeaseRecord;
    const request = rewindRequestOf(lease);
    if (!request || lease.format > RECORD_FORMAT || held(lease)) continue;
    if (isFinished(lease)) {
      if ((options.unreadable?.length ?? 0) > 0) continue;
      const stopped = descendantsOf(view, key).every((descendant) => {
        const found = view.leases.get(descendant) as LeaseRecord;
        if (hasRewindRequest(found)) return false;
        return found.metadata[REWIND_FIELDS.rewound] === request.id || (!held(found) && neverStarted(found));
      });
      if (!stopped) continue;
    }
    // Published as a release: the lease nobody holds may be taken now (a finished one could not before).
    await write({ leaseKey: key, expectedVersion: lease.version, next: rewoundState(lease, request), notify: 'released' });
  }
  return written;
}

/**
 * Settles what no owner can on the group as `view` shows it; when that moved a finished lease back (it can
 * be taken now), marks the leader record again, so that workers without a change feed list the group.
 */
export async function settleAndMark(
  storage: CheckpointStorage & Partial<LeaderStore>,
  rewind: Pick<RewindPlan, 'group' | 'rewindId'>,
  view: GroupView,
  unstartedLeftAlone = false,
): Promise<LeaseRecord[]> {
  const settled = await settleRewinds({
    storage,
    group: rewind.group,
    leases: [...view.leases.values()],
    heldByAnyone: (lease) => view.ownerOf(lease) !== null,
    unreadable: [...view.corrupt],
    unstartedLeftAlone,
  });
  const reopened = settled.find((record) => view.leases.get(record.leaseKey)?.checkpoint === Checkpoint.SHARD_END && record.checkpoint !== Checkpoint.SHARD_END);
  // A request written on a lease a worker holds (a descendant of a finished lease, reached once it could be
  // read) is news to that owner too: without a change feed it hears of it only from a new mark.
  const asked = settled.find((record) => hasRewindRequest(record) && view.ownerOf(record) !== null);
  if (reopened) await mark(storage, rewind.group, rewind.rewindId, `${rewind.rewindId}/${reopened.leaseKey}`, 5);
  else if (asked) await mark(storage, rewind.group, rewind.rewindId, `${rewind.rewindId}/asked/${asked.leaseKey}/${asked.version}`, 5);
  return settled;
}

/** A lease at its start, never checkpointed: nobody read it yet. */
function neverStarted(lease: LeaseRecord): boolean {
  return lease.checkpoint === null || lease.checkpoint === Checkpoint.TRIM_HORIZON;
}
