/**
 * The group's lease table as stored, with each shard's lag (records produced into it past its checkpoint)
 * and whether its owner holds it: a lease is held only while its owner is an alive member of the roster in
 * the incarnation the lease names. And the roster itself, one row per member.
 */
import { Checkpoint, type CheckpointStorage, type MemberRecord } from '@leasehold/core';
import type { ProducedRecord } from './producer.js';

export interface LeaseRow {
  readonly shardId: string;
  readonly parents: readonly string[];
  readonly owner: string | null;
  /**
   * Whether the owner's membership, in the incarnation the lease names, is alive in the roster as read
   * (its status; whether its heartbeats still move is for the workers to watch). `false` for a free lease.
   */
  readonly ownerAlive: boolean;
  readonly checkpoint: string | null;
  /** Produced records of the shard after its checkpoint. */
  readonly lag: number;
  /** The stored lease cannot be read back: the message of its `CorruptRecordError`; the fields above say nothing then. */
  readonly corrupt?: string;
}

/** Reads the lease table of `group`, sorted by shard; the roster is read after the leases, as workers read it. */
export async function readLeaseTable(storage: CheckpointStorage, group: string, produced: readonly ProducedRecord[]): Promise<LeaseRow[]> {
  const { leases, corrupt } = await storage.listLeases(group);
  const { members } = await storage.getRoster(group);
  const alive = new Map(members.filter((member) => member.status === 'alive').map((member) => [member.workerId, member.incarnation]));
  const rows: LeaseRow[] = leases.map((lease) => ({
    shardId: lease.leaseKey,
    parents: lease.parentKeys,
    owner: lease.owner,
    ownerAlive: lease.owner !== null && alive.get(lease.owner) === lease.incarnation,
    checkpoint: lease.checkpoint,
    lag: lagOf(lease.leaseKey, lease.checkpoint, produced),
  }));
  // A lease that cannot be read back still has a row, so that the table never hides a shard.
  for (const error of corrupt) rows.push({ shardId: error.leaseKey ?? '?', parents: [], owner: null, ownerAlive: false, checkpoint: null, lag: 0, corrupt: error.message });
  return rows.sort((a, b) => a.shardId.localeCompare(b.shardId));
}

function lagOf(shardId: string, checkpoint: string | null, produced: readonly ProducedRecord[]): number {
  if (checkpoint === Checkpoint.SHARD_END) return 0;
  const done = checkpoint === null || Checkpoint.isSentinel(checkpoint) ? -1n : BigInt(checkpoint.split(':')[0]!);
  return produced.filter((record) => record.shardId === shardId && BigInt(record.position) > done).length;
}

const short = (shardId: string): string => shardId.replace(/^shardId-0*(?=\d)/, '');

/**
 * The table as text: shard (and its parents), owner (marked `(dead)` when the lease names a membership
 * that is not alive: the lease is free to take), checkpoint (the tail of the sequence number), lag. A
 * corrupt lease shows as such, its owner and lag unknown.
 */
export function formatLeaseTable(rows: readonly LeaseRow[]): string[] {
  const cells = rows.map((row) => row.corrupt !== undefined ? [short(row.shardId), '?', 'corrupt record', '?'] : [
    `${short(row.shardId)}${row.parents.length > 0 ? ` (from ${row.parents.map(short).join('+')})` : ''}`,
    row.owner === null ? '-' : row.ownerAlive ? row.owner : `${row.owner} (dead)`,
    row.checkpoint === null ? '-' : Checkpoint.isSentinel(row.checkpoint) ? row.checkpoint : `...${row.checkpoint.slice(-10)}`,
    String(row.lag),
  ]);
  const header = ['shard', 'owner', 'checkpoint', 'lag'];
  const widths = header.map((title, i) => Math.max(title.length, ...cells.map((cell) => cell[i]!.length)));
  const line = (cell: readonly string[]): string =>
    `  ${cell.map((text, i) => (i === cell.length - 1 ? text.padStart(widths[i]!) : text.padEnd(widths[i]!))).join('  ')}`;
  return [line(header), line(widths.map((width) => '-'.repeat(width))), ...cells.map(line)];
}

/** One member of the group's roster, as read. */
export interface MemberRow {
  readonly workerId: string;
  readonly incarnation: string;
  readonly status: MemberRecord['status'];
  readonly leaseDurationMs: number;
  /** How many leases it held at its last heartbeat. */
  readonly held: number;
  /** The leases it asked others to hand over. */
  readonly requests: readonly string[];
  readonly version: number;
}

/** Reads the roster of `group`, sorted by worker id; a member that cannot be read back is left out. */
export async function readRoster(storage: CheckpointStorage, group: string): Promise<MemberRow[]> {
  const { members } = await storage.getRoster(group);
  return members
    .map((member) => ({
      workerId: member.workerId,
      incarnation: member.incarnation,
      status: member.status,
      leaseDurationMs: member.leaseDurationMs,
      held: member.held,
      requests: member.requests.map((request) => `${short(request.leaseKey)} from ${request.from}`),
      version: member.version,
    }))
    .sort((a, b) => (a.workerId < b.workerId ? -1 : 1));
}

/** The roster as text: worker, incarnation, status, lease duration, leases held (by its own count), requests. */
export function formatRoster(rows: readonly MemberRow[]): string[] {
  const cells = rows.map((row) => [row.workerId, row.incarnation, row.status, `${row.leaseDurationMs} ms`, String(row.held), row.requests.join(', ') || '-']);
  const header = ['member', 'incarnation', 'status', 'lease', 'held', 'asks for'];
  const widths = header.map((title, i) => Math.max(title.length, ...cells.map((cell) => cell[i]!.length)));
  const line = (cell: readonly string[]): string => `  ${cell.map((text, i) => (i === cell.length - 1 ? text : text.padEnd(widths[i]!))).join('  ')}`;
  return [line(header), line(widths.map((width) => '-'.repeat(width))), ...cells.map(line)];
}
