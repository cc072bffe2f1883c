import { systemClock, type Clock } from '../clock.js';
import { describeValue, InvalidInputError, SourceError } from '../errors.js';
import { compareNumericPositions } from '../position.js';
import type { ReadOptions, ShardBatch, ShardInfo, ShardSource, SourceRecord } from '../source.js';
import { Checkpoint, type Position } from '../storage.js';

/** How often a caught-up reader is answered with an empty batch. */
const EMPTY_BATCH_EVERY_MS = 1_000;

interface MemoryShard {
  info: { shardId: string; parentShardIds: string[]; closed: boolean };
  records: Array<SourceRecord & { arrivedAt: number }>;
  children: string[];
}

/** Options of {@link MemorySource}. */
export interface MemorySourceOptions {
  /** Records per batch at most. Default 100. */
  batchSize?: number;
  /** How long a reader that caught up waits before looking again, in ms of `clock`. Default 20. */
  idleDelayMs?: number;
  /** The clock readers wait on. Default: the process's. */
  clock?: Clock;
}

/**
 * An in-memory stream with shards, resharding and numeric positions, for unit tests of processing code
 * and of the runtime itself: `put` records, `split` and `merge` shards, and read them through the same
 * `ShardSource` contract as Kinesis.
 */
export class MemorySource implements ShardSource {
  readonly #shards = new Map<string, MemoryShard>();
  readonly #batchSize: number;
  readonly #idleDelayMs: number;
  readonly #clock: Clock;
  #sequence = 0;
  #nextShard = 0;

  constructor(shardCount = 1, options: MemorySourceOptions = {}) {
    this.#batchSize = options.batchSize ?? 100;
    this.#idleDelayMs = options.idleDelayMs ?? 20;
    this.#clock = options.clock ?? systemClock;
    for (let i = 0; i < shardCount; i++) this.#addShard([]);
  }

  /** Appends a record to a shard (default: the open shard the key hashes to) and returns its position. */
  put(partitionKey: string, data: string | Uint8Array, shardId?: string): Position {
    const open = [...this.#shards.values()].filter((shard) => !shard.info.closed);
    const shard = shardId !== undefined ? this.#shards.get(shardId) : open[hash(partitionKey) % open.length];
    if (!shard || shard.info.closed) throw new InvalidInputError(`[core] shard ${describeValue(shardId)} is missing or closed`);
    const position = String(++this.#sequence);
    shard.records.push({
      position,
      partitionKey,
      data: typeof data === 'string' ? new TextEncoder().encode(data) : data,
      approximateArrivalTimestampMs: this.#clock.wallTime(),
      arrivedAt: this.#clock.now(),
    });
    return position;
  }

  /** Closes a shard and opens two children that continue it. */
  split(shardId: string): [string, string] {
    const parent = this.#close(shardId);
    const children: [string, string] = [this.#addShard([shardId]), this.#addShard([shardId])];
    parent.children.push(...children);
    return children;
  }

  /** Closes two shards and opens one child that continues both. */
  merge(shardId: string, adjacentShardId: string): string {
    const first = this.#close(shardId);
    const second = this.#close(adjacentShardId);
    const child = this.#addShard([shardId, adjacentShardId]);
    first.children.push(child);
    second.children.push(child);
    return child;
  }

  async listShards(): Promise<ShardInfo[]> {
    return [...this.#shards.values()].map((shard) => ({ ...shard.info, parentShardIds: [...shard.info.parentShardIds] }));
  }

  comparePositions(a: Position, b: Position): number {
    return compareNumericPositions(a, b);
  }

  async *read(shardId: string, from: Position, options: ReadOptions = {}): AsyncGenerator<ShardBatch> {
    const shard = this.#shards.get(shardId);
    if (!shard) throw new SourceError('ERR_SHARD_NOT_FOUND', `[core] shard ${describeValue(shardId)} was not found`);
    const signal = options.signal;
    let index = this.#startIndex(shard, from);
    let position = index > 0 ? (shard.records[index - 1] as SourceRecord).position : from;
    let answeredAt = this.#clock.now();
    while (!signal?.aborted) {
      const batch = shard.records.slice(index, index + this.#batchSize);
      if (batch.length > 0) {
        index += batch.length;
        position = (batch[batch.length - 1] as SourceRecord).position;
        const records = batch.map(({ arrivedAt: _arrivedAt, ...record }) => record);
        answeredAt = this.#clock.now();
        yield { kind: 'records', records, position, millisBehindLatest: shard.records.length - index === 0 ? 0 : undefined };
        continue;
      }
      if (shard.info.closed) {
        yield { kind: 'end', childShardIds: [...shard.children] };
        return;
      }
      // Caught up: answer with an empty batch now and then, as a Kinesis poll does, so a reader looks alive.
      if (this.#clock.now() - answeredAt >= EMPTY_BATCH_EVERY_MS) {
        answeredAt = this.#clock.now();
        yield { kind: 'records', records: [], position, millisBehindLatest: 0 };
        continue;
      }
      try {
        await this.#clock.sleep(this.#idleDelayMs, signal);
      } catch {
        return;
      }
    }
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

  #addShard(parentShardIds: string[]): string {
    const shardId = `shard-${String(this.#nextShard++).padStart(4, '0')}`;
    this.#shards.set(shardId, { info: { shardId, parentShardIds, closed: false }, records: [], children: [] });
    return shardId;
  }

  #close(shardId: string): MemoryShard {
    const shard = this.#shards.get(shardId);
    if (!shard || shard.info.closed) throw new InvalidInputError(`[core] shard ${describeValue(shardId)} is missing or already closed`);
    shard.info.closed = true;
    return shard;
  }
}

function hash(key: string): number {
  let h = 2166136261;
  for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key.charCodeAt(i), 16777619);
  return h >>> 0;
}
