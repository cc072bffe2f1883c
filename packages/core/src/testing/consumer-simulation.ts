/**
 * The consumer simulation: real `Consumer` instances (one per simulated process, each with its own
 * drifting clock, seeded randomness and faulty view of one shared `MemoryStorage`), one `MemorySource`
 * that splits, merges, lags, fails reads and trims shards, virtual time, and a seeded schedule of faults.
 * A third of the seeds run a multi-stream group instead: two or three streams, each its own
 * `MemorySource` with its own resharding and records, read through a `streams` function whose list
 * changes as the run goes (a stream added, one removed and added back, one removed for good) and whose
 * listings fail for a while. The guarantees of DESIGN section 6 that the runtime adds to the lease
 * algorithm (at-least-once, order across resharding, fencing of handlers, progress, balance, a bounded
 * stop), per stream where they are per stream, are checked as the run goes and at its end; a violation
 * names the seed, the moment and the command that replays it exactly.
 */
import { seededRandom, type Random } from '../clock.js';
import { Consumer } from '../consumer/consumer.js';
import type { BatchContext, BatchResponse, CheckpointPolicy, FailedRecords, InitialPosition, StreamSpec } from '../consumer/options.js';
import { withUnsafe, type ConsumerUnsafe } from '../unsafe.js';
import { MemorySource } from '../memory/memory-source.js';
import { MemoryStorage, type MemoryWriteEvent } from '../memory/memory-storage.js';
import type { SourceRecord } from '../source.js';
import { streamLeaseKey } from '../stream-keys.js';
import { hasRewindRequest } from '../rewind.js';
import { Checkpoint, type CreateLeaseOptions, type DeleteResult, type LeaseRecord, type NewLease, type WriteResult } from '../storage.js';
import { ConsumerLedger, describeLease, type ConsumerGuarantee, type RecordEntry, type StartingPoint } from './consumer-checks.js';
import { rewindsDrawn, rewindShapeOf, scheduleRewinds, withoutChangeFeed, type RewindShape } from './consumer-rewinds.js';
import { FaultyStorage, type FaultPlan } from './faulty-storage.js';
import { ProcessSource } from './process-source.js';
import { VIRTUAL_EPOCH_MS, VirtualClock, VirtualScheduler } from './virtual-time.js';

/** What one consumer simulation run does. Everything not given is drawn from the seed. */
export interface ConsumerSimulationConfig {
  seed: number;
  /** Workers at the start (1 to 16). */
  workers?: number;
  /** Shards of the stream at the start (1 to 16). */
  shards?: number;
  /** Where the group starts; `AT_TIMESTAMP` draws the timestamp from the seed. */
  initialPosition?: InitialPositionKind;
  /**
   * Whether the group reads several streams (`streams`) instead of one (`source`). Default: drawn from
   * the seed, a third of the seeds; `true` draws a multi-stream shape for every seed, `false` none.
   */
  multiStream?: boolean;
  /** Virtual milliseconds of records, resharding and faults before the quiet phase. Default 40,000. */
  faultPhaseMs?: number;
  /** Which faults may happen. Default: all. */
  faults?: Partial<Record<ConsumerFaultKind, boolean>>;
  /** Deliberately unsafe runtime behaviours, passed to every `Consumer`, to prove the checks catch them. */
  unsafe?: ConsumerUnsafe;
  /**
   * Handlers write their effects and the checkpoint together (`ctx.checkpointWith`) into a sink kept
   * atomically with the lease, as a transaction on the lease's database does; the run checks that the
   * effect of every record is applied exactly once.
   */
  exactlyOnce?: boolean;
  /**
   * Whether an operator's tool rewinds the live group (see `consumer-rewinds.ts`). Default: drawn from the
   * seed, a quarter of the seeds but for exactly-once runs; `true` draws rewinds for every seed, `false` none.
   */
  rewind?: boolean;
  /** Records a line per notable event, for replaying a failure by eye. */
  trace?: (line: string) => void;
}

/** The initial positions the simulation runs with. */
export type InitialPositionKind = 'TRIM_HORIZON' | 'LATEST' | 'AT_TIMESTAMP';

/** The kinds of fault the schedule draws from. */
export type ConsumerFaultKind =
  | 'crash' // a process dies (its clock stops for good); a new one joins later
  | 'pause' // a process freezes, often past its leases
  | 'gracefulStop' // stop({ timeoutMs }) while work is in flight
  | 'join' // a new process joins
  | 'storage' // latency, errors before sending, ambiguous writes, and being cut off
  | 'drift' // clock rates off by up to maxClockDrift
  | 'leaderChange' // the leader dies, pauses or has its writes fail in the middle of a shard sync
  | 'listLag' // shard listings that show the stream as it was seconds ago
  | 'readFault' // a read fails once, or a shard's reads fail for a while
  | 'handlerFailure' // a handler throws, or reports a failed record, a couple of times per batch
  | 'overrun' // a handler runs past its lease ignoring its signal, often with a pause or a stop around it
  | 'corrupt' // a lease record becomes unreadable until the schedule repairs it
  | 'trim' // a closed shard leaves the stream
  | 'streams' // in a multi-stream group: the list changes, a stream's listing fails, a process cannot read the list
  | 'downstream'; // a process's handler fails every call (its downstream is down), and the process is stopped meanwhile

/** A broken guarantee, with the moment and the detail. */
export interface ConsumerViolation {
  guarantee: ConsumerGuarantee;
  atMs: number;
  detail: string;
}

/** The shape of a run, drawn from its seed (and overridden by the config). */
export interface ConsumerShape {
  workers: number;
  shards: number;
  initialPosition: InitialPositionKind;
  checkpointing: CheckpointPolicy;
  onHandlerError: 'retry' | 'skip' | PoisonShape;
  records: number;
  partitionKeys: number;
  reshards: number;
  listLagMs: number;
  shardSyncIntervalMs: number;
  /** A multi-stream group's streams and timing, or `null` when the group reads one stream. */
  multiStream: MultiStreamShape | null;
  /** The rewinds an operator's tool runs on the live group, or `null` when it runs none. */
  rewind: RewindShape | null;
}

/** A multi-stream run: its streams, and the timing of the list and of removed streams. */
export interface MultiStreamShape {
  streams: StreamShape[];
  /** `streamRefreshIntervalMs`, or `undefined` for its default (the shard sync interval). */
  streamRefreshIntervalMs: number | undefined;
  /** `removedStreamGraceMs`: short, so that removed streams' leases are deleted within the run. */
  removedStreamGraceMs: number;
}

/** One stream of a multi-stream run. */
export interface StreamShape {
  streamId: string;
  shards: number;
  reshards: number;
  listLagMs: number;
  /** Its own `initialPosition`, or `null` for the group's. */
  initialPosition: InitialPositionKind | null;
  /**
   * When the group's list names it: all along; from a moment on (`added`); all along but for a few
   * seconds (`bounced`: removed, then added back well within the grace); until a moment (`removed`, for good).
   */
  life: 'always' | 'added' | 'bounced' | 'removed';
  /** Whether its listing fails for a while (at most one stream per run). */
  listingFault: boolean;
}

/**
 * A run whose failure policy is a `PoisonPolicy`: some records always fail (poison), the handler
 * sometimes reports its first failed record instead of throwing, and the dead-letter handler itself
 * fails now and then while faults are on.
 */
export interface PoisonShape {
  bisect: boolean;
  maxAttempts: number;
  maxRecordAgeMs: number | undefined;
  /** Whether a dead-letter handler is configured; without one records given up are skipped by policy. */
  deadLetter: boolean;
  /** The share of records that always fail. */
  poisonRate: number;
  /** The share of failures reported as `{ failedAt }` rather than thrown. */
  reportRate: number;
}

/** The outcome of one run. */
export interface ConsumerSimulationResult {
  seed: number;
  shape: ConsumerShape;
  violations: ConsumerViolation[];
  /** The command that replays this run exactly. */
  replay: string;
  stats: {
    records: number;
    /** Records that had to reach the handler, and those that did. */
    owed: number;
    delivered: number;
    /** Hand-overs beyond the first, summed over records. */
    replays: number;
    /** Records that always fail, those dead-lettered, and those skipped (dead-lettered or by policy). */
    poison: number;
    deadLettered: number;
    skipped: number;
    batches: number;
    /** Depth of the deepest shard's lineage: 0 for the stream's first shards. */
    generations: number;
    shards: number;
    /** Streams the group read (1 unless multi-stream). */
    streams: number;
    faults: number;
    /** Virtual time from the end of faults until every owed record was delivered, or -1. */
    drainedAfterMs: number;
  };
}

export type { ConsumerGuarantee } from './consumer-checks.js';

const GROUP = 'simulated-consumers';
const LEASE_DURATION_MS = 10_000;
const TAKE_INTERVAL_MS = 2_000;
/** The coordinator's default heartbeat interval: the runs use every default timing. */
const RENEW_INTERVAL_MS = LEASE_DURATION_MS * 0.65;
const MAX_CLOCK_DRIFT = 0.01;
const ALL_FAULTS: readonly ConsumerFaultKind[] = [
  'crash',
  'pause',
  'gracefulStop',
  'join',
  'storage',
  'drift',
  'leaderChange',
  'listLag',
  'readFault',
  'handlerFailure',
  'overrun',
  'corrupt',
  'trim',
];
const UNSAFE_FLAGS: ReadonlyArray<[keyof ConsumerUnsafe, string]> = [
  ['childrenAtInitialPosition', '--unsafe-children-at-initial-position'],
  ['oneGenerationSync', '--unsafe-one-generation-sync'],
  ['birthRace', '--unsafe-birth-race'],
  ['deleteOnStaleView', '--unsafe-delete-on-stale-view'],
  ['checkpointPerKey', '--unsafe-checkpoint-per-key'],
  ['keepFailedPump', '--unsafe-keep-failed-pump'],
  ['skipSelfFencing', '--unsafe-skip-self-fencing'],
  ['ignoreBatchResponse', '--unsafe-ignore-batch-response'],
  ['skipWithoutDeadLetter', '--unsafe-skip-without-dead-letter'],
  ['retryCheckpointedPrefix', '--unsafe-retry-checkpointed-prefix'],
  ['retryThroughDrain', '--unsafe-retry-through-drain'],
  ['crossStreamSync', '--unsafe-cross-stream-sync'],
  ['checkpointAfterRewind', '--unsafe-checkpoint-after-rewind'],
  ['deleteBeforeParents', '--unsafe-delete-before-parents'],
  ['releaseWithoutRetry', '--unsafe-release-without-retry'],
];

/** The command-line flag of each unsafe switch, for `pnpm sim --consumer`. */
export const consumerUnsafeFlags: ReadonlyArray<readonly [keyof ConsumerUnsafe, string]> = UNSAFE_FLAGS;

/**
 * Draws a run's shape from its seed: 2-5 workers, 1-4 shards, a few hundred records, 3-5 reshards; for a
 * third of the seeds, a multi-stream group (see {@link multiStreamShapeOf}). Only that third changed when
 * multi-stream runs came: the other seeds draw what they always drew.
 */
export function consumerShapeOf(seed: number): ConsumerShape {
  const random = seededRandom(seed ^ 0xc0_45e7);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random.next() * items.length)] as T;
  const policyRoll = random.next();
  const checkpointing: CheckpointPolicy =
    policyRoll < 0.4
      ? 'batch'
      : policyRoll < 0.6
        ? 'manual'
        : policyRoll < 0.8
          ? { everyRecords: 5 + Math.floor(random.next() * 20) }
          : { everyMs: 500 + Math.floor(random.next() * 2_500) };
  return {
    workers: 2 + Math.floor(random.next() * 4),
    shards: 1 + Math.floor(random.next() * 4),
    initialPosition: pick(['TRIM_HORIZON', 'LATEST', 'AT_TIMESTAMP'] as const),
    checkpointing,
    onHandlerError: policyOf(seed, random.next()),
    records: 120 + Math.floor(random.next() * 180),
    partitionKeys: 6 + Math.floor(random.next() * 11),
    reshards: 3 + Math.floor(random.next() * 3),
    listLagMs: random.next() < 0.3 ? 0 : 500 + Math.floor(random.next() * 6_000),
    shardSyncIntervalMs: 1_500 + Math.floor(random.next() * 3_500),
    multiStream: seededRandom(seed ^ 0x3a1_7e57).next() < 1 / 3 ? multiStreamShapeOf(seed) : null,
    rewind: rewindsDrawn(seed) ? rewindShapeOf(seed, seededRandom(seed ^ 0x3a1_7e57).next() < 1 / 3) : null,
  };
}

/** Stream ids as users name them: KCL's `account:name:epoch`, an ARN, plain names, and one name a prefix of another up to a `:`. */
const STREAM_IDS = ['111122223333:orders:1700000000', 'orders', 'orders:eu', 'arn:aws:kinesis:eu-west-1:111122223333:stream/clicks', 'payments'];

/**
 * A multi-stream group drawn from the seed (a random of its own): 2-3 streams of 1-3 shards, each with
 * its own resharding, listing lag and sometimes its own initial position. The first is listed all
 * along; each other one is added mid-run, removed and added back, removed for good, or (but the last)
 * listed all along. A refresh interval of 0.8-3.5 s or the default, and a grace of 9-18 s.
 */
export function multiStreamShapeOf(seed: number): MultiStreamShape {
  const random = seededRandom(seed ^ 0x57_12ea);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random.next() * items.length)] as T;
  const count = random.next() < 0.4 ? 3 : 2;
  const ids = [...STREAM_IDS];
  const streamIds = Array.from({ length: count }, () => ids.splice(Math.floor(random.next() * ids.length), 1)[0] as string);
  const faulty = random.next() < 0.5 ? Math.floor(random.next() * count) : -1;
  const streams = streamIds.map((streamId, i): StreamShape => {
    let life: StreamShape['life'] = i === 0 ? 'always' : pick(['always', 'added', 'bounced', 'removed'] as const);
    if (i === count - 1 && life === 'always') life = pick(['added', 'bounced', 'removed'] as const);
    return {
      streamId,
      shards: 1 + Math.floor(random.next() * (count === 3 ? 2 : 3)),
      reshards: 1 + Math.floor(random.next() * (i === 0 ? 3 : 2)),
      listLagMs: random.next() < 0.3 ? 0 : 500 + Math.floor(random.next() * 6_000),
      initialPosition: random.next() < 0.4 ? pick(['TRIM_HORIZON', 'LATEST', 'AT_TIMESTAMP'] as const) : null,
      life,
      listingFault: i === faulty,
    };
  });
  return {
    streams,
    streamRefreshIntervalMs: random.next() < 0.4 ? undefined : 800 + Math.floor(random.next() * 2_700),
    removedStreamGraceMs: 9_000 + Math.floor(random.next() * 9_000),
  };
}

/**
 * The failure policy of a run from its draw: most runs retry (the default), a fifth skip, and a fifth
 * run a poison policy whose details come from a random of their own, so that the rest of the shape is
 * drawn as it always was.
 */
function policyOf(seed: number, roll: number): ConsumerShape['onHandlerError'] {
  if (roll >= 0.8) return 'skip';
  if (roll < 0.6) return 'retry';
  const random = seededRandom(seed ^ 0x9015_0e);
  return {
    bisect: random.next() < 0.75,
    maxAttempts: 2 + Math.floor(random.next() * 3),
    maxRecordAgeMs: random.next() < 0.3 ? 8_000 + Math.floor(random.next() * 20_000) : undefined,
    deadLetter: random.next() < 0.85,
    poisonRate: 0.01 + random.next() * 0.03,
    reportRate: random.next() * 0.6,
  };
}

/** The rewinds of a run: as drawn, none, or drawn for every seed, as the config says. */
function rewindOf(config: ConsumerSimulationConfig, drawn: ConsumerShape, multiStream: boolean): RewindShape | null {
  if (config.rewind === false || (config.rewind === undefined && config.exactlyOnce)) return null;
  return config.rewind ? (drawn.rewind ?? rewindShapeOf(config.seed, multiStream)) : drawn.rewind;
}

/** The command that replays a run. */
export function consumerReplayCommand(config: ConsumerSimulationConfig): string {
  const flags = [
    '--consumer',
    `--seed ${config.seed}`,
    config.workers !== undefined ? `--workers ${config.workers}` : '',
    config.shards !== undefined ? `--shards ${config.shards}` : '',
    config.initialPosition !== undefined ? `--initial-position ${config.initialPosition}` : '',
    config.multiStream === true ? '--multi-stream' : config.multiStream === false ? '--single-stream' : '',
    config.faultPhaseMs !== undefined ? `--fault-ms ${config.faultPhaseMs}` : '',
    config.exactlyOnce ? '--exactly-once' : '',
    config.rewind === true ? '--rewind' : config.rewind === false ? '--no-rewind' : '',
    ...UNSAFE_FLAGS.map(([name, flag]) => (config.unsafe?.[name] ? flag : '')),
  ].filter(Boolean);
  return `pnpm sim ${flags.join(' ')} --trace`;
}

interface SimWorker {
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
  /** Its handler fails every call, as when its downstream is down. */
  downstreamDown: boolean;
  /** A call of its handler is overrunning its lease now. */
  overrunning: boolean;
}

/** One stream of the run: its source, its lease keys and what the group's list says of it. */
interface SimStream {
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
class SyncTappedStorage extends FaultyStorage {
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

const decoder = new TextDecoder();

/** Runs one seeded consumer simulation and returns what it found. */
export async function simulateConsumers(config: ConsumerSimulationConfig): Promise<ConsumerSimulationResult> {
  const drawn = consumerShapeOf(config.seed);
  const multiStream = config.multiStream === undefined ? drawn.multiStream : config.multiStream ? (drawn.multiStream ?? multiStreamShapeOf(config.seed)) : null;
  const shape: ConsumerShape = {
    ...drawn,
    workers: config.workers ?? drawn.workers,
    shards: config.shards ?? drawn.shards,
    initialPosition: config.initialPosition ?? drawn.initialPosition,
    rewind: rewindOf(config, drawn, multiStream !== null),
    multiStream: multiStream && {
      ...multiStream,
      // --shards gives each stream that many; in the shape, shards counts every stream's first shards.
      streams: multiStream.streams.map((stream) => ({ ...stream, shards: config.shards ?? stream.shards })),
    },
  };
  const enabled = (kind: ConsumerFaultKind): boolean => config.faults?.[kind] ?? true;
  if (!enabled('listLag')) shape.listLagMs = 0;
  const multi = shape.multiStream;
  if (multi) {
    shape.shards = multi.streams.reduce((sum, stream) => sum + stream.shards, 0);
    if (!enabled('listLag')) for (const stream of multi.streams) stream.listLagMs = 0;
  }
  const faultPhaseMs = config.faultPhaseMs ?? 40_000;
  const random = seededRandom(config.seed);
  const scheduler = new VirtualScheduler();
  const sourceClock = scheduler.clock();
  const wallOf = (ms: number): number => Math.floor(VIRTUAL_EPOCH_MS + ms);
  const trace = config.trace;
  const log = (line: string): void => trace?.(`${scheduler.now.toFixed(0)} ${line}`);
  const violations: ConsumerViolation[] = [];
  const violate = (guarantee: ConsumerGuarantee, detail: string): void => {
    if (violations.length < 20) violations.push({ guarantee, atMs: scheduler.now, detail });
    log(`VIOLATION ${guarantee}: ${detail}`);
  };
  const stats = { batches: 0, faults: 0 };
  // A promise rejection nobody handles ends a real process: in the simulation it is a violation of this run.
  const onUnhandled = (reason: unknown): void => {
    violate('unhandled-rejection', `a promise rejection nobody handled would end the process: ${reason instanceof Error ? `${reason.name}: ${reason.message}` : String(reason)}`);
  };
  process.on('unhandledRejection', onUnhandled);
  try {

    // ---------------------------------------------------------------- the world's timeline, drawn up front

    // A shard owed records must have a live holder within the lease liveness bound of simulate() (DESIGN
    // 6.6), plus a shard sync and a leader failover when its lease has yet to be created.
    const ownedBoundMs = LEASE_DURATION_MS * (1 + MAX_CLOCK_DRIFT) + 3 * TAKE_INTERVAL_MS * 1.05 + RENEW_INTERVAL_MS + 3_500;
    const progressBoundMs = ownedBoundMs + LEASE_DURATION_MS + shape.shardSyncIntervalMs * 1.05;

    const startAtMs = 1_000 + Math.floor(random.next() * 3_000);
    const preBirthReshard = random.next() < 0.2;
    // A multi-stream run draws what only it has from a random of its own; what both kinds of run have
    // (records, faults, processes) is drawn from the run's random as in a one-stream run.
    const streamRandom = seededRandom(config.seed ^ 0x1157_ea3);
    /** How often each process asks for the stream list (its own clock). */
    const refreshMs = multi?.streamRefreshIntervalMs ?? shape.shardSyncIntervalMs;
    const graceMs = multi?.removedStreamGraceMs ?? Infinity;
    const reshardTimesOver = (count: number, draw: () => number): number[] =>
      Array.from({ length: count }, (_, i) => {
        const from = startAtMs + 4_000;
        const span = (faultPhaseMs - 6_000 - from) / count;
        return from + span * (i + draw() * 0.8);
      });
    const reshardTimes = multi ? [] : reshardTimesOver(shape.reshards, () => random.next());
    // AT_TIMESTAMP: a moment around the start, never before a reshard that happens before the group starts.
    const atTimestampMs = wallOf(
      Math.max(preBirthReshard ? startAtMs - 400 : 0, startAtMs - 2_000 + random.next() * 5_000),
    );
    const start: StartingPoint =
      shape.initialPosition === 'AT_TIMESTAMP' ? { kind: 'AT_TIMESTAMP', timestampMs: atTimestampMs } : { kind: shape.initialPosition };
    const initialPosition: InitialPosition =
      shape.initialPosition === 'AT_TIMESTAMP' ? { atTimestamp: atTimestampMs } : shape.initialPosition;

    // Each stream's timeline: when the group's list names it, its resharding, its own start, its listing fault.
    interface StreamPlan {
      readonly addAtMs: number | null;
      readonly removeAtMs: number | null;
      readonly reAddAtMs: number | null;
      readonly reshardTimes: readonly number[];
      readonly reshardDraws: ReadonlyArray<{ op: number; pick: number }>;
      readonly atTimestampMs: number;
      readonly listingFault: { fromMs: number; durationMs: number } | null;
    }
    const plans = (multi?.streams ?? []).map((stream, i): StreamPlan => {
      const r = (): number => streamRandom.next();
      const addAtMs = stream.life === 'added' ? startAtMs + 3_000 + r() * (faultPhaseMs - 15_000 - startAtMs) : null;
      const removeAtMs = stream.life === 'bounced' || stream.life === 'removed' ? startAtMs + 5_000 + r() * (faultPhaseMs - 12_000 - startAtMs) : null;
      // Added back well within the grace, also when this process's list answers late (see the list faults).
      const away = Math.min(graceMs / 3, refreshMs * (1.2 + r()));
      const reAddAtMs = stream.life === 'bounced' && removeAtMs !== null ? removeAtMs + away : null;
      const reshardTimes = reshardTimesOver(stream.reshards, r);
      if (i === 0 && preBirthReshard) reshardTimes.unshift(startAtMs - 500);
      const reshardDraws = reshardTimes.map(() => ({ op: r(), pick: r() }));
      const listedFrom = addAtMs ?? startAtMs;
      const atTimestampMs = wallOf(Math.max(0, ...reshardTimes.filter((at) => at < listedFrom + 3_000).map((at) => at + 100), listedFrom - 2_000 + r() * 5_000));
      // A listing fault now and then covers the group's birth; now and then it lasts well into the quiet
      // phase (past the progress bound), where every other stream must progress while it fails.
      const early = r() < 0.3;
      const fromMs = early ? startAtMs - 500 + r() * 1_500 : startAtMs + r() * (faultPhaseMs - startAtMs);
      const long = r() < 0.3;
      const durationMs = long ? faultPhaseMs + progressBoundMs + 5_000 + r() * 10_000 - fromMs : 2_000 + r() * 18_000;
      const listingFault = stream.listingFault ? { fromMs, durationMs } : null;
      return { addAtMs, removeAtMs, reAddAtMs, reshardTimes, reshardDraws, atTimestampMs, listingFault };
    });

    const poisonPolicy = typeof shape.onHandlerError === 'object' ? shape.onHandlerError : null;
    const ledger = new ConsumerLedger({
      start,
      now: () => scheduler.now,
      wallOf,
      violate,
      deadLetterConfigured: poisonPolicy?.deadLetter ?? false,
      // The leader keeps a removed stream's leases for the grace on its own clock: at least this long.
      removedStreamGraceMs: graceMs / (1 + MAX_CLOCK_DRIFT) - 1,
    });
    // Poison records drawn apart from the world's timeline, so that the rest of the run is as without them.
    const poisonRandom = seededRandom(config.seed ^ 0x5ee_d1e);
    // The sink of exactly-once runs: each record's effect, counted when the lease write that carries it
    // applies (in the store, atomically with it, whatever the writer later hears of the outcome).
    const sink = new Map<number, number>();
    const pendingEffects = new Map<string, { owner: string | null; epoch: number; checkpoint: string | null; indices: readonly number[] }>();
    const applyEffects = (event: MemoryWriteEvent): void => {
      if (event.kind !== 'lease' || event.after === null) return;
      const key = `${event.leaseKey}#${event.after.version}`;
      const effects = pendingEffects.get(key);
      pendingEffects.delete(key);
      const { after } = event;
      if (!effects || after.owner !== effects.owner || after.epoch !== effects.epoch || after.checkpoint !== effects.checkpoint) return;
      for (const index of effects.indices) sink.set(index, (sink.get(index) ?? 0) + 1);
    };
    /** Records the 'skip' policy gave up on: their effects are dropped by the user's choice. */
    const skipped = new Set<string>();
    // A shard trimmed from the stream may take with it records whose effects never committed: retention,
    // not the runtime; so may a stream removed from the group for good.
    const effectOwed = (entry: RecordEntry): boolean =>
      ledger.owes(entry) && ledger.shard(entry.shardId).trimmedAtMs === null && !skipped.has(`${entry.shardId}@${entry.position}`);
    const memory = new MemoryStorage({
      onWrite: (event) => {
        ledger.onWrite(event);
        applyEffects(event);
      },
    });

    // The streams: one (its lease keys are its shard ids), or a multi-stream group's (keys name the stream).
    const streams: SimStream[] = [];
    if (!multi) {
      const source = new MemorySource(shape.shards, {
        clock: sourceClock,
        batchSize: 10,
        idleDelayMs: 1_000,
        listLagMs: shape.listLagMs,
        random: seededRandom(Math.floor(random.next() * 2 ** 32)),
      });
      streams.push({ streamId: '', source, initialPosition: undefined, newest: [], listingFailsUntil: -Infinity, removedAtMs: null });
    } else {
      multi.streams.forEach((stream, i) => {
        const plan = plans[i] as StreamPlan;
        const source = new MemorySource(stream.shards, {
          clock: sourceClock,
          batchSize: 10,
          idleDelayMs: 1_000,
          listLagMs: stream.listLagMs,
          random: seededRandom(Math.floor(streamRandom.next() * 2 ** 32)),
        });
        const own = stream.initialPosition;
        const streamStart: StartingPoint = own === null ? start : own === 'AT_TIMESTAMP' ? { kind: 'AT_TIMESTAMP', timestampMs: plan.atTimestampMs } : { kind: own };
        const ownPosition: InitialPosition | undefined = own === null ? undefined : own === 'AT_TIMESTAMP' ? { atTimestamp: plan.atTimestampMs } : own;
        streams.push({ streamId: stream.streamId, source, initialPosition: ownPosition, newest: [], listingFailsUntil: -Infinity, removedAtMs: null });
        ledger.addStream(stream.streamId, streamStart);
        if (stream.life === 'added' && enabled('streams')) ledger.listStream(stream.streamId, false);
      });
    }
    const keyOf = (stream: SimStream, shardId: string): string => (stream.streamId === '' ? shardId : streamLeaseKey(stream.streamId, shardId));
    const streamById = new Map(streams.map((stream) => [stream.streamId, stream]));
    /** The stream of a lease key, and the shard id its source knows. */
    const locate = (leaseKey: string): { stream: SimStream; shardId: string } => {
      const stream = streamById.get(ledger.shard(leaseKey).streamId) as SimStream;
      return { stream, shardId: stream.streamId === '' ? leaseKey : leaseKey.slice(stream.streamId.length + 1) };
    };
    for (const stream of streams) {
      for (const shard of await stream.source.listShards()) ledger.addShard(keyOf(stream, shard.shardId), [], false, stream.streamId);
      stream.newest = ledger.shardsOf(stream.streamId);
    }

    // An operator's tool rewinds the live group now and then; every rewind must complete, once faults
    // stop, in time for its replay to be delivered within the quiet phase.
    const rewinds = shape.rewind
      ? scheduleRewinds({ shape: shape.rewind, seed: config.seed, group: GROUP, scheduler, storage: memory, ledger, faultPhaseMs, completeWithinMs: progressBoundMs, wallOf, log, violate })
      : null;

    // ---------------------------------------------------------------- records arrive all along

    const partitionKeys = Array.from({ length: shape.partitionKeys }, (_, i) => `key-${i}`);
    let recordsLeft = shape.records;
    for (let at = random.next() * 500; recordsLeft > 0 && at < faultPhaseMs; at += 100 + random.next() * ((faultPhaseMs / shape.records) * 6)) {
      const burst = Math.min(recordsLeft, 1 + Math.floor(random.next() * 6));
      recordsLeft -= burst;
      const keys = Array.from({ length: burst }, () => partitionKeys[Math.floor(random.next() * partitionKeys.length)] as string);
      const stream = streams.length === 1 ? (streams[0] as SimStream) : (streams[Math.floor(streamRandom.next() * streams.length)] as SimStream);
      scheduler.schedule(at, () => {
        for (const partitionKey of keys) {
          const shardId = stream.source.shardFor(partitionKey);
          const entry = ledger.records.length;
          const position = stream.source.put(partitionKey, String(entry), shardId);
          const poison = poisonPolicy !== null && poisonRandom.next() < poisonPolicy.poisonRate;
          // Keys of different streams are different keys: order is per stream and key.
          ledger.addRecord(stream.streamId === '' ? partitionKey : `${stream.streamId}/${partitionKey}`, keyOf(stream, shardId), position, wallOf(scheduler.now), poison);
        }
      });
    }

    // ---------------------------------------------------------------- resharding over generations

    const reshard = (stream: SimStream, draw: { op: number; pick: number }): void => {
      const { source, newest } = stream;
      const open = ledger.shardsOf(stream.streamId).filter((shardId) => ledger.shard(shardId).closedAtMs === null);
      const pairs = source.adjacentOpenShards().map(([a, b]) => [keyOf(stream, a), keyOf(stream, b)] as [string, string]);
      const recentPairs = pairs.filter(([a, b]) => newest.includes(a) || newest.includes(b));
      const wantMerge = open.length >= 6 || (open.length > 1 && draw.op < 0.45);
      const candidates = recentPairs.length > 0 ? recentPairs : pairs;
      if (wantMerge && candidates.length > 0) {
        const [a, b] = candidates[Math.floor(draw.pick * candidates.length)] as [string, string];
        const child = keyOf(stream, source.merge(locate(a).shardId, locate(b).shardId));
        ledger.closeShard(a);
        ledger.closeShard(b);
        ledger.addShard(child, [a, b], true, stream.streamId);
        stream.newest = [child];
        log(`reshard: merged ${a} and ${b} into ${child}`);
        return;
      }
      const recent = open.filter((shardId) => newest.includes(shardId));
      const from = recent.length > 0 ? recent : open;
      const parent = from[Math.floor(draw.pick * from.length)] as string;
      const children = source.split(locate(parent).shardId).map((shardId) => keyOf(stream, shardId));
      ledger.closeShard(parent);
      for (const child of children) ledger.addShard(child, [parent], true, stream.streamId);
      stream.newest = children;
      log(`reshard: split ${parent} into ${children.join(' and ')}`);
    };
    const only = streams[0] as SimStream;
    if (!multi && preBirthReshard) {
      const draw = { op: random.next(), pick: random.next() };
      scheduler.schedule(startAtMs - 500, () => reshard(only, draw));
    }
    for (const at of reshardTimes) {
      const draw = { op: random.next(), pick: random.next() };
      scheduler.schedule(at, () => reshard(only, draw));
    }
    plans.forEach((plan, i) => {
      plan.reshardTimes.forEach((at, n) => scheduler.schedule(at, () => reshard(streams[i] as SimStream, plan.reshardDraws[n] as { op: number; pick: number })));
    });

    // ---------------------------------------------------------------- the processes

    const workers: SimWorker[] = [];
    const faultsOn = (): boolean => scheduler.now < faultPhaseMs;
    const live = (): SimWorker[] => workers.filter((worker) => worker.alive && !worker.stopping);
    const holders = (shardId: string): SimWorker[] => workers.filter((worker) => worker.alive && worker.consumer.coordinator.isHeld(shardId));

    const basePlan = (): FaultPlan => ({
      latencyMs: (r) => (enabled('storage') ? (r.next() < 0.02 ? 200 + r.next() * 1_500 : r.next() * 20) : 0),
      errorBeforeSend: enabled('storage') ? 0.01 : 0,
      ambiguousAfterApply: enabled('storage') ? 0.01 : 0,
      cutOff: false,
    });

    /** The simulated user code: checks every hand-over, works a while, sometimes fails or overruns. */
    const handle = async (worker: SimWorker, records: readonly SourceRecord[], context: BatchContext): Promise<void | BatchResponse> => {
      const { shardId, signal, fencingToken } = context;
      const { clock, handlerRandom: r } = worker;
      stats.batches++;
      handOverChecks(worker, shardId, fencingToken);
      if (multi) streamChecks(worker, shardId, fencingToken, records);
      ledger.handOver(shardId, fencingToken, records, worker.workerId);
      if (trace) {
        const names = records.map((record) => `${record.partitionKey}#${ledger.records[Number(decoder.decode(record.data))]?.n ?? '?'}`);
        log(`${worker.workerId} handles ${shardId}@${fencingToken}: ${names.join(' ')}`);
      }

      // After every await: a handler whose tenure ended must see its signal fired before anything else.
      const resumed = (where: string): void => {
        if (signal.aborted) return;
        const lease = worker.consumer.coordinator.lease(shardId);
        if (lease === undefined || lease.fencingToken !== fencingToken) {
          violate(
            'signal',
            `${worker.workerId}'s handler of ${shardId} (tenure ${fencingToken}) resumed ${where} with its signal not fired, though ${lease === undefined ? 'the worker no longer holds the lease' : `the lease is in tenure ${lease.fencingToken}`}`,
          );
        }
      };

      // Exactly-once: the effects of `done` and the checkpoint at `position` in one atomic write of the
      // lease, through this process's faulty view of the store.
      const commit = async (done: readonly SourceRecord[], position: string): Promise<void> => {
        const indices = done.map((record) => Number(decoder.decode(record.data)));
        await context.checkpointWith(async (current, next) => {
          pendingEffects.set(`${shardId}#${current.version + 1}`, { owner: next.owner, epoch: next.epoch, checkpoint: next.checkpoint, indices });
          const [outcome] = await worker.storage.updateLeases(GROUP, [{ leaseKey: shardId, expectedVersion: current.version, next }]);
          return outcome ?? { status: 'conflict', current: null };
        }, position);
        log(`${worker.workerId}'s handler committed ${shardId}@${fencingToken} through ${position}`);
        resumed('after its transactional checkpoint');
      };

      // The handler returned with these records done: from then on they count as processed.
      const succeed = (done: readonly SourceRecord[]): void => ledger.succeeded(shardId, done, worker.workerId);

      if (worker.downstreamDown) {
        await clock.sleep(10);
        resumed('before failing: its downstream is down');
        throw new Error(`the downstream of ${worker.workerId} is unavailable (injected)`);
      }

      // A poison record fails every time, on every worker: thrown, or reported after the records before it were done.
      const poisonAt = records.findIndex((record) => ledger.recordAt(shardId, record.position)?.poison === true);
      if (poisonPolicy && poisonAt >= 0) {
        const poisoned = records[poisonAt] as SourceRecord;
        await clock.sleep(5 + r.next() * 20);
        resumed('before failing on a poison record');
        if (r.next() < poisonPolicy.reportRate) {
          succeed(records.slice(0, poisonAt));
          if (config.exactlyOnce && poisonAt > 0) await commit(records.slice(0, poisonAt), (records[poisonAt - 1] as SourceRecord).position);
          return { failedAt: poisoned.position, error: new Error(`poison record at ${poisoned.position} of ${shardId}`) };
        }
        if (config.exactlyOnce && poisonAt > 0 && r.next() < 0.5) {
          // The records before the poison record commit, then the handler fails: they are done all the same.
          succeed(records.slice(0, poisonAt));
          await commit(records.slice(0, poisonAt), (records[poisonAt - 1] as SourceRecord).position);
        }
        throw new Error(`poison record at ${poisoned.position} of ${shardId}`);
      }

      const batchKey = `${shardId}@${records[0]?.position ?? context.position}`;
      if (faultsOn() && enabled('handlerFailure') && !worker.failures.has(batchKey) && r.next() < 0.04) {
        worker.failures.set(batchKey, 1 + Math.floor(r.next() * 2));
      }
      const failuresLeft = worker.failures.get(batchKey) ?? 0;
      if (failuresLeft > 0) {
        worker.failures.set(batchKey, failuresLeft - 1);
        await clock.sleep(5 + r.next() * 20);
        resumed('before failing');
        if (records.length > 0 && r.next() < 0.3) {
          // A partial failure: the records before the reported one are done.
          const at = Math.floor(r.next() * records.length);
          succeed(records.slice(0, at));
          if (config.exactlyOnce && at > 0) await commit(records.slice(0, at), (records[at - 1] as SourceRecord).position);
          return { failedAt: (records[at] as SourceRecord).position, error: new Error(`injected failure of one record of ${batchKey}`) };
        }
        if (config.exactlyOnce && records.length > 1 && r.next() < 0.5) {
          // A prefix commits with its checkpoint, then a later step of the handler fails: the prefix is done.
          const at = 1 + Math.floor(r.next() * (records.length - 1));
          succeed(records.slice(0, at));
          await commit(records.slice(0, at), (records[at - 1] as SourceRecord).position);
        }
        throw new Error(`injected handler failure on ${batchKey}`);
      }

      const overrunMs = worker.overrunNextMs;
      if (overrunMs !== null) {
        // Runs past its lease and never looks at its signal.
        worker.overrunNextMs = null;
        log(`${worker.workerId}'s handler of ${shardId}@${fencingToken} overruns for ${overrunMs.toFixed(0)} ms`);
        worker.overrunning = true;
        await clock.sleep(overrunMs).finally(() => (worker.overrunning = false));
        resumed('after overrunning its lease');
      } else {
        await clock.sleep(5 + r.next() * 60);
        resumed('after its work');
        if (signal.aborted) {
          succeed(records);
          return;
        }
      }
      succeed(records);
      if (config.exactlyOnce && records.length > 0) {
        await commit(records, context.position);
      } else if (shape.checkpointing === 'manual' && records.length > 0) {
        const position = r.next() < 0.8 ? context.position : (records[Math.floor(r.next() * records.length)] as SourceRecord).position;
        await context.checkpoint(position).then(
          () => log(`${worker.workerId}'s handler checkpointed ${shardId} at ${position}`),
          (error: unknown) => log(`${worker.workerId}'s handler could not checkpoint ${shardId} at ${position}: ${String(error)}`),
        );
        resumed('after its checkpoint');
      }
      if (rewinds && !config.exactlyOnce && records.length > 0) rewinds.afterBatch(worker.index, clock, context, (line) => log(`${worker.workerId}'s ${line}`));
    };

    /** The simulated dead-letter destination: takes a while, and fails now and then while faults are on. */
    const deadLetter = async (worker: SimWorker, failure: FailedRecords): Promise<void> => {
      const r = worker.deadLetterRandom;
      await worker.clock.sleep(2 + r.next() * 30);
      if (faultsOn() && r.next() < 0.15) {
        log(`${worker.workerId}'s dead-letter handler fails on ${failure.shardId} [${failure.positions.join(', ')}]`);
        throw new Error(`injected dead-letter failure on ${failure.shardId}`);
      }
      ledger.deadLettered(failure.shardId, failure.positions, worker.workerId);
      log(`${worker.workerId} dead-lettered ${failure.shardId} [${failure.positions.join(', ')}] after ${failure.attempts} attempts (${failure.reason})`);
    };

    /** At each hand-over: the handing worker holds the lease in the batch's tenure, and nobody else holds it. */
    const handOverChecks = (worker: SimWorker, shardId: string, fencingToken: number): void => {
      const lease = worker.consumer.coordinator.lease(shardId);
      if (lease === undefined || lease.fencingToken !== fencingToken) {
        violate(
          'single-owner',
          `${worker.workerId} handed a batch of ${shardId} (tenure ${fencingToken}) to its handler while ${lease === undefined ? 'not holding the lease' : `holding tenure ${lease.fencingToken}`}`,
        );
      }
      for (const other of holders(shardId)) {
        if (other !== worker) violate('single-owner', `${worker.workerId} handed a batch of ${shardId} to its handler while ${other.workerId} held the lease`);
      }
      // The leader deletes a lease only when nobody holds it: a holder never finds its lease gone.
      if (ledger.leases.get(shardId) === null && !reportedGone.has(shardId)) {
        reportedGone.add(shardId);
        violate('deletion', `${worker.workerId} handed a batch of ${shardId} (tenure ${fencingToken}) to its handler though its lease was deleted`);
      }
    };
    const reportedGone = new Set<string>();

    /**
     * Multi-stream: a process reads only the streams its list names. Once its `streams` function answered
     * without a stream, it hands over nothing of it but what its batch in flight still holds (a drain
     * finishes that batch: retries and halves of it); and a stream that left the group's list, it must
     * learn of within a refresh interval of its clock (pauses and a failing list aside).
     */
    const streamChecks = (worker: SimWorker, shardId: string, fencingToken: number, records: readonly SourceRecord[]): void => {
      const streamId = ledger.shards.get(shardId)?.streamId;
      if (streamId === undefined) return; // the ledger reports it
      const tenure = `${shardId}#${fencingToken}`;
      const positions = records.map((record) => Number(record.position));
      const since = worker.unlistedSince.get(streamId);
      const report = (detail: string): void => {
        if (reportedReads.has(`${worker.workerId} ${streamId}`)) return;
        reportedReads.add(`${worker.workerId} ${streamId}`);
        violate('removed-stream', detail);
      };
      if (since !== undefined && scheduler.now > since) {
        const frozen = worker.frozen.get(streamId)?.get(tenure) ?? -Infinity;
        const beyond = positions.filter((position) => position > frozen);
        if (beyond.length > 0) {
          report(
            `${worker.workerId} handed over records of ${shardId} (tenure ${fencingToken}) from position ${beyond[0]} on, ${(scheduler.now - since).toFixed(0)} ms after its streams() answered without stream ${streamId}` +
              (frozen === -Infinity ? ' (nothing of that tenure was in flight)' : ` (its batch in flight reached ${frozen})`),
          );
        }
      } else if (since === undefined && !ledger.isListed(streamId)) {
        const unlistedAt = ledger.unlistedAt(streamId) ?? scheduler.now;
        const from = Math.max(unlistedAt, worker.startedAtMs, worker.clock.pausedUntil, worker.listFailsUntil);
        if (scheduler.now - from > refreshMs / (1 - MAX_CLOCK_DRIFT) + 250) {
          report(
            `${worker.workerId} handed over records of ${shardId} ${(scheduler.now - unlistedAt).toFixed(0)} ms after stream ${streamId} left the group's list, and its streams() has not answered since (refresh interval ${refreshMs.toFixed(0)} ms)`,
          );
        }
      }
      for (const position of positions) worker.handedMax.set(tenure, Math.max(worker.handedMax.get(tenure) ?? -Infinity, position));
    };
    const reportedReads = new Set<string>();

    /** A process's `streams` answered: which streams it names from now on, and what each unnamed one had in flight. */
    const observeList = (worker: SimWorker, listed: ReadonlySet<string>): void => {
      worker.listedOnce = true;
      for (const { streamId } of streams) {
        if (listed.has(streamId)) {
          worker.unlistedSince.delete(streamId);
          worker.frozen.delete(streamId);
          continue;
        }
        if (worker.unlistedSince.has(streamId)) continue;
        worker.unlistedSince.set(streamId, scheduler.now);
        const frozen = new Map<string, number>();
        for (const [tenure, position] of worker.handedMax) {
          if (ledger.shards.get(tenure.slice(0, tenure.lastIndexOf('#')))?.streamId === streamId) frozen.set(tenure, position);
        }
        worker.frozen.set(streamId, frozen);
      }
    };

    /**
     * A process's `streams` function: a call to wherever the list lives (on the process's clock), which
     * answers the group's list as it is then, each stream read through this process's own view of its
     * source; while a fault lasts it fails, and the runtime keeps its last list.
     */
    const listStreams = async (worker: SimWorker, sources: ReadonlyMap<string, ProcessSource>, r: Random): Promise<StreamSpec[]> => {
      await worker.clock.sleep(r.next() * 20);
      if (scheduler.now < worker.listFailsUntil) throw new Error(`[simulation] ${worker.workerId} could not read the stream list (injected fault)`);
      const listed = streams.filter((stream) => ledger.isListed(stream.streamId));
      observeList(worker, new Set(listed.map((stream) => stream.streamId)));
      return listed.map((stream) => ({
        id: stream.streamId,
        source: sources.get(stream.streamId) as ProcessSource,
        ...(stream.initialPosition === undefined ? {} : { initialPosition: stream.initialPosition }),
      }));
    };

    let nextWorkerIndex = 0;
    const startWorker = (): SimWorker => {
      const index = nextWorkerIndex++;
      const rate = enabled('drift') ? 1 + (random.next() * 2 - 1) * MAX_CLOCK_DRIFT : 1;
      const clock = new VirtualClock(scheduler, { rate, offsetMs: random.next() * 1e6 });
      const workerRandom = seededRandom(Math.floor(random.next() * 2 ** 32));
      const handlerRandom = seededRandom(Math.floor(random.next() * 2 ** 32));
      const plan = basePlan();
      const storage = new SyncTappedStorage(memory, clock, workerRandom, plan);
      const workerId = `w${index}`;
      // Its own seed, so that the other draws are those of a run without it: a third of the shard ends this
      // worker reads come without the children's parents, and the reader lists the stream for them.
      const childShardsRandom = seededRandom(((config.seed * 31 + index) ^ 0xc41d_5ead) >>> 0);
      const processSources = new Map(
        streams.map((stream) => [
          stream.streamId,
          new ProcessSource(stream.source, clock, workerRandom, {
            latencyMs: (r) => (enabled('storage') ? r.next() * 10 : 0),
            withholdChildShards: () => childShardsRandom.next() < 1 / 3,
            onBatch: trace ? (shardId, batch) => batch.kind === 'end' && log(`${workerId} read the end of ${keyOf(stream, shardId)}`) : undefined,
          }),
        ]),
      );
      const listRandom = seededRandom(((config.seed * 37 + index) ^ 0x1157_0a7) >>> 0);
      // The handler needs the worker, and the worker its consumer: the handler looks the worker up when called.
      const self: { worker?: SimWorker } = {};
      const onHandlerError = poisonPolicy
        ? {
            bisect: poisonPolicy.bisect,
            maxAttempts: poisonPolicy.maxAttempts,
            ...(poisonPolicy.maxRecordAgeMs !== undefined ? { maxRecordAgeMs: poisonPolicy.maxRecordAgeMs } : {}),
            ...(poisonPolicy.deadLetter ? { deadLetter: (failure: FailedRecords) => deadLetter(self.worker as SimWorker, failure) } : {}),
          }
        : (shape.onHandlerError as 'retry' | 'skip');
      const consumer = new Consumer(withUnsafe({
        group: GROUP,
        ...(multi
          ? {
              streams: () => listStreams(self.worker as SimWorker, processSources, listRandom),
              ...(multi.streamRefreshIntervalMs === undefined ? {} : { streamRefreshIntervalMs: multi.streamRefreshIntervalMs }),
              removedStreamGraceMs: multi.removedStreamGraceMs,
            }
          : { source: processSources.get('') }),
        storage: shape.rewind?.changeFeed === false ? withoutChangeFeed(storage) : storage,
        workerId,
        clock,
        random: workerRandom,
        initialPosition,
        checkpointing: shape.checkpointing,
        onHandlerError,
        // Without bisection whole batches are given up, and poison records here fail for ever: the guard
        // against giving up that runs away would hold at them for good.
        ...(poisonPolicy && !poisonPolicy.bisect ? { maxRecordsGivenUpInARow: Infinity } : {}),
        shardSyncIntervalMs: shape.shardSyncIntervalMs,
        lease: { leaseDurationMs: LEASE_DURATION_MS, takeIntervalMs: TAKE_INTERVAL_MS, maxClockDrift: MAX_CLOCK_DRIFT },
        metrics: false,
        processBatch: (records, context) => handle(self.worker as SimWorker, records, context),
      }, config.unsafe));
      // Its own seed, so that the handler's and the runtime's draws are those of a run without it.
      const deadLetterRandom = seededRandom(((config.seed * 31 + index) ^ 0xdead_1e77) >>> 0);
      const worker: SimWorker = {
        index,
        workerId,
        clock,
        plan,
        storage,
        consumer,
        handlerRandom,
        deadLetterRandom,
        alive: true,
        stopping: false,
        overrunNextMs: null,
        downstreamDown: false,
        overrunning: false,
        failures: new Map(),
        startedAtMs: scheduler.now,
        listFailsUntil: -Infinity,
        listedOnce: false,
        unlistedSince: new Map(),
        frozen: new Map(),
        handedMax: new Map(),
      };
      self.worker = worker;
      consumer.on('record-skipped', ({ shardId, position, deadLettered, reason }) => {
        ledger.skipped(shardId, position, deadLettered, workerId);
        skipped.add(`${shardId}@${position}`);
        log(`${workerId} skipped ${shardId} at ${position} (${reason}${deadLettered ? ', dead-lettered' : ''})`);
      });
      consumer.on('checkpointed', ({ shardId, position }) => {
        ledger.acknowledged(shardId, position);
        log(`${workerId} checkpointed ${shardId} at ${position}`);
      });
      if (trace) {
        storage.onOutcome = (line) => log(`${workerId} ${line}`);
        consumer.on('shard-started', ({ shardId, position, fencingToken }) => log(`${workerId} started ${shardId}@${fencingToken} at ${position}`));
        consumer.on('shard-ended', ({ shardId, childShardIds }) => log(`${workerId} ended ${shardId} -> [${childShardIds.join(', ')}]`));
        consumer.on('lease-lost', ({ shardId, reason }) => log(`${workerId} lost ${shardId} (${reason})`));
        consumer.on('lease-handed-off', ({ shardId, to }) => log(`${workerId} handed ${shardId} to ${to}`));
        consumer.on('handler-failed', ({ shardId, attempt, error }) => log(`${workerId}'s handler of ${shardId} failed (attempt ${attempt}): ${error.message}`));
        consumer.on('shard-stopped', ({ shardId, error }) => log(`${workerId} stopped ${shardId}: ${error.message}`));
        consumer.on('leader-elected', ({ term }) => log(`${workerId} leads term ${term}`));
        consumer.on('leader-demoted', ({ term }) => log(`${workerId} no longer leads term ${term}`));
        consumer.on('shard-sync', ({ created, deleted }) => {
          if (created.length + deleted.length > 0) log(`${workerId} shard sync: created [${created.join(', ')}] deleted [${deleted.join(', ')}]`);
        });
        consumer.on('error', ({ error, operation }) => log(`${workerId} error in ${operation}: ${error.message}`));
        consumer.on('stream-added', ({ streamId }) => log(`${workerId} reads stream ${streamId}`));
        consumer.on('stream-removed', ({ streamId }) => log(`${workerId} stops reading stream ${streamId}`));
        consumer.on('streams-sync', ({ failed, removed, deleted }) => {
          for (const [streamId, error] of Object.entries(failed)) log(`${workerId} could not sync stream ${streamId}: ${error.message}`);
          for (const [streamId, { leases, deleteInMs }] of Object.entries(removed)) log(`${workerId} keeps ${leases} leases of removed stream ${streamId} for ${deleteInMs.toFixed(0)} ms more`);
          if (deleted.length > 0) log(`${workerId} deleted the leases of removed streams: [${deleted.join(', ')}]`);
        });
        consumer.coordinator.on('acquired', ({ leaseKey, fencingToken, how, checkpoint }) =>
          log(`${workerId} acquired ${leaseKey}@${fencingToken} (${how}) at ${String(checkpoint)}`),
        );
      }
      workers.push(worker);
      log(`${workerId} starts (clock rate ${rate.toFixed(4)})`);
      void consumer.start().catch((error: unknown) => log(`${workerId} failed to start: ${String(error)}`));
      return worker;
    };

    // ---------------------------------------------------------------- stopping, with its deadline checked

    const pendingStops = new Set<SimWorker>();
    const gracefulStop = (worker: SimWorker, timeoutMs: number, whileFailing = false): void => {
      worker.stopping = true;
      pendingStops.add(worker);
      const began = scheduler.now;
      const heldAtStop = new Set(worker.consumer.coordinator.heldLeases().map((lease) => lease.leaseKey));
      // Leases the stop could not hand over for a reason of storage's (its hold ran out while heartbeats
      // failed), not of the handler's: judged by the lease and membership rules, not by this check.
      const lostToStorage = new Set<string>();
      if (whileFailing) {
        worker.consumer.on('lease-lost', ({ shardId, reason }) => {
          if (reason === 'self-fenced' || reason === 'expelled') lostToStorage.add(shardId);
        });
      }
      // The deadline is timeoutMs of the worker's own clock: at most timeoutMs / (1 - drift) of virtual time.
      const deadline = began + timeoutMs / (1 - MAX_CLOCK_DRIFT) + 1;
      log(`${worker.workerId} stops gracefully within ${timeoutMs.toFixed(0)} ms`);
      const cancel = scheduler.schedule(deadline, () => {
        if (!pendingStops.has(worker)) return;
        const busy = worker.consumer.shards.join(', ');
        violate('stop-deadline', `${worker.workerId}'s stop({ timeoutMs: ${timeoutMs.toFixed(0)} }) had not returned ${(scheduler.now - began).toFixed(0)} ms after it began (shards still pumping: [${busy}])`);
      });
      void worker.consumer.stop({ timeoutMs }).finally(() => {
        cancel();
        pendingStops.delete(worker);
        if (scheduler.now > deadline) {
          violate('stop-deadline', `${worker.workerId}'s stop({ timeoutMs: ${timeoutMs.toFixed(0)} }) returned ${(scheduler.now - began).toFixed(0)} ms after it began`);
        }
        if (whileFailing) checkFailingStop(worker, timeoutMs, began, new Set([...heldAtStop].filter((leaseKey) => !lostToStorage.has(leaseKey))));
        log(`${worker.workerId} stopped`);
        worker.alive = false;
        worker.clock.kill();
      });
    };

    /**
     * A stop while the handler fails every call: the failed batches were never checkpointed, so their
     * retries give way to the drain at once and every lease is handed over, well within the deadline
     * (the handler's calls are short here, and the process's storage is sound while it stops), instead
     * of the stop waiting its timeout out and leaving the leases to lapse.
     */
    const checkFailingStop = (worker: SimWorker, timeoutMs: number, began: number, heldAtStop: ReadonlySet<string>): void => {
      const tookMs = scheduler.now - began;
      if (tookMs > timeoutMs / 2) {
        violate('stop-handover', `${worker.workerId}'s stop({ timeoutMs: ${timeoutMs.toFixed(0)} }) while its handler failed every call took ${tookMs.toFixed(0)} ms`);
      }
      // Of the leases it held when the stop began (one whose release failed before is another matter); a
      // lease corrupt meanwhile cannot be written by anybody: it is left as it is, by design.
      const kept = [...ledger.leases]
        .filter(([leaseKey, lease]) => heldAtStop.has(leaseKey) && lease?.owner === worker.workerId && !((corrupted.get(leaseKey) ?? -Infinity) >= began))
        .map(([leaseKey]) => leaseKey);
      if (kept.length > 0) {
        violate('stop-handover', `${worker.workerId}'s stop while its handler failed every call returned with its leases [${kept.join(', ')}] left to lapse`);
      }
    };

    // ---------------------------------------------------------------- the fault schedule

    const pending: Array<() => void> = [];
    const afterEach = (): void => {
      while (pending.length > 0) (pending.shift() as () => void)();
    };
    for (let i = 0; i < shape.workers; i++) {
      scheduler.schedule(startAtMs + random.next() * 400, () => pending.push(() => startWorker()));
    }

    /** Shards whose lease was corrupted, with when it was repaired (Infinity while it is corrupt). */
    const corrupted = new Map<string, number>();
    const trimmed = new Set<string>();
    const kinds = ALL_FAULTS.filter((kind) => enabled(kind) && !['storage', 'drift', 'listLag', 'handlerFailure'].includes(kind));
    if (enabled('storage')) kinds.push('storage');
    for (let at = startAtMs + 2_000 + random.next() * 2_000; at < faultPhaseMs - 1_000 && kinds.length > 0; at += 1_500 + random.next() * 4_000) {
      const kind = kinds[Math.floor(random.next() * kinds.length)] as ConsumerFaultKind;
      const draw = { pick: random.next(), variant: random.next(), duration: random.next(), extra: random.next() };
      scheduler.schedule(at, () => {
        const living = live().filter((worker) => !worker.clock.paused);
        const victim = living[Math.floor(draw.pick * living.length)];
        stats.faults++;
        switch (kind) {
          case 'crash': {
            if (!victim || living.length <= 1) return;
            log(`fault: ${victim.workerId} crashes`);
            victim.alive = false;
            victim.clock.kill();
            const restartAt = scheduler.now + LEASE_DURATION_MS * (0.3 + draw.duration * 1.7);
            scheduler.schedule(restartAt, () => {
              if (faultsOn()) pending.push(() => startWorker());
            });
            return;
          }
          case 'pause': {
            if (!victim) return;
            const until = Math.min(scheduler.now + LEASE_DURATION_MS * (0.3 + draw.duration * 1.7), faultPhaseMs);
            log(`fault: ${victim.workerId} pauses until ${until.toFixed(0)}`);
            victim.clock.pauseUntil(until);
            return;
          }
          case 'gracefulStop': {
            if (!victim || living.length <= 1) return;
            const timeoutMs = 1_000 + draw.duration * 7_000;
            pending.push(() => gracefulStop(victim, timeoutMs));
            if (draw.variant < 0.7) scheduler.schedule(scheduler.now + 2_000 + draw.extra * 6_000, () => faultsOn() && pending.push(() => startWorker()));
            return;
          }
          case 'join':
            if (workers.filter((worker) => worker.alive).length < shape.workers + 3) pending.push(() => startWorker());
            return;
          case 'storage': {
            if (!victim) return;
            // Cut off from storage for a while; ambient latency, errors and ambiguity are always on.
            const until = Math.min(scheduler.now + LEASE_DURATION_MS * (0.2 + draw.duration * 1.3), faultPhaseMs);
            log(`fault: ${victim.workerId} cut off from storage until ${until.toFixed(0)}`);
            victim.plan.cutOff = true;
            scheduler.schedule(until, () => (victim.plan.cutOff = false));
            return;
          }
          case 'leaderChange': {
            const leader = live().find((worker) => worker.consumer.elector?.isLeader());
            if (!leader) return;
            const action = draw.variant < 0.3 ? 'crash' : draw.variant < 0.55 ? 'pause' : draw.variant < 0.8 ? 'cut off' : 'faulty writes';
            const when = draw.extra < 0.5 ? 'before' : 'after';
            log(`fault: ${leader.workerId}, the leader, will ${action} at its next lease create or delete (${when} it is sent)`);
            const disarm = scheduler.schedule(scheduler.now + 3 * shape.shardSyncIntervalMs + 2_000, () => (leader.storage.onLeaseWrite = null));
            leader.storage.onLeaseWrite = (moment) => {
              // A stopping worker is left alone, as by every other fault: its stop's deadline is checked.
              if (moment !== when || !leader.alive || leader.stopping || !faultsOn()) return;
              leader.storage.onLeaseWrite = null;
              disarm();
              log(`fault: ${leader.workerId}, the leader, ${action} in the middle of a shard sync`);
              const until = Math.min(scheduler.now + LEASE_DURATION_MS * (0.5 + draw.duration), faultPhaseMs);
              if (action === 'crash' && live().length > 1) {
                leader.alive = false;
                leader.clock.kill();
                scheduler.schedule(scheduler.now + 3_000, () => faultsOn() && pending.push(() => startWorker()));
              } else if (action === 'pause') {
                leader.clock.pauseUntil(until);
              } else if (action === 'cut off') {
                leader.plan.cutOff = true;
                scheduler.schedule(until, () => (leader.plan.cutOff = false));
              } else {
                const { errorBeforeSend, ambiguousAfterApply } = leader.plan;
                leader.plan.errorBeforeSend = 0.2;
                leader.plan.ambiguousAfterApply = 0.4;
                scheduler.schedule(Math.min(scheduler.now + 5_000, faultPhaseMs), () => {
                  leader.plan.errorBeforeSend = errorBeforeSend;
                  leader.plan.ambiguousAfterApply = ambiguousAfterApply;
                });
              }
            };
            return;
          }
          case 'readFault': {
            const held = [...ledger.shards.keys()].filter((shardId) => holders(shardId).length > 0 && !trimmed.has(shardId));
            const shardId = held[Math.floor(draw.pick * held.length)];
            if (shardId === undefined) return;
            const { stream, shardId: inStream } = locate(shardId);
            if (draw.variant < 0.5) {
              log(`fault: the next read of ${shardId} fails`);
              stream.source.failNextRead(inStream);
            } else {
              const durationMs = Math.min(1_000 + draw.duration * 12_000, faultPhaseMs - scheduler.now);
              log(`fault: reads of ${shardId} fail for ${durationMs.toFixed(0)} ms`);
              stream.source.failReadsFor(inStream, durationMs);
            }
            return;
          }
          case 'overrun': {
            const busy = living.filter((worker) => worker.consumer.shards.length > 0);
            const worker = busy[Math.floor(draw.pick * busy.length)];
            if (!worker) return;
            worker.overrunNextMs = LEASE_DURATION_MS * (1.1 + draw.duration);
            log(`fault: ${worker.workerId}'s next batch overruns its lease`);
            // Around the overrun, what makes it matter: a pause past the hold (the worker may take the lease
            // back while the old handler still runs), or a graceful stop that must not wait for it.
            if (draw.variant < 0.4) {
              scheduler.schedule(scheduler.now + 300 + draw.extra * 1_500, () => {
                if (!worker.alive || worker.stopping) return;
                const until = Math.min(scheduler.now + LEASE_DURATION_MS * (1 + draw.extra * 0.3), faultPhaseMs);
                log(`fault: ${worker.workerId} pauses until ${until.toFixed(0)} while its handler overruns`);
                worker.clock.pauseUntil(until);
              });
            } else if (draw.variant < 0.7 && living.length > 1) {
              scheduler.schedule(scheduler.now + 300 + draw.extra * 1_500, () => {
                if (worker.alive && !worker.stopping && !worker.clock.paused) pending.push(() => gracefulStop(worker, 1_000 + draw.duration * 4_000));
              });
            }
            return;
          }
          case 'corrupt': {
            const candidates = [...ledger.leases.entries()].filter(([shardId, lease]) => lease !== null && !corrupted.has(shardId));
            const [shardId] = candidates[Math.floor(draw.pick * candidates.length)] ?? [];
            if (shardId === undefined || [...corrupted.values()].includes(Infinity)) return;
            log(`fault: the lease of ${shardId} is corrupted (${describeLease(ledger.leases.get(shardId))})`);
            memory.corrupt(GROUP, shardId);
            corrupted.set(shardId, Infinity);
            // Repaired later, sometimes only after faults stop: meanwhile nothing else may stall.
            scheduler.schedule(scheduler.now + 3_000 + draw.duration * 20_000, () => {
              try {
                memory.repair(GROUP, shardId);
                log(`the lease of ${shardId} is repaired`);
              } catch {
                log(`the lease of ${shardId} was deleted while corrupt`);
              }
              corrupted.set(shardId, scheduler.now);
            });
            return;
          }
          case 'trim': {
            // Retention trims by age: a parent's records are older than its children's, so a shard leaves the
            // stream only after every shard it continues has left.
            const closed = [...ledger.shards.values()].filter(
              (shard) => shard.closedAtMs !== null && shard.trimmedAtMs === null && shard.parentShardIds.every((parent) => ledger.shard(parent).trimmedAtMs !== null),
            );
            const shard = closed[Math.floor(draw.pick * closed.length)];
            if (!shard) return;
            log(`fault: ${shard.shardId} is trimmed from the stream (${ledger.owed().get(shard.shardId)?.length ?? 0} records still owed)`);
            const { stream, shardId: inStream } = locate(shard.shardId);
            stream.source.trim(inStream);
            ledger.trimShard(shard.shardId);
            trimmed.add(shard.shardId);
            return;
          }
          default:
            return;
        }
      });
    }

    // A process's downstream goes down (its handler fails every call), and the process is stopped while it
    // is: in half the runs, drawn from a random of its own so that the rest of the run is as without it.
    const downstreamRandom = seededRandom(config.seed ^ 0xd0_3d0);
    if (enabled('downstream') && downstreamRandom.next() < 0.5) {
      const at = startAtMs + 4_000 + downstreamRandom.next() * (faultPhaseMs - 14_000 - startAtMs);
      const failForMs = 500 + downstreamRandom.next() * 3_500;
      const timeoutMs = 8_000 + downstreamRandom.next() * 7_000;
      const pick = downstreamRandom.next();
      scheduler.schedule(at, () => {
        const candidates = live().filter((worker) => !worker.clock.paused && !worker.overrunning && worker.overrunNextMs === null && worker.consumer.shards.length > 0);
        const victim = candidates[Math.floor(pick * candidates.length)];
        if (!victim || live().length <= 1) return;
        stats.faults++;
        victim.downstreamDown = true;
        log(`fault: ${victim.workerId}'s downstream is down: its handler fails every call; it is stopped in ${failForMs.toFixed(0)} ms`);
        scheduler.schedule(scheduler.now + failForMs, () => {
          if (!victim.alive || victim.stopping || victim.clock.paused || victim.overrunning || victim.overrunNextMs !== null) {
            victim.downstreamDown = false;
            return;
          }
          // Its storage is sound while it stops: the check is about the runtime, not a lost write.
          victim.plan.errorBeforeSend = 0;
          victim.plan.ambiguousAfterApply = 0;
          victim.plan.cutOff = false;
          pending.push(() => gracefulStop(victim, timeoutMs, true));
          scheduler.schedule(scheduler.now + 2_000, () => faultsOn() && pending.push(() => startWorker()));
        });
      });
    }

    // ---------------------------------------------------------------- the group's list of streams (multi-stream runs)

    plans.forEach((plan, i) => {
      const stream = streams[i] as SimStream;
      const { streamId } = stream;
      const list = (listed: boolean, forGood = false): void => {
        ledger.listStream(streamId, listed, forGood);
        if (forGood) stream.removedAtMs = scheduler.now;
        log(`streams: ${streamId} ${listed ? 'joins' : forGood ? 'leaves for good' : 'leaves'} the group's list`);
      };
      if (!enabled('streams')) return;
      if (plan.addAtMs !== null) scheduler.schedule(plan.addAtMs, () => list(true));
      if (plan.removeAtMs !== null) scheduler.schedule(plan.removeAtMs, () => list(false, plan.reAddAtMs === null));
      if (plan.reAddAtMs !== null) scheduler.schedule(plan.reAddAtMs, () => list(true));
      const fault = plan.listingFault;
      if (fault) {
        scheduler.schedule(fault.fromMs, () => {
          log(`fault: listings of stream ${streamId} fail for ${fault.durationMs.toFixed(0)} ms`);
          stream.source.failListingsFor(fault.durationMs);
          stream.listingFailsUntil = scheduler.now + fault.durationMs;
        });
      }
    });
    if (multi && enabled('streams')) {
      // A process cannot read the list for a while (shorter than the grace: the runtime keeps its last list).
      const listFaults = Math.floor(streamRandom.next() * 3);
      for (let n = 0; n < listFaults; n++) {
        const at = startAtMs + 3_000 + streamRandom.next() * (faultPhaseMs - 5_000 - startAtMs);
        const durationMs = 500 + streamRandom.next() * (graceMs / 3 - 500);
        const pick = streamRandom.next();
        scheduler.schedule(at, () => {
          const able = live().filter((worker) => worker.listedOnce);
          const victim = able[Math.floor(pick * able.length)];
          if (!victim) return;
          stats.faults++;
          victim.listFailsUntil = scheduler.now + durationMs;
          log(`fault: ${victim.workerId}'s streams() fails for ${durationMs.toFixed(0)} ms`);
        });
      }
    }

    await scheduler.advanceTo(faultPhaseMs, afterEach);

    // ---------------------------------------------------------------- quiet phase: faults stop, the stream drains

    for (const worker of workers) {
      worker.plan.errorBeforeSend = 0;
      worker.plan.ambiguousAfterApply = 0;
      worker.plan.cutOff = false;
      worker.storage.onLeaseWrite = null;
    }
    const quietFrom = scheduler.now;
    // A stream whose listing still fails holds back only its own shards; once it answers, they catch up.
    const listingFailsFor = Math.max(0, ...streams.map((stream) => stream.listingFailsUntil - quietFrom));
    const quietLimitMs = progressBoundMs * 1.5 + listingFailsFor;
    const waitingSince = new Map<string, number>();
    const lastProgress = new Map<string, { handed: number; at: number }>();
    const reported = new Set<string>();
    const exempt = (shardId: string): boolean => {
      // A corrupt lease stalls its shard and the shard's descendants until it is repaired; then they wait anew.
      const lineage = (id: string): string[] => [id, ...ledger.shard(id).parentShardIds.flatMap(lineage)];
      if (lineage(shardId).some((id) => corrupted.get(id) === Infinity)) return true;
      // A shard whose lease only the leader can create waits while its stream's listing fails; then anew.
      return ledger.leases.get(shardId) === undefined && locate(shardId).stream.listingFailsUntil > scheduler.now;
    };
    let drainedAfterMs = -1;
    while (scheduler.now - quietFrom <= quietLimitMs) {
      // Owed records, and records handed over that neither succeeded nor were given up yet.
      const owed = ledger.unfinished();
      if (owed.size === 0 && pendingStops.size === 0 && ![...corrupted.values()].includes(Infinity) && (rewinds?.settled() ?? true)) {
        drainedAfterMs = scheduler.now - quietFrom;
        break;
      }
      for (const [shardId, entries] of owed) {
        const shard = ledger.shard(shardId);
        const ready = shard.parentShardIds.every((parent) => ledger.done(parent, owed));
        const owners = holders(shardId).filter((worker) => !worker.stopping);
        const handed = ledger.handovers(shardId);
        const progress = lastProgress.get(shardId);
        if (!progress || progress.handed !== handed) lastProgress.set(shardId, { handed, at: scheduler.now });
        if (!ready || exempt(shardId)) {
          waitingSince.delete(shardId);
          lastProgress.set(shardId, { handed, at: scheduler.now });
          continue;
        }
        const since = waitingSince.get(shardId) ?? scheduler.now;
        waitingSince.set(shardId, since);
        const stalled = owners.length === 0 ? scheduler.now - since : scheduler.now - Math.max(since, lastProgress.get(shardId)?.at ?? since);
        if (stalled > progressBoundMs && !reported.has(shardId)) {
          reported.add(shardId);
          violate(
            'progress',
            `${shardId} owes ${entries.length} records and ${owners.length === 0 ? 'had no live holder' : `its holder ${owners.map((worker) => worker.workerId).join(', ')} handed nothing over`} for ${stalled.toFixed(0)} ms after faults stopped; ` +
              `lease ${describeLease(ledger.leases.get(shardId))}${shard.parentShardIds.map((parent) => `; parent ${parent}: ${describeLease(ledger.leases.get(parent))}`).join('')}`,
          );
        }
      }
      await scheduler.advance(500, afterEach);
    }

    // Exactly-once: a batch handed over whose commit was refused (its handler overran, its worker stopped or
    // died) is handed over again by the shard's next owner; give that its lease duration, then count.
    const uncommitted = (): boolean => ledger.records.some((entry, index) => (sink.get(index) ?? 0) === 0 && effectOwed(entry));
    for (const settleFrom = scheduler.now; config.exactlyOnce && uncommitted() && scheduler.now - settleFrom <= progressBoundMs; ) {
      await scheduler.advance(500, afterEach);
    }

    ledger.checkDelivery();
    ledger.checkHandled();
    ledger.checkAcknowledgedAtEnd();
    for (const worker of pendingStops) {
      violate('stop-deadline', `${worker.workerId}'s stop never returned (shards still pumping: [${worker.consumer.shards.join(', ')}])`);
    }

    // Balance across every stream (DESIGN 6.6): once the run drained, every eligible lease of a listed
    // stream is held by a live worker and the counts differ by at most one, soon after: the liveness bound,
    // a handover's drain, a few take ticks, and a shard sync for a child whose parent just ended.
    const eligible = (): string[] =>
      [...ledger.leases].flatMap(([leaseKey, lease]) => {
        const shard = ledger.shards.get(leaseKey);
        if (!lease || !shard || lease.checkpoint === Checkpoint.SHARD_END || corrupted.get(leaseKey) === Infinity || !ledger.isListed(shard.streamId)) return [];
        const waiting = lease.parentKeys.some((parent) => {
          const parentLease = ledger.leases.get(parent);
          return corrupted.get(parent) === Infinity || (parentLease != null && (parentLease.checkpoint !== Checkpoint.SHARD_END || hasRewindRequest(parentLease)));
        });
        return waiting ? [] : [leaseKey];
      });
    const balanceNow = (): { balanced: boolean; detail: string } => {
      const keys = eligible();
      const counts = live().map((worker) => ({ workerId: worker.workerId, held: keys.filter((leaseKey) => worker.consumer.coordinator.isHeld(leaseKey)).length }));
      const unheld = keys.filter((leaseKey) => holders(leaseKey).length === 0);
      const spread = counts.length === 0 ? 0 : Math.max(...counts.map((count) => count.held)) - Math.min(...counts.map((count) => count.held));
      return {
        balanced: unheld.length === 0 && spread <= 1,
        detail: `${keys.length} eligible leases, held ${counts.map((count) => `${count.workerId}:${count.held}`).join(' ')}${unheld.length > 0 ? `, unheld [${unheld.join(', ')}]` : ''}`,
      };
    };
    if (drainedAfterMs >= 0) {
      const balanceBy = Math.max(quietFrom + ownedBoundMs, scheduler.now) + LEASE_DURATION_MS / 2 + 4 * TAKE_INTERVAL_MS * 1.05 + shape.shardSyncIntervalMs * 1.05;
      while (!balanceNow().balanced && scheduler.now < balanceBy) await scheduler.advance(100, afterEach);
      const { balanced, detail } = balanceNow();
      if (!balanced) violate('balance', `not balanced ${(scheduler.now - quietFrom).toFixed(0)} ms after faults stopped: ${detail}`);
    }

    // A stream removed for good keeps no lease once its grace passed, counted from when faults stopped (a
    // leader elected since starts the grace again) and when its last corrupt lease was repaired.
    for (const stream of streams.filter((candidate) => candidate.removedAtMs !== null)) {
      const repaired = Math.max(-Infinity, ...ledger.shardsOf(stream.streamId).map((leaseKey) => corrupted.get(leaseKey) ?? -Infinity));
      const from = Math.max(stream.removedAtMs as number, quietFrom, repaired);
      const goneBy = from + progressBoundMs + graceMs * (1 + MAX_CLOCK_DRIFT) + refreshMs * 1.05;
      while (ledger.leasesOf(stream.streamId).length > 0 && scheduler.now < goneBy) await scheduler.advance(500, afterEach);
      const left = ledger.leasesOf(stream.streamId);
      if (left.length > 0) {
        violate(
          'removed-stream',
          `${left.length} leases of stream ${stream.streamId}, which left the group's list for good at ${(stream.removedAtMs as number).toFixed(0)} ms, remain ${(scheduler.now - (stream.removedAtMs as number)).toFixed(0)} ms later (grace ${graceMs.toFixed(0)} ms): ` +
            left.slice(0, 4).map((lease) => `${lease.leaseKey} (${describeLease(lease)})`).join('; '),
        );
      }
    }

    // Shut every live worker down for real, so nothing is left running; their stops are checked too.
    for (const worker of live()) gracefulStop(worker, 5_000);
    await scheduler.advance(12_000, afterEach);
    for (const worker of workers) worker.clock.kill();
    if (config.exactlyOnce) {
      // Counted once every worker stopped: a refused commit shows as 0, a repeated one as 2 or more.
      ledger.records.forEach((entry, index) => {
        const applied = sink.get(index) ?? 0;
        // A rewind that moved the lease back before the record replays its effect once more.
        if (applied > 1 + entry.rewinds || (applied === 0 && effectOwed(entry))) {
          violate('exactly-once', `the effect of record ${entry.partitionKey}#${entry.n} of ${entry.shardId} (${entry.position}) was applied ${applied} times`);
        }
      });
    }

    const owedRecords = ledger.records.filter((entry) => ledger.owes(entry));
    const depth = (shardId: string): number => {
      const shard = ledger.shard(shardId);
      return shard.parentShardIds.length === 0 ? 0 : 1 + Math.max(...shard.parentShardIds.map(depth));
    };
    return {
      seed: config.seed,
      shape,
      violations,
      replay: consumerReplayCommand(config),
      stats: {
        records: ledger.records.length,
        owed: owedRecords.length,
        delivered: owedRecords.filter((entry) => entry.firstHandedAtMs !== null).length,
        replays: ledger.records.reduce((sum, entry) => sum + Math.max(0, entry.handovers - 1), 0),
        poison: ledger.records.filter((entry) => entry.poison).length,
        deadLettered: ledger.records.filter((entry) => entry.deadLetteredAtMs !== null).length,
        skipped: ledger.records.filter((entry) => entry.skippedAtMs !== null).length,
        batches: stats.batches,
        generations: Math.max(...[...ledger.shards.keys()].map(depth)),
        shards: ledger.shards.size,
        streams: streams.length,
        faults: stats.faults,
        drainedAfterMs,
      },
    };
  } finally {
    process.off('unhandledRejection', onUnhandled);
  }
}
