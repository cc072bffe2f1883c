import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CorruptRecordError, InvalidConfigError, InvalidInputError, type LeaseRecord, type MemberRecord, type MemberState, type WriteResult } from '@leasehold/core';
import { leaderStateOf, leaseStateOf, limits, memberStateOf, RECORD_FORMAT } from '@leasehold/core/adapter';
import { runConformanceSuite } from '@leasehold/core/testing';
import Database from 'better-sqlite3';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { SqliteStorage } from '../custom-storage/sqlite-storage.js';

// One database file for this test file, in a fresh temporary folder; each client is a new connection to
// it, as separate processes on one host would be. The folder is removed only if every test passed.
const folder = mkdtempSync(join(tmpdir(), 'leasehold-sqlite-'));
const file = join(folder, 'leases.db');
const connections = new Set<Database.Database>();
let failed = false;

function connect(): Database.Database {
  const database = new Database(file);
  connections.add(database);
  return database;
}

function disconnect(database: Database.Database): void {
  connections.delete(database);
  database.close();
}

beforeEach(({ onTestFailed }) => {
  onTestFailed(() => {
    failed = true;
  });
});

afterAll(() => {
  for (const database of connections) database.close();
  if (!failed) rmSync(folder, { recursive: true, force: true });
});

function applied<T>(outcome: WriteResult<T> | undefined): T {
  if (outcome?.status !== 'applied') throw new Error(`expected applied, got ${JSON.stringify(outcome)}`);
  return outcome.record;
}

async function waitUntil(condition: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('timed out waiting for the processes to connect');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

const clients = new Map<SqliteStorage, Database.Database>();

function open(): { storage: SqliteStorage; database: Database.Database } {
  const database = connect();
  const storage = new SqliteStorage({ database });
  clients.set(storage, database);
  return { storage, database };
}

runConformanceSuite(
  { describe, it, afterAll },
  {
    name: 'SqliteStorage',
    createStorage: async () => open().storage,
    closeStorage: async (storage) => {
      const database = clients.get(storage as SqliteStorage);
      clients.delete(storage as SqliteStorage);
      if (database) disconnect(database);
    },
    // A lease row whose state is no longer JSON, as a bad write by another program would leave it.
    corruptLease: async (group, leaseKey) => {
      const database = connect();
      database.prepare(`UPDATE leasehold_leases SET state = '{"owner":' WHERE grp = ? AND lease_key = ?`).run(group, leaseKey);
      disconnect(database);
    },
    // A member row whose state is no longer JSON, written by another program that moves the version as a
    // writer does.
    corruptMember: async (group, workerId) => {
      const database = connect();
      try {
        return database
          .prepare(`UPDATE leasehold_members SET state = '{"status":', version = version + 1 WHERE grp = ? AND worker_id = ? AND state IS NOT NULL RETURNING version`)
          .get(group, workerId);
      } finally {
        disconnect(database);
      }
    },
    // An embedded database has no connection to cut from outside: closing the client's own one is the break.
    faults: {
      kind: 'break',
      createStorage: async () => {
        const { storage, database } = open();
        return { storage, breakConnection: () => void database.close() };
      },
    },
    // Separate processes contend for the file's write lock; clients of one process never overlap.
    crossProcess: {
      module: new URL('./support/sqlite-client.ts', import.meta.url),
      options: () => ({ file }),
      execArgv: ['--import', 'tsx'],
    },
  },
);

describe('SqliteStorage beyond the conformance suite', () => {
  // The suite's concurrency tests race clients of one process, and better-sqlite3 is synchronous, so
  // their transactions never overlap. Separate processes do contend for the file's write lock.
  it('four processes making 100 conditional increments each on one lease lose no update', async () => {
    const database = connect();
    const storage = new SqliteStorage({ database });
    const created = await storage.createLease({ group: 'processes', leaseKey: 'counter', metadata: { count: '0' } });
    const incrementer = fileURLToPath(new URL('./support/sqlite-incrementer.ts', import.meta.url));

    const processes = Array.from({ length: 4 }, () => {
      const child = spawn(process.execPath, ['--import', 'tsx', incrementer, file, 'processes', 'counter', '100'], { stdio: ['pipe', 'pipe', 'inherit'] });
      let stdout = '';
      child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
      const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
      return { child, exited, stdout: () => stdout };
    });
    // All connected before any starts, so that the four really contend for the lock.
    await waitUntil(() => processes.every((racer) => racer.stdout().startsWith('ready\n')), 30_000);
    for (const { child } of processes) child.stdin.end('go\n');
    expect(await Promise.all(processes.map((racer) => racer.exited))).toEqual([0, 0, 0, 0]);

    const reports = processes.map((racer) => JSON.parse(racer.stdout().slice('ready\n'.length)) as { applied: number; conflicts: number });
    expect(reports.map((report) => report.applied)).toEqual([100, 100, 100, 100]);
    const final = await storage.getLease('processes', 'counter');
    expect(final).toMatchObject({ version: (created as { record: LeaseRecord }).record.version + 400, metadata: { count: '400' } });
    disconnect(database);
  }, 300_000);

  it('a lease row whose state is not JSON is listed in corrupt by its key, beside every other lease, and get throws a CorruptRecordError naming it', async () => {
    const database = connect();
    const storage = new SqliteStorage({ database });
    for (const leaseKey of ['shard-0', 'shard-1', 'shard-2']) await storage.createLease({ group: 'corrupt-lease', leaseKey });
    database.prepare(`UPDATE leasehold_leases SET state = '{"owner":', version = version + 1 WHERE grp = 'corrupt-lease' AND lease_key = 'shard-1'`).run();

    const named = '[sqlite-storage] stored lease "shard-1" of group "corrupt-lease" is corrupt: state is not valid JSON';
    await expect(storage.getLease('corrupt-lease', 'shard-1')).rejects.toMatchObject({ name: 'CorruptRecordError', group: 'corrupt-lease', leaseKey: 'shard-1' });
    await expect(storage.getLease('corrupt-lease', 'shard-1')).rejects.toThrow(named);
    const { leases, corrupt } = await storage.listLeases('corrupt-lease');
    expect(leases.map((lease) => lease.leaseKey).sort()).toEqual(['shard-0', 'shard-2']);
    expect(corrupt).toHaveLength(1);
    expect(corrupt[0]).toBeInstanceOf(CorruptRecordError);
    expect(corrupt[0]?.leaseKey).toBe('shard-1');
    expect(corrupt[0]?.message).toContain(named);
    disconnect(database);
  });

  it('a leader row with a version that is not a positive integer is reported as a CorruptRecordError', async () => {
    const database = connect();
    const storage = new SqliteStorage({ database });
    await storage.createLeader({ group: 'corrupt-leader', holder: 'w1', term: 1 });
    database.prepare(`UPDATE leasehold_leaders SET version = 'seven' WHERE grp = 'corrupt-leader'`).run();

    await expect(storage.getLeader('corrupt-leader')).rejects.toThrow(CorruptRecordError);
    await expect(storage.getLeader('corrupt-leader')).rejects.toThrow('version must be a positive integer, found "seven"');
    disconnect(database);
  });

  it('a batch that meets a corrupt lease applies its other updates and reports that one as unknown; create and delete on it are unknown too, and it is never overwritten', async () => {
    const database = connect();
    const storage = new SqliteStorage({ database });
    const [good, bad] = [applied(await storage.createLease({ group: 'mixed-batch', leaseKey: 'good' })), applied(await storage.createLease({ group: 'mixed-batch', leaseKey: 'bad' }))];
    // Damaged as another program writing the table would: the version moves with its write.
    database.prepare(`UPDATE leasehold_leases SET state = 'null', version = version + 1 WHERE grp = 'mixed-batch' AND lease_key = 'bad'`).run();
    const stored = (): unknown => database.prepare(`SELECT version, state FROM leasehold_leases WHERE grp = 'mixed-batch' AND lease_key = 'bad'`).get();
    const damaged = stored();

    const [first, second] = await storage.updateLeases('mixed-batch', [good, bad].map((lease) => ({ leaseKey: lease.leaseKey, expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner: 'w1', epoch: 1 } })));

    expect(first).toMatchObject({ status: 'applied', record: { owner: 'w1', version: good.version + 1 } });
    expect(second).toMatchObject({ status: 'unknown', error: { name: 'CorruptRecordError', leaseKey: 'bad' } });
    for (const outcome of [
      await storage.createLease({ group: 'mixed-batch', leaseKey: 'bad' }, { recreate: true }),
      await storage.deleteLease('mixed-batch', 'bad', bad.version),
    ]) {
      expect(outcome).toMatchObject({ status: 'unknown', error: { name: 'CorruptRecordError', leaseKey: 'bad' } });
    }
    expect(stored()).toEqual(damaged);
    disconnect(database);
  });

  it('a tombstone outlives the connection: after a reopen the key is not created again without recreate, and with it continues above the deleted version and epoch', async () => {
    const first = connect();
    const before = new SqliteStorage({ database: first });
    const { version } = applied(await before.createLease({ group: 'reopened', leaseKey: 'shard-1', owner: 'w1', epoch: 6 }));
    expect((await before.deleteLease('reopened', 'shard-1', version)).status).toBe('applied');
    disconnect(first);

    const second = connect();
    const after = new SqliteStorage({ database: second });
    expect(await after.createLease({ group: 'reopened', leaseKey: 'shard-1' })).toEqual({ status: 'conflict', current: null });
    expect(await after.listLeases('reopened')).toEqual({ leases: [], corrupt: [] });
    const again = await after.createLease({ group: 'reopened', leaseKey: 'shard-1' }, { recreate: true });

    expect(again).toMatchObject({ status: 'applied', record: { version: version + 1, epoch: 6, owner: null } });
    disconnect(second);
  });

  it('keeps format 2 and fields core does not name through create, update, get, list, a conflict and a recreate', async () => {
    const database = connect();
    const storage = new SqliteStorage({ database });
    const later = { format: 2, shardRange: { start: '0', end: '9'.repeat(39) }, tags: ['a', 1.5, true, null, { deep: [] }] };
    const created = applied(await storage.createLease({ group: 'later', leaseKey: 'one', owner: 'a', epoch: 3, ...later }));
    expect(created).toEqual({ ...leaseStateOf({ owner: 'a', epoch: 3, ...later }), group: 'later', leaseKey: 'one', version: 1 });
    const [updated] = await storage.updateLeases('later', [{ leaseKey: 'one', expectedVersion: created.version, next: { ...leaseStateOf(created), checkpoint: '7' } }]);
    const renewed = applied(updated);
    expect(renewed).toEqual({ ...created, checkpoint: '7', version: 2 });
    expect(await storage.getLease('later', 'one')).toEqual(renewed);
    expect(await storage.listLeases('later')).toEqual({ leases: [renewed], corrupt: [] });
    expect(await storage.createLease({ group: 'later', leaseKey: 'one' })).toEqual({ status: 'conflict', current: renewed });
    expect((await storage.deleteLease('later', 'one', renewed.version)).status).toBe('applied');
    const again = applied(await storage.createLease({ group: 'later', leaseKey: 'one', ...later }, { recreate: true }));
    expect(again).toEqual({ ...leaseStateOf({ epoch: 3, ...later }), group: 'later', leaseKey: 'one', version: 3 });

    const leader = applied(await storage.createLeader({ group: 'later', holder: 'w1', term: 1, ...later }));
    const next = applied(await storage.updateLeader('later', leader.version, { ...leaderStateOf(leader), holder: 'w2', term: 2 }));
    expect(next).toEqual({ ...leaderStateOf({ holder: 'w2', term: 2, ...later }), group: 'later', version: 2 });
    expect(await storage.updateLeader('later', leader.version, leaderStateOf(leader))).toEqual({ status: 'conflict', current: next });
    disconnect(database);
  });

  it('a table prefix that is not a plain identifier is refused before any SQL is sent', () => {
    const database = connect();
    const create = (): SqliteStorage => new SqliteStorage({ database, tablePrefix: 'x; DROP TABLE t' });
    expect(create).toThrow(InvalidConfigError);
    expect(create).toThrow('[sqlite-storage] table prefix "x; DROP TABLE t" must be letters, digits and underscores');
    expect(database.prepare(`SELECT count(*) AS n FROM sqlite_master WHERE name LIKE 'x%'`).get()).toEqual({ n: 0 });
    disconnect(database);
  });
});

describe('SqliteStorage roster', () => {
  const member = (overrides: Partial<MemberState> = {}): MemberState => ({
    format: RECORD_FORMAT,
    incarnation: 'inc-1',
    leaseDurationMs: 10_000,
    status: 'alive',
    held: 0,
    changes: 0,
    requests: [],
    metadata: {},
    ...overrides,
  });

  it('50 members heartbeating at once: every write applies, each moving its own member\'s version by one', async () => {
    const workers = Array.from({ length: 50 }, (_, i) => ({ workerId: `worker-${i}`, storage: open().storage }));
    let records: MemberRecord[] = await Promise.all(workers.map(async ({ workerId, storage }) => applied(await storage.putMember('beats', workerId, null, member()))));
    expect(records.map((record) => record.version)).toEqual(Array(50).fill(1));
    for (let round = 1; round <= 3; round++) {
      const outcomes = await Promise.all(workers.map(({ workerId, storage }, i) => storage.putMember('beats', workerId, (records[i] as MemberRecord).version, member({ held: round }))));
      expect(outcomes.map((outcome) => outcome.status)).toEqual(Array(50).fill('applied'));
      records = outcomes.map((outcome) => applied(outcome));
      expect(records.map((record) => record.version)).toEqual(Array(50).fill(round + 1));
    }
    const roster = await workers[0]!.storage.getRoster('beats');
    expect(roster.corrupt).toEqual([]);
    expect([...roster.members].sort((a, b) => (a.workerId < b.workerId ? -1 : 1))).toEqual([...records].sort((a, b) => (a.workerId < b.workerId ? -1 : 1)));
  });

  it('a heartbeat changes its own member\'s row and no other row, whatever the size of the group', async () => {
    const { storage, database } = open();
    const joined: MemberRecord[] = [];
    for (let i = 0; i < 100; i++) joined.push(applied(await storage.putMember('one-row', `worker-${i}`, null, member())));
    const rows = (): unknown[] => database.prepare(`SELECT 'member' AS kind, worker_id AS name, version, state FROM leasehold_members UNION ALL SELECT 'lease', lease_key, version, state FROM leasehold_leases UNION ALL SELECT 'leader', grp, version, state FROM leasehold_leaders ORDER BY 1, 2`).all();
    const before = rows();
    const changesBefore = (database.prepare('SELECT total_changes() AS n').get() as { n: number }).n;
    const beaten = applied(await storage.putMember('one-row', 'worker-42', (joined[42] as MemberRecord).version, member({ held: 1 })));
    expect((database.prepare('SELECT total_changes() AS n').get() as { n: number }).n - changesBefore).toBe(1);
    const after = rows();
    const changed = after.filter((row, i) => JSON.stringify(row) !== JSON.stringify(before[i]));
    expect(after).toHaveLength(before.length);
    expect(changed).toEqual([{ kind: 'member', name: 'worker-42', version: beaten.version, state: expect.stringContaining('"held":1') as string }]);
    disconnect(database);
  });

  it('four processes heartbeating 25 members each, 40 times, on one database file: every write applies, and each member\'s versions go 1, 2, 3 ...', async () => {
    const heartbeater = fileURLToPath(new URL('./support/sqlite-heartbeater.ts', import.meta.url));
    const processes = Array.from({ length: 4 }, (_, p) => {
      const workerIds = Array.from({ length: 25 }, (_, i) => `p${p}-worker-${i}`);
      const child = spawn(process.execPath, ['--import', 'tsx', heartbeater, file, 'process-beats', '40', ...workerIds], { stdio: ['pipe', 'pipe', 'inherit'] });
      let stdout = '';
      child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
      const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
      return { child, exited, stdout: () => stdout };
    });
    await waitUntil(() => processes.every((racer) => racer.stdout().startsWith('ready\n')), 30_000);
    for (const { child } of processes) child.stdin.end('go\n');
    expect(await Promise.all(processes.map((racer) => racer.exited))).toEqual([0, 0, 0, 0]);
    // Each process prints the versions of its 25 members, beat by beat: 25 ones, then 25 twos, and so on.
    const versions = processes.map((racer) => JSON.parse(racer.stdout().slice('ready\n'.length)) as number[]);
    const expected = Array.from({ length: 41 }, (_, beat) => Array.from({ length: 25 }, () => beat + 1)).flat();
    expect(versions).toEqual([expected, expected, expected, expected]);
    const { storage, database } = open();
    const roster = await storage.getRoster('process-beats');
    expect(roster.members).toHaveLength(100);
    expect(roster.members.map((record) => record.version)).toEqual(Array(100).fill(41));
    disconnect(database);
  }, 300_000);

  it('32 clients joining one worker id at once: exactly one applies and every other conflict carries the member it made', async () => {
    const outcomes = await Promise.all(Array.from({ length: 32 }, (_, i) => open().storage.putMember('join-race', 'w', null, member({ incarnation: `inc-${i}` }))));
    const winners = outcomes.filter((outcome) => outcome.status === 'applied');
    expect(winners).toHaveLength(1);
    expect(outcomes.filter((outcome) => outcome.status === 'conflict')).toEqual(Array(31).fill({ status: 'conflict', current: applied(winners[0]) }));
  });

  it('a member removed and joining again, on a new connection, continues above the version its tombstone kept', async () => {
    const before = open();
    const joined = applied(await before.storage.putMember('rejoin', 'w1', null, member()));
    const first = applied(await before.storage.putMember('rejoin', 'w1', joined.version, member({ held: 1 })));
    const other = applied(await before.storage.putMember('rejoin', 'w2', null, member()));
    expect(await before.storage.removeMember('rejoin', 'w1', first.version)).toEqual({ status: 'applied' });
    expect(await before.storage.removeMember('rejoin', 'w2', other.version)).toEqual({ status: 'applied' });
    expect(before.database.prepare(`SELECT worker_id AS workerId, version, state FROM leasehold_members WHERE grp = 'rejoin' ORDER BY worker_id`).all()).toEqual([
      { workerId: 'w1', version: 2, state: null },
      { workerId: 'w2', version: 1, state: null },
    ]);
    disconnect(before.database);

    const { storage, database } = open();
    expect(await storage.getRoster('rejoin')).toEqual({ group: 'rejoin', members: [], corrupt: [] });
    expect(await storage.putMember('rejoin', 'w1', first.version, member())).toEqual({ status: 'conflict', current: null });
    const again = applied(await storage.putMember('rejoin', 'w1', null, member({ incarnation: 'inc-2' })));
    expect(again.version).toBe(3);
    expect(await storage.putMember('rejoin', 'w1', first.version, member())).toEqual({ status: 'conflict', current: again });
    expect(await storage.removeMember('rejoin', 'w1', first.version)).toEqual({ status: 'conflict', current: again });
    disconnect(database);
  });

  it('a write or removal at a stale version is a conflict carrying the member as stored; of a missing member, one with none', async () => {
    const { storage, database } = open();
    const joined = applied(await storage.putMember('stale', 'w', null, member()));
    const beaten = applied(await storage.putMember('stale', 'w', joined.version, member({ held: 2, metadata: { host: 'a' } })));
    expect(beaten).toEqual({ group: 'stale', workerId: 'w', version: 2, ...memberStateOf(member({ held: 2, metadata: { host: 'a' } })) });
    expect(await storage.putMember('stale', 'w', joined.version, member({ status: 'dead' }))).toEqual({ status: 'conflict', current: beaten });
    expect(await storage.putMember('stale', 'w', null, member())).toEqual({ status: 'conflict', current: beaten });
    expect(await storage.removeMember('stale', 'w', joined.version)).toEqual({ status: 'conflict', current: beaten });
    expect(await storage.putMember('stale', 'nobody', 1, member())).toEqual({ status: 'conflict', current: null });
    expect(await storage.removeMember('stale', 'nobody', 1)).toEqual({ status: 'conflict', current: null });
    expect(await storage.getRoster('stale')).toEqual({ group: 'stale', members: [beaten], corrupt: [] });
    disconnect(database);
  });

  it('a member row whose state is not JSON is listed in corrupt by its worker id beside the others; a write at another version is unknown and leaves it, one at its stored version replaces it', async () => {
    const { storage, database } = open();
    for (const workerId of ['a', 'bad', 'c']) applied(await storage.putMember('corrupt-member', workerId, null, member()));
    // Damaged as another program writing the table would, moving the version as a writer does.
    database.prepare(`UPDATE leasehold_members SET state = '{"status":', version = 2 WHERE grp = 'corrupt-member' AND worker_id = 'bad'`).run();
    const stored = (): unknown => database.prepare(`SELECT version, state FROM leasehold_members WHERE grp = 'corrupt-member' AND worker_id = 'bad'`).get();
    const damaged = stored();

    const roster = await storage.getRoster('corrupt-member');
    expect(roster.members.map((record) => record.workerId).sort()).toEqual(['a', 'c']);
    expect(roster.corrupt).toHaveLength(1);
    expect(roster.corrupt[0]).toBeInstanceOf(CorruptRecordError);
    expect(roster.corrupt[0]).toMatchObject({ group: 'corrupt-member', workerId: 'bad', leaseKey: undefined });
    expect(roster.corrupt[0]?.message).toContain('[sqlite-storage] stored member "bad" of group "corrupt-member" is corrupt: state is not valid JSON');
    for (const outcome of [
      await storage.putMember('corrupt-member', 'bad', 1, member()),
      await storage.putMember('corrupt-member', 'bad', null, member()),
      await storage.removeMember('corrupt-member', 'bad', 1),
    ]) {
      expect(outcome).toMatchObject({ status: 'unknown', error: { name: 'CorruptRecordError', workerId: 'bad' } });
    }
    expect(stored()).toEqual(damaged);
    expect(applied(await storage.putMember('corrupt-member', 'bad', 2, member())).version).toBe(3);
    expect((await storage.getRoster('corrupt-member')).corrupt).toEqual([]);
    disconnect(database);
  });
});

describe('SqliteStorage watchers: members by id and the roster digest', () => {
  const member = (incarnation: string): MemberState => ({
    format: RECORD_FORMAT,
    incarnation,
    leaseDurationMs: 10_000,
    status: 'alive',
    held: 0,
    changes: 0,
    requests: [],
    metadata: {},
  });

  it('getMembers gives each named member as getRoster does, leaves out ids with no member and removed ones, puts an unreadable one in corrupt, and reads a repeated id once', async () => {
    const { storage, database } = open();
    for (const workerId of ['a', 'b', 'c', 'gone', 'bad']) applied(await storage.putMember('watched', workerId, null, member(`${workerId}-1`)));
    expect(await storage.removeMember('watched', 'gone', 1)).toEqual({ status: 'applied' });
    database.prepare(`UPDATE leasehold_members SET state = '{"status":', version = 2 WHERE grp = 'watched' AND worker_id = 'bad'`).run();
    const roster = await storage.getRoster('watched');
    const byId = new Map(roster.members.map((record) => [record.workerId, record]));

    const read = await open().storage.getMembers('watched', ['c', 'nobody', 'a', 'gone', 'bad', 'c', 'a', 'b']);

    expect(read.group).toBe('watched');
    expect(read.members).toEqual([byId.get('c'), byId.get('a'), byId.get('b')]);
    expect(read.corrupt).toHaveLength(1);
    expect(read.corrupt[0]).toBeInstanceOf(CorruptRecordError);
    expect(read.corrupt[0]).toMatchObject({ group: 'watched', workerId: 'bad', message: roster.corrupt[0]?.message });
    expect(await storage.getMembers('watched', [])).toEqual({ group: 'watched', members: [], corrupt: [] });
    expect(await storage.getMembers('nobody-here', ['a'])).toEqual({ group: 'nobody-here', members: [], corrupt: [] });
    disconnect(database);
  });

  it(`getMembers refuses more than ${limits.maxWatchedMembers} worker ids, or a bad one, with an InvalidInputError`, async () => {
    const { storage, database } = open();
    const ids = Array.from({ length: limits.maxWatchedMembers + 1 }, (_, i) => `w${i}`);
    await expect(storage.getMembers('watched', ids)).rejects.toThrow(new InvalidInputError('[sqlite-storage] at most 16 worker ids may be read at once, got 17'));
    await expect(storage.getMembers('watched', ['w', ''])).rejects.toThrow(InvalidInputError);
    await expect(storage.getMembers('', ['w'])).rejects.toThrow(InvalidInputError);
    expect((await storage.getMembers('watched', ids.slice(0, limits.maxWatchedMembers))).members).toEqual([]);
    disconnect(database);
  });

  it('the digest is 0 for a group never advanced; each advance adds one and returns the value it wrote, which another connection then reads', async () => {
    const [one, other] = [open().storage, open().storage];
    expect(await one.getRosterDigest('digests')).toBe(0);
    expect(await one.advanceRosterDigest('digests')).toBe(1);
    expect(await other.getRosterDigest('digests')).toBe(1);
    expect(await other.advanceRosterDigest('digests')).toBe(2);
    expect(await one.advanceRosterDigest('digests')).toBe(3);
    expect(await other.getRosterDigest('digests')).toBe(3);
  });

  it('50 advances at once from 5 connections lose none, and each group keeps its own digest', async () => {
    const clients = Array.from({ length: 5 }, () => open().storage);
    const written = await Promise.all(Array.from({ length: 50 }, (_, i) => (clients[i % clients.length] as SqliteStorage).advanceRosterDigest('advanced')));
    expect([...written].sort((a, b) => a - b)).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
    const storage = clients[0] as SqliteStorage;
    expect(await storage.getRosterDigest('advanced')).toBe(50);
    expect(await storage.advanceRosterDigest('advanced-too')).toBe(1);
    expect(await storage.getRosterDigest('advance')).toBe(0);
    expect(await storage.getRosterDigest('advanced')).toBe(50);
  });

  it('a digest row that is not a number is a CorruptRecordError naming the group, for reads and advances, and is left as it was', async () => {
    const { storage, database } = open();
    expect(await storage.advanceRosterDigest('bad-digest')).toBe(1);
    database.prepare(`UPDATE leasehold_digests SET digest = 'one' WHERE grp = 'bad-digest'`).run();
    const message = '[sqlite-storage] stored roster digest of group "bad-digest" is corrupt: digest is "one"';
    for (const error of [await storage.getRosterDigest('bad-digest').catch((thrown: unknown) => thrown), await storage.advanceRosterDigest('bad-digest').catch((thrown: unknown) => thrown)]) {
      expect(error).toBeInstanceOf(CorruptRecordError);
      expect(error).toMatchObject({ message, group: 'bad-digest' });
    }
    expect(database.prepare(`SELECT digest FROM leasehold_digests WHERE grp = 'bad-digest'`).get()).toEqual({ digest: 'one' });
    disconnect(database);
  });
});
