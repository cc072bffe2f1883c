import { describe, expect, it } from 'vitest';
import { freshName, heartbeater, leasehold, seed, useDynamo } from './support.js';
import { kclArgs, kclTable, multiStreamLeases, normalise, ORDERS, PAYMENTS, scanTable, SEQ, singleStreamLeases } from './kcl-support.js';

const { env: dynamoEnv, backend } = useDynamo();

describe('leasehold import kcl of a multi-stream table, and export kcl', () => {
  it('a multi-stream table becomes a multi-stream group, keys and parents named by stream, and --stream selects streams', async () => {
    const table = await kclTable(dynamoEnv().client, multiStreamLeases());
    const target = await backend();
    const result = await leasehold('import', 'kcl', ...kclArgs(dynamoEnv().dynalite.endpoint, table), '--storage', target.url, '--group', freshName('g'), '--json', '--stream', 'orders');
    expect(result.code, result.stderr).toBe(0);
    const plan = JSON.parse(result.stdout) as { multiStream: boolean; leases: { leaseKey: string; checkpoint: string; parentKeys: string[]; notes: string[] }[] };
    expect(plan.multiStream).toBe(true);
    expect(plan.leases.map(({ leaseKey, checkpoint, parentKeys }) => [leaseKey, checkpoint, parentKeys])).toEqual([
      [`${ORDERS}:shardId-000000000000`, 'SHARD_END', []],
      [`${ORDERS}:shardId-000000000001`, `${SEQ.s1}:3`, [`${ORDERS}:shardId-000000000000`]],
      [`${ORDERS}:shardId-000000000002`, 'TRIM_HORIZON', [`${ORDERS}:shardId-000000000000`]],
    ]);
    expect(plan.leases[1]?.notes).toEqual([`prepared checkpoint ${SEQ.s2} sub 0 not committed: reading resumes after the committed one, as KCL would`, 'a KCL handoff from "kcl-b" was under way']);
    const unknown = await leasehold('import', 'kcl', ...kclArgs(dynamoEnv().dynalite.endpoint, table), '--storage', target.url, '--group', 'g', '--stream', 'refunds');
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain(`--stream "refunds" names no stream of the KCL table; its streams are "${ORDERS}", "${PAYMENTS}"`);
  });

  // Eight CLI processes each: one table a test, with room for a machine whose cores are busy.
  it.each([
    ['multi-stream', multiStreamLeases],
    ['single-stream', singleStreamLeases],
  ])('import then export gives back the %s KCL table: every attribute KCL reads, the leases free', async (_layout, make) => {
    const leases = make();
    const source = await kclTable(dynamoEnv().client, leases);
    const target = await backend();
    const group = freshName('g');
    const imported = await leasehold('import', 'kcl', ...kclArgs(dynamoEnv().dynalite.endpoint, source), '--storage', target.url, '--group', group, '--apply', '--observe-ms', '200');
    expect(imported.code, imported.stderr).toBe(0);

    const rollback = freshName('kcl');
    const dry = await leasehold('export', 'kcl', '--storage', target.url, '--group', group, ...kclArgs(dynamoEnv().dynalite.endpoint, rollback));
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout).toContain(`export of group ${group} in`);
    expect(dry.stdout).toContain('(to be created)');
    expect(dry.stdout).toContain('dry run: nothing was written');
    const exported = await leasehold('export', 'kcl', '--storage', target.url, '--group', group, ...kclArgs(dynamoEnv().dynalite.endpoint, rollback), '--apply', '--observe-ms', '200');
    expect(exported.code, exported.stderr).toBe(0);
    expect(exported.stdout).toContain(`exported group "${group}" to KCL table "${rollback}": ${leases.length} leases written, 0 replaced, 0 already there, 0 deleted (table created)`);

    // The leases go back free (no owner, no handoff under way), so that KCL workers take them at once.
    const expected = await scanTable(dynamoEnv().client, source);
    for (const item of expected.values()) {
      delete item.leaseOwner;
      delete item.checkpointOwner;
    }
    const actual = await scanTable(dynamoEnv().client, rollback);
    expect(normalise(actual)).toEqual(normalise(expected));

    // A second export finds every lease already there.
    const again = await leasehold('export', 'kcl', '--storage', target.url, '--group', group, ...kclArgs(dynamoEnv().dynalite.endpoint, rollback), '--apply', '--observe-ms', '200');
    expect(again.stdout).toContain(`0 leases written, 0 replaced, ${leases.length} already there, 0 deleted`);
  }, 180_000);

  it('export writes a moved checkpoint with its sub-sequence, a whole record as every sub-record of it, and refuses a differing table unless --replace', async () => {
    const target = await backend();
    const group = freshName('g');
    await seed(target.storage, [
      { group, leaseKey: 'shardId-000000000000', checkpoint: `${SEQ.s1}:4` },
      { group, leaseKey: 'shardId-000000000001', checkpoint: SEQ.s3 },
      { group, leaseKey: 'shardId-000000000002', checkpoint: null, parentKeys: ['shardId-000000000000'] },
    ]);
    const table = await kclTable(dynamoEnv().client, [{ leaseKey: 'shardId-000000000000', leaseCounter: 3, checkpoint: 'TRIM_HORIZON' }, { leaseKey: 'shardId-000000000007', checkpoint: 'SHARD_END' }]);
    const dry = await leasehold('export', 'kcl', '--storage', target.url, '--group', group, ...kclArgs(dynamoEnv().dynalite.endpoint, table));
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout.split('\n').slice(2, 5).map((line) => line.split(/\s{2,}/))).toEqual([
      ['shardId-000000000000', `${SEQ.s1}:4`, 'shardId-000000000000', `${SEQ.s1} sub 4`, 'differs'],
      ['shardId-000000000001', SEQ.s3, 'shardId-000000000001', `${SEQ.s3} sub 9223372036854775807`, 'write'],
      ['shardId-000000000002', '(none)', 'shardId-000000000002', 'TRIM_HORIZON', 'write'],
    ]);
    expect(dry.stdout).toContain('--apply would refuse: 2 leases of the table differ');
    const refused = await leasehold('export', 'kcl', '--storage', target.url, '--group', group, ...kclArgs(dynamoEnv().dynalite.endpoint, table), '--apply', '--observe-ms', '200');
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(`KCL table "${table}" holds 2 leases that differ from group "${group}"'s (first "shardId-000000000000"); pass --replace`);
    const replaced = await leasehold('export', 'kcl', '--storage', target.url, '--group', group, ...kclArgs(dynamoEnv().dynalite.endpoint, table), '--apply', '--replace', '--observe-ms', '200');
    expect(replaced.code, replaced.stderr).toBe(0);
    const items = await scanTable(dynamoEnv().client, table);
    expect([...items.keys()].sort()).toEqual(['shardId-000000000000', 'shardId-000000000001', 'shardId-000000000002']);
    expect(items.get('shardId-000000000001')).toMatchObject({ checkpoint: { S: SEQ.s3 }, checkpointSubSequenceNumber: { N: '9223372036854775807' } });
    expect(items.get('shardId-000000000002')).toMatchObject({ checkpoint: { S: 'TRIM_HORIZON' }, parentShardId: { SS: ['shardId-000000000000'] } });

    // And back: the whole record comes back whole.
    const again = await leasehold('import', 'kcl', ...kclArgs(dynamoEnv().dynalite.endpoint, table), '--storage', target.url, '--group', freshName('g'), '--json');
    expect((JSON.parse(again.stdout) as { leases: { leaseKey: string; checkpoint: string }[] }).leases.find((lease) => lease.leaseKey === 'shardId-000000000001')?.checkpoint).toBe(SEQ.s3);
  });

  it('export --replace into the application\'s own table deletes the leases the group finished and cleaned up, and leaves the streams it did not import alone', async () => {
    const table = await kclTable(dynamoEnv().client, multiStreamLeases());
    const target = await backend();
    const group = freshName('g');
    const imported = await leasehold('import', 'kcl', ...kclArgs(dynamoEnv().dynalite.endpoint, table), '--storage', target.url, '--group', group, '--stream', 'orders', '--apply', '--observe-ms', '200');
    expect(imported.code, imported.stderr).toBe(0);
    // The leader deletes a finished lease once its children have theirs.
    const finished = await target.storage.getLease(group, `${ORDERS}:shardId-000000000000`);
    expect((await target.storage.deleteLease(group, `${ORDERS}:shardId-000000000000`, finished?.version ?? 0)).status).toBe('applied');

    const exported = await leasehold('export', 'kcl', '--storage', target.url, '--group', group, ...kclArgs(dynamoEnv().dynalite.endpoint, table), '--replace', '--apply', '--observe-ms', '200');
    expect(exported.code, exported.stderr).toBe(0);
    expect(exported.stdout).toContain(`left alone: 2 leases of the table are of streams the group does not read (${PAYMENTS}:shardId-000000000000, ${PAYMENTS}:shardId-000000000001)`);
    expect(exported.stdout).toContain('0 leases written, 1 replaced, 1 already there, 1 deleted');
    const items = await scanTable(dynamoEnv().client, table);
    expect([...items.keys()].sort()).toEqual([`${ORDERS}:shardId-000000000001`, `${ORDERS}:shardId-000000000002`, `${PAYMENTS}:shardId-000000000000`, `${PAYMENTS}:shardId-000000000001`]);
    expect(items.get(`${PAYMENTS}:shardId-000000000000`)?.leaseOwner).toEqual({ S: 'kcl-b' });
    expect(items.get(`${ORDERS}:shardId-000000000001`)).toMatchObject({ checkpoint: { S: SEQ.s1 }, checkpointSubSequenceNumber: { N: '3' } });
    expect(items.get(`${ORDERS}:shardId-000000000001`)?.leaseOwner).toBeUndefined();
  });

  it('export --apply refuses while the group has a live member', async () => {
    const target = await backend();
    const group = freshName('g');
    await seed(target.storage, [{ group, leaseKey: 'shardId-000000000000', checkpoint: SEQ.s1 }]);
    const worker = heartbeater(target.storage, group, 'worker-a');
    const table = freshName('kcl');
    try {
      const result = await leasehold('export', 'kcl', '--storage', target.url, '--group', group, ...kclArgs(dynamoEnv().dynalite.endpoint, table), '--apply', '--observe-ms', '200');
      expect(result.code).toBe(1);
      expect(result.stderr).toContain(`group "${group}" is live: worker "worker-a"`);
    } finally {
      await worker.stop();
    }
    expect(await scanTable(dynamoEnv().client, table).catch((error: Error) => error.name)).toBe('ResourceNotFoundException');
  });
});
