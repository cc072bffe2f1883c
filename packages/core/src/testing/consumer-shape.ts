/**
 * What a consumer simulation run is before it runs: the config a caller gives, the shape drawn from the
 * seed (workers, shards, policies, a multi-stream group's streams), the outcome a run returns, and the
 * command that replays it. Kept apart from the run so that what a seed decides can be read without how
 * the run plays it out.
 */
import { seededRandom } from '../clock.js';
import type { CheckpointPolicy } from '../consumer/options.js';
import type { ConsumerUnsafe } from '../unsafe.js';
import type { ConsumerGuarantee } from './consumer-checks.js';
import { rewindsDrawn, rewindShapeOf, type RewindShape } from './consumer-rewinds.js';

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
  /** Which faults may happen. Default: all but `slowListings`, which only `true` turns on (the fixed seeds keep their schedules). */
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
  | 'downstream' // a process's handler fails every call (its downstream is down), and the process is stopped meanwhile
  | 'slowListings'; // a process's lease listings stall while its heartbeats go on (only when `faults.slowListings` is true)

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
  ['drainCutsEnd', '--unsafe-drain-cuts-end'],
  ['childCreateEndsReader', '--unsafe-child-create-ends-reader'],
  ['rewindStartSkipsParents', '--unsafe-rewind-start-skips-parents'],
  ['crossStreamSync', '--unsafe-cross-stream-sync'],
  ['formerOnStaleList', '--unsafe-former-on-stale-list'],
  ['birthForgetsUnreadable', '--unsafe-birth-forgets-unreadable'],
  ['checkpointAfterRewind', '--unsafe-checkpoint-after-rewind'],
  ['deleteBeforeParents', '--unsafe-delete-before-parents'],
  ['goneBeforeParents', '--unsafe-gone-before-parents'],
  ['unstartedLeftAlone', '--unsafe-unstarted-left-alone'],
  ['lateRecordJudged', '--unsafe-late-record-judged'],
  ['releaseWithoutRetry', '--unsafe-release-without-retry'],
  ['resumeHintAnyCheckpoint', '--unsafe-hint-any-checkpoint'],
  ['letGoForgetsUnreadable', '--unsafe-let-go-forgets-unreadable'],
  ['stopHandoverKeeps', '--unsafe-stop-handover-keeps'],
  ['stopWaitsForListing', '--unsafe-stop-waits-for-listing'],
  ['adoptedRequestIgnored', '--unsafe-adopted-request-ignored'],
  ['rewindRequestedAgain', '--unsafe-rewind-requested-again'],
  ['rewindBehindUnreadable', '--unsafe-rewind-behind-unreadable'],
  ['drainAfterTakeTick', '--unsafe-drain-after-take-tick'],
  ['stopSkipsHandoffs', '--unsafe-stop-skips-handoffs'],
  ['handoverToLeaving', '--unsafe-handover-to-leaving'],
  ['rewindUnknownReadsOn', '--unsafe-rewind-unknown-reads-on'],
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
export function rewindOf(config: ConsumerSimulationConfig, drawn: ConsumerShape, multiStream: boolean): RewindShape | null {
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
    config.faults?.slowListings === true ? '--slow-listings' : '',
    ...UNSAFE_FLAGS.map(([name, flag]) => (config.unsafe?.[name] ? flag : '')),
  ].filter(Boolean);
  return `pnpm sim ${flags.join(' ')} --trace`;
}
