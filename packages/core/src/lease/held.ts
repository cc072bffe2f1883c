/**
 * The types every part of the coordinator shares about a lease this worker holds (DESIGN section 4): the
 * handle user code sees, the tenure a write belongs to, and the coordinator's own record of the lease. They
 * live apart from coordinator.ts so that the parts it owns (the hold, the fenced writes, taking and
 * handovers) can name them without importing the coordinator; coordinator.ts exports the public ones.
 */
import type { LeaseRecord, Position } from '../storage.js';
import type { ResumeOffer } from './resume-hint.js';

/** Why the coordinator is about to give a lease away; passed to `LeaseCoordinatorOptions.onDrain`. */
export type DrainReason = 'handoff' | 'shutdown';

/** A lease this worker holds, as user code sees it. */
export interface HeldLease {
  readonly leaseKey: string;
  /** The ownership epoch: a fencing token for user code's own downstream writes. */
  readonly fencingToken: number;
  /** Fires the moment the lease is lost, handed off or released: stop working on it. */
  readonly signal: AbortSignal;
  /** The checkpoint stored with the lease, or `null` before the first one. */
  readonly checkpoint: Position | null;
  /** The lease keys of the partitions this one continues. */
  readonly parentKeys: readonly string[];
  /** The lease's metadata. */
  readonly metadata: Readonly<Record<string, string>>;
  /** Whether another worker asked for the lease: finish the work in flight and expect a handoff. */
  readonly draining: boolean;
}

/** The lease a checkpoint belongs to: its key and the tenure (fencing token) it was read in. */
export type LeaseTenure = Pick<HeldLease, 'leaseKey' | 'fencingToken'>;

/** A handover under way: to whom, which of its incarnations, and when this worker decided on it. */
export interface HandoffTarget {
  readonly to: string;
  readonly incarnation: string;
  readonly seenAt: number;
}

/** The coordinator's record of a lease it holds. */
export interface Held {
  record: LeaseRecord;
  readonly controller: AbortController;
  handoff: HandoffTarget | null;
  leaving: boolean;
  /** The writes on this lease run one after another (each needs the version the previous one made). */
  chain: Promise<void>;
  /** How many writes on this lease are queued or in flight. */
  busy: number;
  /** When this worker found the lease as `record` holds it at first (sent the listing or read, or had its answer), by its clock. */
  readonly readAt: number;
  /** The reader's offer of a resume hint, written with the lease when it is handed over. */
  resume: ResumeOffer | null;
}
