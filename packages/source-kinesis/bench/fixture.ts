/**
 * What the source's benchmarks share besides the tests' helpers (test/support.ts): a stream whose records
 * are spread evenly over its shards by explicit hash keys (shard i owns the i-th slice of the key space),
 * so that every benchmark reads the same records from the same shards.
 */
import { PutRecordsCommand, type KinesisClient } from '@aws-sdk/client-kinesis';

/**
 * Puts `count` records of `payload` into a stream of `shards` shards, the same number into each (record i
 * into shard i mod `shards`); returns the records each shard got, by shard id in order.
 */
export async function putSpread(client: KinesisClient, streamName: string, shards: number, count: number, payload: Uint8Array): Promise<Map<string, number>> {
  const slice = 2n ** 128n / BigInt(shards);
  const counts = new Map<string, number>();
  for (let put = 0; put < count; put += 500) {
    const entries = Array.from({ length: Math.min(500, count - put) }, (_, j) => ({
      Data: payload,
      PartitionKey: `k${put + j}`,
      ExplicitHashKey: (slice * BigInt((put + j) % shards) + 1n).toString(),
    }));
    const output = await client.send(new PutRecordsCommand({ StreamName: streamName, Records: entries }));
    for (const record of output.Records ?? []) counts.set(record.ShardId!, (counts.get(record.ShardId!) ?? 0) + 1);
  }
  return new Map([...counts].sort(([a], [b]) => a.localeCompare(b)));
}
