/**
 * What a rewind leaves on a lease, and how a reader finds it: the metadata fields, the request a
 * lease carries until its owner (or the tool, or the leader) applies it, and whether a lease carries a
 * given rewind. The coordinator, the consumer and the leader's duties read these on every lease, so they
 * live apart from planning and writing rewinds.
 */
import { stateWithoutResume } from '../lease/resume-hint.js';
import { Checkpoint, leaseStateOf, type CheckpointStorage, type LeaseRecord, type Position } from '../storage.js';

/** The lease metadata fields of a rewind. */
export const REWIND_FIELDS = {
  /** A request for the lease's owner: JSON `{"id","to","requestedAt"}` (see {@link RewindRequest}). */
  request: 'leasehold.rewind',
  /** The id of the last rewind applied to the lease. */
  rewound: 'leasehold.rewound',
} as const;

/**
 * The leader record metadata field that names the group's last rewind, and changes again each time the
 * rewind moves a finished lease back (`<id>` then `<id>/<n>`): workers whose storage has no change feed
 * see it change (every worker reads the leader record each renew interval), look at the leases they hold
 * for a request, and list the group's leases.
 */
export const REWIND_MARKER_FIELD = 'leasehold.rewind';

/** A rewind request as stored on a lease. */
export interface RewindRequest {
  /** Names one rewind; every lease it moves carries it (in `leasehold.rewound`) once moved. */
  readonly id: string;
  /** The checkpoint the lease moves to. */
  readonly to: Position;
  /** When the operator asked, as an ISO time of the tool's wall clock. */
  readonly requestedAt: string;
}

/** The rewind request a lease carries, or `undefined` when it carries none or one that cannot be read. */
export function rewindRequestOf(lease: Pick<LeaseRecord, 'metadata'>): RewindRequest | undefined {
  const value = lease.metadata[REWIND_FIELDS.request];
  if (value === undefined) return undefined;
  try {
    const parsed = JSON.parse(value) as Partial<RewindRequest>;
    if (typeof parsed.id !== 'string' || typeof parsed.to !== 'string' || typeof parsed.requestedAt !== 'string') return undefined;
    if (parsed.id.length === 0 || parsed.to.length === 0 || parsed.to === Checkpoint.SHARD_END) return undefined;
    return { id: parsed.id, to: parsed.to, requestedAt: parsed.requestedAt };
  } catch {
    return undefined;
  }
}

/**
 * Whether a lease carries a rewind request, readable or not. A parent that carries one is about to be read
 * again, so its children wait (see `parentsFinished`).
 */
export function hasRewindRequest(lease: Pick<LeaseRecord, 'metadata'>): boolean {
  return lease.metadata[REWIND_FIELDS.request] !== undefined;
}

/**
 * The state of a lease once `request` is applied: the checkpoint at its target, the request removed, its
 * id recorded. Owner, epoch, incarnation and every other field are kept. A rewind moves a lease once: a
 * request of the rewind the lease records already (a tool without the rule of {@link carries} wrote
 * one) is removed, the checkpoint kept (see {@link rewoundCheckpoint}).
 */
export function rewoundState(lease: LeaseRecord, request: Pick<RewindRequest, 'id' | 'to'>): ReturnType<typeof leaseStateOf> {
  const state = stateWithoutResume(lease);
  const metadata: Record<string, string> = { ...state.metadata, [REWIND_FIELDS.rewound]: request.id };
  delete metadata[REWIND_FIELDS.request];
  return { ...state, checkpoint: rewoundCheckpoint(lease, request), metadata };
}

/**
 * Where applying `request` leaves the checkpoint of `lease`: at the request's target, unless the lease
 * records that rewind as applied already. A rewind moves each lease once; moving it again would take back
 * progress its owner made after the replay, which no operator asked for.
 */
export function rewoundCheckpoint(lease: Pick<LeaseRecord, 'metadata' | 'checkpoint'>, request: Pick<RewindRequest, 'id' | 'to'>): Position | null {
  return lease.metadata[REWIND_FIELDS.rewound] === request.id ? lease.checkpoint : request.to;
}

/**
 * Whether a parent of `lease` must be read (again) before it: the parent's lease is not finished, or
 * carries a rewind request. A parent without a lease finished long ago; one whose lease cannot be read is
 * not known to be finished. Used by an owner that applied a request before it reads on.
 */
export async function parentPending(storage: CheckpointStorage, group: string, lease: Pick<LeaseRecord, 'parentKeys'>): Promise<boolean> {
  for (const parentKey of lease.parentKeys) {
    let parent: LeaseRecord | null;
    try {
      parent = await storage.getLease(group, parentKey);
    } catch {
      return true;
    }
    if (parent !== null && (parent.checkpoint !== Checkpoint.SHARD_END || hasRewindRequest(parent))) return true;
  }
  return false;
}

/**
 * Whether a lease already carries this rewind: its request, or its id as the last rewind applied, whatever
 * request it carries now. A request on a lease that records the rewind is a later rewind's (applying one
 * removes it): writing this rewind's request again over it would lose that later request and move the
 * lease back a second time, over progress made since (seed 104788 of the rewinding consumer simulation).
 * `appliedIgnored` is the simulation's unsafe switch that brings that back: an applied rewind counts only
 * with no request left.
 */
export function carries(lease: LeaseRecord, rewindId: string, appliedIgnored = false): boolean {
  const request = rewindRequestOf(lease);
  if (request?.id === rewindId) return true;
  if (appliedIgnored && hasRewindRequest(lease)) return false;
  return lease.metadata[REWIND_FIELDS.rewound] === rewindId;
}
