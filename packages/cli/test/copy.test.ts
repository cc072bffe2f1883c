import type { LeaseRecord, NewLease } from '@leasehold/core';
import { leaseStateOf } from '@leasehold/core/adapter';
import { describe, expect, it } from 'vitest';
import { dynamoBackend, freshName, leasehold, postgresBackend, redisBackend, heartbeater, join, seed, sharedBackends } from './support.js';

/** What a copy must keep of a lease: its key and its whole state (the store's version is its own). */
const keyAndState = (lease: LeaseRecord) => [lease.leaseKey, leaseStateOf(lease)] as const;

const shared = sharedBackends();

function leasesOf(group: string): NewLease[] {
  return [
    { group, leaseKey: 'shardId-000', checkpoint: 'SHARD_END', epoch: 9 },
    { group, leaseKey: 'shardId-001', owner: 'worker-a', incarnation: 'worker-a-inc', epoch: 4, checkpoint: '4955', parentKeys: ['shardId-000'], metadata: { note: 'x"y' } },
    { group, leaseKey: 'shardId-002', parentKeys: ['shardId-000'] },
  ];
}

const byKey = (a: LeaseRecord, b: LeaseRecord): number => (a.leaseKey < b.leaseKey ? -1 : 1);

describe('leasehold copy', () => {
  it('copies every lease and the leader record from Postgres to Redis, keeping every field but the version', async () => {
    const source = await postgresBackend(shared.pool);
    const target = redisBackend(shared.redis);
    const group = freshName('orders');
    const seeded = await seed(source.storage, leasesOf(group), { group, holder: 'worker-a', term: 6, metadata: { since: '1' } });
    await join(source.storage, group, 'worker-a', { leaseDurationMs: 200 });

    const { code, stdout } = await leasehold('copy', '--from', source.url, '--to', target.url, '--group', group);

    expect(code).toBe(0);
    // The member was watched until it expired, and is not copied: the target's roster stays empty.
    expect(stdout).toContain("members are live state and were not copied (1 in the source's roster): workers join the target's roster when they start on it, and the copied leases are free to take there\n");
    expect(await target.storage.getRoster(group)).toEqual({ group, members: [], corrupt: [] });
    expect(stdout).toContain('copied    shardId-001 checkpoint "4955" epoch 4 owner "worker-a"\n');
    expect(stdout).toContain('copied    leader worker-a, term 6\n');
    expect(stdout).toContain(`copied group "${group}" from ${source.url} to ${target.url}: 3 leases copied, 0 replaced, 0 already there, 0 deleted; verified 3 leases and the leader record\n`);
    expect((await target.storage.listLeases(group)).leases.sort(byKey).map(keyAndState)).toEqual(seeded.map(keyAndState));
    expect(await target.storage.getLeader(group)).toMatchObject({ holder: 'worker-a', term: 6, metadata: { since: '1' } });
    await source.close();
    await target.close();
  });

  it('copies from Redis to DynamoDB and on to a Postgres schema it sets up with --setup', async () => {
    const redisSource = redisBackend(shared.redis);
    const table = await dynamoBackend(shared.dynamodb);
    const postgres = await postgresBackend(shared.pool, { migrated: false });
    const group = freshName('orders');
    const seeded = await seed(redisSource.storage, leasesOf(group));

    const first = await leasehold('copy', '--from', redisSource.url, '--to', table.url, '--group', group, '--observe-ms', '200');
    const second = await leasehold('copy', '--from', table.url, '--to', postgres.url, '--group', group, '--setup', '--observe-ms', '200');

    expect([first.code, second.code]).toEqual([0, 0]);
    expect(second.stdout).toContain('3 leases copied, 0 replaced, 0 already there, 0 deleted; verified 3 leases and no leader record\n');
    expect((await postgres.storage.listLeases(group)).leases.sort(byKey).map(keyAndState)).toEqual(seeded.map(keyAndState));
    await redisSource.close();
    await postgres.close();
  });

  it('refuses while a worker of the group heartbeats, and copies nothing', async () => {
    const source = redisBackend(shared.redis);
    const target = await postgresBackend(shared.pool);
    const group = freshName('orders');
    await seed(source.storage, leasesOf(group));
    const worker = heartbeater(source.storage, group, 'worker-a', { leaseDurationMs: 5000 });

    const { code, stderr } = await leasehold('copy', '--from', source.url, '--to', target.url, '--group', group);
    await worker.stop();

    expect(code).toBe(1);
    expect(stderr).toContain(`leasehold: [cli] group "${group}" is live: worker "worker-a" (incarnation "worker-a-inc") sent a heartbeat while watched`);
    expect(await target.storage.listLeases(group)).toEqual({ leases: [], corrupt: [] });
    await source.close();
    await target.close();
  });

  it('refuses a target holding the group with other records; --replace overwrites them, and a run again changes nothing', async () => {
    const source = redisBackend(shared.redis);
    const target = redisBackend(shared.redis);
    const group = freshName('orders');
    const seeded = await seed(source.storage, leasesOf(group));
    await seed(target.storage, [
      { group, leaseKey: 'shardId-001', owner: 'worker-a', epoch: 2, checkpoint: '10' },
      { group, leaseKey: 'shardId-077' },
    ]);

    const refused = await leasehold('copy', '--from', source.url, '--to', target.url, '--group', group, '--observe-ms', '0');
    const replaced = await leasehold('copy', '--from', source.url, '--to', target.url, '--group', group, '--observe-ms', '0', '--replace');
    const again = await leasehold('copy', '--from', source.url, '--to', target.url, '--group', group, '--observe-ms', '0');

    expect(refused.code).toBe(1);
    expect(refused.stderr).toBe(
      `leasehold: [cli] ${target.url} already holds group "${group}" with 2 records that differ from the source (lease "shardId-001" has incarnation null instead of "worker-a-inc", epoch 2 instead of 4, checkpoint "10" instead of "4955", parentKeys [] instead of ["shardId-000"], metadata); pass --replace to overwrite them\n`,
    );
    expect(replaced.code).toBe(0);
    expect(replaced.stdout).toContain('deleted   shardId-077 (not in the source)\n');
    expect(replaced.stdout).toContain('2 leases copied, 1 replaced, 0 already there, 1 deleted; verified 3 leases');
    expect((await target.storage.listLeases(group)).leases.sort(byKey).map(keyAndState)).toEqual(seeded.map(keyAndState));
    expect(again.code).toBe(0);
    expect(again.stdout).toContain('0 leases copied, 0 replaced, 3 already there, 0 deleted; verified 3 leases');
    await source.close();
    await target.close();
  });

  it('refuses to replace a lease whose epoch in the target is above the source, since fencing tokens must not repeat', async () => {
    const source = redisBackend(shared.redis);
    const target = redisBackend(shared.redis);
    const group = freshName('orders');
    await seed(source.storage, [{ group, leaseKey: 'shardId-000', epoch: 3 }]);
    await seed(target.storage, [{ group, leaseKey: 'shardId-000', epoch: 8 }]);

    const { code, stderr } = await leasehold('copy', '--from', source.url, '--to', target.url, '--group', group, '--observe-ms', '0', '--replace');

    expect(code).toBe(1);
    expect(stderr).toBe(`leasehold: [cli] lease "shardId-000" has epoch 8 in ${target.url}, above the source's 3; copying would lower a fencing token, so nothing was written\n`);
    expect((await target.storage.getLease(group, 'shardId-000'))?.epoch).toBe(8);
    await source.close();
    await target.close();
  });
  it('refuses to copy a group that has leases which cannot be read back, naming each, and copies nothing', async () => {
    const source = await postgresBackend(shared.pool);
    const target = redisBackend(shared.redis);
    const group = freshName('orders');
    await seed(source.storage, leasesOf(group));
    await source.corrupt(group, 'shardId-001');
    await source.corrupt(group, 'shardId-002');

    const { code, stderr } = await leasehold('copy', '--from', source.url, '--to', target.url, '--group', group, '--observe-ms', '0');

    expect(code).toBe(1);
    expect(stderr).toMatch(
      new RegExp(
        `^leasehold: \\[cli\\] group "${group}" has 2 records in \\S+ that cannot be read back, so nothing was copied: ` +
          `lease "shardId-001" \\(\\[storage-postgres\\] .+\\); lease "shardId-002" \\(\\[storage-postgres\\] .+\\); repair or delete them first \\(leasehold doctor --group\\)\\n$`,
      ),
    );
    expect(await target.storage.listLeases(group)).toEqual({ leases: [], corrupt: [] });
    await source.close();
    await target.close();
  });

  it('copies the record format and the fields this command line does not name, and a run again finds them the same', async () => {
    const source = await postgresBackend(shared.pool);
    const target = await dynamoBackend(shared.dynamodb);
    const group = freshName('orders');
    // Fields a later core may add: a copy must keep them, whatever order a store gives object keys back in.
    const later = { group, leaseKey: 'shardId-000', checkpoint: '7', format: 2, tenure: { since: 3, by: 'worker-a' }, zone: 'b' } as NewLease;
    const seeded = await seed(source.storage, [later, { group, leaseKey: 'shardId-001' }]);

    const first = await leasehold('copy', '--from', source.url, '--to', target.url, '--group', group, '--observe-ms', '0');
    const again = await leasehold('copy', '--from', source.url, '--to', target.url, '--group', group, '--observe-ms', '0');

    expect([first.code, again.code]).toEqual([0, 0]);
    expect((await target.storage.listLeases(group)).leases.sort(byKey).map(keyAndState)).toEqual(seeded.map(keyAndState));
    expect(again.stdout).toContain('0 leases copied, 0 replaced, 2 already there, 0 deleted; verified 2 leases');
    await source.close();
  });

  it('copies a lease whose key the target had deleted before, with a version above the old one', async () => {
    const source = redisBackend(shared.redis);
    const target = await postgresBackend(shared.pool);
    const group = freshName('orders');
    const seeded = await seed(source.storage, [{ group, leaseKey: 'shardId-000', checkpoint: '55', epoch: 2 }], { group, holder: null, term: 1 });
    const [old] = await seed(target.storage, [{ group, leaseKey: 'shardId-000', epoch: 1 }]);
    await target.storage.deleteLease(group, 'shardId-000', old!.version);

    const { code, stdout } = await leasehold('copy', '--from', source.url, '--to', target.url, '--group', group, '--observe-ms', '0');

    expect(code).toBe(0);
    expect(stdout).toContain('1 leases copied, 0 replaced, 0 already there, 0 deleted; verified 1 leases and the leader record\n');
    const copied = await target.storage.getLease(group, 'shardId-000');
    expect(copied && leaseStateOf(copied)).toEqual(leaseStateOf(seeded[0]!));
    expect(copied!.version).toBeGreaterThan(old!.version);
    await source.close();
    await target.close();
  });
});
