/**
 * Rewinding a live group (DESIGN section 4, "Rewinding"): an operator moves the checkpoints of some or all
 * of a group's leases back to a time, to the stream's start, to a position of one shard, or forward to
 * now, while the group's workers run. Nothing here writes a checkpoint that a worker may be moving at the
 * same time:
 *
 * - an unfinished lease nobody holds is moved directly, by one conditional write;
 * - a lease a live worker holds gets a request in its metadata (`leasehold.rewind`), which its owner
 *   applies between two batches, in its own tenure (the Consumer does it);
 * - a finished lease (`SHARD_END`) gets a request too, whoever holds it, and every lease that descends
 *   from it is reset (to the rewind's time, or to its start): its children must not be read before it
 *   again. It is moved once nobody reads any of them, by the tool or by the leader's shard sync.
 *
 * `planRewind` reads and decides, `applyRewind` writes, and `awaitRewind` follows the leases until each
 * moved, doing meanwhile what no owner can (see {@link settleRewinds}).
 *
 * This file is the entry that importers use; the parts live in `rewind/`, one a step: `request.ts` (what
 * a lease carries, read by the coordinator, the consumer and the leader), `types.ts`, `view.ts` (the
 * group as read), `plan.ts`, `writes.ts`, `apply.ts`, `settle.ts` and `await.ts`.
 */
export { REWIND_FIELDS, REWIND_MARKER_FIELD, hasRewindRequest, parentPending, rewindRequestOf, rewoundCheckpoint, rewoundState, type RewindRequest } from './rewind/request.js';
export type {
  AppliedRewind,
  ApplyRewindOptions,
  AwaitRewindOptions,
  PlanRewindOptions,
  RewindHow,
  RewindLeaseProgress,
  RewindMove,
  RewindNote,
  RewindPlan,
  RewindProgress,
  RewindSelection,
  RewindTarget,
} from './rewind/types.js';
export { parseRewindTarget, planRewind } from './rewind/plan.js';
export { applyRewind } from './rewind/apply.js';
export { settleRewinds, type SettleRewindsOptions } from './rewind/settle.js';
export { awaitRewind } from './rewind/await.js';
