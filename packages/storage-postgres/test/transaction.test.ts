/**
 * The transactional checkpoint on a real server: the handler's writes and the checkpoint commit together
 * or not at all, and the fencing condition (the lease row, locked) is decided inside the transaction.
 */
import {
  CheckpointBehindError,
  Consumer,
  InvalidConfigError,
  LeaseCoordinator,
  LeaseLostError,
  MemorySource,
  StorageOutcomeUnknownError,
  StorageUnavailableError,
  type LeaseRecord,
  type Position,
} from '@leasehold/core';
import { leaseStateOf } from '@leasehold/core/adapter';
import type pg from 'pg';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { PostgresStorage, type TransactionContext } from '../src/index.js';
import { useServer, waitFor } from './support.js';

const server = useServer('lh_txn', 16);
let groups = 0;
const running: Array<{ stop(): Promise<void> }> = [];

beforeAll(async () => {
  await new PostgresStorage({ pool: server.pool(), schema: server.schema }).migrate();
  await server.pool().query(`CREATE TABLE "${server.schema}".orders (shard_id text NOT NULL, position text NOT NULL, order_id text NOT NULL)`);
});

afterEach(async () => {
  await Promise.all(running.splice(0).map((worker) => worker.stop()));
});

const sink = `"${server.schema}".orders`;

async function sinkRows(shardId?: string): Promise<string[]> {
  const { rows } = await server.pool().query<{ order_id: string }>(
    `SELECT order_id FROM ${sink} WHERE $1::text IS NULL OR shard_id = $1 ORDER BY order_id`,
    [shardId ?? null],
  );
  return rows.map((row) => row.order_id);
}

/** A fresh group with one lease, and a worker that holds it. */
async function held(pool: pg.Pool = server.pool()) {
  const group = `txn-${++groups}-${Date.now()}`;
  const storage = new PostgresStorage({ pool, schema: server.schema });
  await storage.createLease({ group, leaseKey: 'shard-0', checkpoint: 'TRIM_HORIZON' });
  const coordinator = new LeaseCoordinator({ storage, group, workerId: 'a', leaseDurationMs: 4_000, takeIntervalMs: 100 });
  running.push(coordinator);
  await coordinator.start();
  expect(await waitFor(() => coordinator.isHeld('shard-0'))).toBe(true);
  const lease = coordinator.lease('shard-0');
  if (!lease) throw new Error('the lease is not held');
  /** The batch context of a batch ending at `end`, as the runtime builds it. */
  const batch = (end: Position): TransactionContext => ({
    checkpointWith: (write, position) => coordinator.checkpointThrough(lease, position ?? end, write),
  });
  const stored = async (): Promise<LeaseRecord> => {
    const record = await storage.getLease(group, 'shard-0');
    if (!record) throw new Error('the lease is gone');
    return record;
  };
  return { group, storage, coordinator, lease, batch, stored };
}

const insert = (client: pg.PoolClient, position: string, orderId: string) =>
  client.query(`INSERT INTO ${sink} (shard_id, position, order_id) VALUES ($1, $2, $3)`, ['shard-0', position, orderId]);

describe('PostgresStorage.transaction', () => {
  it('commits the handler\'s writes and the checkpoint together, and returns what the function returned', async () => {
    const { storage, batch, stored, group } = await held();
    const before = await stored();
    const value = await storage.transaction(batch('10'), async (client) => {
      await insert(client, '10', `${group}/1`);
      return 'done';
    });
    expect(value).toBe('done');
    expect(await stored()).toMatchObject({ checkpoint: '10', version: before.version + 1, owner: 'a' });
    expect(await sinkRows()).toContain(`${group}/1`);
  });

  it('refuses a zombie: the lease moved to another worker, so nothing of its transaction is written and the handler gets a LeaseLostError', async () => {
    const { storage, batch, stored, lease, coordinator, group } = await held();
    const record = await stored();
    // Another worker took the lease in storage; this one has not heard of it yet.
    await storage.updateLeases(group, [{ leaseKey: 'shard-0', expectedVersion: record.version, next: { ...leaseStateOf(record), owner: 'b', incarnation: 'b-1', epoch: record.epoch + 1 } }]);
    let ran = false;
    const refused = storage.transaction(batch('10'), async (client) => {
      ran = true;
      await insert(client, '10', `${group}/zombie`);
    });
    await expect(refused).rejects.toThrow(LeaseLostError);
    expect(ran).toBe(false);
    expect(lease.signal.aborted).toBe(true);
    expect(coordinator.isHeld('shard-0')).toBe(false);
    expect(await stored()).toMatchObject({ owner: 'b', checkpoint: 'TRIM_HORIZON' });
    expect(await sinkRows()).not.toContain(`${group}/zombie`);
  });

  it('holds the lease row for the whole transaction: a take sent meanwhile waits, then conflicts with the checkpoint', async () => {
    const { storage, batch, stored, group } = await held();
    const record = await stored();
    let take: Promise<unknown> = Promise.resolve();
    await storage.transaction(batch('10'), async (client) => {
      await insert(client, '10', `${group}/1`);
      take = storage.updateLeases(group, [{ leaseKey: 'shard-0', expectedVersion: record.version, next: { ...leaseStateOf(record), owner: 'b', incarnation: 'b-1', epoch: record.epoch + 1 } }]);
      // Long enough for the take to reach the row lock; it cannot pass it before COMMIT.
      await new Promise((resolve) => setTimeout(resolve, 200));
    });
    const [outcome] = (await take) as Array<{ status: string }>;
    expect(outcome?.status).toBe('conflict');
    expect(await stored()).toMatchObject({ owner: 'a', checkpoint: '10' });
  });

  it('rolls back the handler\'s writes when the function throws, and throws its error', async () => {
    const { storage, batch, stored, group } = await held();
    const failure = new Error('bad order');
    await expect(
      storage.transaction(batch('10'), async (client) => {
        await insert(client, '10', `${group}/half`);
        throw failure;
      }),
    ).rejects.toBe(failure);
    expect(await sinkRows()).not.toContain(`${group}/half`);
    expect((await stored()).checkpoint).toBe('TRIM_HORIZON');
  });

  it('refuses the same batch a second time (a replay): the checkpoint is already there, so nothing is written twice', async () => {
    const { storage, batch, group } = await held();
    await storage.transaction(batch('10'), (client) => insert(client, '10', `${group}/1`));
    await expect(storage.transaction(batch('10'), (client) => insert(client, '10', `${group}/1`))).rejects.toThrow(CheckpointBehindError);
    await expect(storage.transaction(batch('7'), (client) => insert(client, '7', `${group}/1`))).rejects.toThrow(CheckpointBehindError);
    expect((await sinkRows()).filter((id) => id === `${group}/1`)).toHaveLength(1);
  });

  it('a COMMIT whose answer was lost is read back from the lease row: adopted when it applied, refused when it did not, and the handler\'s writes went with it', async () => {
    let mode: 'normal' | 'cut-after-commit' | 'cut-before-commit' = 'normal';
    const pool = cuttingPool(server.pool(), () => mode);
    const { storage, batch, stored, group } = await held(pool);
    mode = 'cut-after-commit';
    await storage.transaction(batch('10'), (client) => insert(client, '10', `${group}/applied`));
    expect((await stored()).checkpoint).toBe('10');
    expect(await sinkRows()).toContain(`${group}/applied`);
    mode = 'cut-before-commit';
    await expect(storage.transaction(batch('20'), (client) => insert(client, '20', `${group}/lost`))).rejects.toThrow(StorageOutcomeUnknownError);
    mode = 'normal';
    expect((await stored()).checkpoint).toBe('10');
    expect(await sinkRows()).not.toContain(`${group}/lost`);
    await storage.transaction(batch('20'), (client) => insert(client, '20', `${group}/again`));
    expect((await stored()).checkpoint).toBe('20');
  });

  it('a transaction whose connection dies before COMMIT throws a StorageUnavailableError: nothing committed, and a consumer does not take it for a record\'s fault', async () => {
    const { storage, batch, stored, group } = await held();
    const attempt = storage.transaction(batch('10'), async (client) => {
      await insert(client, '10', `${group}/cut`);
      (client as unknown as { connection: { stream: { destroy(): void } } }).connection.stream.destroy();
      await client.query('SELECT 1');
    });
    await expect(attempt).rejects.toThrow(StorageUnavailableError);
    await expect(attempt).rejects.toThrow(/lost its connection before COMMIT, so nothing of it committed/);
    expect(await sinkRows()).not.toContain(`${group}/cut`);
    expect((await stored()).checkpoint).toBe('TRIM_HORIZON');
    await storage.transaction(batch('10'), (client) => insert(client, '10', `${group}/after`));
    expect((await stored()).checkpoint).toBe('10');
  });

  it('finds an earlier attempt committed (its answer lost and not read back): resolves without running the function again, and the writes are there once', async () => {
    const { storage, batch, stored, group } = await held();
    const record = await stored();
    // The first attempt commits, but the worker never learns of it (the answer and the read-back were lost).
    const lost: TransactionContext = {
      checkpointWith: async (write) => {
        await write(record, { ...leaseStateOf(record), checkpoint: '10' });
        throw new StorageOutcomeUnknownError('[test] the answer to COMMIT and the read-back were lost');
      },
    };
    await expect(storage.transaction(lost, (client) => insert(client, '10', `${group}/once`))).rejects.toThrow(StorageOutcomeUnknownError);
    let ranAgain = false;
    const value = await storage.transaction(batch('10'), async (client) => {
      ranAgain = true;
      await insert(client, '10', `${group}/once`);
      return 'second';
    });
    expect(value).toBeUndefined();
    expect(ranAgain).toBe(false);
    expect((await sinkRows()).filter((id) => id === `${group}/once`)).toHaveLength(1);
    expect(await stored()).toMatchObject({ checkpoint: '10', version: record.version + 1, owner: 'a' });
  });

  it('refuses arguments that are not a batch context, a function or a position, naming them', async () => {
    const storage = new PostgresStorage({ pool: server.pool(), schema: server.schema });
    await expect(storage.transaction({} as TransactionContext, async () => undefined)).rejects.toThrow(InvalidConfigError);
    await expect(storage.transaction({} as TransactionContext, async () => undefined)).rejects.toThrow(
      '[storage-postgres] transaction needs the batch context handed to processBatch, got {}',
    );
    const context: TransactionContext = { checkpointWith: async () => undefined };
    await expect(storage.transaction(context, 5 as never)).rejects.toThrow('[storage-postgres] transaction needs a function, got 5');
    await expect(storage.transaction(context, async () => undefined, { position: '' })).rejects.toThrow(
      '[storage-postgres] transaction position must be a non-empty string, got ""',
    );
  });
});

describe('PostgresStorage.transaction under a Consumer', () => {
  it('every record lands in the sink exactly once across a rebalance to a second worker and a graceful stop, and the runtime checkpoints nothing on its own', async () => {
    const group = `txn-consumer-${Date.now()}`;
    const storage = new PostgresStorage({ pool: server.pool(), schema: server.schema });
    const source = new MemorySource(4, { batchSize: 7 });
    const checkpointsByRuntime: string[] = [];
    const worker = (workerId: string) => {
      const consumer = new Consumer({
        group,
        source,
        storage,
        workerId,
        initialPosition: 'TRIM_HORIZON',
        lease: { leaseDurationMs: 3_000, takeIntervalMs: 100 },
        processBatch: async (records, context) => {
          await storage.transaction(context, async (client) => {
            for (const record of records) {
              await client.query(`INSERT INTO ${sink} (shard_id, position, order_id) VALUES ($1, $2, $3)`, [
                context.shardId,
                record.position,
                `${group}/${new TextDecoder().decode(record.data)}`,
              ]);
            }
          });
        },
      });
      consumer.on('checkpointed', ({ shardId, position }) => checkpointsByRuntime.push(`${shardId}@${position}`));
      running.push(consumer);
      return consumer;
    };
    const produced: string[] = [];
    const produce = (count: number) => {
      for (let i = 0; i < count; i++) {
        const id = `order-${String(produced.length).padStart(4, '0')}`;
        source.put(id, id);
        produced.push(`${group}/${id}`);
      }
    };
    const first = worker('first');
    await first.start();
    produce(200);
    const second = worker('second');
    await second.start();
    produce(200);
    expect(await waitFor(() => second.shards.length === 2 && first.shards.length === 2, 30_000)).toBe(true);
    produce(200);
    await first.stop();
    produce(200);
    const mine = async (): Promise<string[]> => (await sinkRows()).filter((id) => id.startsWith(`${group}/`));
    expect(await waitFor(async () => (await mine()).length >= produced.length, 30_000)).toBe(true);
    expect(await mine()).toEqual([...produced].sort());
    // Every checkpoint came from a transaction, once: no shard's position was written twice.
    expect(new Set(checkpointsByRuntime).size).toBe(checkpointsByRuntime.length);
  });
});

/**
 * A pool whose clients, on request, lose the answer to COMMIT: after sending it (the transaction applied)
 * or instead of sending it (the connection closes and the server rolls back).
 */
function cuttingPool(pool: pg.Pool, mode: () => 'normal' | 'cut-after-commit' | 'cut-before-commit'): pg.Pool {
  const cutting = Object.create(pool) as pg.Pool;
  cutting.connect = (async () => {
    const client = await pool.connect();
    const query = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>;
    return Object.assign(Object.create(client) as pg.PoolClient, {
      query: async (...args: unknown[]) => {
        const current = mode();
        if (args[0] !== 'COMMIT' || current === 'normal') return query(...args);
        if (current === 'cut-after-commit') await query(...args);
        (client as unknown as { connection: { stream: { destroy(): void } } }).connection.stream.destroy();
        throw new Error('Connection terminated unexpectedly');
      },
      release: (error?: Error | boolean) => client.release(error),
      on: client.on.bind(client),
      removeListener: client.removeListener.bind(client),
    });
  }) as pg.Pool['connect'];
  return cutting;
}
