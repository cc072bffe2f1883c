import type { AttributeValue } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dynamo, dynamoBackend, freshName, heartbeater, leasehold, seed, type TestBackend } from './support.js';
import { kclArgs, kclRenewer, kclTable, scanTable, type KclLeaseSpec } from './kcl-support.js';

let env: Awaited<ReturnType<typeof dynamo>>;

beforeAll(async () => {
  env = await dynamo();
});

afterAll(async () => {
  env?.client.destroy();
  await env?.dynalite.close();
});

const SEQ = {
  s1: '49655802218836443958227395874624049733543284513093844994',
  s2: '49655802218836443958227395874624049733543284513093845010',
  s2pending: '49655802218836443958227395874624049733543284513093845026',
  s3: '49655802218836443958227395874624049733543284513093845042',
};
const HALF = '170141183460469231731687303715884105727';

/**
 * One stream's KCL table (KCL 2.x layout, one lease in KCL 3.x's): shard 0 split into 2 and 3, then 3
 * merged with 1 into 4. Shard 0 is finished, 2 is checkpointed inside an aggregated record with a
 * prepared checkpoint after it, 4 was never read.
 */
function singleStreamLeases(): KclLeaseSpec[] {
  return [
    { leaseKey: 'shardId-000000000000', leaseOwner: 'kcl-worker-1', leaseCounter: 4211, checkpoint: 'SHARD_END', checkpointSubSequenceNumber: 0, ownerSwitchesSinceCheckpoint: 0, childShardIds: ['shardId-000000000002', 'shardId-000000000003'], startingHashKey: '0', endingHashKey: HALF },
    { leaseKey: 'shardId-000000000001', leaseOwner: 'kcl-worker-2', leaseCounter: 3907, checkpoint: SEQ.s1, checkpointSubSequenceNumber: 0, ownerSwitchesSinceCheckpoint: 1 },
    { leaseKey: 'shardId-000000000002', leaseOwner: 'kcl-worker-1', leaseCounter: 12, checkpoint: SEQ.s2, checkpointSubSequenceNumber: 1, pendingCheckpoint: SEQ.s2pending, pendingCheckpointSubSequenceNumber: 0, pendingCheckpointState: new Uint8Array([1, 2, 3]), ownerSwitchesSinceCheckpoint: 0, parentShardId: ['shardId-000000000000'] },
    { leaseKey: 'shardId-000000000003', leaseOwner: 'kcl-worker-2', leaseCounter: 9, checkpoint: SEQ.s3, checkpointSubSequenceNumber: 0, ownerSwitchesSinceCheckpoint: 0, parentShardId: ['shardId-000000000000'], throughputKBps: 12.5, entityType: 'LEASE' },
    { leaseKey: 'shardId-000000000004', leaseCounter: 1, checkpoint: 'TRIM_HORIZON', checkpointSubSequenceNumber: 0, ownerSwitchesSinceCheckpoint: 0, parentShardId: ['shardId-000000000001', 'shardId-000000000003'] },
  ];
}

async function backend(): Promise<TestBackend> {
  return dynamoBackend(env);
}

describe('leasehold import kcl', () => {
  it('without --apply prints one row per shard (KCL key, checkpoint with sub-sequence, Leasehold key and checkpoint, owner) and writes nothing', async () => {
    const table = await kclTable(env.client, singleStreamLeases());
    const target = await backend();
    const group = freshName('g');
    const result = await leasehold('import', 'kcl', ...kclArgs(env.dynalite.endpoint, table), '--storage', target.url, '--group', group);
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

    const json = await leasehold('import', 'kcl', ...kclArgs(env.dynalite.endpoint, table), '--storage', target.url, '--group', group, '--json');
    expect(json.code).toBe(0);
    const plan = JSON.parse(json.stdout) as { multiStream: boolean; leases: { kclLeaseKey: string; kclCheckpoint: string; leaseKey: string; checkpoint: string; kclOwner: string | null; parentKeys: string[] }[] };
    expect(plan.multiStream).toBe(false);
    expect(plan.leases[2]).toMatchObject({ kclLeaseKey: 'shardId-000000000002', kclCheckpoint: `${SEQ.s2} sub 1`, leaseKey: 'shardId-000000000002', checkpoint: `${SEQ.s2}:1`, kclOwner: 'kcl-worker-1', parentKeys: ['shardId-000000000000'] });
  });

  it('with --apply writes free leases with the checkpoints, parents and a finished lease for SHARD_END', async () => {
    const table = await kclTable(env.client, singleStreamLeases());
    const target = await backend();
    const group = freshName('g');
    const result = await leasehold('import', 'kcl', ...kclArgs(env.dynalite.endpoint, table), '--storage', target.url, '--group', group, '--apply', '--observe-ms', '300');
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain(`imported 5 KCL leases of table "${table}" into group "${group}"`);
    const leases = new Map((await target.storage.listLeases(group)).leases.map((lease) => [lease.leaseKey, lease]));
    expect([...leases.keys()].sort()).toEqual(['shardId-000000000000', 'shardId-000000000001', 'shardId-000000000002', 'shardId-000000000003', 'shardId-000000000004']);
    expect(leases.get('shardId-000000000000')).toMatchObject({ checkpoint: 'SHARD_END', owner: null, parentKeys: [] });
    expect(leases.get('shardId-000000000002')).toMatchObject({ checkpoint: `${SEQ.s2}:1`, owner: null, incarnation: null, parentKeys: ['shardId-000000000000'] });
    expect(leases.get('shardId-000000000004')?.parentKeys).toEqual(['shardId-000000000001', 'shardId-000000000003']);
  });

  it('--apply refuses while a KCL worker keeps renewing its lease, naming it, and writes nothing', async () => {
    const table = await kclTable(env.client, singleStreamLeases());
    const target = await backend();
    const group = freshName('g');
    const renewer = kclRenewer(env.client, table, 'shardId-000000000001');
    try {
      const result = await leasehold('import', 'kcl', ...kclArgs(env.dynalite.endpoint, table), '--storage', target.url, '--group', group, '--apply', '--observe-ms', '2000');
      expect(result.code).toBe(1);
      expect(result.stderr).toMatch(/leasehold: \[cli\] KCL workers still run on table "kcl[0-9a-f]+": lease "shardId-000000000001" of "kcl-worker-2" moved while watched \(leaseCounter \d+ -> \d+\); stop every KCL worker/);
    } finally {
      await renewer.stop();
    }
    expect((await target.storage.listLeases(group)).leases).toEqual([]);
  });

  it('--apply refuses a group with a live member, and a group that already has one of the leases', async () => {
    const table = await kclTable(env.client, singleStreamLeases());
    const target = await backend();
    const live = freshName('g');
    const worker = heartbeater(target.storage, live, 'worker-a');
    try {
      const result = await leasehold('import', 'kcl', ...kclArgs(env.dynalite.endpoint, table), '--storage', target.url, '--group', live, '--apply', '--observe-ms', '200');
      expect(result.code).toBe(1);
      expect(result.stderr).toContain(`leasehold: [cli] group "${live}" is live: worker "worker-a" (incarnation "worker-a-inc") sent a heartbeat while watched; stop the group's workers first`);
    } finally {
      await worker.stop();
    }
    expect((await target.storage.listLeases(live)).leases).toEqual([]);

    const taken = freshName('g');
    await seed(target.storage, [{ group: taken, leaseKey: 'shardId-000000000003', checkpoint: '42' }]);
    const result = await leasehold('import', 'kcl', ...kclArgs(env.dynalite.endpoint, table), '--storage', target.url, '--group', taken, '--apply', '--observe-ms', '200');
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('already has 1 of the leases to import ("shardId-000000000003"), so nothing was written');
    expect((await target.storage.listLeases(taken)).leases.map((lease) => lease.leaseKey)).toEqual(['shardId-000000000003']);
  });

  it('a malformed KCL lease is refused by its lease key and the bad attribute, and nothing is planned', async () => {
    const table = await kclTable(env.client, [
      ...singleStreamLeases(),
      { leaseKey: 'shardId-000000000009', leaseCounter: 1, checkpoint: 'somewhere' },
      { leaseKey: { S: 'shardId-000000000010' }, leaseCounter: { N: '1' }, checkpoint: { S: 'TRIM_HORIZON' }, parentShardId: { S: 'shardId-000000000004' } } satisfies Record<string, AttributeValue>,
    ]);
    const target = await backend();
    const result = await leasehold('import', 'kcl', ...kclArgs(env.dynalite.endpoint, table), '--storage', target.url, '--group', freshName('g'));
    expect(result.code).toBe(1);
    expect(result.stdout).toBe('');
    expect(result.stderr).toContain('leasehold: [cli] 2 KCL leases cannot be read, so nothing was planned');
    expect(result.stderr).toContain('KCL lease "shardId-000000000009": checkpoint is of type S, expected a sequence number or one of TRIM_HORIZON, LATEST, AT_TIMESTAMP, SHARD_END');
    expect(result.stderr).toContain('KCL lease "shardId-000000000010": parentShardId is of type S, expected a string set');
  });

  it('a lease at AT_TIMESTAMP needs the application\'s timestamp, and gets it as its checkpoint', async () => {
    const table = await kclTable(env.client, [{ leaseKey: 'shardId-000000000000', checkpoint: 'AT_TIMESTAMP', checkpointSubSequenceNumber: 0 }]);
    const target = await backend();
    const args = ['import', 'kcl', ...kclArgs(env.dynalite.endpoint, table), '--storage', target.url, '--group', freshName('g'), '--json'];
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
    const absent = await leasehold('import', 'kcl', ...kclArgs(env.dynalite.endpoint, 'kcl-absent'), '--storage', target.url, '--group', 'g');
    expect(absent.code).toBe(1);
    expect(absent.stderr).toContain('leasehold: [cli] KCL table "kcl-absent" does not exist (region us-east-1, endpoint');
    const table = await kclTable(env.client, singleStreamLeases());
    const stream = await leasehold('import', 'kcl', ...kclArgs(env.dynalite.endpoint, table), '--storage', target.url, '--group', 'g', '--stream', 'orders');
    expect(stream.code).toBe(2);
    expect(stream.stderr).toContain('--stream "orders" selects streams of a multi-stream KCL table');
  });
});

const ACCOUNT = '123456789012';
const ORDERS = `${ACCOUNT}:orders:1714557600`;
const PAYMENTS = `${ACCOUNT}:payments:1714557700`;

/** A multi-stream KCL 3.x table: two streams, a split in one, every attribute KCL writes. */
function multiStreamLeases(): KclLeaseSpec[] {
  const lease = (streamName: string, shardId: string, rest: Omit<KclLeaseSpec, 'leaseKey' | 'streamName' | 'shardId'>): KclLeaseSpec => ({
    leaseKey: `${streamName}:${shardId}`,
    streamName,
    shardId,
    entityType: 'LEASE',
    ...rest,
  });
  return [
    lease(ORDERS, 'shardId-000000000000', { leaseOwner: 'kcl-a', leaseCounter: 77, checkpoint: 'SHARD_END', checkpointSubSequenceNumber: 0, ownerSwitchesSinceCheckpoint: 0, childShardIds: ['shardId-000000000001', 'shardId-000000000002'], startingHashKey: '0', endingHashKey: '340282366920938463463374607431768211455', throughputKBps: 0 }),
    lease(ORDERS, 'shardId-000000000001', { leaseOwner: 'kcl-a', leaseCounter: 31, checkpoint: SEQ.s1, checkpointSubSequenceNumber: 3, pendingCheckpoint: SEQ.s2, pendingCheckpointSubSequenceNumber: 0, pendingCheckpointState: new Uint8Array([7, 7]), ownerSwitchesSinceCheckpoint: 2, parentShardId: ['shardId-000000000000'], startingHashKey: '0', endingHashKey: HALF, throughputKBps: 3.25, checkpointOwner: 'kcl-b' }),
    lease(ORDERS, 'shardId-000000000002', { leaseCounter: 2, checkpoint: 'TRIM_HORIZON', checkpointSubSequenceNumber: 0, ownerSwitchesSinceCheckpoint: 0, parentShardId: ['shardId-000000000000'], startingHashKey: '170141183460469231731687303715884105728', endingHashKey: '340282366920938463463374607431768211455' }),
    lease(PAYMENTS, 'shardId-000000000000', { leaseOwner: 'kcl-b', leaseCounter: 5120, checkpoint: SEQ.s3, checkpointSubSequenceNumber: 0, ownerSwitchesSinceCheckpoint: 0, startingHashKey: '0', endingHashKey: '340282366920938463463374607431768211455', throughputKBps: 101.5 }),
    lease(PAYMENTS, 'shardId-000000000001', { leaseCounter: 1, checkpoint: 'LATEST', checkpointSubSequenceNumber: 0, ownerSwitchesSinceCheckpoint: 0 }),
  ];
}

describe('leasehold import kcl of a multi-stream table, and export kcl', () => {
  it('a multi-stream table becomes a multi-stream group, keys and parents named by stream, and --stream selects streams', async () => {
    const table = await kclTable(env.client, multiStreamLeases());
    const target = await backend();
    const result = await leasehold('import', 'kcl', ...kclArgs(env.dynalite.endpoint, table), '--storage', target.url, '--group', freshName('g'), '--json', '--stream', 'orders');
    expect(result.code, result.stderr).toBe(0);
    const plan = JSON.parse(result.stdout) as { multiStream: boolean; leases: { leaseKey: string; checkpoint: string; parentKeys: string[]; notes: string[] }[] };
    expect(plan.multiStream).toBe(true);
    expect(plan.leases.map(({ leaseKey, checkpoint, parentKeys }) => [leaseKey, checkpoint, parentKeys])).toEqual([
      [`${ORDERS}:shardId-000000000000`, 'SHARD_END', []],
      [`${ORDERS}:shardId-000000000001`, `${SEQ.s1}:3`, [`${ORDERS}:shardId-000000000000`]],
      [`${ORDERS}:shardId-000000000002`, 'TRIM_HORIZON', [`${ORDERS}:shardId-000000000000`]],
    ]);
    expect(plan.leases[1]?.notes).toEqual([`prepared checkpoint ${SEQ.s2} sub 0 not committed: reading resumes after the committed one, as KCL would`, 'a KCL handoff from "kcl-b" was under way']);
    const unknown = await leasehold('import', 'kcl', ...kclArgs(env.dynalite.endpoint, table), '--storage', target.url, '--group', 'g', '--stream', 'refunds');
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain(`--stream "refunds" names no stream of the KCL table; its streams are "${ORDERS}", "${PAYMENTS}"`);
  });

  it('import then export gives back the KCL table: every attribute KCL reads, the leases free', async () => {
    for (const leases of [multiStreamLeases(), singleStreamLeases()]) {
      const source = await kclTable(env.client, leases);
      const target = await backend();
      const group = freshName('g');
      const imported = await leasehold('import', 'kcl', ...kclArgs(env.dynalite.endpoint, source), '--storage', target.url, '--group', group, '--apply', '--observe-ms', '200');
      expect(imported.code, imported.stderr).toBe(0);

      const rollback = freshName('kcl');
      const dry = await leasehold('export', 'kcl', '--storage', target.url, '--group', group, ...kclArgs(env.dynalite.endpoint, rollback));
      expect(dry.code, dry.stderr).toBe(0);
      expect(dry.stdout).toContain(`export of group ${group} in`);
      expect(dry.stdout).toContain('(to be created)');
      expect(dry.stdout).toContain('dry run: nothing was written');
      const exported = await leasehold('export', 'kcl', '--storage', target.url, '--group', group, ...kclArgs(env.dynalite.endpoint, rollback), '--apply', '--observe-ms', '200');
      expect(exported.code, exported.stderr).toBe(0);
      expect(exported.stdout).toContain(`exported group "${group}" to KCL table "${rollback}": ${leases.length} leases written, 0 replaced, 0 already there, 0 deleted (table created)`);

      // The leases go back free (no owner, no handoff under way), so that KCL workers take them at once.
      const expected = await scanTable(env.client, source);
      for (const item of expected.values()) {
        delete item.leaseOwner;
        delete item.checkpointOwner;
      }
      const actual = await scanTable(env.client, rollback);
      expect(normalise(actual)).toEqual(normalise(expected));

      // A second export finds every lease already there.
      const again = await leasehold('export', 'kcl', '--storage', target.url, '--group', group, ...kclArgs(env.dynalite.endpoint, rollback), '--apply', '--observe-ms', '200');
      expect(again.stdout).toContain(`0 leases written, 0 replaced, ${leases.length} already there, 0 deleted`);
    }
  });

  it('export writes a moved checkpoint with its sub-sequence, a whole record as every sub-record of it, and refuses a differing table unless --replace', async () => {
    const target = await backend();
    const group = freshName('g');
    await seed(target.storage, [
      { group, leaseKey: 'shardId-000000000000', checkpoint: `${SEQ.s1}:4` },
      { group, leaseKey: 'shardId-000000000001', checkpoint: SEQ.s3 },
      { group, leaseKey: 'shardId-000000000002', checkpoint: null, parentKeys: ['shardId-000000000000'] },
    ]);
    const table = await kclTable(env.client, [{ leaseKey: 'shardId-000000000000', leaseCounter: 3, checkpoint: 'TRIM_HORIZON' }, { leaseKey: 'shardId-000000000007', checkpoint: 'SHARD_END' }]);
    const dry = await leasehold('export', 'kcl', '--storage', target.url, '--group', group, ...kclArgs(env.dynalite.endpoint, table));
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout.split('\n').slice(2, 5).map((line) => line.split(/\s{2,}/))).toEqual([
      ['shardId-000000000000', `${SEQ.s1}:4`, 'shardId-000000000000', `${SEQ.s1} sub 4`, 'differs'],
      ['shardId-000000000001', SEQ.s3, 'shardId-000000000001', `${SEQ.s3} sub 9223372036854775807`, 'write'],
      ['shardId-000000000002', '(none)', 'shardId-000000000002', 'TRIM_HORIZON', 'write'],
    ]);
    expect(dry.stdout).toContain('--apply would refuse: 2 leases of the table differ');
    const refused = await leasehold('export', 'kcl', '--storage', target.url, '--group', group, ...kclArgs(env.dynalite.endpoint, table), '--apply', '--observe-ms', '200');
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(`KCL table "${table}" holds 2 leases that differ from group "${group}"'s (first "shardId-000000000000"); pass --replace`);
    const replaced = await leasehold('export', 'kcl', '--storage', target.url, '--group', group, ...kclArgs(env.dynalite.endpoint, table), '--apply', '--replace', '--observe-ms', '200');
    expect(replaced.code, replaced.stderr).toBe(0);
    const items = await scanTable(env.client, table);
    expect([...items.keys()].sort()).toEqual(['shardId-000000000000', 'shardId-000000000001', 'shardId-000000000002']);
    expect(items.get('shardId-000000000001')).toMatchObject({ checkpoint: { S: SEQ.s3 }, checkpointSubSequenceNumber: { N: '9223372036854775807' } });
    expect(items.get('shardId-000000000002')).toMatchObject({ checkpoint: { S: 'TRIM_HORIZON' }, parentShardId: { SS: ['shardId-000000000000'] } });

    // And back: the whole record comes back whole.
    const again = await leasehold('import', 'kcl', ...kclArgs(env.dynalite.endpoint, table), '--storage', target.url, '--group', freshName('g'), '--json');
    expect((JSON.parse(again.stdout) as { leases: { leaseKey: string; checkpoint: string }[] }).leases.find((lease) => lease.leaseKey === 'shardId-000000000001')?.checkpoint).toBe(SEQ.s3);
  });

  it('export --apply refuses while the group has a live member', async () => {
    const target = await backend();
    const group = freshName('g');
    await seed(target.storage, [{ group, leaseKey: 'shardId-000000000000', checkpoint: SEQ.s1 }]);
    const worker = heartbeater(target.storage, group, 'worker-a');
    const table = freshName('kcl');
    try {
      const result = await leasehold('export', 'kcl', '--storage', target.url, '--group', group, ...kclArgs(env.dynalite.endpoint, table), '--apply', '--observe-ms', '200');
      expect(result.code).toBe(1);
      expect(result.stderr).toContain(`group "${group}" is live: worker "worker-a"`);
    } finally {
      await worker.stop();
    }
    expect(await scanTable(env.client, table).catch((error: Error) => error.name)).toBe('ResourceNotFoundException');
  });
});

/** Items as plain values with sets sorted, so that two scans compare as values. */
function normalise(items: Map<string, Record<string, AttributeValue>>): Record<string, unknown> {
  return Object.fromEntries(
    [...items].map(([key, item]) => [
      key,
      Object.fromEntries(
        Object.entries(item)
          .sort(([a], [b]) => (a < b ? -1 : 1))
          .map(([name, value]) => [name, value.SS ? { SS: [...value.SS].sort() } : value.B ? { B: Buffer.from(value.B).toString('base64') } : value]),
      ),
    ]),
  );
}
