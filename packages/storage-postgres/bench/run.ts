/**
 * `pnpm bench` for the PostgreSQL adapter, against the server on 127.0.0.1:5432 (database `test`), in a
 * fresh schema that is dropped at the end. Prints ratios measured side by side in one run:
 *
 * 1. a batched renew of N leases through the adapter (one statement) against N raw conditional UPDATEs
 *    sent one by one through the same pool (target: N = 1,000 at least 20 times faster);
 * 2. one conditional update through the adapter against one raw prepared UPDATE doing the same write
 *    (target: ratio at most 1.3).
 */
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { leaseStateOf, RECORD_FORMAT, type LeaseRecord, type LeaseState } from '@leasehold/core';
import pg from 'pg';
import { PostgresStorage } from '../src/index.js';

const config: pg.PoolConfig = {
  host: process.env.PGHOST ?? '127.0.0.1',
  port: Number(process.env.PGPORT ?? 5432),
  database: process.env.PGDATABASE ?? 'test',
  user: process.env.PGUSER ?? 'root',
  max: 4,
};

const SIZES: number[] = process.env.BENCH_SIZES ? JSON.parse(process.env.BENCH_SIZES) : [1, 100, 1000, 10_000];
const SINGLE_ROUNDS = 400;

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
}

const format = (ms: number): string => (ms >= 100 ? ms.toFixed(0) : ms >= 1 ? ms.toFixed(2) : ms.toFixed(3));

async function main(): Promise<void> {
  const pool = new pg.Pool(config);
  try {
    await pool.query('SELECT 1');
  } catch (error) {
    throw new Error(`cannot reach PostgreSQL at ${config.host}:${config.port}/${config.database}: ${(error as Error).message}; start it with \`pg_ctlcluster <version> main start\``, { cause: error });
  }
  const schema = `lh_bench_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
  const storage = new PostgresStorage({ pool, schema });
  const table = `"${schema}".leasehold_leases`;
  // The raw statement does the same conditional write as the adapter, prepared once per connection.
  const raw = (name: string, group: string, lease: LeaseRecord, state: LeaseState): pg.QueryConfig => ({
    name,
    text: `UPDATE ${table} SET version = version + 1, state = $4, high_epoch = GREATEST(high_epoch, $5::bigint)
           WHERE group_name = $1 AND lease_key = $2 AND live AND version = $3 RETURNING version`,
    values: [group, lease.leaseKey, lease.version, JSON.stringify(state), state.epoch],
  });
  try {
    await storage.migrate();
    const server = await pool.query<{ version: string; fsync: string; sync: string }>(
      `SELECT current_setting('server_version') AS version, current_setting('fsync') AS fsync, current_setting('synchronous_commit') AS sync`,
    );
    const settings = server.rows[0];
    console.log(`PostgreSQL ${settings?.version} (fsync=${settings?.fsync}, synchronous_commit=${settings?.sync}), pool of ${config.max}\n`);

    console.log('Batched renew: one updateLeases() statement against N raw conditional UPDATEs one by one');
    console.log('| leases | batch ms | one by one ms | one by one / batch |');
    console.log('| ---: | ---: | ---: | ---: |');
    for (const size of SIZES) {
      const group = `bench-${size}`;
      const keys = Array.from({ length: size }, (_, i) => `shardId-${String(i).padStart(12, '0')}`);
      await pool.query(
        `INSERT INTO ${table} (group_name, lease_key, version, live, high_epoch, state)
         SELECT $1, key, 1, true, 1, $3 FROM unnest($2::text[]) AS key`,
        [group, keys, JSON.stringify({ format: RECORD_FORMAT, owner: 'bench', epoch: 1, checkpoint: null, parentKeys: [], incarnation: null, metadata: {} })],
      );
      let { leases } = await storage.listLeases(group);
      const rounds = size >= 10_000 ? 3 : size >= 1000 ? 9 : 30;
      const batchTimes: number[] = [];
      const serialTimes: number[] = [];
      for (let round = 0; round < rounds; round++) {
        const startBatch = performance.now();
        const results = await storage.updateLeases(
          group,
          leases.map((lease) => ({ leaseKey: lease.leaseKey, expectedVersion: lease.version, next: { ...leaseStateOf(lease), checkpoint: String(round) } })),
        );
        batchTimes.push(performance.now() - startBatch);
        leases = results.map((outcome) => {
          if (outcome.status !== 'applied') throw new Error(`batch renew did not apply: ${JSON.stringify(outcome)}`);
          return outcome.record;
        });
        // One by one is slow at 10,000; one round of it is enough to measure.
        if (size < 10_000 || round === 0) {
          const startSerial = performance.now();
          const next: LeaseRecord[] = [];
          for (const lease of leases) {
            const state = { ...leaseStateOf(lease), checkpoint: `s${round}` };
            const { rows } = await pool.query<{ version: string }>(raw('bench-raw-renew', group, lease, state));
            if (rows.length !== 1) throw new Error('raw renew did not apply');
            next.push({ ...lease, ...state, version: Number(rows[0]?.version) });
          }
          serialTimes.push(performance.now() - startSerial);
          leases = next;
        }
      }
      const batch = median(batchTimes);
      const serial = median(serialTimes);
      console.log(`| ${size.toLocaleString('en-US')} | ${format(batch)} | ${format(serial)} | ${(serial / batch).toFixed(1)}x |`);
    }

    console.log('\nOne conditional update: adapter against a raw prepared UPDATE, interleaved');
    console.log('| adapter statements | adapter median ms | raw prepared median ms | adapter / raw (target at most 1.3) |');
    console.log('| --- | ---: | ---: | ---: |');
    const unnamed = new PostgresStorage({ pool, schema, preparedStatements: false });
    for (const [label, adapter] of [['named (default)', storage], ['unnamed (preparedStatements: false)', unnamed]] as const) {
      const group = `bench-single-${label.length}`;
      let viaAdapter = (await adapter.createLease({ group, leaseKey: 'adapter', owner: 'w', epoch: 1 })) as { record: LeaseRecord };
      let viaRaw = (await adapter.createLease({ group, leaseKey: 'raw', owner: 'w', epoch: 1 })) as { record: LeaseRecord };
      const adapterTimes: number[] = [];
      const rawTimes: number[] = [];
      for (let round = 0; round < SINGLE_ROUNDS + 20; round++) {
        const startAdapter = performance.now();
        const [outcome] = await adapter.updateLeases(group, [
          { leaseKey: 'adapter', expectedVersion: viaAdapter.record.version, next: { ...leaseStateOf(viaAdapter.record), checkpoint: String(round) } },
        ]);
        const adapterMs = performance.now() - startAdapter;
        if (outcome?.status !== 'applied') throw new Error(`adapter update did not apply: ${JSON.stringify(outcome)}`);
        viaAdapter = outcome;

        const state = { ...leaseStateOf(viaRaw.record), checkpoint: String(round) };
        const startRaw = performance.now();
        const { rows } = await pool.query<{ version: string }>(raw('bench-raw-single', group, viaRaw.record, state));
        const rawMs = performance.now() - startRaw;
        if (rows.length !== 1) throw new Error('raw update did not apply');
        viaRaw = { record: { ...viaRaw.record, ...state, version: Number(rows[0]?.version) } };
        // The first rounds warm the pool, the JIT and the prepared statements.
        if (round >= 20) {
          adapterTimes.push(adapterMs);
          rawTimes.push(rawMs);
        }
      }
      const adapterMedian = median(adapterTimes);
      const rawMedian = median(rawTimes);
      console.log(`| ${label} | ${format(adapterMedian)} | ${format(rawMedian)} | ${(adapterMedian / rawMedian).toFixed(2)} |`);
    }
  } finally {
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined);
    await storage.close();
    await pool.end();
  }
}

await main();
