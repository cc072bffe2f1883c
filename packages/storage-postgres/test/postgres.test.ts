import {
  CorruptRecordError,
  InvalidConfigError,
  StorageSchemaError,
  StorageUnavailableError,
  type LeaseChange,
  type LeaseRecord,
  type LeaseState,
} from '@leasehold/core';
import { leaderStateOf, leaseStateOf, memberStateOf } from '@leasehold/core/adapter';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { PostgresStorage, SCHEMA_VERSION } from '../src/index.js';
import { quoteIdentifier } from '../src/schema.js';
import { applied, countingPool, freshSchemaName, serverConfig, useMigratedServer, waitFor } from './support.js';

const { server, storage } = useMigratedServer('lh_postgres', 12);

describe('PostgresStorage options', () => {
  it('refuses a table name that would break out of its quotes, and the table it names survives', async () => {
    const pool = server.pool();
    await pool.query(`CREATE TABLE "${server.schema}".x (id int)`);
    const bad = 'a"; DROP TABLE x; --';
    expect(() => storage({ leaseTable: bad })).toThrow(InvalidConfigError);
    expect(() => storage({ leaseTable: bad })).toThrow(`[storage-postgres] lease table name "a\\"; DROP TABLE x; --" is not a valid identifier`);
    expect(() => new PostgresStorage({ pool, schema: bad })).toThrow(`[storage-postgres] schema name "a\\"; DROP TABLE x; --" is not a valid identifier`);
    expect(() => storage({ leaderTable: 'x'.repeat(64) })).toThrow(/leader table name "x{64}" is not a valid identifier/);
    const { rows } = await pool.query(`SELECT to_regclass($1) AS found`, [`"${server.schema}".x`]);
    expect(rows[0].found).not.toBeNull();
  });

  it('quotes an identifier so that even a hostile one stays a single name', async () => {
    const pool = server.pool();
    const hostile = 'a"; DROP TABLE y; --';
    expect(quoteIdentifier(hostile)).toBe('"a""; DROP TABLE y; --"');
    await pool.query(`CREATE TABLE "${server.schema}".y (id int)`);
    await pool.query(`CREATE TABLE "${server.schema}".${quoteIdentifier(hostile)} (id int)`);
    const { rows } = await pool.query(
      `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND table_name IN ('y', $2) ORDER BY table_name`,
      [server.schema, hostile],
    );
    expect(rows.map((row: { table_name: string }) => row.table_name)).toEqual([hostile, 'y']);
  });

  it('refuses an option it does not take with an InvalidConfigError naming it, and what it takes', () => {
    const misplaced = { pool: server.pool(), tableName: 'leases' } as unknown as ConstructorParameters<typeof PostgresStorage>[0];
    expect(() => new PostgresStorage(misplaced)).toThrow(InvalidConfigError);
    expect(() => new PostgresStorage(misplaced)).toThrow('[storage-postgres] PostgresStorage has no option "tableName"; it takes pool, schema, leaseTable,');
    expect(() => storage({ pagesize: 10 } as never)).toThrow('[storage-postgres] PostgresStorage has no option "pagesize"; did you mean pageSize?');
  });

  it('refuses a missing pool, a bad page size and tables sharing one name', () => {
    expect(() => new PostgresStorage({ pool: undefined as unknown as pg.Pool })).toThrow('[storage-postgres] pool must be a pg.Pool, got undefined');
    expect(() => storage({ pageSize: 0 })).toThrow('[storage-postgres] pageSize must be an integer from 1 to 10000, got 0');
    expect(() => storage({ leaseTable: 'same', leaderTable: 'same' })).toThrow(InvalidConfigError);
    for (const taken of ['leasehold_leases', 'leasehold_leaders', 'leasehold_rosters', 'leasehold_migrations']) {
      expect(() => storage({ memberTable: taken })).toThrow(
        `[storage-postgres] lease, leader, roster, member and migrations tables must have different names, got ${JSON.stringify(['leasehold_leases', 'leasehold_leaders', 'leasehold_rosters', taken, 'leasehold_migrations'])}`,
      );
    }
  });

  it('refuses a member table name that is not a plain identifier, and keeps members in the one it is given', async () => {
    expect(() => storage({ memberTable: 'm"; DROP TABLE x; --' })).toThrow(InvalidConfigError);
    expect(() => storage({ memberTable: 'm"b' })).toThrow(`[storage-postgres] member table name "m\\"b" is not a valid identifier`);
    expect(() => storage({ memberTable: 'm'.repeat(64) })).toThrow(/member table name "m{64}" is not a valid identifier/);
    const schema = freshSchemaName('lh_members');
    const adapter = new PostgresStorage({ pool: server.pool(), schema, memberTable: 'team' });
    try {
      await adapter.migrate();
      const member = memberStateOf({ format: 1, incarnation: 'i', leaseDurationMs: 1000, status: 'alive', held: 0, changes: 0, requests: [], metadata: {} });
      applied(await adapter.putMember('g', 'w', null, member));
      const { rows } = await server.pool().query(`SELECT worker_id FROM "${schema}".team WHERE group_name = 'g'`);
      expect(rows).toEqual([{ worker_id: 'w' }]);
      expect(await server.pool().query(`SELECT to_regclass($1) AS found`, [`"${schema}".leasehold_members`])).toMatchObject({ rows: [{ found: null }] });
    } finally {
      await server.pool().query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    }
  });
});

describe('PostgresStorage schema', () => {
  it('names migrate() in a StorageSchemaError when the tables were never created, for reads and writes', async () => {
    const missing = new PostgresStorage({ pool: server.pool(), schema: freshSchemaName('lh_missing') });
    const expected =
      /^\[storage-postgres\] the tables of lh_missing_\w+\.leasehold_leases, lh_missing_\w+\.leasehold_leaders, lh_missing_\w+\.leasehold_rosters and lh_missing_\w+\.leasehold_members do not exist \(.*\); run migrate\(\) before using the storage$/;
    await expect(missing.getLease('g', 'k')).rejects.toThrow(StorageSchemaError);
    await expect(missing.getLease('g', 'k')).rejects.toThrow(expected);
    await expect(missing.listLeases('g')).rejects.toThrow(expected);
    await expect(missing.createLease({ group: 'g', leaseKey: 'k' })).rejects.toThrow(expected);
    await expect(missing.updateLeases('g', [{ leaseKey: 'k', expectedVersion: 1, next: leaseStateOf({}) }])).rejects.toThrow(expected);
    await expect(missing.getLeader('g')).rejects.toThrow(expected);
    await expect(missing.getRoster('g')).rejects.toThrow(expected);
    await expect(missing.putMember('g', 'w', null, memberStateOf({ format: 1, incarnation: 'i', leaseDurationMs: 1000, status: 'alive', held: 0, changes: 0, requests: [], metadata: {} }))).rejects.toThrow(expected);
  });

  it('20 workers running migrate() at once all succeed, exactly one creates the tables, and the version is recorded', async () => {
    const schema = freshSchemaName('lh_migrate');
    const pool = new pg.Pool({ ...serverConfig, max: 20 });
    try {
      const outcomes = await Promise.all(Array.from({ length: 20 }, () => new PostgresStorage({ pool, schema }).migrate()));
      expect(outcomes.filter((outcome) => outcome.fromVersion === 0)).toHaveLength(1);
      expect(outcomes.every((outcome) => outcome.toVersion === SCHEMA_VERSION)).toBe(true);
      const { rows } = await pool.query(`SELECT table_name, version FROM "${schema}".leasehold_migrations`);
      expect(rows).toEqual([{ table_name: 'leasehold_leases/leasehold_leaders', version: SCHEMA_VERSION }]);
      expect(await new PostgresStorage({ pool, schema }).migrate()).toEqual({ fromVersion: SCHEMA_VERSION, toVersion: SCHEMA_VERSION });
      applied(await new PostgresStorage({ pool, schema }).createLease({ group: 'g', leaseKey: 'k' }));
      await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
    } finally {
      await pool.end();
    }
  });

  it('refuses to run on tables migrated by a newer release', async () => {
    const schema = freshSchemaName('lh_newer');
    const newer = new PostgresStorage({ pool: server.pool(), schema });
    await newer.migrate();
    await server.pool().query(`UPDATE "${schema}".leasehold_migrations SET version = version + 1`);
    await expect(newer.migrate()).rejects.toThrow(StorageSchemaError);
    await expect(newer.migrate()).rejects.toThrow(`are at schema version ${SCHEMA_VERSION + 1}, newer than this release's ${SCHEMA_VERSION}`);
    await server.pool().query(`DROP SCHEMA "${schema}" CASCADE`);
  });
});

describe('PostgresStorage round trips', () => {
  it('updates a batch of 1,000 leases with one statement and lists 2,500 leases with one query per page', async () => {
    const counted = countingPool(server.pool());
    const seeded = storage();
    const group = freshSchemaName('g');
    for (let start = 0; start < 2500; start += 250) {
      await Promise.all(Array.from({ length: 250 }, (_, i) => seeded.createLease({ group, leaseKey: `k${start + i}` })));
    }
    const adapter = storage({ pool: counted.pool, pageSize: 1000 });
    const { leases } = await adapter.listLeases(group);
    expect(leases).toHaveLength(2500);
    expect(counted.statements()).toBe(3);
    const results = await adapter.updateLeases(
      group,
      leases.slice(0, 1000).map((lease) => ({ leaseKey: lease.leaseKey, expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner: 'w' } })),
    );
    expect(results.every((outcome) => outcome.status === 'applied')).toBe(true);
    expect(counted.statements()).toBe(4);
  });

  it('reads 100 named leases with getLeases in one statement, each key sent once, named or unnamed, and sends nothing for no key', async () => {
    const group = freshSchemaName('g');
    const keys = Array.from({ length: 100 }, (_, i) => `k${String(i).padStart(3, '0')}`);
    await Promise.all(keys.map((leaseKey) => storage().createLease({ group, leaseKey })));
    const gone = applied(await storage().createLease({ group, leaseKey: 'gone' }));
    expect((await storage().deleteLease(group, 'gone', gone.version)).status).toBe('applied');
    const { leases: listed } = await storage().listLeases(group);
    for (const preparedStatements of [true, false]) {
      const sent: { name?: string; values?: unknown[] }[] = [];
      const pool = Object.create(server.pool()) as pg.Pool;
      pool.connect = (async () => {
        const client = await server.pool().connect();
        const query = client.query.bind(client) as (config: { name?: string; values?: unknown[] }) => unknown;
        return Object.assign(Object.create(client) as pg.PoolClient, {
          query: (config: { name?: string; values?: unknown[] }) => {
            sent.push(config);
            return query(config);
          },
          release: (error?: Error | boolean) => client.release(error),
        });
      }) as pg.Pool['connect'];
      const adapter = storage({ pool, preparedStatements });
      const named = [...keys.slice(0, 50), 'gone', 'never', ...keys.slice(0, 48)];
      const read = await adapter.getLeases(group, named);
      expect(read.corrupt).toEqual([]);
      expect([...read.leases].sort((a, b) => (a.leaseKey < b.leaseKey ? -1 : 1))).toEqual(listed.slice(0, 50));
      expect(sent).toHaveLength(1);
      expect(sent[0]?.values).toEqual([group, [...keys.slice(0, 50), 'gone', 'never']]);
      expect(sent[0]?.name === undefined).toBe(!preparedStatements);
      expect(await adapter.getLeases(group, [])).toEqual({ leases: [], corrupt: [] });
      expect(sent).toHaveLength(1);
    }
  });

  it('16 clients racing with the same two-lease batch, 5 rounds: one applies per lease, and every conflict carries the record that won', async () => {
    const racers = Array.from({ length: 16 }, () => storage());
    const group = freshSchemaName('g');
    let a = applied(await racers[0]!.createLease({ group, leaseKey: 'a' }));
    let b = applied(await racers[0]!.createLease({ group, leaseKey: 'b' }));
    for (let round = 0; round < 5; round++) {
      const [fromA, fromB] = [a, b];
      const batches = await Promise.all(
        racers.map((racer, i) =>
          racer.updateLeases(group, [
            { leaseKey: 'a', expectedVersion: fromA.version, next: { ...leaseStateOf(fromA), owner: `racer-${i}` } },
            { leaseKey: 'b', expectedVersion: fromB.version, next: { ...leaseStateOf(fromB), owner: `racer-${i}` } },
          ]),
        ),
      );
      for (const [index, leaseKey] of ['a', 'b'].entries()) {
        const stored = (await racers[0]!.getLease(group, leaseKey))!;
        const outcomes = batches.map((batch) => batch[index]!);
        expect(outcomes.filter((outcome) => outcome.status === 'applied')).toHaveLength(1);
        for (const outcome of outcomes) {
          if (outcome.status === 'conflict') expect(outcome.current).toEqual(stored);
          else expect(outcome).toEqual({ status: 'applied', record: stored });
        }
        if (leaseKey === 'a') a = stored;
        else b = stored;
      }
    }
  });

  it('two clients renewing 300 overlapping leases in opposite orders both finish, each lease applying once', async () => {
    const [first, second] = [storage(), storage()];
    const group = freshSchemaName('g');
    const keys = Array.from({ length: 300 }, (_, i) => `k${String(i).padStart(3, '0')}`);
    await Promise.all(keys.map((leaseKey) => first.createLease({ group, leaseKey })));
    const { leases } = await first.listLeases(group);
    const batch = (owner: string) => leases.map((lease) => ({ leaseKey: lease.leaseKey, expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner } }));
    const [forward, backward] = await Promise.all([first.updateLeases(group, batch('first')), second.updateLeases(group, batch('second').reverse())]);
    backward.reverse();
    const stored = new Map((await first.listLeases(group)).leases.map((lease) => [lease.leaseKey, lease]));
    leases.forEach((lease, i) => {
      const statuses = [forward[i]!.status, backward[i]!.status].sort();
      expect(statuses).toEqual(['applied', 'conflict']);
      expect(stored.get(lease.leaseKey)?.owner).toBe(forward[i]!.status === 'applied' ? 'first' : 'second');
    });
  });

  it('round-trips a NUL and a lone surrogate in checkpoints and metadata through single and batched writes', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const odd: Partial<LeaseState> = { checkpoint: 'a\u0000b', metadata: { nul: '\u0000', lone: '\ud800', quote: '"\\' } };
    const one = applied(await adapter.createLease({ group, leaseKey: 'one', ...odd }));
    const two = applied(await adapter.createLease({ group, leaseKey: 'two' }));
    expect(await adapter.getLease(group, 'one')).toEqual(one);
    const batch = await adapter.updateLeases(group, [
      { leaseKey: 'one', expectedVersion: one.version, next: { ...leaseStateOf(one), owner: 'w' } },
      { leaseKey: 'two', expectedVersion: two.version, next: { ...leaseStateOf(two), ...odd } },
    ]);
    const { leases: stored } = await adapter.listLeases(group);
    expect(stored.sort((a, b) => a.leaseKey.localeCompare(b.leaseKey))).toEqual(batch.map((outcome) => applied(outcome)));
    expect(stored.map((lease) => [lease.checkpoint, lease.metadata])).toEqual([
      ['a\u0000b', odd.metadata],
      ['a\u0000b', odd.metadata],
    ]);
  });

  it('never lets an epoch go backwards when a deleted lease is created again with a lower one', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const created = applied(await adapter.createLease({ group, leaseKey: 'k', owner: 'a', epoch: 9 }));
    expect((await adapter.deleteLease(group, 'k', created.version)).status).toBe('applied');
    const again = applied(await adapter.createLease({ group, leaseKey: 'k', owner: 'b', epoch: 2, metadata: { m: 'v' } }, { recreate: true }));
    expect(again).toMatchObject({ version: created.version + 1, epoch: 9, owner: 'b', metadata: { m: 'v' } });
    expect(await adapter.getLease(group, 'k')).toEqual(again);
  });
});

describe('PostgresStorage records of a later core', () => {
  // What a later core may write: a newer record format and fields this core does not name, of any JSON shape.
  const later = { format: 2, shardRange: { start: '0', end: '340282366920938463463374607431768211455' }, tags: ['a', 1.5, true, null, { deep: [] }] };

  it('keeps format 2 and fields core does not name through create, single and batched updates, get, list and conflicts', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const created = applied(await adapter.createLease({ group, leaseKey: 'one', owner: 'a', ...later }));
    expect(created).toMatchObject({ ...later, owner: 'a', version: 1 });
    expect(await adapter.getLease(group, 'one')).toEqual(created);
    const renewed = applied((await adapter.updateLeases(group, [{ leaseKey: 'one', expectedVersion: created.version, next: { ...leaseStateOf(created), owner: 'b' } }]))[0]);
    expect(renewed).toEqual({ ...created, owner: 'b', version: created.version + 1 });
    const two = applied(await adapter.createLease({ group, leaseKey: 'two' }));
    const [one, taken] = (
      await adapter.updateLeases(group, [
        { leaseKey: 'one', expectedVersion: renewed.version, next: { ...leaseStateOf(renewed), checkpoint: '7' } },
        { leaseKey: 'two', expectedVersion: two.version, next: { ...leaseStateOf(two), ...later } },
      ])
    ).map((outcome) => applied(outcome));
    expect(one).toEqual({ ...renewed, checkpoint: '7', version: renewed.version + 1 });
    expect(taken).toEqual({ ...two, ...later, version: two.version + 1 });
    expect(await adapter.listLeases(group)).toEqual({ leases: [one, taken], corrupt: [] });
    expect(await adapter.updateLeases(group, [{ leaseKey: 'one', expectedVersion: created.version, next: leaseStateOf(created) }])).toEqual([
      { status: 'conflict', current: one },
    ]);
    expect(
      await adapter.updateLeases(group, [
        { leaseKey: 'one', expectedVersion: created.version, next: leaseStateOf(created) },
        { leaseKey: 'two', expectedVersion: two.version, next: leaseStateOf(two) },
      ]),
    ).toEqual([
      { status: 'conflict', current: one },
      { status: 'conflict', current: taken },
    ]);
    expect(await adapter.createLease({ group, leaseKey: 'one' })).toEqual({ status: 'conflict', current: one });
  });

  it('keeps fields core does not name in a deleted key created again, whose epoch is raised to the highest it had', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const created = applied(await adapter.createLease({ group, leaseKey: 'k', owner: 'a', epoch: 9 }));
    expect((await adapter.deleteLease(group, 'k', created.version)).status).toBe('applied');
    const again = applied(await adapter.createLease({ group, leaseKey: 'k', epoch: 2, ...later }, { recreate: true }));
    expect(again).toEqual({ ...leaseStateOf({ epoch: 9, ...later }), group, leaseKey: 'k', version: created.version + 1 });
    expect(await adapter.getLease(group, 'k')).toEqual(again);
  });

  it('keeps format 2 and fields core does not name in a leader record through create, update, get and a conflict', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const created = applied(await adapter.createLeader({ group, holder: 'w1', term: 1, ...later }));
    expect(created).toEqual({ ...leaderStateOf({ holder: 'w1', term: 1, ...later }), group, version: 1 });
    expect(await adapter.getLeader(group)).toEqual(created);
    const next = applied(await adapter.updateLeader(group, created.version, { ...leaderStateOf(created), holder: 'w2', term: 2 }));
    expect(next).toEqual({ ...created, holder: 'w2', term: 2, version: 2 });
    expect(await adapter.updateLeader(group, created.version, leaderStateOf(created))).toEqual({ status: 'conflict', current: next });
    expect(await adapter.createLeader({ group })).toEqual({ status: 'conflict', current: next });
  });
});

describe('PostgresStorage deleted keys', () => {
  it('does not create a deleted key again without recreate: a conflict with no current lease, and the tombstone stays as it was', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const created = applied(await adapter.createLease({ group, leaseKey: 'k', owner: 'a', epoch: 4, checkpoint: 'SHARD_END' }));
    expect((await adapter.deleteLease(group, 'k', created.version)).status).toBe('applied');
    const tombstone = `SELECT version, live, high_epoch, state FROM "${server.schema}".leasehold_leases WHERE group_name = $1 AND lease_key = 'k'`;
    const before = (await server.pool().query(tombstone, [group])).rows;
    expect(before).toEqual([{ version: String(created.version), live: false, high_epoch: '4', state: null }]);
    expect(await adapter.createLease({ group, leaseKey: 'k' })).toEqual({ status: 'conflict', current: null });
    expect(await adapter.createLease({ group, leaseKey: 'k' }, { recreate: false })).toEqual({ status: 'conflict', current: null });
    expect((await server.pool().query(tombstone, [group])).rows).toEqual(before);
    expect(await adapter.listLeases(group)).toEqual({ leases: [], corrupt: [] });
    const recreated = applied(await adapter.createLease({ group, leaseKey: 'k' }, { recreate: true }));
    expect(recreated).toMatchObject({ version: created.version + 1, epoch: 4, owner: null, checkpoint: null });
  });

  it('creates a key that never had a lease at version 1, with or without recreate', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    expect(applied(await adapter.createLease({ group, leaseKey: 'plain' })).version).toBe(1);
    expect(applied(await adapter.createLease({ group, leaseKey: 'asked' }, { recreate: true })).version).toBe(1);
  });
});

describe('PostgresStorage corrupt rows', () => {
  const table = (): string => `"${server.schema}".leasehold_leases`;
  /** Damages a stored lease as another program writing the table would: the version moves with the write. */
  async function damage(group: string, leaseKey: string, state: string | null): Promise<void> {
    const { rowCount } = await server.pool().query(
      `UPDATE ${table()} SET state = $3, version = version + 1 WHERE group_name = $1 AND lease_key = $2`,
      [group, leaseKey, state],
    );
    expect(rowCount).toBe(1);
  }
  async function stored(group: string, leaseKey: string): Promise<unknown[]> {
    return (await server.pool().query<{ version: string; state: string | null }>(`SELECT version, state FROM ${table()} WHERE group_name = $1 AND lease_key = $2`, [group, leaseKey])).rows;
  }

  it('lists a lease whose state is not JSON in corrupt, naming it, and every other lease of the group, across pages', async () => {
    const group = freshSchemaName('g');
    for (const leaseKey of ['a', 'b', 'bad', 'c']) applied(await storage().createLease({ group, leaseKey }));
    await damage(group, 'bad', '{"owner": nope');
    const named = `[storage-postgres] stored lease "bad" of group "${group}" is corrupt: state is not valid JSON ("{\\"owner\\": nope")`;
    for (const pageSize of [1, 2, 1000]) {
      const { leases, corrupt } = await storage({ pageSize }).listLeases(group);
      expect(leases.map((lease) => lease.leaseKey)).toEqual(['a', 'b', 'c']);
      expect(corrupt).toHaveLength(1);
      expect(corrupt[0]).toBeInstanceOf(CorruptRecordError);
      expect(corrupt[0]).toMatchObject({ group, leaseKey: 'bad', message: named });
    }
    await expect(storage().getLease(group, 'bad')).rejects.toThrow(CorruptRecordError);
    await expect(storage().getLease(group, 'bad')).rejects.toThrow(named);
    const read = await storage().getLeases(group, ['bad', 'c', 'a', 'bad']);
    expect(read.leases.map((lease) => lease.leaseKey).sort()).toEqual(['a', 'c']);
    expect(read.corrupt).toHaveLength(1);
    expect(read.corrupt[0]).toBeInstanceOf(CorruptRecordError);
    expect(read.corrupt[0]).toMatchObject({ group, leaseKey: 'bad', message: named });
  });

  it('applies the other updates of a batch that meets a corrupt lease, gives unknown with the CorruptRecordError for it alone, and never overwrites it', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const [a, bad, c] = [applied(await adapter.createLease({ group, leaseKey: 'a' })), applied(await adapter.createLease({ group, leaseKey: 'bad' })), applied(await adapter.createLease({ group, leaseKey: 'c' }))];
    await damage(group, 'bad', '[]');
    const damaged = await stored(group, 'bad');
    const results = await adapter.updateLeases(group, [a, bad, c].map((lease) => ({ leaseKey: lease.leaseKey, expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner: 'w' } })));
    expect(results.map((outcome) => outcome.status)).toEqual(['applied', 'unknown', 'applied']);
    const [, unknown] = results;
    expect(unknown?.status === 'unknown' && unknown.error).toBeInstanceOf(CorruptRecordError);
    expect(unknown?.status === 'unknown' && unknown.error).toMatchObject({ group, leaseKey: 'bad', message: `[storage-postgres] stored lease "bad" of group "${group}" is corrupt: state is not a JSON object ("[]")` });
    expect((await adapter.listLeases(group)).leases.map((lease) => [lease.leaseKey, lease.owner])).toEqual([['a', 'w'], ['c', 'w']]);
    // A batch of one takes the single-statement path; a create and a delete meet the same row.
    const [alone] = await adapter.updateLeases(group, [{ leaseKey: 'bad', expectedVersion: bad.version, next: leaseStateOf(bad) }]);
    expect(alone?.status === 'unknown' && alone.error).toBeInstanceOf(CorruptRecordError);
    const created = await adapter.createLease({ group, leaseKey: 'bad' }, { recreate: true });
    expect(created.status === 'unknown' && created.error).toBeInstanceOf(CorruptRecordError);
    const deleted = await adapter.deleteLease(group, 'bad', bad.version);
    expect(deleted.status === 'unknown' && deleted.error).toBeInstanceOf(CorruptRecordError);
    expect(await stored(group, 'bad')).toEqual(damaged);
  });

  it('reports a lease whose JSON lacks fields or has wrong types as a CorruptRecordError naming it', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    applied(await adapter.createLease({ group, leaseKey: 'k' }));
    await damage(group, 'k', '{"owner": 5}');
    await expect(adapter.getLease(group, 'k')).rejects.toThrow(`stored lease "k" of group "${group}" is corrupt: state lacks format, epoch, checkpoint, parentKeys, incarnation, metadata`);
    await damage(group, 'k', JSON.stringify({ ...leaseStateOf({}), owner: 5 }));
    await expect(adapter.getLease(group, 'k')).rejects.toThrow(`stored lease "k" of group "${group}" is corrupt: owner must be a string, got 5`);
    await damage(group, 'k', JSON.stringify({ ...leaseStateOf({}), format: 0 }));
    await expect(adapter.getLease(group, 'k')).rejects.toThrow(`stored lease "k" of group "${group}" is corrupt: format must be a positive integer, got 0`);
    await damage(group, 'k', null);
    await expect(adapter.getLease(group, 'k')).rejects.toThrow(`stored lease "k" of group "${group}" is corrupt: state is null`);
    expect((await adapter.listLeases(group)).corrupt.map((error) => error.leaseKey)).toEqual(['k']);
  });

  it('reports a lease with a NULL version, in a table whose NOT NULL was dropped by hand, and no write at any version applies to it', async () => {
    const schema = freshSchemaName('lh_nullversion');
    const adapter = new PostgresStorage({ pool: server.pool(), schema });
    await adapter.migrate();
    const nullable = `"${schema}".leasehold_leases`;
    const lease = applied(await adapter.createLease({ group: 'g', leaseKey: 'k', owner: 'a' }));
    await server.pool().query(`ALTER TABLE ${nullable} ALTER COLUMN version DROP NOT NULL`);
    await server.pool().query(`UPDATE ${nullable} SET version = NULL`);
    await expect(adapter.getLease('g', 'k')).rejects.toThrow(`stored lease "k" of group "g" is corrupt: version must be a positive integer, found null`);
    expect((await adapter.listLeases('g')).corrupt.map((error) => error.message)).toEqual([
      `[storage-postgres] stored lease "k" of group "g" is corrupt: version must be a positive integer, found null`,
    ]);
    for (const expectedVersion of [lease.version, lease.version + 1]) {
      const [outcome] = await adapter.updateLeases('g', [{ leaseKey: 'k', expectedVersion, next: { ...leaseStateOf(lease), owner: 'thief' } }]);
      expect(outcome?.status === 'unknown' && outcome.error).toBeInstanceOf(CorruptRecordError);
    }
    const batch = await adapter.updateLeases('g', [
      { leaseKey: 'k', expectedVersion: lease.version, next: leaseStateOf(lease) },
      { leaseKey: 'other', expectedVersion: 1, next: leaseStateOf(lease) },
    ]);
    expect(batch.map((outcome) => outcome.status)).toEqual(['unknown', 'conflict']);
    const deleted = await adapter.deleteLease('g', 'k', lease.version);
    expect(deleted.status === 'unknown' && deleted.error.message).toContain('stored lease "k" of group "g" is corrupt');
    const { rows } = await server.pool().query(`SELECT version, state FROM ${nullable}`);
    expect(rows).toEqual([{ version: null, state: JSON.stringify(leaseStateOf(lease)) }]);
    await server.pool().query(`DROP SCHEMA "${schema}" CASCADE`);
  });

  it('reports a corrupt leader record as a CorruptRecordError naming its group', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const leader = applied(await adapter.createLeader({ group, holder: 'w', term: 1 }));
    await server.pool().query(`UPDATE "${server.schema}".leasehold_leaders SET state = '[]', version = version + 1 WHERE group_name = $1`, [group]);
    await expect(adapter.getLeader(group)).rejects.toThrow(`stored leader record of group "${group}" is corrupt: state is not a JSON object ("[]")`);
    const stale = await adapter.updateLeader(group, leader.version, { ...leaderStateOf(leader), holder: 'x', term: 2 });
    expect(stale.status === 'unknown' && stale.error).toBeInstanceOf(CorruptRecordError);
    const again = await adapter.createLeader({ group });
    expect(again.status === 'unknown' && again.error).toBeInstanceOf(CorruptRecordError);
  });
});

describe('PostgresStorage failures', () => {
  it('reports unknown for every lease of a batch whose connection dies mid-statement, and works again on the next call', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const a = applied(await adapter.createLease({ group, leaseKey: 'a' }));
    const b = applied(await adapter.createLease({ group, leaseKey: 'b' }));
    const blocker = await server.pool().connect();
    try {
      // Hold lease a's row so that the batch blocks on it, then end the batch's backend under it.
      await blocker.query('BEGIN');
      await blocker.query(`SELECT 1 FROM "${server.schema}".leasehold_leases WHERE group_name = $1 AND lease_key = 'a' FOR UPDATE`, [group]);
      const pending = adapter.updateLeases(group, [
        { leaseKey: 'a', expectedVersion: a.version, next: { ...leaseStateOf(a), owner: 'w' } },
        { leaseKey: 'b', expectedVersion: b.version, next: { ...leaseStateOf(b), owner: 'w' } },
      ]);
      let pid: number | undefined;
      expect(
        await waitFor(async () => {
          // Polled on another connection: inside the blocker's transaction pg_stat_activity is a frozen snapshot.
          const { rows } = await server.pool().query(
            `SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%json_array_elements_text%' AND query LIKE $1`,
            [`%${server.schema}%`],
          );
          pid = rows[0]?.pid as number | undefined;
          return pid !== undefined;
        }),
      ).toBe(true);
      await server.pool().query('SELECT pg_terminate_backend($1)', [pid]);
      const results = await pending;
      expect(results.map((outcome) => outcome.status)).toEqual(['unknown', 'unknown']);
      expect(results[0]?.status === 'unknown' && results[0].error.message).toMatch(/^\[storage-postgres\] the outcome of updateLeases is unknown: /);
    } finally {
      // Destroyed rather than given back, so that no connection returns to the pool inside a transaction.
      blocker.release(true);
    }
    expect((await adapter.getLease(group, 'a'))?.version).toBe(a.version);
    applied((await adapter.updateLeases(group, [{ leaseKey: 'a', expectedVersion: a.version, next: { ...leaseStateOf(a), owner: 'w' } }]))[0]);
  });

  it('survives a connection that dies as the pool hands it out, before the adapter can listen, and works again on the next call', async () => {
    // pg-pool hands a new client out from inside the socket read that carried its ReadyForQuery, with its own
    // 'error' listener already taken off; a FATAL in the same read (a server shutting down) used to be
    // emitted with nobody listening, which ends the process. Here the error arrives in that same window.
    const group = freshSchemaName('g');
    applied(await storage().createLease({ group, leaseKey: 'k' }));
    const pool = new pg.Pool({ ...serverConfig, max: 1 });
    pool.on('error', () => undefined);
    const adapter = new PostgresStorage({ pool, schema: server.schema });
    let unheard: unknown;
    let emitted = false;
    pool.once('acquire', (client) => {
      process.nextTick(() => {
        emitted = true;
        try {
          (client as unknown as { connection: { emit(event: string, error: Error): void } }).connection.emit('error', new Error('terminating connection due to administrator command'));
        } catch (error) {
          unheard = error;
        }
      });
    });
    try {
      await expect(adapter.getLease(group, 'k')).rejects.toBeInstanceOf(StorageUnavailableError);
      expect(emitted).toBe(true);
      expect(unheard).toBeUndefined();
      expect((await adapter.getLease(group, 'k'))?.leaseKey).toBe('k');
    } finally {
      await adapter.close();
      await pool.end();
    }
  });

  it('sends a statement again unnamed when its connection lost the prepared statement, applying it once, and stops naming after three misses', async () => {
    const pool = new pg.Pool({ ...serverConfig, max: 1 });
    const adapter = new PostgresStorage({ pool, schema: server.schema });
    const prepared = async (): Promise<number> => Number((await pool.query('SELECT count(*) AS n FROM pg_prepared_statements')).rows[0].n);
    try {
      const group = freshSchemaName('g');
      let lease = applied(await adapter.createLease({ group, leaseKey: 'k', metadata: { count: '0' } }));
      const increment = async (): Promise<void> => {
        const [outcome] = await adapter.updateLeases(group, [
          { leaseKey: 'k', expectedVersion: lease.version, next: { ...leaseStateOf(lease), metadata: { count: String(Number(lease.metadata.count) + 1) } } },
        ]);
        lease = applied(outcome);
      };
      await increment();
      expect(await prepared()).toBe(2);
      // Behind the driver's back, as a pooler handing the call another server session would: the driver
      // still believes both statements prepared, so every renew now misses and is sent again unnamed.
      await pool.query('DEALLOCATE ALL');
      await increment();
      await increment();
      await adapter.listLeases(group);
      expect(await prepared()).toBe(1);
      await increment();
      await adapter.getLease(group, 'k');
      await increment();
      expect(await prepared()).toBe(1);
      expect(await adapter.getLease(group, 'k')).toMatchObject({ version: lease.version, metadata: { count: '5' } });
    } finally {
      await pool.end();
    }
  });

  it('throws StorageUnavailableError when no connection can be had, for reads and writes alike', async () => {
    const pool = new pg.Pool({ ...serverConfig, port: 1, connectionTimeoutMillis: 2000 });
    const adapter = new PostgresStorage({ pool, schema: server.schema });
    try {
      await expect(adapter.getLease('g', 'k')).rejects.toThrow(StorageUnavailableError);
      await expect(adapter.getLease('g', 'k')).rejects.toThrow(/^\[storage-postgres\] getLease could not get a connection: /);
      await expect(adapter.createLease({ group: 'g', leaseKey: 'k' })).rejects.toThrow(/^\[storage-postgres\] createLease could not get a connection: /);
      await expect(adapter.subscribe('g', () => undefined)).rejects.toThrow(StorageUnavailableError);
    } finally {
      await pool.end();
    }
  });
});

describe('PostgresStorage change feed', () => {
  /** The connections whose last statement LISTENed on `channel` (with others: the owner channels). */
  async function listenerPids(channel: string): Promise<number[]> {
    const { rows } = await server.pool().query(`SELECT pid FROM pg_stat_activity WHERE starts_with(query, $1)`, [`LISTEN "${channel}"`]);
    return rows.map((row: { pid: number }) => row.pid);
  }

  it('hears handovers on one LISTEN connection, reconnects when it is killed, and gives it back on close', async () => {
    const pool = new pg.Pool({ ...serverConfig, max: 3 });
    pool.on('error', () => undefined);
    const reader = new PostgresStorage({ pool, schema: server.schema });
    const writer = storage();
    const group = freshSchemaName('g');
    const heard: LeaseChange[] = [];
    try {
      const first = await reader.subscribe(group, (change) => heard.push(change));
      const second = await reader.subscribe(group, (change) => heard.push(change));
      const [pid] = await listenerPids(reader.channel);
      expect(pid).toBeDefined();
      expect(await listenerPids(reader.channel)).toHaveLength(1);

      await server.pool().query('SELECT pg_terminate_backend($1)', [pid]);
      expect(await waitFor(async () => (await listenerPids(reader.channel)).some((other) => other !== pid))).toBe(true);

      const lease = applied(await writer.createLease({ group, leaseKey: 'k', owner: 'a', epoch: 1 }));
      applied((await writer.updateLeases(group, [{ leaseKey: 'k', expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner: 'b', epoch: 2, incarnation: 'b-1' }, notify: 'handed-off' }]))[0]);
      expect(await waitFor(() => heard.length === 4)).toBe(true);
      expect(heard).toEqual([
        { group, leaseKey: 'k', kind: 'created', owner: 'a' },
        { group, leaseKey: 'k', kind: 'created', owner: 'a' },
        { group, leaseKey: 'k', kind: 'handed-off', owner: 'b' },
        { group, leaseKey: 'k', kind: 'handed-off', owner: 'b' },
      ]);

      await first.close();
      expect(pool.idleCount).toBe(0);
      await second.close();
      expect(await listenerPids(reader.channel)).toEqual([]);
      expect(pool.idleCount).toBe(pool.totalCount);
    } finally {
      await reader.close();
      await pool.end();
    }
  });

  it('publishes a change whose group, key and owner are 512 bytes of characters JSON must escape, leaving out an owner the payload has no room for', async () => {
    const adapter = storage();
    // Each of 512 bytes, nearly all of it escaped in six characters: the largest payload there is.
    const prefix = freshSchemaName('g');
    const group = `${prefix}${'\u0001'.repeat(512 - Buffer.byteLength(prefix))}`;
    const leaseKey = `${'\u0002'.repeat(480)}${'"\\'.repeat(16)}`;
    const heard: LeaseChange[] = [];
    const subscription = await adapter.subscribe(group, (change) => heard.push(change));
    try {
      const owner = '\u0001'.repeat(512);
      const lease = applied(await adapter.createLease({ group, leaseKey, owner: 'a' }));
      const handed = applied((await adapter.updateLeases(group, [{ leaseKey, expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner }, notify: 'handed-off' }]))[0]);
      applied((await adapter.updateLeases(group, [{ leaseKey, expectedVersion: handed.version, next: { ...leaseStateOf(handed), owner: null }, notify: 'released' }]))[0]);
      expect(await waitFor(() => heard.length === 3)).toBe(true);
      expect(heard).toStrictEqual([
        { group, leaseKey, kind: 'created', owner: 'a' },
        { group, leaseKey, kind: 'handed-off' },
        { group, leaseKey, kind: 'released', owner: null },
      ]);
    } finally {
      await subscription.close();
    }
  });

  /** The parser of the releases before payloads named an owner, as they shipped. */
  function parseAsEarlierRelease(payload: string): { group: string; leaseKey: string; kind: string } | undefined {
    const value = JSON.parse(payload) as { group?: unknown; leaseKey?: unknown; kind?: unknown };
    if (typeof value.group !== 'string' || typeof value.leaseKey !== 'string' || typeof value.kind !== 'string') return undefined;
    if (!['released', 'handed-off', 'created', 'rewind'].includes(value.kind)) return undefined;
    return { group: value.group, leaseKey: value.leaseKey, kind: value.kind };
  }

  it('a NOTIFY payload names the owner the write set, single or batched, and the parser of earlier releases reads it as before', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const raw = new pg.Client(serverConfig);
    await raw.connect();
    const payloads: string[] = [];
    const channels: string[] = [];
    raw.on('notification', (message) => {
      if (message.payload === undefined || (JSON.parse(message.payload) as { group?: string }).group !== group) return;
      payloads.push(message.payload);
      channels.push(message.channel);
    });
    try {
      for (const channel of new Set([adapter.channel, adapter.ownerChannel(group, 'x'), adapter.ownerChannel(group, 'y')])) {
        await raw.query(`LISTEN ${quoteIdentifier(channel)}`);
      }
      const leases = [];
      for (const leaseKey of ['a', 'b']) leases.push(applied(await adapter.createLease({ group, leaseKey, owner: 'w', epoch: 1 })));
      const [a, b] = leases as [LeaseRecord, LeaseRecord];
      // A batch of two handovers to different owners, then one update alone (the other statement).
      const batch = await adapter.updateLeases(group, [
        { leaseKey: 'a', expectedVersion: a.version, next: { ...leaseStateOf(a), owner: 'x', epoch: 2 }, notify: 'handed-off' },
        { leaseKey: 'b', expectedVersion: b.version, next: { ...leaseStateOf(b), owner: 'y', epoch: 2 }, notify: 'handed-off' },
      ]);
      const handed = applied(batch[0]);
      applied((await adapter.updateLeases(group, [{ leaseKey: 'a', expectedVersion: handed.version, next: { ...leaseStateOf(handed), owner: null }, notify: 'released' }]))[0]);
      expect(await waitFor(() => payloads.length === 5)).toBe(true);
      expect(payloads.map((payload) => JSON.parse(payload) as unknown)).toEqual([
        { group, leaseKey: 'a', kind: 'created', owner: 'w' },
        { group, leaseKey: 'b', kind: 'created', owner: 'w' },
        { group, leaseKey: 'a', kind: 'handed-off', owner: 'x' },
        { group, leaseKey: 'b', kind: 'handed-off', owner: 'y' },
        { group, leaseKey: 'a', kind: 'released', owner: null },
      ]);
      // The handovers that name their owner go to the owner's channel, everything else to the table's.
      expect(channels).toEqual([adapter.channel, adapter.channel, adapter.ownerChannel(group, 'x'), adapter.ownerChannel(group, 'y'), adapter.channel]);
      expect(payloads.map(parseAsEarlierRelease)).toEqual([
        { group, leaseKey: 'a', kind: 'created' },
        { group, leaseKey: 'b', kind: 'created' },
        { group, leaseKey: 'a', kind: 'handed-off' },
        { group, leaseKey: 'b', kind: 'handed-off' },
        { group, leaseKey: 'a', kind: 'released' },
      ]);
    } finally {
      await raw.end();
    }
  });

  it('a payload of an earlier release, with no owner, is heard with none', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const heard: LeaseChange[] = [];
    const subscription = await adapter.subscribe(group, (change) => heard.push(change));
    try {
      await server.pool().query('SELECT pg_notify($1, $2)', [adapter.channel, JSON.stringify({ group, leaseKey: 'k', kind: 'handed-off' })]);
      expect(await waitFor(() => heard.length === 1)).toBe(true);
      expect(heard).toStrictEqual([{ group, leaseKey: 'k', kind: 'handed-off' }]);
    } finally {
      await subscription.close();
    }
  });
});
