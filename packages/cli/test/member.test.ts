import { MemoryStorage, StorageOutcomeUnknownError, type Storage } from '@leasehold/core';
import { FAILURE_DOMAIN_FIELD } from '@leasehold/core/adapter';
import { describe, expect, it } from 'vitest';
import { advanceRosterDigest } from '../src/commands/member.js';
import { dynamoBackend, freshName, heartbeater, join, leasehold, postgresBackend, redisBackend, rosterDigest, seed, sharedBackends } from './support.js';

const shared = sharedBackends();

describe('leasehold member list', () => {
  it('lists every member as stored, with its version, the leases naming it, and the members that cannot be read back', async () => {
    const backend = await postgresBackend(shared.pool);
    const group = freshName('orders');
    const a = await join(backend.storage, group, 'worker-a', { incarnation: 'a1', leaseDurationMs: 10_000, held: 1 });
    const b = await join(backend.storage, group, 'worker-b', { incarnation: 'b1', leaseDurationMs: 3000, status: 'dead' });
    await join(backend.storage, group, 'worker-c', { incarnation: 'c1' });
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000', owner: 'worker-a', incarnation: 'a1', epoch: 1 }]);
    await backend.corruptMember?.(group, 'worker-c');

    const text = await leasehold('member', 'list', '--storage', backend.url, '--group', group);
    const json = await leasehold('member', 'list', '--storage', backend.url, '--group', group, '--json');

    expect([text.code, json.code]).toEqual([0, 0]);
    const lines = text.stdout.split('\n');
    expect(lines[0]).toMatch(/^WORKER\s+DOMAIN\s+VERSION\s+INCARNATION\s+STATUS\s+LEASE\s+HELD\s+LEASES\s+FORMAT$/);
    expect(lines).toContainEqual(expect.stringMatching(new RegExp(`^worker-a\\s+-\\s+${a.version}\\s+a1\\s+alive\\s+10\\.0s\\s+1\\s+1\\s+1$`)));
    expect(lines).toContainEqual(expect.stringMatching(new RegExp(`^worker-b\\s+-\\s+${b.version}\\s+b1\\s+dead\\s+3\\.0s\\s+0\\s+0\\s+1$`)));
    expect(lines).toContainEqual(expect.stringMatching(/^worker-c\s+\?\s+\?\s+\?\s+corrupt\s+\?/));
    expect(text.stdout).toContain('worker-c: [storage-postgres] ');
    const view = JSON.parse(json.stdout) as { members: { workerId: string; version: number; leases: number }[]; corrupt: { workerId: string }[] };
    expect(view.members.map((member) => [member.workerId, member.version, member.leases])).toEqual([
      ['worker-a', a.version, 1],
      ['worker-b', b.version, 0],
    ]);
    expect(view.corrupt.map((error) => error.workerId)).toEqual(['worker-c']);
    await backend.close();
  });

  it("shows each member's failure domain, and - for a member that names none, in the table and in --json", async () => {
    const backend = redisBackend(shared.redis);
    const group = freshName('orders');
    const a = await join(backend.storage, group, 'worker-a', { incarnation: 'a1', leaseDurationMs: 10_000, metadata: { [FAILURE_DOMAIN_FIELD]: 'rack-7' } });
    const b = await join(backend.storage, group, 'worker-b', { incarnation: 'b1', leaseDurationMs: 10_000 });

    const text = await leasehold('member', 'list', '--storage', backend.url, '--group', group);
    const json = await leasehold('member', 'list', '--storage', backend.url, '--group', group, '--json');

    expect([text.code, json.code]).toEqual([0, 0]);
    const lines = text.stdout.split('\n');
    expect(lines[0]).toMatch(/^WORKER\s+DOMAIN\s+VERSION\s/);
    expect(lines).toContainEqual(expect.stringMatching(new RegExp(`^worker-a\\s+rack-7\\s+${a.version}\\s+a1\\s+alive\\s`)));
    expect(lines).toContainEqual(expect.stringMatching(new RegExp(`^worker-b\\s+-\\s+${b.version}\\s+b1\\s+alive\\s`)));
    const view = JSON.parse(json.stdout) as { members: { workerId: string; failureDomain: string | null; metadata: Record<string, string> }[] };
    expect(view.members.map((member) => [member.workerId, member.failureDomain, member.metadata])).toEqual([
      ['worker-a', 'rack-7', { [FAILURE_DOMAIN_FIELD]: 'rack-7' }],
      ['worker-b', null, {}],
    ]);
    await backend.close();
  });
});

describe('leasehold member remove', () => {
  it('removes a dead member at once, at the version given, and names the leases it frees', async () => {
    const backend = redisBackend(shared.redis);
    const group = freshName('orders');
    const dead = await join(backend.storage, group, 'crashed', { incarnation: 'c1', leaseDurationMs: 600_000, status: 'dead' });
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000', owner: 'crashed', incarnation: 'c1', epoch: 1 }]);

    const { code, stdout, stderr } = await leasehold('member', 'remove', '--storage', backend.url, '--group', group, '--worker', 'crashed', '--at-version', String(dead.version));

    expect([code, stderr]).toEqual([0, '']);
    expect(stdout).toBe(`removed dead member (incarnation "c1") "crashed" at version ${dead.version}\n1 leases named it and are free to take now: shardId-000\n`);
    expect((await backend.storage.getRoster(group)).members).toEqual([]);
    await backend.close();
  });

  it('names the removed member in the roster digest\'s advance, so that a worker on a store that keeps the names reads it alone, not the whole roster', async () => {
    const backend = redisBackend(shared.redis);
    const group = freshName('orders');
    const dead = await join(backend.storage, group, 'crashed', { incarnation: 'c1', status: 'dead' });
    await join(backend.storage, group, 'worker-a', { incarnation: 'a1' });
    const digest = rosterDigest(backend.storage);
    const before = await digest.read(group);

    const { code } = await leasehold('member', 'remove', '--storage', backend.url, '--group', group, '--worker', 'crashed', '--at-version', String(dead.version));

    expect(code).toBe(0);
    expect(await backend.storage.getRosterMoves!(group, before)).toEqual({ digest: before + 1, moved: ['crashed'] });
    await backend.close();
  });

  it('refuses a version that is not the member\'s, and removes nothing', async () => {
    const backend = redisBackend(shared.redis);
    const group = freshName('orders');
    const dead = await join(backend.storage, group, 'crashed', { status: 'dead' });

    const { code, stderr } = await leasehold('member', 'remove', '--storage', backend.url, '--group', group, '--worker', 'crashed', '--at-version', String(dead.version + 1));

    expect(code).toBe(1);
    expect(stderr).toBe(`leasehold: [cli] member "crashed" is at version ${dead.version}, not ${dead.version + 1}; nothing was removed (see leasehold member list)\n`);
    expect((await backend.storage.getRoster(group)).members).toHaveLength(1);
    await backend.close();
  });

  it('refuses to remove an alive member whose worker heartbeats', async () => {
    const backend = await dynamoBackend(shared.dynamodb);
    const group = freshName('orders');
    const member = await join(backend.storage, group, 'live', { incarnation: 'l1', leaseDurationMs: 5000 });
    const worker = heartbeater(backend.storage, group, 'live');

    const { code, stderr } = await leasehold('member', 'remove', '--storage', backend.url, '--group', group, '--worker', 'live', '--at-version', String(member.version));
    await worker.stop();

    expect(code).toBe(1);
    expect(stderr).toContain('member "live" is alive in its record: watching it for 5.0s to see whether its worker heartbeats\n');
    expect(stderr).toContain(`leasehold: [cli] member "live" of group "${group}" is alive: its record moved while watched (its worker heartbeats); stop its worker first, nothing was removed\n`);
    expect((await backend.storage.getRoster(group)).members.map((found) => found.workerId)).toEqual(['live']);
  });

  it('removes an alive member only once watched not moving for its lease duration', async () => {
    const backend = await dynamoBackend(shared.dynamodb);
    const group = freshName('orders');
    const member = await join(backend.storage, group, 'stuck', { incarnation: 's1', leaseDurationMs: 500 });

    const started = Date.now();
    const { code, stdout } = await leasehold('member', 'remove', '--storage', backend.url, '--group', group, '--worker', 'stuck', '--at-version', String(member.version));

    expect(code).toBe(0);
    expect(Date.now() - started).toBeGreaterThanOrEqual(500);
    expect(stdout).toBe(`removed expired member (incarnation "s1") "stuck" at version ${member.version}\n`);
    expect((await backend.storage.getRoster(group)).members).toEqual([]);
  });

  it('removes a member that cannot be read back once it stayed unreadable for --observe-ms, at the stored version given', async () => {
    const backend = await postgresBackend(shared.pool);
    const group = freshName('orders');
    await join(backend.storage, group, 'bad', { incarnation: 'b1' });
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000', owner: 'bad', incarnation: 'b1', epoch: 1 }]);
    const version = (await backend.corruptMember?.(group, 'bad')) ?? 0;

    const { code, stdout, stderr } = await leasehold('member', 'remove', '--storage', backend.url, '--group', group, '--worker', 'bad', '--at-version', String(version), '--observe-ms', '300');

    expect(code).toBe(0);
    expect(stderr).toBe('member "bad" cannot be read back: watching it for 300ms to see whether its worker heartbeats\n');
    expect(stdout).toBe(`removed unreadable member "bad" at version ${version}\nthe leases that named it are free to take now\n`);
    expect(await backend.storage.getRoster(group)).toEqual({ group, members: [], corrupt: [] });
    await backend.close();
  });

  it('names a member the group does not have', async () => {
    const backend = redisBackend(shared.redis);
    const group = freshName('orders');
    await join(backend.storage, group, 'someone', { status: 'dead' });

    const { code, stderr } = await leasehold('member', 'remove', '--storage', backend.url, '--group', group, '--worker', 'nobody', '--at-version', '1');

    expect(code).toBe(1);
    expect(stderr).toBe(`leasehold: [cli] group "${group}" has no member "nobody" in "${backend.url}"\n`);
    await backend.close();
  });
});

describe('leasehold member remove and the roster digest', () => {
  it('advances the roster digest after a removal that applied, so that workers reading only the digest see it, and not after one refused', async () => {
    const backend = await dynamoBackend(shared.dynamodb);
    const group = freshName('orders');
    const dead = await join(backend.storage, group, 'crashed', { incarnation: 'c1', status: 'dead' });
    await join(backend.storage, group, 'other', { status: 'dead' });
    expect(await rosterDigest(backend.storage).advance(group)).toBe(1);

    const refused = await leasehold('member', 'remove', '--storage', backend.url, '--group', group, '--worker', 'crashed', '--at-version', String(dead.version + 1));
    expect(refused.code).toBe(1);
    expect(await rosterDigest(backend.storage).read(group)).toBe(1);

    const removed = await leasehold('member', 'remove', '--storage', backend.url, '--group', group, '--worker', 'crashed', '--at-version', String(dead.version));
    expect([removed.code, removed.stderr]).toEqual([0, '']);
    expect(await rosterDigest(backend.storage).read(group)).toBe(2);
    expect((await backend.storage.getRoster(group)).members.map((member) => member.workerId)).toEqual(['other']);
  });

  /** A store whose first `failures` advances throw, as a lost answer does. */
  class FlakyDigest extends MemoryStorage {
    constructor(private failures: number) {
      super();
    }

    override async advanceRosterDigest(group: string): Promise<number> {
      if (this.failures-- > 0) throw new StorageOutcomeUnknownError('[core] injected: the answer was lost');
      return super.advanceRosterDigest(group);
    }
  }

  it('an advance that fails is sent again; one that fails every time is an error saying the write stands', async () => {
    const flaky = new FlakyDigest(2);
    await advanceRosterDigest(flaky, 'g', 'removal of member "w"', { pauseMs: 0 });
    expect(await flaky.getRosterDigest('g')).toBe(1);

    const broken = new FlakyDigest(3);
    await expect(advanceRosterDigest(broken, 'g', 'removal of member "w"', { pauseMs: 0 })).rejects.toThrow(
      '[cli] the removal of member "w" stands, but the roster digest of group "g" could not be advanced after 3 attempt(s) ([core] injected: the answer was lost): workers that watch the digest see the change once it next moves',
    );
    expect(await broken.getRosterDigest('g')).toBe(0);
  });

  it('does nothing on a store that keeps no digest', async () => {
    const store = new MemoryStorage();
    const withoutDigest = Object.assign(Object.create(store) as Storage, { advanceRosterDigest: undefined });
    await expect(advanceRosterDigest(withoutDigest, 'g', 'removal of member "w"')).resolves.toBeUndefined();
    expect(await store.getRosterDigest('g')).toBe(0);
  });
});
