/**
 * A lease of the KCL (the Kinesis Client Library, Java, and its MultiLangDaemon) as its lease table in
 * DynamoDB holds it, read from and written to the table's items. The layout is the one KCL 1.x, 2.x and
 * 3.x share (3.x adds attributes, none of which changes the others' meaning):
 *
 * - `leaseKey` (S, the table's hash key): the shard id, or `<account>:<stream>:<creation epoch>:<shardId>`
 *   in a multi-stream application, whose items also carry `streamName` (the stream identifier, despite its
 *   name) and `shardId`;
 * - `leaseOwner` (S, absent when unassigned), `leaseCounter` (N, moved by every renewal and take);
 * - `checkpoint` (S: a sequence number or `TRIM_HORIZON`, `LATEST`, `AT_TIMESTAMP`, `SHARD_END`) and
 *   `checkpointSubSequenceNumber` (N): every user record at or before (sequence, sub-sequence) is done;
 * - `pendingCheckpoint`, `pendingCheckpointSubSequenceNumber`, `pendingCheckpointState` (B): a prepared
 *   (two-phase) checkpoint not yet committed; KCL resumes from `checkpoint` and shows it to the processor;
 * - `ownerSwitchesSinceCheckpoint` (N), `parentShardId` (SS), `childShardIds` (SS),
 *   `startingHashKey`/`endingHashKey` (S, the shard's hash key range);
 * - 3.x: `throughputKBps` (N), `checkpointOwner` (S, a graceful handoff under way), `entityType` (S,
 *   `LEASE`; items of other entity types are not leases).
 *
 * Numbers are kept as the decimal strings DynamoDB gives, so that they are written back exactly.
 */
import type { AttributeValue } from '@aws-sdk/client-dynamodb';
import { LeaseholdError } from '@leasehold/core';
import { describeValue } from '@leasehold/core/adapter';
import { PKG } from '../pkg.js';

/** The sentinels KCL stores in `checkpoint` instead of a sequence number. */
export const KCL_SENTINELS = ['TRIM_HORIZON', 'LATEST', 'AT_TIMESTAMP', 'SHARD_END'] as const;

/** One lease of a KCL lease table. */
export interface KclLease {
  readonly leaseKey: string;
  readonly leaseOwner?: string | undefined;
  /** Decimal. */
  readonly leaseCounter: string;
  /** A sequence number (digits) or one of {@link KCL_SENTINELS}. */
  readonly checkpoint: string;
  /** Decimal; KCL reads an absent one as 0. */
  readonly checkpointSubSequenceNumber?: string | undefined;
  readonly pendingCheckpoint?: string | undefined;
  readonly pendingCheckpointSubSequenceNumber?: string | undefined;
  readonly pendingCheckpointState?: Uint8Array | undefined;
  readonly ownerSwitchesSinceCheckpoint?: string | undefined;
  /** Shard ids, never stream-qualified, also in a multi-stream table. */
  readonly parentShardIds: readonly string[];
  readonly childShardIds: readonly string[];
  readonly startingHashKey?: string | undefined;
  readonly endingHashKey?: string | undefined;
  readonly throughputKBps?: string | undefined;
  readonly checkpointOwner?: string | undefined;
  readonly entityType?: string | undefined;
  /** Multi-stream tables: the stream identifier `<account>:<stream>:<creation epoch>`. */
  readonly streamName?: string | undefined;
  /** Multi-stream tables: the shard id. */
  readonly shardId?: string | undefined;
}

/** A DynamoDB item as the SDK gives it. */
export type KclItem = Record<string, AttributeValue>;

/** A KCL lease item that cannot be read as a lease: named by its lease key, never dropped. */
export class MalformedKclLeaseError extends LeaseholdError {
  /** The `leaseKey` of the item, or `undefined` when it has none. */
  readonly leaseKey: string | undefined;

  constructor(leaseKey: string | undefined, problem: string) {
    super('ERR_KCL_LEASE_MALFORMED', `[${PKG}] KCL lease ${leaseKey === undefined ? '(an item without a string leaseKey)' : describeValue(leaseKey)}: ${problem}`);
    this.leaseKey = leaseKey;
  }
}

const DIGITS = /^\d{1,128}$/;
const WHOLE = /^\d{1,19}$/;
const NUMBER = /^-?\d+(\.\d+)?([eE][-+]?\d+)?$/;

/** Whether the item is a lease: items without `entityType` are (KCL before 3.x), and those of type `LEASE`. */
export function isLeaseItem(item: KclItem): boolean {
  const entityType = item.entityType?.S;
  return entityType === undefined || entityType === 'LEASE';
}

/** Reads one lease item, or throws a {@link MalformedKclLeaseError} naming its lease key and the bad attribute. */
export function parseKclItem(item: KclItem): KclLease {
  const leaseKey = item.leaseKey?.S;
  if (leaseKey === undefined || leaseKey.length === 0) throw new MalformedKclLeaseError(undefined, `leaseKey is ${describeAttribute(item.leaseKey)}, expected a non-empty string`);
  const bad = (name: string, expected: string): MalformedKclLeaseError =>
    new MalformedKclLeaseError(leaseKey, `${name} is ${describeAttribute(item[name])}, expected ${expected}`);
  const string = (name: string): string | undefined => {
    const value = item[name];
    if (value === undefined || value.NULL === true) return undefined;
    if (value.S === undefined) throw bad(name, 'a string');
    return value.S;
  };
  const number = (name: string, pattern: RegExp, expected: string): string | undefined => {
    const value = item[name];
    if (value === undefined || value.NULL === true) return undefined;
    if (value.N === undefined || !pattern.test(value.N)) throw bad(name, expected);
    return value.N;
  };
  const stringSet = (name: string): string[] => {
    const value = item[name];
    if (value === undefined || value.NULL === true) return [];
    if (value.SS === undefined) throw bad(name, 'a string set');
    return [...value.SS].sort();
  };

  const leaseCounter = number('leaseCounter', WHOLE, 'a whole number');
  if (leaseCounter === undefined) throw bad('leaseCounter', 'a whole number');
  const checkpoint = string('checkpoint');
  if (checkpoint === undefined || !isKclSequence(checkpoint)) throw bad('checkpoint', `a sequence number or one of ${KCL_SENTINELS.join(', ')}`);
  const pendingCheckpoint = string('pendingCheckpoint');
  if (pendingCheckpoint !== undefined && pendingCheckpoint !== '' && !isKclSequence(pendingCheckpoint)) {
    throw bad('pendingCheckpoint', `a sequence number or one of ${KCL_SENTINELS.join(', ')}`);
  }
  const stateValue = item.pendingCheckpointState;
  // KCL's serializer has been seen writing the sub-sequence number here as a number; KCL reads only bytes.
  const pendingCheckpointState = stateValue?.B;
  if (stateValue !== undefined && stateValue.B === undefined && stateValue.N === undefined && stateValue.NULL !== true) throw bad('pendingCheckpointState', 'bytes');

  const streamName = string('streamName');
  const shardId = string('shardId');
  if ((streamName === undefined) !== (shardId === undefined)) throw bad(streamName === undefined ? 'streamName' : 'shardId', 'a string, as every multi-stream lease has both streamName and shardId');
  if (streamName !== undefined && shardId !== undefined) {
    if (shardId.includes(':')) throw bad('shardId', 'a shard id without ":"');
    if (leaseKey !== `${streamName}:${shardId}`) {
      throw new MalformedKclLeaseError(leaseKey, `a multi-stream lease key must be streamName:shardId, here ${describeValue(`${streamName}:${shardId}`)}`);
    }
  }
  return {
    leaseKey,
    leaseOwner: string('leaseOwner'),
    leaseCounter,
    checkpoint,
    checkpointSubSequenceNumber: number('checkpointSubSequenceNumber', WHOLE, 'a whole number'),
    pendingCheckpoint: pendingCheckpoint === '' ? undefined : pendingCheckpoint,
    pendingCheckpointSubSequenceNumber: number('pendingCheckpointSubSequenceNumber', WHOLE, 'a whole number'),
    pendingCheckpointState,
    ownerSwitchesSinceCheckpoint: number('ownerSwitchesSinceCheckpoint', WHOLE, 'a whole number'),
    parentShardIds: stringSet('parentShardId'),
    childShardIds: stringSet('childShardIds'),
    startingHashKey: string('startingHashKey'),
    endingHashKey: string('endingHashKey'),
    throughputKBps: number('throughputKBps', NUMBER, 'a number'),
    checkpointOwner: string('checkpointOwner'),
    entityType: string('entityType'),
    streamName,
    shardId,
  };
}

/** The item KCL's serializer writes for the lease: absent fields are absent attributes. */
export function kclItemOf(lease: KclLease): KclItem {
  const item: KclItem = { leaseKey: { S: lease.leaseKey }, leaseCounter: { N: lease.leaseCounter }, checkpoint: { S: lease.checkpoint } };
  const put = (name: string, value: AttributeValue | undefined): void => {
    if (value !== undefined) item[name] = value;
  };
  const s = (value: string | undefined): AttributeValue | undefined => (value === undefined ? undefined : { S: value });
  const n = (value: string | undefined): AttributeValue | undefined => (value === undefined ? undefined : { N: value });
  put('leaseOwner', s(lease.leaseOwner));
  put('checkpointSubSequenceNumber', n(lease.checkpointSubSequenceNumber));
  put('pendingCheckpoint', s(lease.pendingCheckpoint));
  put('pendingCheckpointSubSequenceNumber', n(lease.pendingCheckpointSubSequenceNumber));
  put('pendingCheckpointState', lease.pendingCheckpointState === undefined ? undefined : { B: lease.pendingCheckpointState });
  put('ownerSwitchesSinceCheckpoint', n(lease.ownerSwitchesSinceCheckpoint));
  put('parentShardId', lease.parentShardIds.length === 0 ? undefined : { SS: [...lease.parentShardIds] });
  put('childShardIds', lease.childShardIds.length === 0 ? undefined : { SS: [...lease.childShardIds] });
  put('startingHashKey', s(lease.startingHashKey));
  put('endingHashKey', s(lease.endingHashKey));
  put('throughputKBps', n(lease.throughputKBps));
  put('checkpointOwner', s(lease.checkpointOwner));
  put('entityType', s(lease.entityType));
  put('streamName', s(lease.streamName));
  put('shardId', s(lease.shardId));
  return item;
}

/** Whether `value` is what KCL stores as a checkpoint: digits, or a sentinel. */
export function isKclSequence(value: string): boolean {
  return DIGITS.test(value) || (KCL_SENTINELS as readonly string[]).includes(value);
}

/** A KCL checkpoint for people: `SHARD_END`, or `4955... sub 2` (a sequence number always with its sub-sequence, 0 when absent). */
export function showKclCheckpoint(sequence: string, subSequence: string | undefined): string {
  return DIGITS.test(sequence) ? `${sequence} sub ${subSequence ?? '0'}` : sequence;
}

function describeAttribute(value: AttributeValue | undefined): string {
  if (value === undefined) return 'missing';
  const [type] = Object.keys(value).filter((key) => (value as unknown as Record<string, unknown>)[key] !== undefined && key !== '$unknown');
  return type === undefined ? 'empty' : `of type ${type}`;
}
