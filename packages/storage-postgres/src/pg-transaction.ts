/**
 * One transaction on a connection of its own, as the transactional checkpoint and fenced sink writes run
 * theirs: get the connection, keep a dying socket from crashing the process, BEGIN, COMMIT or ROLLBACK as
 * the body decides, tell a lost COMMIT answer apart from a refused one, and give the connection back only
 * when it can still be used.
 */
import { StorageUnavailableError } from '@leasehold/core';
import type { ClientBase, Pool, PoolClient } from 'pg';
import { connectionSurvives, isServerError } from './errors.js';
import { PKG } from './schema.js';

/** What the body of a transaction decided: commit and return `value`, or roll back and return `value`. */
export type TransactionEnd<T> = { readonly commit: T } | { readonly rollback: T };

/** How one kind of transaction treats its failures. */
export interface TransactionRules<T> {
  /** The operation, for messages: `transaction`, `fencedWrite`. */
  readonly operation: string;
  /**
   * The outcome of a COMMIT whose answer was lost (the connection died after it was sent): the server may
   * have committed. Return an `unknown` result or throw; the connection is not used again.
   */
  readonly lostCommit: (error: unknown) => T;
  /** The error to throw for a failure after the transaction rolled back (a schema error for a missing table). */
  readonly thrown: (error: unknown) => unknown;
  /**
   * Failures of the operation's own after which the connection is still good (it rolled back cleanly);
   * otherwise only an ordinary statement error keeps it. Default: none.
   */
  readonly keepsConnection?: (failure: unknown) => boolean;
}

/**
 * Runs `body` between BEGIN and its COMMIT or ROLLBACK: on a connection checked out of `pool` and released
 * after, or on the `client` given, used as it is and left to its owner. An error of the body
 * or of the server rolls back and is thrown as `rules.thrown` says; the server refusing COMMIT is such an
 * error too (it rolled back, and said so); only a COMMIT whose answer was lost goes to `rules.lostCommit`.
 */
export async function runTransaction<T>(
  on: { readonly pool: Pool } | { readonly client: ClientBase },
  rules: TransactionRules<T>,
  body: (client: ClientBase) => Promise<TransactionEnd<T>>,
): Promise<T> {
  const pooled = 'pool' in on;
  let client: ClientBase;
  try {
    client = pooled ? await on.pool.connect() : on.client;
  } catch (error) {
    throw new StorageUnavailableError(`[${PKG}] ${rules.operation} could not get a connection: ${(error as Error).message}`, { cause: error });
  }
  // A socket that dies while the client is checked out emits 'error' on it; unheard, that crashes the process.
  // Heard, it also tells a lost connection apart from an error of the body's own.
  let connectionLost = false;
  const onError = (): void => {
    connectionLost = true;
  };
  client.on('error', onError);
  client.on('end', onError);
  let failure: unknown;
  let committing = false;
  try {
    await client.query('BEGIN');
    const end = await body(client);
    if ('rollback' in end) {
      await client.query('ROLLBACK');
      return end.rollback;
    }
    committing = true;
    await client.query('COMMIT');
    return end.commit;
  } catch (error) {
    failure = error;
    if (committing && !isServerError(error)) return rules.lostCommit(error);
    if (connectionLost && !isServerError(error)) {
      // COMMIT was never sent: the server rolls the transaction back with the connection. Typed, so that
      // a consumer does not take a lost connection for a record's fault (DESIGN section 5, rule 10).
      throw new StorageUnavailableError(`[${PKG}] ${rules.operation} lost its connection before COMMIT, so nothing of it committed: ${errorMessage(error)}`, { cause: error });
    }
    await client.query('ROLLBACK').catch(() => undefined);
    throw rules.thrown(error);
  } finally {
    if (pooled) {
      const survives = failure === undefined || connectionSurvives(failure) || (rules.keepsConnection?.(failure) ?? false);
      (client as PoolClient).release(survives ? undefined : failure instanceof Error ? failure : true);
    }
    client.removeListener('error', onError);
    client.removeListener('end', onError);
  }
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
