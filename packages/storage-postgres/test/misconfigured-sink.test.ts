/**
 * A consumer whose fenced sink was given a schema other than the one its fence table was created in: every
 * call fails with a `StorageSchemaError`. That is the sink's fault, not any record's: a poison policy must
 * give nothing up, hold the shard (reported stalled, naming the error), and process every record once the
 * sink is given the right schema.
 */
import { Consumer, MemorySource, MemoryStorage, StorageSchemaError, type FailedRecords } from '@leasehold/core';
import { beforeAll, describe, expect, it } from 'vitest';
import { createFenceTable, fencedWrite } from '../src/index.js';
import { useServer } from './support.js';

const server = useServer('lh_missink', 4);
const sink = (): string => `"${server.schema}".orders`;
const decoder = new TextDecoder();

beforeAll(async () => {
  await createFenceTable(server.pool(), { schema: server.schema });
  await server.pool().query(`CREATE TABLE ${sink()} (shard_id text NOT NULL, record text NOT NULL)`);
});

/** Polls `condition` every 20 ms for up to `withinMs` of real time. */
async function eventually(condition: () => boolean | Promise<boolean>, withinMs = 20_000): Promise<void> {
  const until = Date.now() + withinMs;
  while (!(await condition())) {
    if (Date.now() > until) throw new Error(`not within ${withinMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('a fenced sink given the wrong schema', () => {
  it('dead-letters nothing under a poison policy with bisection: the shard holds, reported stalled with the StorageSchemaError, and every record reaches the sink once the schema is right', async () => {
    const source = new MemorySource(1, { batchSize: 50 });
    const total = 120;
    for (let n = 1; n <= total; n++) source.put(`key-${n % 7}`, String(n), 'shard-0000');
    let fenceSchema = `${server.schema}_wrong`;
    const deadLettered: number[] = [];
    const stalls: Array<{ reason: string; error: Error | undefined }> = [];
    let failures = 0;
    const consumer = new Consumer({
      group: `misconfigured-${Date.now()}`,
      source,
      storage: new MemoryStorage(),
      workerId: 'w1',
      initialPosition: 'TRIM_HORIZON',
      metrics: false,
      retry: { initialDelayMs: 10, maxDelayMs: 100 },
      lease: { leaseDurationMs: 3_000, takeIntervalMs: 200 },
      onHandlerError: {
        bisect: true,
        maxAttempts: 2,
        deadLetter: (failure: FailedRecords) => void deadLettered.push(...failure.records.map((record) => Number(decoder.decode(record.data)))),
      },
      processBatch: async (records, context) => {
        await fencedWrite(
          server.pool(),
          { schema: fenceSchema, shardId: context.shardId, fencingToken: context.fencingToken, position: context.position },
          async (client, fence) => {
            for (const record of fence.fresh(records)) await client.query(`INSERT INTO ${sink()} VALUES ($1, $2)`, [context.shardId, decoder.decode(record.data)]);
          },
        );
      },
    });
    consumer.on('shard-stalled', ({ reason, error }) => stalls.push({ reason, error }));
    consumer.on('handler-failed', () => failures++);
    await consumer.start();
    try {
      await eventually(() => failures >= 10);
      expect(deadLettered).toEqual([]);
      expect(stalls.map((stall) => stall.reason)).toEqual(['handler-error']);
      expect(stalls[0]?.error).toBeInstanceOf(StorageSchemaError);
      expect(stalls[0]?.error?.message).toContain('does not exist');
      fenceSchema = server.schema;
      const count = async (): Promise<number> => Number((await server.pool().query<{ n: string }>(`SELECT count(*) AS n FROM ${sink()}`)).rows[0]?.n);
      await eventually(async () => (await count()) === total);
      const { rows } = await server.pool().query<{ record: string }>(`SELECT record FROM ${sink()}`);
      expect(rows.map((row) => Number(row.record)).sort((a, b) => a - b)).toEqual(Array.from({ length: total }, (_, i) => i + 1));
      expect(deadLettered).toEqual([]);
    } finally {
      await consumer.stop({ timeoutMs: 5_000 });
    }
  }, 60_000);
});
