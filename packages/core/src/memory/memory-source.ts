import { createHash } from 'node:crypto';
import { systemClock, systemRandom, type Clock, type Random } from '../clock.js';
import { describeValue, InvalidConfigError, InvalidInputError, SourceError } from '../errors.js';
import { compareNumericPositions } from '../position.js';
import type { ReadOptions, ShardBatch, ShardInfo, ShardSource, SourceRecord } from '../source.js';
import { Checkpoint, type Position } from '../storage.js';

const PKG = 'core';

/** How often a caught-up reader is answered with an empty batch. */
const EMPTY_BATCH_EVERY_MS = 1_000;

/** The hash key space of a stream, as Kinesis has it: the MD5 of the partition key, 0 to 2^128 - 1. */
const HASH_SPACE = 2n ** 128n;

interface MemoryShard {
  readonly shardId: string;
  readonly parentShardIds: readonly string[];
  /** The shard's slice of the hash key space, both ends included. */
  readonly startingHashKey: bigint;
  readonly endingHashKey: bigint;
  readonly records: SourceRecord[];
  readonly children: string[];
  /** Times on the source's monotonic clock, so that a lagging listing can show the stream as it was. */
  readonly createdAt: number;
  closedAt: number | null;
  trimmedAt: number | null;
}

/** Options of {@link MemorySource}. */
export interface MemorySourceOptions {
  /** Records per batch at most. Default 100. */
  batchSize?: number;
  /** How long a reader that caught up waits before looking again, in ms of `clock`. Default 20. */
  idleDelayMs?: number;
  /** The clock readers wait on, and whose wall time stamps each record's arrival. Default: the process's. */
  clock?: Clock;
  /**
   * How stale a shard listing may be, in ms of `clock`: each `listShards` shows the stream as it was a
   * random moment of up to this long ago, as an eventually consistent listing does. Default 0 (exact).
   */
  listLagMs?: number;
  /** The random source for the listing's lag. Default: `Math.random`. */
  random?: Random;
  /**
   * How long a batch's resume hint can start a read, in ms of `clock`, as a Kinesis shard iterator lasts 5
   * minutes: an older one is refused and the read starts from its position. Default 300,000; 0 gives no
   * hints at all (a source without them).
   */
  resumeHintTtlMs?: number;
}

/**
 * An in-memory stream with shards, resharding and numeric positions, for unit tests of processing code
 * and of the runtime itself: `put` records, `split` and `merge` shards, and read them through the same
 * `ShardSource` contract as Kinesis.
 *
 * It behaves like Kinesis where the runtime's guarantees depend on it: a key routes by the MD5 of the
 * partition key to the open shard whose hash key range holds it, so that a key stays with its shard's
 * children across splits and merges; records carry arrival timestamps from the clock's wall time; and a
 * test can make listings lag or fail for a while, fail reads for a while, and trim closed shards from the
 * stream.
 */
export class MemorySource implements ShardSource {
  readonly #shards = new Map<string, MemoryShard>();
  readonly #batchSize: number;
  readonly #idleDelayMs: number;
  readonly #clock: Clock;
  readonly #listLagMs: number;
  readonly #random: Random;
  /** Shards whose next read fails once. */
  readonly #failOnce = new Set<string>();
  /** Shards whose reads fail until a time of the source's clock. */
  readonly #failUntil = new Map<string, number>();
  /** Listings fail until this time of the source's clock. */
  #listingsFailUntil = -Infinity;
  #sequence = 0;
  #nextShard = 0;
  readonly #hintTtlMs: number;
  /** How long after its batch a hint may be given back: four fifths of its lifetime, as Kinesis's 4 of 5 minutes. */
  readonly resumeHintMaxAgeMs: number | undefined;
  /** Reads started from a resume hint, and reads started by looking their position up. */
  readonly starts = { fromHint: 0, fromPosition: 0 };

  constructor(shardCount = 1, options: MemorySourceOptions = {}) {
    if (!Number.isInteger(shardCount) || shardCount < 1) {
      throw new InvalidConfigError(`[${PKG}] a MemorySource needs a positive whole number of shards, got ${describeValue(shardCount)}`);
    }
    this.#batchSize = options.batchSize ?? 100;
    this.#idleDelayMs = options.idleDelayMs ?? 20;
    this.#clock = options.clock ?? systemClock;
    this.#listLagMs = options.listLagMs ?? 0;
    if (!Number.isFinite(this.#listLagMs) || this.#listLagMs < 0) {
      throw new InvalidConfigError(`[${PKG}] listLagMs must be a non-negative number, got ${describeValue(options.listLagMs)}`);
    }
    this.#random = options.random ?? systemRandom;
    this.#hintTtlMs = options.resumeHintTtlMs ?? 300_000;
    if (!Number.isFinite(this.#hintTtlMs) || this.#hintTtlMs < 0) {
      throw new InvalidConfigError(`[${PKG}] resumeHintTtlMs must be a non-negative number, got ${describeValue(options.resumeHintTtlMs)}`);
    }
    this.resumeHintMaxAgeMs = this.#hintTtlMs > 0 ? (this.#hintTtlMs * 4) / 5 : undefined;
    // The hash key space split evenly among the initial shards, as CreateStream does; they have always
    // existed, for any listing however stale.
    const width = HASH_SPACE / BigInt(shardCount);
    for (let i = 0; i < shardCount; i++) {
      const start = width * BigInt(i);
      const end = i === shardCount - 1 ? HASH_SPACE - 1n : start + width - 1n;
      this.#addShard([], start, end, -Infinity);
    }
  }

  /** Appends a record to a shard (default: the open shard whose hash key range holds the key) and returns its position. */
  put(partitionKey: string, data: string | Uint8Array, shardId?: string): Position {
    const shard = shardId === undefined ? this.#route(partitionKey) : this.#shards.get(shardId);
    if (!shard || shard.closedAt !== null) throw new InvalidInputError(`[${PKG}] shard ${describeValue(shardId)} is missing or closed`);
    const position = String(++this.#sequence);
    shard.records.push({
      position,
      partitionKey,
      data: typeof data === 'string' ? new TextEncoder().encode(data) : data,
      approximateArrivalTimestampMs: this.#clock.wallTime(),
    });
    return position;
  }

  /** The open shard a record with this partition key goes to now. */
  shardFor(partitionKey: string): string {
    return this.#route(partitionKey).shardId;
  }

  /**
   * Closes an open shard and opens two children that continue it, splitting its hash key range at
   * `newStartingHashKey` (the first key of the second child; default the middle of the range).
   */
  split(shardId: string, newStartingHashKey?: bigint): [string, string] {
    const parent = this.#open(shardId);
    const at = newStartingHashKey ?? parent.startingHashKey + (parent.endingHashKey - parent.startingHashKey + 1n) / 2n;
    if (at <= parent.startingHashKey || at > parent.endingHashKey) {
      throw new InvalidInputError(
        `[${PKG}] hash key ${String(at)} does not split shard ${describeValue(shardId)} (range ${String(parent.startingHashKey)} to ${String(parent.endingHashKey)})`,
      );
    }
    this.#close(parent);
    const children: [string, string] = [
      this.#addShard([shardId], parent.startingHashKey, at - 1n),
      this.#addShard([shardId], at, parent.endingHashKey),
    ];
    parent.children.push(...children);
    return children;
  }

  /** Closes two open shards with adjacent hash key ranges and opens one child that continues both. */
  merge(shardId: string, adjacentShardId: string): string {
    const first = this.#open(shardId);
    const second = this.#open(adjacentShardId);
    const [low, high] = first.startingHashKey < second.startingHashKey ? [first, second] : [second, first];
    if (low.endingHashKey + 1n !== high.startingHashKey) {
      throw new InvalidInputError(`[${PKG}] shards ${describeValue(shardId)} and ${describeValue(adjacentShardId)} are not adjacent and cannot be merged`);
    }
    this.#close(first);
    this.#close(second);
    const child = this.#addShard([shardId, adjacentShardId], low.startingHashKey, high.endingHashKey);
    first.children.push(child);
    second.children.push(child);
    return child;
  }

  /** Pairs of open shards that can be merged (adjacent hash key ranges), lowest range first. */
  adjacentOpenShards(): Array<[string, string]> {
    const open = [...this.#shards.values()].filter((shard) => shard.closedAt === null).sort((a, b) => (a.startingHashKey < b.startingHashKey ? -1 : 1));
    const pairs: Array<[string, string]> = [];
    for (let i = 1; i < open.length; i++) pairs.push([(open[i - 1] as MemoryShard).shardId, (open[i] as MemoryShard).shardId]);
    return pairs;
  }

  /**
   * Removes a closed shard from the stream, as retention does once its last record expired: listings no
   * longer show it, reads of it fail with a `SourceError` coded `ERR_SHARD_NOT_FOUND`, and
   * {@link isShardGone} answers true.
   */
  trim(shardId: string): void {
    const shard = this.#shards.get(shardId);
    if (!shard || shard.trimmedAt !== null) throw new InvalidInputError(`[${PKG}] shard ${describeValue(shardId)} is missing or already trimmed`);
    if (shard.closedAt === null) throw new InvalidInputError(`[${PKG}] shard ${describeValue(shardId)} is open; only a closed shard leaves the stream`);
    shard.trimmedAt = this.#clock.now();
  }

  /** Makes the next read of the shard fail once with a `SourceError`, as a transient service error does. */
  failNextRead(shardId: string): void {
    this.#require(shardId);
    this.#failOnce.add(shardId);
  }

  /** Makes every read of the shard fail with a `SourceError` for `durationMs` of the source's clock. */
  failReadsFor(shardId: string, durationMs: number): void {
    this.#require(shardId);
    if (!Number.isFinite(durationMs) || durationMs < 0) {
      throw new InvalidInputError(`[${PKG}] a read fault lasts a non-negative number of ms, got ${describeValue(durationMs)}`);
    }
    this.#failUntil.set(shardId, Math.max(this.#failUntil.get(shardId) ?? -Infinity, this.#clock.now() + durationMs));
  }

  /**
   * Makes every `listShards` fail with a `SourceError` for `durationMs` of the source's clock, as a
   * throttled or no longer authorised listing does; reads go on.
   */
  failListingsFor(durationMs: number): void {
    if (!Number.isFinite(durationMs) || durationMs < 0) {
      throw new InvalidInputError(`[${PKG}] a listing fault lasts a non-negative number of ms, got ${describeValue(durationMs)}`);
    }
    this.#listingsFailUntil = Math.max(this.#listingsFailUntil, this.#clock.now() + durationMs);
  }

  /** The shard list, as it was up to `listLagMs` ago: a shard created since may be missing, or shown open. */
  async listShards(): Promise<ShardInfo[]> {
    if (this.#listingsFailUntil > this.#clock.now()) throw new SourceError('ERR_SOURCE_LIST', `[${PKG}] listing the shards failed (injected fault)`);
    const asOf = this.#clock.now() - (this.#listLagMs > 0 ? this.#random.next() * this.#listLagMs : 0);
    const shards: ShardInfo[] = [];
    for (const shard of this.#shards.values()) {
      if (shard.createdAt > asOf || (shard.trimmedAt !== null && shard.trimmedAt <= asOf)) continue;
      shards.push(this.#infoOf(shard, asOf));
    }
    return shards;
  }

  /** True only for a shard that was trimmed from the stream; the answer never lags. */
  async isShardGone(shardId: string): Promise<boolean> {
    const shard = this.#shards.get(shardId);
    return shard !== undefined && shard.trimmedAt !== null;
  }

  comparePositions(a: Position, b: Position): number {
    return compareNumericPositions(a, b);
  }

  async *read(shardId: string, from: Position, options: ReadOptions = {}): AsyncGenerator<ShardBatch> {
    const signal = options.signal;
    let index: number | undefined;
    let position = from;
    let answeredAt = this.#clock.now();
    while (!signal?.aborted) {
      // Each pass is one fetch (a GetRecords call): it may fail, and the shard may have left the stream.
      const shard = this.#fetchable(shardId);
      if (index === undefined) {
        // A hint is trusted as the stream trusts an iterator: the read goes on from where it points.
        const hinted = this.#hintedIndex(shardId, options.resumeHint);
        index = hinted ?? this.#startIndex(shard, from);
        this.starts[hinted === undefined ? 'fromPosition' : 'fromHint']++;
        if (index > 0) position = (shard.records[index - 1] as SourceRecord).position;
      }
      const batch = shard.records.slice(index, index + this.#batchSize);
      if (batch.length > 0) {
        index += batch.length;
        position = (batch[batch.length - 1] as SourceRecord).position;
        answeredAt = this.#clock.now();
        yield { kind: 'records', records: batch, position, millisBehindLatest: shard.records.length - index === 0 ? 0 : undefined, ...this.#hint(shardId, index) };
        continue;
      }
      if (shard.closedAt !== null) {
        // The children with their parents, as Kinesis names them in a shard's last GetRecords.
        const childShards = shard.children.map((childShardId) => this.#infoOf(this.#require(childShardId)));
        yield { kind: 'end', childShardIds: [...shard.children], childShards };
        return;
      }
      // Caught up: answer with an empty batch now and then, as a Kinesis poll does, so a reader looks alive.
      if (this.#clock.now() - answeredAt >= EMPTY_BATCH_EVERY_MS) {
        answeredAt = this.#clock.now();
        yield { kind: 'records', records: [], position, millisBehindLatest: 0, ...this.#hint(shardId, index) };
        continue;
      }
      try {
        await this.#clock.sleep(this.#idleDelayMs, signal);
      } catch {
        return;
      }
    }
  }

  /** The resume hint after a batch: where the next read of the shard begins, and when the hint was made. */
  #hint(shardId: string, index: number): { resumeHint?: string } {
    return this.#hintTtlMs > 0 ? { resumeHint: JSON.stringify({ shardId, index, at: this.#clock.now() }) } : {};
  }

  /** The index a hint of this shard points at, or `undefined` for none, a malformed one, another shard's or an expired one. */
  #hintedIndex(shardId: string, resumeHint: string | undefined): number | undefined {
    if (resumeHint === undefined || this.#hintTtlMs === 0) return undefined;
    let hint: unknown;
    try {
      hint = JSON.parse(resumeHint);
    } catch {
      return undefined;
    }
    const { shardId: shard, index, at } = (typeof hint === 'object' && hint !== null ? hint : {}) as Record<string, unknown>;
    if (shard !== shardId || !Number.isSafeInteger(index) || (index as number) < 0 || typeof at !== 'number') return undefined;
    if (this.#clock.now() - at >= this.#hintTtlMs || (index as number) > (this.#shards.get(shardId)?.records.length ?? -1)) return undefined;
    return index as number;
  }

  #infoOf(shard: MemoryShard, asOf = this.#clock.now()): ShardInfo {
    return {
      shardId: shard.shardId,
      parentShardIds: [...shard.parentShardIds],
      closed: shard.closedAt !== null && shard.closedAt <= asOf,
      details: { startingHashKey: String(shard.startingHashKey), endingHashKey: String(shard.endingHashKey) },
    };
  }

  #fetchable(shardId: string): MemoryShard {
    const shard = this.#shards.get(shardId);
    if (!shard || shard.trimmedAt !== null) throw new SourceError('ERR_SHARD_NOT_FOUND', `[${PKG}] shard ${describeValue(shardId)} was not found`);
    const failing = (this.#failUntil.get(shardId) ?? -Infinity) > this.#clock.now();
    if (failing || this.#failOnce.delete(shardId)) {
      throw new SourceError('ERR_SOURCE_READ', `[${PKG}] reading shard ${describeValue(shardId)} failed (injected fault)`);
    }
    return shard;
  }

  #startIndex(shard: MemoryShard, from: Position): number {
    if (from === Checkpoint.TRIM_HORIZON) return 0;
    if (from === Checkpoint.LATEST) return shard.records.length;
    const timestamp = Checkpoint.timestampOf(from);
    if (timestamp !== undefined) {
      const index = shard.records.findIndex((record) => (record.approximateArrivalTimestampMs ?? 0) >= timestamp);
      return index === -1 ? shard.records.length : index;
    }
    const index = shard.records.findIndex((record) => compareNumericPositions(record.position, from) > 0);
    return index === -1 ? shard.records.length : index;
  }

  #route(partitionKey: string): MemoryShard {
    const hashKey = BigInt(`0x${createHash('md5').update(partitionKey, 'utf8').digest('hex')}`);
    for (const shard of this.#shards.values()) {
      if (shard.closedAt === null && shard.startingHashKey <= hashKey && hashKey <= shard.endingHashKey) return shard;
    }
    // The open shards always cover the whole space: splits and merges keep it partitioned.
    throw new InvalidInputError(`[${PKG}] no open shard holds the hash key of partition key ${describeValue(partitionKey)}`);
  }

  #addShard(parentShardIds: string[], startingHashKey: bigint, endingHashKey: bigint, createdAt = this.#clock.now()): string {
    const shardId = `shard-${String(this.#nextShard++).padStart(4, '0')}`;
    this.#shards.set(shardId, {
      shardId,
      parentShardIds,
      startingHashKey,
      endingHashKey,
      records: [],
      children: [],
      createdAt,
      closedAt: null,
      trimmedAt: null,
    });
    return shardId;
  }

  #require(shardId: string): MemoryShard {
    const shard = this.#shards.get(shardId);
    if (!shard) throw new InvalidInputError(`[${PKG}] shard ${describeValue(shardId)} is missing`);
    return shard;
  }

  #open(shardId: string): MemoryShard {
    const shard = this.#shards.get(shardId);
    if (!shard || shard.closedAt !== null) throw new InvalidInputError(`[${PKG}] shard ${describeValue(shardId)} is missing or already closed`);
    return shard;
  }

  #close(shard: MemoryShard): void {
    shard.closedAt = this.#clock.now();
  }
}
