/**
 * The group's roster digest and the names its advances kept: the reserved row of the member table (worker
 * id `''`, a tombstone no member read sees; see `schema.ts`), whose version is the digest and whose state
 * holds the worker ids each of the last `limits.rosterMovesKept` advances named. `PostgresStorage` checks
 * the input and sends the statements; this file says what they mean.
 */
import type { RosterMoves } from '@leasehold/core';
import { limits, rosterMovesOf, type KeptAdvance } from '@leasehold/core/adapter';
import type { QueryResultRow } from 'pg';
import { outcomeUnknown } from './errors.js';
import type { WriteOutcome } from './rows.js';
import type { Statements } from './schema.js';

/** How the digest's statements are sent: as every other read and write of the storage. */
export interface DigestIo {
  read<R extends QueryResultRow>(operation: string, sql: string, values: readonly unknown[]): Promise<R[]>;
  write<R extends QueryResultRow>(operation: string, sql: string, values: readonly unknown[]): Promise<WriteOutcome<R>>;
  sql(): Statements;
}

/** The digest: the reserved row's version, 0 when the group has none. */
export async function readDigest(io: DigestIo, group: string): Promise<number> {
  const [row] = await io.read<{ version: string }>('getRosterDigest', io.sql().getRosterDigest, [group]);
  return row ? Number(row.version) : 0;
}

/**
 * Adds one to the digest in one statement, creating the row at 1, and keeps the names of this advance
 * with those of the last `limits.rosterMovesKept`. A state that cannot be read back as the advances' names
 * (written by hand) is replaced by this advance's names alone: readers read the whole roster across what
 * was lost. Throws a `StorageOutcomeUnknownError` when the statement may have applied but its answer was lost.
 */
export async function advanceDigest(io: DigestIo, group: string, workerIds: readonly string[]): Promise<number> {
  const values = [group, JSON.stringify([...new Set(workerIds)]), limits.rosterMovesKept];
  let outcome = await io.write<{ version: string }>('advanceRosterDigest', io.sql().advanceRosterDigest, values);
  if ('unknown' in outcome && isMalformedState(outcome.unknown)) {
    outcome = await io.write<{ version: string }>('advanceRosterDigest', io.sql().advanceRosterDigestAfresh, values.slice(0, 2));
  }
  if ('unknown' in outcome) throw outcome.unknown;
  const [row] = outcome.rows;
  if (!row) throw outcomeUnknown('advanceRosterDigest', new Error('the statement returned no row'));
  return Number(row.version);
}

/**
 * The digest with the names of the advances after `since`: one statement reading the row's version and,
 * when it moved by at most `limits.rosterMovesKept`, each advance's names from its state. An advance that
 * left no names (one of an earlier release, which only counted) reads as naming nobody, and so does every
 * advance of a state that cannot be read back.
 */
export async function readMoves(io: DigestIo, group: string, since: number): Promise<RosterMoves> {
  let rows: Array<{ version: string; moves: unknown }>;
  try {
    rows = await io.read<{ version: string; moves: unknown }>('getRosterMoves', io.sql().getRosterMoves, [group, since, limits.rosterMovesKept]);
  } catch (error) {
    if (!isMalformedState(error)) throw error;
    return { digest: await readDigest(io, group), moved: null };
  }
  const [row] = rows;
  const digest = row ? Number(row.version) : 0;
  const kept: KeptAdvance[] = [];
  if (Array.isArray(row?.moves)) {
    for (const entry of row.moves as unknown[]) {
      if (!Array.isArray(entry)) continue;
      const [at, names] = entry as [unknown, unknown];
      if (typeof at === 'number' && Array.isArray(names) && names.every((name) => typeof name === 'string' && name !== '')) kept.push({ digest: at, workerIds: names as string[] });
    }
  }
  return rosterMovesOf(since, digest, kept);
}

/**
 * Whether a statement on the digest row failed because its state is not the advances' names as JSON (not
 * JSON: 22P02; JSON that is no object, or a key that is no number: 22023, 22P02): nothing was written.
 */
function isMalformedState(error: unknown): boolean {
  const code = (error as { cause?: { code?: unknown } } | undefined)?.cause?.code;
  return code === '22P02' || code === '22023';
}
