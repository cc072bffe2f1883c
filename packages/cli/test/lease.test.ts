import { describe, expect, it } from 'vitest';
import { dynamoBackend, freshName, leasehold, postgresBackend, redisBackend, heartbeater, seed, sharedBackends } from './support.js';

const shared = sharedBackends();

describe('leasehold lease delete', () => {
  it('deletes a corrupt lease at the stored version it is given, and says that its shard is not read again until it is created again', async () => {
    const backend = await postgresBackend(shared.pool);
    const group = freshName('orders');
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000', checkpoint: '5' }, { group, leaseKey: 'shardId-001' }]);
    await backend.corrupt(group, 'shardId-001');

    const withoutVersion = await leasehold('lease', 'delete', '--storage', backend.url, '--group', group, '--key', 'shardId-001');
    const wrongVersion = await leasehold('lease', 'delete', '--storage', backend.url, '--group', group, '--key', 'shardId-001', '--at-version', '7');
    const deleted = await leasehold('lease', 'delete', '--storage', backend.url, '--group', group, '--key', 'shardId-001', '--at-version', '1');

    expect(withoutVersion.code).toBe(1);
    expect(withoutVersion.stderr).toMatch(
      /^leasehold: \[cli\] lease "shardId-001" cannot be read back \(\[storage-postgres\] .+\), so its version cannot be read through the storage contract: pass --at-version with the version stored in the backend\n$/,
    );
    expect(wrongVersion.code).toBe(1);
    expect(wrongVersion.stderr).toMatch(/^leasehold: \[cli\] deleting lease "shardId-001" at version 7: the outcome is unknown \(.+\); check with leasehold status\n$/);
    expect(deleted.code).toBe(0);
    expect(deleted.stdout).toBe(
      'deleted corrupt lease "shardId-001" at version 1\n' +
        'the leader does not create a deleted lease again: if shard "shardId-001" still has records to read, create its lease again with leasehold lease create\n',
    );
    expect(await backend.storage.listLeases(group)).toMatchObject({ leases: [{ leaseKey: 'shardId-000' }], corrupt: [] });
    await backend.close();
  });

  it('deletes a finished lease, and an unfinished one only with --unfinished', async () => {
    const backend = redisBackend(shared.redis);
    const group = freshName('orders');
    await seed(backend.storage, [
      { group, leaseKey: 'shardId-000', checkpoint: 'SHARD_END', epoch: 3 },
      { group, leaseKey: 'shardId-001', checkpoint: '42' },
    ]);

    const finished = await leasehold('lease', 'delete', '--storage', backend.url, '--group', group, '--key', 'shardId-000');
    const refused = await leasehold('lease', 'delete', '--storage', backend.url, '--group', group, '--key', 'shardId-001');
    const stillThere = await backend.storage.getLease(group, 'shardId-001');
    const forced = await leasehold('lease', 'delete', '--storage', backend.url, '--group', group, '--key', 'shardId-001', '--unfinished');

    expect(finished.code).toBe(0);
    expect(finished.stdout).toBe('deleted lease (checkpoint "SHARD_END", epoch 3) "shardId-000" at version 1\n');
    expect(refused.code).toBe(1);
    expect(refused.stderr).toBe(
      'leasehold: [cli] lease "shardId-001" is not finished (checkpoint "42"): the leader does not create a deleted lease again, so its shard would not be read again; pass --unfinished to delete it anyway (a shard gone from the stream)\n',
    );
    expect(stillThere?.checkpoint).toBe('42');
    expect(forced.code).toBe(0);
    expect(forced.stdout).toContain('deleted lease (checkpoint "42", epoch 0) "shardId-001" at version 1\n');
    expect(await backend.storage.listLeases(group)).toEqual({ leases: [], corrupt: [] });
    await backend.close();
  });

  it('refuses while a member of the group heartbeats, and deletes nothing', async () => {
    const backend = await postgresBackend(shared.pool);
    const group = freshName('orders');
    await seed(backend.storage, [
      { group, leaseKey: 'shardId-000', checkpoint: 'SHARD_END' },
      { group, leaseKey: 'shardId-001', owner: 'worker-a', incarnation: 'worker-a-inc', epoch: 1 },
    ]);
    const worker = heartbeater(backend.storage, group, 'worker-a', { leaseDurationMs: 5000 });

    const { code, stderr } = await leasehold('lease', 'delete', '--storage', backend.url, '--group', group, '--key', 'shardId-000');
    await worker.stop();

    expect(code).toBe(1);
    expect(stderr).toContain(`leasehold: [cli] group "${group}" is live: worker "worker-a" (incarnation "worker-a-inc") sent a heartbeat while watched`);
    expect(await backend.storage.getLease(group, 'shardId-000')).not.toBeNull();
    await backend.close();
  });

  it('names a lease the group does not have, and a version that is not the lease\'s', async () => {
    const backend = await dynamoBackend(shared.dynamodb);
    const group = freshName('orders');
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000', checkpoint: 'SHARD_END' }]);

    const missing = await leasehold('lease', 'delete', '--storage', backend.url, '--group', group, '--key', 'shardId-999');
    const stale = await leasehold('lease', 'delete', '--storage', backend.url, '--group', group, '--key', 'shardId-000', '--at-version', '3');

    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(new RegExp(`^leasehold: \\[cli\\] group "${group}" has no lease "shardId-999" in "dynamodb://.+"\\n$`));
    expect(stale.code).toBe(1);
    expect(stale.stderr).toBe('leasehold: [cli] lease "shardId-000" is at version 1, not 3; nothing was deleted\n');
    expect(await backend.storage.getLease(group, 'shardId-000')).not.toBeNull();
  });
});

describe('leasehold lease create', () => {
  it('creates a deleted lease again at a checkpoint with its parents, its version and epoch above the old ones', async () => {
    const backend = redisBackend(shared.redis);
    const group = freshName('orders');
    const [old] = await seed(backend.storage, [{ group, leaseKey: 'shardId-002', checkpoint: '9', epoch: 6 }], { group, holder: null, term: 2 });
    await backend.storage.deleteLease(group, 'shardId-002', old!.version);

    const { code, stdout } = await leasehold(
      'lease', 'create', '--storage', backend.url, '--group', group, '--key', 'shardId-002', '--checkpoint', '9', '--parent', 'shardId-000', '--parent', 'shardId-001',
    );

    expect(code).toBe(0);
    const lease = await backend.storage.getLease(group, 'shardId-002');
    expect(lease).toMatchObject({ checkpoint: '9', parentKeys: ['shardId-000', 'shardId-001'], owner: null });
    expect(lease!.version).toBeGreaterThan(old!.version);
    expect(lease!.epoch).toBeGreaterThanOrEqual(6);
    expect(stdout).toBe(
      `created lease "shardId-002" at checkpoint "9" with parents "shardId-000", "shardId-001" (version ${lease!.version}, epoch ${lease!.epoch})\n`,
    );
    await backend.close();
  });

  it('refuses a lease that exists, readable or corrupt', async () => {
    const backend = await postgresBackend(shared.pool);
    const group = freshName('orders');
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000', checkpoint: '1' }, { group, leaseKey: 'shardId-001' }]);
    await backend.corrupt(group, 'shardId-001');

    const results = await Promise.all(
      ['shardId-000', 'shardId-001'].map((key) => leasehold('lease', 'create', '--storage', backend.url, '--group', group, '--key', key, '--checkpoint', 'TRIM_HORIZON')),
    );

    expect(results.map((result) => [result.code, result.stderr])).toEqual(
      ['shardId-000', 'shardId-001'].map((key) => [1, `leasehold: [cli] lease "${key}" exists; move its checkpoint with leasehold checkpoint set, or delete it first\n`]),
    );
    expect((await backend.storage.getLease(group, 'shardId-000'))?.checkpoint).toBe('1');
    await backend.close();
  });
});
