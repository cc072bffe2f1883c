/**
 * `pnpm bench` for the PostgreSQL adapter, against the server on 127.0.0.1:5432 (database `test`), in a
 * fresh schema that is dropped at the end. Prints ratios measured side by side in one run:
 *
 * 1. a batched renew of N leases through the adapter (one statement) against N raw conditional UPDATEs
 *    sent one by one through the same pool (target: N = 1,000 at least 20 times faster);
 * 2. one conditional update through the adapter against one raw prepared UPDATE doing the same write
 *    (target: ratio at most 1.3);
 * 3. a member's heartbeat (putMember) in a roster of 1, 10, 100 and 1,000 members against the raw prepared
 *    UPDATE of the member's row that makes the same conditional write in the same round trip;
 * 4. getRoster of 100 and 1,000 members against a raw prepared SELECT of the same rows (the adapter also
 *    decodes and checks every member);
 * 5. the bytes one heartbeat writes: the member's row (`pg_column_size`), against the whole roster row that
 *    schema version 2 rewrote on every heartbeat, at 10, 100 and 1,000 members;
 * 6. what a watcher reads each tick instead of the roster: getMembers of 3 members and the roster digest,
 *    the rows they read (`pg_column_size`) and their time, against getRoster, at 10, 100 and 1,000 members.
 */
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { type LeaseRecord, type LeaseState, type MemberState } from '@leasehold/core';
import { encodeMemberState, leaseStateOf, memberStateOf, RECORD_FORMAT } from '@leasehold/core/adapter';
import { postgresTarget } from '@leasehold/local-stack';
import pg from 'pg';
import { PostgresStorage } from '../src/index.js';

const config: pg.PoolConfig = {
  ...postgresTarget(),
  max: 4,
};

const SIZES: number[] = process.env.BENCH_SIZES ? JSON.parse(process.env.BENCH_SIZES) : [1, 100, 1000, 10_000];
const SINGLE_ROUNDS = 400;
/** Heartbeats are measured longer: a row's cost shows once the table has seen many versions of it. */
const HEARTBEAT_ROUNDS = 1500;
/** Group sizes of the roster measures: up to `limits.maxMembers`. */
const ROSTER_SIZES = [1, 10, 100, 1000];

/** Joins `count` members to the group through the adapter; returns their versions, by index. */
async function joinAll(storage: PostgresStorage, group: string, count: number): Promise<number[]> {
  const versions: number[] = [];
  for (let i = 0; i < count; i++) {
    const outcome = await storage.putMember(group, `worker-${i}`, null, memberState(i, 0));
    if (outcome.status !== 'applied') throw new Error(`join did not apply: ${JSON.stringify(outcome)}`);
    versions.push(outcome.record.version);
  }
  return versions;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
}

/** A member as a worker of a real deployment writes it: a host name in its metadata, a few leases held. */
const memberState = (index: number, round: number): MemberState =>
  memberStateOf({
    format: RECORD_FORMAT,
    incarnation: `host-${index}-4f1c2a9e`,
    leaseDurationMs: 10_000,
    status: 'alive',
    held: (index + round) % 7,
    changes: round,
    requests: [],
    metadata: { host: `ip-10-0-${index}-17.eu-west-1.compute.internal`, pid: String(4000 + index) },
  });

/** Runs `adapter` and `raw` alternately, rounds times after 20 of warm-up, and returns their medians. */
async function interleaved(rounds: number, adapter: (round: number) => Promise<void>, raw: (round: number) => Promise<void>): Promise<[number, number]> {
  const adapterTimes: number[] = [];
  const rawTimes: number[] = [];
  for (let round = 0; round < rounds + 20; round++) {
    const startAdapter = performance.now();
    await adapter(round);
    const adapterMs = performance.now() - startAdapter;
    const startRaw = performance.now();
    await raw(round);
    const rawMs = performance.now() - startRaw;
    if (round >= 20) {
      adapterTimes.push(adapterMs);
      rawTimes.push(rawMs);
    }
  }
  return [median(adapterTimes), median(rawTimes)];
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

    const members = `"${schema}".leasehold_members`;
    console.log('\nA heartbeat: putMember against the raw prepared UPDATE of the member\'s row, interleaved');
    console.log('| members in the roster | putMember median ms | raw UPDATE median ms | putMember / raw |');
    console.log('| ---: | ---: | ---: | ---: |');
    for (const size of ROSTER_SIZES) {
      const group = `bench-roster-${size}`;
      // Every member heartbeats in turn, half of them through the adapter and half through the raw statement.
      const versions = await joinAll(storage, group, Math.max(size, 2));
      const half = Math.max(1, Math.floor(size / 2));
      const [adapterMedian, rawMedian] = await interleaved(
        HEARTBEAT_ROUNDS,
        async (round) => {
          const i = round % half;
          const outcome = await storage.putMember(group, `worker-${i}`, versions[i] as number, memberState(i, round));
          if (outcome.status !== 'applied') throw new Error(`heartbeat did not apply: ${JSON.stringify(outcome)}`);
          versions[i] = outcome.record.version;
        },
        async (round) => {
          const i = half + (round % (Math.max(size, 2) - half));
          const { rows } = await pool.query<{ version: string }>({
            name: 'bench-raw-heartbeat',
            text: `UPDATE ${members} SET version = version + 1, state = $4
                   WHERE group_name = $1 AND worker_id = $2 AND NOT removed AND version = $3 RETURNING version`,
            values: [group, `worker-${i}`, versions[i], encodeMemberState(memberState(i, round))],
          });
          if (rows.length !== 1) throw new Error('raw heartbeat did not apply');
          versions[i] = Number(rows[0]?.version);
        },
      );
      console.log(`| ${size.toLocaleString('en-US')} | ${format(adapterMedian)} | ${format(rawMedian)} | ${(adapterMedian / rawMedian).toFixed(2)} |`);
    }

    console.log('\nReading a roster: getRoster against a raw prepared SELECT of its members\' rows, interleaved');
    console.log('| members | getRoster median ms | raw SELECT median ms | getRoster / raw |');
    console.log('| ---: | ---: | ---: | ---: |');
    for (const size of ROSTER_SIZES.filter((n) => n >= 100)) {
      const group = `bench-roster-${size}`;
      const [adapterMedian, rawMedian] = await interleaved(
        size >= 1000 ? SINGLE_ROUNDS / 4 : SINGLE_ROUNDS,
        async () => {
          const roster = await storage.getRoster(group);
          if (roster.members.length !== size) throw new Error(`roster of ${roster.members.length} members`);
        },
        async () => {
          const { rows } = await pool.query({
            name: 'bench-raw-roster',
            text: `SELECT worker_id, version, state FROM ${members} WHERE group_name = $1 AND NOT removed`,
            values: [group],
          });
          if (rows.length !== size) throw new Error(`raw roster read found ${rows.length} rows`);
        },
      );
      console.log(`| ${size.toLocaleString('en-US')} | ${format(adapterMedian)} | ${format(rawMedian)} | ${(adapterMedian / rawMedian).toFixed(2)} |`);
    }

    // What a heartbeat writes: the member's row now, the group's whole roster row in schema version 2 (built
    // here with that release's join statement, members as a worker of a real deployment writes them).
    const rosters = `"${schema}".leasehold_rosters`;
    console.log('\nWhat one heartbeat writes (a new version of one row), by the size of the group');
    console.log('| members | member row now (pg_column_size) | roster row of schema version 2: JSON | as stored (pg_column_size, compressed) |');
    console.log('| ---: | ---: | ---: | ---: |');
    for (const size of ROSTER_SIZES.filter((n) => n >= 10)) {
      const group = `bench-bytes-${size}`;
      await joinAll(storage, group, size);
      const earlier = `bench-bytes-v2-${size}`;
      for (let i = 0; i < size; i++) {
        await pool.query(
          `INSERT INTO ${rosters} AS t (group_name, high_version, members)
           VALUES ($1, 1, jsonb_build_object($2::text, jsonb_build_object('v', 1, 's', $3::text)))
           ON CONFLICT (group_name) DO UPDATE
             SET high_version = t.high_version + 1,
                 members = jsonb_set(t.members, ARRAY[$2::text], jsonb_build_object('v', t.high_version + 1, 's', $3::text))
             WHERE NOT (t.members ? $2::text)`,
          [earlier, `worker-${i}`, encodeMemberState(memberState(i, 0))],
        );
      }
      const { rows } = await pool.query<{ row_bytes: string; json_bytes: string; stored_bytes: string }>(
        `SELECT (SELECT round(avg(pg_column_size(m.*))) FROM ${members} AS m WHERE m.group_name = $1) AS row_bytes,
                (SELECT octet_length(r.members::text) FROM ${rosters} AS r WHERE r.group_name = $2) AS json_bytes,
                (SELECT pg_column_size(r.members) FROM ${rosters} AS r WHERE r.group_name = $2) AS stored_bytes`,
        [group, earlier],
      );
      const bytes = rows[0];
      const kb = (value: string | undefined): string => `${(Number(value) / 1024).toFixed(1)} KB`;
      console.log(`| ${size.toLocaleString('en-US')} | ${bytes?.row_bytes} B | ${kb(bytes?.json_bytes)} | ${kb(bytes?.stored_bytes)} |`);
    }

    console.log('\nWhat a watcher reads each tick: getMembers of 3 members and the roster digest, against getRoster');
    console.log('| members | getMembers of 3: rows read, median ms | getRosterDigest: row read, median ms | getRoster: rows read, median ms |');
    console.log('| ---: | ---: | ---: | ---: |');
    for (const size of ROSTER_SIZES.filter((n) => n >= 10)) {
      const group = `bench-bytes-${size}`;
      const watched = ['worker-1', `worker-${Math.floor(size / 2)}`, `worker-${size - 1}`];
      await storage.advanceRosterDigest(group);
      const { rows } = await pool.query<{ few: string; digest: string; all: string }>(
        `SELECT (SELECT sum(pg_column_size(m.*)) FROM ${members} AS m WHERE m.group_name = $1 AND m.worker_id = ANY($2::text[])) AS few,
                (SELECT pg_column_size(m.*) FROM ${members} AS m WHERE m.group_name = $1 AND m.worker_id = '') AS digest,
                (SELECT sum(pg_column_size(m.*)) FROM ${members} AS m WHERE m.group_name = $1 AND NOT m.removed) AS all`,
        [group, watched],
      );
      const timesOf = async (rounds: number, read: () => Promise<unknown>): Promise<number> => {
        const times: number[] = [];
        for (let round = 0; round < rounds + 20; round++) {
          const start = performance.now();
          await read();
          if (round >= 20) times.push(performance.now() - start);
        }
        return median(times);
      };
      const few = await timesOf(SINGLE_ROUNDS, () => storage.getMembers(group, watched));
      const digest = await timesOf(SINGLE_ROUNDS, () => storage.getRosterDigest(group));
      const all = await timesOf(size >= 1000 ? SINGLE_ROUNDS / 4 : SINGLE_ROUNDS, () => storage.getRoster(group));
      const bytes = rows[0];
      const kb = (value: string | undefined): string => `${(Number(value) / 1024).toFixed(1)} KB`;
      console.log(`| ${size.toLocaleString('en-US')} | ${bytes?.few} B, ${format(few)} | ${bytes?.digest} B, ${format(digest)} | ${kb(bytes?.all)}, ${format(all)} |`);
    }
  } finally {
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined);
    await storage.close();
    await pool.end();
  }
}

await main();
