import type { HeldLease, LeaseCoordinator } from '../lease/coordinator.js';
import { parentPending, REWIND_FIELDS, rewindRequestOf, rewoundCheckpoint, type RewindRequest } from '../rewind.js';
import { Checkpoint, type CheckpointStorage, type Position } from '../storage.js';

/** What the owner of a lease did with the rewind request it carries. */
export type OwnRewind =
  /** Nothing to apply: no readable request, a finished lease (the tool or the leader moves it), or another tenure. */
  | { readonly kind: 'none' }
  /** The lease carries a request that cannot be read (not written by Leasehold): it is not applied. */
  | { readonly kind: 'unreadable'; readonly value: string }
  /**
   * The checkpoint is at the request's target now. With `parentFirst`, a parent of the lease must be read
   * (again) first: its lease is not finished, or carries a request itself; the lease is to be given back.
   */
  | { readonly kind: 'rewound'; readonly request: RewindRequest; readonly from: Position | null; readonly parentFirst: boolean };

/** Options of {@link applyOwnRewind}. */
export interface OwnRewindOptions {
  readonly coordinator: LeaseCoordinator;
  readonly storage: CheckpointStorage;
  readonly group: string;
  readonly lease: HeldLease;
  /** Stops the shard's reader once its batch in flight is done and checkpointed; resolves once it stopped. */
  readonly stopReading: () => Promise<void>;
  /** Told of the request right before the write that applies it, so that a write whose outcome is unknown can be settled. */
  readonly applying?: ((request: RewindRequest) => void) | undefined;
  /**
   * The request an earlier attempt wrote with an unknown outcome (the write may have applied, and it could
   * not be read back): when the lease records it applied, its record is held as stored and the rewind
   * reported as applied. Without this, the reader would read on from the checkpoint of before.
   */
  readonly unknown?: RewindRequest | undefined;
}

/**
 * The owner's part of a rewind (DESIGN section 4, "Rewinding"): reads the lease, and if it carries a
 * request, stops reading after the batch in flight, then moves the checkpoint to the target in one write
 * of its own tenure that also removes the request and records the rewind's id. Whether to read on is the
 * caller's, by `parentFirst`: children are never read before their parents. Throws what the coordinator
 * throws (`LeaseLostError` once the lease is gone).
 */
export async function applyOwnRewind(options: OwnRewindOptions): Promise<OwnRewind> {
  const { coordinator, storage, group, lease } = options;
  const stored = await storage.getLease(group, lease.leaseKey);
  const request = stored === null ? undefined : rewindRequestOf(stored);
  if (stored === null || stored.checkpoint === Checkpoint.SHARD_END || stored.epoch !== lease.fencingToken) return { kind: 'none' };
  const unknown = options.unknown;
  if (unknown !== undefined && request === undefined) {
    // The earlier write's outcome is settled by the record: held as stored (a move that writes nothing, and
    // throws once the lease is lost), so that the reader starts where the lease says; and reported as
    // applied when it records that request.
    await coordinator.moveCheckpoint(lease, () => null);
    if (stored.metadata[REWIND_FIELDS.rewound] !== unknown.id) return { kind: 'none' };
    return { kind: 'rewound', request: unknown, from: null, parentFirst: await parentPending(storage, group, stored) };
  }
  if (request === undefined) {
    const value = stored.metadata[REWIND_FIELDS.request];
    return value === undefined ? { kind: 'none' } : { kind: 'unreadable', value };
  }
  await options.stopReading();
  let applied: RewindRequest | undefined;
  let from: Position | null = null;
  const written = await coordinator.moveCheckpoint(lease, (record) => {
    // The request stored now, which may be a later rewind's than the one read above.
    const current = rewindRequestOf(record);
    if (current === undefined || record.checkpoint === Checkpoint.SHARD_END) return null;
    // A request of the rewind this lease records already is removed, the checkpoint kept: a rewind moves a
    // lease once, and moving it again would take back what was read since its replay.
    applied = record.metadata[REWIND_FIELDS.rewound] === current.id ? undefined : current;
    from = record.checkpoint;
    options.applying?.(current);
    // (A lease that records a rewind has a checkpoint: that rewind set it.)
    return { checkpoint: rewoundCheckpoint(record, current) ?? current.to, metadata: { [REWIND_FIELDS.request]: null, [REWIND_FIELDS.rewound]: current.id } };
  });
  if (written === null || applied === undefined) return { kind: 'none' };
  return { kind: 'rewound', request: applied, from, parentFirst: await parentPending(storage, group, written) };
}
