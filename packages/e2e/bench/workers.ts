/**
 * The worker processes as plain JavaScript: src/worker.ts (Leasehold), bench/lifion-worker.ts
 * (lifion-kinesis) and bench/plain-worker.ts (the raw SDK v3 reader), compiled by tsc into bench/dist,
 * importing the workspace packages' built dist, so that the memory and soak benchmarks measure what an
 * installed application runs under `node`, not tsx's compiler and the packages' sources.
 */
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const PROJECT = fileURLToPath(new URL('./tsconfig.workers.json', import.meta.url));

export interface CompiledWorkers {
  /** The Leasehold worker (src/worker.ts). */
  readonly leasehold: string;
  /** The lifion-kinesis worker (bench/lifion-worker.ts). */
  readonly lifion: string;
  /** The raw SDK v3 reader (bench/plain-worker.ts). */
  readonly plain: string;
}

/** Compiles both workers (a few seconds); returns the scripts to run with `node`. */
export function buildWorkers(): CompiledWorkers {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  execFileSync(process.execPath, [tsc, '-p', PROJECT], { stdio: ['ignore', 'inherit', 'inherit'] });
  return {
    leasehold: fileURLToPath(new URL('./dist/src/worker.js', import.meta.url)),
    lifion: fileURLToPath(new URL('./dist/bench/lifion-worker.js', import.meta.url)),
    plain: fileURLToPath(new URL('./dist/bench/plain-worker.js', import.meta.url)),
  };
}
