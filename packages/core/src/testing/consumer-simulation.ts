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
 *
 * This file holds the run loop: it draws the world's timeline, sets up the store, the streams, the records
 * and the resharding, lets the processes (`consumer-processes.ts`) and the faults (`consumer-faults.ts`)
 * play out, then lets the group drain and checks what must hold at the end. The shape a seed draws is in
 * `consumer-shape.ts`, the running checks in `consumer-checks.ts` (the entries they keep in
 * `consumer-ledger-entries.ts`), the rewinds in `consumer-rewinds.ts`.
 */
import { seededRandom } from '../clock.js';
import type { InitialPosition } from '../consumer/options.js';
import { MemorySource } from '../memory/memory-source.js';
import { MemoryStorage, type MemoryWriteEvent } from '../memory/memory-storage.js';
import { streamLeaseKey } from '../stream-keys.js';
import { hasRewindRequest } from '../rewind.js';
import { Checkpoint } from '../storage.js';
import { ConsumerLedger, describeLease, type ConsumerGuarantee, type RecordEntry, type StartingPoint } from './consumer-checks.js';
import { scheduleFaults, scheduleStreamList } from './consumer-faults.js';
import { simulatedProcesses } from './consumer-processes.js';
import { scheduleRewinds } from './consumer-rewinds.js';
import {
  consumerReplayCommand,
  consumerShapeOf,
  multiStreamShapeOf,
  rewindOf,
  type ConsumerFaultKind,
  type ConsumerShape,
  type ConsumerSimulationConfig,
  type ConsumerSimulationResult,
  type ConsumerViolation,
} from './consumer-shape.js';
import {
  LEASE_DURATION_MS,
  GROUP,
  MAX_CLOCK_DRIFT,
  RENEW_INTERVAL_MS,
  TAKE_INTERVAL_MS,
  type SimRun,
  type SimStream,
  type StreamPlan,
} from './consumer-world.js';
import { VIRTUAL_EPOCH_MS, VirtualScheduler } from './virtual-time.js';

export {
  consumerReplayCommand,
  consumerShapeOf,
  consumerUnsafeFlags,
  multiStreamShapeOf,
  type ConsumerFaultKind,
  type ConsumerShape,
  type ConsumerSimulationConfig,
  type ConsumerSimulationResult,
  type ConsumerViolation,
  type InitialPositionKind,
  type MultiStreamShape,
  type PoisonShape,
  type StreamShape,
} from './consumer-shape.js';
export type { ConsumerGuarantee } from './consumer-checks.js';

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
  const enabled = (kind: ConsumerFaultKind): boolean => config.faults?.[kind] ?? kind !== 'slowListings';
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
    // The sink of exactly-once runs: each record's effect, counted when the lease write that carries it
    // applies (in the store, atomically with it, whatever the writer later hears of the outcome).
    const sink = new Map<number, number>();
    const ledger = new ConsumerLedger({
      start,
      now: () => scheduler.now,
      wallOf,
      violate,
      deadLetterConfigured: poisonPolicy?.deadLetter ?? false,
      // The leader keeps a removed stream's leases for the grace on its own clock: at least this long.
      removedStreamGraceMs: graceMs / (1 + MAX_CLOCK_DRIFT) - 1,
      effectCommitted: config.exactlyOnce ? (entry) => (sink.get(entry.index) ?? 0) > 0 : undefined,
    });
    // Poison records drawn apart from the world's timeline, so that the rest of the run is as without them.
    const poisonRandom = seededRandom(config.seed ^ 0x5ee_d1e);
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
      ? scheduleRewinds({ shape: shape.rewind, seed: config.seed, group: GROUP, scheduler, storage: memory, ledger, faultPhaseMs, completeWithinMs: progressBoundMs, wallOf, log, violate, unsafe: config.unsafe })
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

    // ---------------------------------------------------------------- the processes and the fault schedule

    const run: SimRun = {
      config,
      shape,
      multi,
      enabled,
      faultPhaseMs,
      startAtMs,
      random,
      streamRandom,
      scheduler,
      trace,
      log,
      violate,
      stats,
      ledger,
      memory,
      streams,
      keyOf,
      locate,
      initialPosition,
      poisonPolicy,
      pendingEffects,
      skipped,
      rewinds,
      refreshMs,
      graceMs,
      corrupted: new Map(),
      pending: [],
    };
    const processes = simulatedProcesses(run);
    const { workers, live, holders, startWorker, gracefulStop, pendingStops } = processes;
    const { pending, corrupted } = run;
    const afterEach = (): void => {
      while (pending.length > 0) (pending.shift() as () => void)();
    };
    for (let i = 0; i < shape.workers; i++) {
      scheduler.schedule(startAtMs + random.next() * 400, () => pending.push(() => startWorker()));
    }
    scheduleFaults(run, processes);
    scheduleStreamList(run, processes, plans);

    await scheduler.advanceTo(faultPhaseMs, afterEach);

    // ---------------------------------------------------------------- quiet phase: faults stop, the stream drains

    for (const worker of workers) {
      worker.plan.errorBeforeSend = 0;
      worker.plan.ambiguousAfterApply = 0;
      worker.plan.cutOff = false;
      worker.plan.listingStallMs = 0;
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
    // A listed stream the leader has not created a lease of yet: with LATEST its start is pinned when it
    // is, so nothing of it counts as owed before; the run has not drained while one waits (its listing
    // failing aside), and it must get its leases within the progress bound.
    const unborn = (): SimStream[] =>
      streams.filter((stream) => ledger.isListed(stream.streamId) && ledger.birthWallMsOf(stream.streamId) === null && stream.listingFailsUntil <= scheduler.now);
    const unbornReported = new Set<string>();
    while (scheduler.now - quietFrom <= quietLimitMs) {
      // Owed records, and records handed over that neither succeeded nor were given up yet.
      const owed = ledger.unfinished();
      const waitingForBirth = unborn();
      for (const stream of waitingForBirth) {
        const since = Math.max(quietFrom, stream.listingFailsUntil);
        if (scheduler.now - since > progressBoundMs && !unbornReported.has(stream.streamId)) {
          unbornReported.add(stream.streamId);
          violate('progress', `stream ${stream.streamId || '(the only one)'} is in the group's list and has no lease ${(scheduler.now - since).toFixed(0)} ms after faults stopped`);
        }
      }
      if (owed.size === 0 && waitingForBirth.length === 0 && pendingStops.size === 0 && ![...corrupted.values()].includes(Infinity) && (rewinds?.settled() ?? true)) {
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
