import type { Random } from '../clock.js';
import type { ReadOptions, ShardBatch, ShardInfo, ShardSource, SourceRecord } from '../source.js';
import type { Position } from '../storage.js';
import type { VirtualClock } from './virtual-time.js';

/**
 * One simulated process's view of a shared source: every request and every answer travels on the
 * process's own clock, so that a paused process hears nothing until it wakes and a dead one never does,
 * as with its storage (`FaultyStorage`). The shared source itself never pauses.
 */
export class ProcessSource<R extends SourceRecord = SourceRecord> implements ShardSource<R> {
  readonly #inner: ShardSource<R>;
  readonly #clock: VirtualClock;
  readonly #random: Random;
  readonly #latencyMs: (random: Random) => number;
  /** Called with each batch this process receives, before its reader sees it. */
  readonly #onBatch: ((shardId: string, batch: ShardBatch<R>) => void) | undefined;
  /** Asked at each shard's end whether to drop the children the end names (a source that names none). */
  readonly #withholdChildShards: (() => boolean) | undefined;
  /** The shared source's: its hints travel through this process unchanged. */
  readonly resumeHintMaxAgeMs: number | undefined;

  constructor(
    inner: ShardSource<R>,
    clock: VirtualClock,
    random: Random,
    options: {
      latencyMs?: (random: Random) => number;
      onBatch?: (shardId: string, batch: ShardBatch<R>) => void;
      /** Drop an end's `childShards` when this says so, so that the reader lists the stream as for a source that names no children. */
      withholdChildShards?: () => boolean;
    } = {},
  ) {
    this.#inner = inner;
    this.#clock = clock;
    this.#random = random;
    this.#latencyMs = options.latencyMs ?? (() => 0);
    this.#onBatch = options.onBatch;
    this.#withholdChildShards = options.withholdChildShards;
    this.resumeHintMaxAgeMs = inner.resumeHintMaxAgeMs;
  }

  async listShards(options?: ReadOptions): Promise<ShardInfo[]> {
    return this.#roundTrip(() => this.#inner.listShards(options), options?.signal);
  }

  async isShardGone(shardId: string, options?: ReadOptions): Promise<boolean> {
    const inner = this.#inner;
    if (!inner.isShardGone) return false;
    return this.#roundTrip(() => (inner.isShardGone as NonNullable<ShardSource['isShardGone']>).call(inner, shardId, options), options?.signal);
  }

  comparePositions(a: Position, b: Position): number {
    return this.#inner.comparePositions(a, b);
  }

  async *read(shardId: string, from: Position, options: ReadOptions = {}): AsyncGenerator<ShardBatch<R>> {
    const { signal } = options;
    await this.#travel(signal);
    const batches = this.#inner.read(shardId, from, options)[Symbol.asyncIterator]();
    try {
      for (;;) {
        let result: IteratorResult<ShardBatch<R>>;
        try {
          result = await batches.next();
        } catch (error) {
          await this.#travel(signal);
          throw error;
        }
        await this.#travel(signal);
        if (result.done) return;
        let batch = result.value;
        if (batch.kind === 'end' && batch.childShards !== undefined && this.#withholdChildShards?.()) batch = { kind: 'end', childShardIds: batch.childShardIds };
        this.#onBatch?.(shardId, batch);
        yield batch;
      }
    } finally {
      await batches.return?.(undefined);
    }
  }

  async #roundTrip<T>(call: () => Promise<T>, signal: AbortSignal | undefined): Promise<T> {
    await this.#travel(signal);
    let outcome: { ok: true; value: T } | { ok: false; error: unknown };
    try {
      outcome = { ok: true, value: await call() };
    } catch (error) {
      outcome = { ok: false, error };
    }
    await this.#travel(signal);
    if (!outcome.ok) throw outcome.error;
    return outcome.value;
  }

  /** One way of a request or its answer: latency on this process's clock, subject to its pauses and death. */
  #travel(signal: AbortSignal | undefined): Promise<void> {
    return this.#clock.sleep(this.#latencyMs(this.#random), signal);
  }
}
