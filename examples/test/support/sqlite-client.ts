/**
 * Opens a `SqliteStorage` client on its own connection to a database file, in whatever process imports
 * it: the conformance suite's cross-process mode runs its races from clients opened here.
 */
import type { Storage } from '@leasehold/core';
import Database from 'better-sqlite3';
import { SqliteStorage } from '../../custom-storage/sqlite-storage.js';

export async function openClient(options: { file: string }): Promise<Storage> {
  return new SqliteStorage({ database: new Database(options.file) });
}
