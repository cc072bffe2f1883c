/**
 * What a watcher reads on PostgreSQL instead of the whole roster: a few members by id, one `SELECT` of
 * their rows, and the group's roster digest, the version of a reserved tombstone row of the member table
 * whose worker id is the empty string.
 */
import {
  CorruptRecordError,
  InvalidInputError,
  StorageOutcomeUnknownError,
  StorageSchemaError,
  StorageUnavailableError,
} from '@leasehold/core';
import { limits, memberStateOf } from '@leasehold/core/adapter';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { PostgresStorage } from '../src/index.js';
import { applied, countingPool, freshSchemaName, member, serverConfig, useMigratedServer, waitFor } from './support.js';

const { server, storage } = useMigratedServer('lh_watch', 12);
const members = (): string => `"${server.schema}".leasehold_members`;

/** The stored rows of a group, tombstones and the digest's row included, as the table holds them. */
interface StoredRow {
  worker_id: string;
  version: string;
  removed: boolean;
  state: string | null;
}

async function rows(group: string): Promise<StoredRow[]> {
  const found = await server.pool().query<StoredRow>(`SELECT worker_id, version, removed, state FROM ${members()} WHERE group_name = $1 ORDER BY worker_id`, [group]);
  return found.rows;
}

/** The pid of the one statement of this file's schema waiting for a lock. */
async function waitingPid(): Promise<number> {
  let pid: number | undefined;
  const found = await waitFor(async () => {
    const { rows: waiting } = await server.pool().query<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`,
      [`%${server.schema}%`],
    );
    pid = waiting[0]?.pid;
    return pid !== undefined;
  });
  if (!found || pid === undefined) throw new Error('no statement waited for the lock');
  return pid;
}

describe('PostgresStorage getMembers', () => {
  it('reads exactly the named members, each as getRoster gives it: absent and removed ones are left out, a repeated id is read once', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    for (const workerId of ['a', 'b', 'c', 'd']) applied(await adapter.putMember(group, workerId, null, member({ incarnation: `${workerId}-1`, held: 2 })));
    const c = (await adapter.getRoster(group)).members.find((record) => record.workerId === 'c')!;
    expect((await adapter.removeMember(group, 'c', c.version)).status).toBe('applied');
    const roster = await adapter.getRoster(group);
    const read = await adapter.getMembers(group, ['d', 'c', 'nobody', 'a', 'd', 'a']);
    expect(read).toEqual({ group, members: roster.members.filter((record) => record.workerId === 'a' || record.workerId === 'd'), corrupt: [] });
    expect(await adapter.getMembers(group, [])).toEqual({ group, members: [], corrupt: [] });
    expect(await adapter.getMembers(`${group}-nobody`, ['a'])).toEqual({ group: `${group}-nobody`, members: [], corrupt: [] });
  });

  it('a named member that cannot be read back is in corrupt, naming its worker id exactly as getRoster reports it, while the others read', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const good = applied(await adapter.putMember(group, 'good', null, member()));
    applied(await adapter.putMember(group, 'bad', null, member()));
    await server.pool().query(`UPDATE ${members()} SET version = version + 1, state = '{"incarnation":' WHERE group_name = $1 AND worker_id = 'bad'`, [group]);
    const read = await adapter.getMembers(group, ['bad', 'good', 'bad']);
    expect(read.members).toEqual([good]);
    expect(read.corrupt).toHaveLength(1);
    expect(read.corrupt[0]).toBeInstanceOf(CorruptRecordError);
    expect(read.corrupt[0]).toMatchObject({ group, workerId: 'bad', leaseKey: undefined });
    const [reported] = (await adapter.getRoster(group)).corrupt;
    expect(read.corrupt[0]!.message).toBe(reported!.message);
    expect(read.corrupt[0]!.message).toMatch(/^\[storage-postgres\] stored member "bad" of group .* is corrupt/);
  });

  it('more than limits.maxWatchedMembers worker ids, a bad worker id or a bad group is refused with an InvalidInputError naming it, before a connection is asked for', async () => {
    const pool = new pg.Pool({ ...serverConfig, port: 1, connectionTimeoutMillis: 2000 });
    const adapter = new PostgresStorage({ pool, schema: server.schema });
    const ids = (count: number): string[] => Array.from({ length: count }, (_, i) => `w${i}`);
    try {
      await expect(adapter.getMembers('g', ids(17))).rejects.toThrow(InvalidInputError);
      await expect(adapter.getMembers('g', ids(17))).rejects.toThrow('[storage-postgres] at most 16 worker ids may be read at once, got 17');
      await expect(adapter.getMembers('g', ['w', ''])).rejects.toThrow('[storage-postgres] worker id must not be empty');
      await expect(adapter.getMembers('g', [7] as unknown as string[])).rejects.toThrow('[storage-postgres] worker id must be a string, got 7');
      await expect(adapter.getMembers('', ['w'])).rejects.toThrow('[storage-postgres] group must not be empty');
      await expect(adapter.getRosterDigest('')).rejects.toThrow(InvalidInputError);
      await expect(adapter.advanceRosterDigest(null as unknown as string)).rejects.toThrow('[storage-postgres] group must be a string, got null');
      expect(pool.totalCount).toBe(0);
      // Sixteen, the limit, are read.
      expect(await storage().getMembers(freshSchemaName('g'), ids(16))).toMatchObject({ members: [], corrupt: [] });
    } finally {
      await pool.end();
    }
  });
});

describe('PostgresStorage roster digest', () => {
  it('is 0 for a group never advanced; each advance adds one and returns the value it wrote; each group has its own', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const other = `${group}-other`;
    expect(await adapter.getRosterDigest(group)).toBe(0);
    expect([await adapter.advanceRosterDigest(group), await adapter.advanceRosterDigest(group), await adapter.advanceRosterDigest(group)]).toEqual([1, 2, 3]);
    expect(await adapter.getRosterDigest(group)).toBe(3);
    expect(await adapter.getRosterDigest(other)).toBe(0);
    expect(await adapter.advanceRosterDigest(other)).toBe(1);
    expect(await storage().getRosterDigest(group)).toBe(3);
  });

  it('50 advances at once through 5 pools end at 50: each value is returned once, none is lost', async () => {
    const pools = Array.from({ length: 5 }, () => {
      const pool = new pg.Pool({ ...serverConfig, max: 4 });
      pool.on('error', () => undefined);
      return pool;
    });
    try {
      const adapters = pools.map((pool) => storage({ pool }));
      const group = freshSchemaName('g');
      const values = await Promise.all(Array.from({ length: 50 }, (_, i) => adapters[i % adapters.length]!.advanceRosterDigest(group)));
      expect([...values].sort((a, b) => a - b)).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
      expect(await adapters[2]!.getRosterDigest(group)).toBe(50);
    } finally {
      await Promise.all(pools.map((pool) => pool.end()));
    }
  });

  it('is a tombstone row of worker id "" in the member table, holding the names its advances kept, which no member read sees and no member write moves, and which outlives the members', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const a = applied(await adapter.putMember(group, 'a', null, member()));
    await adapter.advanceRosterDigest(group);
    await adapter.advanceRosterDigest(group, ['a']);
    const beat = applied(await adapter.putMember(group, 'a', a.version, member({ held: 1 })));
    expect(await rows(group)).toEqual([
      { worker_id: '', version: '2', removed: true, state: '{"1": [], "2": ["a"]}' },
      { worker_id: 'a', version: '2', removed: false, state: JSON.stringify(memberStateOf(beat)) },
    ]);
    expect(await adapter.getRoster(group)).toEqual({ group, members: [beat], corrupt: [] });
    expect((await adapter.removeMember(group, 'a', beat.version)).status).toBe('applied');
    expect(await adapter.getRoster(group)).toEqual({ group, members: [], corrupt: [] });
    expect(await adapter.getRosterDigest(group)).toBe(2);
    // The worker id joins again above its tombstone; the digest's row is not a member to join beside.
    expect(applied(await adapter.putMember(group, 'a', null, member({ incarnation: 'inc-2' }))).version).toBe(3);
    expect((await adapter.getRoster(group)).members.map((record) => record.workerId)).toEqual(['a']);
    expect(await adapter.getRosterDigest(group)).toBe(2);
  });

  it('a digest read, an advance and a read of the moves are one statement each, and getMembers is one however many it names', async () => {
    const { pool, statements } = countingPool(server.pool());
    const adapter = storage({ pool });
    const group = freshSchemaName('g');
    for (let i = 0; i < 20; i++) applied(await adapter.putMember(group, `w${i}`, null, member()));
    const before = statements();
    expect((await adapter.getMembers(group, ['w1', 'w5', 'w19', 'nobody'])).members.map((record) => record.workerId)).toEqual(['w1', 'w19', 'w5']);
    expect(statements() - before).toBe(1);
    await adapter.advanceRosterDigest(group);
    expect(statements() - before).toBe(2);
    await adapter.getRosterDigest(group);
    expect(statements() - before).toBe(3);
    await adapter.advanceRosterDigest(group, ['w1', 'w5']);
    expect(await adapter.getRosterMoves(group, 0)).toEqual({ digest: 2, moved: null });
    expect(await adapter.getRosterMoves(group, 1)).toEqual({ digest: 2, moved: ['w1', 'w5'] });
    expect(statements() - before).toBe(6);
  });

  it(`keeps the names of the digest's last ${limits.rosterMovesKept} advances in the digest row, each advance dropping the older ones`, async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const total = limits.rosterMovesKept + 30;
    for (let i = 1; i <= total; i++) await adapter.advanceRosterDigest(group, [`w${i}`]);
    const [digestRow] = await rows(group);
    const kept = JSON.parse(digestRow!.state!) as Record<string, string[]>;
    expect(Object.keys(kept).map(Number).sort((x, y) => x - y)).toEqual(Array.from({ length: limits.rosterMovesKept }, (_, i) => total - limits.rosterMovesKept + 1 + i));
    expect(await adapter.getRosterMoves(group, 0)).toEqual({ digest: total, moved: null });
    expect(await adapter.getRosterMoves(group, total - 2)).toEqual({ digest: total, moved: [`w${total - 1}`, `w${total}`] });
  });

  it('reads an advance of an earlier release (one that only counted) or a digest row state it cannot read back as naming nobody, and an advance over such a state keeps its own names afresh', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    await adapter.advanceRosterDigest(group, ['a']);
    // An advance of the earlier release: the version alone.
    await server.pool().query(`UPDATE ${members()} SET version = version + 1 WHERE group_name = $1 AND worker_id = ''`, [group]);
    await adapter.advanceRosterDigest(group, ['b']);
    expect(await adapter.getRosterMoves(group, 0)).toEqual({ digest: 3, moved: null });
    expect(await adapter.getRosterMoves(group, 2)).toEqual({ digest: 3, moved: ['b'] });
    for (const [i, garbage] of ['not json', '[1, 2]', '{"x": ["a"]}', '{"4": "a"}'].entries()) {
      await server.pool().query(`UPDATE ${members()} SET state = $2 WHERE group_name = $1 AND worker_id = ''`, [group, garbage]);
      expect(await adapter.getRosterMoves(group, 2 + i), garbage).toEqual({ digest: 3 + i, moved: null });
      expect(await adapter.advanceRosterDigest(group, [`c${i}`]), garbage).toBe(4 + i);
      expect(await adapter.getRosterMoves(group, 3 + i), garbage).toEqual({ digest: 4 + i, moved: [`c${i}`] });
    }
  });
});

describe('PostgresStorage watchers\' reads failing', () => {
  it('an advance whose connection dies while it waits for the digest\'s row throws StorageOutcomeUnknownError, and the next advance works', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    expect(await adapter.advanceRosterDigest(group)).toBe(1);
    const blocker = await server.pool().connect();
    try {
      await blocker.query('BEGIN');
      await blocker.query(`SELECT 1 FROM ${members()} WHERE group_name = $1 AND worker_id = '' FOR UPDATE`, [group]);
      const advance = adapter.advanceRosterDigest(group).catch((caught: unknown) => caught);
      await server.pool().query('SELECT pg_terminate_backend($1)', [await waitingPid()]);
      const error = await advance;
      expect(error).toBeInstanceOf(StorageOutcomeUnknownError);
      expect((error as Error).message).toMatch(/^\[storage-postgres\] the outcome of advanceRosterDigest is unknown: /);
    } finally {
      await blocker.query('ROLLBACK');
      blocker.release();
    }
    expect(await adapter.advanceRosterDigest(group)).toBe(2);
  });

  it('a read whose connection dies while it waits throws StorageUnavailableError', async () => {
    const adapter = storage();
    const group = freshSchemaName('g');
    const blocker = await server.pool().connect();
    try {
      await blocker.query('BEGIN');
      await blocker.query(`LOCK TABLE ${members()} IN ACCESS EXCLUSIVE MODE`);
      for (const [operation, read] of [
        ['getMembers', () => adapter.getMembers(group, ['a'])],
        ['getRosterDigest', () => adapter.getRosterDigest(group)],
      ] as const) {
        const pending = read().catch((caught: unknown) => caught);
        await server.pool().query('SELECT pg_terminate_backend($1)', [await waitingPid()]);
        const error = await pending;
        expect(error).toBeInstanceOf(StorageUnavailableError);
        expect((error as Error).message).toMatch(new RegExp(`^\\[storage-postgres\\] ${operation} failed: `));
      }
    } finally {
      await blocker.query('ROLLBACK');
      blocker.release();
    }
  });

  it('no connection to be had is a StorageUnavailableError, and missing tables a StorageSchemaError naming migrate(), for all three', async () => {
    const pool = new pg.Pool({ ...serverConfig, port: 1, connectionTimeoutMillis: 2000 });
    const unreachable = new PostgresStorage({ pool, schema: server.schema });
    try {
      await expect(unreachable.getMembers('g', ['a'])).rejects.toThrow(/^\[storage-postgres\] getMembers could not get a connection: /);
      await expect(unreachable.getRosterDigest('g')).rejects.toThrow(StorageUnavailableError);
      await expect(unreachable.advanceRosterDigest('g')).rejects.toThrow(/^\[storage-postgres\] advanceRosterDigest could not get a connection: /);
    } finally {
      await pool.end();
    }
    const missing = storage({ schema: freshSchemaName('lh_missing') });
    for (const call of [() => missing.getMembers('g', ['a']), () => missing.getRosterDigest('g'), () => missing.advanceRosterDigest('g')]) {
      await expect(call()).rejects.toThrow(StorageSchemaError);
      await expect(call()).rejects.toThrow(/run migrate\(\) before using the storage$/);
    }
  });
});
