import {
  CorruptRecordError,
  InvalidInputError,
  RecordFormatError,
  StorageOutcomeUnknownError,
  type LeaseChange,
  type MemberRecord,
  type MemberState,
  type WriteResult,
} from '@leasehold/core';
import { decodeMember, encodeMemberState, limits, memberStateOf, RECORD_FORMAT } from '@leasehold/core/adapter';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { PostgresStorage, SCHEMA_VERSION } from '../src/index.js';
import { EARLIER_ROSTER_MARKER } from '../src/earlier-roster.js';
import { applied, countingPool, freshSchemaName, member, serverConfig, terminateWaiting, useMigratedServer, waitFor } from './support.js';

const { server, storage } = useMigratedServer('lh_roster', 12);
const members = (): string => `"${server.schema}".leasehold_members`;

function conflict<T>(outcome: WriteResult<T> | { status: 'applied' } | undefined): T | null {
  if (outcome?.status !== 'conflict') throw new Error(`expected a conflict, got ${JSON.stringify(outcome)}`);
  return outcome.current;
}

interface StoredMember {
  worker_id: string;
  version: string;
  removed: boolean;
  state: string | null;
}

/** The stored rows of a group's members, tombstones included, as the table holds them. */
async function rows(group: string): Promise<StoredMember[]> {
  const found = await server.pool().query<StoredMember>(`SELECT worker_id, version, removed, state FROM ${members()} WHERE group_name = $1 ORDER BY worker_id`, [group]);
  return found.rows;
}

describe('PostgresStorage roster', () => {
  it('an unknown group has an empty roster, and a heartbeat or removal of a missing member is a conflict with none that creates nothing', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    expect(await adapter.getRoster(group)).toEqual({ group, members: [], corrupt: [] });
    expect(conflict(await adapter.putMember(group, 'w', 1, member()))).toBeNull();
    expect(conflict(await adapter.removeMember(group, 'w', 1))).toBeNull();
    expect(await rows(group)).toEqual([]);
    applied(await adapter.putMember(group, 'other', null, member()));
    expect(conflict(await adapter.putMember(group, 'w', 1, member()))).toBeNull();
    expect(conflict(await adapter.removeMember(group, 'w', 1))).toBeNull();
    expect((await adapter.getRoster(group)).members.map((record) => record.workerId)).toEqual(['other']);
  });

  it('a join reads back exactly; a second join is a conflict carrying the member; a heartbeat moves its own member\'s version alone', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const a = applied(await adapter.putMember(group, 'a', null, member({ incarnation: 'a-1', held: 3, requests: [{ leaseKey: 'k', from: 'b' }], metadata: { host: 'x' } })));
    expect(a).toEqual({ group, workerId: 'a', version: 1, ...member({ incarnation: 'a-1', held: 3, requests: [{ leaseKey: 'k', from: 'b' }], metadata: { host: 'x' } }) });
    expect(conflict(await adapter.putMember(group, 'a', null, member({ incarnation: 'a-2' })))).toEqual(a);
    const b = applied(await adapter.putMember(group, 'b', null, member({ incarnation: 'b-1' })));
    expect(b.version).toBe(1);
    // A heartbeat that writes the stored state still moves the version.
    const renewed = applied(await adapter.putMember(group, 'a', a.version, memberStateOf(a)));
    expect(renewed).toEqual({ ...a, version: 2 });
    expect(conflict(await adapter.putMember(group, 'a', a.version, member({ status: 'dead' })))).toEqual(renewed);
    const roster = await adapter.getRoster(group);
    expect(roster.corrupt).toEqual([]);
    expect(roster.members).toEqual([renewed, b]);
    expect(await rows(group)).toEqual([
      { worker_id: 'a', version: '2', removed: false, state: JSON.stringify(memberStateOf(renewed)) },
      { worker_id: 'b', version: '1', removed: false, state: JSON.stringify(memberStateOf(b)) },
    ]);
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
    // The tombstone keeps the version, and drops the state.
    expect(await rows(group)).toEqual([{ worker_id: 'w', version: '6', removed: true, state: null }]);
    expect(conflict(await adapter.putMember(group, 'w', record.version, member()))).toBeNull();
    expect(conflict(await adapter.removeMember(group, 'w', record.version))).toBeNull();
    const again = applied(await adapter.putMember(group, 'w', null, member({ incarnation: 'inc-2' })));
    expect(again.version).toBe(7);
    expect(conflict(await adapter.putMember(group, 'w', record.version, member()))).toEqual(again);
  });

  it('50 members heartbeating at once through separate clients: every write applies, each member\'s version moves by one per write, and each member reads back as last written', async () => {
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
      expect(records.map((record) => record.version)).toEqual(Array.from({ length: 50 }, () => 1));
      for (let round = 1; round <= 10; round++) {
        const outcomes = await Promise.all(
          clients.map((client, i) => client.putMember(group, `worker-${i}`, (records[i] as MemberRecord).version, member({ incarnation: `inc-${i}`, held: round }))),
        );
        records = outcomes.map((outcome) => applied(outcome));
        expect(records.map((record) => record.version), `round ${round}`).toEqual(Array.from({ length: 50 }, () => round + 1));
      }
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
      await blocker.query(`UPDATE ${members()} SET version = version + 1, state = $3 WHERE group_name = $1 AND worker_id = $2`, [
        group,
        'w',
        JSON.stringify(member({ status: 'dead' })),
      ]);
      const heartbeat = adapter.putMember(group, 'w', first.version, member({ held: 1 }));
      const removal = adapter.removeMember(group, 'w', first.version);
      expect(await waitFor(async () => (await server.pool().query(`SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%leasehold_members%'`)).rowCount === 2)).toBe(true);
      await blocker.query('COMMIT');
      const dead = { ...first, version: first.version + 1, status: 'dead' };
      expect(conflict(await heartbeat)).toEqual(dead);
      expect(conflict(await removal)).toEqual(dead);
    } finally {
      blocker.release();
    }
  });

  it('reads a roster of 1,000 members at their largest size in one statement, every string round-tripping exactly', async () => {
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
    expect(limits.maxMembers).toBe(1000);
    for (let start = 0; start < limits.maxMembers; start += 50) {
      const batch = Array.from({ length: Math.min(50, limits.maxMembers - start) }, (_, i) => start + i);
      written.push(...(await Promise.all(batch.map(async (i) => applied(await adapter.putMember(group, `worker-${i}`.padEnd(limits.maxNameBytes, 'w'), null, sized(i)))))));
    }
    expect(Buffer.byteLength(JSON.stringify(memberStateOf(written[0] as MemberRecord)), 'utf8')).toBe(limits.maxMemberBytes);
    const before = statements();
    const roster = await adapter.getRoster(group);
    expect(statements() - before).toBe(1);
    expect(roster.corrupt).toEqual([]);
    const byWorker = (a: MemberRecord, b: MemberRecord): number => (a.workerId < b.workerId ? -1 : a.workerId > b.workerId ? 1 : 0);
    expect(roster.members).toEqual([...written].sort(byWorker));
    expect(roster.members[0]?.metadata.awkward).toBe(awkward);
    expect(Object.keys(roster.members[0]?.metadata ?? {})).toContain('__proto__');
    expect(await rows(group)).toHaveLength(limits.maxMembers);
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
      expect(heard).toEqual([{ group, leaseKey: 'marker', kind: 'created', owner: null }]);
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
  /** Damages a member as another program writing the table would: its version moves, as every writer's does. */
  async function damage(group: string, workerId: string, state: string | null): Promise<number> {
    const { rows: found } = await server.pool().query<{ version: string }>(
      `UPDATE ${members()} SET version = version + 1, state = $3 WHERE group_name = $1 AND worker_id = $2 AND NOT removed RETURNING version`,
      [group, workerId, state],
    );
    expect(found).toHaveLength(1);
    return Number(found[0]?.version);
  }

  it('lists a member whose state is not JSON in corrupt, naming it, while every other member reads', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const good = [applied(await adapter.putMember(group, 'a', null, member())), applied(await adapter.putMember(group, 'c', null, member()))];
    applied(await adapter.putMember(group, 'bad', null, member()));
    await damage(group, 'bad', '{"format":');
    const roster = await adapter.getRoster(group);
    expect(roster.members).toEqual(good);
    expect(roster.corrupt).toHaveLength(1);
    expect(roster.corrupt[0]).toBeInstanceOf(CorruptRecordError);
    expect(roster.corrupt[0]).toMatchObject({
      group,
      workerId: 'bad',
      leaseKey: undefined,
      message: `[storage-postgres] stored member "bad" of group "${group}" is corrupt: state is not valid JSON ("{\\"format\\":")`,
    });
  });

  it('reports members stored in states that cannot be read (none, not an object, fields missing or mistyped) each in corrupt', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const states: Record<string, string | null> = {
      noState: null,
      number: '5',
      array: '[1]',
      fieldsMissing: '{"format":1}',
      badStatus: JSON.stringify({ ...member(), status: 'gone' }),
    };
    applied(await adapter.putMember(group, 'ok', null, member()));
    const versions = new Map<string, number>();
    for (const [workerId, state] of Object.entries(states)) {
      applied(await adapter.putMember(group, workerId, null, member()));
      versions.set(workerId, await damage(group, workerId, state));
    }
    const roster = await adapter.getRoster(group);
    expect(roster.members.map((record) => record.workerId)).toEqual(['ok']);
    expect(roster.corrupt.map((error) => error.workerId).sort()).toEqual(Object.keys(states).sort());
    for (const workerId of Object.keys(states)) {
      const outcome = await adapter.putMember(group, workerId, 1, member());
      expect(outcome.status === 'unknown' && outcome.error, workerId).toBeInstanceOf(CorruptRecordError);
    }
    // A write of a healthy member goes on beside them, and one at a damaged member's stored version replaces it.
    applied(await adapter.putMember(group, 'ok', 1, member({ held: 1 })));
    applied(await adapter.putMember(group, 'noState', versions.get('noState') as number, member({ held: 2 })));
  });

  it('a join, a write or a removal at another version is unknown carrying the CorruptRecordError and leaves it; a write at its stored version replaces it', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const before = applied(await adapter.putMember(group, 'bad', null, member()));
    const version = await damage(group, 'bad', '[]');
    const damaged = await rows(group);
    for (const outcome of [
      await adapter.putMember(group, 'bad', before.version, member()),
      await adapter.putMember(group, 'bad', null, member()),
      await adapter.removeMember(group, 'bad', before.version),
    ]) {
      expect(outcome.status).toBe('unknown');
      expect(outcome.status === 'unknown' && outcome.error).toMatchObject({ name: 'CorruptRecordError', group, workerId: 'bad' });
    }
    expect(await rows(group)).toEqual(damaged);
    const replaced = applied(await adapter.putMember(group, 'bad', version, member({ held: 9 })));
    expect(replaced.version).toBe(version + 1);
    expect((await adapter.getRoster(group)).members).toEqual([replaced]);
    // And a removal at the stored version removes a corrupt member, leaving its tombstone.
    const again = await damage(group, 'bad', 'nope');
    expect((await adapter.removeMember(group, 'bad', again)).status).toBe('applied');
    expect(await adapter.getRoster(group)).toEqual({ group, members: [], corrupt: [] });
    expect(await rows(group)).toEqual([{ worker_id: 'bad', version: String(again), removed: true, state: null }]);
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
      await blocker.query(`SELECT 1 FROM ${members()} WHERE group_name = $1 AND worker_id = 'w' FOR UPDATE`, [group]);
      const heartbeat = adapter.putMember(group, 'w', first.version, member({ held: 1 }));
      await terminateWaiting(server.pool(), '%leasehold_members%');
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

describe('PostgresStorage migrations of the roster', () => {
  it('adds the roster and member tables to tables of version 1 and rewrites their leases to name an incarnation, once', async () => {
    const schema = freshSchemaName('lh_upgrade');
    const adapter = new PostgresStorage({ pool: server.pool(), schema });
    const pool = server.pool();
    try {
      await adapter.migrate();
      // Back to version 1: no roster or member table, and leases of the old shape (one holding a pending owner).
      await pool.query(`DROP TABLE "${schema}".leasehold_rosters, "${schema}".leasehold_members`);
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

  it('adds the member table to tables of version 2 and leaves their roster rows as the earlier release wrote them', async () => {
    const schema = freshSchemaName('lh_upgrade');
    const adapter = new PostgresStorage({ pool: server.pool(), schema });
    const pool = server.pool();
    try {
      await adapter.migrate();
      await pool.query(`DROP TABLE "${schema}".leasehold_members`);
      await pool.query(`UPDATE "${schema}".leasehold_migrations SET version = 2`);
      const earlier = earlierRelease(`"${schema}".leasehold_rosters`);
      const kept = await earlier.join('g', 'old', member({ status: 'dead' }));
      expect(await adapter.migrate()).toEqual({ fromVersion: 2, toVersion: SCHEMA_VERSION });
      expect(await adapter.migrate()).toEqual({ fromVersion: SCHEMA_VERSION, toVersion: SCHEMA_VERSION });
      expect(await earlier.roster('g')).toEqual({ high_version: '1', members: { old: kept } });
      expect(await adapter.getRoster('g')).toEqual({ group: 'g', members: [], corrupt: [] });
      expect(applied(await adapter.putMember('g', 'w', null, member())).version).toBe(1);
    } finally {
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    }
  });
});

/** The roster row of schema version 2, as the driver parses it. */
interface EarlierRosterRow {
  high_version: string;
  members: Record<string, { v: number; s: string }>;
}

/**
 * A worker of the earlier release, which kept a group's roster in one row of the roster table (schema
 * version 2): its member writes, statement for statement as it sent them, and its roster read.
 */
function earlierRelease(table: string) {
  const pool = server.pool();
  const write = async (sql: string, values: unknown[]): Promise<number> => {
    const { rows: written } = await pool.query<{ applied_version: string | null }>(sql, values);
    const version = written[0]?.applied_version;
    if (version === null || version === undefined) throw new Error(`the earlier release's write was refused: ${JSON.stringify(written)}`);
    return Number(version);
  };
  return {
    async join(group: string, workerId: string, state: MemberState): Promise<{ v: number; s: string }> {
      const s = encodeMemberState(state);
      const v = await write(
        `WITH applied AS (
          INSERT INTO ${table} AS t (group_name, high_version, members)
          VALUES ($1, 1, jsonb_build_object($2::text, jsonb_build_object('v', 1, 's', $3::text)))
          ON CONFLICT (group_name) DO UPDATE
            SET high_version = t.high_version + 1,
                members = jsonb_set(t.members, ARRAY[$2::text], jsonb_build_object('v', t.high_version + 1, 's', $3::text))
            WHERE NOT (t.members ? $2::text)
          RETURNING t.high_version
        )
        SELECT applied.high_version AS applied_version FROM (SELECT 1) AS one LEFT JOIN applied ON true`,
        [group, workerId, s],
      );
      return { v, s };
    },
    async heartbeat(group: string, workerId: string, version: number, state: MemberState): Promise<{ v: number; s: string }> {
      const s = encodeMemberState(state);
      const v = await write(
        `WITH applied AS (
          UPDATE ${table} AS t
          SET high_version = t.high_version + 1,
              members = jsonb_set(t.members, ARRAY[$2::text], jsonb_build_object('v', t.high_version + 1, 's', $4::text))
          WHERE t.group_name = $1 AND t.members -> $2::text -> 'v' = to_jsonb($3::bigint)
          RETURNING t.high_version
        )
        SELECT applied.high_version AS applied_version FROM (SELECT 1) AS one LEFT JOIN applied ON true`,
        [group, workerId, version, s],
      );
      return { v, s };
    },
    async remove(group: string, workerId: string, version: number): Promise<void> {
      await write(
        `WITH applied AS (
          UPDATE ${table} AS t SET members = t.members - $2::text
          WHERE t.group_name = $1 AND t.members -> $2::text -> 'v' = to_jsonb($3::bigint)
          RETURNING t.high_version
        )
        SELECT applied.high_version AS applied_version FROM (SELECT 1) AS one LEFT JOIN applied ON true`,
        [group, workerId, version],
      );
    },
    /** The group's row as stored, or `undefined`. */
    async roster(group: string): Promise<EarlierRosterRow | undefined> {
      const { rows: found } = await pool.query<EarlierRosterRow>(`SELECT high_version, members FROM ${table} WHERE group_name = $1`, [group]);
      return found[0];
    },
    /** The members as the earlier release's core reads them (decodeMember of each entry). */
    async members(group: string): Promise<MemberRecord[]> {
      const row = await this.roster(group);
      return Object.entries(row?.members ?? {}).map(([workerId, stored]) => decodeMember(group, workerId, stored.v, stored.s));
    },
  };
}

describe('PostgresStorage beside the roster row of an earlier release', () => {
  const earlier = (): ReturnType<typeof earlierRelease> => earlierRelease(`"${server.schema}".leasehold_rosters`);

  it('a join beside a live member of the earlier release throws a RecordFormatError naming it and writes no member; the row then holds a member that core reads as format 2, and the earlier release stops on it', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const old = earlier();
    const alive = await old.join(group, 'old-alive', member({ incarnation: 'old-1' }));
    const dead = await old.join(group, 'old-dead', member({ incarnation: 'old-2' }));
    const died = await old.heartbeat(group, 'old-dead', dead.v, member({ incarnation: 'old-2', status: 'dead' }));
    expect(died.v).toBe(3);

    const refused = adapter.putMember(group, 'new', null, member({ incarnation: 'new-1' }));
    await expect(refused).rejects.toThrow(RecordFormatError);
    const error = (await refused.catch((thrown: unknown) => thrown)) as RecordFormatError;
    expect(error.format).toBe(1);
    expect(error.message).toContain(`[storage-postgres] group "${group}" still has members alive in the roster table ${server.schema}.leasehold_rosters of an earlier release (one row per group): "old-alive";`);
    expect(error.message).not.toContain('old-dead');
    expect(error.message).toContain('leasehold member remove');
    expect(await rows(group)).toEqual([]);
    expect(await adapter.getRoster(group)).toEqual({ group, members: [], corrupt: [] });

    // The earlier release's row: its members as they were, and the marker one version above them all.
    const stored = await old.roster(group);
    expect(stored?.high_version).toBe('4');
    expect(stored?.members).toEqual({ 'old-alive': alive, 'old-dead': died, [EARLIER_ROSTER_MARKER]: { v: 4, s: expect.any(String) } });
    const marker = (await old.members(group)).find((record) => record.workerId === EARLIER_ROSTER_MARKER);
    expect(marker).toMatchObject({ format: 2, status: 'dead', held: 0, requests: [], metadata: { movedTo: `${server.schema}.leasehold_members` } });
    // The check the earlier release's coordinator makes of every roster it reads, and stops on.
    expect((await old.members(group)).find((record) => record.format > RECORD_FORMAT)?.workerId).toBe(EARLIER_ROSTER_MARKER);

    // Refused again while the member lives, without marking twice; applied once it left.
    await expect(adapter.putMember(group, 'new', null, member())).rejects.toThrow(RecordFormatError);
    expect((await old.roster(group))?.high_version).toBe('4');
    await old.heartbeat(group, 'old-alive', alive.v, member({ incarnation: 'old-1', status: 'dead' }));
    const joined = applied(await adapter.putMember(group, 'new', null, member({ incarnation: 'new-1' })));
    expect(joined.version).toBe(1);
    expect((await adapter.getRoster(group)).members).toEqual([joined]);
  });

  it('a join beside only dead and removed members of the earlier release applies, marks its row and notes the group clear, so that later joins are one statement', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const old = earlier();
    const dead = await old.join(group, 'old-dead', member({ status: 'dead' }));
    const gone = await old.join(group, 'old-gone', member());
    await old.remove(group, 'old-gone', gone.v);
    const joined = applied(await adapter.putMember(group, 'new', null, member()));
    expect(joined.version).toBe(1);
    expect((await adapter.getRoster(group)).members).toEqual([joined]);
    const stored = await old.roster(group);
    expect(stored?.members).toEqual({ 'old-dead': dead, [EARLIER_ROSTER_MARKER]: { v: 3, s: expect.any(String), clear: true } });
    expect(stored?.high_version).toBe('3');
    // The earlier release reads "v" and "s" of an entry: the note leaves the marker a member of format 2.
    expect((await old.members(group)).find((record) => record.workerId === EARLIER_ROSTER_MARKER)?.format).toBe(2);
    // Later joins of the group are one statement that only reads the row: one applies while another
    // transaction holds the row's lock (a join of the earlier release, or a marking transaction, would wait).
    const holder = await server.pool().connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM "${server.schema}".leasehold_rosters WHERE group_name = $1 FOR UPDATE`, [group]);
      applied(await adapter.putMember(group, 'second', null, member()));
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
    expect(await old.roster(group)).toEqual(stored);
  });

  it('a member written in the earlier layout that cannot be read back does not hold a join back', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    await earlier().join(group, 'old', member());
    await server.pool().query(`UPDATE "${server.schema}".leasehold_rosters SET members = jsonb_set(members, '{old,s}', '"{"') WHERE group_name = $1`, [group]);
    applied(await adapter.putMember(group, 'new', null, member()));
  });

  it('a group the earlier release never used gets a roster row holding the marker alone, so that a worker of the earlier release started on it later stops', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const joined = applied(await adapter.putMember(group, 'w', null, member()));
    expect((await earlier().members(group)).map((stored) => [stored.workerId, stored.format, stored.status])).toEqual([[EARLIER_ROSTER_MARKER, 2, 'dead']]);
    const marked = await earlier().roster(group);
    const beat = applied(await adapter.putMember(group, 'w', joined.version, member({ held: 1 })));
    expect((await adapter.removeMember(group, 'w', beat.version)).status).toBe('applied');
    applied(await adapter.putMember(group, 'w', null, member()));
    expect(await earlier().roster(group)).toEqual(marked);
    // A worker of the earlier release reads the roster before it joins: what it reads holds a member of
    // format 2, the first thing its core checks, and stops on.
    expect((await earlier().members(group)).some((stored) => stored.format > 1)).toBe(true);
    // The first join found nobody alive there and noted the group clear: one of the earlier release that
    // read the roster before the marker and joined after it holds nothing (a member takes nothing in the
    // tick it joins) and stops at its next roster read, so later joins do not wait for it.
    expect((await earlier().roster(group))?.members[EARLIER_ROSTER_MARKER]).toMatchObject({ clear: true });
    await earlier().join(group, 'old-late', member());
    applied(await adapter.putMember(group, 'w2', null, member()));
  });

  it('200 joins of a new group at once through one client mark its roster row in one transaction, and the rest join by the one statement', async () => {
    const pool = new pg.Pool({ ...serverConfig, max: 4 });
    // Counts the transactions begun on the pool's connections.
    let dedicated = 0;
    pool.on('connect', (client) => {
      const query = client.query.bind(client) as (...args: unknown[]) => unknown;
      (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
        if (typeof args[0] === 'string' && /^\s*BEGIN/i.test(args[0])) dedicated += 1;
        return query(...args);
      };
    });
    try {
      const adapter = new PostgresStorage({ pool, schema: server.schema });
      const group = freshSchemaName('g');
      const joined = await Promise.all(Array.from({ length: 200 }, (_, i) => adapter.putMember(group, `w${i}`, null, member())));
      expect(joined.every((outcome) => outcome.status === 'applied')).toBe(true);
      expect(dedicated).toBe(1);
      expect((await earlier().members(group)).map((stored) => stored.workerId)).toEqual([EARLIER_ROSTER_MARKER]);
      expect((await adapter.getRoster(group)).members).toHaveLength(200);
    } finally {
      await pool.end();
    }
  });

  it('20 joins at once beside a live member of the earlier release are all refused, and the row is marked once', async () => {
    const group = freshSchemaName('g');
    const old = earlier();
    await old.join(group, 'old', member());
    const outcomes = await Promise.allSettled(Array.from({ length: 20 }, (_, i) => storage().putMember(group, `new-${i % 4}`, null, member())));
    for (const outcome of outcomes) {
      expect(outcome.status).toBe('rejected');
      expect(outcome.status === 'rejected' && outcome.reason).toBeInstanceOf(RecordFormatError);
    }
    const stored = await old.roster(group);
    expect(stored?.high_version).toBe('2');
    expect(Object.keys(stored?.members ?? {}).sort()).toEqual([EARLIER_ROSTER_MARKER, 'old'].sort());
    expect(await rows(group)).toEqual([]);
  });

  it('a join whose connection dies while it waits for the earlier release\'s row is unknown, and the next join works', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    await earlier().join(group, 'old', member({ status: 'dead' }));
    const blocker = await server.pool().connect();
    try {
      // An earlier release's write of the group holds its row: the join waits for the lock.
      await blocker.query('BEGIN');
      await blocker.query(`SELECT 1 FROM "${server.schema}".leasehold_rosters WHERE group_name = $1 FOR UPDATE`, [group]);
      const join = adapter.putMember(group, 'new', null, member());
      await terminateWaiting(server.pool(), '%leasehold_rosters%FOR UPDATE%');
      const outcome = await join;
      expect(outcome.status).toBe('unknown');
      expect(outcome.status === 'unknown' && outcome.error).toBeInstanceOf(StorageOutcomeUnknownError);
    } finally {
      await blocker.query('ROLLBACK');
      blocker.release();
    }
    expect(await rows(group)).toEqual([]);
    expect(applied(await adapter.putMember(group, 'new', null, member())).version).toBe(1);
  });
});
