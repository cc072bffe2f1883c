/**
 * The drain bench's plain loop: every shard of a stream read from its start (or after the position `after`
 * gives it) with GetRecords of up to 1,000 records, each answer only counted, until every shard answers
 * empty and caught up. Run by run.ts in the bench process, and by plain-worker.ts in a fresh process of its
 * own. With `pace`, at most one GetRecords every 200 ms per shard (Kinesis's limit of five a second, the
 * consumer's default pace; kinesis-local does not enforce it).
 */
import { GetRecordsCommand, GetShardIteratorCommand, type KinesisClient } from '@aws-sdk/client-kinesis';
import { setTimeout as sleep } from 'node:timers/promises';
import { now } from '../src/reports.js';
import { monotonicUs } from './cpu-profile.js';

export interface PlainRead {
  /** When it asked for its iterators, and when it began reading (every iterator in hand). */
  readonly start: number;
  readonly from: number;
  /** When its first and last records arrived (the empty answer that shows a shard caught up is not counted). */
  readonly first: number;
  readonly last: number;
  readonly count: number;
  /** The process's CPU time (user and system, ms) from its first GetShardIterator to its last answer. */
  readonly cpuMs: number;
  /** That span on the monotonic clock of V8's CPU profiles (microseconds), to cut a profile by. */
  readonly startUs: number;
  readonly endUs: number;
  /** Per shard, each answer as `<records>@<ms from the start of reading>`, for a trace. */
  readonly pages: ReadonlyMap<string, readonly string[]>;
}

export async function readPlain(
  client: KinesisClient,
  streamName: string,
  shardIds: readonly string[],
  { after, pace }: { after?: ReadonlyMap<string, string> | undefined; pace: boolean },
): Promise<PlainRead> {
  const cpuAtStart = process.cpuUsage();
  const startUs = monotonicUs();
  const start = now();
  const iterators = await Promise.all(
    shardIds.map(async (shardId) => {
      const from = after?.get(shardId);
      const position = from === undefined ? { ShardIteratorType: 'TRIM_HORIZON' as const } : { ShardIteratorType: 'AFTER_SEQUENCE_NUMBER' as const, StartingSequenceNumber: from };
      return (await client.send(new GetShardIteratorCommand({ StreamName: streamName, ShardId: shardId, ...position }))).ShardIterator;
    }),
  );
  const from = now();
  let first = Infinity;
  let last = -Infinity;
  let count = 0;
  const pages = new Map<string, string[]>();
  await Promise.all(
    shardIds.map(async (shardId, i) => {
      const line: string[] = [];
      pages.set(shardId, line);
      let iterator = iterators[i];
      let sentAt = -Infinity;
      for (let calls = 0; iterator !== undefined && calls < 10_000; calls++) {
        if (pace) await sleep(Math.max(0, sentAt + 200 - now()));
        sentAt = now();
        const page = await client.send(new GetRecordsCommand({ ShardIterator: iterator, Limit: 1_000 }));
        const got = page.Records?.length ?? 0;
        line.push(`${got}@${Math.round(now() - from)}`);
        if (got > 0) {
          count += got;
          first = Math.min(first, now());
          last = now();
        }
        if (got === 0 && (page.MillisBehindLatest ?? 0) === 0) break;
        iterator = page.NextShardIterator;
      }
    }),
  );
  const cpu = process.cpuUsage(cpuAtStart);
  return { start, from, first, last, count, cpuMs: (cpu.user + cpu.system) / 1000, startUs, endUs: monotonicUs(), pages };
}
