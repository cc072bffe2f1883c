/**
 * The hand-over between a shard's background reader and the consumer: batches wait here, bounded in
 * records and bytes, so the reader prefetches while user code works and stops when the consumer lags.
 */
import { type EndOfShard, type RecordsBatch } from '@leasehold/core';
import { abortReason } from '@leasehold/core/adapter';
import type { KinesisRecord } from './record.js';

/** What a background reader hands over. */
export type QueueItem =
  | { readonly kind: 'batch'; readonly batch: RecordsBatch<KinesisRecord>; readonly bytes: number }
  | { readonly kind: 'end'; readonly end: EndOfShard }
  | { readonly kind: 'error'; readonly error: unknown };

export class BatchQueue {
  private readonly items: QueueItem[] = [];
  private records = 0;
  private bytes = 0;
  private wake: (() => void) | undefined;

  constructor(
    private readonly maxRecords: number,
    private readonly maxBytes: number,
  ) {}

  push(item: QueueItem): void {
    const tail = this.items[this.items.length - 1];
    if (isEmptyBatch(item) && tail !== undefined && isEmptyBatch(tail)) {
      // A consumer that lags gets one "nothing new" batch, the latest, not one per poll.
      this.items[this.items.length - 1] = item;
      this.notify();
      return;
    }
    this.items.push(item);
    if (item.kind === 'batch') {
      this.records += item.batch.records.length;
      this.bytes += item.bytes;
    }
    this.notify();
  }

  /** The next item, waiting for one; rejects when `signal` fires. */
  async take(signal: AbortSignal): Promise<QueueItem> {
    for (;;) {
      const item = this.items.shift();
      if (item !== undefined) {
        if (item.kind === 'batch') {
          this.records -= item.batch.records.length;
          this.bytes -= item.bytes;
        }
        this.notify();
        return item;
      }
      await this.changed(signal);
    }
  }

  /** Whether the queue will still be below its bounds with `records` more records of `bytes` payload bytes. */
  hasRoomFor(records: number, bytes: number): boolean {
    return this.records + records < this.maxRecords && this.bytes + bytes < this.maxBytes;
  }

  /** Resolves once the queue holds less than its bounds (an empty queue always has room). */
  async waitForRoom(signal: AbortSignal): Promise<void> {
    while (this.items.length > 0 && (this.records >= this.maxRecords || this.bytes >= this.maxBytes)) {
      await this.changed(signal);
    }
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = undefined;
    wake?.();
  }

  // One side waits at a time (the consumer on take, the reader on room), so one waiter slot is enough;
  // a second waiter chains onto the first.
  private changed(signal: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal.aborted) {
        reject(abortReason(signal));
        return;
      }
      const onAbort = (): void => reject(abortReason(signal));
      signal.addEventListener('abort', onAbort, { once: true });
      const previous = this.wake;
      this.wake = () => {
        signal.removeEventListener('abort', onAbort);
        previous?.();
        resolve();
      };
    });
  }
}

function isEmptyBatch(item: QueueItem): boolean {
  return item.kind === 'batch' && item.batch.records.length === 0;
}
