/**
 * What the parts of a consumer simulation run share: the timings every run uses, the record of each
 * simulated process and stream, the storage view that lets the schedule strike in the middle of a shard
 * sync, and the run's state as the processes and the fault schedule see it. The run loop builds it once;
 * the processes and the faults read and change it, so that each of them can live in a file of its own.
 */
import type { Random } from '../clock.js';
import type { Consumer } from '../consumer/consumer.js';
import type { InitialPosition } from '../consumer/options.js';
import type { MemorySource } from '../memory/memory-source.js';
import type { MemoryStorage } from '../memory/memory-storage.js';
import type { CreateLeaseOptions, DeleteResult, LeaseRecord, NewLease, WriteResult } from '../storage.js';
import type { ConsumerLedger, Violate } from './consumer-checks.js';
import type { SimulatedRewinds } from './consumer-rewinds.js';
import type { ConsumerFaultKind, ConsumerShape, ConsumerSimulationConfig, MultiStreamShape, PoisonShape } from './consumer-shape.js';
import { FaultyStorage, type FaultPlan } from './faulty-storage.js';
import type { VirtualClock, VirtualScheduler } from './virtual-time.js';


export const GROUP = 'simulated-consumers';
export const LEASE_DURATION_MS = 10_000;
export const TAKE_INTERVAL_MS = 2_000;
/** The coordinator's default heartbeat interval: the runs use every default timing. */
export const RENEW_INTERVAL_MS = LEASE_DURATION_MS * 0.65;
export const MAX_CLOCK_DRIFT = 0.01;

/** One simulated process: its clock, its view of storage, its `Consumer`, and what the handler and the checks remember of it. */
export interface SimWorker {
  readonly index: number;
  readonly workerId: string;
  readonly clock: VirtualClock;
  readonly plan: FaultPlan;
  readonly storage: SyncTappedStorage;
  readonly consumer: Consumer;
  /** Draws of the simulated handler, apart from the runtime's own. */
  readonly handlerRandom: Random;
  alive: boolean;
  stopping: boolean;
  /** Batches whose handler overruns next, with how long. */
  overrunNextMs: number | null;
  /** Handler failures still to throw, per batch (shard and first position). */
  readonly failures: Map<string, number>;
  /** Draws of the simulated dead-letter handler. */
  readonly deadLetterRandom: Random;
  readonly startedAtMs: number;
  /** Multi-stream: this process's `streams` function fails until then (it keeps its last list). */
  listFailsUntil: number;
  /** Multi-stream: whether its `streams` function answered once (a worker whose first answer fails does not start). */
  listedOnce: boolean;
  /** Multi-stream: per stream, since when its function's answers have not named it. */
  readonly unlistedSince: Map<string, number>;
  /**
   * Multi-stream: per stream it stopped listing, the greatest position of each tenure (`<leaseKey>#<epoch>`)
   * handed over before: what the batch in flight may still hand over while it drains.
   */
  readonly frozen: Map<string, Map<string, number>>;
  /** Multi-stream: the greatest position handed over per tenure (`<leaseKey>#<epoch>`). */
  readonly handedMax: Map<string, number>;
  /**
   * Multi-stream: once it began stopping (its list is not refreshed any more), when it began and the
   * greatest position of each tenure handed over before: what its drains may still hand over.
   */
  stoppedListing: { readonly at: number; readonly handedMax: ReadonlyMap<string, number> } | null;
  /**
   * Multi-stream: per lease key, the first and last positions of the last few batches its source gave
   * this worker: a batch in flight may be handed over in parts (halves of a failing batch), and its drain
   * finishes all of it.
   */
  readonly batchesRead: Map<string, Array<readonly [number, number]>>;
  /** Its handler fails every call, as when its downstream is down. */
  downstreamDown: boolean;
  /** A call of its handler is overrunning its lease now. */
  overrunning: boolean;
}

/** One stream of the run: its source, its lease keys and what the group's list says of it. */
export interface SimStream {
  /** `''` when the group reads one stream (then lease keys are shard ids). */
  readonly streamId: string;
  readonly source: MemorySource;
  /** Its own initial position, if its spec gives one. */
  readonly initialPosition: InitialPosition | undefined;
  /** The lease keys the last reshard of this stream made: the next one works on them, so that lineages grow deep. */
  newest: string[];
  /** When its listing fails until (virtual time), or -Infinity. */
  listingFailsUntil: number;
  /** When it left the group's list for good, or `null`. */
  removedAtMs: number | null;
}

/**
 * A process's storage that lets the schedule strike in the middle of the leader's shard sync: the hook
 * runs as a lease is created or deleted (the writes of a sync, and of a pump creating children).
 */
export class SyncTappedStorage extends FaultyStorage {
  onLeaseWrite: ((when: 'before' | 'after') => void) | null = null;
  /** Hears the outcome of each create and delete, for the trace. */
  onOutcome: ((line: string) => void) | null = null;

  override async createLease(lease: NewLease, options?: CreateLeaseOptions): Promise<WriteResult<LeaseRecord>> {
    this.onLeaseWrite?.('before');
    const outcome = await super.createLease(lease, options);
    this.onLeaseWrite?.('after');
    this.onOutcome?.(
      `create ${lease.leaseKey} (checkpoint ${String(lease.checkpoint ?? null)}, parents [${(lease.parentKeys ?? []).join(', ')}]${options?.recreate ? ', recreate' : ''}): ${describeOutcome(outcome)}`,
    );
    return outcome;
  }

  override async deleteLease(group: string, leaseKey: string, expectedVersion: number): Promise<DeleteResult> {
    this.onLeaseWrite?.('before');
    const outcome = await super.deleteLease(group, leaseKey, expectedVersion);
    this.onLeaseWrite?.('after');
    this.onOutcome?.(`delete ${leaseKey} at version ${expectedVersion}: ${describeOutcome(outcome)}`);
    return outcome;
  }
}

function describeOutcome(outcome: WriteResult<LeaseRecord> | DeleteResult): string {
  if (outcome.status === 'conflict') return `conflict with ${outcome.current === null ? 'none (deleted before)' : `version ${outcome.current.version}`}`;
  if (outcome.status === 'unknown') return `unknown (${outcome.error.message})`;
  return 'applied';
}

/** A stream's timeline in a multi-stream run: when the group's list names it, its resharding, its own start, its listing fault. */
export interface StreamPlan {
  readonly addAtMs: number | null;
  readonly removeAtMs: number | null;
  readonly reAddAtMs: number | null;
  readonly reshardTimes: readonly number[];
  readonly reshardDraws: ReadonlyArray<{ op: number; pick: number }>;
  readonly atTimestampMs: number;
  readonly listingFault: { fromMs: number; durationMs: number } | null;
}

/**
 * The state of one run as its parts share it: what the seed and the config decided, the virtual time and
 * the trace, the ledger the checks keep, the store and the streams, and what the fault schedule marks.
 */
export interface SimRun {
  readonly config: ConsumerSimulationConfig;
  readonly shape: ConsumerShape;
  readonly multi: MultiStreamShape | null;
  readonly enabled: (kind: ConsumerFaultKind) => boolean;
  readonly faultPhaseMs: number;
  /** When the first processes start. */
  readonly startAtMs: number;
  /** The run's random: the world's timeline, records, faults and processes are drawn from it in turn. */
  readonly random: Random;
  /** Draws only a multi-stream run makes, apart from the run's random. */
  readonly streamRandom: Random;
  readonly scheduler: VirtualScheduler;
  readonly trace: ((line: string) => void) | undefined;
  readonly log: (line: string) => void;
  readonly violate: Violate;
  readonly stats: { batches: number; faults: number };
  readonly ledger: ConsumerLedger;
  readonly memory: MemoryStorage;
  readonly streams: readonly SimStream[];
  /** The lease key of a shard of a stream. */
  readonly keyOf: (stream: SimStream, shardId: string) => string;
  /** The stream of a lease key, and the shard id its source knows. */
  readonly locate: (leaseKey: string) => { stream: SimStream; shardId: string };
  readonly initialPosition: InitialPosition;
  readonly poisonPolicy: PoisonShape | null;
  /** Exactly-once: the effects a lease write carries, by `<leaseKey>#<version>`, applied when it lands. */
  readonly pendingEffects: Map<string, { owner: string | null; epoch: number; checkpoint: string | null; indices: readonly number[] }>;
  /** Records the 'skip' policy gave up on: their effects are dropped by the user's choice. */
  readonly skipped: Set<string>;
  readonly rewinds: SimulatedRewinds | null;
  /** How often each process asks for the stream list (its own clock). */
  readonly refreshMs: number;
  readonly graceMs: number;
  /** Shards whose lease was corrupted, with when it was repaired (Infinity while it is corrupt). */
  readonly corrupted: Map<string, number>;
  /** Work the schedule queued for after the current step (starting and stopping processes). */
  readonly pending: Array<() => void>;
}
