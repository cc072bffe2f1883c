import type { LeaseRecord } from '@leasehold/core';
import { describe, expect, it } from 'vitest';
import { parseKclItem, type KclLease } from '../src/kcl/lease.js';
import { exportPlanOf, importPlanOf, KCL_FIELDS, WHOLE_RECORD_SUB_SEQUENCE } from '../src/kcl/mapping.js';
import { kclItem } from './kcl-support.js';

const SEQ = '49655802218836443958227395874624049733543284513093844994';

function kcl(leaseKey: string, checkpoint: string, sub?: number, parents: string[] = []): KclLease {
  return parseKclItem(kclItem({ leaseKey, checkpoint, checkpointSubSequenceNumber: sub, parentShardId: parents.length > 0 ? parents : undefined }));
}

function lease(leaseKey: string, checkpoint: string | null, parentKeys: string[] = [], metadata: Record<string, string> = {}): LeaseRecord {
  return { group: 'g', leaseKey, version: 1, format: 1, owner: null, incarnation: null, epoch: 1, checkpoint, parentKeys, metadata };
}

describe('the mapping between KCL checkpoints and Leasehold checkpoints', () => {
  it.each([
    ['TRIM_HORIZON', undefined, 'TRIM_HORIZON'],
    ['LATEST', 0, 'LATEST'],
    ['SHARD_END', 0, 'SHARD_END'],
    [SEQ, 0, `${SEQ}:0`],
    [SEQ, undefined, `${SEQ}:0`],
    [SEQ, 7, `${SEQ}:7`],
    [SEQ, Number(WHOLE_RECORD_SUB_SEQUENCE), SEQ],
  ])('KCL %s sub %s is imported as %s: the user records up to it are done', (checkpoint, sub, expected) => {
    const item = kclItem({ leaseKey: 'shardId-0', checkpoint, checkpointSubSequenceNumber: sub });
    // A Java long beyond 2^53 is written as DynamoDB gives it, digits.
    if (sub !== undefined && sub > Number.MAX_SAFE_INTEGER) item.checkpointSubSequenceNumber = { N: WHOLE_RECORD_SUB_SEQUENCE };
    expect(importPlanOf([parseKclItem(item)], { streams: [] }).rows[0]?.checkpoint).toBe(expected);
  });

  it.each([
    [`${SEQ}:4`, SEQ, '4'],
    [SEQ, SEQ, WHOLE_RECORD_SUB_SEQUENCE],
    ['TRIM_HORIZON', 'TRIM_HORIZON', '0'],
    ['SHARD_END', 'SHARD_END', '0'],
    ['AT_TIMESTAMP:1714557600000', 'AT_TIMESTAMP', '0'],
  ])('Leasehold %s is exported as KCL %s sub %s', (checkpoint, sequence, sub) => {
    const [row] = exportPlanOf([lease('shardId-0', checkpoint)], () => undefined).rows;
    expect([row?.kcl.checkpoint, row?.kcl.checkpointSubSequenceNumber]).toEqual([sequence, sub]);
  });

  it('a lease never checkpointed is exported at TRIM_HORIZON when it has parents, and at the group\'s birth position otherwise', () => {
    const { rows } = exportPlanOf([lease('shardId-1', null), lease('shardId-2', null, ['shardId-1'])], () => 'LATEST');
    expect(rows.map((row) => row.kcl.checkpoint)).toEqual(['LATEST', 'TRIM_HORIZON']);
  });

  it('a checkpoint that moved since the import drops the prepared checkpoint the import kept, one that did not gives it back', () => {
    const metadata = { [KCL_FIELDS.checkpoint]: SEQ, [KCL_FIELDS.checkpointSubSequenceNumber]: '2', [KCL_FIELDS.pendingCheckpoint]: '5', [KCL_FIELDS.ownerSwitchesSinceCheckpoint]: '3', [KCL_FIELDS.importedCheckpoint]: `${SEQ}:2` };
    const [still] = exportPlanOf([lease('shardId-0', `${SEQ}:2`, [], metadata)], () => undefined).rows;
    expect(still?.kcl).toMatchObject({ checkpoint: SEQ, checkpointSubSequenceNumber: '2', pendingCheckpoint: '5', ownerSwitchesSinceCheckpoint: '3' });
    const [moved] = exportPlanOf([lease('shardId-0', `${SEQ}9`, [], metadata)], () => undefined).rows;
    expect(moved?.kcl).toMatchObject({ checkpoint: `${SEQ}9`, checkpointSubSequenceNumber: WHOLE_RECORD_SUB_SEQUENCE, ownerSwitchesSinceCheckpoint: '0' });
    expect(moved?.kcl.pendingCheckpoint).toBeUndefined();
  });

  it('parents come before their children, whatever the order of the table', () => {
    const rows = importPlanOf([kcl('shardId-4', 'TRIM_HORIZON', 0, ['shardId-1', 'shardId-3']), kcl('shardId-3', SEQ, 0, ['shardId-0']), kcl('shardId-1', SEQ), kcl('shardId-0', 'SHARD_END')], { streams: [] }).rows;
    expect(rows.map((row) => row.leaseKey)).toEqual(['shardId-0', 'shardId-1', 'shardId-3', 'shardId-4']);
  });

  it('a table that mixes multi-stream and single-stream leases, and a group that mixes its keys, are refused by name', () => {
    const multi = parseKclItem(kclItem({ leaseKey: '1:orders:2:shardId-0', streamName: '1:orders:2', shardId: 'shardId-0', checkpoint: 'LATEST' }));
    expect(() => importPlanOf([multi, kcl('shardId-0', 'LATEST')], { streams: [] })).toThrow('the KCL table mixes multi-stream leases ("1:orders:2:shardId-0") with single-stream ones ("shardId-0")');
    expect(() => exportPlanOf([lease('1:orders:2:shardId-0', 'LATEST'), lease('shardId-0', 'LATEST')], () => undefined)).toThrow('the group mixes multi-stream lease keys ("1:orders:2:shardId-0") with shard ids ("shardId-0")');
    expect(() => exportPlanOf([lease('shardId-0', 'offset-12')], () => undefined)).toThrow('lease "shardId-0" has checkpoint "offset-12", not a Kinesis position');
  });

  it('a multi-stream lease key that is not its streamName and shardId is refused by its lease key', () => {
    expect(() => parseKclItem(kclItem({ leaseKey: '1:orders:2:shardId-9', streamName: '1:orders:2', shardId: 'shardId-0', checkpoint: 'LATEST' }))).toThrow(
      'KCL lease "1:orders:2:shardId-9": a multi-stream lease key must be streamName:shardId, here "1:orders:2:shardId-0"',
    );
  });
});
