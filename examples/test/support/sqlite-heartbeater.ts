/**
 * One process of the cross-process heartbeat race in `sqlite-storage.test.ts`: opens its own connection to
 * the database file, joins as each of its worker ids, then heartbeats each of them `count` times at the
 * version it last wrote, without re-reading: every write must apply, since no other process writes these
 * members. Prints `ready` once connected, starts when a line arrives on stdin (so that every process starts
 * together), and prints every version it was given, as JSON.
 *
 * Usage: node --import tsx sqlite-heartbeater.ts <database file> <group> <count> <worker id>...
 */
import { once } from 'node:events';
import { type MemberState } from '@leasehold/core';
import { RECORD_FORMAT } from '@leasehold/core/adapter';
import Database from 'better-sqlite3';
import { SqliteStorage } from '../../custom-storage/sqlite-storage.js';

const [file, group, countText, ...workerIds] = process.argv.slice(2);
if (!file || !group || !countText || workerIds.length === 0) throw new Error('usage: sqlite-heartbeater.ts <file> <group> <count> <worker id>...');

const database = new Database(file);
const storage = new SqliteStorage({ database });
const state = (held: number): MemberState => ({ format: RECORD_FORMAT, incarnation: `${process.pid}`, leaseDurationMs: 10_000, status: 'alive', held, changes: 0, requests: [], metadata: {} });
console.log('ready');
await once(process.stdin, 'data');
process.stdin.pause();
const versions: number[] = [];
const last = new Map<string, number | null>(workerIds.map((workerId) => [workerId, null]));
for (let beat = 0; beat <= Number(countText); beat++) {
  for (const workerId of workerIds) {
    const outcome = await storage.putMember(group, workerId, last.get(workerId) ?? null, state(beat));
    if (outcome.status !== 'applied') throw new Error(`heartbeat of ${workerId} did not apply: ${JSON.stringify(outcome)}`);
    last.set(workerId, outcome.record.version);
    versions.push(outcome.record.version);
  }
}
database.close();
console.log(JSON.stringify(versions));
