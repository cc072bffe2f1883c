/**
 * The independent monitor of a chaos run: it reads the group's leases from storage directly (not through
 * any worker's proxy) every `intervalMs`, and keeps, per shard, every checkpoint it read and the moment it
 * first saw each epoch. Reads that fail (the backend is restarting) are counted and retried next time. A
 * lease that reads back corrupt is kept by key with its first error: no fault of the run may cause one.
 */
import { Checkpoint, compareNumericPositions, type CheckpointStorage, type Position } from '@leasehold/core';
import { now } from '../reports.js';

/** One checkpoint read from storage. */
export interface CheckpointReading {
  readonly shardId: string;
  readonly checkpoint: Position | null;
  readonly epoch: number;
  readonly owner: string | null;
  /** When the read that returned it started and ended (monitor clock). */
  readonly readStart: number;
  readonly readEnd: number;
}

/**
 * Orders checkpoints: no checkpoint and the start sentinels first, then positions as numbers, then
 * `SHARD_END`.
 */
export function compareCheckpoints(a: Position | null, b: Position | null): number {
  const rank = (position: Position | null): number =>
    position === null || position === Checkpoint.TRIM_HORIZON || position === Checkpoint.LATEST || position.startsWith('AT_TIMESTAMP')
      ? 0
      : position === Checkpoint.SHARD_END
        ? 2
        : 1;
  const byRank = rank(a) - rank(b);
  if (byRank !== 0 || rank(a) !== 1) return byRank;
  return compareNumericPositions(a!, b!);
}

export class Monitor {
  readonly readings: CheckpointReading[] = [];
  /** shard -> epoch -> when the monitor first read it (end of that read). */
  readonly epochSeen = new Map<string, Map<number, number>>();
  /** lease key -> the message of the first `CorruptRecordError` read for it. */
  readonly corrupt = new Map<string, string>();
  failedReads = 0;
  reads = 0;
  #running = false;
  #loop: Promise<void> | undefined;

  constructor(
    private readonly storage: CheckpointStorage,
    private readonly group: string,
    private readonly intervalMs = 200,
  ) {}

  start(): void {
    this.#running = true;
    this.#loop = this.#run();
  }

  async stop(): Promise<void> {
    this.#running = false;
    await this.#loop;
    // One last read once everything has stopped.
    await this.poll();
  }

  async poll(): Promise<void> {
    const readStart = now();
    try {
      const { leases, corrupt } = await this.storage.listLeases(this.group);
      const readEnd = now();
      this.reads++;
      for (const error of corrupt) {
        const leaseKey = error.leaseKey ?? '?';
        if (!this.corrupt.has(leaseKey)) this.corrupt.set(leaseKey, error.message);
      }
      for (const lease of leases) {
        this.readings.push({ shardId: lease.leaseKey, checkpoint: lease.checkpoint, epoch: lease.epoch, owner: lease.owner, readStart, readEnd });
        let epochs = this.epochSeen.get(lease.leaseKey);
        if (epochs === undefined) this.epochSeen.set(lease.leaseKey, (epochs = new Map<number, number>()));
        if (!epochs.has(lease.epoch)) epochs.set(lease.epoch, readEnd);
      }
    } catch {
      this.failedReads++;
    }
  }

  async #run(): Promise<void> {
    while (this.#running) {
      const started = Date.now();
      await this.poll();
      const wait = this.intervalMs - (Date.now() - started);
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }
}
