import type { NewLease } from '@leasehold/core';
import { describe, expect, it } from 'vitest';
import { dynamoBackend, freshName, heartbeater, join, leasehold, postgresBackend, redisBackend, seed, sharedBackends } from './support.js';

const shared = sharedBackends();

describe('leasehold checkpoint', () => {
  it('set moves one lease of a group without owners, conditionally, and prints the change', async () => {
    const backend = await postgresBackend(shared.pool);
    const group = freshName('orders');
    await seed(backend.storage, [
      { group, leaseKey: 'shardId-000', checkpoint: '900', epoch: 5, parentKeys: ['shardId-p'], metadata: { k: 'v' } },
      { group, leaseKey: 'shardId-001', checkpoint: '100' },
    ]);

    const { code, stdout } = await leasehold('checkpoint', 'set', '--storage', backend.url, '--group', group, '--lease', 'shardId-000', '--position', '42');

    expect(code).toBe(0);
    expect(stdout).toBe('shardId-000: checkpoint "900" -> "42" (version 1 -> 2)\n');
    expect(await backend.storage.getLease(group, 'shardId-000')).toEqual({
      group, leaseKey: 'shardId-000', version: 2, format: 1, owner: null, epoch: 5, checkpoint: '42', parentKeys: ['shardId-p'], incarnation: null, metadata: { k: 'v' },
    });
    expect((await backend.storage.getLease(group, 'shardId-001'))?.checkpoint).toBe('100');
    await backend.close();
  });

  it('set refuses while a member of the group heartbeats, and writes nothing', async () => {
    const backend = await postgresBackend(shared.pool);
    const group = freshName('orders');
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000', owner: 'worker-a', incarnation: 'worker-a-inc', epoch: 1, checkpoint: '900' }]);
    const worker = heartbeater(backend.storage, group, 'worker-a', { leaseDurationMs: 5000 });

    const { code, stderr } = await leasehold('checkpoint', 'set', '--storage', backend.url, '--group', group, '--lease', 'shardId-000', '--position', '1');
    await worker.stop();

    expect(code).toBe(1);
    expect(stderr).toContain(`watching the roster of group "${group}" (1 alive member) for up to 5.0s for heartbeats: each member for its lease duration\n`);
    expect(stderr).toContain(
      `leasehold: [cli] group "${group}" is live: worker "worker-a" (incarnation "worker-a-inc") sent a heartbeat while watched; stop the group's workers first, or pass --force\n`,
    );
    expect((await backend.storage.getLease(group, 'shardId-000'))?.checkpoint).toBe('900');
    await backend.close();
  });

  it('set refuses while a member that holds no lease heartbeats: it may take one at any moment', async () => {
    const backend = await dynamoBackend(shared.dynamodb);
    const group = freshName('orders');
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000', checkpoint: '900' }]);
    const worker = heartbeater(backend.storage, group, 'idle-worker');

    const { code, stderr } = await leasehold('checkpoint', 'set', '--storage', backend.url, '--group', group, '--lease', 'shardId-000', '--position', '1');
    await worker.stop();

    expect(code).toBe(1);
    expect(stderr).toContain('is live: worker "idle-worker"');
    expect((await backend.storage.getLease(group, 'shardId-000'))?.checkpoint).toBe('900');
  });

  it('reset proceeds once the owner\'s member is watched not moving for its lease duration, although the lease names it', async () => {
    const backend = redisBackend(shared.redis);
    const group = freshName('orders');
    await join(backend.storage, group, 'crashed-worker', { leaseDurationMs: 400 });
    await join(backend.storage, group, 'left-worker', { leaseDurationMs: 60_000, status: 'dead' });
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000', owner: 'crashed-worker', incarnation: 'crashed-worker-inc', epoch: 3, checkpoint: '900' }]);

    const started = Date.now();
    const { code, stdout, stderr } = await leasehold('checkpoint', 'reset', '--storage', backend.url, '--group', group, '--lease', 'shardId-000');

    expect(code).toBe(0);
    // Watched for the crashed member's own lease duration; the dead member is not watched.
    expect(Date.now() - started).toBeGreaterThanOrEqual(400);
    expect(stderr).toContain(`watching the roster of group "${group}" (1 alive member) for up to 400ms for heartbeats`);
    expect(stdout).toBe('shardId-000: checkpoint "900" -> "TRIM_HORIZON" (version 1 -> 2)\n');
    const lease = await backend.storage.getLease(group, 'shardId-000');
    expect(lease).toMatchObject({ checkpoint: 'TRIM_HORIZON', owner: 'crashed-worker', epoch: 3 });
    await backend.close();
  });

  it('--observe-ms watches each member at least that long, above its own lease duration', async () => {
    const backend = redisBackend(shared.redis);
    const group = freshName('orders');
    await join(backend.storage, group, 'crashed-worker', { leaseDurationMs: 100 });
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000', checkpoint: '900' }]);

    const started = Date.now();
    const { code, stderr } = await leasehold('checkpoint', 'reset', '--storage', backend.url, '--group', group, '--observe-ms', '700');

    expect(code).toBe(0);
    expect(Date.now() - started).toBeGreaterThanOrEqual(700);
    expect(stderr).toContain('for up to 700ms for heartbeats: each member for its lease duration, at least 700ms (--observe-ms)');
    await backend.close();
  });

  it('decides at once for a group whose members are all dead, and says nothing of watching', async () => {
    const backend = redisBackend(shared.redis);
    const group = freshName('orders');
    await join(backend.storage, group, 'gone', { leaseDurationMs: 600_000, status: 'dead' });
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000', owner: 'gone', incarnation: 'gone-inc', epoch: 1, checkpoint: '900' }]);

    const { code, stderr } = await leasehold('checkpoint', 'set', '--storage', backend.url, '--group', group, '--lease', 'shardId-000', '--position', '5');

    expect(code).toBe(0);
    expect(stderr).toBe('');
    await backend.close();
  });

  it('reset without --lease sets every lease of the group to LATEST, and leaves one already there unchanged', async () => {
    const backend = redisBackend(shared.redis);
    const group = freshName('orders');
    await seed(backend.storage, [
      { group, leaseKey: 'a', checkpoint: '1' },
      { group, leaseKey: 'b', checkpoint: 'LATEST' },
      { group, leaseKey: 'c' },
    ]);

    const { code, stdout } = await leasehold('checkpoint', 'reset', '--storage', backend.url, '--group', group, '--to', 'LATEST');

    expect(code).toBe(0);
    expect(stdout.split('\n').sort()).toEqual([
      '',
      'a: checkpoint "1" -> "LATEST" (version 1 -> 2)',
      'b: checkpoint already "LATEST", unchanged',
      'c: checkpoint (none) -> "LATEST" (version 1 -> 2)',
    ]);
    const { leases } = await backend.storage.listLeases(group);
    expect(leases.map((lease) => lease.checkpoint)).toEqual(['LATEST', 'LATEST', 'LATEST']);
    await backend.close();
  });

  it('--force skips the watch, so a live-looking group is written at once', async () => {
    const backend = redisBackend(shared.redis);
    const group = freshName('orders');
    await join(backend.storage, group, 'worker-a', { leaseDurationMs: 600_000 });
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000', owner: 'worker-a', incarnation: 'worker-a-inc', epoch: 1, checkpoint: '5' }]);

    // Without --force this would watch the member for ten minutes and outlast the test's timeout.
    const { code, stdout, stderr } = await leasehold('checkpoint', 'set', '--storage', backend.url, '--group', group, '--lease', 'shardId-000', '--position', '6', '--force', '--observe-ms', '600000');

    expect(code).toBe(0);
    expect(stderr).toBe(`not checking whether group "${group}" is live (--force)\n`);
    expect(stdout).toBe('shardId-000: checkpoint "5" -> "6" (version 1 -> 2)\n');
    await backend.close();
  });

  it('set names a lease the group does not have and exits 1', async () => {
    const backend = redisBackend(shared.redis);
    const group = freshName('orders');
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000' }]);

    const { code, stderr } = await leasehold('checkpoint', 'set', '--storage', backend.url, '--group', group, '--lease', 'shardId-999', '--position', '1');

    expect(code).toBe(1);
    expect(stderr).toBe(`leasehold: [cli] group "${group}" has no lease "shardId-999" in "${backend.url}"\n`);
    await backend.close();
  });

  it('reset refuses a --to that is not TRIM_HORIZON, LATEST or AT_TIMESTAMP:<ms> with exit code 2', async () => {
    const { code, stderr } = await leasehold('checkpoint', 'reset', '--storage', 'redis://127.0.0.1:6379', '--group', 'g', '--to', 'SHARD_END');

    expect(code).toBe(2);
    expect(stderr).toBe('leasehold: [cli] --to must be TRIM_HORIZON, LATEST or AT_TIMESTAMP:<ms>, got "SHARD_END"\n');
  });
  it('reset of a whole group never moves a finished lease back, and names each one it skipped and why', async () => {
    const backend = await postgresBackend(shared.pool);
    const group = freshName('orders');
    await seed(backend.storage, [
      { group, leaseKey: 'shardId-000', checkpoint: 'SHARD_END', epoch: 2 },
      { group, leaseKey: 'shardId-001', checkpoint: '77', parentKeys: ['shardId-000'] },
      { group, leaseKey: 'shardId-002', checkpoint: 'SHARD_END' },
    ]);

    const { code, stdout } = await leasehold('checkpoint', 'reset', '--storage', backend.url, '--group', group);

    expect(code).toBe(0);
    expect(stdout.split('\n').sort()).toEqual([
      '',
      'shardId-000: finished (SHARD_END), skipped: a reset would read its shard again after its children',
      'shardId-001: checkpoint "77" -> "TRIM_HORIZON" (version 1 -> 2)',
      'shardId-002: finished (SHARD_END), skipped: a reset would read its shard again after its children',
    ]);
    const { leases } = await backend.storage.listLeases(group);
    expect(leases.map((lease) => [lease.leaseKey, lease.checkpoint, lease.version]).sort()).toEqual([
      ['shardId-000', 'SHARD_END', 1],
      ['shardId-001', 'TRIM_HORIZON', 2],
      ['shardId-002', 'SHARD_END', 1],
    ]);
    await backend.close();
  });

  it('reset of a finished lease named alone is refused, and nothing is written', async () => {
    const backend = redisBackend(shared.redis);
    const group = freshName('orders');
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000', checkpoint: 'SHARD_END' }]);

    const { code, stdout, stderr } = await leasehold('checkpoint', 'reset', '--storage', backend.url, '--group', group, '--lease', 'shardId-000', '--to', 'LATEST');

    expect(code).toBe(1);
    expect(stdout).toBe('');
    expect(stderr).toBe(
      `leasehold: [cli] lease "shardId-000" of group "${group}" is finished (SHARD_END): its children may have started, and reading it again would hand its records over after theirs; use checkpoint set --reopen-finished to move it anyway\n`,
    );
    expect(await backend.storage.getLease(group, 'shardId-000')).toMatchObject({ checkpoint: 'SHARD_END', version: 1 });
    await backend.close();
  });

  it('set refuses to move a finished lease back unless --reopen-finished is given', async () => {
    const backend = await dynamoBackend(shared.dynamodb);
    const group = freshName('orders');
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000', checkpoint: 'SHARD_END', epoch: 4 }]);

    const refused = await leasehold('checkpoint', 'set', '--storage', backend.url, '--group', group, '--lease', 'shardId-000', '--position', '123');
    const unchanged = await backend.storage.getLease(group, 'shardId-000');
    const reopened = await leasehold('checkpoint', 'set', '--storage', backend.url, '--group', group, '--lease', 'shardId-000', '--position', '123', '--reopen-finished');

    expect(refused.code).toBe(1);
    expect(refused.stderr).toBe(
      `leasehold: [cli] lease "shardId-000" of group "${group}" is finished (SHARD_END): its children may have started, and reading it again would hand its records over after theirs; pass --reopen-finished to move it anyway\n`,
    );
    expect(unchanged).toMatchObject({ checkpoint: 'SHARD_END', version: 1 });
    expect(reopened.code).toBe(0);
    expect(reopened.stdout).toBe('shardId-000: checkpoint "SHARD_END" -> "123" (version 1 -> 2)\n');
    expect(await backend.storage.getLease(group, 'shardId-000')).toMatchObject({ checkpoint: '123', epoch: 4 });
  });

  it('set keeps the record format and the fields this command line does not name', async () => {
    const backend = redisBackend(shared.redis);
    const group = freshName('orders');
    // A field a later core may add: the command line must carry it into its write, not drop it.
    const lease = { group, leaseKey: 'shardId-000', checkpoint: '5', tenure: { since: 3, by: 'worker-a' } } as NewLease;
    await seed(backend.storage, [lease]);

    const { code } = await leasehold('checkpoint', 'set', '--storage', backend.url, '--group', group, '--lease', 'shardId-000', '--position', '9');

    expect(code).toBe(0);
    expect(await backend.storage.getLease(group, 'shardId-000')).toMatchObject({ format: 1, checkpoint: '9', tenure: { since: 3, by: 'worker-a' } });
    await backend.close();
  });

  it('refuses to write any lease of a group that holds a record of a newer Leasehold, and names it', async () => {
    const backend = await postgresBackend(shared.pool);
    const group = freshName('orders');
    await seed(backend.storage, [
      { group, leaseKey: 'shardId-000', checkpoint: '5' },
      { group, leaseKey: 'shardId-001', checkpoint: '6', format: 2 },
    ]);

    const { code, stdout, stderr } = await leasehold('checkpoint', 'reset', '--storage', backend.url, '--group', group);

    expect(code).toBe(1);
    expect(stdout).toBe('');
    expect(stderr).toBe(
      'leasehold: [cli] lease "shardId-001" was written by a newer Leasehold (record format 2; this command line knows up to 1): upgrade @leasehold/cli; nothing was written\n',
    );
    expect((await backend.storage.getLease(group, 'shardId-000'))?.checkpoint).toBe('5');
    await backend.close();
  });

  it('reset of a group with a corrupt lease resets the others, names the corrupt one and exits 1', async () => {
    const backend = await postgresBackend(shared.pool);
    const group = freshName('orders');
    await seed(backend.storage, [
      { group, leaseKey: 'shardId-000', checkpoint: '5' },
      { group, leaseKey: 'shardId-001', checkpoint: '6' },
    ]);
    await backend.corrupt(group, 'shardId-001');

    const { code, stdout, stderr } = await leasehold('checkpoint', 'reset', '--storage', backend.url, '--group', group);

    expect(code).toBe(1);
    expect(stdout).toMatch(/^shardId-001: corrupt, skipped: \[storage-postgres\] stored lease "shardId-001" of group "\w+" is corrupt: .+\n/);
    expect(stdout).toContain('shardId-000: checkpoint "5" -> "TRIM_HORIZON" (version 1 -> 2)\n');
    expect(stderr).toBe(
      'leasehold: [cli] 1 of 2 checkpoints were not written: lease "shardId-001" is corrupt and was not written (see leasehold doctor --group)\n',
    );
    expect((await backend.storage.getLease(group, 'shardId-000'))?.checkpoint).toBe('TRIM_HORIZON');
    await backend.close();
  });

  it('set on a corrupt lease is refused with its error', async () => {
    const backend = redisBackend(shared.redis);
    const group = freshName('orders');
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000', checkpoint: '5' }]);
    await backend.corrupt(group, 'shardId-000');

    const { code, stderr } = await leasehold('checkpoint', 'set', '--storage', backend.url, '--group', group, '--lease', 'shardId-000', '--position', '9');

    expect(code).toBe(1);
    expect(stderr).toMatch(
      new RegExp(`^leasehold: \\[cli\\] lease "shardId-000" of group "${group}" cannot be read back, so nothing was written to it \\(\\[storage-redis\\] .+\\); see leasehold doctor --group\\n$`),
    );
    await backend.close();
  });
});
