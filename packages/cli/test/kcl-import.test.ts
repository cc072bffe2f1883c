import type { AttributeValue } from '@aws-sdk/client-dynamodb';
import { describe, expect, it } from 'vitest';
import { freshName, heartbeater, leasehold, seed, useDynamo } from './support.js';
import { kclArgs, kclRenewer, kclTable, SEQ, singleStreamLeases } from './kcl-support.js';

const { env: dynamoEnv, backend } = useDynamo();

describe('leasehold import kcl', () => {
  it('without --apply prints one row per shard (KCL key, checkpoint with sub-sequence, Leasehold key and checkpoint, owner) and writes nothing', async () => {
    const table = await kclTable(dynamoEnv().client, singleStreamLeases());
    const target = await backend();
    const group = freshName('g');
    const result = await leasehold('import', 'kcl', ...kclArgs(dynamoEnv().dynalite.endpoint, table), '--storage', target.url, '--group', group);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    const lines = result.stdout.split('\n');
    expect(lines[1]).toMatch(/^KCL LEASE KEY\s+KCL CHECKPOINT\s+LEASEHOLD LEASE KEY\s+LEASEHOLD CHECKPOINT\s+KCL OWNER\s+PARENTS$/);
    // Parents first: shard 0, then 1, 2, 3 (children of 0 or roots), then 4 (child of 1 and 3).
    expect(lines.slice(2, 7).map((line) => line.split(/\s{2,}/))).toEqual([
      ['shardId-000000000000', 'SHARD_END', 'shardId-000000000000', 'SHARD_END', 'kcl-worker-1', '-'],
      ['shardId-000000000001', `${SEQ.s1} sub 0`, 'shardId-000000000001', `${SEQ.s1}:0`, 'kcl-worker-2', '-'],
      ['shardId-000000000002', `${SEQ.s2} sub 1`, 'shardId-000000000002', `${SEQ.s2}:1`, 'kcl-worker-1', 'shardId-000000000000'],
      ['shardId-000000000003', `${SEQ.s3} sub 0`, 'shardId-000000000003', `${SEQ.s3}:0`, 'kcl-worker-2', 'shardId-000000000000'],
      ['shardId-000000000004', 'TRIM_HORIZON', 'shardId-000000000004', 'TRIM_HORIZON', '-', 'shardId-000000000001,shardId-000000000003'],
    ]);
    expect(result.stdout).toContain(`note: shardId-000000000002: prepared checkpoint ${SEQ.s2pending} sub 0 not committed`);
    expect(result.stdout).toContain('dry run: nothing was written');
    expect((await target.storage.listLeases(group)).leases).toEqual([]);

    const json = await leasehold('import', 'kcl', ...kclArgs(dynamoEnv().dynalite.endpoint, table), '--storage', target.url, '--group', group, '--json');
    expect(json.code).toBe(0);
    const plan = JSON.parse(json.stdout) as { multiStream: boolean; leases: { kclLeaseKey: string; kclCheckpoint: string; leaseKey: string; checkpoint: string; kclOwner: string | null; parentKeys: string[] }[] };
    expect(plan.multiStream).toBe(false);
    expect(plan.leases[2]).toMatchObject({ kclLeaseKey: 'shardId-000000000002', kclCheckpoint: `${SEQ.s2} sub 1`, leaseKey: 'shardId-000000000002', checkpoint: `${SEQ.s2}:1`, kclOwner: 'kcl-worker-1', parentKeys: ['shardId-000000000000'] });
  });

  it('with --apply writes free leases with the checkpoints, parents and a finished lease for SHARD_END', async () => {
    const table = await kclTable(dynamoEnv().client, singleStreamLeases());
    const target = await backend();
    const group = freshName('g');
    const result = await leasehold('import', 'kcl', ...kclArgs(dynamoEnv().dynalite.endpoint, table), '--storage', target.url, '--group', group, '--apply', '--observe-ms', '300');
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain(`imported 5 KCL leases of table "${table}" into group "${group}"`);
    const leases = new Map((await target.storage.listLeases(group)).leases.map((lease) => [lease.leaseKey, lease]));
    expect([...leases.keys()].sort()).toEqual(['shardId-000000000000', 'shardId-000000000001', 'shardId-000000000002', 'shardId-000000000003', 'shardId-000000000004']);
    expect(leases.get('shardId-000000000000')).toMatchObject({ checkpoint: 'SHARD_END', owner: null, parentKeys: [] });
    expect(leases.get('shardId-000000000002')).toMatchObject({ checkpoint: `${SEQ.s2}:1`, owner: null, incarnation: null, parentKeys: ['shardId-000000000000'] });
    expect(leases.get('shardId-000000000004')?.parentKeys).toEqual(['shardId-000000000001', 'shardId-000000000003']);
  });

  it('--apply refuses while a KCL worker keeps renewing its lease, naming it, and writes nothing', async () => {
    const table = await kclTable(dynamoEnv().client, singleStreamLeases());
    const target = await backend();
    const group = freshName('g');
    const renewer = kclRenewer(dynamoEnv().client, table, 'shardId-000000000001');
    try {
      const result = await leasehold('import', 'kcl', ...kclArgs(dynamoEnv().dynalite.endpoint, table), '--storage', target.url, '--group', group, '--apply', '--observe-ms', '2000');
      expect(result.code).toBe(1);
      expect(result.stderr).toMatch(/leasehold: \[cli\] KCL workers still run on table "kcl[0-9a-f]+": lease "shardId-000000000001" of "kcl-worker-2" moved while watched \(leaseCounter \d+ -> \d+\); stop every KCL worker/);
    } finally {
      await renewer.stop();
    }
    expect((await target.storage.listLeases(group)).leases).toEqual([]);
  });

  it('--apply refuses a group with a live member, and a group that already has one of the leases', async () => {
    const table = await kclTable(dynamoEnv().client, singleStreamLeases());
    const target = await backend();
    const live = freshName('g');
    const worker = heartbeater(target.storage, live, 'worker-a');
    try {
      const result = await leasehold('import', 'kcl', ...kclArgs(dynamoEnv().dynalite.endpoint, table), '--storage', target.url, '--group', live, '--apply', '--observe-ms', '200');
      expect(result.code).toBe(1);
      expect(result.stderr).toContain(`leasehold: [cli] group "${live}" is live: worker "worker-a" (incarnation "worker-a-inc") sent a heartbeat while watched; stop the group's workers first`);
    } finally {
      await worker.stop();
    }
    expect((await target.storage.listLeases(live)).leases).toEqual([]);

    const taken = freshName('g');
    await seed(target.storage, [{ group: taken, leaseKey: 'shardId-000000000003', checkpoint: '42' }]);
    const result = await leasehold('import', 'kcl', ...kclArgs(dynamoEnv().dynalite.endpoint, table), '--storage', target.url, '--group', taken, '--apply', '--observe-ms', '200');
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('already has 1 of the leases to import ("shardId-000000000003"), so nothing was written');
    expect((await target.storage.listLeases(taken)).leases.map((lease) => lease.leaseKey)).toEqual(['shardId-000000000003']);
  });

  it('a malformed KCL lease is refused by its lease key and the bad attribute, and nothing is planned', async () => {
    const table = await kclTable(dynamoEnv().client, [
      ...singleStreamLeases(),
      { leaseKey: 'shardId-000000000009', leaseCounter: 1, checkpoint: 'somewhere' },
      { leaseKey: { S: 'shardId-000000000010' }, leaseCounter: { N: '1' }, checkpoint: { S: 'TRIM_HORIZON' }, parentShardId: { S: 'shardId-000000000004' } } satisfies Record<string, AttributeValue>,
    ]);
    const target = await backend();
    const result = await leasehold('import', 'kcl', ...kclArgs(dynamoEnv().dynalite.endpoint, table), '--storage', target.url, '--group', freshName('g'));
    expect(result.code).toBe(1);
    expect(result.stdout).toBe('');
    expect(result.stderr).toContain('leasehold: [cli] 2 KCL leases cannot be read, so nothing was planned');
    expect(result.stderr).toContain('KCL lease "shardId-000000000009": checkpoint is of type S, expected a sequence number or one of TRIM_HORIZON, LATEST, AT_TIMESTAMP, SHARD_END');
    expect(result.stderr).toContain('KCL lease "shardId-000000000010": parentShardId is of type S, expected a string set');
  });

  it('a lease at AT_TIMESTAMP needs the application\'s timestamp, and gets it as its checkpoint', async () => {
    const table = await kclTable(dynamoEnv().client, [{ leaseKey: 'shardId-000000000000', checkpoint: 'AT_TIMESTAMP', checkpointSubSequenceNumber: 0 }]);
    const target = await backend();
    const args = ['import', 'kcl', ...kclArgs(dynamoEnv().dynalite.endpoint, table), '--storage', target.url, '--group', freshName('g'), '--json'];
    const missing = await leasehold(...args);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('KCL lease "shardId-000000000000" is at AT_TIMESTAMP, whose time KCL keeps in the application\'s configuration, not in the lease: pass it with --kcl-initial-timestamp');
    const bad = await leasehold(...args, '--kcl-initial-timestamp', 'yesterday');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--kcl-initial-timestamp must be an ISO time or milliseconds since the epoch, got "yesterday"');
    const given = await leasehold(...args, '--kcl-initial-timestamp', '2024-05-01T10:00:00Z');
    expect(given.code, given.stderr).toBe(0);
    expect((JSON.parse(given.stdout) as { leases: { checkpoint: string }[] }).leases[0]?.checkpoint).toBe(`AT_TIMESTAMP:${Date.parse('2024-05-01T10:00:00Z')}`);
  });

  it('a table that does not exist, and --stream on a one-stream table, are refused by name', async () => {
    const target = await backend();
    const absent = await leasehold('import', 'kcl', ...kclArgs(dynamoEnv().dynalite.endpoint, 'kcl-absent'), '--storage', target.url, '--group', 'g');
    expect(absent.code).toBe(1);
    expect(absent.stderr).toContain('leasehold: [cli] KCL table "kcl-absent" does not exist (region us-east-1, endpoint');
    const table = await kclTable(dynamoEnv().client, singleStreamLeases());
    const stream = await leasehold('import', 'kcl', ...kclArgs(dynamoEnv().dynalite.endpoint, table), '--storage', target.url, '--group', 'g', '--stream', 'orders');
    expect(stream.code).toBe(2);
    expect(stream.stderr).toContain('--stream "orders" selects streams of a multi-stream KCL table');
  });
});
