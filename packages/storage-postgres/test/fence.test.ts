/** Fenced sink writes on a real server: a zombie's writes and replays are refused by the sink itself. */
import { InvalidConfigError, LeaseLostError, StorageOutcomeUnknownError, StorageSchemaError } from '@leasehold/core';
import type pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { createFenceTable, fencedWrite, type FencedWriteResult } from '../src/index.js';
import { useServer } from './support.js';

const server = useServer('lh_fence', 16);
const sink = `"${server.schema}".totals`;
let shards = 0;

beforeAll(async () => {
  await createFenceTable(server.pool(), { schema: server.schema });
  await createFenceTable(server.pool(), { schema: server.schema }); // idempotent
  // A sink whose writes are not idempotent: a replayed record would count twice.
  await server.pool().query(`CREATE TABLE ${sink} (shard_id text NOT NULL, record text NOT NULL, writer text NOT NULL)`);
});

interface Rec {
  readonly position: string;
}

/** A batch of records numbered `from`..`to` (their positions), as a shard hands them over. */
const records = (from: number, to: number): Rec[] => Array.from({ length: to - from + 1 }, (_, i) => ({ position: String(from + i) }));

/** Writes the fresh records of a batch into the sink, fenced, as a handler would. */
function apply(shardId: string, fencingToken: number, batch: readonly Rec[], writer = 'w', db: pg.Pool = server.pool()): Promise<FencedWriteResult<number>> {
  const position = batch.at(-1)?.position ?? '0';
  return fencedWrite(db, { schema: server.schema, shardId, fencingToken, position }, async (client, fence) => {
    const fresh = fence.fresh(batch);
    for (const record of fresh) await client.query(`INSERT INTO ${sink} VALUES ($1, $2, $3)`, [shardId, record.position, writer]);
    return fresh.length;
  });
}

async function sinkRecords(shardId: string): Promise<number[]> {
  const { rows } = await server.pool().query<{ record: string }>(`SELECT record FROM ${sink} WHERE shard_id = $1`, [shardId]);
  return rows.map((row) => Number(row.record)).sort((a, b) => a - b);
}

const range = (from: number, to: number): number[] => Array.from({ length: to - from + 1 }, (_, i) => from + i);
const freshShard = (): string => `shard-${++shards}-${Date.now()}`;

describe('fencedWrite', () => {
  it('applies a batch with its fence, and refuses the same batch again as a replay that writes nothing', async () => {
    const shardId = freshShard();
    expect(await apply(shardId, 1, records(1, 10))).toEqual({ status: 'applied', value: 10 });
    expect(await apply(shardId, 1, records(1, 10))).toEqual({ status: 'replay', appliedThrough: '10' });
    expect(await apply(shardId, 1, records(1, 5))).toEqual({ status: 'replay', appliedThrough: '10' });
    expect(await sinkRecords(shardId)).toEqual(range(1, 10));
  });

  it('after a crash, the next owner replays from an older checkpoint cut at other boundaries and the sink gets each record once', async () => {
    const shardId = freshShard();
    await apply(shardId, 1, records(1, 10));
    await apply(shardId, 1, records(11, 17)); // applied, but the crash came before the checkpoint
    // The heir reads again from the checkpoint at 10, in batches of 4.
    expect(await apply(shardId, 2, records(11, 14))).toEqual({ status: 'replay', appliedThrough: '17' });
    expect(await apply(shardId, 2, records(15, 18))).toEqual({ status: 'applied', value: 1 });
    expect(await apply(shardId, 2, records(19, 22))).toEqual({ status: 'applied', value: 4 });
    expect(await sinkRecords(shardId)).toEqual(range(1, 22));
  });

  it('refuses a zombie: a write with a token older than the one the sink last saw throws a LeaseLostError and writes nothing', async () => {
    const shardId = freshShard();
    await apply(shardId, 1, records(1, 5), 'zombie');
    await apply(shardId, 2, records(6, 8), 'heir');
    const refused = apply(shardId, 1, records(6, 12), 'zombie');
    await expect(refused).rejects.toThrow(LeaseLostError);
    await expect(refused).rejects.toThrow(`fencing token 1 of shard "${shardId}" is older than the 2 the sink "${server.schema}"."leasehold_fences" last saw`);
    expect(await sinkRecords(shardId)).toEqual(range(1, 8));
  });

  it('two owners of one shard racing across a handoff: whatever the interleaving, every record reaches the sink exactly once', async () => {
    for (let round = 0; round < 8; round++) {
      const shardId = freshShard();
      await apply(shardId, 1, records(1, 5), 'zombie');
      // The zombie goes on in batches of 3 while the heir (token 2) restarts from 5 in batches of 4.
      const zombie = (async () => {
        for (let from = 6; from <= 30; from += 3) {
          const outcome = await apply(shardId, 1, records(from, from + 2), 'zombie').catch((error: unknown) => error);
          if (outcome instanceof LeaseLostError) return;
        }
      })();
      const heir = (async () => {
        for (let from = 6; from <= 29; from += 4) await apply(shardId, 2, records(from, from + 3), 'heir');
      })();
      await Promise.all([zombie, heir]);
      // The zombie may have gone past the heir's last batch before the heir wrote anything; no record twice, none missing.
      const landed = await sinkRecords(shardId);
      expect(landed.at(-1)).toBeGreaterThanOrEqual(29);
      expect(landed).toEqual(range(1, landed.at(-1) ?? 0));
    }
  });

  it('a write whose COMMIT answer was lost is sent again safely: the fence tells it applied', async () => {
    const shardId = freshShard();
    const pool = server.pool();
    const client = await pool.connect();
    const query = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>;
    const cutting = Object.assign(Object.create(client) as pg.PoolClient, {
      query: async (...args: unknown[]) => {
        const answer = await query(...args);
        if (args[0] === 'COMMIT') throw new Error('Connection terminated unexpectedly');
        return answer;
      },
      on: client.on.bind(client),
      removeListener: client.removeListener.bind(client),
    });
    try {
      await expect(apply(shardId, 1, records(1, 4), 'w', cutting as unknown as pg.Pool)).rejects.toThrow(StorageOutcomeUnknownError);
    } finally {
      client.release();
    }
    expect(await apply(shardId, 1, records(1, 4))).toEqual({ status: 'replay', appliedThrough: '4' });
    expect(await sinkRecords(shardId)).toEqual(range(1, 4));
  });

  it('rolls the sink writes back when the function throws, and moves no fence', async () => {
    const shardId = freshShard();
    const failure = new Error('bad record');
    await expect(
      fencedWrite(server.pool(), { schema: server.schema, shardId, fencingToken: 1, position: '3' }, async (client) => {
        await client.query(`INSERT INTO ${sink} VALUES ($1, '1', 'w')`, [shardId]);
        throw failure;
      }),
    ).rejects.toBe(failure);
    expect(await sinkRecords(shardId)).toEqual([]);
    expect(await apply(shardId, 1, records(1, 3))).toEqual({ status: 'applied', value: 3 });
  });

  it('refuses bad identifiers and inputs with an InvalidConfigError naming them, before anything is sent', async () => {
    const pool = server.pool();
    const noop = async (): Promise<void> => undefined;
    const base = { schema: server.schema, shardId: 's', fencingToken: 1, position: '1' };
    await expect(fencedWrite(pool, { ...base, table: 'a"b' }, noop)).rejects.toThrow(InvalidConfigError);
    await expect(fencedWrite(pool, { ...base, table: 'a"b' }, noop)).rejects.toThrow('[storage-postgres] fence table name "a\\"b" is not a valid identifier');
    await expect(createFenceTable(pool, { schema: 'x; DROP' })).rejects.toThrow('[storage-postgres] fence schema name "x; DROP" is not a valid identifier');
    await expect(fencedWrite(pool, { ...base, shardId: '' }, noop)).rejects.toThrow('[storage-postgres] fencedWrite shardId must be a non-empty string, got ""');
    await expect(fencedWrite(pool, { ...base, fencingToken: -1 }, noop)).rejects.toThrow('[storage-postgres] fencedWrite fencingToken must be a non-negative integer, got -1');
    await expect(fencedWrite(pool, { ...base, position: 'LATEST' }, noop)).rejects.toThrow('[storage-postgres] fencedWrite position "LATEST" is not a record position');
    await expect(fencedWrite(pool, { ...base, position: 'abc' }, noop)).rejects.toThrow('[storage-postgres] fencedWrite position "abc" is not a record position');
  });

  it('names the missing fence table and the call that creates it', async () => {
    const write = fencedWrite(server.pool(), { schema: server.schema, table: 'no_such_fences', shardId: 's', fencingToken: 1, position: '1' }, async () => undefined);
    await expect(write).rejects.toThrow(StorageSchemaError);
    await expect(write).rejects.toThrow(`the fence table "${server.schema}"."no_such_fences" does not exist`);
  });
});
