/**
 * One process of the cross-process race in `sqlite-storage.test.ts`: opens its own connection to the
 * database file and makes `count` conditional increments of one lease's counter, re-reading and retrying
 * each time its write conflicts. Prints `ready` once connected, starts when a line arrives on stdin (so
 * that every process starts together), and prints how many writes applied and how many conflicted, as JSON.
 *
 * Usage: node --import tsx sqlite-incrementer.ts <database file> <group> <lease key> <count>
 */
import { once } from 'node:events';
import Database from 'better-sqlite3';
import { SqliteStorage } from '../../custom-storage/sqlite-storage.js';

const [file, group, leaseKey, countText] = process.argv.slice(2);
if (!file || !group || !leaseKey || !countText) throw new Error('usage: sqlite-incrementer.ts <file> <group> <lease key> <count>');

const database = new Database(file);
const storage = new SqliteStorage({ database });
console.log('ready');
await once(process.stdin, 'data');
process.stdin.pause();
let applied = 0;
let conflicts = 0;
while (applied < Number(countText)) {
  const current = await storage.getLease(group, leaseKey);
  if (!current) throw new Error(`lease ${leaseKey} of group ${group} is missing`);
  const count = Number(current.metadata.count) + 1;
  const [outcome] = await storage.updateLeases(group, [
    { leaseKey, expectedVersion: current.version, next: { ...current, metadata: { count: String(count) } } },
  ]);
  if (outcome?.status === 'applied') applied++;
  else if (outcome?.status === 'conflict') conflicts++;
  else throw new Error(`unexpected outcome ${JSON.stringify(outcome)}`);
}
database.close();
console.log(JSON.stringify({ applied, conflicts }));
