import { FAILURE_DOMAIN_FIELD } from '@leasehold/core/adapter';
import { describe, expect, it } from 'vitest';
import { dynamoBackend, freshName, heartbeater, join, leasehold, leaseholdWithEnv, postgresBackend, redisBackend, rosterDigest, seed, sharedBackends } from './support.js';

const shared = sharedBackends();

describe('leasehold status', () => {
  it('prints the members, the leases with their owners\' liveness judged from the roster, and the leader', async () => {
    const backend = await postgresBackend(shared.pool);
    const group = freshName('orders');
    await join(backend.storage, group, 'worker-a', { incarnation: 'a2', leaseDurationMs: 10_000, held: 2, requests: [] });
    await join(backend.storage, group, 'worker-b', { incarnation: 'b1', leaseDurationMs: 3000, held: 0, status: 'dead' });
    await join(backend.storage, group, 'worker-c', { incarnation: 'c1', leaseDurationMs: 3000, held: 0, requests: [{ leaseKey: 'shardId-000', from: 'worker-a' }] });
    await seed(
      backend.storage,
      [
        { group, leaseKey: 'shardId-000', owner: 'worker-a', incarnation: 'a2', epoch: 3, checkpoint: '4955001' },
        { group, leaseKey: 'shardId-001', owner: 'worker-a', incarnation: 'a1', epoch: 1, checkpoint: 'TRIM_HORIZON' },
        { group, leaseKey: 'shardId-002', owner: 'worker-b', incarnation: 'b1', epoch: 7 },
        { group, leaseKey: 'shardId-003' },
        { group, leaseKey: 'shardId-004', owner: 'worker-z', incarnation: 'z1', epoch: 2 },
      ],
      { group, holder: 'worker-a', term: 4 },
    );

    const { code, stdout, stderr } = await leasehold('status', '--storage', backend.url, '--group', group);

    expect(stderr).toBe('');
    expect(code).toBe(0);
    const lines = stdout.split('\n');
    expect(lines[0]).toBe(`group ${group} in ${backend.url}`);
    expect(lines[1]).toBe('leader: worker-a (term 4, version 1, age —)');
    expect(lines).toContainEqual(expect.stringMatching(/^members \(liveness as observed for \d+ms; a member expires once its record has not moved for its lease duration\):$/));
    expect(lines).toContainEqual(expect.stringMatching(/^WORKER\s+DOMAIN\s+INCARNATION\s+STATUS\s+MOVED\s+LEASE\s+HELD\s+LEASES\s+REQUESTS$/));
    expect(lines).toContainEqual(expect.stringMatching(/^worker-a \(leader\)\s+-\s+a2\s+alive\s+—\s+10\.0s\s+2\s+1\s+-$/));
    expect(lines).toContainEqual(expect.stringMatching(/^worker-b\s+-\s+b1\s+dead\s+—\s+3\.0s\s+0\s+1\s+-$/));
    expect(lines).toContainEqual(expect.stringMatching(/^worker-c\s+-\s+c1\s+alive\s+—\s+3\.0s\s+0\s+0\s+shardId-000←worker-a$/));
    expect(lines).toContainEqual(expect.stringMatching(/^LEASE\s+OWNER\s+INCARNATION\s+OWNER IS\s+CHECKPOINT\s+EPOCH\s+STALLED$/));
    expect(lines).toContainEqual(expect.stringMatching(/^shardId-000\s+worker-a\s+a2\s+alive\s+4955001\s+3\s+-$/));
    expect(lines).toContainEqual(expect.stringMatching(/^shardId-001\s+worker-a\s+a1\s+gone \(rejoined\)\s+TRIM_HORIZON\s+1\s+-$/));
    expect(lines).toContainEqual(expect.stringMatching(/^shardId-002\s+worker-b\s+b1\s+dead\s+-\s+7\s+-$/));
    expect(lines).toContainEqual(expect.stringMatching(/^shardId-003\s+-\s+-\s+-\s+-\s+0\s+-$/));
    expect(lines).toContainEqual(expect.stringMatching(/^shardId-004\s+worker-z\s+z1\s+gone \(no member\)\s+-\s+2\s+-$/));
    expect(lines).toContain('3 members (2 alive), 5 leases, 1 held, 4 free to take');
    await backend.close();
  });

  it('--json gives every field of every member and lease, with the liveness observed, and the leader', async () => {
    const backend = redisBackend(shared.redis);
    const group = freshName('orders');
    const joined = await join(backend.storage, group, 'w1', { incarnation: 'i1', leaseDurationMs: 2000, held: 1, metadata: { host: 'h' } });
    await seed(backend.storage, [
      { group, leaseKey: 'shardId-010', owner: 'w1', incarnation: 'i1', epoch: 2, checkpoint: '77', parentKeys: ['shardId-001', 'shardId-002'], metadata: { region: 'eu' } },
      { group, leaseKey: 'shardId-011', owner: null },
    ]);

    const { code, stdout } = await leasehold('status', '--storage', backend.url, '--group', group, '--json');

    expect(code).toBe(0);
    expect(JSON.parse(stdout)).toEqual({
      group,
      storage: backend.url,
      observedMs: expect.any(Number) as number,
      members: [
        {
          group,
          workerId: 'w1',
          version: joined.version,
          format: 1,
          incarnation: 'i1',
          leaseDurationMs: 2000,
          status: 'alive',
          held: 1,
          changes: 0,
          requests: [],
          metadata: { host: 'h' },
          liveness: 'alive',
          sinceMovedMs: null,
          sinceMovedAtLeastMs: 0,
          leases: 1,
          leader: false,
          failureDomain: null,
        },
      ],
      leases: [
        {
          group,
          leaseKey: 'shardId-010',
          version: 1,
          format: 1,
          owner: 'w1',
          incarnation: 'i1',
          epoch: 2,
          checkpoint: '77',
          parentKeys: ['shardId-001', 'shardId-002'],
          metadata: { region: 'eu' },
          ownerLiveness: 'alive',
          held: true,
          stalled: null,
        },
        {
          group, leaseKey: 'shardId-011', version: 1, format: 1, owner: null, incarnation: null, epoch: 0, checkpoint: null, parentKeys: [], metadata: {},
          ownerLiveness: null, held: false, stalled: null,
        },
      ],
      leader: null,
      corrupt: [],
      streams: [],
      // A group whose members name no failure domain has none.
      failureDomains: null,
      // The roster digest is shown only by a store that keeps one.
      ...(backend.storage.getRosterDigest === undefined ? {} : { rosterDigest: 0 }),
    });
    await backend.close();
  });

  it('prints the roster digest of a store that keeps one, on the line after the leader and in --json', async () => {
    const backend = await dynamoBackend(shared.dynamodb);
    const group = freshName('orders');
    await join(backend.storage, group, 'w1', { incarnation: 'i1' });
    await rosterDigest(backend.storage).advance(group);
    await rosterDigest(backend.storage).advance(group);

    const text = await leasehold('status', '--storage', backend.url, '--group', group);
    const json = await leasehold('status', '--storage', backend.url, '--group', group, '--json');

    expect([text.code, json.code]).toEqual([0, 0]);
    expect(text.stdout.split('\n').slice(1, 3)).toEqual(['leader: none (no leader record)', 'roster digest: 2 (workers re-read the roster when it moves)']);
    expect((JSON.parse(json.stdout) as { rosterDigest: number }).rosterDigest).toBe(2);
  });

  it("a multi-stream group's streams: leases, held and finished per stream, and whether each is born", async () => {
    const backend = await postgresBackend(shared.pool);
    const group = freshName('tenants');
    await join(backend.storage, group, 'w1', { incarnation: 'i1', leaseDurationMs: 10_000, held: 1 });
    const streams = JSON.stringify({ '111:orders:17': { b: 1 }, '222:payments:18': { p: 'AT_TIMESTAMP:1700000000000' } });
    await seed(
      backend.storage,
      [
        { group, leaseKey: '111:orders:17:shardId-000', owner: 'w1', incarnation: 'i1', epoch: 1, checkpoint: '5' },
        { group, leaseKey: '111:orders:17:shardId-001', checkpoint: 'SHARD_END' },
        { group, leaseKey: '222:payments:18:shardId-000' },
        { group, leaseKey: '333:gone:19:shardId-000' },
      ],
      { group, holder: 'w1', term: 1, metadata: { 'leasehold.streams': streams } },
    );

    const text = await leasehold('status', '--storage', backend.url, '--group', group);
    expect(text.code).toBe(0);
    const lines = text.stdout.split('\n');
    expect(lines).toContainEqual(expect.stringMatching(/^STREAM\s+LEASES\s+HELD\s+FINISHED\s+BORN$/));
    expect(lines).toContainEqual(expect.stringMatching(/^111:orders:17\s+2\s+1\s+1\s+yes$/));
    expect(lines).toContainEqual(expect.stringMatching(/^222:payments:18\s+1\s+0\s+0\s+not yet$/));
    expect(lines).toContainEqual(expect.stringMatching(/^333:gone:19\s+1\s+0\s+0\s+\?$/));
    const json = JSON.parse((await leasehold('status', '--storage', backend.url, '--group', group, '--json')).stdout) as { streams: unknown };
    expect(json.streams).toEqual([
      { streamId: '111:orders:17', leases: 2, held: 1, finished: 1, born: true },
      { streamId: '222:payments:18', leases: 1, held: 0, finished: 0, born: false },
      { streamId: '333:gone:19', leases: 1, held: 0, finished: 0, born: null },
    ]);
    await backend.close();
  });

  it('--observe-ms watches the roster first: a member whose record stands still shows as expired, its leases not held', async () => {
    const backend = await dynamoBackend(shared.dynamodb);
    const group = freshName('orders');
    await join(backend.storage, group, 'stuck', { incarnation: 's1', leaseDurationMs: 300 });
    // The live member's lease duration is below the window, so that it is judged alive only because its record
    // moved, not because it was watched too briefly; it is long enough that a heartbeater on a busy machine
    // (every 20 ms, in this process, which also runs dynalite) keeps it moving.
    const live = heartbeater(backend.storage, group, 'live', { incarnation: 'l1', leaseDurationMs: 1000 });
    await seed(backend.storage, [
      { group, leaseKey: 'shardId-000', owner: 'stuck', incarnation: 's1', epoch: 1 },
      { group, leaseKey: 'shardId-001', owner: 'live', incarnation: 'l1', epoch: 1 },
    ]);

    const { code, stdout } = await leasehold('status', '--storage', backend.url, '--group', group, '--json', '--observe-ms', '1500');
    await live.stop();

    expect(code).toBe(0);
    const view = JSON.parse(stdout) as { observedMs: number; members: { workerId: string; liveness: string; sinceMovedMs: number | null; sinceMovedAtLeastMs: number }[]; leases: { leaseKey: string; ownerLiveness: string; held: boolean }[] };
    const stuck = view.members.find((member) => member.workerId === 'stuck');
    expect(view.observedMs).toBeGreaterThanOrEqual(1500);
    // The stuck member was watched not moving for the whole window as the command measured it, however long
    // the machine took to run it: the window is what the command waits, not what the machine must meet.
    expect(stuck).toMatchObject({ liveness: 'expired', sinceMovedMs: null });
    expect(stuck?.sinceMovedAtLeastMs).toBeGreaterThanOrEqual(view.observedMs);
    expect(view.members.find((member) => member.workerId === 'live')).toMatchObject({ liveness: 'alive', sinceMovedMs: expect.any(Number) as number });
    expect(view.leases.map((lease) => [lease.leaseKey, lease.ownerLiveness, lease.held])).toEqual([
      ['shardId-000', 'expired', false],
      ['shardId-001', 'alive', true],
    ]);
  });

  it('--watch --json prints one line per screen; a member\'s record that has not moved has no age yet, only a lower bound', async () => {
    const backend = await dynamoBackend(shared.dynamodb);
    const group = freshName('orders');
    await join(backend.storage, group, 'w1', { leaseDurationMs: 60_000 });
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000', owner: 'w1', incarnation: 'w1-inc', epoch: 1 }], { group, holder: 'w1', term: 1 });

    const { code, stdout } = await leasehold('status', '--storage', backend.url, '--group', group, '--watch', '--json', '--iterations', '3', '--interval-ms', '30');

    expect(code).toBe(0);
    const screens = stdout.trim().split('\n').map((line) => JSON.parse(line) as { members: { sinceMovedMs: number | null; sinceMovedAtLeastMs: number; leader: boolean }[]; leader: { ageMs: number | null } });
    expect(screens).toHaveLength(3);
    expect(screens.map((screen) => screen.members[0]?.sinceMovedMs)).toEqual([null, null, null]);
    expect(screens[0]?.members[0]?.sinceMovedAtLeastMs).toBe(0);
    expect(screens[2]?.members[0]?.sinceMovedAtLeastMs).toBeGreaterThan(0);
    expect(screens[0]?.members[0]?.leader).toBe(true);
    expect(screens.map((screen) => screen.leader.ageMs)).toEqual([null, null, null]);
  });

  it('lists the members that cannot be read back, and judges the owner of their leases unknown', async () => {
    const backend = await postgresBackend(shared.pool);
    const group = freshName('orders');
    await join(backend.storage, group, 'bad', { incarnation: 'b1' });
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000', owner: 'bad', incarnation: 'b1', epoch: 1 }]);
    await backend.corruptMember?.(group, 'bad');

    const text = await leasehold('status', '--storage', backend.url, '--group', group);
    const json = await leasehold('status', '--storage', backend.url, '--group', group, '--json');

    expect([text.code, json.code]).toEqual([0, 0]);
    expect(text.stdout).toContain(`corrupt members (they cannot be read back; their leases wait for an operator; see leasehold doctor --group ${group}):\n  bad: [storage-postgres] `);
    expect(text.stdout).toMatch(/\nshardId-000\s+bad\s+b1\s+unknown \(member unreadable\)\s+-\s+1\s+-\n/);
    expect(text.stdout).toContain('0 members (0 alive), 1 leases, 0 held, 0 free to take, 1 corrupt members');
    const view = JSON.parse(json.stdout) as { corrupt: { kind: string; key: string | null }[] };
    expect(view.corrupt).toEqual([{ kind: 'member', key: 'bad', error: expect.stringContaining('[storage-postgres]') as string }]);
    await backend.close();
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
    expect(lines).toContainEqual(expect.stringMatching(/^shardId-000\s+worker-a\s+-\s+gone \(no member\)\s+10\s/));
    expect(lines).not.toContainEqual(expect.stringMatching(/^shardId-001\s/));
    expect(lines).toContain(`corrupt leases (they cannot be read back and nobody takes them; see leasehold doctor --group ${group}):`);
    expect(lines).toContainEqual(expect.stringMatching(new RegExp(`^  shardId-001: \\[storage-postgres\\] stored lease "shardId-001" of group "${group}" is corrupt: state is not valid JSON`)));
    expect(lines).toContain('0 members (0 alive), 2 leases, 0 held, 2 free to take, 1 corrupt leases');
    const view = JSON.parse(json.stdout) as { leases: { leaseKey: string }[]; corrupt: { kind: string; key: string | null; error: string }[] };
    expect(view.leases.map((lease) => lease.leaseKey)).toEqual(['shardId-000', 'shardId-002']);
    expect(view.corrupt).toEqual([{ kind: 'lease', key: 'shardId-001', error: expect.stringContaining('[storage-postgres] stored lease "shardId-001"') as string }]);
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
    expect(stdout).toContain('0 members (0 alive), 0 leases, 0 held, 0 free to take, 1 corrupt leases');
    await backend.close();
  });

  it("shows each member's failure domain, and per domain its members and the leases they hold, when every member names one", async () => {
    const backend = redisBackend(shared.redis);
    const group = freshName('orders');
    const inDomain = (domain: string): { metadata: Record<string, string> } => ({ metadata: { [FAILURE_DOMAIN_FIELD]: domain, host: 'h' } });
    await join(backend.storage, group, 'worker-a1', { incarnation: 'a1', leaseDurationMs: 10_000, ...inDomain('az-a') });
    await join(backend.storage, group, 'worker-a2', { incarnation: 'a2', leaseDurationMs: 10_000, ...inDomain('az-a') });
    await join(backend.storage, group, 'worker-b1', { incarnation: 'b1', leaseDurationMs: 10_000, ...inDomain('az-b') });
    await join(backend.storage, group, 'worker-b2', { incarnation: 'b2', leaseDurationMs: 10_000, status: 'dead', ...inDomain('az-b') });
    await seed(backend.storage, [
      { group, leaseKey: 'shardId-000', owner: 'worker-a1', incarnation: 'a1', epoch: 1 },
      { group, leaseKey: 'shardId-001', owner: 'worker-a1', incarnation: 'a1', epoch: 1 },
      { group, leaseKey: 'shardId-002', owner: 'worker-a2', incarnation: 'a2', epoch: 1 },
      { group, leaseKey: 'shardId-003', owner: 'worker-b1', incarnation: 'b1', epoch: 1 },
      { group, leaseKey: 'shardId-004', owner: 'worker-b2', incarnation: 'b2', epoch: 1 },
    ]);

    const text = await leasehold('status', '--storage', backend.url, '--group', group);
    const json = await leasehold('status', '--storage', backend.url, '--group', group, '--json');

    expect([text.code, text.stderr, json.code]).toEqual([0, '', 0]);
    const lines = text.stdout.split('\n');
    expect(lines).toContainEqual(expect.stringMatching(/^WORKER\s+DOMAIN\s+INCARNATION\s+STATUS\s/));
    expect(lines).toContainEqual(expect.stringMatching(/^worker-a1\s+az-a\s+a1\s+alive\s/));
    expect(lines).toContainEqual(expect.stringMatching(/^worker-b2\s+az-b\s+b2\s+dead\s/));
    const at = lines.indexOf("failure domains (every member alive in its record names one: the watchers' ring spreads each domain's members, so that a member's watchers are on other domains):");
    expect(at).toBeGreaterThan(0);
    expect(lines.slice(at + 1, at + 5)).toEqual([
      expect.stringMatching(/^DOMAIN\s+MEMBERS\s+ALIVE\s+LEASES\s+HELD$/),
      expect.stringMatching(/^az-a\s+2\s+2\s+3\s+3$/),
      // The dead member's lease names it but is not held.
      expect.stringMatching(/^az-b\s+2\s+1\s+2\s+1$/),
      '',
    ]);
    expect(text.stdout).not.toContain('warning:');
    const view = JSON.parse(json.stdout) as { members: { workerId: string; failureDomain: string | null; metadata: Record<string, string> }[]; failureDomains: unknown };
    expect(view.members.map((member) => [member.workerId, member.failureDomain])).toEqual([
      ['worker-a1', 'az-a'],
      ['worker-a2', 'az-a'],
      ['worker-b1', 'az-b'],
      ['worker-b2', 'az-b'],
    ]);
    // The metadata stays as stored, the domain's field with the others.
    expect(view.members[0]?.metadata).toEqual({ [FAILURE_DOMAIN_FIELD]: 'az-a', host: 'h' });
    expect(view.failureDomains).toEqual({
      ring: 'spread',
      problem: null,
      domains: [
        { domain: 'az-a', members: 2, alive: 2, leases: 3, held: 3 },
        { domain: 'az-b', members: 2, alive: 1, leases: 2, held: 1 },
      ],
    });
    await backend.close();
  });

  it('warns that the failure domains give no protection when some members alive in their records name one and others none', async () => {
    const backend = await postgresBackend(shared.pool);
    const group = freshName('orders');
    await join(backend.storage, group, 'worker-a', { incarnation: 'a1', leaseDurationMs: 10_000, metadata: { [FAILURE_DOMAIN_FIELD]: 'host-1' } });
    await join(backend.storage, group, 'worker-b', { incarnation: 'b1', leaseDurationMs: 10_000, metadata: { [FAILURE_DOMAIN_FIELD]: 'host-2' } });
    // A worker of an earlier release, or one not given the option: every worker then orders the plain ring.
    await join(backend.storage, group, 'worker-old', { incarnation: 'o1', leaseDurationMs: 10_000 });
    // A dead member without a domain is on nobody's ring: it is counted, but not warned about.
    await join(backend.storage, group, 'worker-gone', { incarnation: 'g1', leaseDurationMs: 10_000, status: 'dead' });
    await seed(backend.storage, [
      { group, leaseKey: 'shardId-000', owner: 'worker-a', incarnation: 'a1', epoch: 1 },
      { group, leaseKey: 'shardId-001', owner: 'worker-old', incarnation: 'o1', epoch: 1 },
    ]);

    const text = await leasehold('status', '--storage', backend.url, '--group', group);
    const json = await leasehold('status', '--storage', backend.url, '--group', group, '--json');

    expect([text.code, text.stderr, json.code]).toEqual([0, '', 0]);
    const lines = text.stdout.split('\n');
    expect(lines).toContainEqual(expect.stringMatching(/^worker-a\s+host-1\s+a1\s+alive\s/));
    expect(lines).toContainEqual(expect.stringMatching(/^worker-old\s+-\s+o1\s+alive\s/));
    const at = lines.indexOf('failure domains:');
    expect(at).toBeGreaterThan(0);
    expect(lines.slice(at + 1, at + 7)).toEqual([
      expect.stringMatching(/^DOMAIN\s+MEMBERS\s+ALIVE\s+LEASES\s+HELD$/),
      expect.stringMatching(/^host-1\s+1\s+1\s+1\s+1$/),
      expect.stringMatching(/^host-2\s+1\s+1\s+0\s+0$/),
      expect.stringMatching(/^-\s+2\s+1\s+1\s+1$/),
      'warning: 1 member alive in its record names no failure domain (worker-old) while others name one: every worker then orders the plain ring, ' +
        'so the failure domains give no protection (a domain lost at once can take a member with all its watchers); give every worker a failureDomain',
      '',
    ]);
    const view = JSON.parse(json.stdout) as { failureDomains: { ring: string; problem: unknown } };
    expect(view.failureDomains.ring).toBe('plain');
    expect(view.failureDomains.problem).toEqual({ kind: 'mixed', withoutDomain: ['worker-old'] });
    await backend.close();
  });

  it('warns that the failure domains give no protection when one domain holds every member alive in its record', async () => {
    const backend = await dynamoBackend(shared.dynamodb);
    const group = freshName('orders');
    await join(backend.storage, group, 'worker-a', { incarnation: 'a1', leaseDurationMs: 10_000, metadata: { [FAILURE_DOMAIN_FIELD]: 'eu-west-1a' } });
    await join(backend.storage, group, 'worker-b', { incarnation: 'b1', leaseDurationMs: 10_000, metadata: { [FAILURE_DOMAIN_FIELD]: 'eu-west-1a' } });
    // Another domain only a dead member names does not spread the ring of the live ones.
    await join(backend.storage, group, 'worker-c', { incarnation: 'c1', leaseDurationMs: 10_000, status: 'dead', metadata: { [FAILURE_DOMAIN_FIELD]: 'eu-west-1b' } });
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000', owner: 'worker-b', incarnation: 'b1', epoch: 1 }]);

    const text = await leasehold('status', '--storage', backend.url, '--group', group);
    const json = await leasehold('status', '--storage', backend.url, '--group', group, '--json');

    expect([text.code, text.stderr, json.code]).toEqual([0, '', 0]);
    const lines = text.stdout.split('\n');
    const at = lines.indexOf('failure domains:');
    expect(at).toBeGreaterThan(0);
    expect(lines.slice(at + 1, at + 6)).toEqual([
      expect.stringMatching(/^DOMAIN\s+MEMBERS\s+ALIVE\s+LEASES\s+HELD$/),
      expect.stringMatching(/^eu-west-1a\s+2\s+2\s+1\s+1$/),
      expect.stringMatching(/^eu-west-1b\s+1\s+0\s+0\s+0$/),
      'warning: every member alive in its record names the one failure domain "eu-west-1a": the watchers\' ring has no other domain to spread them over, ' +
        'so the failure domains give no protection; name two or more (one per host or zone)',
      '',
    ]);
    const view = JSON.parse(json.stdout) as { failureDomains: unknown };
    expect(view.failureDomains).toEqual({
      ring: 'plain',
      problem: { kind: 'single-domain', domain: 'eu-west-1a' },
      domains: [
        { domain: 'eu-west-1a', members: 2, alive: 2, leases: 1, held: 1 },
        { domain: 'eu-west-1b', members: 1, alive: 0, leases: 0, held: 0 },
      ],
    });
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
    expect(lines).toContainEqual(expect.stringMatching(/^shardId-000\s+worker-a\s+-\s+gone \(no member\)\s+-\s+1\s+handler 2m\d\ds$/));
    expect(lines).toContainEqual(expect.stringMatching(/^shardId-001\s+worker-a\s+-\s+gone \(no member\)\s+-\s+1\s+-$/));
    expect(lines).toContain('0 members (0 alive), 2 leases, 0 held, 2 free to take, 1 stalled');
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

    expect(text.stdout).toContain('0 members (0 alive), 2 leases, 0 held, 2 free to take, 1 records of a record format newer than 1 (upgrade the CLI)\n');
    expect((JSON.parse(json.stdout) as { leases: { format: number }[] }).leases.map((lease) => lease.format)).toEqual([1, 3]);
    await backend.close();
  });

  it('a group of 1,000 members: the table shows at most --member-rows of them, those to look at first, counts the others, and every count covers all 1,000', async () => {
    const backend = await postgresBackend(shared.pool);
    const group = freshName('fleet');
    const ids = Array.from({ length: 1000 }, (_, i) => `worker-${String(i).padStart(4, '0')}`);
    const dead = new Set(['worker-0007', 'worker-0500', 'worker-0999']);
    for (let start = 0; start < ids.length; start += 50) {
      await Promise.all(
        ids.slice(start, start + 50).map((workerId) =>
          join(backend.storage, group, workerId, {
            incarnation: `${workerId}-i1`,
            leaseDurationMs: 600_000,
            status: dead.has(workerId) ? 'dead' : 'alive',
            held: 1,
            requests: workerId === 'worker-0300' ? [{ leaseKey: 'shardId-0000', from: 'worker-0000' }] : [],
          }),
        ),
      );
      await Promise.all(
        ids.slice(start, start + 50).map((workerId, i) => seed(backend.storage, [{ group, leaseKey: `shardId-${String(start + i).padStart(4, '0')}`, owner: workerId, incarnation: `${workerId}-i1`, epoch: 1 }])),
      );
    }
    await seed(backend.storage, [], { group, holder: 'worker-0600', term: 2 });

    const text = await leasehold('status', '--storage', backend.url, '--group', group);

    expect(text.stderr).toBe('');
    expect(text.code).toBe(0);
    const lines = text.stdout.split('\n');
    const memberRows = lines.filter((line) => /^worker-\d{4}[ (]/.test(line));
    expect(memberRows).toHaveLength(50);
    // The dead ones, the leader and the one asking for a handoff come first, then the others by worker id.
    const shown = memberRows.map((line) => line.slice(0, 'worker-0000'.length));
    expect(shown).toEqual([...ids.slice(0, 46), 'worker-0300', 'worker-0500', 'worker-0600', 'worker-0999']);
    expect(lines).toContainEqual(expect.stringMatching(/^worker-0600 \(leader\)\s+-\s+worker-0600-i1\s+alive\s/));
    expect(lines).toContainEqual(expect.stringMatching(/^worker-0999\s+-\s+worker-0999-i1\s+dead\s/));
    expect(lines).toContain('... and 950 more members not shown: 950 alive (--member-rows 1000 shows every one; --json and leasehold member list give them all)');
    expect(lines).toContain('1000 members (997 alive), 1000 leases, 997 held, 3 free to take');

    const all = await leasehold('status', '--storage', backend.url, '--group', group, '--member-rows', '1000');
    expect(all.code).toBe(0);
    expect(all.stdout.split('\n').filter((line) => /^worker-\d{4}[ (]/.test(line))).toHaveLength(1000);
    expect(all.stdout).not.toContain('more members not shown');

    const json = await leasehold('status', '--storage', backend.url, '--group', group, '--json');
    expect(json.code).toBe(0);
    const view = JSON.parse(json.stdout) as { members: { workerId: string; leases: number }[]; leases: unknown[] };
    expect(view.members.map((member) => member.workerId)).toEqual(ids);
    expect(view.members.every((member) => member.leases === 1)).toBe(true);
    expect(view.leases).toHaveLength(1000);

    const list = await leasehold('member', 'list', '--storage', backend.url, '--group', group);
    expect(list.code).toBe(0);
    expect(list.stdout.split('\n').filter((line) => /^worker-\d{4} /.test(line))).toHaveLength(1000);
    expect(list.stdout).toContain('1000 members (997 alive, 3 dead, as they last wrote)\n');
    await backend.close();
  }, 300_000);

  it('refuses a --member-rows that is not a whole number of at least 1, naming it', async () => {
    const { code, stderr } = await leasehold('status', '--storage', 'redis://127.0.0.1:1', '--group', 'g', '--member-rows', '0');

    expect(code).toBe(2);
    expect(stderr).toBe('leasehold: [cli] --member-rows must be a whole number of at least 1, got "0"\n');
  });

  it('fails with one line naming a group the storage does not hold', async () => {
    const backend = redisBackend(shared.redis);

    const { code, stdout, stderr } = await leasehold('status', '--storage', backend.url, '--group', 'no-such-group');

    expect(code).toBe(1);
    expect(stdout).toBe('');
    expect(stderr).toBe(`leasehold: [cli] group "no-such-group" has no leases, no leader record and no members in "${backend.url}"\n`);
  });

  it.each([
    ['ftp://example/x', 'leasehold: [connect] storage URL "ftp://example/x" has unknown scheme "ftp:"; expected postgres://, redis://, dynamodb:// or memory:\n'],
    ['not a url', 'leasehold: [connect] storage URL "not a url" is not a URL; expected postgres://..., redis://..., dynamodb://TABLE?region=... or memory:\n'],
    ['memory:', 'leasehold: [cli] storage URL "memory:" names a store inside one process; the command line needs postgres://, redis:// or dynamodb://\n'],
    ['dynamodb://t1?region=eu-west-1&endpoint=localhost:8000', 'leasehold: [connect] storage URL "dynamodb://t1?region=eu-west-1&endpoint=localhost:8000" has endpoint "localhost:8000", which is not an http:// or https:// URL\n'],
  ])('refuses the malformed storage URL %s with one line and exit code 2', async (url, message) => {
    const { code, stderr } = await leasehold('status', '--storage', url, '--group', 'g');

    expect(code).toBe(2);
    expect(stderr).toBe(message);
  });

  it('takes the storage URL from LEASEHOLD_STORAGE, the variable workers open theirs from, when --storage is not given', async () => {
    const { code, stderr } = await leaseholdWithEnv({ LEASEHOLD_STORAGE: 'ftp://example/x' }, 'status', '--group', 'g');

    expect(code).toBe(2);
    expect(stderr).toBe('leasehold: [connect] storage URL "ftp://example/x" has unknown scheme "ftp:"; expected postgres://, redis://, dynamodb:// or memory:\n');
  });

  it('reports an unreachable backend in one line with exit code 1', async () => {
    const postgres = await leasehold('status', '--storage', 'postgres://root@127.0.0.1:1/test', '--group', 'g');
    const redisDown = await leasehold('status', '--storage', 'redis://:secret@127.0.0.1:1', '--group', 'g');

    expect(postgres.code).toBe(1);
    expect(postgres.stderr).toMatch(/^leasehold: \[storage-postgres\] .*ECONNREFUSED 127\.0\.0\.1:1\n$/);
    expect(redisDown.code).toBe(1);
    expect(redisDown.stderr).toBe('leasehold: [connect] cannot reach Redis at "redis://:***@127.0.0.1:1": connect ECONNREFUSED 127.0.0.1:1\n');
  });
});
