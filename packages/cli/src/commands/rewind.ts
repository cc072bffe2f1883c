/**
 * `leasehold rewind`: moves the checkpoints of a live group back to a time, to the stream's start or to a
 * position of one shard (or forward to now), while its workers run. Unlike `checkpoint set|reset` it
 * needs no stopped group: nothing is written under a running owner (core's `planRewind`, `applyRewind`,
 * `awaitRewind`). A dry run by default; `--apply` writes, then waits until every shard moved.
 */
import {
  applyRewind,
  awaitRewind,
  LeaseholdError,
  parseRewindTarget,
  planRewind,
  type RewindMove,
  type RewindPlan,
  type RewindProgress,
} from '@leasehold/core';
import { describeValue } from '@leasehold/core/adapter';
import { parseStorageUrl } from '@leasehold/connect';
import { openBackend } from '../connect.js';
import { checkGroup, formatDuration, table, type Io } from '../shared.js';
import { PKG } from '../pkg.js';

/** Options of {@link rewind}. */
export interface RewindOptions {
  readonly storage: string;
  readonly group: string;
  /** Only the leases of this stream (keys `<stream>:<shard>`, in groups that read several streams). */
  readonly stream: string | undefined;
  /** Only these shards (with `stream`, the shard ids within it); none: every lease selected. */
  readonly shards: readonly string[];
  /** An ISO time, `trim-horizon`, `latest` or a position of the one shard named. */
  readonly to: string;
  /** Write the rewind and wait for it; without it nothing is written. */
  readonly apply: boolean;
  /** How long `apply` waits for every shard to move. */
  readonly timeoutMs: number;
  /** Print one JSON document instead of the table and progress lines. */
  readonly json: boolean;
}

/**
 * Plans a rewind and prints what moves (shard, owner, from, to, how); with `apply`, writes it and prints a
 * line each time shards moved, until every one did. A timeout (or an interrupt) before that is an
 * `ERR_REWIND_TIMEOUT` error naming the shards still pending: what was written stays, and each owner
 * still applies its request.
 */
export async function rewind(options: RewindOptions, io: Io): Promise<void> {
  checkGroup(options.group);
  const to = parseRewindTarget(options.to);
  const leaseKeys = options.shards.length === 0 ? undefined : options.shards.map((shard) => keyOf(options.stream, shard));
  const target = parseStorageUrl(options.storage);
  const backend = await openBackend(target);
  try {
    const plan = await planRewind({ storage: backend.storage, group: options.group, to, select: { streamId: options.stream, leaseKeys } });
    if (!options.json) io.out(describePlan(plan));
    if (!options.apply) {
      if (options.json) io.out(`${JSON.stringify({ plan })}\n`);
      else io.out(plan.moves.length === 0 ? 'nothing to move\n' : 'dry run: nothing was written; pass --apply to rewind\n');
      return;
    }
    if (plan.moves.length === 0) {
      if (options.json) io.out(`${JSON.stringify({ plan })}\n`);
      else io.out('nothing to move\n');
      return;
    }
    const applied = await applyRewind(plan, { storage: backend.storage });
    if (!options.json) {
      const marker = applied.marker === 'written' ? 'marked on the leader record' : 'the group has no leader record to mark';
      io.out(`rewind ${applied.rewindId} written (${marker}); waiting up to ${formatDuration(options.timeoutMs)} for every shard to move\n`);
    }
    const seen = new Set<string>();
    const progress = await awaitRewind(applied, {
      storage: backend.storage,
      timeoutMs: options.timeoutMs,
      signal: io.signal,
      onProgress: (update) => {
        if (!options.json) io.out(progressLine(update, seen));
      },
    });
    if (options.json) io.out(`${JSON.stringify({ plan, rewind: { rewindId: applied.rewindId, marker: applied.marker }, progress })}\n`);
    if (!progress.complete) {
      const pending = progress.leases.filter((lease) => lease.state === 'pending').map((lease) => describeValue(lease.leaseKey));
      const why = io.signal.aborted ? 'interrupted' : `not done after ${formatDuration(options.timeoutMs)}`;
      throw new LeaseholdError(
        'ERR_REWIND_TIMEOUT',
        `[${PKG}] rewind ${applied.rewindId} of group ${describeValue(options.group)} ${why}: ${pending.length} of ${progress.total} shards have not moved yet (${pending.join(', ')}); their requests stay, and each is applied when its owner sees it (see leasehold status)`,
      );
    }
    if (!options.json) io.out(`every shard moved in ${formatDuration(progress.elapsedMs)}\n`);
  } finally {
    await backend.close();
  }
}

/**
 * The lease key of `shard`: within `stream`, `<stream>:<shard>` unless it is a key starting with the
 * stream already. Either way `planRewind` refuses a key whose stream (up to its last `:`) is another one,
 * such as `orders:eu:<shard>` under `--stream orders`.
 */
function keyOf(stream: string | undefined, shard: string): string {
  if (stream === undefined || shard.startsWith(`${stream}:`)) return shard;
  return `${stream}:${shard}`;
}

/** The plan as people read it: a heading, the table of what moves, and what stays or cannot be read again. */
export function describePlan(plan: RewindPlan): string {
  const target = plan.target === plan.to ? plan.target : `${plan.target} (${plan.to})`;
  const count = plan.moves.length;
  const lines = [`rewind of group ${describeValue(plan.group)} to ${target}: ${count} shard${count === 1 ? '' : 's'} move${count === 1 ? 's' : ''}`];
  if (count > 0) {
    const rows = plan.moves.map((move) => [move.leaseKey, move.owner ?? '-', move.from ?? '(none)', move.to, howOf(move)]);
    lines.push(table(['SHARD', 'OWNER', 'FROM', 'TO', 'HOW'], rows));
  }
  for (const note of plan.unchanged) lines.push(`unchanged: ${note.leaseKey}: ${note.reason}`);
  for (const note of plan.notReplayable) lines.push(`not read again: ${note.leaseKey}: ${note.reason}`);
  return `${lines.join('\n')}\n`;
}

function howOf(move: RewindMove): string {
  const how =
    move.how === 'direct' ? 'direct (nobody holds it)' : move.how === 'request' ? 'request (its owner applies it)' : 'after its descendants stopped';
  return move.descendantOf === undefined ? how : `${how}; continues ${move.descendantOf}`;
}

/** One line for the shards that moved since the last line, with the time each took. */
function progressLine(progress: RewindProgress, seen: Set<string>): string {
  const moved = progress.leases.filter((lease) => lease.state !== 'pending' && !seen.has(lease.leaseKey));
  for (const lease of moved) seen.add(lease.leaseKey);
  const head = `${progress.done}/${progress.total} moved after ${formatDuration(progress.elapsedMs)}`;
  if (moved.length === 0) return `${head}\n`;
  const parts = moved.map((lease) => `${lease.leaseKey} (${lease.state === 'applied' ? lease.how : lease.state}, ${formatDuration(lease.appliedAfterMs ?? 0)})`);
  return `${head}: ${parts.join(', ')}\n`;
}
