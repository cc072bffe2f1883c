/**
 * `pnpm bench`: measured side by side in one run against Redis on 127.0.0.1:6379, printed as ratios.
 *
 * 1. A batched renew of N leases (one script call) against N single conditional updates sent one by one.
 * 2. One conditional update through the adapter against one raw EVALSHA of an equivalent one-key
 *    compare-and-set script: the adapter's own cost (validation, encoding, decoding, checks).
 * 3. A heartbeat (putMember) against a raw EVALSHA of a minimal script doing the same compare-and-set on
 *    one member's field and the group's counter.
 * 4. getRoster of 100 members against a raw HGETALL of the same hash.
 * 5. The bytes of a heartbeat and of a roster read at 10, 100 and 1,000 members, counted on the wire by a
 *    proxy: a member of a typical size and one of the largest (2 KiB of state); and of what a watcher
 *    reads instead (getMembers of 3 members, the roster digest) and of an advance of the digest.
 */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createConnection, createServer, type AddressInfo, type Server } from 'node:net';
import { performance } from 'node:perf_hooks';
import { type LeaseRecord, type LeaseUpdate, type MemberRecord, type MemberState, type WriteResult } from '@leasehold/core';
import { encodeMemberState, leaseStateOf, limits, RECORD_FORMAT } from '@leasehold/core/adapter';
import { Redis } from 'ioredis';
import { RedisStorage } from '../src/index.js';
import { groupKeys } from '../src/keys.js';

const keyPrefix = `leasehold-bench-${randomUUID().slice(0, 8)}:`;

function applied<T = LeaseRecord>(outcome: WriteResult<T> | undefined): T {
  if (outcome?.status !== 'applied') throw new Error(`a renewal did not apply: ${JSON.stringify(outcome)}`);
  return outcome.record;
}

function renewals(leases: readonly LeaseRecord[]): LeaseUpdate[] {
  return leases.map((lease) => ({
    leaseKey: lease.leaseKey,
    expectedVersion: lease.version,
    next: { ...leaseStateOf(lease), owner: 'bench', incarnation: 'bench-1' },
  }));
}

async function timed(run: () => Promise<unknown>): Promise<number> {
  const start = performance.now();
  await run();
  return performance.now() - start;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
}

async function batchVersusSingles(storage: RedisStorage): Promise<void> {
  console.log('Batched renew (one script call) vs single conditional updates sent one by one');
  for (const size of [1, 100, 1000, 10_000]) {
    const group = `bench-batch-${size}-${randomUUID()}`;
    for (let start = 0; start < size; start += 500) {
      await Promise.all(
        Array.from({ length: Math.min(500, size - start) }, (_, i) =>
          storage.createLease({ group, leaseKey: `shardId-${String(start + i).padStart(12, '0')}`, checkpoint: '49590338271490256608559692538361571095921575989136588898' }),
        ),
      );
    }
    // Renew the way a worker does: from the records the previous write returned, with no re-read between.
    let { leases } = await storage.listLeases(group);
    const renewBatch = async (): Promise<void> => {
      const results = await storage.updateLeases(group, renewals(leases));
      leases = results.map((outcome) => applied(outcome));
    };
    const renewOneByOne = async (): Promise<void> => {
      const next: LeaseRecord[] = [];
      for (const update of renewals(leases)) next.push(applied((await storage.updateLeases(group, [update]))[0]));
      leases = next;
    };
    await renewBatch();
    await renewOneByOne();
    const repeats = size >= 10_000 ? 3 : size >= 1000 ? 11 : 41;
    const batchTimes: number[] = [];
    const singleTimes: number[] = [];
    for (let round = 0; round < repeats; round++) {
      batchTimes.push(await timed(renewBatch));
      singleTimes.push(await timed(renewOneByOne));
    }
    const batch = median(batchTimes);
    const singles = median(singleTimes);
    console.log(
      `  ${String(size).padStart(6)} leases: batch ${batch.toFixed(2)} ms, one by one ${singles.toFixed(2)} ms, batch is ${(singles / batch).toFixed(1)}x faster`,
    );
  }
}

const RAW_CAS = `
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current and string.match(current, '^(%d+):') == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3] .. ':' .. ARGV[4])
  return 1
end
return current
`;

async function adapterVersusRaw(client: Redis, storage: RedisStorage): Promise<void> {
  const group = `bench-single-${randomUUID()}`;
  let lease = applied(await storage.createLease({ group, leaseKey: 'shardId-000000000000', owner: 'bench', epoch: 1, checkpoint: '1' }));
  const rawKey = `${keyPrefix}{raw}:leases`;
  const body = JSON.stringify({ owner: 'bench', checkpoint: '1', parentKeys: [], incarnation: 'bench-1', metadata: {} });
  await client.hset(rawKey, 'k', `1:${body}`);
  const sha = (await client.script('LOAD', RAW_CAS)) as string;
  let rawVersion = 1;
  const perBlock = 500;
  const adapterBlocks: number[] = [];
  const rawBlocks: number[] = [];
  for (let block = 0; block < 31; block++) {
    // Alternate which side goes first, so that neither always runs on a warmer machine.
    const runAdapter = async (): Promise<void> => {
      adapterBlocks.push(
        await timed(async () => {
          for (let i = 0; i < perBlock; i++) {
            lease = applied((await storage.updateLeases(group, renewals([lease])))[0]);
          }
        }),
      );
    };
    const runRaw = async (): Promise<void> => {
      rawBlocks.push(
        await timed(async () => {
          for (let i = 0; i < perBlock; i++) {
            const reply = await client.evalsha(sha, 1, rawKey, 'k', String(rawVersion), String(rawVersion + 1), body);
            if (reply !== 1) throw new Error(`raw compare-and-set did not apply: ${String(reply)}`);
            rawVersion++;
          }
        }),
      );
    };
    if (block % 2 === 0) {
      await runAdapter();
      await runRaw();
    } else {
      await runRaw();
      await runAdapter();
    }
  }
  const adapter = (median(adapterBlocks) / perBlock) * 1000;
  const raw = (median(rawBlocks) / perBlock) * 1000;
  console.log('One conditional update: adapter vs raw EVALSHA of a one-key compare-and-set');
  console.log(`  adapter ${adapter.toFixed(1)} µs, raw ${raw.toFixed(1)} µs, ratio ${(adapter / raw).toFixed(2)} (target at most 1.3)`);
}

/**
 * Runs the adapter's side and the raw side in alternating blocks (so that neither always runs on a
 * warmer machine) and returns the median time of one call of each, in microseconds.
 */
async function sideBySide(perBlock: number, blocks: number, adapterCall: () => Promise<void>, rawCall: () => Promise<void>): Promise<{ adapter: number; raw: number }> {
  const adapterBlocks: number[] = [];
  const rawBlocks: number[] = [];
  const block = async (call: () => Promise<void>, into: number[]): Promise<void> => {
    into.push(
      await timed(async () => {
        for (let i = 0; i < perBlock; i++) await call();
      }),
    );
  };
  for (let round = 0; round < blocks; round++) {
    if (round % 2 === 0) {
      await block(adapterCall, adapterBlocks);
      await block(rawCall, rawBlocks);
    } else {
      await block(rawCall, rawBlocks);
      await block(adapterCall, adapterBlocks);
    }
  }
  return { adapter: (median(adapterBlocks) / perBlock) * 1000, raw: (median(rawBlocks) / perBlock) * 1000 };
}

function memberState(workerId: string, held: number): MemberState {
  return { format: RECORD_FORMAT, incarnation: `${workerId}-0f8c2a51`, leaseDurationMs: 10_000, status: 'alive', held, changes: 0, requests: [], metadata: {} };
}

/** The heartbeat's compare-and-set, and nothing else: no token, no conflict reply, no checks of the counter. */
const RAW_HEARTBEAT = `
local stored = redis.call('HMGET', KEYS[1], '', ARGV[1])
if stored[2] and string.match(stored[2], '^(%d+):') == ARGV[2] then
  local version = string.format('%d', tonumber(stored[1]) + 1)
  redis.call('HSET', KEYS[1], '', version, ARGV[1], version .. ':' .. ARGV[3])
  return version
end
return false
`;

async function heartbeatVersusRaw(client: Redis, storage: RedisStorage): Promise<void> {
  const group = `bench-heartbeat-${randomUUID()}`;
  for (let i = 0; i < 20; i++) applied<MemberRecord>(await storage.putMember(group, `worker-${i}`, null, memberState(`worker-${i}`, 5)));
  let member = applied<MemberRecord>(await storage.putMember(group, 'worker-bench', null, memberState('worker-bench', 5)));
  const rawKey = `${keyPrefix}{raw}:roster`;
  const body = JSON.stringify(memberState('worker-bench', 5));
  await client.hset(rawKey, '', '1', 'worker-bench', `1:${body}`);
  const sha = (await client.script('LOAD', RAW_HEARTBEAT)) as string;
  let rawVersion = 1;
  const { adapter, raw } = await sideBySide(
    500,
    31,
    async () => {
      member = applied<MemberRecord>(await storage.putMember(group, 'worker-bench', member.version, memberState('worker-bench', 5)));
    },
    async () => {
      const reply = await client.evalsha(sha, 1, rawKey, 'worker-bench', String(rawVersion), body);
      if (reply === null) throw new Error('raw heartbeat did not apply');
      rawVersion = Number(reply);
    },
  );
  console.log('One heartbeat: putMember vs raw EVALSHA of a minimal member compare-and-set');
  console.log(`  adapter ${adapter.toFixed(1)} µs, raw ${raw.toFixed(1)} µs, ratio ${(adapter / raw).toFixed(2)}`);
}

async function rosterVersusRaw(client: Redis, storage: RedisStorage): Promise<void> {
  const group = `bench-roster-${randomUUID()}`;
  await Promise.all(Array.from({ length: 100 }, (_, i) => storage.putMember(group, `worker-${String(i).padStart(3, '0')}`, null, memberState(`worker-${i}`, 12)).then(applied<MemberRecord>)));
  const key = groupKeys(keyPrefix, group).roster;
  const { adapter, raw } = await sideBySide(
    200,
    31,
    async () => {
      const roster = await storage.getRoster(group);
      if (roster.members.length !== 100) throw new Error(`a roster of ${roster.members.length} members`);
    },
    async () => {
      const fields = await client.hgetall(key);
      if (Object.keys(fields).length !== 101) throw new Error('a raw roster of the wrong size');
    },
  );
  console.log('Reading a roster of 100 members: getRoster vs raw HGETALL');
  console.log(`  adapter ${adapter.toFixed(1)} µs, raw ${raw.toFixed(1)} µs, ratio ${(adapter / raw).toFixed(2)}`);
}

/** A TCP proxy to Redis that counts the bytes each way, so that a call's cost on the wire can be read off. */
class CountingProxy {
  sent = 0;
  received = 0;
  readonly #server: Server;

  private constructor(server: Server) {
    this.#server = server;
  }

  static async start(port: number): Promise<CountingProxy> {
    const server = createServer();
    const proxy = new CountingProxy(server);
    server.on('connection', (client) => {
      const upstream = createConnection({ host: '127.0.0.1', port });
      client.on('data', (chunk: Buffer) => (proxy.sent += chunk.length));
      upstream.on('data', (chunk: Buffer) => (proxy.received += chunk.length));
      client.pipe(upstream).pipe(client);
      client.on('error', () => upstream.destroy());
      upstream.on('error', () => client.destroy());
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    return proxy;
  }

  get port(): number {
    return (this.#server.address() as AddressInfo).port;
  }

  /** The bytes sent and received while `run` ran. */
  async measure(run: () => Promise<unknown>): Promise<{ sent: number; received: number }> {
    const [sent, received] = [this.sent, this.received];
    await run();
    return { sent: this.sent - sent, received: this.received - received };
  }

  close(): Promise<void> {
    return new Promise((resolve) => this.#server.close(() => resolve()));
  }
}

/** A worker id as hosts name them (host name, pid, random suffix): 54 bytes. */
function typicalWorkerId(i: number): string {
  return `ip-10-0-${String(i % 250).padStart(3, '0')}-17.eu-west-1.compute.internal-${String(40000 + i)}-a1b2c3`;
}

/** A member of `bytes` bytes of state as JSON (`encodeMemberState`), padded through its metadata. */
function memberOfSize(workerId: string, bytes: number): MemberState {
  const base = memberState(workerId, 100);
  const padding = bytes - encodeMemberState({ ...base, metadata: { padding: '' } }).length;
  return { ...base, metadata: { padding: 'p'.repeat(padding) } };
}

async function bytesOnTheWire(): Promise<void> {
  const proxy = await CountingProxy.start(6379);
  const through = new Redis({ host: '127.0.0.1', port: proxy.port, maxRetriesPerRequest: 1 });
  const storage = new RedisStorage({ client: through, keyPrefix });
  console.log('Bytes on the wire (counted by a proxy): a heartbeat, and a roster read, at 10, 100 and 1,000 members');
  try {
    const typical = encodeMemberState(memberState(typicalWorkerId(0), 100)).length;
    for (const [what, state] of [
      [`typical member (${typical} bytes of state)`, (workerId: string) => memberState(workerId, 100)],
      [`largest member (${limits.maxMemberBytes} bytes of state)`, (workerId: string) => memberOfSize(workerId, limits.maxMemberBytes)],
    ] as const) {
      for (const size of [10, 100, 1000]) {
        const group = `bench-bytes-${size}-${randomUUID()}`;
        const ids = Array.from({ length: size }, (_, i) => typicalWorkerId(i));
        const joined = new Map<string, MemberRecord>();
        for (let start = 0; start < size; start += 100) {
          await Promise.all(ids.slice(start, start + 100).map(async (workerId) => joined.set(workerId, applied<MemberRecord>(await storage.putMember(group, workerId, null, state(workerId))))));
        }
        // Once before measuring, so that the script is loaded (EVALSHA, not EVAL) on this connection.
        await storage.getRoster(group);
        const beating = ids[size - 1] as string;
        let member = joined.get(beating) as MemberRecord;
        member = applied<MemberRecord>(await storage.putMember(group, beating, member.version, state(beating)));
        const beat = await proxy.measure(async () => {
          member = applied<MemberRecord>(await storage.putMember(group, beating, member.version, state(beating)));
        });
        const stored = await client.hstrlen(groupKeys(keyPrefix, group).roster, beating);
        const read = await proxy.measure(() => storage.getRoster(group));
        const times: number[] = [];
        for (let i = 0; i < (size >= 1000 ? 21 : 101); i++) times.push(await timed(() => storage.getRoster(group)));
        // What a watcher reads each tick instead: three members by id, and the digest (each warmed first).
        const watched = ids.slice(0, 3);
        await storage.getMembers(group, watched);
        await storage.advanceRosterDigest(group);
        await storage.getRosterDigest(group);
        const few = await proxy.measure(() => storage.getMembers(group, watched));
        const digest = await proxy.measure(() => storage.getRosterDigest(group));
        const advance = await proxy.measure(() => storage.advanceRosterDigest(group));
        console.log(
          `  ${what}, ${String(size).padStart(5)} members: heartbeat sends ${beat.sent} bytes (stores a ${Buffer.byteLength(beating)}-byte field of ${stored} bytes and the counter), gets ${beat.received} back; getRoster sends ${read.sent}, reads ${read.received} bytes, median ${median(times).toFixed(2)} ms; ` +
            `getMembers of 3 sends ${few.sent}, reads ${few.received} bytes; getRosterDigest sends ${digest.sent}, reads ${digest.received}; advanceRosterDigest sends ${advance.sent}, reads ${advance.received}`,
        );
      }
    }
  } finally {
    await storage.close();
    through.disconnect();
    await proxy.close();
  }
}

async function cleanUp(client: Redis): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await client.scan(cursor, 'MATCH', `${keyPrefix}*`, 'COUNT', 1000);
    if (keys.length > 0) await client.unlink(...keys);
    cursor = next;
  } while (cursor !== '0');
}

const client = new Redis({ host: '127.0.0.1', port: 6379, maxRetriesPerRequest: 1 });
try {
  await client.ping();
} catch (error) {
  client.disconnect();
  throw new Error('the benchmark needs Redis on 127.0.0.1:6379; start it with: redis-server --port 6379 --save "" --appendonly no', { cause: error });
}
const storage = new RedisStorage({ client, keyPrefix });
try {
  await adapterVersusRaw(client, storage);
  await heartbeatVersusRaw(client, storage);
  await rosterVersusRaw(client, storage);
  await bytesOnTheWire();
  await batchVersusSingles(storage);
} finally {
  await cleanUp(client);
  await storage.close();
  await client.quit();
}
