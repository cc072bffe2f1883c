/**
 * OpenTelemetry metrics, through `@opentelemetry/api` only: without an SDK registered by the application
 * every instrument is a no-op. Instruments are built from the events of the coordinator, the elector and
 * the consumer, so the algorithms carry no metrics code. Names and units follow OpenTelemetry's semantic
 * conventions (dot-separated namespaces, UCUM units, durations in seconds); the table is in core's README.
 */
import { createNoopMeter, metrics, type Attributes, type Meter } from '@opentelemetry/api';
import type { ConsumerEvents } from './consumer/events.js';
import type { TypedEmitter } from './events.js';
import type { LeaderElector } from './leader/elector.js';
import type { LeaseCoordinator } from './lease/coordinator.js';

/** The meter of the global provider, named for this package. */
export function defaultMeter(): Meter {
  return metrics.getMeter('@leasehold/core');
}

/** What to instrument: any of a coordinator, an elector and a consumer (which brings its own two). */
export interface Instrumented {
  coordinator?: LeaseCoordinator;
  elector?: LeaderElector | undefined;
  consumer?: Pick<TypedEmitter<ConsumerEvents>, 'on'>;
  /**
   * The stream of a lease key, for a multi-stream consumer: its shard measurements then also carry
   * `leasehold.stream.id`.
   */
  streamOf?: (leaseKey: string) => string | undefined;
}

/**
 * Records the metrics of the given components on `meter`, each measurement carrying
 * `leasehold.group` and `leasehold.worker.id`. Returns a function that stops recording.
 */
export function attachMetrics(meter: Meter, identity: { group: string; workerId: string }, parts: Instrumented): () => void {
  // The API's no-op meter (what the global provider gives until an SDK registers one, and forever to a
  // meter taken before) records nothing: no listener is attached, so that events cost no attributes.
  if (meter === createNoopMeter()) return () => undefined;
  const base: Attributes = { 'leasehold.group': identity.group, 'leasehold.worker.id': identity.workerId };
  const offs: Array<() => void> = [];
  const { coordinator, elector, consumer, streamOf } = parts;
  const ofShard = (shardId: string): Attributes => {
    const streamId = streamOf?.(shardId);
    return streamId === undefined ? { ...base, 'leasehold.shard.id': shardId } : { ...base, 'leasehold.stream.id': streamId, 'leasehold.shard.id': shardId };
  };

  if (coordinator) {
    const held = meter.createObservableGauge('leasehold.lease.held', { unit: '{lease}', description: 'Leases this worker holds' });
    const observeHeld = (result: { observe(value: number, attributes?: Attributes): void }): void =>
      result.observe(coordinator.heldLeases().length, base);
    held.addCallback(observeHeld);
    offs.push(() => held.removeCallback(observeHeld));

    const acquired = meter.createCounter('leasehold.lease.acquired', { unit: '{lease}', description: 'Leases taken, by how' });
    const lost = meter.createCounter('leasehold.lease.lost', { unit: '{lease}', description: 'Leases lost, by reason' });
    const handedOff = meter.createCounter('leasehold.lease.handed_off', { unit: '{lease}', description: 'Leases handed to a worker that asked' });
    const handoffDuration = meter.createHistogram('leasehold.lease.handoff.duration', { unit: 's', description: 'From seeing a handoff request to handing the lease over' });
    const heartbeatDuration = meter.createHistogram('leasehold.member.heartbeat.duration', { unit: 's', description: 'Duration of a heartbeat of the member record' });
    const heartbeatHeld = meter.createHistogram('leasehold.member.heartbeat.leases', { unit: '{lease}', description: 'Leases held under each heartbeat' });
    const declaredDead = meter.createCounter('leasehold.member.declared_dead', { unit: '{member}', description: 'Members this worker declared dead' });
    const checkpointDuration = meter.createHistogram('leasehold.checkpoint.duration', { unit: 's', description: 'Duration of a fenced checkpoint write' });
    const results = meter.createCounter('leasehold.storage.results', { unit: '{result}', description: 'Outcomes of conditional writes' });
    offs.push(
      coordinator.on('acquired', ({ how }) => acquired.add(1, { ...base, 'leasehold.lease.acquired.how': how })),
      coordinator.on('lost', ({ reason }) => lost.add(1, { ...base, 'leasehold.lease.lost.reason': reason })),
      coordinator.on('handed-off', ({ durationMs }) => {
        handedOff.add(1, base);
        handoffDuration.record(durationMs / 1000, base);
      }),
      coordinator.on('renewed', ({ leaseKeys, durationMs }) => {
        heartbeatDuration.record(durationMs / 1000, base);
        heartbeatHeld.record(leaseKeys.length, base);
      }),
      coordinator.on('member-dead', () => declaredDead.add(1, base)),
      coordinator.on('checkpointed', ({ durationMs }) => checkpointDuration.record(durationMs / 1000, base)),
      coordinator.on('storage', ({ operation, applied, conflict, unknown }) => {
        const attributes = { ...base, 'leasehold.storage.operation': operation };
        if (applied > 0) results.add(applied, { ...attributes, 'leasehold.storage.result': 'applied' });
        if (conflict > 0) results.add(conflict, { ...attributes, 'leasehold.storage.result': 'conflict' });
        if (unknown > 0) results.add(unknown, { ...attributes, 'leasehold.storage.result': 'unknown' });
      }),
    );
  }

  if (elector) {
    let term: number | undefined;
    const termGauge = meter.createObservableGauge('leasehold.leader.term', { unit: '{term}', description: 'The term this worker leads, while it leads' });
    const observeTerm = (result: { observe(value: number, attributes?: Attributes): void }): void => {
      if (term !== undefined) result.observe(term, base);
    };
    termGauge.addCallback(observeTerm);
    const changes = meter.createCounter('leasehold.leader.changes', { unit: '{change}', description: 'Times this worker became or stopped being leader' });
    offs.push(
      () => termGauge.removeCallback(observeTerm),
      elector.on('elected', (event) => {
        term = event.term;
        changes.add(1, { ...base, 'leasehold.leader.change': 'elected' });
      }),
      elector.on('demoted', ({ reason }) => {
        term = undefined;
        changes.add(1, { ...base, 'leasehold.leader.change': reason });
      }),
    );
  }

  if (consumer) {
    const lag = new Map<string, number>();
    const records = meter.createCounter('leasehold.records.processed', { unit: '{record}', description: 'Records handed to the handler that it finished' });
    const bytes = meter.createCounter('leasehold.records.processed.size', { unit: 'By', description: 'Bytes of the records processed' });
    const behind = meter.createObservableGauge('leasehold.shard.behind_latest', { unit: 'ms', description: 'How far each held shard is behind the tip of the stream' });
    const observeLag = (result: { observe(value: number, attributes?: Attributes): void }): void => {
      for (const [shardId, ms] of lag) result.observe(ms, ofShard(shardId));
    };
    behind.addCallback(observeLag);
    const stalledNow = new Map<string, string>();
    const stalled = meter.createObservableGauge('leasehold.shard.stalled', { unit: '{shard}', description: 'Held shards that made no progress for stallAfterMs, by reason' });
    const observeStalled = (result: { observe(value: number, attributes?: Attributes): void }): void => {
      const byReason = new Map<string, number>([['handler', 0], ['reader', 0], ['failed', 0]]);
      for (const reason of stalledNow.values()) byReason.set(reason, (byReason.get(reason) ?? 0) + 1);
      for (const [reason, count] of byReason) result.observe(count, { ...base, 'leasehold.shard.stall.reason': reason });
    };
    stalled.addCallback(observeStalled);
    const failed = meter.createCounter('leasehold.shard.read_failures', { unit: '{failure}', description: 'Failed reads of a shard, and whether its lease was given back' });
    const corrupt = meter.createCounter('leasehold.lease.corrupt', { unit: '{lease}', description: 'Leases found that cannot be read back (each reported once)' });
    const bisected = meter.createCounter('leasehold.handler.bisections', { unit: '{bisection}', description: 'Failing handler calls split in two to isolate the failing records' });
    const retried = meter.createCounter('leasehold.handler.retries', { unit: '{retry}', description: 'Handler calls made again after a failure (with backoff)' });
    const retriedRecords = meter.createCounter('leasehold.records.retried', { unit: '{record}', description: 'Records handed to the handler again after a failure' });
    const deadLettered = meter.createCounter('leasehold.records.dead_lettered', { unit: '{record}', description: 'Records given up that the dead-letter handler accepted' });
    const deadLetterFailures = meter.createCounter('leasehold.dead_letter.failures', { unit: '{failure}', description: 'Calls of the dead-letter handler that failed (the shard waits)' });
    const skipped = meter.createCounter('leasehold.records.skipped', { unit: '{record}', description: 'Records given up and skipped, by reason and whether they were dead-lettered' });
    offs.push(
      () => stalled.removeCallback(observeStalled),
      consumer.on('shard-stalled', ({ shardId, reason }) => void stalledNow.set(shardId, reason)),
      consumer.on('shard-resumed', ({ shardId }) => void stalledNow.delete(shardId)),
      consumer.on('shard-failed', ({ shardId, released }) => failed.add(1, { ...ofShard(shardId), 'leasehold.shard.released': released })),
      consumer.on('lease-corrupt', ({ shardId }) => corrupt.add(1, ofShard(shardId))),
      consumer.on('batch-bisected', ({ shardId }) => bisected.add(1, ofShard(shardId))),
      consumer.on('batch-retried', ({ shardId, records: count }) => {
        retried.add(1, ofShard(shardId));
        retriedRecords.add(count, ofShard(shardId));
      }),
      consumer.on('records-dead-lettered', ({ shardId, positions, reason }) =>
        deadLettered.add(positions.length, { ...ofShard(shardId), 'leasehold.give_up.reason': reason }),
      ),
      consumer.on('dead-letter-failed', ({ shardId }) => deadLetterFailures.add(1, ofShard(shardId))),
      consumer.on('record-skipped', ({ shardId, reason, deadLettered: sent }) =>
        skipped.add(1, { ...ofShard(shardId), 'leasehold.give_up.reason': reason, 'leasehold.record.dead_lettered': sent }),
      ),
    );
    offs.push(
      () => behind.removeCallback(observeLag),
      consumer.on('batch-processed', (event) => {
        const attributes = ofShard(event.shardId);
        records.add(event.records, attributes);
        bytes.add(event.bytes, attributes);
        if (event.millisBehindLatest !== undefined) lag.set(event.shardId, event.millisBehindLatest);
      }),
      consumer.on('lease-lost', ({ shardId }) => {
        lag.delete(shardId);
        stalledNow.delete(shardId);
      }),
      consumer.on('lease-handed-off', ({ shardId }) => {
        lag.delete(shardId);
        stalledNow.delete(shardId);
      }),
      consumer.on('shard-ended', ({ shardId }) => {
        lag.delete(shardId);
        stalledNow.delete(shardId);
      }),
    );
  }
  return () => {
    for (const off of offs) off();
  };
}
