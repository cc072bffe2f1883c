/**
 * Rewinds in the consumer simulation (DESIGN section 4, "Rewinding"): an operator's tool, on a process of
 * its own with a faulty view of the store, plans, applies and waits for rewinds of the live group while its
 * workers run, reshard, hand over and crash. The tool rewinds to a time, to the stream's start, to a
 * position of one lease, or forward to now, every lease or a selection (a few leases, or a stream of a
 * multi-stream group). The workers' stores have a change feed or none (owners then learn of a request from
 * the mark on the leader record), and their handlers now and then keep a batch's context and checkpoint
 * through it a while later, as a handler that batches its writes does: after a rewind, no such context of
 * before may move the rewound checkpoint forward again.
 *
 * The ledger (`consumer-checks.ts`) judges every write of the rewinds; this module checks that each
 * `awaitRewind` completes once faults stop.
 */
import { seededRandom, type Random } from '../clock.js';
import type { BatchContext } from '../consumer/options.js';
import { InvalidInputError } from '../errors.js';
import { applyRewind, awaitRewind, planRewind, type RewindSelection, type RewindTarget } from '../rewind.js';
import { Checkpoint, type Storage } from '../storage.js';
import { withUnsafe, type ConsumerUnsafe } from '../unsafe.js';
import type { ConsumerGuarantee, ConsumerLedger } from './consumer-checks.js';
import { FaultyStorage } from './faulty-storage.js';
import { VirtualClock, type VirtualScheduler } from './virtual-time.js';

/** One rewind of a run: when, to where, of which leases; the rest is drawn from the group as it is then. */
export interface RewindDraw {
  /** When the tool starts it, as a share of the fault phase. */
  readonly at: number;
  readonly target: 'time' | 'trim-horizon' | 'position' | 'latest';
  /** Every lease, a few leases, or (in a multi-stream group) one stream's; a position always names one lease. */
  readonly selection: 'all' | 'some' | 'stream';
  /** Draws for the leases, the stream and the time. */
  readonly pick: number;
  readonly extra: number;
}

/** The rewinds of a run, and whether its workers' stores have a change feed. */
export interface RewindShape {
  readonly changeFeed: boolean;
  readonly rewinds: readonly RewindDraw[];
  /** The share of batches whose handler keeps its context and checkpoints through it later. */
  readonly lateCheckpointRate: number;
}

/** Whether a seed's run rewinds when the config does not say: a quarter of the seeds (a random of their own). */
export function rewindsDrawn(seed: number): boolean {
  return seededRandom(seed ^ 0x2e_d1e5).next() < 0.25;
}

/** A run's rewinds, drawn from a random of their own, so that the rest of the run is drawn as without them. */
export function rewindShapeOf(seed: number, multiStream: boolean): RewindShape {
  const random = seededRandom(seed ^ 0x7e_0a1d);
  const count = 1 + Math.floor(random.next() * 3);
  const changeFeed = random.next() < 0.5;
  const rewinds = Array.from({ length: count }, (): RewindDraw => {
    const roll = random.next();
    const target = roll < 0.35 ? 'time' : roll < 0.55 ? 'trim-horizon' : roll < 0.8 ? 'position' : 'latest';
    const scope = random.next();
    const selection = target === 'position' ? 'some' : scope < 0.5 ? 'all' : multiStream && scope < 0.75 ? 'stream' : 'some';
    return { at: 0.2 + random.next() * 0.7, target, selection, pick: random.next(), extra: random.next() };
  });
  return { changeFeed, rewinds: rewinds.sort((a, b) => a.at - b.at), lateCheckpointRate: 0.2 + random.next() * 0.3 };
}

/** The same store seen through a client without a change feed, as DynamoDB is. */
export function withoutChangeFeed<S extends Storage>(storage: S): S {
  return new Proxy(storage, {
    get: (target, name) => {
      if (name === 'subscribe') return undefined;
      const value: unknown = Reflect.get(target, name, target);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/** What the rewind tool needs of the simulated world. */
export interface RewindWorld {
  readonly shape: RewindShape;
  readonly seed: number;
  readonly group: string;
  readonly scheduler: VirtualScheduler;
  /** The shared store, under every process's faulty view. */
  readonly storage: Storage;
  readonly ledger: ConsumerLedger;
  readonly faultPhaseMs: number;
  /** Once faults stopped, how long every rewind may take to complete. */
  readonly completeWithinMs: number;
  readonly wallOf: (ms: number) => number;
  readonly log: (line: string) => void;
  readonly violate: (guarantee: ConsumerGuarantee, detail: string) => void;
  /** The simulation's unsafe switches: the tool reads its own (`rewindRequestedAgain`, `rewindBehindUnreadable`, `unstartedLeftAlone`). */
  readonly unsafe?: ConsumerUnsafe | undefined;
}

/** The tool's runs under way, and the handlers' late checkpoints. */
export interface SimulatedRewinds {
  /** Whether every rewind the tool began has returned (completed, timed out, or given up). */
  settled(): boolean;
  /** A handler finished a batch: now and then it keeps the batch's context and checkpoints through it later. */
  afterBatch(workerIndex: number, clock: VirtualClock, context: BatchContext, log: (line: string) => void): void;
}

/** Schedules the run's rewinds on the tool's process. */
export function scheduleRewinds(world: RewindWorld): SimulatedRewinds {
  const { shape, scheduler, ledger, group, log, violate } = world;
  const clock = new VirtualClock(scheduler);
  const random = seededRandom(world.seed ^ 0x70_01);
  // The tool's view of the store: slow now and then, failing and ambiguous while faults last.
  const plan = { latencyMs: (r: Random) => r.next() * 20, errorBeforeSend: 0.02, ambiguousAfterApply: 0.02, cutOff: false };
  const storage = new FaultyStorage(world.storage, clock, random, plan);
  scheduler.schedule(world.faultPhaseMs, () => {
    plan.errorBeforeSend = 0;
    plan.ambiguousAfterApply = 0;
  });
  const deadline = world.faultPhaseMs + world.completeWithinMs;
  let running = 0;

  /** The target and the leases, from the group as the simulation knows it now; `undefined` when there is nothing to rewind. */
  const choose = (draw: RewindDraw): { to: RewindTarget; select: RewindSelection | undefined; described: string } | undefined => {
    const leases = [...ledger.leases.entries()].filter(([, lease]) => lease !== null && lease !== undefined).map(([leaseKey]) => leaseKey).sort();
    if (leases.length === 0) return undefined;
    const one = leases[Math.floor(draw.pick * leases.length)] as string;
    let select: RewindSelection | undefined;
    if (draw.selection === 'some') {
      const count = draw.target === 'position' ? 1 : 1 + Math.floor(draw.extra * Math.min(3, leases.length));
      const start = leases.indexOf(one);
      select = { leaseKeys: Array.from({ length: count }, (_, i) => leases[(start + i) % leases.length] as string) };
    } else if (draw.selection === 'stream') {
      const streamId = ledger.shard(one).streamId;
      select = streamId === '' ? undefined : { streamId };
    }
    const scope = select === undefined ? 'every lease' : select.streamId !== undefined ? `stream ${select.streamId}` : `[${(select.leaseKeys ?? []).join(', ')}]`;
    switch (draw.target) {
      case 'time': {
        const ms = world.wallOf(Math.max(0, scheduler.now - draw.extra * 25_000));
        return { to: { time: ms }, select, described: `${scope} to ${Checkpoint.atTimestamp(ms)}` };
      }
      case 'position': {
        const records = ledger.shard(one).records.map((index) => ledger.records[index]?.position as string);
        const position = records[Math.floor(draw.extra * records.length)];
        if (position === undefined) return { to: 'trim-horizon', select: { leaseKeys: [one] }, described: `[${one}] to trim-horizon (it has no record)` };
        return { to: { position }, select: { leaseKeys: [one] }, described: `[${one}] to position ${position}` };
      }
      default:
        return { to: draw.target, select, described: `${scope} to ${draw.target}` };
    }
  };

  const rewind = async (draw: RewindDraw, n: number): Promise<void> => {
    const chosen = choose(draw);
    if (!chosen) return;
    for (let attempt = 1; ; attempt++) {
      try {
        const planned = await planRewind(withUnsafe({ storage, group, to: chosen.to, select: chosen.select, clock, random }, world.unsafe));
        ledger.rewindPlanned(planned.rewindId, planned.to);
        log(`rewind ${n} (${planned.rewindId}): ${chosen.described}: ${planned.moves.map((move) => `${move.leaseKey} ${move.how}`).join(', ') || 'nothing to move'}`);
        const applied = await applyRewind(planned, withUnsafe({ storage, clock, random }, world.unsafe));
        const progress = await awaitRewind(applied, withUnsafe({ storage, clock, timeoutMs: Math.max(1, deadline - scheduler.now), pollIntervalMs: 500 }, world.unsafe));
        log(`rewind ${n} (${planned.rewindId}): ${progress.complete ? 'complete' : 'incomplete'} after ${progress.elapsedMs.toFixed(0)} ms`);
        if (!progress.complete) {
          const pending = progress.leases.filter((lease) => lease.state === 'pending').map((lease) => `${lease.leaseKey} (${lease.how})`);
          violate('rewind', `rewind ${planned.rewindId} (${chosen.described}) had not completed ${(scheduler.now - world.faultPhaseMs).toFixed(0)} ms after faults stopped: pending ${pending.join(', ')}`);
        }
        return;
      } catch (error) {
        // A lease named was deleted meanwhile (its shard finished), or the time is no longer behind the tool's clock.
        if (error instanceof InvalidInputError) {
          log(`rewind ${n}: ${chosen.described} refused: ${error.message}`);
          return;
        }
        log(`rewind ${n}: ${chosen.described} failed (attempt ${attempt}): ${error instanceof Error ? error.message : String(error)}`);
        // What was written is safe as it is; the operator runs the rewind again, and once faults stop it goes through.
        if (scheduler.now > deadline) {
          violate('rewind', `the rewind of ${chosen.described} could not be written ${(scheduler.now - world.faultPhaseMs).toFixed(0)} ms after faults stopped: ${String(error)}`);
          return;
        }
        await clock.sleep(500 + random.next() * 1_500);
      }
    }
  };

  shape.rewinds.forEach((draw, i) => {
    scheduler.schedule(draw.at * world.faultPhaseMs, () => {
      running++;
      void rewind(draw, i + 1)
        .catch((error: unknown) => violate('rewind', `the rewind tool failed: ${String(error)}`))
        .finally(() => running--);
    });
  });

  const lateRandoms = new Map<number, Random>();
  return {
    settled: () => running === 0,
    afterBatch: (workerIndex, workerClock, context, workerLog) => {
      let r = lateRandoms.get(workerIndex);
      if (!r) {
        r = seededRandom(((world.seed * 41 + workerIndex) ^ 0x1a7e_c0de) >>> 0);
        lateRandoms.set(workerIndex, r);
      }
      if (r.next() >= shape.lateCheckpointRate) return;
      const { shardId, fencingToken, position } = context;
      void workerClock.sleep(100 + r.next() * 3_000).then(
        () =>
          context.checkpoint(position).then(
            () => workerLog(`late checkpoint of ${shardId}@${fencingToken} at ${position} stored`),
            (error: unknown) => workerLog(`late checkpoint of ${shardId}@${fencingToken} at ${position} refused: ${error instanceof Error ? error.message : String(error)}`),
          ),
        () => undefined,
      );
    },
  };
}
