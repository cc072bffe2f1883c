/**
 * The fault schedule of a consumer simulation run, drawn from the seed up front: processes crash, pause,
 * stop and join; storage cuts a process off or fails the leader's writes in the middle of a shard sync;
 * reads fail, handlers overrun, leases turn corrupt, shards are trimmed, a downstream goes down; and in
 * multi-stream runs the group's list of streams changes and listings fail. Each fault is one case a
 * reader can find by its name in `ConsumerFaultKind`.
 */
import { seededRandom } from '../clock.js';
import { describeLease } from './consumer-checks.js';
import type { SimProcesses } from './consumer-processes.js';
import type { ConsumerFaultKind } from './consumer-shape.js';
import { GROUP, LEASE_DURATION_MS, type SimRun, type SimStream, type StreamPlan } from './consumer-world.js';

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
  'slowListings',
];

/** Schedules the run's faults; the worker starts are already scheduled, so the draws follow theirs. */
export function scheduleFaults(run: SimRun, processes: SimProcesses): void {
  const { config, shape, enabled, faultPhaseMs, startAtMs, random, scheduler, log, stats, ledger, memory, locate, corrupted, pending } = run;
  const { workers, faultsOn, live, holders, startWorker, gracefulStop } = processes;
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
        case 'slowListings': {
          if (!victim) return;
          const stallMs = LEASE_DURATION_MS * (0.3 + draw.duration * 1.7);
          const until = Math.min(scheduler.now + stallMs, faultPhaseMs);
          log(`fault: ${victim.workerId}'s lease listings stall ${stallMs.toFixed(0)} ms each until ${until.toFixed(0)}`);
          victim.plan.listingStallMs = stallMs;
          scheduler.schedule(until, () => {
            if (victim.plan.listingStallMs === stallMs) victim.plan.listingStallMs = 0;
          });
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
}

/** Multi-stream runs: schedules the changes of the group's list of streams and the faults of listing them. */
export function scheduleStreamList(run: SimRun, processes: SimProcesses, plans: readonly StreamPlan[]): void {
  const { multi, enabled, faultPhaseMs, startAtMs, streamRandom, scheduler, log, stats, ledger, streams, graceMs } = run;
  const { live } = processes;
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
}
