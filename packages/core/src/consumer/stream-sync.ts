/**
 * The leader's chores in a multi-stream group (DESIGN section 5, "Many streams in one group"): one round
 * lists the group's leases once, then runs each stream's shard sync on its own leases only (a stream whose
 * listing fails is skipped this round and touches nothing), and deletes the leases of a stream that left
 * the group's list once it has been gone for the grace period and nobody holds them.
 */
import { unlessAborted, type Clock } from '../clock.js';
import { describeValue, StorageOutcomeUnknownError } from '../errors.js';
import { RECORD_FORMAT, type CheckpointStorage, type LeaseListing, type LeaseRecord, type Position } from '../storage.js';
import type { ShardSource } from '../source.js';
import { ShardSync, type ShardSyncReport } from './leader-duties.js';
import { unsafeOf, withUnsafe } from '../unsafe.js';
import { parseStreamLeaseKey } from '../stream-keys.js';
import { streamView, type StreamSource } from './streams.js';

const PKG = 'core';

/** The leader record metadata field that keeps each stream's birth: `{ [streamId]: { p?: position, b?: 1, r?: 1 } }`. */
export const STREAMS_FIELD = 'leasehold.streams';

/**
 * What the group knows of one stream's birth: where its first shards start (`p`), that it is born (`b`),
 * and that it left the group and its leases were deleted (`r`): if it comes back, it is born again over
 * them.
 */
export interface StreamBirth {
  readonly p?: Position;
  readonly b?: 1;
  readonly r?: 1;
}

/** Each stream's birth, by stream id, as the leader record keeps it. */
export type StreamBirths = Readonly<Record<string, StreamBirth>>;

/** Reads the births from the leader record's metadata; a value that does not parse counts as none. */
export function parseStreamBirths(value: string | undefined): StreamBirths {
  if (value === undefined) return {};
  try {
    const parsed = JSON.parse(value) as unknown;
    return typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed) ? (parsed as StreamBirths) : {};
  } catch {
    return {};
  }
}

/** What one multi-stream round did. */
export interface MultiStreamSyncReport {
  /** Each listed stream's shard sync, by stream id (missing: its sync failed, see `failed`). */
  streams: Record<string, ShardSyncReport>;
  /** Streams whose sync failed this round (their source did not answer), with the error. */
  failed: Record<string, Error>;
  /** Streams no longer listed whose leases remain: how many, and in how many ms they are deleted (0: now, if unheld). */
  removed: Record<string, { leases: number; deleteInMs: number }>;
  /** Leases deleted because their stream left the group. */
  deleted: string[];
  /** Leases whose key names no stream (`<streamId>:<shardId>`): not this group's to judge, never touched. */
  foreign: string[];
  /** Whether every listed stream's round was complete. */
  complete: boolean;
  /**
   * Whether the round may mark the group born: every stream whose sync ran had a complete round, and some
   * listed stream is born, by this round or an earlier one (or none is listed). A stream whose sync failed
   * does not hold the others back: it is synced, and read, once it answers, as a stream added later is.
   */
  born: boolean;
}

/** Options of {@link MultiStreamSync}. */
export interface MultiStreamSyncOptions {
  group: string;
  storage: CheckpointStorage;
  clock: Clock;
  /** The group's streams now (the list is resolved again before each round). */
  streams: () => Promise<ReadonlyMap<string, StreamSource>>;
  /** Where a stream's birth shards start. */
  initialPositionOf: (stream: StreamSource) => Position;
  /** How long a stream must have left the list before its leases are deleted. */
  removedStreamGraceMs: number;
  /** The births as the leader record holds them now, and a write of new ones (false: it did not apply). */
  births: () => StreamBirths;
  writeBirths: (next: StreamBirths) => Promise<boolean>;
  onLeasesChanged?: (() => void) | undefined;
  isLeader: () => boolean;
  onError?: ((error: Error, operation: string) => void) | undefined;
}

export class MultiStreamSync {
  readonly #options: MultiStreamSyncOptions;
  /** Streams seen with leases but missing from the list, and since when (this leader's clock). */
  readonly #missingSince = new Map<string, number>();

  constructor(options: MultiStreamSyncOptions) {
    this.#options = options;
  }

  async run(signal: AbortSignal): Promise<MultiStreamSyncReport> {
    const { group, storage, clock, isLeader } = this.#options;
    const report: MultiStreamSyncReport = { streams: {}, failed: {}, removed: {}, deleted: [], foreign: [], complete: true, born: false };
    // The list first, then the leases: a stream added meanwhile is synced next round; one removed
    // meanwhile still has its leases counted as listed, and waits its grace from the next round on.
    const streams = await this.#options.streams();
    // Given up once the term ends (a stop steps down first), as a single stream's sync gives up its reads.
    const listing = unsafeOf(this.#options).stopWaitsForListing ? await storage.listLeases(group) : await unlessAborted(storage.listLeases(group), signal);
    for (const stream of streams.values()) {
      if (signal.aborted || !isLeader()) return { ...report, complete: false, born: false };
      const birth = this.#options.births()[stream.streamId];
      const unsafe = unsafeOf(this.#options);
      const crossStream = unsafe.crossStreamSync === true;
      const sync = new ShardSync(withUnsafe({
        group,
        source: crossStream ? judgingOthersGone(stream) : stream,
        storage: crossStream ? { ...streamView(storage, listing, stream), listLeases: () => Promise.resolve(listing) } : streamView(storage, listing, stream),
        initialPosition: this.#options.initialPositionOf(stream),
        clock,
        // Only a stream added back after its leases were deleted is created over them. A first birth never
        // is: a round on a stale listing (a leader paused in the middle of it) would create again a lease
        // that was finished and deleted meanwhile, which the store refuses otherwise.
        recreateDeleted: birth?.r === 1 && birth.b !== 1,
        pinBirth: (pinned) => this.#pin(stream.streamId, pinned),
        onLeasesChanged: this.#options.onLeasesChanged,
        isLeader,
        onError: this.#options.onError,
      }, unsafe));
      try {
        const round = await sync.run(signal);
        report.streams[stream.streamId] = round;
        if (!round.complete) report.complete = false;
        else if (birth?.b !== 1) await this.#markBorn(stream.streamId);
      } catch (error) {
        report.complete = false;
        report.failed[stream.streamId] = error instanceof Error ? error : new Error(String(error));
        this.#options.onError?.(report.failed[stream.streamId] as Error, `shard-sync ${stream.streamId}`);
      }
    }
    const rounds = Object.values(report.streams);
    const births = this.#options.births();
    const someBorn = [...streams.keys()].some((streamId) => report.streams[streamId]?.complete === true || births[streamId]?.b === 1);
    report.born = rounds.every((round) => round.complete) && (someBorn || streams.size === 0);
    await this.#removeFormer(streams, listing, report, signal);
    return report;
  }

  /** Leases of streams no longer listed: kept for the grace period, then deleted where nobody holds them. */
  async #removeFormer(streams: ReadonlyMap<string, StreamSource>, listing: LeaseListing, report: MultiStreamSyncReport, signal: AbortSignal): Promise<void> {
    const { group, storage, clock, isLeader, removedStreamGraceMs } = this.#options;
    const former = new Map<string, LeaseRecord[]>();
    // The streams with a lease that cannot be read back: it still stands for its shard, and for its stream.
    const unreadableStreams = new Set<string>();
    if (!unsafeOf(this.#options).birthForgetsUnreadable) {
      for (const error of listing.corrupt) {
        const parsed = error.leaseKey === undefined ? undefined : parseStreamLeaseKey(error.leaseKey);
        if (parsed) unreadableStreams.add(parsed.streamId);
      }
    }
    for (const lease of listing.leases) {
      const parsed = parseStreamLeaseKey(lease.leaseKey);
      if (!parsed) {
        report.foreign.push(lease.leaseKey);
        continue;
      }
      // A newer core's record is not ours to judge (as in ShardSync).
      if (streams.has(parsed.streamId) || lease.format > RECORD_FORMAT) continue;
      const list = former.get(parsed.streamId) ?? [];
      list.push(lease);
      former.set(parsed.streamId, list);
    }
    const now = clock.now();
    for (const streamId of this.#missingSince.keys()) if (!former.has(streamId)) this.#missingSince.delete(streamId);
    // A stream whose leases are all gone is forgotten but for that, so that it is born again (over its
    // deleted leases) if it comes back. Not one with a lease that does not read back: its shards are not
    // gone, and born again it would pin LATEST anew, so that a shard whose lease its first birth had not
    // created yet would start at the new pin and skip what came between (seed 169289 of the exactly-once
    // multi-stream consumer simulation, found by fresh seeds; unsafe switch `birthForgetsUnreadable`).
    const births = this.#options.births();
    const forgotten = Object.entries(births)
      .filter(([streamId, birth]) => !streams.has(streamId) && !former.has(streamId) && !unreadableStreams.has(streamId) && (birth.r !== 1 || birth.p !== undefined || birth.b !== undefined))
      .map(([streamId]) => streamId);
    if (forgotten.length > 0 && isLeader()) {
      const next: Record<string, StreamBirth> = { ...births };
      for (const streamId of forgotten) next[streamId] = { r: 1 };
      await this.#options.writeBirths(next);
    }
    if (former.size === 0) return;
    // A stream due for deletion is judged on the list resolved again now: one added back while the listing
    // was on its way (a listing of a large group, or stalled, takes seconds) is listed, and keeps its
    // leases. (Judged on the list of before the listing, it lost them: seed 4579 of the multi-stream
    // consumer simulation with stalled listings; unsafe switch `formerOnStaleList`.)
    const due = [...former].some(([streamId]) => (this.#missingSince.get(streamId) ?? now) + removedStreamGraceMs <= now);
    if (due && !unsafeOf(this.#options).formerOnStaleList) {
      let listed: ReadonlyMap<string, StreamSource>;
      try {
        listed = await this.#options.streams();
      } catch (error) {
        // Not known to be gone: nothing is deleted this round.
        this.#options.onError?.(error instanceof Error ? error : new Error(String(error)), 'streams');
        return;
      }
      for (const streamId of [...former.keys()]) {
        if (!listed.has(streamId)) continue;
        former.delete(streamId);
        this.#missingSince.delete(streamId);
      }
      if (signal.aborted || !isLeader()) return;
    }
    let alive: Map<string, string> | undefined;
    let unreadable: Set<string | undefined> | undefined;
    for (const [streamId, list] of former) {
      const since = this.#missingSince.get(streamId) ?? now;
      this.#missingSince.set(streamId, since);
      const deleteInMs = Math.max(0, since + removedStreamGraceMs - now);
      report.removed[streamId] = { leases: list.length, deleteInMs };
      if (deleteInMs > 0) continue;
      if (!alive || !unreadable) {
        // Who holds what is judged on a roster read after the listing, by ShardSync's rule.
        const roster = await storage.getRoster(group);
        alive = new Map(roster.members.filter((member) => member.status === 'alive').map((member) => [member.workerId, member.incarnation]));
        unreadable = new Set(roster.corrupt.map((error) => error.workerId));
      }
      for (const lease of list) {
        if (signal.aborted || !isLeader()) return;
        const held = lease.owner !== null && (unreadable.has(lease.owner) || alive.get(lease.owner) === lease.incarnation);
        if (held) continue;
        const outcome = await storage.deleteLease(group, lease.leaseKey, lease.version);
        if (outcome.status === 'applied') report.deleted.push(lease.leaseKey);
      }
    }
    if (report.deleted.length > 0) this.#options.onLeasesChanged?.();
  }

  async #pin(streamId: string, pinned: Position): Promise<Position> {
    const births = this.#options.births();
    const recorded = births[streamId]?.p;
    if (recorded !== undefined) return recorded;
    if (!(await this.#options.writeBirths({ ...births, [streamId]: { ...births[streamId], p: pinned } }))) {
      throw new StorageOutcomeUnknownError(`[${PKG}] the birth position of stream ${describeValue(streamId)} could not be recorded in the leader record; the next round tries again`);
    }
    return pinned;
  }

  async #markBorn(streamId: string): Promise<void> {
    const births = this.#options.births();
    await this.#options.writeBirths({ ...births, [streamId]: { ...births[streamId], b: 1 } });
  }
}

/** The unsafe `crossStreamSync`: a stream's source that answers "gone" for a shard of another stream. */
function judgingOthersGone(stream: StreamSource): ShardSource {
  return {
    listShards: (options) => stream.listShards(options),
    read: (leaseKey, from, options) => stream.read(leaseKey, from, options),
    comparePositions: (a, b) => stream.comparePositions(a, b),
    isShardGone: async (leaseKey, options) => !stream.owns(leaseKey) || ((await stream.isShardGone?.(leaseKey, options)) ?? false),
  };
}
