/**
 * The plain GetRecords loop run as the consumer's workers are: in as many fresh processes, each reading its
 * share of the shards (bench/plain-worker.ts, compiled). Beside the plain loop in one warm process, this is
 * the baseline that leaves out what any reader pays for being several fresh processes (each one's JIT
 * warming up on the SDK's deserializer, its lazy loads, its heap growing from nothing, or shrunk again
 * after an idle spell), so that what is left between it and the workers is Leasehold's own.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { writeProfileWindow } from './cpu-profile.js';

const CLOCK_TICKS_PER_SECOND = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;

/** A process's CPU time so far (user and system, ms), from /proc. */
export function cpuMsOf(pid: number): number {
  // The fields after the command name (which may hold spaces), from field 3: utime and stime are 14 and 15.
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS_PER_SECOND;
}

/** Where the processes read: the compiled plain worker, the stream, the emulator. */
export interface PlainTarget {
  readonly script: string;
  readonly streamName: string;
  readonly endpoint: string;
  readonly cwd: string;
  /** Extra node flags, the same the workers run with. */
  readonly nodeFlags: readonly string[];
  /** With a directory, each process writes a V8 CPU profile there, and its drain's span beside it. */
  readonly cpuProfileDir?: string | undefined;
}

/**
 * The shards split over `processes` as the consumer's balance splits them (4 over 3: 2, 1, 1): each
 * process's share, in order.
 */
export function shareShards(shardIds: readonly string[], processes: number): string[][] {
  const shares: string[][] = Array.from({ length: processes }, () => []);
  shardIds.forEach((shardId, i) => shares[i % processes]!.push(shardId));
  return shares.filter((share) => share.length > 0);
}

function spawnPlain(target: PlainTarget, mode: 'drain' | 'follow', shards: readonly string[], name: string): ChildProcess {
  const profile = target.cpuProfileDir === undefined ? [] : ['--cpu-prof', `--cpu-prof-dir=${target.cpuProfileDir}`];
  return spawn(process.execPath, [...target.nodeFlags, ...profile, target.script, '--stream', target.streamName, '--kinesis-endpoint', target.endpoint, '--worker-id', name, '--mode', mode, '--shards', shards.join(',')], {
    cwd: target.cwd,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
}

/** What one process's drain reported (plain-loop.ts's figures). */
interface Drained {
  readonly pid: number;
  readonly start: number;
  readonly last: number;
  readonly count: number;
  readonly cpuMs: number;
  readonly startUs: number;
  readonly endUs: number;
}

/**
 * A cold drain by the plain loop in one fresh process per share, all at once: records per second from the
 * first GetShardIterator to the last record, and CPU ms per 1,000 records of the processes together over
 * their reads (each process's own span, its start-up and listing left out, as the workers' is).
 */
export async function plainProcessesDrain(target: PlainTarget, shares: readonly (readonly string[])[], expected: number): Promise<{ rate: number; cpuPer1k: number }> {
  const drained = await Promise.all(
    shares.map(
      (shards, i) =>
        new Promise<Drained>((resolve, reject) => {
          const child = spawnPlain(target, 'drain', shards, `plain-${i + 1}`);
          let stdout = '';
          let stderr = '';
          child.stdout!.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')));
          child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
          child.on('error', reject);
          child.on('exit', (code) => {
            if (process.env.BENCH_WORKER_OUTPUT) writeFileSync(`${process.env.BENCH_WORKER_OUTPUT}/plain-${child.pid}.txt`, stdout);
            const line = stdout.split('\n').find((each) => each.includes('"drained"'));
            if (code !== 0 || line === undefined) reject(new Error(`plain process ${i + 1} exited with ${String(code)} and no figures: ${stderr.slice(0, 200)}`));
            else resolve({ ...(JSON.parse(line) as Omit<Drained, 'pid'>), pid: child.pid! });
          });
        }),
    ),
  );
  const count = drained.reduce((sum, each) => sum + each.count, 0);
  if (count !== expected) throw new Error(`the plain processes read ${count} of ${expected} records`);
  if (target.cpuProfileDir !== undefined) {
    for (const each of drained) writeProfileWindow(target.cpuProfileDir, { kind: 'cold drain, three plain processes', startUs: each.startUs, endUs: each.endUs, pids: [each.pid], cpuMs: each.cpuMs, records: each.count });
  }
  const span = Math.max(...drained.map((each) => each.last)) - Math.min(...drained.map((each) => each.start));
  return { rate: count / (span / 1000), cpuPer1k: drained.reduce((sum, each) => sum + each.cpuMs, 0) / (count / 1000) };
}

/**
 * Plain loops following their shares of a stream in fresh processes (`--mode follow`), for a burst: they
 * read what is there, idle at one call a second per shard once caught up, and can be paused and resumed
 * as the workers are.
 */
export class PlainFollowers {
  #counted = 0;
  #lastAt = 0;
  readonly #children: ChildProcess[];

  constructor(target: PlainTarget, shares: readonly (readonly string[])[]) {
    this.#children = shares.map((shards, i) => {
      const child = spawnPlain(target, 'follow', shards, `plain-${i + 1}`);
      createInterface({ input: child.stdout! }).on('line', (line) => {
        if (!line.includes('"answer"')) return;
        this.#counted += (JSON.parse(line) as { records: number }).records;
        this.#lastAt = Date.now();
      });
      return child;
    });
  }

  /** Records the processes have read so far, together. */
  get counted(): number {
    return this.#counted;
  }

  /** When the last answer with records arrived (the bench's clock, ms). */
  get lastAt(): number {
    return this.#lastAt;
  }

  /** Their process ids. */
  get pids(): number[] {
    return this.#children.map((child) => child.pid!);
  }

  /** Their CPU time so far (ms), together. */
  cpuMs(): number {
    return this.#children.reduce((sum, child) => sum + cpuMsOf(child.pid!), 0);
  }

  pause(): void {
    for (const child of this.#children) child.kill('SIGSTOP');
  }

  resume(): void {
    for (const child of this.#children) child.kill('SIGCONT');
  }

  /** Stops them (resumed first, should they be paused) and waits for their exits. */
  async stop(): Promise<void> {
    await Promise.all(
      this.#children.map(
        (child) =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null) return resolve();
            child.once('exit', () => resolve());
            child.kill('SIGCONT');
            child.kill('SIGTERM');
          }),
      ),
    );
  }
}
