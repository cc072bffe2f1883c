/**
 * Records per second drained from a 4-shard stream through KinesisSource, against a plain GetRecords
 * loop with the same client on the same emulator and the same data, measured side by side in one run.
 * Each round reads the whole stream once each way, alternating which goes first.
 *
 * Then the read budget a shard's reader uses: GetRecords calls per second per shard, with the default
 * options, on a shard that is caught up and gets nothing, one that is caught up and gets a few records
 * now and then, and one with a backlog (`BENCH_BUDGET_SECONDS`, default 8, each). Kinesis allows five
 * calls a second per shard, for every application reading the stream together.
 */
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';

const { GetRecordsCommand, GetShardIteratorCommand, PutRecordsCommand } = await import('@aws-sdk/client-kinesis');
type Client = import('@aws-sdk/client-kinesis').KinesisClient;
const { startKinesisLocal } = await import('@leasehold/local-stack');
const { Checkpoint } = await import('@leasehold/core');
const { KinesisSource } = await import('../src/index.js');
const { clientFor, createStream } = await import('../test/support.js');
const { putSpread } = await import('./fixture.js');

const SHARDS = 4;
const RECORDS_PER_SHARD = Number(process.env.BENCH_RECORDS_PER_SHARD ?? 2_500);
const RECORDS_PER_CALL = Number(process.env.BENCH_RECORDS_PER_CALL ?? 1_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const PAYLOAD = Buffer.alloc(100, 'x');
const BUDGET_SECONDS = Number(process.env.BENCH_BUDGET_SECONDS ?? 8);

const emulator = await startKinesisLocal();
const client = clientFor(emulator);

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

const putRecords = async (streamName: string, count: number): Promise<void> => {
  for (let put = 0; put < count; put += 500) {
    const entries = Array.from({ length: Math.min(500, count - put) }, (_, i) => ({ Data: PAYLOAD, PartitionKey: `k${put + i}` }));
    await client.send(new PutRecordsCommand({ StreamName: streamName, Records: entries }));
  }
};

/**
 * GetRecords calls per second a KinesisSource makes to the one shard of a fresh stream over
 * `BENCH_BUDGET_SECONDS`, after `backlog` records were put, while `trickle` records are put every 200 ms.
 * 100 records a call, so that a call is quick and the pace, not the emulator, sets the rate.
 */
async function callsPerSecond({ backlog, trickle }: { backlog: number; trickle: number }): Promise<{ calls: number; records: number }> {
  const { streamName } = await createStream(client, 1);
  await putRecords(streamName, backlog);
  let calls = 0;
  // The same client, counting what it sends (KinesisSource needs only `send`).
  const send = client.send.bind(client) as (command: unknown, options?: unknown) => Promise<unknown>;
  const counting = {
    send: (command: unknown, options?: unknown) => {
      if (command instanceof GetRecordsCommand) calls++;
      return send(command, options);
    },
  } as unknown as Client;
  const stop = new AbortController();
  const feeding = (async () => {
    while (trickle > 0 && !stop.signal.aborted) {
      await putRecords(streamName, trickle);
      await sleep(200);
    }
  })();
  const source = new KinesisSource({ client: counting, streamName, maxRecordsPerCall: 100 });
  let records = 0;
  const started = performance.now();
  const reading = (async () => {
    for await (const batch of source.read('shardId-000000000000', Checkpoint.TRIM_HORIZON, { signal: stop.signal })) {
      if (batch.kind === 'records') records += batch.records.length;
    }
  })().catch(() => undefined);
  await sleep(BUDGET_SECONDS * 1000);
  stop.abort();
  await Promise.all([reading, feeding]);
  const seconds = (performance.now() - started) / 1000;
  return { calls: calls / seconds, records: records / seconds };
}

try {
  const { streamName } = await createStream(client, SHARDS);
  const counts = await putSpread(client, streamName, SHARDS, SHARDS * RECORDS_PER_SHARD, PAYLOAD);
  const shardIds = [...counts.keys()];
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

  const budgets: Array<[string, { calls: number; records: number }]> = [
    ['caught up, nothing new', await callsPerSecond({ backlog: 0, trickle: 0 })],
    ['caught up, 5 records every 200 ms', await callsPerSecond({ backlog: 0, trickle: 5 })],
    ['behind (a backlog of 10,000 records)', await callsPerSecond({ backlog: 10_000, trickle: 0 })],
  ];
  console.log(`read budget: GetRecords calls per second per shard, default options but 100 records a call (Kinesis allows 5 per shard for all readers together), ${BUDGET_SECONDS} s each`);
  for (const [name, { calls, records }] of budgets) console.log(`  ${name.padEnd(38)} ${calls.toFixed(2)} calls/s  ${records.toFixed(0).padStart(6)} records/s`);
} finally {
  client.destroy();
  await emulator.close();
}
