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
}

/** Reads the lease table of `group`, sorted by shard. */
export async function readLeaseTable(storage: CheckpointStorage, group: string, produced: readonly ProducedRecord[]): Promise<LeaseRow[]> {
  const leases = await storage.listLeases(group);
  return leases
    .map((lease) => ({
      shardId: lease.leaseKey,
      parents: lease.parentKeys,
      owner: lease.owner,
      checkpoint: lease.checkpoint,
      lag: lagOf(lease.leaseKey, lease.checkpoint, produced),
    }))
    .sort((a, b) => a.shardId.localeCompare(b.shardId));
}

function lagOf(shardId: string, checkpoint: string | null, produced: readonly ProducedRecord[]): number {
  if (checkpoint === Checkpoint.SHARD_END) return 0;
  const done = checkpoint === null || Checkpoint.isSentinel(checkpoint) ? -1n : BigInt(checkpoint.split(':')[0]!);
  return produced.filter((record) => record.shardId === shardId && BigInt(record.position) > done).length;
}

const short = (shardId: string): string => shardId.replace(/^shardId-0*(?=\d)/, '');

/** The table as text: shard (and its parents), owner, checkpoint (the tail of the sequence number), lag. */
export function formatLeaseTable(rows: readonly LeaseRow[]): string[] {
  const cells = rows.map((row) => [
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
