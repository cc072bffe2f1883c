import { describe, expect, it } from 'vitest';
import { dynamoBackend, freshName, leasehold, postgresBackend, redisBackend, seed, sharedBackends } from './support.js';

const shared = sharedBackends();

describe('leasehold status', () => {
  it('prints the lease table, the workers with their lease counts and the leader', async () => {
    const backend = await postgresBackend(shared.pool);
    const group = freshName('orders');
    await seed(
      backend.storage,
      [
        { group, leaseKey: 'shardId-000', owner: 'worker-a', epoch: 3, checkpoint: '4955001' },
        { group, leaseKey: 'shardId-001', owner: 'worker-a', epoch: 1, checkpoint: 'TRIM_HORIZON', pendingOwner: 'worker-b' },
        { group, leaseKey: 'shardId-002', owner: 'worker-b', epoch: 7 },
        { group, leaseKey: 'shardId-003' },
      ],
      { group, holder: 'worker-a', term: 4 },
    );

    const { code, stdout, stderr } = await leasehold('status', '--storage', backend.url, '--group', group);

    expect(stderr).toBe('');
    expect(code).toBe(0);
    const lines = stdout.split('\n');
    expect(lines[0]).toBe(`group ${group} in ${backend.url}`);
    expect(lines[1]).toBe('leader: worker-a (term 4, version 1, age —)');
    expect(lines).toContainEqual(expect.stringMatching(/^LEASE\s+OWNER\s+CHECKPOINT\s+EPOCH\s+VERSION\s+AGE\s+PENDING\s+STALLED$/));
    expect(lines).toContainEqual(expect.stringMatching(/^shardId-000\s+worker-a\s+4955001\s+3\s+1\s+—\s+-\s+-$/));
    expect(lines).toContainEqual(expect.stringMatching(/^shardId-001\s+worker-a\s+TRIM_HORIZON\s+1\s+1\s+—\s+→ worker-b\s+-$/));
    expect(lines).toContainEqual(expect.stringMatching(/^shardId-002\s+worker-b\s+-\s+7\s+1\s+—\s+-\s+-$/));
    expect(lines).toContainEqual(expect.stringMatching(/^shardId-003\s+-\s+-\s+0\s+1\s+—\s+-\s+-$/));
    expect(lines).toContainEqual(expect.stringMatching(/^worker-a\s+2 \(leader\)$/));
    expect(lines).toContainEqual(expect.stringMatching(/^worker-b\s+1$/));
    expect(lines).toContain('4 leases, 1 without owner, 2 workers');
    await backend.close();
  });

  it('--json gives every field of every lease, its record format included, the workers and the leader', async () => {
    const backend = redisBackend(shared.redis);
    const group = freshName('orders');
    await seed(backend.storage, [
      { group, leaseKey: 'shardId-010', owner: 'w1', epoch: 2, checkpoint: '77', parentKeys: ['shardId-001', 'shardId-002'], metadata: { region: 'eu' } },
      { group, leaseKey: 'shardId-011', owner: null },
    ]);

    const { code, stdout } = await leasehold('status', '--storage', backend.url, '--group', group, '--json');

    expect(code).toBe(0);
    expect(JSON.parse(stdout)).toEqual({
      group,
      storage: backend.url,
      leases: [
        {
          group,
          leaseKey: 'shardId-010',
          version: 1,
          format: 1,
          owner: 'w1',
          epoch: 2,
          checkpoint: '77',
          parentKeys: ['shardId-001', 'shardId-002'],
          pendingOwner: null,
          metadata: { region: 'eu' },
          ageMs: null,
          ageAtLeastMs: 0,
          stalled: null,
        },
        {
          group, leaseKey: 'shardId-011', version: 1, format: 1, owner: null, epoch: 0, checkpoint: null, parentKeys: [], pendingOwner: null, metadata: {},
          ageMs: null, ageAtLeastMs: 0, stalled: null,
        },
      ],
      workers: [{ workerId: 'w1', leases: 1, leader: false }],
      leader: null,
      corrupt: [],
    });
    await backend.close();
  });

  it('--watch --json prints one line per screen; an unchanged version has no age yet, only a lower bound', async () => {
    const backend = await dynamoBackend(shared.dynamodb);
    const group = freshName('orders');
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000', owner: 'w1', epoch: 1 }], { group, holder: 'w1', term: 1 });

    const { code, stdout } = await leasehold('status', '--storage', backend.url, '--group', group, '--watch', '--json', '--iterations', '3', '--interval-ms', '30');

    expect(code).toBe(0);
    const screens = stdout.trim().split('\n').map((line) => JSON.parse(line) as { leases: { ageMs: number | null; ageAtLeastMs: number }[]; leader: { ageMs: number | null } });
    expect(screens).toHaveLength(3);
    expect(screens.map((screen) => screen.leases[0]?.ageMs)).toEqual([null, null, null]);
    expect(screens[0]?.leases[0]?.ageAtLeastMs).toBe(0);
    expect(screens[2]?.leases[0]?.ageAtLeastMs).toBeGreaterThan(0);
    expect(screens.map((screen) => screen.leader.ageMs)).toEqual([null, null, null]);
  });

  it('lists the leases that cannot be read back, with their errors, instead of failing', async () => {
    const backend = await postgresBackend(shared.pool);
    const group = freshName('orders');
    await seed(backend.storage, [
      { group, leaseKey: 'shardId-000', owner: 'worker-a', epoch: 1, checkpoint: '10' },
      { group, leaseKey: 'shardId-001', checkpoint: '20' },
      { group, leaseKey: 'shardId-002' },
    ]);
    await backend.corrupt(group, 'shardId-001');

    const text = await leasehold('status', '--storage', backend.url, '--group', group);
    const json = await leasehold('status', '--storage', backend.url, '--group', group, '--json');

    expect([text.code, json.code]).toEqual([0, 0]);
    const lines = text.stdout.split('\n');
    expect(lines).toContainEqual(expect.stringMatching(/^shardId-000\s+worker-a\s+10\s/));
    expect(lines).not.toContainEqual(expect.stringMatching(/^shardId-001\s/));
    expect(lines).toContain(`corrupt leases (they cannot be read back and nobody takes them; see leasehold doctor --group ${group}):`);
    expect(lines).toContainEqual(expect.stringMatching(new RegExp(`^  shardId-001: \\[storage-postgres\\] stored lease "shardId-001" of group "${group}" is corrupt: state is not valid JSON`)));
    expect(lines).toContain('2 leases, 1 without owner, 1 workers, 1 corrupt');
    const view = JSON.parse(json.stdout) as { leases: { leaseKey: string }[]; corrupt: { leaseKey: string | null; error: string }[] };
    expect(view.leases.map((lease) => lease.leaseKey)).toEqual(['shardId-000', 'shardId-002']);
    expect(view.corrupt).toEqual([{ leaseKey: 'shardId-001', error: expect.stringContaining('[storage-postgres] stored lease "shardId-001"') as string }]);
    await backend.close();
  });

  it('knows a group whose only lease is corrupt', async () => {
    const backend = redisBackend(shared.redis);
    const group = freshName('orders');
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000' }]);
    await backend.corrupt(group, 'shardId-000');

    const { code, stdout } = await leasehold('status', '--storage', backend.url, '--group', group);

    expect(code).toBe(0);
    expect(stdout).toContain('  shardId-000: [storage-redis] ');
    expect(stdout).toContain('0 leases, 0 without owner, 0 workers, 1 corrupt');
    await backend.close();
  });

  it('shows the stall a worker reported on a lease, in the table and in --json', async () => {
    const backend = await dynamoBackend(shared.dynamodb);
    const group = freshName('orders');
    const since = new Date(Date.now() - 125_000).toISOString();
    await seed(backend.storage, [
      { group, leaseKey: 'shardId-000', owner: 'worker-a', epoch: 1, metadata: { 'leasehold.stalledSince': since, 'leasehold.stalledReason': 'handler' } },
      { group, leaseKey: 'shardId-001', owner: 'worker-a', epoch: 1 },
    ]);

    const text = await leasehold('status', '--storage', backend.url, '--group', group);
    const json = await leasehold('status', '--storage', backend.url, '--group', group, '--json');

    expect([text.code, json.code]).toEqual([0, 0]);
    const lines = text.stdout.split('\n');
    // Two minutes and some seconds by this machine's clock: the seconds depend on how long the command took.
    expect(lines).toContainEqual(expect.stringMatching(/^shardId-000\s+worker-a\s+-\s+1\s+1\s+—\s+-\s+handler 2m\d\ds$/));
    expect(lines).toContainEqual(expect.stringMatching(/^shardId-001\s+worker-a\s+-\s+1\s+1\s+—\s+-\s+-$/));
    expect(lines).toContain('2 leases, 0 without owner, 1 workers, 1 stalled');
    const view = JSON.parse(json.stdout) as { leases: { leaseKey: string; stalled: { reason: string; since: string; forMs: number | null } | null }[] };
    expect(view.leases[0]?.stalled).toEqual({ reason: 'handler', since, forMs: expect.any(Number) as number });
    expect(view.leases[0]?.stalled?.forMs).toBeGreaterThanOrEqual(125_000);
    expect(view.leases[1]?.stalled).toBeNull();
  });

  it('counts leases of a newer record format in the summary, and gives the format of each in --json', async () => {
    const backend = redisBackend(shared.redis);
    const group = freshName('orders');
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000' }, { group, leaseKey: 'shardId-001', format: 3 }]);

    const text = await leasehold('status', '--storage', backend.url, '--group', group);
    const json = await leasehold('status', '--storage', backend.url, '--group', group, '--json');

    expect(text.stdout).toContain('2 leases, 2 without owner, 0 workers, 1 of a record format newer than 1 (upgrade the CLI)\n');
    expect((JSON.parse(json.stdout) as { leases: { format: number }[] }).leases.map((lease) => lease.format)).toEqual([1, 3]);
    await backend.close();
  });

  it('fails with one line naming a group the storage does not hold', async () => {
    const backend = redisBackend(shared.redis);

    const { code, stdout, stderr } = await leasehold('status', '--storage', backend.url, '--group', 'no-such-group');

    expect(code).toBe(1);
    expect(stdout).toBe('');
    expect(stderr).toBe(`leasehold: [cli] group "no-such-group" has no leases and no leader record in "${backend.url}"\n`);
  });

  it.each([
    ['ftp://example/x', 'leasehold: [cli] storage URL "ftp://example/x" has unknown scheme "ftp:"; expected postgres://, redis:// or dynamodb://\n'],
    ['not a url', 'leasehold: [cli] storage URL "not a url" is not a URL; expected postgres://..., redis://... or dynamodb://TABLE?region=...\n'],
    ['dynamodb://t1?region=eu-west-1&endpoint=localhost:8000', 'leasehold: [cli] storage URL "dynamodb://t1?region=eu-west-1&endpoint=localhost:8000" has endpoint "localhost:8000", which is not an http:// or https:// URL\n'],
  ])('refuses the malformed storage URL %s with one line and exit code 2', async (url, message) => {
    const { code, stderr } = await leasehold('status', '--storage', url, '--group', 'g');

    expect(code).toBe(2);
    expect(stderr).toBe(message);
  });

  it('reports an unreachable backend in one line with exit code 1', async () => {
    const postgres = await leasehold('status', '--storage', 'postgres://root@127.0.0.1:1/test', '--group', 'g');
    const redisDown = await leasehold('status', '--storage', 'redis://:secret@127.0.0.1:1', '--group', 'g');

    expect(postgres.code).toBe(1);
    expect(postgres.stderr).toMatch(/^leasehold: \[storage-postgres\] .*ECONNREFUSED 127\.0\.0\.1:1\n$/);
    expect(redisDown.code).toBe(1);
    expect(redisDown.stderr).toBe('leasehold: [cli] cannot reach Redis at "redis://:***@127.0.0.1:1": connect ECONNREFUSED 127.0.0.1:1\n');
  });
});
