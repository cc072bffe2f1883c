import { startRedisServer } from '@leasehold/local-stack';
import { describe, expect, it } from 'vitest';
import { createWrongTable, dynamoBackend, freshName, join as joinMember, leasehold, postgresBackend, redisBackend, seed, sharedBackends } from './support.js';

const shared = sharedBackends();

describe('leasehold doctor', () => {
  it('passes a migrated Postgres schema: connection, primary, tables, schema version, write grants, fsync', async () => {
    const backend = await postgresBackend(shared.pool);
    const schema = new URL(backend.url).searchParams.get('schema') ?? '';

    const { code, stdout } = await leasehold('doctor', '--storage', backend.url);

    expect(code).toBe(0);
    const lines = stdout.trim().split('\n');
    expect(lines.every((line) => line.startsWith('✓ '))).toBe(true);
    expect(lines.map((line) => line.split(':')[0])).toEqual([
      '✓ connect',
      '✓ primary',
      `✓ table ${schema}.leasehold_leases`,
      `✓ table ${schema}.leasehold_leaders`,
      `✓ table ${schema}.leasehold_rosters`,
      `✓ table ${schema}.leasehold_members`,
      '✓ schema version',
      '✓ write permission',
      '✓ fsync',
      '✓ synchronous_commit',
    ]);
    expect((await shared.pool.query(`SELECT count(*)::int AS n FROM "${schema}".leasehold_leases`)).rows[0]).toEqual({ n: 0 });
    await backend.close();
  });

  it('fails a Postgres schema without tables and names the command that creates them', async () => {
    const backend = await postgresBackend(shared.pool, { migrated: false });
    const schema = new URL(backend.url).searchParams.get('schema') ?? '';

    const { code, stdout, stderr } = await leasehold('doctor', '--storage', backend.url);

    expect(code).toBe(1);
    const hint = 'run leasehold setup with the same --storage URL: it creates the tables and records the schema version (what migrate() of @leasehold/storage-postgres does)';
    expect(stdout).toContain(`✗ table ${schema}.leasehold_leases: missing: ${hint}\n`);
    expect(stdout).toContain(`✗ table ${schema}.leasehold_rosters: missing: ${hint}\n`);
    expect(stdout).toContain(`✗ table ${schema}.leasehold_members: missing: ${hint}\n`);
    expect(stdout).toContain(`✗ schema version: none recorded, 3 expected: ${hint}\n`);
    expect(stderr).toMatch(
      /^leasehold: \[cli\] 6 of \d+ checks failed for .*: table .*leasehold_leases, table .*leasehold_leaders, table .*leasehold_rosters, table .*leasehold_members, schema version, write permission\n$/,
    );
    await backend.close();
  });

  it('fails a Redis without durable persistence and names the settings, with --json for scripts', async () => {
    const server = await startRedisServer({ args: ['--appendonly', 'no', '--save', '3600 1'] });
    const { code, stdout } = await leasehold('doctor', '--storage', `redis://127.0.0.1:${server.port}?prefix=doctor-test:`, '--json');
    await server.stop();

    expect(code).toBe(1);
    const report = JSON.parse(stdout) as { ok: boolean; checks: { status: string; name: string; detail: string }[] };
    expect(report.ok).toBe(false);
    const byName = new Map(report.checks.map((check) => [check.name, check]));
    expect(byName.get('connect')?.status).toBe('pass');
    expect(byName.get('role')).toEqual({ status: 'pass', name: 'role', detail: 'primary' });
    expect(byName.get('appendonly')?.status).toBe('fail');
    expect(byName.get('appendonly')?.detail).toBe('no: only RDB snapshots (save "3600 1"), a crash loses the writes since the last one; set appendonly yes');
    expect(byName.get('appendfsync')?.status).toBe('fail');
    expect(byName.get('write permission')).toEqual({ status: 'pass', name: 'write permission', detail: expect.stringMatching(/^a Lua script wrote and deleted "doctor-test:doctor:[0-9a-f]+"$/) });
  });

  it('passes a Redis with appendonly yes and appendfsync always', async () => {
    const server = await startRedisServer({ args: ['--appendonly', 'yes', '--appendfsync', 'always', '--save', ''] });
    try {
      const { code, stdout } = await leasehold('doctor', '--storage', `redis://127.0.0.1:${server.port}`);

      expect(code).toBe(0);
      expect(stdout).toContain('✓ appendonly: yes\n');
      expect(stdout).toContain('✓ appendfsync: always\n');
      expect(stdout).toContain('✓ eviction: no maxmemory\n');
      expect(stdout).not.toContain('✗');
    } finally {
      await server.stop();
    }
  });

  it('passes a DynamoDB table of the right key schema and probes permissions without writing', async () => {
    const backend = await dynamoBackend(shared.dynamodb);
    const table = new URL(backend.url).hostname;

    const { code, stdout } = await leasehold('doctor', '--storage', backend.url);

    expect(code).toBe(0);
    expect(stdout).toContain(`✓ table ${table}: present, key schema pk (HASH, S) and sk (RANGE, S)\n`);
    expect(stdout).toContain('✓ permissions: Query, PutItem and UpdateItem allowed (probed with conditions that write nothing)\n');
    expect(stdout).not.toContain('✗');
  });

  it('fails a DynamoDB table that is missing, naming the command that creates it, or has another key schema', async () => {
    const missing = await dynamoBackend(shared.dynamodb, { created: false });
    const wrongName = freshName('wrong');
    await createWrongTable(shared.dynamodb.client, wrongName);
    const wrong = missing.url.replace(new URL(missing.url).hostname, wrongName);

    const absent = await leasehold('doctor', '--storage', missing.url);
    const misshapen = await leasehold('doctor', '--storage', wrong);

    expect(absent.code).toBe(1);
    expect(absent.stdout).toMatch(/^✗ table \w+: missing: run leasehold setup with the same --storage URL: it creates the table \(what createTable\(\) of @leasehold\/storage-dynamodb does\)\n$/);
    expect(misshapen.code).toBe(1);
    expect(misshapen.stdout).toContain(`has key schema id (HASH, S); expected pk (HASH, S), sk (RANGE, S)`);
  });

  it('--group fails each corrupt lease, stalled shard and record of a newer Leasehold, each with what to do', async () => {
    const backend = await postgresBackend(shared.pool);
    const group = freshName('orders');
    await seed(
      backend.storage,
      [
        { group, leaseKey: 'shardId-000', checkpoint: '5' },
        { group, leaseKey: 'shardId-001', owner: 'worker-b', epoch: 2, metadata: { 'leasehold.stalledSince': '2026-12-01T04:00:00.000Z', 'leasehold.stalledReason': 'reader' } },
        { group, leaseKey: 'shardId-002', format: 2 },
      ],
      { group, holder: 'worker-b', term: 1 },
    );
    await backend.corrupt(group, 'shardId-000');

    const { code, stdout, stderr } = await leasehold('doctor', '--storage', backend.url, '--group', group, '--json');

    expect(code).toBe(1);
    const report = JSON.parse(stdout) as { ok: boolean; checks: { status: string; name: string; detail: string }[] };
    const failed = report.checks.filter((check) => check.status === 'fail');
    expect(failed.map((check) => check.name)).toEqual(['corrupt lease shardId-000', 'stalled shard shardId-001', 'record format of lease shardId-002']);
    expect(failed[0]?.detail).toMatch(
      new RegExp(
        `^\\[storage-postgres\\] stored lease "shardId-000" of group "${group}" is corrupt: .+\\. Nobody takes it and the shards after it wait\\. ` +
          `.*leasehold lease delete --group ${group} --key "shardId-000" --at-version <its version in the backend> ` +
          `and create it again with leasehold lease create --group ${group} --key "shardId-000" --checkpoint <position>`,
      ),
    );
    expect(failed[1]?.detail).toMatch(
      /^reader since 2026-12-01T04:00:00.000Z \(.+ ago by this machine's clock\), owner "worker-b": the stream has not answered the owner's reads: check the stream, and the owner's network and credentials$/,
    );
    expect(failed[2]?.detail).toBe('2, written by a newer Leasehold: upgrade the CLI (it knows record format 1)');
    expect(stderr).toMatch(/^leasehold: \[cli\] 3 of \d+ checks failed for .+: corrupt lease shardId-000, stalled shard shardId-001, record format of lease shardId-002\n$/);
    await backend.close();
  });

  it('--group passes a group whose records read back, none stalled and none of a newer format', async () => {
    const backend = redisBackend(shared.redis);
    const group = freshName('orders');
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000' }, { group, leaseKey: 'shardId-001', checkpoint: 'SHARD_END' }], { group, holder: null, term: 3 });

    const { stdout } = await leasehold('doctor', '--storage', backend.url, '--group', group);

    // The shared Redis may lack durable persistence (a failed item of its own); the group's item is what is checked here.
    expect(stdout).toContain(`✓ group ${group}: 0 members, 2 leases and the leader record read back; no dead member named by a lease, none stalled, none of a newer record format than 1\n`);
    await backend.close();
  });

  it('--group fails a corrupt member and a member of a newer Leasehold, and warns of dead members that leases still name', async () => {
    const backend = await postgresBackend(shared.pool);
    const group = freshName('orders');
    await joinMember(backend.storage, group, 'alive-worker', { incarnation: 'a1' });
    await joinMember(backend.storage, group, 'crashed', { incarnation: 'c1', status: 'dead' });
    await joinMember(backend.storage, group, 'left', { incarnation: 'l1', status: 'dead' });
    await joinMember(backend.storage, group, 'bad', { incarnation: 'b1' });
    await joinMember(backend.storage, group, 'future', { incarnation: 'f1', format: 2 });
    await seed(backend.storage, [
      { group, leaseKey: 'shardId-000', owner: 'crashed', incarnation: 'c1', epoch: 1, checkpoint: '5' },
      { group, leaseKey: 'shardId-001', owner: 'bad', incarnation: 'b1', epoch: 1 },
      { group, leaseKey: 'shardId-002', owner: 'left', incarnation: 'l1', epoch: 1, checkpoint: 'SHARD_END' },
      { group, leaseKey: 'shardId-003', owner: 'alive-worker', incarnation: 'a1', epoch: 1 },
    ]);
    await backend.corruptMember?.(group, 'bad');

    const { code, stdout } = await leasehold('doctor', '--storage', backend.url, '--group', group, '--json');

    expect(code).toBe(1);
    const report = JSON.parse(stdout) as { checks: { status: string; name: string; detail: string }[] };
    const problems = report.checks.filter((check) => check.status !== 'pass');
    expect(problems.map((check) => [check.status, check.name])).toEqual([
      ['fail', 'corrupt member bad'],
      ['warn', 'dead member crashed'],
      ['fail', 'record format of member future'],
    ]);
    expect(problems[0]?.detail).toMatch(
      new RegExp(
        `^\\[storage-postgres\\] .+\\. Whether its worker is alive cannot be told, so nobody takes the leases that name it \\(shardId-001\\)\\. ` +
          `Stop its worker if it runs, then remove it with leasehold member remove --group ${group} --worker "bad" --at-version <its version in the backend>`,
      ),
    );
    expect(problems[1]?.detail).toBe(
      'declared dead (incarnation "c1"), and 1 unfinished leases still name it: shardId-000. They are free to take: a running worker of the group takes them at its next take tick; if they stay, no worker of the group runs (or every one holds its maxLeasesPerWorker)',
    );
    expect(problems[2]?.detail).toBe('2, written by a newer Leasehold: upgrade the CLI (it knows record format 1)');
    await backend.close();
  });
});
