import { describe, expect, it } from 'vitest';
import { dynamoBackend, leasehold, postgresBackend, redisBackend, sharedBackends } from './support.js';

const shared = sharedBackends();

describe('leasehold setup', () => {
  it('creates the Postgres tables and records the schema version, after which doctor passes and a second setup does nothing', async () => {
    const backend = await postgresBackend(shared.pool, { migrated: false });
    const schema = new URL(backend.url).searchParams.get('schema') ?? '';
    const tables = `${schema}.leasehold_leases, ${schema}.leasehold_leaders, ${schema}.leasehold_rosters, ${schema}.leasehold_members in ${backend.url}`;

    const first = await leasehold('setup', '--storage', backend.url);
    const doctor = await leasehold('doctor', '--storage', backend.url);
    const again = await leasehold('setup', '--storage', backend.url);

    expect(first).toEqual({
      code: 0,
      stdout: `set up ${tables}: created, schema version 3 recorded in ${schema}.leasehold_migrations\nnext: leasehold doctor --storage URL checks the settings safety needs\n`,
      stderr: '',
    });
    expect(doctor.code).toBe(0);
    expect(again.code).toBe(0);
    expect(again.stdout).toContain(`already set up: ${tables} at schema version 3; nothing to do\n`);
    await backend.close();
  });

  it('creates the DynamoDB table, after which doctor finds it, and says so as JSON with --json', async () => {
    const backend = await dynamoBackend(shared.dynamodb, { created: false });
    const table = new URL(backend.url).hostname;

    const { code, stdout } = await leasehold('setup', '--storage', backend.url, '--json');
    const doctor = await leasehold('doctor', '--storage', backend.url);

    expect(code).toBe(0);
    expect(JSON.parse(stdout)).toEqual({ storage: backend.url, kind: 'dynamodb', tableName: table });
    expect(doctor.stdout).toContain(`✓ table ${table}: present, key schema pk (HASH, S) and sk (RANGE, S)\n`);
  });

  it('says that Redis needs nothing set up', async () => {
    const backend = redisBackend(shared.redis);

    const { code, stdout } = await leasehold('setup', '--storage', backend.url);

    expect(code).toBe(0);
    expect(stdout).toContain(`nothing to set up in ${backend.url}: Redis keys are created by the first write under the key prefix\n`);
    await backend.close();
  });

  it('refuses memory: with exit code 2, since such a store lives inside one process', async () => {
    const { code, stderr } = await leasehold('setup', '--storage', 'memory:');

    expect(code).toBe(2);
    expect(stderr).toBe('leasehold: [cli] storage URL "memory:" names a store inside one process; the command line needs postgres://, redis:// or dynamodb://\n');
  });
});
