/**
 * Applying a planned rewind: writing its moves a generation at a time, ancestors first, deciding again
 * on a fresh read when a write is refused, then marking the leader record and settling what no owner can.
 */
import { systemClock, systemRandom } from '../clock.js';
import { describeValue, InvalidConfigError, InvalidInputError, LeaseholdError } from '../errors.js';
import { checkContractVersion } from '../contract-version.js';
import { unsafeOf } from '../unsafe.js';
import type { CheckpointStorage, LeaderStore, LeaseRecord } from '../storage.js';
import { decide } from './plan.js';
import { carries } from './request.js';
import { settleAndMark } from './settle.js';
import type { AppliedRewind, ApplyRewindOptions, RewindHow, RewindMove, RewindPlan } from './types.js';
import { ancestorsFirst, isFinished, isList, readView, viewOf, type GroupView } from './view.js';
import { mark, updateOf } from './writes.js';

const PKG = 'core';

/** How many times one generation's refused writes are sent again at once, on the record each conflict carries. */
const QUICK_RETRIES = 10;

/**
 * Writes the leases of `moves` that do not carry the rewind yet, a generation at a time, ancestors first:
 * a finished lease carries its request before any lease that descends from it is reset, so that none of
 * those is taken and read before it. A write refused because the lease moved meanwhile (its owner
 * checkpointed) is sent again at once on the record the conflict carries, up to {@link QUICK_RETRIES}
 * times, as long as the roster read says who holds it: a busy owner checkpoints every batch, and a fresh
 * listing each time would lose the race to it for ever. Stops at the first generation left with a write
 * that did not apply, and returns its keys (the caller reads the group again).
 */
async function writeMoves(
  storage: CheckpointStorage,
  group: string,
  view: GroupView,
  moves: readonly RewindMove[],
  rewindId: string,
  requestedAt: string,
  appliedIgnored: boolean,
): Promise<string[]> {
  const due = moves.filter((move) => {
    const lease = view.leases.get(move.leaseKey);
    return lease !== undefined && !carries(lease, rewindId, appliedIgnored);
  });
  const dueKeys = new Set(due.map((move) => move.leaseKey));
  const generation = new Map<string, number>();
  const generationOf = (key: string): number => {
    const known = generation.get(key);
    if (known !== undefined) return known;
    generation.set(key, 0);
    const lease = view.leases.get(key);
    let g = 0;
    for (const parentKey of lease?.parentKeys ?? []) if (dueKeys.has(parentKey)) g = Math.max(g, generationOf(parentKey) + 1);
    generation.set(key, g);
    return g;
  };
  const byGeneration = new Map<number, RewindMove[]>();
  for (const move of due) byGeneration.set(generationOf(move.leaseKey), [...(byGeneration.get(generationOf(move.leaseKey)) ?? []), move]);
  for (const g of [...byGeneration.keys()].sort((a, b) => a - b)) {
    let batch = (byGeneration.get(g) as RewindMove[]).map((move) => ({ move, lease: view.leases.get(move.leaseKey) as LeaseRecord }));
    for (let attempt = 0; batch.length > 0; attempt++) {
      const results = await storage.updateLeases(group, batch.map(({ move, lease }) => updateOf(lease, move, rewindId, requestedAt)));
      const again: typeof batch = [];
      const failed: string[] = [];
      batch.forEach(({ move }, i) => {
        const outcome = results[i];
        if (outcome?.status === 'applied') return;
        const current = outcome?.status === 'conflict' ? outcome.current : null;
        if (outcome?.status === 'conflict' && current === null) return; // deleted meanwhile: its shard finished
        if (current !== null && carries(current, rewindId, appliedIgnored)) return;
        if (current === null || !view.judges(current) || attempt + 1 >= QUICK_RETRIES) {
          failed.push(move.leaseKey);
          return;
        }
        // A lease that finished meanwhile may have children reading already: a request, never directly.
        const how: RewindHow = isFinished(current) ? 'after-descendants' : view.ownerOf(current) === null ? 'direct' : 'request';
        again.push({ move: { ...move, how }, lease: current });
      });
      if (failed.length > 0) return [...failed, ...again.map(({ move }) => move.leaseKey)];
      batch = again;
    }
  }
  return [];
}

/**
 * Writes a planned rewind: every lease it moves (re-read first, so that the decisions hold for the group as
 * it is now, and read again and written again, up to `maxAttempts` times, when a lease changed meanwhile),
 * then the group-wide marker on the leader record, then what can be settled at once (see
 * {@link settleRewinds}). Returns the rewind as written, for {@link awaitRewind}.
 */
export async function applyRewind(plan: RewindPlan, options: ApplyRewindOptions): Promise<AppliedRewind> {
  if (typeof plan !== 'object' || plan === null || typeof plan.rewindId !== 'string' || !isList(plan.selected)) {
    throw new InvalidInputError(`[${PKG}] applyRewind needs a plan made by planRewind, got ${describeValue(plan)}`);
  }
  const { storage } = options;
  if (!storage || typeof storage.updateLeases !== 'function') throw new InvalidConfigError(`[${PKG}] storage must implement CheckpointStorage, got ${describeValue(storage)}`);
  checkContractVersion(storage, "applyRewind's storage", PKG);
  const maxAttempts = options.maxAttempts ?? 5;
  if (!Number.isSafeInteger(maxAttempts) || maxAttempts < 1) throw new InvalidConfigError(`[${PKG}] maxAttempts must be a positive integer, got ${describeValue(maxAttempts)}`);
  const clock = options.clock ?? systemClock;
  const random = options.random ?? systemRandom;
  const startedAt = clock.now();
  const latest = plan.target === 'latest';
  const unsafe = unsafeOf(options);
  const appliedIgnored = unsafe.rewindRequestedAgain === true;
  const moves = new Map<string, RewindMove>();
  let failed: string[] = [];
  for (let attempt = 0; attempt < maxAttempts; attempt++) {
    // Out of step with owners that checkpoint at a steady pace, as their batches come.
    if (attempt > 0) await clock.sleep((50 + random.next() * 200) * attempt);
    const view = await readView(storage, plan.group);
    const decided = decide(view, plan.selected, plan.to, latest, unsafe.rewindBehindUnreadable === true);
    // The first sight of each lease is the one reported: a later read shows it moved already.
    for (const move of decided.moves) if (!moves.has(move.leaseKey)) moves.set(move.leaseKey, move);
    failed = await writeMoves(storage, plan.group, view, decided.moves, plan.rewindId, plan.requestedAt, appliedIgnored);
    if (failed.length === 0) break;
  }
  if (failed.length > 0) {
    throw new LeaseholdError(
      'ERR_REWIND_CONFLICT',
      `[${PKG}] rewind ${plan.rewindId} of group ${describeValue(plan.group)} could not be written to ${failed.map((key) => describeValue(key)).join(', ')} after ${maxAttempts} attempts: they kept changing. What was written is safe as it is; run the rewind again`,
    );
  }
  const marker = await markGroup(storage, plan.group, plan.rewindId, maxAttempts);
  const view = await readView(storage, plan.group);
  await settleAndMark(storage, plan, view, unsafe.unstartedLeftAlone === true);
  const ordered = ancestorsFirst(viewOf([...view.leases.values()], [], [], []), moves.keys()).map((key) => moves.get(key) as RewindMove);
  return { ...plan, moves: ordered, startedAt, marker };
}

/**
 * Names the rewind on the leader record, keeping its holder and term (the leader adopts a write that
 * keeps them, and every worker reads the record each renew interval): workers without a change feed look
 * at their leases when it changes.
 */
async function markGroup(storage: Partial<LeaderStore>, group: string, rewindId: string, attempts: number): Promise<AppliedRewind['marker']> {
  return mark(storage, group, rewindId, rewindId, attempts);
}
