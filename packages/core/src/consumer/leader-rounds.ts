/**
 * The consumer's part of leadership (DESIGN section 5, "The leader", with "The shard lifecycle" and
 * "Many streams in one group"): while this worker leads, a shard sync round every shard sync interval,
 * one stream's or every stream's, told as events and noted in the leader record once the group is born;
 * and, before a worker takes its first lease, the wait for that note. The consumer owns one; it asks back
 * through {@link LeaderRoundsHost} for the streams it reads, where their shards start, and its events.
 */
import type { Clock } from '../clock.js';
import { StorageOutcomeUnknownError } from '../errors.js';
import type { LeaderElector } from '../leader/elector.js';
import type { LeaseCoordinator } from '../lease/coordinator.js';
import type { ShardSource, SourceRecord } from '../source.js';
import type { CheckpointStorage, LeaderStore, Position } from '../storage.js';
import { withUnsafe, type ConsumerUnsafe } from '../unsafe.js';
import type { ConsumerEvents } from './events.js';
import { leaderLoop, ShardSync } from './leader-duties.js';
import type { Logger } from './options.js';
import { MultiStreamSync, parseStreamBirths, STREAMS_FIELD } from './stream-sync.js';
import type { StreamSource } from './streams.js';

const PKG = 'core';

/** The leader record metadata field set once the group's first complete shard sync is done. */
export const BORN_FIELD = 'leasehold.shardsSynced';

/** The leader record metadata field that keeps where the group's birth shards start, once `LATEST` is pinned. */
export const BIRTH_POSITION_FIELD = 'leasehold.birthPosition';

/** What the leader's rounds need back from the consumer that owns them. */
export interface LeaderRoundsHost<R extends SourceRecord> {
  /** Whether the consumer still runs: a worker that stops no longer waits for the group's birth. */
  running(): boolean;
  /** A multi-stream group's streams, resolved again for a round (the last known when that fails). */
  streams(): Promise<ReadonlyMap<string, StreamSource<R>>>;
  /** Where a shard of the stream with no checkpoint starts. */
  initialPositionOf(source: ShardSource<R>): Position;
  emit<K extends keyof ConsumerEvents>(name: K, event: ConsumerEvents[K]): void;
  report(error: unknown, operation: string): void;
}

export interface LeaderRoundsOptions<R extends SourceRecord> {
  readonly group: string;
  /** The one stream's source, or `undefined` in a multi-stream group. */
  readonly source: ShardSource<R> | undefined;
  readonly multiStream: boolean;
  readonly storage: CheckpointStorage;
  readonly leaderStore: LeaderStore | undefined;
  readonly coordinator: LeaseCoordinator;
  readonly initialPosition: Position;
  readonly shardSyncIntervalMs: number;
  readonly removedStreamGraceMs: number;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly unsafe: ConsumerUnsafe;
  /** Fires when the consumer stops. */
  readonly signal: AbortSignal;
  readonly host: LeaderRoundsHost<R>;
}

/** The leader's shard sync rounds, and the wait for the group's birth. */
export class LeaderRounds<R extends SourceRecord> {
  readonly #options: LeaderRoundsOptions<R>;
  readonly #host: LeaderRoundsHost<R>;
  #work: Promise<void> = Promise.resolve();

  constructor(options: LeaderRoundsOptions<R>) {
    this.#options = options;
    this.#host = options.host;
  }

  /** The rounds of the last term this worker led, settled once that term ended. */
  get work(): Promise<void> {
    return this.#work;
  }

  /** This worker was elected: the rounds of the term start, until `signal` fires. */
  lead(elector: LeaderElector, term: number, signal: AbortSignal): void {
    const { logger } = this.#options;
    logger.info({ term }, 'elected leader');
    this.#host.emit('leader-elected', { term });
    if (this.#options.multiStream) {
      this.#leadStreams(elector, term, signal);
      return;
    }
    const sync = new ShardSync(withUnsafe({
      group: this.#options.group,
      source: this.#options.source as ShardSource<R>,
      storage: this.#options.storage,
      initialPosition: this.#options.initialPosition,
      clock: this.#options.clock,
      onLeasesChanged: () => this.#options.coordinator.noteLeasesChanged(),
      isLeader: () => !signal.aborted && elector.isLeader(),
      pinBirth: async (pinned) => {
        const recorded = elector.record?.metadata[BIRTH_POSITION_FIELD];
        if (recorded !== undefined) return recorded;
        if (!(await elector.annotate({ [BIRTH_POSITION_FIELD]: pinned }))) {
          throw new StorageOutcomeUnknownError(`[${PKG}] the group's birth position could not be recorded in the leader record; the next round tries again`);
        }
        return pinned;
      },
      onError: (error, operation) => this.#host.report(error, operation),
    }, this.#options.unsafe));
    this.#rounds(elector, signal, () => sync.run(signal), (report) => {
      if (report.created.length > 0 || report.deleted.length > 0 || report.missing.length > 0 || report.rewound.length > 0) {
        logger.info({ term, ...report }, 'shard sync');
      }
      this.#host.emit('shard-sync', report);
      return report.complete;
    });
  }

  /** The leader's chores in a multi-stream group: each stream's shard sync, and streams that left (see {@link MultiStreamSync}). */
  #leadStreams(elector: LeaderElector, term: number, signal: AbortSignal): void {
    const { logger } = this.#options;
    const sync = new MultiStreamSync(withUnsafe({
      group: this.#options.group,
      storage: this.#options.storage,
      clock: this.#options.clock,
      // The leader resolves the list before each round; if that fails it syncs the streams it knew.
      streams: () => this.#host.streams(),
      initialPositionOf: (stream) => this.#host.initialPositionOf(stream as unknown as ShardSource<R>),
      removedStreamGraceMs: this.#options.removedStreamGraceMs,
      births: () => parseStreamBirths(elector.record?.metadata[STREAMS_FIELD]),
      writeBirths: (next) => elector.annotate({ [STREAMS_FIELD]: JSON.stringify(next) }),
      onLeasesChanged: () => this.#options.coordinator.noteLeasesChanged(),
      isLeader: () => !signal.aborted && elector.isLeader(),
      onError: (error, operation) => this.#host.report(error, operation),
    }, this.#options.unsafe));
    this.#rounds(elector, signal, () => sync.run(signal), (report) => {
      for (const [streamId, round] of Object.entries(report.streams)) {
        if (round.created.length > 0 || round.deleted.length > 0 || round.missing.length > 0) logger.info({ term, streamId, ...round }, 'shard sync');
        this.#host.emit('shard-sync', { ...round, streamId });
      }
      if (report.deleted.length > 0) logger.info({ term, deleted: report.deleted }, 'leases of removed streams deleted');
      this.#host.emit('streams-sync', report);
      return report.born;
    });
  }

  /**
   * The leader's rounds, one a shard sync interval until its term ends, in one- and multi-stream groups
   * alike: a round runs the sync, tells what it did (`told`, which says whether the group is born now),
   * and the first born round notes so in the leader record, which workers wait for before they take
   * leases. A round that fails is reported; the next one tries again. `run` hands back the sync's own
   * promise, and `told` runs at once after it, so a round awaits exactly what the sync and the note do.
   */
  #rounds<T>(elector: LeaderElector, signal: AbortSignal, run: () => Promise<T>, told: (report: T) => boolean): void {
    this.#work = leaderLoop(
      async () => {
        try {
          const report = await run();
          if (told(report) && elector.record?.metadata[BORN_FIELD] === undefined) {
            await elector.annotate({ [BORN_FIELD]: new Date(this.#options.clock.wallTime()).toISOString() });
          }
        } catch (error) {
          if (!signal.aborted) this.#host.report(error, 'shard-sync');
        }
      },
      this.#options.shardSyncIntervalMs,
      this.#options.clock,
      signal,
    );
  }

  /** Waits until the leader record says the group's first complete shard sync is done (DESIGN section 5). */
  async awaitBirth(elector: LeaderElector): Promise<void> {
    const takeIntervalMs = this.#options.coordinator.takeIntervalMs;
    const store = this.#options.leaderStore as LeaderStore;
    // The leader record is read here every quarter of a take tick, not only when the elector next looks
    // (a renew interval): the workers of a new group then start taking within a fraction of a tick of each
    // other and deal the shards between them at once, instead of the leader taking them all first.
    let record = elector.record;
    while (this.#host.running() && elector.record?.metadata[BORN_FIELD] === undefined && record?.metadata[BORN_FIELD] === undefined) {
      try {
        await this.#options.clock.sleep(takeIntervalMs / 4, this.#options.signal);
      } catch {
        return;
      }
      record = await store.getLeader(this.#options.group).catch((error: unknown) => {
        this.#host.report(error, 'leader read');
        return record;
      });
    }
  }
}
