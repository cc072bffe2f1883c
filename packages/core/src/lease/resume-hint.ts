/**
 * The resume hint a stopping owner hands over with a lease (DESIGN section 4, "Releasing"): the source's
 * token for reading on right after the batch its reader last handed to the handler (for Kinesis, that
 * call's `NextShardIterator`), the batch's end, and how old the token was when the handover was written.
 * It travels in the lease's metadata under {@link RESUME_FIELD}, in the handover's own conditional write,
 * bound to the tenure that write starts; every other write of core drops it. The recipient uses it only
 * for the tenure and the checkpoint it holds the lease in, and while it is young enough by the sender's
 * age plus its own clock since it read the lease: wall clocks of two workers are never compared.
 */
import { leaseStateOf, type LeaseRecord, type LeaseState, type Position } from '../storage.js';
import { limits } from '../validation.js';

/** The lease metadata field that carries a resume hint from a handover's write to the recipient. */
export const RESUME_FIELD = 'leasehold.resume';

/** A hint longer than this is not handed over (a Kinesis shard iterator is at most 512 characters). */
export const MAX_RESUME_HINT_BYTES = 2_048;

/** What a reader offers for the handover of its lease: the batch end the token reads on from, and when the batch arrived. */
export interface ResumeOffer {
  /** The end of the batch the token follows: the token reads on right after it. */
  readonly position: Position;
  /** The source's token ({@link RecordsBatch.resumeHint}). */
  readonly hint: string;
  /** When the batch was received, by this worker's monotonic clock. */
  readonly receivedAt: number;
}

/** Why a lease's hint was not used: then the read starts from the checkpoint, as without one. */
export type ResumeRefusal = 'missing' | 'malformed' | 'epoch' | 'checkpoint' | 'age';

/** The judgement on a lease's hint: the token and its age, or why it is not used. */
export type ResumeVerdict = { readonly hint: string; readonly ageMs: number } | { readonly refused: ResumeRefusal };

/** The state without a resume hint: every write of core but a handover drops it, so that no later write carries one on. */
export function withoutResume<S extends LeaseState>(state: S): S {
  if (!Object.hasOwn(state.metadata, RESUME_FIELD)) return state;
  const metadata = { ...state.metadata };
  delete metadata[RESUME_FIELD];
  return { ...state, metadata };
}

/** The state of `lease` as every write of core but a handover's sends it: without a resume hint. */
export function stateWithoutResume(lease: LeaseRecord): LeaseState {
  return withoutResume(leaseStateOf(lease));
}

/**
 * A handover's next state with the offer's hint added, bound to the tenure the handover starts
 * (`next.epoch`): its age is `now - receivedAt` by the sender's clock. The state as it was (without a
 * hint) when there is no offer, or when the hint or the metadata with it would be too large.
 */
export function withResume(next: LeaseState, offer: ResumeOffer | null | undefined, now: number): LeaseState {
  if (!offer || Buffer.byteLength(offer.hint, 'utf8') > MAX_RESUME_HINT_BYTES) return next;
  const value = JSON.stringify({ epoch: next.epoch, checkpoint: offer.position, hint: offer.hint, ageMs: Math.max(0, Math.ceil(now - offer.receivedAt)) });
  const metadata = { ...next.metadata, [RESUME_FIELD]: value };
  if (Buffer.byteLength(JSON.stringify(metadata), 'utf8') > limits.maxMetadataBytes) return next;
  return { ...next, metadata };
}

/**
 * Judges the hint a held lease carries, for a reader about to start from the lease's checkpoint: usable
 * only when it was written for this tenure (`fencingToken`), for exactly this checkpoint, and when its age
 * at the handover plus `sinceReadMs` (this worker's clock since it read the lease) is under `maxAgeMs`.
 * The time between the handover's write and this worker's read is not counted (no two workers' clocks
 * are compared): a hint that expired in that gap is refused by the source, which then starts from the
 * checkpoint. `anyCheckpoint` (unsafe, for the simulation only) skips the checkpoint's comparison.
 */
export function judgeResume(
  lease: { readonly fencingToken: number; readonly checkpoint: Position | null; readonly metadata: Readonly<Record<string, string>> },
  sinceReadMs: number,
  maxAgeMs: number,
  anyCheckpoint = false,
): ResumeVerdict {
  const raw = Object.hasOwn(lease.metadata, RESUME_FIELD) ? lease.metadata[RESUME_FIELD] : undefined;
  if (raw === undefined) return { refused: 'missing' };
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    return { refused: 'malformed' };
  }
  if (typeof parsed !== 'object' || parsed === null) return { refused: 'malformed' };
  const { epoch, checkpoint, hint, ageMs } = parsed as Record<string, unknown>;
  if (!Number.isSafeInteger(epoch) || typeof checkpoint !== 'string' || typeof hint !== 'string' || hint === '') return { refused: 'malformed' };
  if (typeof ageMs !== 'number' || !Number.isFinite(ageMs) || ageMs < 0) return { refused: 'malformed' };
  if (epoch !== lease.fencingToken) return { refused: 'epoch' };
  if (checkpoint !== lease.checkpoint && !anyCheckpoint) return { refused: 'checkpoint' };
  const age = ageMs + Math.max(0, sinceReadMs);
  if (!(age < maxAgeMs)) return { refused: 'age' };
  return { hint, ageMs: age };
}
