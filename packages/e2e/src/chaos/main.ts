/**
 * `pnpm chaos`: a consumer group of worker processes on each backend against kinesis-local, under seeded
 * faults, checked by an independent monitor (see harness.ts and verdict.ts).
 *
 *   pnpm chaos                                   # every backend, 60 s of faults each, a random seed
 *   pnpm chaos --backend redis --minutes 5 --seed 42
 *   pnpm chaos --sink --seconds 30              # postgres, every record into a sink with its checkpoint
 *   pnpm chaos --sink fenced --backend redis    # leases anywhere, every record into a fenced Postgres sink
 */
import { startKinesisLocal } from '@leasehold/local-stack';
import { parseArgs } from 'node:util';
import type { StorageKind } from '../storage-url.js';
import { SINK_MODES, type SinkMode } from '../sink.js';
import { runChaos } from './harness.js';
import { failuresOf, formatResult } from './report.js';
import { formatSchedule, faultSchedule } from './schedule.js';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';

// `pnpm chaos -- --seed 1` passes the `--` on, as `npm run demo -- ...` does for the demo.
const given = process.argv.slice(2);
const argv = given[0] === '--' ? given.slice(1) : given;
// A bare --sink is the transactional sink, as it was before the fenced one existed.
const bareSink = argv.findIndex((arg, i) => arg === '--sink' && (argv[i + 1] === undefined || argv[i + 1]!.startsWith('-')));
if (bareSink >= 0) argv[bareSink] = '--sink=transactional';
const { values: args } = parseArgs({
  args: argv,
  options: {
    backend: { type: 'string', default: 'all' },
    seconds: { type: 'string' },
    minutes: { type: 'string' },
    seed: { type: 'string' },
    sink: { type: 'string' },
    help: { type: 'boolean', short: 'h' },
  },
});
if (args.help) {
  process.stdout.write('usage: pnpm chaos [--backend postgres|redis|dynamodb|all] [--seconds N | --minutes N] [--seed S] [--sink [transactional|fenced]]\n');
  process.exit(0);
}
const KINDS: StorageKind[] = ['postgres', 'redis', 'dynamodb'];
// --sink writes every record into a Postgres sink and checks it holds each record exactly once: with its
// checkpoint in the lease database (transactional, postgres only) or through a fence (fenced, any backend).
const sink = args.sink as SinkMode | undefined;
if (sink !== undefined && !SINK_MODES.includes(sink)) throw new Error(`--sink must be ${SINK_MODES.join(' or ')}, got ${sink}`);
const backends = args.backend === 'all' ? (sink === 'transactional' ? ['postgres' as const] : KINDS) : [args.backend as StorageKind];
if (!backends.every((kind) => KINDS.includes(kind))) throw new Error(`--backend must be postgres, redis, dynamodb or all, got ${args.backend}`);
const seconds = args.seconds !== undefined ? Number(args.seconds) : args.minutes !== undefined ? Number(args.minutes) * 60 : 60;
if (!Number.isFinite(seconds) || seconds < 10) throw new Error('the run must last at least 10 seconds');
const seed = args.seed !== undefined ? Number(args.seed) : Math.floor(Math.random() * 2 ** 31);
if (!Number.isInteger(seed) || seed < 0) throw new Error(`--seed must be a non-negative integer, got ${args.seed}`);
const durationMs = Math.round(seconds * 1000);

process.stdout.write(`chaos: seed ${seed}, ${seconds} s of faults per backend (${backends.join(', ')})${sink ? `, ${sink} sink` : ''}\n`);
process.stdout.write(`fault schedule:\n${formatSchedule(faultSchedule(seed, durationMs, 3_000))}\n`);
const kinesis = await startKinesisLocal();
const failed: StorageKind[] = [];
const tables: string[] = [];
try {
  for (const backend of backends) {
    process.stdout.write(`\n== ${backend} ==\n`);
    try {
      const result = await runChaos({ backend, seed, durationMs, kinesis, ...(sink ? { sink } : {}), log: (line) => process.stdout.write(`${line}\n`) });
      const table = formatResult(result);
      tables.push(table);
      process.stdout.write(`\n${table}\n`);
      const failures = failuresOf(result);
      if (failures.length > 0) {
        failed.push(backend);
        process.stdout.write(`FAILED: ${failures.join('; ')}\n`);
      }
    } catch (error) {
      failed.push(backend);
      process.stdout.write(`FAILED: ${backend} run broke off: ${(error as Error).stack ?? String(error)}\n`);
    }
  }
} finally {
  await kinesis.close();
}
if (tables.length > 1) process.stdout.write(`\n== summary ==\n${tables.join('\n\n')}\n`);
if (failed.length > 0) {
  process.stdout.write(`\nreplay with:\n${failed.map((backend) => `  pnpm chaos --backend ${backend} --seconds ${seconds} --seed ${seed}${sink ? ` --sink ${sink}` : ''}`).join('\n')}\n`);
  process.exit(1);
}
process.stdout.write('\nevery guarantee held.\n');
process.exit(0);
