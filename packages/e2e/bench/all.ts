/**
 * `pnpm bench` for this package: every end-to-end benchmark in turn, each in a process of its own (run.ts's
 * parts, then scale.ts, birth.ts, rewind.ts and soak.ts). `BENCH_ONLY` selects across all of them: the
 * names of run.ts's parts (drain, cold, burst, failover, handoff, reshard, scale-out, memory) run run.ts with
 * only those, and `scale`, `birth`, `rewind` and `soak` run those benchmarks; a name none of them knows is
 * refused, naming it. Without `BENCH_ONLY` every benchmark runs. (Before, `BENCH_ONLY=handoff` ran the
 * handoff part and then, unasked, the scale benchmark's ten minutes on dynalite and the rest.)
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** run.ts's parts, as its `selected(...)` calls name them. */
const RUN_PARTS = ['drain', 'cold', 'burst', 'failover', 'handoff', 'reshard', 'scale-out', 'memory'];
/** The benchmarks after run.ts, each a file of this folder. */
const OTHERS = ['scale', 'birth', 'rewind', 'soak'];

const only = process.env['BENCH_ONLY']
  ?.split(',')
  .map((item) => item.trim())
  .filter((item) => item !== '');
const unknown = only?.filter((name) => !RUN_PARTS.includes(name) && !OTHERS.includes(name)) ?? [];
if (unknown.length > 0) {
  console.error(`BENCH_ONLY names ${unknown.map((name) => JSON.stringify(name)).join(', ')}, which no benchmark has; the names are ${[...RUN_PARTS, ...OTHERS].join(', ')}`);
  process.exit(2);
}

const runs: { file: string; env: NodeJS.ProcessEnv }[] = [];
const parts = only?.filter((name) => RUN_PARTS.includes(name));
if (only === undefined || (parts !== undefined && parts.length > 0)) runs.push({ file: 'run.ts', env: parts === undefined ? {} : { BENCH_ONLY: parts.join(',') } });
for (const name of OTHERS) if (only === undefined || only.includes(name)) runs.push({ file: `${name}.ts`, env: {} });

for (const { file, env } of runs) {
  const { BENCH_ONLY: _only, ...inherited } = process.env;
  const result = spawnSync(process.execPath, ['--import', 'tsx', fileURLToPath(new URL(file, import.meta.url))], { stdio: 'inherit', env: { ...inherited, ...env } });
  if (result.status !== 0) process.exit(result.status ?? 1);
}
