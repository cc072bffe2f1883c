/**
 * Leader election on its own, for a service that is not a stream consumer: a scheduler of which every
 * instance is deployed alike, but whose job (here, a cron-like loop) must run on exactly one instance
 * of the cluster at a time.
 *
 * - A `LeaderElector` campaigns over any `LeaderStore` (Postgres, DynamoDB, Redis, memory, yours).
 * - When this instance is elected, `onElected` starts the job with the term. The term is the fencing
 *   token: pass it with every write the job makes, and have the target refuse a term lower than the
 *   highest it has seen, so that a leader that was paused past its lease cannot write over its successor.
 * - When leadership ends (replaced, could not renew in time, or stopping), the signal fires and the job
 *   stops.
 * - SIGTERM and SIGINT step down gracefully: the job finishes its run in flight, then the leader record
 *   is released, so another instance takes over at its next look instead of waiting for the lease to
 *   expire.
 *
 * Run it (several terminals make several instances; stop the leader and watch another take over):
 *
 *   LEASEHOLD_STORAGE=postgres://localhost/test node --import tsx examples/leader-election/service.ts
 *   node --import tsx examples/leader-election/service.ts            # memory: one process, one instance
 *
 * LEASEHOLD_STORAGE takes any storage URL of `@leasehold/connect` (redis://..., dynamodb://TABLE?region=...).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { openStorageFromEnv } from '@leasehold/connect';
import { LeaderElector, type Clock, type LeaderStore } from '@leasehold/core';

/** What one run of the job is given. */
export interface JobContext {
  /** The fencing token: the leader's term. Send it with every write and let the target refuse lower terms. */
  readonly term: number;
  /** This instance. */
  readonly workerId: string;
  /** Fires when this instance must stop: leadership ended or the service is stopping. */
  readonly signal: AbortSignal;
}

/** Options of {@link startService}. */
export interface ServiceOptions {
  /** Where the leader record lives. */
  store: LeaderStore;
  /** The name shared by every instance of the service: one leader per name. */
  group: string;
  /** This instance's id; default: host name, pid and a random suffix. */
  workerId?: string;
  /** How long a leader record lasts without renewal before another instance takes over. Default 10,000. */
  leaseDurationMs?: number;
  /** The pause between two runs of the job while this instance leads. */
  everyMs: number;
  /** One run of the job; it should give up early when `signal` fires. */
  job: (context: JobContext) => Promise<void>;
  /** Where the service reports what it does. Default: nowhere. */
  log?: (line: string) => void;
  /** The clock of the election and of the pauses between runs. Default: the process's (tests pass a virtual one). */
  clock?: Clock;
}

/** A running instance of the service. */
export interface Service extends AsyncDisposable {
  readonly workerId: string;
  /** The term this instance leads, or `undefined` when it does not lead. */
  readonly term: number | undefined;
  /** Stops the job (letting its run in flight finish), then steps down and stops campaigning. */
  stop(): Promise<void>;
}

/** Starts one instance: it campaigns at once and runs the job whenever it leads. */
export async function startService(options: ServiceOptions): Promise<Service> {
  const log = options.log ?? (() => undefined);
  // Aborted by stop(), before the elector steps down: the job ends while this instance still holds the
  // record, so no other instance can start the job before this one has finished its run.
  const stopping = new AbortController();
  let running: Promise<void> = Promise.resolve();

  const elector = new LeaderElector({
    store: options.store,
    group: options.group,
    workerId: options.workerId,
    leaseDurationMs: options.leaseDurationMs,
    clock: options.clock,
    onElected: (term, signal) => {
      log(`${elector.workerId} leads term ${term}`);
      running = runJob(options, { term, workerId: elector.workerId, signal: AbortSignal.any([signal, stopping.signal]) }, log);
    },
    onDemoted: (term, reason) => log(`${elector.workerId} no longer leads term ${term} (${reason})`),
  });
  // Storage errors are reported, not thrown: the elector keeps campaigning and fences itself on its own.
  elector.on('error', ({ error, operation }) => log(`${elector.workerId} ${operation} failed: ${error.message}`));
  await elector.start();

  const stop = async (): Promise<void> => {
    stopping.abort();
    await running;
    await elector.stop();
  };
  return {
    workerId: elector.workerId,
    get term() {
      return elector.term;
    },
    stop,
    [Symbol.asyncDispose]: stop,
  };
}

/** Runs the job every `everyMs` until the signal fires; a failed run is logged and the loop goes on. */
async function runJob(options: ServiceOptions, context: JobContext, log: (line: string) => void): Promise<void> {
  while (!context.signal.aborted) {
    try {
      await options.job(context);
    } catch (error) {
      if (!context.signal.aborted) log(`${context.workerId} job of term ${context.term} failed: ${(error as Error).message}`);
    }
    const pause = options.clock ? options.clock.sleep(options.everyMs, context.signal) : sleep(options.everyMs, undefined, { signal: context.signal });
    await pause.catch(() => undefined);
  }
  log(`${context.workerId} stopped the job of term ${context.term}`);
}

/** Runs one instance until SIGTERM or SIGINT, then steps down and exits. */
export async function main(): Promise<void> {
  // Listen for the signal before anything runs: a job may run, and a SIGTERM arrive, while starting.
  const stopped = new Promise<NodeJS.Signals>((resolve) => {
    process.once('SIGTERM', resolve);
    process.once('SIGINT', resolve);
  });
  // Each backend's driver is loaded only when the URL names it, so the memory mode needs no database driver.
  const opened = await openStorageFromEnv({ fallback: 'memory:' });
  await opened.setup(); // idempotent: creates the tables (Postgres) or the table (DynamoDB) on first use
  const service = await startService({
    store: opened.storage,
    group: process.env.LEASEHOLD_GROUP ?? 'nightly-report',
    everyMs: 1_000,
    // The job: here it only prints. A real one would send `term` with each write it makes.
    job: async ({ term, workerId }) => console.log(`${new Date().toISOString()} ${workerId} runs the job (term ${term})`),
    log: (line) => console.log(line),
  });
  console.log(`${service.workerId} started; SIGTERM or Ctrl-C steps down`);

  await stopped;
  await service.stop();
  await opened.close();
  console.log(`${service.workerId} stepped down and stopped`);
}

// Runs main() only when the file is executed, not when it is imported (by the test, or by your code).
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  });
}
