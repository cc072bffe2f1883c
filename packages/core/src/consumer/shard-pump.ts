import { abortReason, type Clock, type Random } from '../clock.js';
import { AbortedError, CheckpointBehindError, describeValue, InvalidInputError, LeaseholdError, SourceError } from '../errors.js';
import type { CheckpointWrite, HeldLease, LeaseCoordinator, ResumeOffer } from '../lease/coordinator.js';
import type { EndOfShard, RecordsBatch, ShardBatch, ShardSource, SourceRecord } from '../source.js';
import { Checkpoint, type CheckpointStorage, type Position } from '../storage.js';
import { isRecordError, type GivingUp, type ResolvedFailurePolicy, type ResolvedPoisonPolicy } from './failure-policy.js';
import type { BatchContext, BatchResponse, CheckpointPolicy, ConsumerOptions, GiveUpReason, Logger, ShardHooks } from './options.js';
import { unsafeOf, type ConsumerUnsafe } from '../unsafe.js';
import { resumeHintFor } from './resume.js';
import type { HoldReason, PumpOutcome, PumpReporter } from './pump-types.js';

export type { HoldReason, PumpOutcome, PumpReporter } from './pump-types.js';
import { asError } from './pump-types.js';
import { createChildLeases } from './shard-end.js';

/** A shard's read as the pump takes it: the batch asked for next, and since when. */
interface Reader<R extends SourceRecord> {
  readonly batches: AsyncIterator<ShardBatch<R>>;
  next: Promise<IteratorResult<ShardBatch<R>>>;
  askedAt: number;
}

/** The furthest position one handler call checkpointed through its context, or `null`. */
interface CallCheckpoints {
  through: Position | null;
}

interface PumpSettings<R extends SourceRecord> {
  group: string;
  source: ShardSource<R>;
  /** The shard's stream, in a multi-stream group. */
  streamId?: string | undefined;
  storage: CheckpointStorage;
  coordinator: LeaseCoordinator;
  processBatch: ConsumerOptions<R>['processBatch'];
  checkpointing: CheckpointPolicy;
  onHandlerError: ResolvedFailurePolicy<R>;
  givingUp: GivingUp;
  retry: { initialDelayMs: number; maxDelayMs: number; maxAttempts: number };
  hooks: ShardHooks;
  initialPosition: Position;
  /**
   * How many rewinds paused the shard's readers on this worker so far. A pump started before the last one
   * refuses its batches' checkpoints, paused or not: one that ended before the rewind (a failed read, its
   * reader started again) must not move the rewound checkpoint forward either.
   */
  rewinds: () => number;
  clock: Clock;
  random: Random;
  logger: Logger;
  reporter: PumpReporter;
}

/**
 * Reads one shard while this worker holds its lease: one batch in flight, in order, the next one read
 * ahead, checkpoints per policy, and at the shard's end the `SHARD_END` checkpoint, the children's leases
 * and the release. Stops the moment the lease is lost; on a drain it finishes the batch in flight and
 * checkpoints before the lease moves.
 */
export class ShardPump<R extends SourceRecord> {
  readonly shardId: string;
  readonly #settings: PumpSettings<R>;
  readonly #unsafe: ConsumerUnsafe;
  readonly #lease: HeldLease;
  /** Aborts the read: the lease was lost, or the shard is being given away. */
  readonly #reading = new AbortController();
  #draining = false;
  /**
   * Aborts the backoff of a failed batch at once: a drain, a rewind's pause, or the end of reading. The
   * failed records were never checkpointed, so stopping there is safe.
   */
  readonly #yield = new AbortController();
  /** Paused for a rewind: no batch's context may checkpoint any more. */
  #paused = false;
  /** The shard's rewinds on this worker when this pump was made: any since, and its contexts are of before. */
  readonly #rewindsAtStart: number;
  #inFlight: Promise<void> = Promise.resolve();
  /** The end of the last batch the handler finished, and whether it is checkpointed. */
  #processed: Position | null = null;
  #checkpointed: Position | null;
  /** The last position checkpointed together with the handler's own writes (`checkpointWith`). */
  #committed: Position | null = null;
  #sinceCheckpoint = { records: 0, since: 0 };
  /** Records of the batch in flight already counted as processed (a part done before a failure), and given up. */
  #batchTally = { advanced: 0, givenUp: 0 };
  #done: Promise<PumpOutcome> = Promise.resolve({ kind: 'left' });
  /** Records given up in a row, across batches, since a record last succeeded. */
  #givenUpInARow = 0;
  /** Why and since when the shard holds at records it does not give up, or `null`. */
  #heldBack: { reason: HoldReason; since: number; error: Error } | null = null;
  /** When the source last answered (a batch, empty or not, or the end), by the worker's clock. */
  #lastReadAt: number;
  /** When the handler call in flight began, or `null` when none is. */
  #handlingSince: number | null = null;
  /** The resume hint after the batch last handed to the handler, offered for a handover (the recipient judges it). */
  #offer: ResumeOffer | null = null;

  constructor(settings: PumpSettings<R>, lease: HeldLease) {
    this.#settings = settings;
    this.#unsafe = unsafeOf(settings);
    this.#lease = lease;
    this.shardId = lease.leaseKey;
    this.#checkpointed = lease.checkpoint;
    this.#rewindsAtStart = settings.rewinds();
    this.#lastReadAt = settings.clock.now();
    this.#reading.signal.addEventListener('abort', () => this.#yield.abort(this.#reading.signal.reason), { once: true });
  }

  /** Starts pumping; the returned promise settles, never rejecting, with how the pump ended. */
  start(): Promise<PumpOutcome> {
    // Removed once the pump ends: a lease held for long outlives many pumps (failed reads, rewinds), and
    // each listener left on its signal would keep its pump alive.
    const leaseLost = (): void => this.#reading.abort(this.#lease.signal.reason);
    this.#lease.signal.addEventListener('abort', leaseLost, { once: true });
    this.#done = this.#run()
      .catch((error: unknown): PumpOutcome => {
        if (this.#lease.signal.aborted || this.#draining) return { kind: 'left' };
        this.#settings.reporter.error(asError(error), 'pump');
        return { kind: 'failed', error: asError(error) };
      })
      .finally(() => this.#lease.signal.removeEventListener('abort', leaseLost));
    return this.#done;
  }

  /** When the source last answered this pump, by the worker's clock. */
  get lastReadAt(): number {
    return this.#lastReadAt;
  }

  /** Why and since when the shard holds at records it does not give up, or `null` when it does not. */
  get heldBack(): { readonly reason: HoldReason; readonly since: number; readonly error: Error } | null {
    return this.#heldBack;
  }

  /** When the handler call in flight began, or `null` when none is. */
  get handlingSince(): number | null {
    return this.#handlingSince;
  }

  /** Stops reading new batches, waits for the batch in flight, and checkpoints what was processed. */
  async drain(): Promise<void> {
    this.#draining = true;
    this.#stopRetrying(new AbortedError(`[core] shard ${describeValue(this.shardId)} is being handed over`));
    await this.#inFlight;
    // The shard reached its end meanwhile: it was finished (shardEnded called) and given back; nothing is
    // left to checkpoint or to ask of the handler.
    if (this.#checkpointed === Checkpoint.SHARD_END && !this.#unsafe.drainCutsEnd) {
      this.#reading.abort(new AbortedError(`[core] shard ${describeValue(this.shardId)} ended`));
      return;
    }
    const { hooks, checkpointing } = this.#settings;
    if (checkpointing !== 'manual' && this.#processed !== null && this.#processed !== this.#checkpointed) {
      await this.#checkpoint(this.#processed).catch((error: unknown) => this.#settings.reporter.error(asError(error), 'drain-checkpoint'));
    }
    if (hooks.shutdownRequested) {
      try {
        await hooks.shutdownRequested(this.shardId, (position) => this.#checkpoint(position ?? this.#processed ?? this.#requireProcessed()));
      } catch (error) {
        this.#settings.reporter.error(asError(error), 'shutdownRequested');
      }
    }
    if (this.#offer) this.#settings.coordinator.offerResume(this.#lease, this.#offer);
    this.#reading.abort(new AbortedError(`[core] shard ${describeValue(this.shardId)} is being handed over`));
  }

  /**
   * Stops for a rewind of the shard (DESIGN section 4, "Rewinding"): stops reading new batches, waits for
   * the batch in flight and checkpoints what was processed, as a drain does, but keeps the lease (no
   * `shutdownRequested`: nothing is handed over). From then on a checkpoint through a batch's context is
   * refused: a handler that kept its context must not move the rewound checkpoint forward again.
   */
  async pause(): Promise<void> {
    this.#draining = true;
    this.#stopRetrying(new AbortedError(`[core] shard ${describeValue(this.shardId)} is being rewound`));
    await this.#inFlight;
    if (this.#settings.checkpointing !== 'manual' && this.#processed !== null && this.#processed !== this.#checkpointed && this.#checkpointed !== Checkpoint.SHARD_END) {
      await this.#checkpoint(this.#processed).catch((error: unknown) => this.#settings.reporter.error(asError(error), 'pause-checkpoint'));
    }
    this.#paused = true;
    this.#reading.abort(new AbortedError(`[core] shard ${describeValue(this.shardId)} is being rewound`));
  }

  /** A failed batch's retries give way to a drain or a pause (DESIGN section 5, rule 10): the batch was never checkpointed. */
  #stopRetrying(reason: Error): void {
    if (!this.#unsafe.retryThroughDrain) this.#yield.abort(reason);
  }

  /** Whether a failed batch stops being retried here: the shard is being drained or paused. */
  #yields(): boolean {
    return this.#draining && !this.#unsafe.retryThroughDrain;
  }

  /** Stops at once (the lease is gone). */
  abort(reason: unknown): void {
    this.#reading.abort(reason);
  }

  /** Settles once the pump has stopped. */
  get done(): Promise<PumpOutcome> {
    return this.#done;
  }

  /**
   * Where reading starts: the checkpoint; without one, a child shard at its own beginning (its records
   * continue its parents', every one of them must be read) and a shard with no parents at the initial
   * position. `LATEST` is pinned to this moment and stored first, so that a reader after a crash starts
   * here too rather than at a later "latest".
   */
  async #startPosition(): Promise<Position> {
    const { initialPosition, clock } = this.#settings;
    const unsafe = this.#unsafe;
    const { checkpoint, parentKeys } = this.#lease;
    let from = checkpoint ?? (parentKeys.length > 0 && !unsafe.childrenAtInitialPosition ? Checkpoint.TRIM_HORIZON : initialPosition);
    if (from === Checkpoint.LATEST) {
      from = Checkpoint.atTimestamp(clock.wallTime());
      await this.#checkpoint(from);
    }
    return from;
  }

  async #run(): Promise<PumpOutcome> {
    const { source, hooks, reporter, clock } = this.#settings;
    if (this.#lease.checkpoint === Checkpoint.SHARD_END) {
      // Finished before: nothing to read; give the lease back so that it counts for nobody.
      await this.#settings.coordinator.release(this.shardId);
      return { kind: 'finished' };
    }
    const from = await this.#startPosition();
    reporter.started(this.shardId, from);
    await this.#hook(() => hooks.shardStarted?.(this.shardId, from), 'shardStarted');
    this.#sinceCheckpoint = { records: 0, since: clock.now() };
    const resumeHint = resumeHintFor(source, this.#settings.coordinator, this.#lease, this.#settings.logger, this.#unsafe.resumeHintAnyCheckpoint === true);
    const batches = source.read(this.shardId, from, { signal: this.#reading.signal, resumeHint })[Symbol.asyncIterator]();
    let outcome: PumpOutcome = { kind: 'left' };
    try {
      // A batch's resume hint is no older than the call for it: its age is counted from then.
      const reader: Reader<R> = { batches, next: batches.next(), askedAt: clock.now() };
      reader.next.catch(() => undefined); // a read may reject once aborted; the loop below reads the outcome
      for (;;) {
        const step = await this.#step(reader);
        if (step === true) continue;
        if (step !== false) outcome = step;
        break;
      }
    } catch (error) {
      if (!this.#reading.signal.aborted && !this.#lease.signal.aborted) {
        reporter.error(asError(error), 'read');
        throw error;
      }
    } finally {
      this.#reading.abort(new AbortedError('[core] pump stopped'));
      await batches.return?.().catch(() => undefined);
      if (this.#lease.signal.aborted && !this.#draining) await this.#hook(() => hooks.leaseLost?.(this.shardId), 'leaseLost');
    }
    return outcome;
  }

  /**
   * Takes the next batch and hands it to the handler, reading the one after meanwhile; `true` to go on,
   * else how the shard stops (`false`: it left). The batch lives in this call's frame alone, which ends
   * with the handler's call: the pump, suspended while the next batch is awaited, does not keep the records
   * of one it is done with (a suspended async function keeps the registers it used).
   */
  async #step(reader: Reader<R>): Promise<boolean | PumpOutcome> {
    const { clock } = this.#settings;
    const result = await abortable(reader.next, this.#reading.signal);
    this.#lastReadAt = clock.now();
    if (result === undefined || this.#stopping()) return false;
    if (result.done) {
      // A source ends a shard with its end marker; ending without one is a failure to read.
      throw new SourceError('ERR_READ_ENDED', `[core] the read of shard ${describeValue(this.shardId)} ended without reaching the shard's end`);
    }
    const batch: ShardBatch<R> = result.value;
    if (batch.kind === 'end') {
      // The end's work is in flight as a batch is: a drain that comes meanwhile (a graceful stop, a
      // handover) waits for it, rather than cutting it short after SHARD_END was checkpointed, which would
      // leave the end unreported, shardEnded uncalled, and the lease handed on for nothing.
      const finishing = this.#finish(batch);
      if (!this.#unsafe.drainCutsEnd) this.#inFlight = finishing.then(
        () => undefined,
        () => undefined,
      );
      await finishing;
      return { kind: 'finished' };
    }
    this.#offer = batch.resumeHint === undefined ? null : { position: batch.position, hint: batch.resumeHint, receivedAt: reader.askedAt };
    // Read the next batch while this one is processed (the source bounds how far it reads ahead).
    reader.next = reader.batches.next();
    reader.next.catch(() => undefined);
    reader.askedAt = clock.now();
    const processing = this.#process(batch);
    this.#inFlight = processing.then(
      () => undefined,
      () => undefined,
    );
    return processing;
  }

  #stopping(): boolean {
    return this.#draining || this.#reading.signal.aborted || this.#lease.signal.aborted;
  }

  /** Hands one batch to the handler under the failure policy; not `true` when the shard must stop. */
  async #process(batch: RecordsBatch<R>): Promise<boolean | PumpOutcome> {
    const { reporter, clock } = this.#settings;
    this.#batchTally = { advanced: 0, givenUp: 0 };
    if (batch.records.length > 0) {
      const startedAt = clock.now();
      const ok = await this.#handleWithPolicy(batch);
      if (ok !== true) return ok;
      let bytes = batch.bytes;
      if (bytes === undefined) {
        bytes = 0;
        for (const record of batch.records) bytes += record.data.byteLength;
      }
      reporter.batch(this.shardId, batch.records.length - this.#batchTally.givenUp, bytes, batch.millisBehindLatest, clock.now() - startedAt);
    }
    this.#processed = batch.position;
    this.#sinceCheckpoint.records += batch.records.length - this.#batchTally.advanced;
    // A handler that checkpointed the batch with its own writes (`checkpointWith`) leaves nothing to write.
    if (this.#committed !== batch.position && this.#dueForCheckpoint(batch.records.length)) await this.#checkpoint(batch.position).catch((error: unknown) => {
      reporter.error(asError(error), 'checkpoint');
    });
    return !this.#lease.signal.aborted;
  }

  #dueForCheckpoint(records: number): boolean {
    const policy = this.#settings.checkpointing;
    if (policy === 'manual') return false;
    if (policy === 'batch') return records > 0;
    const { everyRecords, everyMs } = policy;
    const elapsed = this.#settings.clock.now() - this.#sinceCheckpoint.since;
    return (everyRecords !== undefined && this.#sinceCheckpoint.records >= everyRecords) || (everyMs !== undefined && elapsed >= everyMs);
  }

  /**
   * Whether records may be handed to user code now: the lease's signal has not fired and the hold has not
   * passed by this worker's own clock (a starved event loop may run the loss timer late; this check is not).
   */
  #mayHandOver(): boolean {
    return !this.#lease.signal.aborted && this.#settings.coordinator.isHeld(this.shardId);
  }

  async #handleWithPolicy(batch: RecordsBatch<R>): Promise<boolean | PumpOutcome> {
    const { onHandlerError, retry, reporter } = this.#settings;
    if (typeof onHandlerError === 'object') return this.#isolate(batch, onHandlerError);
    let records = batch.records;
    /** Failed calls of these records that were their fault: the skip policy goes record by record after `retry.maxAttempts`. */
    let recordFailures = 0;
    for (let attempt = 1; ; attempt++) {
      if (!this.#mayHandOver()) return false;
      const result = await this.#call(records, batch, batch.position);
      if (result.done > 0 || result.error === null) this.#recordsSucceeded();
      if (result.error === null) return true;
      if (this.#lease.signal.aborted) return false;
      if (result.done > 0) {
        // The handler reported its first failed record: what came before it is done.
        await this.#advance(records.slice(0, result.done));
        records = records.slice(result.done);
        attempt = 1;
        recordFailures = 0;
      }
      reporter.handlerFailed(this.shardId, attempt, result.error);
      if (onHandlerError === 'stop') {
        reporter.stopped(this.shardId, result.error);
        return { kind: 'stopped', error: result.error };
      }
      if (onHandlerError === 'skip') {
        if (!this.#isRecordError(result.error)) this.#hold('handler-error', result.error);
        else if (++recordFailures >= retry.maxAttempts && !this.#yields()) return this.#oneByOne({ ...batch, records });
      }
      if (!(await this.#backoff(attempt, records.length))) return false;
    }
  }

  /**
   * The skip policy: the batch failed as a whole, so each record gets its own attempts and may be skipped,
   * unless its error is not its fault or too many records were given up in a row: then it is retried.
   */
  async #oneByOne(batch: RecordsBatch<R>): Promise<boolean> {
    const { retry, reporter } = this.#settings;
    const { records } = batch;
    for (let index = 0; index < records.length; index++) {
      const record = records[index] as R;
      let recordFailures = 0;
      for (let attempt = 1; ; attempt++) {
        if (!this.#mayHandOver()) return false;
        const result = await this.#call([record], batch, record.position);
        if (result.error === null) {
          this.#recordsSucceeded();
          break;
        }
        if (this.#lease.signal.aborted) return false;
        if (!this.#isRecordError(result.error)) {
          this.#hold('handler-error', result.error);
        } else if (++recordFailures >= retry.maxAttempts && this.#mayGiveUp(1, result.error)) {
          reporter.recordSkipped(this.shardId, record.position, result.error, { reason: 'max-attempts', attempts: attempt, deadLettered: false });
          this.#gaveUp(1);
          break;
        }
        if (!(await this.#backoff(attempt, 1))) return false;
      }
      // Done (succeeded or skipped): a drain from here on does not hand it over again.
      if (index < records.length - 1) await this.#advance([record]);
    }
    return true;
  }

  /**
   * The poison policy. The batch is a queue of runs of records, handled in order: a run that fails is
   * split in two (with `bisect`; at the record the handler reported, when it did) or retried with
   * backoff; a run that failed `maxAttempts` times on its own, or holds a record past `maxRecordAgeMs`, is
   * given up: dead-lettered, then skipped. Every run done (succeeded or given up) moves the processed
   * position, so the checkpoint stops just before a record being retried and never passes one that was
   * neither processed nor given up. A run that succeeded is never handed over again. A failure that is not
   * the records' fault is retried as it is, with backoff, neither split nor counted against them.
   */
  async #isolate(batch: RecordsBatch<R>, policy: ResolvedPoisonPolicy<R>): Promise<boolean> {
    const { reporter } = this.#settings;
    const runs: Array<{ records: readonly R[]; attempts: number; held: number }> = [{ records: batch.records, attempts: 0, held: 0 }];
    for (let run = runs[0]; run !== undefined; run = runs[0]) {
      if (!this.#mayHandOver()) return false;
      const last = runs.length === 1;
      const result = await this.#call(run.records, batch, last ? batch.position : lastOf(run.records).position);
      if (this.#lease.signal.aborted) return false;
      if (result.done > 0 || result.error === null) this.#recordsSucceeded();
      if (result.error === null) {
        runs.shift();
        if (!last) await this.#advance(run.records);
        continue;
      }
      if (result.done > 0) {
        await this.#advance(run.records.slice(0, result.done));
        run.records = run.records.slice(result.done);
        run.attempts = 0;
        run.held = 0;
      }
      if (this.#yields()) return false;
      if (!this.#isRecordError(result.error)) {
        run.held++;
        reporter.handlerFailed(this.shardId, run.attempts + run.held, result.error);
        this.#hold('handler-error', result.error);
        if (!(await this.#backoff(run.held, run.records.length))) return false;
        continue;
      }
      run.attempts++;
      reporter.handlerFailed(this.shardId, run.attempts + run.held, result.error);
      if (policy.bisect && run.records.length > 1) {
        // A split is not a retry: it happens at once. The handler's report names the record that failed.
        const at = result.reported ? 1 : Math.ceil(run.records.length / 2);
        const left = { records: run.records.slice(0, at), attempts: result.reported ? 1 : 0, held: 0 };
        const right = { records: run.records.slice(at), attempts: 0, held: 0 };
        reporter.bisected(this.shardId, run.records.length, left.records.length, right.records.length, result.error);
        runs.splice(0, 1, left, right);
        if (!result.reported) continue;
        run = left;
      }
      const reason: GiveUpReason | null =
        run.attempts >= policy.maxAttempts ? 'max-attempts' : this.#expired(run.records, policy.maxRecordAgeMs) ? 'max-record-age' : null;
      if (reason === null || !this.#mayGiveUp(run.records.length, result.error)) {
        if (!(await this.#backoff(run.attempts, run.records.length))) return false;
        continue;
      }
      if (!(await this.#giveUp(run.records, run.attempts, reason, result.error, policy))) return false;
      this.#gaveUp(run.records.length);
      runs.shift();
      if (runs.length > 0) await this.#advance(run.records);
    }
    return true;
  }

  /**
   * Whether a handler failure is the fault of the records it was handed, so that they may be given up
   * (DESIGN section 5, rule 10): not one of Leasehold's own errors (but the one core makes for a report
   * without an error), anywhere in its causes, and not one the user's `isRecordError` clears.
   */
  #isRecordError(error: Error): boolean {
    try {
      return isRecordError(error, this.#settings.givingUp.isRecordError);
    } catch (thrown) {
      this.#settings.reporter.error(asError(thrown), 'isRecordError');
      return false;
    }
  }

  /**
   * Whether `count` more records may be given up now: not past `maxRecordsGivenUpInARow` in a row. When
   * not, the shard holds at them, reported stalled, and they are retried until a record succeeds.
   */
  #mayGiveUp(count: number, error: Error): boolean {
    if (this.#givenUpInARow + count <= this.#settings.givingUp.maxInARow) return true;
    this.#hold('give-up-limit', error);
    return false;
  }

  #gaveUp(count: number): void {
    this.#givenUpInARow += count;
    if (this.#heldBack?.reason === 'handler-error') this.#resume();
  }

  /** A record succeeded: giving up may start again, and a shard held back moves again. */
  #recordsSucceeded(): void {
    this.#givenUpInARow = 0;
    this.#resume();
  }

  /** The shard holds at records it will not give up: reported once per reason, until it moves again. */
  #hold(reason: HoldReason, error: Error): void {
    if (this.#heldBack?.reason === reason) return;
    this.#heldBack = { reason, since: this.#settings.clock.now(), error };
    this.#settings.reporter.heldBack(this.shardId, reason, error);
  }

  #resume(): void {
    if (this.#heldBack === null) return;
    this.#heldBack = null;
    this.#settings.reporter.resumed(this.shardId);
  }

  /** Whether a record of `records` arrived in the stream longer than `maxRecordAgeMs` ago, by the worker's wall clock. */
  #expired(records: readonly R[], maxRecordAgeMs: number): boolean {
    if (maxRecordAgeMs === Infinity) return false;
    const now = this.#settings.clock.wallTime();
    return records.some((record) => record.approximateArrivalTimestampMs !== undefined && now - record.approximateArrivalTimestampMs > maxRecordAgeMs);
  }

  /**
   * Gives records up: the dead-letter handler first, called again with backoff until it accepts them
   * (the shard waits meanwhile; on a lost lease or a drain they are left to the next reader, unskipped),
   * then each is reported skipped. `false` when the records were not given up.
   */
  async #giveUp(records: readonly R[], attempts: number, reason: GiveUpReason, error: Error, policy: ResolvedPoisonPolicy<R>): Promise<boolean> {
    const { reporter, clock } = this.#settings;
    const positions = records.map((record) => record.position);
    const deadLetter = this.#unsafe.skipWithoutDeadLetter ? undefined : policy.deadLetter;
    if (deadLetter) {
      const failure = { shardId: this.shardId, records, positions, error, attempts, reason, fencingToken: this.#lease.fencingToken, signal: this.#lease.signal };
      for (let attempt = 1; ; attempt++) {
        if (!this.#mayHandOver()) return false;
        this.#handlingSince = clock.now();
        try {
          await deadLetter(failure);
          break;
        } catch (deadLetterError) {
          if (this.#lease.signal.aborted) return false;
          const retryInMs = this.#delay(attempt);
          reporter.deadLetterFailed(this.shardId, positions, attempt, asError(deadLetterError), retryInMs);
          if (this.#yields() || !(await this.#sleep(retryInMs))) return false;
        } finally {
          this.#handlingSince = null;
        }
      }
      reporter.deadLettered(this.shardId, positions, attempts, reason, error);
    }
    for (const position of positions) reporter.recordSkipped(this.shardId, position, error, { reason, attempts, deadLettered: policy.deadLetter !== undefined });
    this.#batchTally.givenUp += records.length;
    return true;
  }

  /** Part of the batch in flight is done while the rest is not: it counts as processed, and is checkpointed per policy. */
  async #advance(done: readonly R[]): Promise<void> {
    const last = done[done.length - 1];
    if (last === undefined) return;
    this.#processed = last.position;
    this.#sinceCheckpoint.records += done.length;
    this.#batchTally.advanced += done.length;
    // Not again where the handler checkpointed itself (it may have committed its writes with it).
    if (this.#committed !== last.position && this.#checkpointed !== last.position && this.#dueForCheckpoint(done.length)) {
      await this.#checkpoint(last.position).catch((error: unknown) => this.#settings.reporter.error(asError(error), 'checkpoint'));
    }
  }

  /**
   * One call of the handler: how many of `records` are done (all, or those before the record it reported
   * failed) and the error when not all are. A report naming no record of the call fails the whole call.
   */
  async #call(records: readonly R[], batch: RecordsBatch<R>, position: Position): Promise<{ done: number; error: Error | null; reported: boolean }> {
    // Records the lease's stored checkpoint covers in this tenure are done: an earlier call's checkpoint
    // whose outcome was unknown (and could not be read back) applied after all, its writes with it
    // (`checkpointWith`), and this worker learned so from a later write's conflict. Handing them over
    // again would apply their effects twice.
    const covered = this.#unsafe.retryCheckpointedPrefix ? 0 : this.#storedPrefix(records);
    if (covered === records.length) return { done: records.length, error: null, reported: false };
    if (covered > 0) {
      const rest = await this.#call(records.slice(covered), batch, position);
      return { done: covered + rest.done, error: rest.error, reported: rest.reported };
    }
    let response: void | BatchResponse;
    const call: CallCheckpoints = { through: null };
    try {
      response = await this.#handle(records, { ...batch, records, position }, call);
    } catch (error) {
      // What it checkpointed through this call's context before it failed is done (DESIGN section 5, rule
      // 10): its effects may be committed with that checkpoint (`checkpointWith`), so handing those records
      // over again would apply them twice. The rest of the call is the failure.
      const committed = this.#checkpointedRecords(records, position, call);
      if (committed === records.length) {
        this.#settings.reporter.error(asError(error), 'processBatch');
        return { done: records.length, error: null, reported: false };
      }
      return { done: committed, error: asError(error), reported: false };
    }
    // Only an object with `failedAt` is a report: handlers written before reports existed may return anything.
    if (typeof response !== 'object' || response === null || !('failedAt' in response) || this.#unsafe.ignoreBatchResponse) {
      return { done: records.length, error: null, reported: false };
    }
    const { failedAt, error } = response;
    const index = records.findIndex((record) => record.position === failedAt);
    const committed = this.#checkpointedRecords(records, position, call);
    if (index < 0) {
      const message = `[core] processBatch reported failedAt ${describeValue(failedAt)} for shard ${describeValue(this.shardId)}, which is not the position of a record it was handed`;
      return { done: committed, error: committed === records.length ? null : new InvalidInputError(message), reported: false };
    }
    const reported = error instanceof Error ? error : new LeaseholdError('ERR_RECORD_FAILED', `[core] processBatch reported record ${describeValue(failedAt)} of shard ${describeValue(this.shardId)} as failed`);
    // A report behind what the call checkpointed cannot take those records back.
    if (committed > index) return { done: committed, error: committed === records.length ? null : reported, reported: false };
    return { done: index, error: reported, reported: true };
  }

  /**
   * How many of `records` (from the first) the call checkpointed through its context, by `checkpoint` or
   * `checkpointWith`: they are done whatever the handler does next.
   */
  #checkpointedRecords(records: readonly R[], position: Position, call: CallCheckpoints): number {
    const through = call.through;
    if (through === null) return 0;
    if (this.#unsafe.retryCheckpointedPrefix) return through === position && this.#committed === position ? records.length : 0;
    if (through === position) return records.length;
    const { source } = this.#settings;
    let done = 0;
    while (done < records.length && source.comparePositions((records[done] as R).position, through) <= 0) done++;
    return done;
  }

  async #handle(records: readonly R[], batch: RecordsBatch<R>, call: CallCheckpoints): Promise<void | BatchResponse> {
    const context: BatchContext = {
      shardId: this.shardId,
      streamId: this.#settings.streamId,
      signal: this.#lease.signal,
      fencingToken: this.#lease.fencingToken,
      millisBehindLatest: batch.millisBehindLatest,
      position: batch.position,
      checkpoint: async (position?: Position) => {
        const target = position ?? batch.position;
        if (this.#settings.source.comparePositions(target, batch.position) > 0) {
          throw new InvalidInputError(
            `[core] checkpoint ${describeValue(target)} of shard ${describeValue(this.shardId)} is past the batch being processed (${describeValue(batch.position)})`,
          );
        }
        await this.#checkpoint(target);
        this.#through(call, target);
      },
      checkpointWith: async (write: CheckpointWrite, position?: Position) => {
        const target = position ?? batch.position;
        if (this.#settings.source.comparePositions(target, batch.position) > 0) {
          throw new InvalidInputError(
            `[core] checkpoint ${describeValue(target)} of shard ${describeValue(this.shardId)} is past the batch being processed (${describeValue(batch.position)})`,
          );
        }
        try {
          await this.#checkpoint(target, write);
        } catch (error) {
          // An earlier call of this tenure whose outcome was unknown applied after all (its writes with it):
          // the stored checkpoint already covers the target, so these records are done, not to be written again.
          if (!(error instanceof CheckpointBehindError) || !this.#storedCovers(target)) throw error;
        }
        this.#committed = target;
        this.#through(call, target);
      },
    };
    this.#handlingSince = this.#settings.clock.now();
    try {
      return await this.#settings.processBatch(records, context);
    } finally {
      this.#handlingSince = null;
    }
  }

  /** Notes that the call checkpointed through `target`, unless it did further already. */
  #through(call: CallCheckpoints, target: Position): void {
    if (Checkpoint.isSentinel(target)) return;
    if (call.through === null || this.#settings.source.comparePositions(target, call.through) > 0) call.through = target;
  }

  /** The lease's stored checkpoint, when it is a record's and the lease is held in this pump's tenure; `null` otherwise. */
  #storedCheckpoint(): Position | null {
    const held = this.#settings.coordinator.lease(this.shardId);
    const stored = held?.fencingToken === this.#lease.fencingToken ? held.checkpoint : null;
    return stored === null || Checkpoint.isSentinel(stored) ? null : stored;
  }

  /** How many of `records`, from the first, the lease's stored checkpoint covers in this pump's tenure. */
  #storedPrefix(records: readonly R[]): number {
    const stored = this.#storedCheckpoint();
    let covered = 0;
    while (stored !== null && covered < records.length && this.#settings.source.comparePositions((records[covered] as R).position, stored) <= 0) covered++;
    return covered;
  }

  /** Whether the lease, held in this pump's tenure, stores a checkpoint at or past `position` (a record's, not a sentinel). */
  #storedCovers(position: Position): boolean {
    const stored = this.#storedCheckpoint();
    return stored !== null && this.#settings.source.comparePositions(stored, position) >= 0;
  }

  /** Waits before the handler gets `records` records again after their `attempt`th failure; `false` when the pump stops meanwhile. */
  async #backoff(attempt: number, records: number): Promise<boolean> {
    if (this.#yields()) return false;
    const delay = this.#delay(attempt);
    this.#settings.reporter.retried(this.shardId, records, attempt + 1, delay);
    return this.#sleep(delay);
  }

  #delay(attempt: number): number {
    const { retry, random } = this.#settings;
    return Math.min(retry.maxDelayMs, retry.initialDelayMs * 2 ** (attempt - 1)) * (0.5 + random.next() / 2);
  }

  async #sleep(delayMs: number): Promise<boolean> {
    try {
      await this.#settings.clock.sleep(delayMs, this.#yield.signal);
      return true;
    } catch {
      return false;
    }
  }

  async #checkpoint(position: Position, write?: CheckpointWrite): Promise<void> {
    const rewound = this.#paused || this.#settings.rewinds() !== this.#rewindsAtStart;
    if (rewound && !this.#unsafe.checkpointAfterRewind) throw new AbortedError(`[core] shard ${describeValue(this.shardId)} was rewound: a checkpoint of an earlier batch is refused`);
    if (write) await this.#settings.coordinator.checkpointThrough(this.#lease, position, write);
    else await this.#settings.coordinator.checkpoint(this.#lease, position);
    this.#checkpointed = position;
    this.#sinceCheckpoint = { records: 0, since: this.#settings.clock.now() };
    this.#settings.reporter.checkpointed(this.shardId, position);
  }

  #requireProcessed(): Position {
    throw new InvalidInputError(`[core] shard ${describeValue(this.shardId)} has no processed batch to checkpoint yet`);
  }

  /**
   * At the shard's end: checkpoint `SHARD_END`, create the children's leases at once (the leader's next
   * shard sync would too, later), and give the lease back. A child is created here only when each of its
   * other parents has a lease (a merge child waits for both parents; a parent without a lease may be one
   * not created yet), and starts at its own beginning; what is left is the leader's. The children's
   * parents come from the end itself when the source named them there, otherwise from a listing.
   */
  async #finish(end: EndOfShard): Promise<void> {
    const { coordinator, storage, group, source, hooks, reporter } = this.#settings;
    const { childShardIds } = end;
    await this.#checkpoint(Checkpoint.SHARD_END);
    this.#draining = true; // the lease is given back below: that is no loss
    await createChildLeases({ storage, group, source, reporter, unsafe: this.#unsafe, signal: this.#reading.signal }, this.shardId, end);
    reporter.ended(this.shardId, childShardIds);
    await this.#hook(() => hooks.shardEnded?.(this.shardId, childShardIds), 'shardEnded');
    await coordinator.release(this.shardId);
  }

  async #hook(call: () => void | Promise<void> | undefined, name: string): Promise<void> {
    try {
      await call();
    } catch (error) {
      this.#settings.reporter.error(asError(error), name);
    }
  }
}

/** Resolves like `promise`, or with `undefined` as soon as `signal` fires. */
function abortable<T>(promise: Promise<T>, signal: AbortSignal): Promise<T | undefined> {
  if (signal.aborted) return Promise.resolve(undefined);
  return new Promise((resolve, reject) => {
    const onAbort = (): void => resolve(undefined);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        if (signal.aborted) resolve(undefined);
        else reject(error instanceof Error ? error : abortReason(signal));
      },
    );
  });
}

function lastOf<T>(items: readonly T[]): T {
  return items[items.length - 1] as T;
}

