/** The group's lease table as stored, with each shard's lag: records produced into it past its checkpoint. */
import { Checkpoint, type CheckpointStorage } from '@leasehold/core';
import type { ProducedRecord } from './producer.js';

export interface LeaseRow {
  readonly shardId: string;
  readonly parents: readonly string[];
  readonly owner: string | null;
  readonly checkpoint: string | null;
  /** Produced records of the shard after its checkpoint. */
  readonly lag: number;
  /** The stored lease cannot be read back: the message of its `CorruptRecordError`; the fields above say nothing then. */
  readonly corrupt?: string;
}

/** Reads the lease table of `group`, sorted by shard. */
export async function readLeaseTable(storage: CheckpointStorage, group: string, produced: readonly ProducedRecord[]): Promise<LeaseRow[]> {
  const { leases, corrupt } = await storage.listLeases(group);
  const rows: LeaseRow[] = leases.map((lease) => ({
    shardId: lease.leaseKey,
    parents: lease.parentKeys,
    owner: lease.owner,
    checkpoint: lease.checkpoint,
    lag: lagOf(lease.leaseKey, lease.checkpoint, produced),
  }));
  // A lease that cannot be read back still has a row, so that the table never hides a shard.
  for (const error of corrupt) rows.push({ shardId: error.leaseKey ?? '?', parents: [], owner: null, checkpoint: null, lag: 0, corrupt: error.message });
  return rows.sort((a, b) => a.shardId.localeCompare(b.shardId));
}

function lagOf(shardId: string, checkpoint: string | null, produced: readonly ProducedRecord[]): number {
  if (checkpoint === Checkpoint.SHARD_END) return 0;
  const done = checkpoint === null || Checkpoint.isSentinel(checkpoint) ? -1n : BigInt(checkpoint.split(':')[0]!);
  return produced.filter((record) => record.shardId === shardId && BigInt(record.position) > done).length;
}

const short = (shardId: string): string => shardId.replace(/^shardId-0*(?=\d)/, '');

/**
 * The table as text: shard (and its parents), owner, checkpoint (the tail of the sequence number), lag. A
 * corrupt lease shows as such, its owner and lag unknown.
 */
export function formatLeaseTable(rows: readonly LeaseRow[]): string[] {
  const cells = rows.map((row) => row.corrupt !== undefined ? [short(row.shardId), '?', 'corrupt record', '?'] : [
    `${short(row.shardId)}${row.parents.length > 0 ? ` (from ${row.parents.map(short).join('+')})` : ''}`,
    row.owner ?? '-',
    row.checkpoint === null ? '-' : Checkpoint.isSentinel(row.checkpoint) ? row.checkpoint : `...${row.checkpoint.slice(-10)}`,
    String(row.lag),
  ]);
  const header = ['shard', 'owner', 'checkpoint', 'lag'];
  const widths = header.map((title, i) => Math.max(title.length, ...cells.map((cell) => cell[i]!.length)));
  const line = (cell: readonly string[]): string =>
    `  ${cell.map((text, i) => (i === cell.length - 1 ? text.padStart(widths[i]!) : text.padEnd(widths[i]!))).join('  ')}`;
  return [line(header), line(widths.map((width) => '-'.repeat(width))), ...cells.map(line)];
}
