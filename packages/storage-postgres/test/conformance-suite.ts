import type { LeaseRecord, Storage, WriteResult } from '@leasehold/core';
import { runConformanceSuite } from '@leasehold/core/testing';
import pg from 'pg';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { PostgresStorage } from '../src/index.js';
import { serverConfig, useServer } from './support.js';

/**
 * The conformance suite against PostgresStorage, with or without prepared statements: one test file for
 * each, so that the two run side by side.
 *
 * One pool for the file, a new storage per client: the suite races up to 32 clients, which queue on the
 * pool's 10 connections instead of opening 32 of their own. A client the suite cuts off through its proxy
 * has a pool of its own, ended with it.
 */
export function runPostgresConformance(preparedStatements: boolean): void {
  const server = useServer('lh_conformance', 10);
  const ownPools = new Map<Storage, pg.Pool>();
  // Where the suite's user writes go, in the transaction of a transactional checkpoint.
  const userWrites = `"${server.schema}".conformance_user_writes`;

  beforeAll(async () => {
    await new PostgresStorage({ pool: server.pool(), schema: server.schema }).migrate();
    await server.pool().query(`CREATE TABLE IF NOT EXISTS ${userWrites} (key text PRIMARY KEY, value text NOT NULL)`);
  });

  runConformanceSuite(
    { describe, it, afterAll },
    {
      name: preparedStatements ? 'PostgresStorage' : 'PostgresStorage without prepared statements',
      createStorage: async () => new PostgresStorage({ pool: server.pool(), schema: server.schema, preparedStatements }),
      closeStorage: async (storage) => {
        await (storage as PostgresStorage).close();
        const pool = ownPools.get(storage);
        ownPools.delete(storage);
        await pool?.end();
      },
      changeFeed: true,
      // A subscription addressed to some owners LISTENs on their owner channels only, and the dispatcher
      // drops their bucket-mates' handovers: it hears no handover to another owner.
      addressedHandovers: true,
      // A state that is not JSON, written by another program.
      corruptLease: async (group, leaseKey) => {
        await server.pool().query(`UPDATE "${server.schema}".leasehold_leases SET state = '{"owner":' WHERE group_name = $1 AND lease_key = $2`, [group, leaseKey]);
      },
      // A member whose state is not JSON, written by another program, which moves the member's version as
      // every writer does.
      corruptMember: async (group, workerId) => {
        const { rows } = await server.pool().query<{ version: string }>(
          `UPDATE "${server.schema}".leasehold_members SET version = version + 1, state = '{"incarnation":'
           WHERE group_name = $1 AND worker_id = $2 AND NOT removed RETURNING version`,
          [group, workerId],
        );
        if (rows.length !== 1) throw new Error(`group ${group} has no member ${workerId} to corrupt`);
        return { version: Number(rows[0]?.version) };
      },
      // The CheckpointWrite that `transaction` hands to the batch context, called as the coordinator calls
      // it, with an INSERT of the user's write inside its transaction.
      transactionalCheckpoint: {
        checkpoint: async (storage, current, next, write) => {
          let outcome: WriteResult<LeaseRecord> | undefined;
          await (storage as PostgresStorage).transaction(
            {
              checkpointWith: async (checkpoint) => {
                outcome = await checkpoint(current, next);
              },
            },
            async (client) => {
              await client.query(`INSERT INTO ${userWrites} (key, value) VALUES ($1, $2)`, [write.key, write.value]);
            },
          );
          if (!outcome) throw new Error('transaction returned without calling checkpointWith');
          return outcome;
        },
        read: async (_storage, key) => {
          const { rows } = await server.pool().query<{ value: string }>(`SELECT value FROM ${userWrites} WHERE key = $1`, [key]);
          return rows[0]?.value ?? null;
        },
      },
      faults: {
        kind: 'proxy',
        upstream: () => ({ host: serverConfig.host ?? '127.0.0.1', port: serverConfig.port ?? 5432 }),
        createStorage: async (through) => {
          const pool = new pg.Pool({ ...serverConfig, host: through.host, port: through.port, max: 2 });
          pool.on('error', () => undefined);
          const storage = new PostgresStorage({ pool, schema: server.schema, preparedStatements });
          ownPools.set(storage, pool);
          return storage;
        },
      },
      crossProcess: {
        module: new URL('./conformance-client.ts', import.meta.url),
        closeExportName: 'closeClient',
        options: () => ({ connection: serverConfig, schema: server.schema, preparedStatements }),
        execArgv: ['--import', 'tsx'],
      },
      // The suite's large tests (thousands of leases, eight processes racing) took up to 48 s of the default
      // 60 s on a busy machine. The bound only catches a test that hangs.
      timeoutMs: 300_000,
    },
  );
}
