/**
 * CPU time per 1,000 records of each way of reading a stream (bench/variants.ts), in one process over the
 * same records of one kinesis-local stream: a controlled comparison that says which difference from the
 * plain GetRecords loop costs CPU. Time on the clock is not measured (the machine is shared); CPU time of
 * this process is (process.cpuUsage), and the part of it spent in garbage collection (`gc` performance
 * entries). Each round reads the stream once with every variant, in an order rotated round by round,
 * after one warm-up read each; the figures are medians over the rounds.
 *
 *   pnpm --filter @leasehold/source-kinesis bench:cpu
 *   BENCH_ROUNDS=7 BENCH_RECORDS=20000 BENCH_VARIANTS=plain,KinesisSource ...
 */
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';

import { startKinesisLocal } from '@leasehold/local-stack';
import { PerformanceObserver } from 'node:perf_hooks';
import { clientFor, createStream } from '../test/support.js';
import { putSpread } from './fixture.js';
import { RECORDS_PER_CALL, VARIANTS, type VariantName, type Workload } from './variants.js';

const SHARDS = 4;
const RECORDS = Number(process.env.BENCH_RECORDS ?? 10_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
// The e2e benchmarks' payload size: a small JSON document.
const PAYLOAD = Buffer.from(JSON.stringify({ key: 'key-0000000017', seq: 123456, pad: 'x'.repeat(40) }));
const names = (process.env.BENCH_VARIANTS?.split(',') ?? Object.keys(VARIANTS)) as VariantName[];
for (const name of names) if (!(name in VARIANTS)) throw new Error(`BENCH_VARIANTS: no variant named "${name}"; there are ${Object.keys(VARIANTS).join(', ')}`);

let gcMs = 0;
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) gcMs += entry.duration;
}).observe({ entryTypes: ['gc'] });

/** CPU ms and GC ms per 1,000 records of one read of the whole stream. */
async function measure(name: VariantName, workload: Workload, total: number): Promise<{ cpu: number; gc: number }> {
  const gcBefore = gcMs;
  const before = process.cpuUsage();
  const read = await VARIANTS[name](workload);
  const spent = process.cpuUsage(before);
  if (read !== total) throw new Error(`${name} read ${read} of ${total} records`);
  return { cpu: (spent.user + spent.system) / 1000 / (total / 1000), gc: (gcMs - gcBefore) / (total / 1000) };
}

const median = (values: readonly number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

const emulator = await startKinesisLocal();
const client = clientFor(emulator);
try {
  const { streamName } = await createStream(client, SHARDS);
  const counts = await putSpread(client, streamName, SHARDS, RECORDS, PAYLOAD);
  const workload: Workload = { emulator, client, streamName, counts };
  for (const name of names) await measure(name, workload, RECORDS);
  const figures = new Map(names.map((name) => [name, { cpu: [] as number[], gc: [] as number[] }]));
  for (let round = 0; round < ROUNDS; round++) {
    for (let i = 0; i < names.length; i++) {
      const name = names[(i + round) % names.length]!;
      const { cpu, gc } = await measure(name, workload, RECORDS);
      figures.get(name)!.cpu.push(cpu);
      figures.get(name)!.gc.push(gc);
    }
  }
  const plain = median(figures.get(names[0]!)!.cpu);
  console.log(`CPU per 1,000 records: ${RECORDS} records of ${PAYLOAD.length} bytes in ${SHARDS} shards, ${RECORDS_PER_CALL} a call, one process, median of ${ROUNDS} rounds; ratio to ${names[0]}`);
  for (const [name, { cpu, gc }] of figures) {
    console.log(`  ${name.padEnd(32)} ${median(cpu).toFixed(1).padStart(6)} ms  (gc ${median(gc).toFixed(1).padStart(4)} ms)  ${(median(cpu) / plain).toFixed(2)}x`);
  }
} finally {
  client.destroy();
  await emulator.close();
}
// Once stdout is flushed: a pipe is written asynchronously, and the kept-alive sockets would hold the process open.
process.stdout.write('', () => process.exit(0));
