/**
 * The simulated processes of a consumer simulation run: each a real `Consumer` with its own drifting
 * clock, seeded randomness and faulty view of the shared store, and the simulated user code it runs (a
 * handler that checks every hand-over, works a while and sometimes fails or overruns; a dead-letter
 * destination; a `streams` function in multi-stream runs). Starting and stopping them lives here too, with
 * the checks on a stop's deadline, because the fault schedule and the run loop both start and stop them.
 */
import { seededRandom, type Random } from '../clock.js';
import { Consumer } from '../consumer/consumer.js';
import type { BatchContext, BatchResponse, FailedRecords, StreamSpec } from '../consumer/options.js';
import { withUnsafe } from '../unsafe.js';
import type { SourceRecord } from '../source.js';
import { Checkpoint } from '../storage.js';
import { withoutChangeFeed } from './consumer-rewinds.js';
import type { FaultPlan } from './faulty-storage.js';
import { ProcessSource } from './process-source.js';
import { VirtualClock } from './virtual-time.js';
import { GROUP, LEASE_DURATION_MS, MAX_CLOCK_DRIFT, SyncTappedStorage, TAKE_INTERVAL_MS, type SimRun, type SimWorker } from './consumer-world.js';

const decoder = new TextDecoder();

/** What the run loop and the fault schedule do with the processes. */
export interface SimProcesses {
  /** Every process started, alive or not. */
  readonly workers: SimWorker[];
  /** Whether the fault phase is still on. */
  readonly faultsOn: () => boolean;
  /** The processes alive and not stopping. */
  readonly live: () => SimWorker[];
  /** The living processes that hold a lease. */
  readonly holders: (shardId: string) => SimWorker[];
  readonly startWorker: () => SimWorker;
  readonly gracefulStop: (worker: SimWorker, timeoutMs: number, whileFailing?: boolean) => void;
  /** The processes whose stop has not returned yet. */
  readonly pendingStops: Set<SimWorker>;
}

/** The processes of a run: none runs until the schedule starts one. */
export function simulatedProcesses(run: SimRun): SimProcesses {
  const { config, shape, multi, enabled, faultPhaseMs, random, scheduler, trace, log, violate, stats, ledger, memory, streams, keyOf, initialPosition, poisonPolicy, pendingEffects, skipped, rewinds, refreshMs, corrupted } = run;
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
   * The last position of the batch in flight of a tenure that handed over up to `handed`: the batch read
   * that holds it (a failing batch is handed over in parts), or `handed` when none of the last read does.
   */
  const inFlightEnd = (worker: SimWorker, tenure: string, handed: number): number => {
    const ranges = worker.batchesRead.get(tenure.slice(0, tenure.lastIndexOf('#'))) ?? [];
    for (let i = ranges.length - 1; i >= 0; i--) {
      const [first, last] = ranges[i] as readonly [number, number];
      if (first <= handed && handed <= last) return last;
    }
    return handed;
  };

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
      const bound = refreshMs / (1 - MAX_CLOCK_DRIFT) + 250;
      // A worker that began stopping before it was due to learn of the removal drains what it had in flight
      // then, as one that learned of it does.
      const stopped = worker.stoppedListing;
      if (stopped !== null && stopped.at - from <= bound) {
        const inFlight = stopped.handedMax.get(tenure) ?? -Infinity;
        const beyond = positions.filter((position) => position > inFlight);
        if (beyond.length > 0) {
          report(
            `${worker.workerId} handed over records of ${shardId} (tenure ${fencingToken}) from position ${beyond[0]} on while it stopped, ${(scheduler.now - unlistedAt).toFixed(0)} ms after stream ${streamId} left the group's list` +
              (inFlight === -Infinity ? ' (nothing of that tenure was in flight at the stop)' : ` (its batch in flight at the stop reached ${inFlight})`),
          );
        }
      } else if (scheduler.now - from > bound) {
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
        if (ledger.shards.get(tenure.slice(0, tenure.lastIndexOf('#')))?.streamId === streamId) frozen.set(tenure, inFlightEnd(worker, tenure, position));
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
  /** Per worker, the shards whose end it checkpointed and has not reported yet (`shard-ended`). */
  const unreportedEnds = new Map<SimWorker, ReadonlySet<string>>();
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
          onBatch: (shardId, batch) => {
            if (batch.kind === 'end') {
              if (trace) log(`${workerId} read the end of ${keyOf(stream, shardId)}`);
              return;
            }
            if (!multi || batch.records.length === 0) return;
            const key = keyOf(stream, shardId);
            const read = self.worker?.batchesRead;
            const ranges = read?.get(key) ?? [];
            ranges.push([Number(batch.records[0]?.position), Number(batch.records[batch.records.length - 1]?.position)]);
            // The batch in flight and the one read ahead while it is handled: a few are enough.
            if (ranges.length > 4) ranges.shift();
            read?.set(key, ranges);
          },
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
      stoppedListing: null,
      batchesRead: new Map(),
    };
    self.worker = worker;
    consumer.on('record-skipped', ({ shardId, position, deadLettered, reason }) => {
      ledger.skipped(shardId, position, deadLettered, workerId);
      skipped.add(`${shardId}@${position}`);
      log(`${workerId} skipped ${shardId} at ${position} (${reason}${deadLettered ? ', dead-lettered' : ''})`);
    });
    // The shards whose end this worker checkpointed and has not reported yet: none when its stop returns,
    // unless it lost the lease meanwhile.
    const endsUnreported = new Set<string>();
    unreportedEnds.set(worker, endsUnreported);
    consumer.on('shard-ended', ({ shardId }) => endsUnreported.delete(shardId));
    // A lease lost meanwhile (its drain overran the stop's deadline, its hold ran out) stopped its work: not a drain that cut the end short.
    consumer.on('lease-lost', ({ shardId }) => endsUnreported.delete(shardId));
    consumer.on('checkpointed', ({ shardId, position }) => {
      if (position === Checkpoint.SHARD_END) endsUnreported.add(shardId);
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
    // A stopping worker refreshes its list no more: what it drains from then on is what it had in flight.
    worker.stoppedListing = { at: scheduler.now, handedMax: new Map([...worker.handedMax].map(([tenure, handed]) => [tenure, inFlightEnd(worker, tenure, handed)])) };
    pendingStops.add(worker);
    const began = scheduler.now;
    const heldAtStop = new Set(worker.consumer.coordinator.heldLeases().map((lease) => lease.leaseKey));
    // Leases the stop could not hand over for a reason of storage's (its hold ran out while heartbeats
    // failed), not of the handler's: judged by the lease and membership rules, not by this check.
    const lostToStorage = new Set<string>();
    // Whether a storage request of its failed during the stop (one sent while a fault cut it off times out
    // after the fault cleared, and its retries, a heartbeat or a leader renewal, take the stop's time), or
    // took one of the storage's rare slow answers (0.2-1.7 s): the stop's time is then the storage's.
    const storageFailed = { during: false };
    if (whileFailing) {
      const latencyMs = worker.plan.latencyMs;
      // The same draws and the same values: only noted.
      worker.plan.latencyMs = (r) => {
        const ms = latencyMs(r);
        if (ms >= 200 && pendingStops.has(worker)) storageFailed.during = true;
        return ms;
      };
      worker.consumer.on('lease-lost', ({ shardId, reason }) => {
        if (reason === 'self-fenced' || reason === 'expelled') lostToStorage.add(shardId);
      });
      worker.consumer.on('error', ({ error }) => {
        if (pendingStops.has(worker) && /\[testing\] injected: (request timed out|connection refused|response lost)/.test(error.message)) storageFailed.during = true;
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
      if (whileFailing) checkFailingStop(worker, timeoutMs, began, new Set([...heldAtStop].filter((leaseKey) => !lostToStorage.has(leaseKey))), storageFailed.during);
      const unreported = [...(unreportedEnds.get(worker) ?? [])];
      if (unreported.length > 0) violate('shard-end', `${worker.workerId}'s stop returned with the end of [${unreported.join(', ')}] checkpointed and not reported: the drain did not wait for it`);
      log(`${worker.workerId} stopped`);
      worker.alive = false;
      worker.clock.kill();
    });
  };

  /**
   * A stop while the handler fails every call: the failed batches were never checkpointed, so their
   * retries give way to the drain at once and every lease is handed over, well within the deadline
   * (the handler's calls are short here, and the process's storage is sound while it stops: a request
   * sent before its fault cleared that fails during the stop, or one of the storage's rare slow answers,
   * spares the time from the check), instead
   * of the stop waiting its timeout out and leaving the leases to lapse.
   */
  const checkFailingStop = (worker: SimWorker, timeoutMs: number, began: number, heldAtStop: ReadonlySet<string>, storageFailed: boolean): void => {
    const tookMs = scheduler.now - began;
    // The time is the runtime's only when its storage answered, and promptly, throughout (its deadline is checked anyway).
    if (tookMs > timeoutMs / 2 && !storageFailed) {
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

  return { workers, faultsOn, live, holders, startWorker, gracefulStop, pendingStops };
}
