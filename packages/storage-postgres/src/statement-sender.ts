/**
 * How the storage's statements are sent: each on a pooled connection of its own, sent again when a
 * deadlock or serialization failure rolled it back, named as a prepared statement until the server has
 * lost three of them, and its failure turned into the typed error of a read or of a write; and the 'error'
 * listener every client of the storage's pools keeps for its whole life. `PostgresStorage` says what to
 * send; this file sends it.
 */
import { createHash } from 'node:crypto';
import { StorageUnavailableError } from '@leasehold/core';
import type { Pool, PoolClient, QueryResultRow } from 'pg';
import { connectionSurvives, isLostPreparedStatement, isRetryable, outcomeUnknown, readFailed, schemaError, unavailable } from './errors.js';
import type { WriteOutcome } from './rows.js';

/** Statements refused by a deadlock or serialization failure rolled back whole; they are sent again this often. */
export const MAX_ATTEMPTS = 3;

const heardPools = new WeakSet<Pool>();

/**
 * Gives every client the pool connects from now on an 'error' listener of its own, for its whole life.
 * pg-pool takes its listener off a client as it hands it out, and a new client is handed out from inside
 * the socket read that carried its ReadyForQuery: when the same read also carries the server's FATAL (a
 * server shutting down as the connection completes), the error is emitted before the caller's code can
 * listen, and an unheard 'error' ends the process. The listener does nothing: a statement in flight still
 * rejects, a client in the pool is still dropped by the pool's own listener, and a checked-out client's
 * holder still hears it (node-postgres issue 2439 recommends the same).
 */
export function hearClientErrors(pool: Pool): void {
  if (heardPools.has(pool)) return;
  heardPools.add(pool);
  pool.on('connect', (client) => {
    client.on('error', ignoreClientError);
  });
}

function ignoreClientError(): void {}

/** The statements of one storage: the pool they go through, and the names of those prepared on its connections. */
export class StatementSender {
  readonly #pool: Pool;
  readonly #where: string;
  #statementNames: Map<string, string> | null;
  #lostStatements = 0;

  /** `where` names the tables in schema errors; `prepared`: whether statements are named (`preparedStatements`). */
  constructor(pool: Pool, where: string, prepared: boolean) {
    this.#pool = pool;
    this.#where = where;
    this.#statementNames = prepared ? new Map() : null;
  }

  async connect(operation: string): Promise<PoolClient> {
    try {
      return await this.#pool.connect();
    } catch (error) {
      throw unavailable(operation, error);
    }
  }

  /** Gives the client back; destroys it unless the error left the connection usable. */
  release(client: PoolClient, error: unknown): void {
    if (error === undefined || connectionSurvives(error)) client.release();
    else client.release(error instanceof Error ? error : true);
  }

  /**
   * Sends one statement on a pooled connection. A statement rolled back by a deadlock or serialization
   * failure is sent again (it changed nothing); any other error is returned with the client already
   * given back.
   */
  async #send<R extends QueryResultRow>(operation: string, sql: string, values: readonly unknown[]): Promise<R[]> {
    let named = true;
    for (let attempt = 1; ; attempt++) {
      const client = await this.connect(operation);
      // A socket that dies while the client is checked out emits 'error' on it; unheard, that crashes the process.
      const onError = (): void => undefined;
      client.on('error', onError);
      let failure: unknown;
      try {
        const name = named ? this.#statementName(sql) : undefined;
        const { rows } = await client.query<R>({ text: sql, values: values as unknown[], name });
        return rows;
      } catch (error) {
        failure = error;
        if (attempt < MAX_ATTEMPTS && isRetryable(error)) continue;
        if (attempt < MAX_ATTEMPTS && named && isLostPreparedStatement(error)) {
          // Refused at Parse or Bind, before anything ran: the same statement, unnamed, is safe to send.
          named = false;
          if (++this.#lostStatements >= 3) this.#statementNames = null;
          continue;
        }
        throw error;
      } finally {
        this.release(client, failure);
        client.removeListener('error', onError);
      }
    }
  }

  /** The name of a prepared statement: derived from its text, so that one name never means two statements. */
  #statementName(sql: string): string | undefined {
    if (!this.#statementNames) return undefined;
    let name = this.#statementNames.get(sql);
    if (name === undefined) {
      name = `leasehold_${createHash('sha256').update(sql).digest('hex').slice(0, 24)}`;
      this.#statementNames.set(sql, name);
    }
    return name;
  }

  /** A read: fails with `StorageUnavailableError`, or `StorageSchemaError` when the tables are missing. */
  async read<R extends QueryResultRow>(operation: string, sql: string, values: readonly unknown[]): Promise<R[]> {
    try {
      return await this.#send<R>(operation, sql, values);
    } catch (error) {
      if (error instanceof StorageUnavailableError) throw error;
      throw schemaError(error, this.#where) ?? readFailed(operation, error);
    }
  }

  /**
   * A write: throws `StorageUnavailableError` when no connection could be had (nothing was sent) and
   * `StorageSchemaError` when the tables are missing (the server refused the statement); every other
   * failure makes the outcome unknown.
   */
  async write<R extends QueryResultRow>(operation: string, sql: string, values: readonly unknown[]): Promise<WriteOutcome<R>> {
    try {
      return { rows: await this.#send<R>(operation, sql, values) };
    } catch (error) {
      if (error instanceof StorageUnavailableError) throw error;
      const schema = schemaError(error, this.#where);
      if (schema) throw schema;
      return { unknown: outcomeUnknown(operation, error) };
    }
  }
}
