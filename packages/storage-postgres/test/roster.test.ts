import {
  CorruptRecordError,
  InvalidInputError,
  StorageOutcomeUnknownError,
  type LeaseChange,
  type MemberRecord,
  type MemberState,
  type WriteResult,
} from '@leasehold/core';
import { limits, memberStateOf, RECORD_FORMAT } from '@leasehold/core/adapter';
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { PostgresStorage, SCHEMA_VERSION } from '../src/index.js';
import { freshSchemaName, serverConfig, useServer, waitFor } from './support.js';

const server = useServer('lh_roster', 12);
const storage = (options: Partial<ConstructorParameters<typeof PostgresStorage>[0]> = {}): PostgresStorage =>
  new PostgresStorage({ pool: server.pool(), schema: server.schema, ...options });
const rosters = (): string => `"${server.schema}".leasehold_rosters`;

beforeAll(async () => {
  await storage().migrate();
});

function applied<T>(outcome: WriteResult<T> | undefined): T {
  if (outcome?.status !== 'applied') throw new Error(`expected applied, got ${JSON.stringify(outcome)}`);
  return outcome.record;
}

function conflict<T>(outcome: WriteResult<T> | { status: 'applied' } | undefined): T | null {
  if (outcome?.status !== 'conflict') throw new Error(`expected a conflict, got ${JSON.stringify(outcome)}`);
  return outcome.current;
}

const member = (fields: Partial<MemberState> = {}): MemberState =>
  memberStateOf({ format: RECORD_FORMAT, incarnation: 'inc-1', leaseDurationMs: 10_000, status: 'alive', held: 0, changes: 0, requests: [], metadata: {}, ...fields });

/** The stored row of a group, as the table holds it. */
async function row(group: string): Promise<{ high_version: string; members: Record<string, { v: unknown; s: unknown }> } | undefined> {
  const { rows } = await server.pool().query<{ high_version: string; members: Record<string, { v: unknown; s: unknown }> }>(`SELECT high_version, members FROM ${rosters()} WHERE group_name = $1`, [group]);
  return rows[0];
}

/** A pool whose clients count the statements sent through them. */
function countingPool(pool: pg.Pool): { pool: pg.Pool; statements: () => number } {
  let count = 0;
  const counting = Object.create(pool) as pg.Pool;
  counting.connect = (async () => {
    const client = await pool.connect();
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    return Object.assign(Object.create(client) as pg.PoolClient, {
      query: (...args: unknown[]) => {
        count++;
        return query(...args);
      },
      release: (error?: Error | boolean) => client.release(error),
    });
  }) as pg.Pool['connect'];
  return { pool: counting, statements: () => count };
}

describe('PostgresStorage roster', () => {
  it('an unknown group has an empty roster, and a heartbeat or removal of a missing member is a conflict with none that creates nothing', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    expect(await adapter.getRoster(group)).toEqual({ group, members: [], corrupt: [] });
    expect(conflict(await adapter.putMember(group, 'w', 1, member()))).toBeNull();
    expect(conflict(await adapter.removeMember(group, 'w', 1))).toBeNull();
    expect(await row(group)).toBeUndefined();
    applied(await adapter.putMember(group, 'other', null, member()));
    expect(conflict(await adapter.putMember(group, 'w', 1, member()))).toBeNull();
    expect(conflict(await adapter.removeMember(group, 'w', 1))).toBeNull();
    expect((await adapter.getRoster(group)).members.map((record) => record.workerId)).toEqual(['other']);
  });

  it('a join reads back exactly; a second join is a conflict carrying the member; heartbeats move the version above every member of the group', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const a = applied(await adapter.putMember(group, 'a', null, member({ incarnation: 'a-1', held: 3, requests: [{ leaseKey: 'k', from: 'b' }], metadata: { host: 'x' } })));
    expect(a).toEqual({ group, workerId: 'a', version: 1, ...member({ incarnation: 'a-1', held: 3, requests: [{ leaseKey: 'k', from: 'b' }], metadata: { host: 'x' } }) });
    expect(conflict(await adapter.putMember(group, 'a', null, member({ incarnation: 'a-2' })))).toEqual(a);
    const b = applied(await adapter.putMember(group, 'b', null, member({ incarnation: 'b-1' })));
    expect(b.version).toBe(2);
    // A heartbeat that writes the stored state still moves the version, above b's.
    const renewed = applied(await adapter.putMember(group, 'a', a.version, memberStateOf(a)));
    expect(renewed).toEqual({ ...a, version: 3 });
    expect(conflict(await adapter.putMember(group, 'a', a.version, member({ status: 'dead' })))).toEqual(renewed);
    const roster = await adapter.getRoster(group);
    expect(roster.corrupt).toEqual([]);
    expect(roster.members.sort((x, y) => x.version - y.version)).toEqual([b, renewed]);
    expect(await row(group)).toMatchObject({ high_version: '3' });
  });

  it('remove then join gives a greater version than the worker id ever had, even when the roster emptied in between', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    let record = applied(await adapter.putMember(group, 'w', null, member()));
    for (let round = 0; round < 5; round++) record = applied(await adapter.putMember(group, 'w', record.version, member({ changes: round })));
    expect(record.version).toBe(6);
    expect(conflict(await adapter.removeMember(group, 'w', record.version - 1))).toEqual(record);
    expect((await adapter.removeMember(group, 'w', record.version)).status).toBe('applied');
    expect(await adapter.getRoster(group)).toEqual({ group, members: [], corrupt: [] });
    expect(await row(group)).toEqual({ high_version: '6', members: {} });
    const again = applied(await adapter.putMember(group, 'w', null, member({ incarnation: 'inc-2' })));
    expect(again.version).toBe(7);
    expect(conflict(await adapter.putMember(group, 'w', record.version, member()))).toEqual(again);
  });

  it('50 members heartbeating at once through separate clients: every write applies, no version repeats, and each member reads back as last written', async () => {
    const pools = Array.from({ length: 5 }, () => {
      const pool = new pg.Pool({ ...serverConfig, max: 4 });
      pool.on('error', () => undefined);
      return pool;
    });
    try {
      const clients = Array.from({ length: 50 }, (_, i) => new PostgresStorage({ pool: pools[i % pools.length] as pg.Pool, schema: server.schema }));
      const group = freshSchemaName('g');
      const joined = await Promise.all(clients.map((client, i) => client.putMember(group, `worker-${i}`, null, member({ incarnation: `inc-${i}` }))));
      let records = joined.map((outcome) => applied(outcome));
      const versions = new Set(records.map((record) => record.version));
      for (let round = 1; round <= 10; round++) {
        const outcomes = await Promise.all(
          clients.map((client, i) => client.putMember(group, `worker-${i}`, (records[i] as MemberRecord).version, member({ incarnation: `inc-${i}`, held: round }))),
        );
        records = outcomes.map((outcome) => applied(outcome));
        for (const record of records) versions.add(record.version);
      }
      expect(versions.size).toBe(50 * 11);
      expect(Math.max(...versions)).toBe(50 * 11);
      const roster = await storage().getRoster(group);
      expect(roster.corrupt).toEqual([]);
      expect(roster.members.sort((a, b) => a.workerId.localeCompare(b.workerId, 'en', { numeric: true }))).toEqual(records);
    } finally {
      await Promise.all(pools.map((pool) => pool.end()));
    }
  });

  it('50 clients joining one worker id at once, in a new group and in an existing one: exactly one applies, and every other conflict carries it', async () => {
    const pools = Array.from({ length: 5 }, () => {
      const pool = new pg.Pool({ ...serverConfig, max: 4 });
      pool.on('error', () => undefined);
      return pool;
    });
    try {
      const clients = Array.from({ length: 50 }, (_, i) => new PostgresStorage({ pool: pools[i % pools.length] as pg.Pool, schema: server.schema }));
      for (const existing of [false, true]) {
        const group = freshSchemaName('g');
        if (existing) applied(await storage().putMember(group, 'someone-else', null, member()));
        const outcomes = await Promise.all(clients.map((client, i) => client.putMember(group, 'contested', null, member({ incarnation: `racer-${i}` }))));
        const winners = outcomes.filter((outcome) => outcome.status === 'applied');
        expect(winners, existing ? 'in an existing group' : 'in a new group').toHaveLength(1);
        const winner = applied(winners[0]);
        for (const outcome of outcomes) if (outcome !== winners[0]) expect(conflict(outcome)).toEqual(winner);
        expect((await storage().getRoster(group)).members.find((record) => record.workerId === 'contested')).toEqual(winner);
      }
    } finally {
      await Promise.all(pools.map((pool) => pool.end()));
    }
  });

  it('a write refused after waiting for a concurrent writer carries the member that writer stored, not the one the statement first saw', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const first = applied(await adapter.putMember(group, 'w', null, member()));
    const blocker = await server.pool().connect();
    try {
      // Another writer declares w dead and holds the row: the heartbeat at w's old version waits for it.
      await blocker.query('BEGIN');
      await blocker.query(
        `UPDATE ${rosters()} SET high_version = high_version + 1,
           members = jsonb_set(members, '{w}', jsonb_build_object('v', high_version + 1, 's', $2::text))
         WHERE group_name = $1`,
        [group, JSON.stringify(member({ status: 'dead' }))],
      );
      const heartbeat = adapter.putMember(group, 'w', first.version, member({ held: 1 }));
      const removal = adapter.removeMember(group, 'w', first.version);
      expect(await waitFor(async () => (await server.pool().query(`SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%leasehold_rosters%'`)).rowCount === 2)).toBe(true);
      await blocker.query('COMMIT');
      const dead = { ...first, version: first.version + 1, status: 'dead' };
      expect(conflict(await heartbeat)).toEqual(dead);
      expect(conflict(await removal)).toEqual(dead);
    } finally {
      blocker.release();
    }
  });

  it('reads a roster of 128 members at their largest size in one statement, every string round-tripping exactly', async () => {
    const { pool, statements } = countingPool(server.pool());
    const adapter = storage({ pool });
    const group = freshSchemaName('g');
    const awkward = 'nul \u0000 lone \ud800 separator \u2028 quote " backslash \\ é';
    const sized = (index: number): MemberState => {
      const base = member({ incarnation: `inc-${index}`, metadata: { awkward, ['__proto__']: 'p', 'a.b': '$[0]' }, requests: [{ leaseKey: 'quote " backslash \\ é \u2028', from: 'x' }] });
      const room = limits.maxMemberBytes - Buffer.byteLength(JSON.stringify(memberStateOf({ ...base, metadata: { ...base.metadata, pad: '' } })), 'utf8');
      return memberStateOf({ ...base, metadata: { ...base.metadata, pad: 'p'.repeat(room) } });
    };
    const written: MemberRecord[] = [];
    for (let i = 0; i < limits.maxMembers; i++) written.push(applied(await adapter.putMember(group, `worker-${i}`.padEnd(limits.maxNameBytes, 'w'), null, sized(i))));
    expect(Buffer.byteLength(JSON.stringify(memberStateOf(written[0] as MemberRecord)), 'utf8')).toBe(limits.maxMemberBytes);
    const before = statements();
    const roster = await adapter.getRoster(group);
    expect(statements() - before).toBe(1);
    expect(roster.corrupt).toEqual([]);
    expect(roster.members.sort((a, b) => a.version - b.version)).toEqual(written);
    expect(roster.members[0]?.metadata.awkward).toBe(awkward);
    expect(Object.keys(roster.members[0]?.metadata ?? {})).toContain('__proto__');
    const { rows } = await server.pool().query(`SELECT count(*)::int AS n FROM ${rosters()} WHERE group_name = $1`, [group]);
    expect(rows[0].n).toBe(1);
  });

  it('groups side by side never see each other, and member writes publish nothing on the change feed', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const heard: LeaseChange[] = [];
    const subscription = await adapter.subscribe(group, (change) => heard.push(change));
    try {
      const a = applied(await adapter.putMember(group, 'w', null, member()));
      const b = applied(await adapter.putMember(`${group}-2`, 'w', null, member({ incarnation: 'other' })));
      applied(await adapter.putMember(group, 'w', a.version, member({ held: 2 })));
      expect((await adapter.removeMember(group, 'w', a.version + 1)).status).toBe('applied');
      expect((await adapter.getRoster(`${group}-2`)).members).toEqual([b]);
      expect((await adapter.getRoster(group.toUpperCase())).members).toEqual([]);
      applied(await adapter.createLease({ group, leaseKey: 'marker' }));
      expect(await waitFor(() => heard.length > 0)).toBe(true);
      expect(heard).toEqual([{ group, leaseKey: 'marker', kind: 'created' }]);
    } finally {
      await subscription.close();
    }
  });

  it('refuses invalid input before sending anything', async () => {
    const { pool, statements } = countingPool(server.pool());
    const adapter = storage({ pool });
    await expect(adapter.getRoster('')).rejects.toThrow(InvalidInputError);
    await expect(adapter.putMember('g', 'w', -1, member())).rejects.toThrow(InvalidInputError);
    await expect(adapter.putMember('g', 'a\u0000b', null, member())).rejects.toThrow(InvalidInputError);
    await expect(adapter.putMember('g', 'w', null, member({ status: 'gone' as 'dead' }))).rejects.toThrow(InvalidInputError);
    await expect(adapter.putMember('g', 'w', null, member({ metadata: { pad: 'x'.repeat(limits.maxMemberBytes) } }))).rejects.toThrow(InvalidInputError);
    await expect(adapter.removeMember('g', 'w', 1.5)).rejects.toThrow(InvalidInputError);
    expect(statements()).toBe(0);
  });
});

describe('PostgresStorage corrupt members', () => {
  /** Damages a member as another program writing the table would: its version moves above the group's. */
  async function damage(group: string, workerId: string, stored: unknown): Promise<number> {
    const { rows } = await server.pool().query<{ high_version: string }>(
      `UPDATE ${rosters()} SET high_version = high_version + 1, members = jsonb_set(members, ARRAY[$2::text], $3::jsonb) WHERE group_name = $1 RETURNING high_version`,
      [group, workerId, JSON.stringify(stored)],
    );
    expect(rows).toHaveLength(1);
    return Number(rows[0]?.high_version);
  }

  it('lists a member whose state is not JSON in corrupt, naming it, while every other member reads', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const good = [applied(await adapter.putMember(group, 'a', null, member())), applied(await adapter.putMember(group, 'c', null, member()))];
    applied(await adapter.putMember(group, 'bad', null, member()));
    const version = await damage(group, 'bad', { v: 0, s: '{"format":' });
    await server.pool().query(`UPDATE ${rosters()} SET members = jsonb_set(members, '{bad,v}', to_jsonb($2::bigint)) WHERE group_name = $1`, [group, version]);
    const roster = await adapter.getRoster(group);
    expect(roster.members.sort((x, y) => x.version - y.version)).toEqual(good);
    expect(roster.corrupt).toHaveLength(1);
    expect(roster.corrupt[0]).toBeInstanceOf(CorruptRecordError);
    expect(roster.corrupt[0]).toMatchObject({
      group,
      workerId: 'bad',
      leaseKey: undefined,
      message: `[storage-postgres] stored member "bad" of group "${group}" is corrupt: state is not valid JSON ("{\\"format\\":")`,
    });
  });

  it('reports members stored in shapes that cannot be read (no version, a version that is no number, no state, not an object) each in corrupt', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const state = JSON.stringify(member());
    const shapes: Record<string, unknown> = { noVersion: { s: state }, textVersion: { v: 'x', s: state }, noState: { v: 3 }, number: 5, array: [1], fieldsMissing: { v: 4, s: '{"format":1}' } };
    applied(await adapter.putMember(group, 'ok', null, member()));
    for (const [workerId, stored] of Object.entries(shapes)) await damage(group, workerId, stored);
    const roster = await adapter.getRoster(group);
    expect(roster.members.map((record) => record.workerId)).toEqual(['ok']);
    expect(roster.corrupt.map((error) => error.workerId).sort()).toEqual(Object.keys(shapes).sort());
    for (const workerId of Object.keys(shapes)) {
      const outcome = await adapter.putMember(group, workerId, 1000, member());
      expect(outcome.status === 'unknown' && outcome.error, workerId).toBeInstanceOf(CorruptRecordError);
    }
    // A write of a healthy member goes on beside them.
    applied(await adapter.putMember(group, 'ok', 1, member({ held: 1 })));
  });

  it('a write or removal at another version is unknown carrying the CorruptRecordError and leaves it; a write at its stored version replaces it', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const before = applied(await adapter.putMember(group, 'bad', null, member()));
    const version = await damage(group, 'bad', { v: 0, s: '[]' });
    await server.pool().query(`UPDATE ${rosters()} SET members = jsonb_set(members, '{bad,v}', to_jsonb($2::bigint)) WHERE group_name = $1`, [group, version]);
    const damaged = await row(group);
    for (const outcome of [
      await adapter.putMember(group, 'bad', before.version, member()),
      await adapter.putMember(group, 'bad', null, member()),
      await adapter.removeMember(group, 'bad', before.version),
    ]) {
      expect(outcome.status).toBe('unknown');
      expect(outcome.status === 'unknown' && outcome.error).toMatchObject({ name: 'CorruptRecordError', group, workerId: 'bad' });
    }
    expect(await row(group)).toEqual(damaged);
    const replaced = applied(await adapter.putMember(group, 'bad', version, member({ held: 9 })));
    expect(replaced.version).toBe(version + 1);
    expect((await adapter.getRoster(group)).members).toEqual([replaced]);
    // And a removal at the stored version removes a corrupt member.
    await damage(group, 'bad', { v: replaced.version, s: 'nope' });
    expect((await adapter.removeMember(group, 'bad', replaced.version)).status).toBe('applied');
    expect(await adapter.getRoster(group)).toEqual({ group, members: [], corrupt: [] });
  });
});

describe('PostgresStorage roster failures', () => {
  it('a heartbeat whose connection dies while it waits for the row is unknown, and the next call works', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const first = applied(await adapter.putMember(group, 'w', null, member()));
    const blocker = await server.pool().connect();
    try {
      await blocker.query('BEGIN');
      await blocker.query(`SELECT 1 FROM ${rosters()} WHERE group_name = $1 FOR UPDATE`, [group]);
      const heartbeat = adapter.putMember(group, 'w', first.version, member({ held: 1 }));
      let pid: number | undefined;
      expect(await waitFor(async () => {
        const { rows } = await server.pool().query(`SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%leasehold_rosters%'`);
        pid = rows[0]?.pid;
        return pid !== undefined;
      })).toBe(true);
      await server.pool().query('SELECT pg_terminate_backend($1)', [pid]);
      const outcome = await heartbeat;
      expect(outcome.status).toBe('unknown');
      expect(outcome.status === 'unknown' && outcome.error).toBeInstanceOf(StorageOutcomeUnknownError);
    } finally {
      await blocker.query('ROLLBACK');
      blocker.release();
    }
    expect(applied(await adapter.putMember(group, 'w', first.version, member({ held: 2 }))).held).toBe(2);
  });
});

describe('PostgresStorage migration to schema version 2', () => {
  it('adds the roster table to tables of version 1 and rewrites their leases to name an incarnation, once', async () => {
    const schema = freshSchemaName('lh_upgrade');
    const adapter = new PostgresStorage({ pool: server.pool(), schema });
    const pool = server.pool();
    try {
      await adapter.migrate();
      // Back to version 1: no roster table, and leases of the old shape (one holding a pending owner).
      await pool.query(`DROP TABLE "${schema}".leasehold_rosters`);
      await pool.query(`UPDATE "${schema}".leasehold_migrations SET version = 1`);
      const old = (fields: object): string => JSON.stringify({ format: 1, owner: 'a', epoch: 3, checkpoint: '42', parentKeys: ['p'], pendingOwner: null, metadata: { incarnation: 'kept' }, ...fields });
      await pool.query(
        `INSERT INTO "${schema}".leasehold_leases (group_name, lease_key, version, live, high_epoch, state) VALUES
           ('g', 'plain', 5, true, 3, $1), ('g', 'pending', 7, true, 3, $2), ('g', 'broken', 2, true, 0, '{"owner":'), ('g', 'gone', 9, false, 4, NULL)`,
        [old({}), old({ pendingOwner: 'b', later: { nul: '\u0000' } })],
      );
      expect(await adapter.migrate()).toEqual({ fromVersion: 1, toVersion: SCHEMA_VERSION });
      expect(await adapter.migrate()).toEqual({ fromVersion: SCHEMA_VERSION, toVersion: SCHEMA_VERSION });
      const listing = await adapter.listLeases('g');
      expect(listing.corrupt.map((error) => error.leaseKey)).toEqual(['broken']);
      const expected = { group: 'g', format: 1, owner: 'a', epoch: 3, checkpoint: '42', parentKeys: ['p'], incarnation: null, metadata: { incarnation: 'kept' } };
      expect(listing.leases).toEqual([
        { ...expected, leaseKey: 'pending', version: 8, later: { nul: '\u0000' } },
        { ...expected, leaseKey: 'plain', version: 6 },
      ]);
      applied(await adapter.putMember('g', 'w', null, member()));
    } finally {
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    }
  });
});
