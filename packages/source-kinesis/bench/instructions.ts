/**
 * Instructions per record of the plain GetRecords loop and of KinesisSource (and any other variant of
 * bench/variants.ts), counted by valgrind's callgrind over the same fixed records of one kinesis-local
 * stream. Unlike time, an instruction count hardly moves when other work shares the machine, so the ratio
 * says which code is slower even on a loaded machine.
 *
 * Each variant runs in a process of its own under callgrind (the emulator runs outside it, uncounted),
 * twice: one warm-up read of the stream and then `BENCH_READS` reads (default 2), and the warm-up read
 * alone. The difference of the two counts, divided by the records of the extra reads, is the variant's
 * instructions per record, its start-up, module loading and first compilation left out. About a minute
 * per variant on an idle machine (callgrind runs node some fifty times slower), so it is not part of `bench`:
 *
 *   pnpm --filter @leasehold/source-kinesis bench:instructions
 *   BENCH_VARIANTS=plain,KinesisSource,'plain + abortSignal per call' BENCH_RECORDS=4000 BENCH_READS=2 ...
 */
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';

import { startKinesisLocal } from '@leasehold/local-stack';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { clientFor, createStream } from '../test/support.js';
import { putSpread } from './fixture.js';
import { VARIANTS, type Emulator, type VariantName, type Workload } from './variants.js';

const SHARDS = 4;
const PAYLOAD = Buffer.from(JSON.stringify({ key: 'key-0000000017', seq: 123456, pad: 'x'.repeat(40) }));

/** What a child needs to read the parent's stream. */
interface ChildTask {
  readonly emulator: Emulator;
  readonly streamName: string;
  readonly counts: ReadonlyArray<[string, number]>;
  readonly variant: VariantName;
  readonly reads: number;
}

if (process.argv[2] === '--child') {
  // In the process valgrind runs: the warm-up read, then `reads` more, each checked.
  const task = JSON.parse(process.env.BENCH_TASK!) as ChildTask;
  const client = clientFor(task.emulator);
  const workload: Workload = { emulator: task.emulator, client, streamName: task.streamName, counts: new Map(task.counts) };
  const total = task.counts.reduce((sum, [, count]) => sum + count, 0);
  for (let read = 0; read <= task.reads; read++) {
    const got = await VARIANTS[task.variant](workload);
    if (got !== total) throw new Error(`${task.variant} read ${got} of ${total} records`);
  }
  client.destroy();
  process.exit(0);
}

const RECORDS = Number(process.env.BENCH_RECORDS ?? 4_000);
const READS = Number(process.env.BENCH_READS ?? 2);
const names = (process.env.BENCH_VARIANTS?.split(',') ?? ['plain', 'KinesisSource']) as VariantName[];
for (const name of names) if (!(name in VARIANTS)) throw new Error(`BENCH_VARIANTS: no variant named "${name}"; there are ${Object.keys(VARIANTS).join(', ')}`);
const SELF = fileURLToPath(import.meta.url);

/** The instructions callgrind counted in one child that reads the stream `1 + reads` times. */
async function instructionsOf(task: ChildTask): Promise<number> {
  const { stderr } = await promisify(execFile)(
    'valgrind',
    ['--tool=callgrind', '--callgrind-out-file=/dev/null', process.execPath, ...process.execArgv, SELF, '--child'],
    { env: { ...process.env, BENCH_TASK: JSON.stringify(task) }, maxBuffer: 64 * 1024 * 1024 },
  );
  const collected = /Collected : (\d+)/.exec(stderr);
  if (collected === null) throw new Error(`callgrind reported no count for ${task.variant}: ${stderr.slice(-500)}`);
  return Number(collected[1]);
}

const emulator = await startKinesisLocal();
const client = clientFor(emulator);
try {
  const { streamName } = await createStream(client, SHARDS);
  const counts = [...(await putSpread(client, streamName, SHARDS, RECORDS, PAYLOAD))];
  const base = { emulator: { endpoint: emulator.endpoint, region: emulator.region, credentials: emulator.credentials }, streamName, counts };
  const perRecord = new Map<VariantName, number>();
  for (const variant of names) {
    const warmUpOnly = await instructionsOf({ ...base, variant, reads: 0 });
    const withReads = await instructionsOf({ ...base, variant, reads: READS });
    perRecord.set(variant, (withReads - warmUpOnly) / (READS * RECORDS));
  }
  const baseline = perRecord.get(names[0]!)!;
  console.log(`instructions per record (callgrind): ${RECORDS} records of ${PAYLOAD.length} bytes in ${SHARDS} shards, ${READS} reads after a warm-up read; ratio to ${names[0]}`);
  for (const [variant, count] of perRecord) console.log(`  ${variant.padEnd(32)} ${Math.round(count).toString().padStart(9)}  ${(count / baseline).toFixed(2)}x`);
} finally {
  client.destroy();
  await emulator.close();
}
// Once stdout is flushed: a pipe is written asynchronously, and the kept-alive sockets would hold the process open.
process.stdout.write('', () => process.exit(0));
