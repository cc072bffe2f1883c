/**
 * Records per second drained from a 4-shard stream through KinesisSource, against a plain GetRecords
 * loop with the same client on the same emulator and the same data, measured side by side in one run.
 * Each round reads the whole stream once each way, alternating which goes first.
 */
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';

const { GetRecordsCommand, GetShardIteratorCommand, KinesisClient, PutRecordsCommand, CreateStreamCommand, DescribeStreamSummaryCommand } =
  await import('@aws-sdk/client-kinesis');
const { NodeHttpHandler } = await import('@smithy/node-http-handler');
const { startKinesisLocal } = await import('@leasehold/local-stack');
const { Checkpoint } = await import('@leasehold/core');
const { KinesisSource } = await import('../src/index.js');

const SHARDS = 4;
const RECORDS_PER_SHARD = Number(process.env.BENCH_RECORDS_PER_SHARD ?? 2_500);
const RECORDS_PER_CALL = Number(process.env.BENCH_RECORDS_PER_CALL ?? 1_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const PAYLOAD = Buffer.alloc(100, 'x');

const emulator = await startKinesisLocal();
const client = new KinesisClient({
  endpoint: emulator.endpoint,
  region: emulator.region,
  credentials: emulator.credentials,
  requestHandler: new NodeHttpHandler(),
});

try {
  const streamName = 'bench';
  await client.send(new CreateStreamCommand({ StreamName: streamName, ShardCount: SHARDS }));
  for (;;) {
    const summary = await client.send(new DescribeStreamSummaryCommand({ StreamName: streamName }));
    if (summary.StreamDescriptionSummary?.StreamStatus === 'ACTIVE') break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  // Explicit hash keys spread the records evenly: shard i owns the i-th quarter of the key space.
  const quarter = 2n ** 128n / BigInt(SHARDS);
  const counts = new Map<string, number>();
  for (let i = 0; i < SHARDS * RECORDS_PER_SHARD; i += 500) {
    const entries = Array.from({ length: 500 }, (_, j) => ({
      Data: PAYLOAD,
      PartitionKey: `k${i + j}`,
      ExplicitHashKey: (quarter * BigInt((i + j) % SHARDS) + 1n).toString(),
    }));
    const output = await client.send(new PutRecordsCommand({ StreamName: streamName, Records: entries }));
    for (const record of output.Records ?? []) counts.set(record.ShardId!, (counts.get(record.ShardId!) ?? 0) + 1);
  }
  const shardIds = [...counts.keys()].sort();
  const total = [...counts.values()].reduce((a, b) => a + b, 0);

  const plainLoop = async (): Promise<number> => {
    const started = performance.now();
    await Promise.all(
      shardIds.map(async (shardId) => {
        let iterator = (await client.send(new GetShardIteratorCommand({ StreamName: streamName, ShardId: shardId, ShardIteratorType: 'TRIM_HORIZON' })))
          .ShardIterator;
        let read = 0;
        while (read < counts.get(shardId)! && iterator) {
          const output = await client.send(new GetRecordsCommand({ ShardIterator: iterator, Limit: RECORDS_PER_CALL }));
          read += output.Records?.length ?? 0;
          iterator = output.NextShardIterator;
        }
      }),
    );
    return total / ((performance.now() - started) / 1000);
  };

  const throughSource = async (): Promise<number> => {
    const source = new KinesisSource({ client, streamName, maxRecordsPerCall: RECORDS_PER_CALL });
    const started = performance.now();
    await Promise.all(
      shardIds.map(async (shardId) => {
        let read = 0;
        for await (const batch of source.read(shardId, Checkpoint.TRIM_HORIZON)) {
          if (batch.kind === 'records') read += batch.records.length;
          if (read >= counts.get(shardId)!) break;
        }
      }),
    );
    return total / ((performance.now() - started) / 1000);
  };

  await plainLoop(); // warm-up: JIT and the emulator's first reads
  const plain: number[] = [];
  const source: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    if (round % 2 === 0) {
      plain.push(await plainLoop());
      source.push(await throughSource());
    } else {
      source.push(await throughSource());
      plain.push(await plainLoop());
    }
  }
  const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
  console.log(`source-kinesis: ${total} records of ${PAYLOAD.length} bytes in ${SHARDS} shards, ${RECORDS_PER_CALL} records per GetRecords, ${ROUNDS} rounds`);
  console.log(`  plain GetRecords loop: ${Math.round(median(plain))} records/s (median)`);
  console.log(`  KinesisSource:         ${Math.round(median(source))} records/s (median)`);
  console.log(`  ratio KinesisSource / plain loop: ${(median(source) / median(plain)).toFixed(2)} (target >= 0.9)`);
} finally {
  client.destroy();
  await emulator.close();
}
