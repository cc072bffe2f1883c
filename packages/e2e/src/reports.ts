/**
 * What a worker process tells its parent: one JSON object per line on its stdout. A record is reported
 * when it is handed to the handler, before its batch is checkpointed, and stdout is a pipe (written
 * synchronously on Linux), so a record a worker checkpointed was always reported, even when the worker is
 * killed a moment later.
 */

interface Base {
  readonly worker: string;
  /** Wall-clock milliseconds (fractional) when it happened; every process of a run shares the host's clock. */
  readonly at: number;
}

/** One record handed to the handler. */
export interface RecordReport extends Base {
  readonly type: 'record';
  readonly shardId: string;
  readonly fencingToken: number;
  readonly key: string;
  readonly seq: number;
  readonly position: string;
}

/** With `--report batches`: one batch handed to the handler, instead of a report per record. */
export interface BatchReport extends Base {
  readonly type: 'batch';
  readonly shardId: string;
  readonly fencingToken: number;
  readonly records: number;
  /** The positions of its first and last records. */
  readonly first: string;
  readonly last: string;
}

/**
 * With `--sink fenced`: what the sink's fence did with a batch, reported once the write ended. `applied`
 * committed `written` of its `records` records (fewer when the batch overlapped what the sink had);
 * `replay` found the batch in the sink already and wrote nothing; `refused` was a zombie's write (a fencing
 * token older than the fence's) and wrote nothing.
 */
export interface FencedReport extends Base {
  readonly type: 'fenced';
  readonly shardId: string;
  readonly fencingToken: number;
  /** The position after the batch. */
  readonly position: string;
  readonly outcome: 'applied' | 'replay' | 'refused';
  readonly records: number;
  readonly written: number;
  /**
   * The worker was told (SIGUSR2) to stop after its next batch committed to the sink, and this is that
   * batch: it waits, before its checkpoint, until it is killed.
   */
  readonly holding?: true;
}

/**
 * With `--stats-interval-ms`: the worker's memory (bytes, from `process.memoryUsage()`, taken after a
 * collection when `collected`), its active handles and requests, and the sizes of its consumer's bookkeeping.
 */
export interface StatsReport extends Base {
  readonly type: 'stats';
  readonly collected: boolean;
  readonly rss: number;
  readonly heapUsed: number;
  readonly heapTotal: number;
  readonly external: number;
  readonly arrayBuffers: number;
  /** The committed size of each V8 heap space (new_space, old_space, code_space...), bytes. */
  readonly heapSpaces: Readonly<Record<string, number>>;
  /** Of `heapUsed`, what compiled code takes. */
  readonly codeUsed: number;
  /** Of the RSS, the anonymous and the file-backed part (the node binary's pages), bytes; Linux only. */
  readonly rssAnon?: number;
  readonly rssFile?: number;
  readonly resources: number;
  readonly shards: number;
  readonly diagnostics: Readonly<Record<string, number>>;
}

/** Every message a worker sends. */
export type WorkerReport =
  | RecordReport
  | BatchReport
  | (Base & { readonly type: 'ready'; readonly pid: number })
  | (Base & { readonly type: 'started'; readonly shardId: string; readonly position: string; readonly fencingToken: number })
  | (Base & { readonly type: 'checkpointed'; readonly shardId: string; readonly position: string })
  | (Base & { readonly type: 'lost'; readonly shardId: string; readonly reason: string })
  | (Base & { readonly type: 'handed-off'; readonly shardId: string; readonly to: string })
  /** The worker began handing a lease over unasked (a rebalance): it drains it, then writes it to `to`. */
  | (Base & { readonly type: 'handoff-offered'; readonly shardId: string; readonly to: string })
  | (Base & { readonly type: 'ended'; readonly shardId: string; readonly childShardIds: readonly string[] })
  /** An operator's rewind moved the shard's checkpoint (`waitsForParent`: its lease was given back until a parent is read again). */
  | (Base & { readonly type: 'rewound'; readonly shardId: string; readonly rewindId: string; readonly to: string; readonly waitsForParent: boolean })
  | (Base & { readonly type: 'leader'; readonly term: number })
  /** The worker's source listed the stream's shards (ListShards, one report per call). */
  | (Base & { readonly type: 'list-shards' })
  /** The worker's source asked for a shard iterator (GetShardIterator, one report per call). */
  | (Base & { readonly type: 'get-shard-iterator'; readonly shardId: string })
  /** A reader of the shard got its first answer (one GetRecords, maybe empty) since it started. */
  | (Base & { readonly type: 'first-read'; readonly shardId: string; readonly records: number })
  /** The worker got SIGTERM and begins its graceful stop. */
  | (Base & { readonly type: 'stopping' })
  /** The worker's coordinator wrote a lease free (a graceful stop, or a finished shard given back). */
  | (Base & { readonly type: 'released'; readonly shardId: string })
  /** The worker's coordinator took a lease (`how`: free, expired, handed to it); its reader starts next. */
  | (Base & { readonly type: 'acquired'; readonly shardId: string; readonly how: string })
  | (Base & { readonly type: 'error'; readonly operation: string; readonly message: string })
  /** The handler threw (with `--sink`: its sink write failed, so the batch is handed over again). */
  | (Base & { readonly type: 'handler-failed'; readonly shardId: string; readonly message: string })
  | FencedReport
  | StatsReport
  | (Base & { readonly type: 'stopped' });

/** Parses one line of a worker's stdout, or returns `undefined` for a line that is not a report. */
export function parseReport(line: string): WorkerReport | undefined {
  if (!line.startsWith('{')) return undefined;
  try {
    const value = JSON.parse(line) as Partial<WorkerReport>;
    return typeof value.type === 'string' && typeof value.worker === 'string' ? (value as WorkerReport) : undefined;
  } catch {
    return undefined;
  }
}

/** The current time as reports carry it. */
export function now(): number {
  return performance.timeOrigin + performance.now();
}
