/**
 * The producer: puts records whose data is `{ key, seq }`, with a sequence number per key, so that the
 * ledger can tell loss, duplicates and per-key order from what the workers report.
 */
import { PutRecordsCommand, type KinesisClient } from '@aws-sdk/client-kinesis';
import { now } from './reports.js';

/** A record the producer put, and where Kinesis placed it. */
export interface ProducedRecord {
  readonly key: string;
  readonly seq: number;
  readonly shardId: string;
  /** The Kinesis sequence number: the record's position in its shard. */
  readonly position: string;
  /** When its PutRecords call was answered (the reports' clock, see reports.ts): a reader could not have it before. */
  readonly putAt: number;
}

/** The payload of every record: the partition key and its per-key sequence number, from 1. */
export interface Payload {
  readonly key: string;
  readonly seq: number;
}

const BATCH = 250;

/** Puts records round-robin over `keys`, in PutRecords batches, remembering every record it put. */
export class Producer {
  readonly produced: ProducedRecord[] = [];
  readonly #next = new Map<string, number>();
  #turn = 0;

  constructor(
    private readonly client: KinesisClient,
    private readonly streamName: string,
    private readonly keys: readonly string[],
  ) {
    if (keys.length === 0) throw new Error('the producer needs at least one key');
  }

  /** Puts `count` more records; `onProgress` hears how many of them are in after each batch. */
  async put(count: number, onProgress?: (done: number, count: number) => void): Promise<void> {
    let done = 0;
    while (done < count) {
      const payloads: Payload[] = [];
      for (let i = 0; i < Math.min(BATCH, count - done); i++) {
        const key = this.keys[this.#turn++ % this.keys.length]!;
        const seq = (this.#next.get(key) ?? 0) + 1;
        this.#next.set(key, seq);
        payloads.push({ key, seq });
      }
      const output = await this.client.send(
        new PutRecordsCommand({
          StreamName: this.streamName,
          Records: payloads.map((payload) => ({ Data: Buffer.from(JSON.stringify(payload)), PartitionKey: payload.key })),
        }),
      );
      // Putting a failed record again would put it after later records of its key: per-key order would be
      // broken by the producer, not the consumer. kinesis-local does not throttle, so a failure is a bug.
      if (output.FailedRecordCount) throw new Error(`${output.FailedRecordCount} records of a PutRecords call failed`);
      const putAt = now();
      payloads.forEach((payload, i) => {
        const result = output.Records?.[i];
        this.produced.push({ ...payload, shardId: result!.ShardId!, position: result!.SequenceNumber!, putAt });
      });
      done += payloads.length;
      onProgress?.(done, count);
    }
  }
}

/** Parses a record's data as a {@link Payload}, or throws naming what it got. */
export function parsePayload(data: Uint8Array): Payload {
  const text = Buffer.from(data).toString('utf8');
  const value = JSON.parse(text) as Partial<Payload>;
  if (typeof value.key !== 'string' || typeof value.seq !== 'number') throw new Error(`record data is not { key, seq }: ${text}`);
  return { key: value.key, seq: value.seq };
}
