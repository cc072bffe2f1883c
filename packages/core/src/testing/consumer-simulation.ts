/**
 * The consumer simulation: real `Consumer` instances (one per simulated process, each with its own
 * drifting clock, seeded randomness and faulty view of one shared `MemoryStorage`), one `MemorySource`
 * that splits, merges, lags, fails reads and trims shards, virtual time, and a seeded schedule of faults.
 * The guarantees of DESIGN section 6 that the runtime adds to the lease algorithm (at-least-once, order
 * across resharding, fencing of handlers, progress, a bounded stop) are checked as the run goes and at
 * its end; a violation names the seed, the moment and the command that replays it exactly.
 */
import { seededRandom, type Random } from '../clock.js';
import { Consumer } from '../consumer/consumer.js';
import type { BatchContext, BatchResponse, CheckpointPolicy, ConsumerUnsafe, FailedRecords, InitialPosition } from '../consumer/options.js';
import { MemorySource } from '../memory/memory-source.js';
import { MemoryStorage, type MemoryWriteEvent } from '../memory/memory-storage.js';
import type { SourceRecord } from '../source.js';
import type { CreateLeaseOptions, DeleteResult, LeaseRecord, NewLease, WriteResult } from '../storage.js';
import { ConsumerLedger, describeLease, type ConsumerGuarantee, type RecordEntry, type StartingPoint } from './consumer-checks.js';
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
  | 'trim'; // a closed shard leaves the stream

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
];

/** The command-line flag of each unsafe switch, for `pnpm sim --consumer`. */
export const consumerUnsafeFlags: ReadonlyArray<readonly [keyof ConsumerUnsafe, string]> = UNSAFE_FLAGS;

/** Draws a run's shape from its seed: 2-5 workers, 1-4 shards, a few hundred records, 3-5 reshards. */
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

/** The command that replays a run. */
export function consumerReplayCommand(config: ConsumerSimulationConfig): string {
  const flags = [
    '--consumer',
    `--seed ${config.seed}`,
    config.workers !== undefined ? `--workers ${config.workers}` : '',
    config.shards !== undefined ? `--shards ${config.shards}` : '',
    config.initialPosition !== undefined ? `--initial-position ${config.initialPosition}` : '',
    config.faultPhaseMs !== undefined ? `--fault-ms ${config.faultPhaseMs}` : '',
    config.exactlyOnce ? '--exactly-once' : '',
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
  const shape: ConsumerShape = {
    ...drawn,
    workers: config.workers ?? drawn.workers,
    shards: config.shards ?? drawn.shards,
    initialPosition: config.initialPosition ?? drawn.initialPosition,
  };
  const enabled = (kind: ConsumerFaultKind): boolean => config.faults?.[kind] ?? true;
  if (!enabled('listLag')) shape.listLagMs = 0;
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

    const startAtMs = 1_000 + Math.floor(random.next() * 3_000);
    const preBirthReshard = random.next() < 0.2;
    const reshardTimes = Array.from({ length: shape.reshards }, (_, i) => {
      const from = startAtMs + 4_000;
      const span = (faultPhaseMs - 6_000 - from) / shape.reshards;
      return from + span * (i + random.next() * 0.8);
    });
    // AT_TIMESTAMP: a moment around the start, never before a reshard that happens before the group starts.
    const atTimestampMs = wallOf(
      Math.max(preBirthReshard ? startAtMs - 400 : 0, startAtMs - 2_000 + random.next() * 5_000),
    );
    const start: StartingPoint =
      shape.initialPosition === 'AT_TIMESTAMP' ? { kind: 'AT_TIMESTAMP', timestampMs: atTimestampMs } : { kind: shape.initialPosition };
    const initialPosition: InitialPosition =
      shape.initialPosition === 'AT_TIMESTAMP' ? { atTimestamp: atTimestampMs } : shape.initialPosition;

    const poisonPolicy = typeof shape.onHandlerError === 'object' ? shape.onHandlerError : null;
    const ledger = new ConsumerLedger({ start, now: () => scheduler.now, wallOf, violate, deadLetterConfigured: poisonPolicy?.deadLetter ?? false });
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
    // A shard trimmed from the stream may take with it records whose effects never committed: retention, not the runtime.
    const effectOwed = (entry: RecordEntry): boolean =>
      ledger.required(entry) && ledger.shard(entry.shardId).trimmedAtMs === null && !skipped.has(`${entry.shardId}@${entry.position}`);
    const memory = new MemoryStorage({
      onWrite: (event) => {
        ledger.onWrite(event);
        applyEffects(event);
      },
    });
    const source = new MemorySource(shape.shards, {
      clock: sourceClock,
      batchSize: 10,
      idleDelayMs: 1_000,
      listLagMs: shape.listLagMs,
      random: seededRandom(Math.floor(random.next() * 2 ** 32)),
    });
    for (const shard of await source.listShards()) ledger.addShard(shard.shardId, [], false);

    // ---------------------------------------------------------------- records arrive all along

    const partitionKeys = Array.from({ length: shape.partitionKeys }, (_, i) => `key-${i}`);
    let recordsLeft = shape.records;
    for (let at = random.next() * 500; recordsLeft > 0 && at < faultPhaseMs; at += 100 + random.next() * ((faultPhaseMs / shape.records) * 6)) {
      const burst = Math.min(recordsLeft, 1 + Math.floor(random.next() * 6));
      recordsLeft -= burst;
      const keys = Array.from({ length: burst }, () => partitionKeys[Math.floor(random.next() * partitionKeys.length)] as string);
      scheduler.schedule(at, () => {
        for (const partitionKey of keys) {
          const shardId = source.shardFor(partitionKey);
          const entry = ledger.records.length;
          const position = source.put(partitionKey, String(entry), shardId);
          const poison = poisonPolicy !== null && poisonRandom.next() < poisonPolicy.poisonRate;
          ledger.addRecord(partitionKey, shardId, position, wallOf(scheduler.now), poison);
        }
      });
    }

    // ---------------------------------------------------------------- resharding over generations

    /** The shards the last reshard made: the next one works on them, so that lineages grow deep. */
    let newest: string[] = [...ledger.shards.keys()];
    const reshard = (draw: { op: number; pick: number }): void => {
      const open = [...ledger.shards.values()].filter((shard) => shard.closedAtMs === null).map((shard) => shard.shardId);
      const pairs = source.adjacentOpenShards();
      const recentPairs = pairs.filter(([a, b]) => newest.includes(a) || newest.includes(b));
      const wantMerge = open.length >= 6 || (open.length > 1 && draw.op < 0.45);
      const candidates = recentPairs.length > 0 ? recentPairs : pairs;
      if (wantMerge && candidates.length > 0) {
        const [a, b] = candidates[Math.floor(draw.pick * candidates.length)] as [string, string];
        const child = source.merge(a, b);
        ledger.closeShard(a);
        ledger.closeShard(b);
        ledger.addShard(child, [a, b], true);
        newest = [child];
        log(`reshard: merged ${a} and ${b} into ${child}`);
        return;
      }
      const recent = open.filter((shardId) => newest.includes(shardId));
      const from = recent.length > 0 ? recent : open;
      const parent = from[Math.floor(draw.pick * from.length)] as string;
      const children = source.split(parent);
      ledger.closeShard(parent);
      for (const child of children) ledger.addShard(child, [parent], true);
      newest = children;
      log(`reshard: split ${parent} into ${children.join(' and ')}`);
    };
    if (preBirthReshard) {
      const draw = { op: random.next(), pick: random.next() };
      scheduler.schedule(startAtMs - 500, () => reshard(draw));
    }
    for (const at of reshardTimes) {
      const draw = { op: random.next(), pick: random.next() };
      scheduler.schedule(at, () => reshard(draw));
    }

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

      // A poison record fails every time, on every worker: thrown, or reported after the records before it were done.
      const poisonAt = records.findIndex((record) => ledger.recordAt(record.position)?.poison === true);
      if (poisonPolicy && poisonAt >= 0) {
        const poisoned = records[poisonAt] as SourceRecord;
        await clock.sleep(5 + r.next() * 20);
        resumed('before failing on a poison record');
        if (r.next() < poisonPolicy.reportRate) {
          succeed(records.slice(0, poisonAt));
          if (config.exactlyOnce && poisonAt > 0) await commit(records.slice(0, poisonAt), (records[poisonAt - 1] as SourceRecord).position);
          return { failedAt: poisoned.position, error: new Error(`poison record at ${poisoned.position} of ${shardId}`) };
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
        throw new Error(`injected handler failure on ${batchKey}`);
      }

      const overrunMs = worker.overrunNextMs;
      if (overrunMs !== null) {
        // Runs past its lease and never looks at its signal.
        worker.overrunNextMs = null;
        log(`${worker.workerId}'s handler of ${shardId}@${fencingToken} overruns for ${overrunMs.toFixed(0)} ms`);
        await clock.sleep(overrunMs);
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
      const processSource = new ProcessSource(source, clock, workerRandom, {
        latencyMs: (r) => (enabled('storage') ? r.next() * 10 : 0),
        withholdChildShards: () => childShardsRandom.next() < 1 / 3,
        onBatch: trace ? (shardId, batch) => batch.kind === 'end' && log(`${workerId} read the end of ${shardId}`) : undefined,
      });
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
      const consumer = new Consumer({
        group: GROUP,
        source: processSource,
        storage,
        workerId,
        clock,
        random: workerRandom,
        initialPosition,
        checkpointing: shape.checkpointing,
        onHandlerError,
        shardSyncIntervalMs: shape.shardSyncIntervalMs,
        lease: { leaseDurationMs: LEASE_DURATION_MS, takeIntervalMs: TAKE_INTERVAL_MS, maxClockDrift: MAX_CLOCK_DRIFT },
        metrics: false,
        unsafe: config.unsafe,
        processBatch: (records, context) => handle(self.worker as SimWorker, records, context),
      });
      // Its own seed, so that the handler's and the runtime's draws are those of a run without it.
      const deadLetterRandom = seededRandom(((config.seed * 31 + index) ^ 0xdead_1e77) >>> 0);
      const worker: SimWorker = { index, workerId, clock, plan, storage, consumer, handlerRandom, deadLetterRandom, alive: true, stopping: false, overrunNextMs: null, failures: new Map() };
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
        consumer.on('handler-failed', ({ shardId, attempt }) => log(`${workerId}'s handler of ${shardId} failed (attempt ${attempt})`));
        consumer.on('shard-stopped', ({ shardId, error }) => log(`${workerId} stopped ${shardId}: ${error.message}`));
        consumer.on('leader-elected', ({ term }) => log(`${workerId} leads term ${term}`));
        consumer.on('leader-demoted', ({ term }) => log(`${workerId} no longer leads term ${term}`));
        consumer.on('shard-sync', ({ created, deleted }) => {
          if (created.length + deleted.length > 0) log(`${workerId} shard sync: created [${created.join(', ')}] deleted [${deleted.join(', ')}]`);
        });
        consumer.on('error', ({ error, operation }) => log(`${workerId} error in ${operation}: ${error.message}`));
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
    const gracefulStop = (worker: SimWorker, timeoutMs: number): void => {
      worker.stopping = true;
      pendingStops.add(worker);
      const began = scheduler.now;
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
        log(`${worker.workerId} stopped`);
        worker.alive = false;
        worker.clock.kill();
      });
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
            if (draw.variant < 0.5) {
              log(`fault: the next read of ${shardId} fails`);
              source.failNextRead(shardId);
            } else {
              const durationMs = Math.min(1_000 + draw.duration * 12_000, faultPhaseMs - scheduler.now);
              log(`fault: reads of ${shardId} fail for ${durationMs.toFixed(0)} ms`);
              source.failReadsFor(shardId, durationMs);
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
            source.trim(shard.shardId);
            ledger.trimShard(shard.shardId);
            trimmed.add(shard.shardId);
            return;
          }
          default:
            return;
        }
      });
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
    // A shard owed records must have a live holder within the lease liveness bound of simulate() (DESIGN
    // 6.6), plus a shard sync and a leader failover when its lease has yet to be created.
    const ownedBoundMs = LEASE_DURATION_MS * (1 + MAX_CLOCK_DRIFT) + 3 * TAKE_INTERVAL_MS * 1.05 + RENEW_INTERVAL_MS + 3_500;
    const progressBoundMs = ownedBoundMs + LEASE_DURATION_MS + shape.shardSyncIntervalMs * 1.05;
    const quietLimitMs = progressBoundMs * 1.5;
    const waitingSince = new Map<string, number>();
    const lastProgress = new Map<string, { handed: number; at: number }>();
    const reported = new Set<string>();
    const exempt = (shardId: string): boolean => {
      // A corrupt lease stalls its shard and the shard's descendants until it is repaired; then they wait anew.
      const lineage = (id: string): string[] => [id, ...ledger.shard(id).parentShardIds.flatMap(lineage)];
      return lineage(shardId).some((id) => {
        return corrupted.get(id) === Infinity;
      });
    };
    let drainedAfterMs = -1;
    while (scheduler.now - quietFrom <= quietLimitMs) {
      // Owed records, and records handed over that neither succeeded nor were given up yet.
      const owed = ledger.unfinished();
      if (owed.size === 0 && pendingStops.size === 0 && ![...corrupted.values()].includes(Infinity)) {
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

    // Shut every live worker down for real, so nothing is left running; their stops are checked too.
    for (const worker of live()) gracefulStop(worker, 5_000);
    await scheduler.advance(12_000, afterEach);
    for (const worker of workers) worker.clock.kill();
    if (config.exactlyOnce) {
      // Counted once every worker stopped: a refused commit shows as 0, a repeated one as 2 or more.
      ledger.records.forEach((entry, index) => {
        const applied = sink.get(index) ?? 0;
        if (applied > 1 || (applied === 0 && effectOwed(entry))) {
          violate('exactly-once', `the effect of record ${entry.partitionKey}#${entry.n} of ${entry.shardId} (${entry.position}) was applied ${applied} times`);
        }
      });
    }

    const owedRecords = ledger.records.filter((entry) => ledger.required(entry));
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
        faults: stats.faults,
        drainedAfterMs,
      },
    };
  } finally {
    process.off('unhandledRejection', onUnhandled);
  }
}
