import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CorruptRecordError, InvalidConfigError, type LeaseRecord } from '@leasehold/core';
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

async function waitUntil(condition: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('timed out waiting for the processes to connect');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

const clients = new Map<SqliteStorage, Database.Database>();

runConformanceSuite(
  { describe, it },
  {
    name: 'SqliteStorage',
    createStorage: async () => {
      const database = connect();
      const storage = new SqliteStorage({ database });
      clients.set(storage, database);
      return storage;
    },
    closeStorage: async (storage) => {
      const database = clients.get(storage as SqliteStorage);
      clients.delete(storage as SqliteStorage);
      if (database) disconnect(database);
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
  }, 60_000);

  it('a lease row whose state is not JSON is reported as a CorruptRecordError naming it, by get and by list', async () => {
    const database = connect();
    const storage = new SqliteStorage({ database });
    await storage.createLease({ group: 'corrupt-lease', leaseKey: 'shard-1' });
    database.prepare(`UPDATE leasehold_leases SET state = '{"owner":' WHERE grp = 'corrupt-lease'`).run();

    const expected = { name: 'CorruptRecordError', group: 'corrupt-lease', leaseKey: 'shard-1' };
    await expect(storage.getLease('corrupt-lease', 'shard-1')).rejects.toMatchObject(expected);
    await expect(storage.listLeases('corrupt-lease')).rejects.toBeInstanceOf(CorruptRecordError);
    await expect(storage.listLeases('corrupt-lease')).rejects.toThrow('stored lease "shard-1" of group "corrupt-lease" is corrupt');
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

  it('a batch whose conflicting lease is corrupt still applies its other updates, and reports that one as unknown', async () => {
    const database = connect();
    const storage = new SqliteStorage({ database });
    const good = await storage.createLease({ group: 'mixed-batch', leaseKey: 'good' });
    await storage.createLease({ group: 'mixed-batch', leaseKey: 'bad' });
    database.prepare(`UPDATE leasehold_leases SET state = 'null' WHERE grp = 'mixed-batch' AND lease_key = 'bad'`).run();
    const record = (good as { record: LeaseRecord }).record;
    const next = { owner: 'w1', epoch: 1, checkpoint: null, parentKeys: [], pendingOwner: null, metadata: {} };

    const [first, second] = await storage.updateLeases('mixed-batch', [
      { leaseKey: 'good', expectedVersion: record.version, next },
      { leaseKey: 'bad', expectedVersion: 99, next },
    ]);

    expect(first).toMatchObject({ status: 'applied', record: { owner: 'w1', version: record.version + 1 } });
    expect(second).toMatchObject({ status: 'unknown', error: { name: 'CorruptRecordError', leaseKey: 'bad' } });
    disconnect(database);
  });

  it('a tombstone outlives the connection: after a reopen the re-created lease continues above the deleted version and epoch', async () => {
    const first = connect();
    const before = new SqliteStorage({ database: first });
    const created = await before.createLease({ group: 'reopened', leaseKey: 'shard-1', owner: 'w1', epoch: 6 });
    const version = (created as { record: LeaseRecord }).record.version;
    expect((await before.deleteLease('reopened', 'shard-1', version)).status).toBe('applied');
    disconnect(first);

    const second = connect();
    const after = new SqliteStorage({ database: second });
    const again = await after.createLease({ group: 'reopened', leaseKey: 'shard-1' });

    expect(again).toMatchObject({ status: 'applied', record: { version: version + 1, epoch: 6, owner: null } });
    disconnect(second);
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
