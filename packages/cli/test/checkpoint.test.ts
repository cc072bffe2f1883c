import type { Redis } from 'ioredis';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freshName, leasehold, postgresBackend, postgresPool, redisBackend, redisClient, renewer, seed } from './support.js';

let pool: pg.Pool;
let redis: Redis;

beforeAll(async () => {
  pool = await postgresPool();
  redis = await redisClient();
});

afterAll(async () => {
  await pool?.end();
  redis?.disconnect();
});

describe('leasehold checkpoint', () => {
  it('set moves one lease of a group without owners, conditionally, and prints the change', async () => {
    const backend = await postgresBackend(pool);
    const group = freshName('orders');
    await seed(backend.storage, [
      { group, leaseKey: 'shardId-000', checkpoint: '900', epoch: 5, parentKeys: ['shardId-p'], metadata: { k: 'v' } },
      { group, leaseKey: 'shardId-001', checkpoint: '100' },
    ]);

    const { code, stdout } = await leasehold('checkpoint', 'set', '--storage', backend.url, '--group', group, '--lease', 'shardId-000', '--position', '42');

    expect(code).toBe(0);
    expect(stdout).toBe('shardId-000: checkpoint "900" -> "42" (version 1 -> 2)\n');
    expect(await backend.storage.getLease(group, 'shardId-000')).toEqual({
      group, leaseKey: 'shardId-000', version: 2, owner: null, epoch: 5, checkpoint: '42', parentKeys: ['shardId-p'], pendingOwner: null, metadata: { k: 'v' },
    });
    expect((await backend.storage.getLease(group, 'shardId-001'))?.checkpoint).toBe('100');
    await backend.close();
  });

  it('set refuses while a worker renews a lease of the group, and writes nothing', async () => {
    const backend = await postgresBackend(pool);
    const group = freshName('orders');
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000', owner: 'worker-a', epoch: 1, checkpoint: '900' }]);
    const worker = renewer(backend.storage, group, 'shardId-000');

    const { code, stderr } = await leasehold('checkpoint', 'set', '--storage', backend.url, '--group', group, '--lease', 'shardId-000', '--position', '1', '--observe-ms', '5000');
    await worker.stop();

    expect(code).toBe(1);
    expect(stderr).toContain(
      `leasehold: [cli] group "${group}" is live: lease "shardId-000" of worker "worker-a" was renewed while watched; stop the group's workers first, or pass --force\n`,
    );
    expect((await backend.storage.getLease(group, 'shardId-000'))?.checkpoint).toBe('900');
    await backend.close();
  });

  it('reset proceeds once the owner of a lease is seen not renewing it for --observe-ms', async () => {
    const backend = redisBackend(redis);
    const group = freshName('orders');
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000', owner: 'crashed-worker', epoch: 3, checkpoint: '900' }]);

    const { code, stdout, stderr } = await leasehold('checkpoint', 'reset', '--storage', backend.url, '--group', group, '--lease', 'shardId-000', '--observe-ms', '300');

    expect(code).toBe(0);
    expect(stderr).toContain('for renewals by a live worker');
    expect(stdout).toBe('shardId-000: checkpoint "900" -> "TRIM_HORIZON" (version 1 -> 2)\n');
    const lease = await backend.storage.getLease(group, 'shardId-000');
    expect(lease).toMatchObject({ checkpoint: 'TRIM_HORIZON', owner: 'crashed-worker', epoch: 3 });
    await backend.close();
  });

  it('reset without --lease sets every lease of the group to LATEST, and leaves one already there unchanged', async () => {
    const backend = redisBackend(redis);
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
    const leases = await backend.storage.listLeases(group);
    expect(leases.map((lease) => lease.checkpoint)).toEqual(['LATEST', 'LATEST', 'LATEST']);
    await backend.close();
  });

  it('--force skips the watch, so a live-looking group is written at once', async () => {
    const backend = redisBackend(redis);
    const group = freshName('orders');
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000', owner: 'worker-a', epoch: 1, checkpoint: '5' }]);

    // Without --force this would watch for ten minutes and outlast the test's timeout.
    const { code, stdout, stderr } = await leasehold('checkpoint', 'set', '--storage', backend.url, '--group', group, '--lease', 'shardId-000', '--position', '6', '--force', '--observe-ms', '600000');

    expect(code).toBe(0);
    expect(stderr).toBe(`not checking whether group "${group}" is live (--force)\n`);
    expect(stdout).toBe('shardId-000: checkpoint "5" -> "6" (version 1 -> 2)\n');
    await backend.close();
  });

  it('set names a lease the group does not have and exits 1', async () => {
    const backend = redisBackend(redis);
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
});
