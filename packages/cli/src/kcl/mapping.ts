/**
 * The mapping between KCL leases and Leasehold leases, both ways, as pure functions: `import kcl` and
 * `export kcl` plan with them, and the tests read them as a table.
 *
 * Checkpoints. KCL's checkpoint (sequence, sub-sequence) says that every user record at or before it is
 * done: on restart KCL reads from the record at `sequence` and drops the user records up to that
 * sub-sequence (a plain record has sub-sequence 0). Leasehold's `<sequence>:<sub>` says exactly that
 * (the Kinesis source reads at the record and skips its sub-records up to `<sub>`, and the whole of a plain
 * record), so a KCL checkpoint is imported as `<sequence>:<sub>` always, and read on from the next user
 * record, nothing lost and nothing replayed. A bare Leasehold `<sequence>` (the whole record done) has no
 * KCL form with the sub-records counted: it is exported with the largest sub-sequence KCL can read, which
 * KCL's comparison puts after every sub-record of that record.
 *
 * What only KCL reads (its lease counter, the hash key range, child shard ids, a prepared checkpoint, ...)
 * is carried in the lease's metadata under `kcl.`, so that an export gives it back; a prepared checkpoint
 * and the owner switches are given back only while the checkpoint is still the one imported.
 */
import { Checkpoint, InvalidConfigError, LeaseholdError, parseStreamLeaseKey, streamLeaseKey, type LeaseRecord, type Position } from '@leasehold/core';
import { describeValue } from '@leasehold/core/adapter';
import { kinesisPosition, kinesisPositionParts } from '@leasehold/source-kinesis/positions';
import { PKG } from '../pkg.js';
import { MalformedKclLeaseError, showKclCheckpoint, type KclLease } from './lease.js';

/** The metadata fields of a Leasehold lease that carry what only KCL reads. */
export const KCL_FIELDS = {
  leaseCounter: 'kcl.leaseCounter',
  checkpoint: 'kcl.checkpoint',
  checkpointSubSequenceNumber: 'kcl.checkpointSubSequenceNumber',
  pendingCheckpoint: 'kcl.pendingCheckpoint',
  pendingCheckpointSubSequenceNumber: 'kcl.pendingCheckpointSubSequenceNumber',
  pendingCheckpointState: 'kcl.pendingCheckpointState',
  ownerSwitchesSinceCheckpoint: 'kcl.ownerSwitchesSinceCheckpoint',
  childShardIds: 'kcl.childShardIds',
  startingHashKey: 'kcl.startingHashKey',
  endingHashKey: 'kcl.endingHashKey',
  throughputKBps: 'kcl.throughputKBps',
  entityType: 'kcl.entityType',
  /** The Leasehold checkpoint the import wrote: while the lease still has it, the KCL checkpoint is given back as it was. */
  importedCheckpoint: 'kcl.importedCheckpoint',
} as const;

/** The largest sub-sequence number KCL reads (a Java long): after every sub-record of a record. */
export const WHOLE_RECORD_SUB_SEQUENCE = '9223372036854775807';

/** One shard of an import: the KCL lease and the Leasehold lease written for it. */
export interface ImportRow {
  readonly kclLeaseKey: string;
  /** The KCL checkpoint for people, sub-sequence included. */
  readonly kclCheckpoint: string;
  readonly kclOwner: string | null;
  readonly leaseKey: string;
  readonly checkpoint: Position;
  readonly parentKeys: readonly string[];
  readonly metadata: Readonly<Record<string, string>>;
  /** What an operator should know about this lease (a prepared checkpoint, a handoff under way). */
  readonly notes: readonly string[];
}

/** What an import writes. */
export interface ImportPlan {
  readonly multiStream: boolean;
  /** Parents before children, then by lease key. */
  readonly rows: readonly ImportRow[];
}

/** What an import is told beyond the table. */
export interface ImportChoices {
  /** The timestamp the KCL application was configured with, for leases at `AT_TIMESTAMP`. */
  readonly initialTimestampMs?: number | undefined;
  /** Only the leases of these streams (a multi-stream table): stream identifiers or stream names. */
  readonly streams: readonly string[];
}

/** The Leasehold leases of a KCL table's leases; throws an error naming the lease or option that cannot be mapped. */
export function importPlanOf(leases: readonly KclLease[], choices: ImportChoices): ImportPlan {
  const multi = leases.filter((lease) => lease.streamName !== undefined);
  if (multi.length > 0 && multi.length < leases.length) {
    const single = leases.find((lease) => lease.streamName === undefined) as KclLease;
    throw new LeaseholdError(
      'ERR_KCL_LEASE_MALFORMED',
      `[${PKG}] the KCL table mixes multi-stream leases (${describeValue(multi[0]?.leaseKey)}) with single-stream ones (${describeValue(single.leaseKey)}); import it in one layout`,
    );
  }
  const multiStream = multi.length > 0;
  const selected = selectStreams(leases, multiStream, choices.streams);
  const rows = selected.map((lease) => importRowOf(lease, multiStream, choices));
  return { multiStream, rows: parentsFirst(rows, multiStream) };
}

function selectStreams(leases: readonly KclLease[], multiStream: boolean, streams: readonly string[]): readonly KclLease[] {
  if (streams.length === 0) return leases;
  if (!multiStream) {
    throw new InvalidConfigError(`[${PKG}] --stream ${describeValue(streams[0])} selects streams of a multi-stream KCL table; this table's leases are of one stream (their keys are shard ids)`);
  }
  const ids = [...new Set(leases.map((lease) => lease.streamName as string))].sort();
  const matches = (streamId: string, wanted: string): boolean => streamId === wanted || streamId.split(':')[1] === wanted;
  for (const wanted of streams) {
    if (!ids.some((streamId) => matches(streamId, wanted))) {
      throw new InvalidConfigError(`[${PKG}] --stream ${describeValue(wanted)} names no stream of the KCL table; its streams are ${ids.map((id) => describeValue(id)).join(', ')}`);
    }
  }
  return leases.filter((lease) => streams.some((wanted) => matches(lease.streamName as string, wanted)));
}

function importRowOf(lease: KclLease, multiStream: boolean, choices: ImportChoices): ImportRow {
  const leaseKey = multiStream ? streamLeaseKey(lease.streamName as string, lease.shardId as string) : lease.leaseKey;
  if (!multiStream && lease.leaseKey.includes(':')) {
    throw new LeaseholdError('ERR_KCL_LEASE_MALFORMED', `[${PKG}] KCL lease ${describeValue(lease.leaseKey)}: a single-stream lease key is a shard id, without ":"`);
  }
  const parentKeys = lease.parentShardIds.map((shardId) => (multiStream ? streamLeaseKey(lease.streamName as string, shardId) : shardId));
  const checkpoint = leaseholdCheckpointOf(lease, choices.initialTimestampMs);
  const notes: string[] = [];
  if (lease.pendingCheckpoint !== undefined) {
    notes.push(
      `prepared checkpoint ${showKclCheckpoint(lease.pendingCheckpoint, lease.pendingCheckpointSubSequenceNumber)} not committed: reading resumes after the committed one, as KCL would`,
    );
  }
  if (lease.checkpointOwner !== undefined) notes.push(`a KCL handoff from ${describeValue(lease.checkpointOwner)} was under way`);
  const carried: Record<string, string | undefined> = {
    [KCL_FIELDS.leaseCounter]: lease.leaseCounter,
    [KCL_FIELDS.checkpoint]: lease.checkpoint,
    [KCL_FIELDS.checkpointSubSequenceNumber]: lease.checkpointSubSequenceNumber,
    [KCL_FIELDS.pendingCheckpoint]: lease.pendingCheckpoint,
    [KCL_FIELDS.pendingCheckpointSubSequenceNumber]: lease.pendingCheckpointSubSequenceNumber,
    [KCL_FIELDS.pendingCheckpointState]: lease.pendingCheckpointState === undefined ? undefined : Buffer.from(lease.pendingCheckpointState).toString('base64'),
    [KCL_FIELDS.ownerSwitchesSinceCheckpoint]: lease.ownerSwitchesSinceCheckpoint,
    [KCL_FIELDS.childShardIds]: lease.childShardIds.length === 0 ? undefined : JSON.stringify(lease.childShardIds),
    [KCL_FIELDS.startingHashKey]: lease.startingHashKey,
    [KCL_FIELDS.endingHashKey]: lease.endingHashKey,
    [KCL_FIELDS.throughputKBps]: lease.throughputKBps,
    [KCL_FIELDS.entityType]: lease.entityType,
    [KCL_FIELDS.importedCheckpoint]: checkpoint,
  };
  const metadata = Object.fromEntries(Object.entries(carried).filter((entry): entry is [string, string] => entry[1] !== undefined));
  return {
    kclLeaseKey: lease.leaseKey,
    kclCheckpoint: showKclCheckpoint(lease.checkpoint, lease.checkpointSubSequenceNumber),
    kclOwner: lease.leaseOwner ?? null,
    leaseKey,
    checkpoint,
    parentKeys,
    metadata,
    notes,
  };
}

/** The Leasehold checkpoint of a KCL checkpoint: the same records done, the same next record. */
function leaseholdCheckpointOf(lease: KclLease, initialTimestampMs: number | undefined): Position {
  switch (lease.checkpoint) {
    case 'TRIM_HORIZON':
      return Checkpoint.TRIM_HORIZON;
    case 'LATEST':
      return Checkpoint.LATEST;
    case 'SHARD_END':
      return Checkpoint.SHARD_END;
    case 'AT_TIMESTAMP':
      // KCL keeps no time in the lease: its workers start such a shard at the application's configured timestamp.
      if (initialTimestampMs === undefined) {
        throw new InvalidConfigError(
          `[${PKG}] KCL lease ${describeValue(lease.leaseKey)} is at AT_TIMESTAMP, whose time KCL keeps in the application's configuration, not in the lease: pass it with --kcl-initial-timestamp`,
        );
      }
      return Checkpoint.atTimestamp(initialTimestampMs);
    default: {
      const sub = lease.checkpointSubSequenceNumber ?? '0';
      // An export's "every sub-record of this record" comes back as the whole record.
      if (sub === WHOLE_RECORD_SUB_SEQUENCE) return kinesisPosition(lease.checkpoint);
      try {
        return kinesisPosition(lease.checkpoint, Number(sub));
      } catch (error) {
        throw new MalformedKclLeaseError(lease.leaseKey, `checkpoint ${showKclCheckpoint(lease.checkpoint, sub)} is not a Kinesis position: ${(error as Error).message}`);
      }
    }
  }
}

/** Orders rows by stream, so that every parent in the set comes before its children, then by lease key. */
function parentsFirst(rows: readonly ImportRow[], multiStream: boolean): ImportRow[] {
  const byKey = new Map(rows.map((row) => [row.leaseKey, row]));
  const depth = new Map<string, number>();
  const depthOf = (key: string, seen: Set<string>): number => {
    const known = depth.get(key);
    if (known !== undefined) return known;
    const row = byKey.get(key);
    if (row === undefined || seen.has(key)) return -1;
    seen.add(key);
    const value = 1 + Math.max(-1, ...row.parentKeys.map((parent) => depthOf(parent, seen)));
    depth.set(key, value);
    return value;
  };
  const streamOf = (row: ImportRow): string => (multiStream ? (parseStreamLeaseKey(row.leaseKey)?.streamId ?? '') : '');
  const bytewise = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);
  return [...rows].sort(
    (a, b) => bytewise(streamOf(a), streamOf(b)) || depthOf(a.leaseKey, new Set()) - depthOf(b.leaseKey, new Set()) || bytewise(a.leaseKey, b.leaseKey),
  );
}

/** One lease of an export: the Leasehold lease and the KCL lease written for it. */
export interface ExportRow {
  readonly leaseKey: string;
  readonly checkpoint: Position | null;
  readonly kcl: KclLease;
  readonly kclCheckpoint: string;
  readonly notes: readonly string[];
}

/**
 * The KCL leases of a Leasehold group's leases; `birthPosition` tells where the first shards of a stream
 * started (the stream id in a multi-stream group, `undefined` otherwise), as the leader record keeps it.
 */
export function exportPlanOf(leases: readonly LeaseRecord[], birthPosition: (streamId: string | undefined) => string | undefined): { readonly multiStream: boolean; readonly rows: readonly ExportRow[] } {
  const qualified = leases.filter((lease) => lease.leaseKey.includes(':'));
  if (qualified.length > 0 && qualified.length < leases.length) {
    const plain = leases.find((lease) => !lease.leaseKey.includes(':')) as LeaseRecord;
    throw new LeaseholdError(
      'ERR_NOT_A_KINESIS_GROUP',
      `[${PKG}] the group mixes multi-stream lease keys (${describeValue(qualified[0]?.leaseKey)}) with shard ids (${describeValue(plain.leaseKey)}); a KCL table holds one layout`,
    );
  }
  const multiStream = qualified.length > 0;
  return { multiStream, rows: leases.map((lease) => exportRowOf(lease, multiStream, birthPosition)) };
}

function exportRowOf(lease: LeaseRecord, multiStream: boolean, birthPositionOf: (streamId: string | undefined) => string | undefined): ExportRow {
  const stream = multiStream ? parseStreamLeaseKey(lease.leaseKey) : undefined;
  if (multiStream && stream === undefined) {
    throw new LeaseholdError('ERR_NOT_A_KINESIS_GROUP', `[${PKG}] lease ${describeValue(lease.leaseKey)} is not <stream id>:<shard id>`);
  }
  const parentShardIds = lease.parentKeys.map((parentKey) => {
    if (stream === undefined) return parentKey;
    const parent = parseStreamLeaseKey(parentKey);
    if (parent?.streamId !== stream.streamId) {
      throw new LeaseholdError('ERR_NOT_A_KINESIS_GROUP', `[${PKG}] lease ${describeValue(lease.leaseKey)} has parent ${describeValue(parentKey)} of another stream`);
    }
    return parent.shardId;
  });
  const md = lease.metadata;
  const notes: string[] = [];
  const kclCheckpoint = md[KCL_FIELDS.checkpoint];
  const state = md[KCL_FIELDS.pendingCheckpointState];
  const position =
    kclCheckpoint !== undefined && lease.checkpoint === md[KCL_FIELDS.importedCheckpoint]
    ? {
        checkpoint: kclCheckpoint,
        checkpointSubSequenceNumber: md[KCL_FIELDS.checkpointSubSequenceNumber],
        pendingCheckpoint: md[KCL_FIELDS.pendingCheckpoint],
        pendingCheckpointSubSequenceNumber: md[KCL_FIELDS.pendingCheckpointSubSequenceNumber],
        pendingCheckpointState: state === undefined ? undefined : new Uint8Array(Buffer.from(state, 'base64')),
        ownerSwitchesSinceCheckpoint: md[KCL_FIELDS.ownerSwitchesSinceCheckpoint],
      }
    : { ...kclCheckpointOf(lease, birthPositionOf(stream?.streamId), notes), ownerSwitchesSinceCheckpoint: '0' };
  const children = md[KCL_FIELDS.childShardIds];
  const childShardIds = children === undefined ? [] : childIdsOf(lease.leaseKey, children);
  const kcl: KclLease = {
    leaseKey: lease.leaseKey,
    leaseCounter: md[KCL_FIELDS.leaseCounter] ?? '0',
    ...position,
    parentShardIds: [...parentShardIds].sort(),
    childShardIds,
    startingHashKey: md[KCL_FIELDS.startingHashKey],
    endingHashKey: md[KCL_FIELDS.endingHashKey],
    throughputKBps: md[KCL_FIELDS.throughputKBps],
    entityType: md[KCL_FIELDS.entityType],
    streamName: stream?.streamId,
    shardId: stream?.shardId,
  };
  return { leaseKey: lease.leaseKey, checkpoint: lease.checkpoint, kcl, kclCheckpoint: showKclCheckpoint(kcl.checkpoint, kcl.checkpointSubSequenceNumber), notes };
}

/** The KCL checkpoint of a Leasehold checkpoint. */
function kclCheckpointOf(lease: LeaseRecord, birthPosition: string | undefined, notes: string[]): { checkpoint: string; checkpointSubSequenceNumber: string } {
  const sentinel = (checkpoint: string): { checkpoint: string; checkpointSubSequenceNumber: string } => ({ checkpoint, checkpointSubSequenceNumber: '0' });
  let position = lease.checkpoint;
  if (position === null) {
    // Never checkpointed: a child starts at its beginning, a shard of the group's birth where the group started.
    if (lease.parentKeys.length > 0) return sentinel('TRIM_HORIZON');
    if (birthPosition === undefined) {
      notes.push('no checkpoint and no birth position in the leader record: TRIM_HORIZON');
      return sentinel('TRIM_HORIZON');
    }
    position = birthPosition;
  }
  if (position === Checkpoint.TRIM_HORIZON || position === Checkpoint.LATEST || position === Checkpoint.SHARD_END) return sentinel(position);
  const timestampMs = Checkpoint.timestampOf(position);
  if (timestampMs !== undefined) {
    notes.push(`KCL keeps no time in a lease: configure the KCL application's AT_TIMESTAMP initial position at ${new Date(timestampMs).toISOString()}`);
    return sentinel('AT_TIMESTAMP');
  }
  let parts: ReturnType<typeof kinesisPositionParts>;
  try {
    parts = kinesisPositionParts(position);
  } catch (error) {
    throw new LeaseholdError('ERR_NOT_A_KINESIS_GROUP', `[${PKG}] lease ${describeValue(lease.leaseKey)} has checkpoint ${describeValue(position)}, not a Kinesis position`, { cause: error });
  }
  if (parts === undefined) throw new LeaseholdError('ERR_NOT_A_KINESIS_GROUP', `[${PKG}] lease ${describeValue(lease.leaseKey)} has checkpoint ${describeValue(position)}, not a Kinesis position`);
  return { checkpoint: parts.sequenceNumber, checkpointSubSequenceNumber: parts.subSequenceNumber === undefined ? WHOLE_RECORD_SUB_SEQUENCE : String(parts.subSequenceNumber) };
}

function childIdsOf(leaseKey: string, text: string): string[] {
  try {
    const parsed: unknown = JSON.parse(text);
    if (Array.isArray(parsed) && parsed.every((id) => typeof id === 'string')) return [...parsed].sort();
  } catch {
    // reported below
  }
  throw new LeaseholdError('ERR_NOT_A_KINESIS_GROUP', `[${PKG}] lease ${describeValue(leaseKey)} has metadata ${KCL_FIELDS.childShardIds} ${describeValue(text)}, not a JSON array of shard ids`);
}
