import { Consumer, MemorySource, type Storage } from '@leasehold/core';
import { REWIND_FIELDS, rewindRequestOf } from '@leasehold/core/adapter';
import { describe, expect, it } from 'vitest';
import { dynamoBackend, freshName, heartbeater, join, leasehold, postgresBackend, redisBackend, seed, sharedBackends, type TestBackend } from './support.js';

const shared = sharedBackends();

/** A worker of the group in this process, reading a stream in memory: it applies the requests for its shards. */
async function liveWorker(storage: Storage, group: string) {
  const source = new MemorySource(2, { batchSize: 5 });
  const seen: string[] = [];
  const consumer = new Consumer({
    group,
    source,
    storage,
    workerId: 'live-worker',
    initialPosition: 'TRIM_HORIZON',
    shardSyncIntervalMs: 500,
    lease: { leaseDurationMs: 2_000, takeIntervalMs: 200 },
    processBatch: (records) => {
      for (const record of records) seen.push(new TextDecoder().decode(record.data));
    },
  });
  await consumer.start();
  for (let i = 1; i <= 20; i++) source.put(`key-${i % 4}`, `record-${i}`);
  const until = async (condition: () => boolean, what: string): Promise<void> => {
    const deadline = Date.now() + 20_000;
    while (!condition()) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  };
  await until(() => seen.length >= 20 && consumer.shards.length === 2, 'the worker to read every record');
  return { consumer, seen, until };
}

describe('leasehold rewind', () => {
  it('a dry run prints what moves, from where to where and how, and writes nothing', async () => {
    const backend = await postgresBackend(shared.pool);
    const group = freshName('orders');
    await join(backend.storage, group, 'worker-a', { leaseDurationMs: 60_000 });
    await seed(backend.storage, [
      { group, leaseKey: 'shardId-000', checkpoint: '900' },
      { group, leaseKey: 'shardId-001', checkpoint: '120', owner: 'worker-a', incarnation: 'worker-a-inc', epoch: 2 },
      { group, leaseKey: 'shardId-002', checkpoint: 'TRIM_HORIZON' },
    ]);

    const { code, stdout } = await leasehold('rewind', '--storage', backend.url, '--group', group, '--to', 'trim-horizon');

    expect(code).toBe(0);
    expect(stdout).toBe(
      [
        `rewind of group "${group}" to trim-horizon (TRIM_HORIZON): 2 shards move`,
        'SHARD        OWNER     FROM  TO            HOW',
        'shardId-000  -         900   TRIM_HORIZON  direct (nobody holds it)',
        'shardId-001  worker-a  120   TRIM_HORIZON  request (its owner applies it)',
        'unchanged: shardId-002: already at TRIM_HORIZON, and nobody holds it',
        'dry run: nothing was written; pass --apply to rewind',
        '',
      ].join('\n'),
    );
    expect((await backend.storage.getLease(group, 'shardId-000'))?.checkpoint).toBe('900');
    expect((await backend.storage.getLease(group, 'shardId-001'))?.metadata).toEqual({});
    await backend.close();
  });

  it('--apply moves the leases nobody holds at once, marks the leader record, and exits 0 once every shard moved', async () => {
    const backend = redisBackend(shared.redis);
    const group = freshName('orders');
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000', checkpoint: '900' }, { group, leaseKey: 'shardId-001', checkpoint: '950' }], { group, holder: null, term: 1 });

    const { code, stdout } = await leasehold('rewind', '--storage', backend.url, '--group', group, '--to', '2024-05-01T10:00:00Z', '--apply');

    expect(code).toBe(0);
    const at = 'AT_TIMESTAMP:1714557600000';
    expect(stdout).toContain(`rewind of group "${group}" to 2024-05-01T10:00:00.000Z (${at}): 2 shards move\n`);
    expect(stdout).toMatch(/rewind \S+ written \(marked on the leader record\); waiting up to 2m00s for every shard to move\n/);
    expect(stdout).toMatch(/2\/2 moved after \S+: shardId-000 \(direct, \S+\), shardId-001 \(direct, \S+\)\n/);
    expect(stdout).toMatch(/every shard moved in \S+\n$/);
    for (const key of ['shardId-000', 'shardId-001']) {
      const lease = await backend.storage.getLease(group, key);
      expect(lease?.checkpoint).toBe(at);
      expect(lease?.metadata[REWIND_FIELDS.rewound]).toBeDefined();
    }
    expect((await backend.storage.getLeader(group))?.metadata['leasehold.rewind']).toBe((await backend.storage.getLease(group, 'shardId-000'))?.metadata[REWIND_FIELDS.rewound]);
    await backend.close();
  });

  const live: Array<[string, () => Promise<TestBackend>]> = [
    ['postgres (its change feed brings the request)', () => postgresBackend(shared.pool)],
    ['dynamodb (no change feed: the worker sees the mark on the leader record)', () => dynamoBackend(shared.dynamodb)],
  ];
  for (const [name, open] of live) {
    it(`--apply on a live group on ${name}: the worker applies the request for each of its shards and reads them again, and the command waits for it`, async () => {
      const backend = await open();
      const group = freshName('orders');
      const { consumer, seen, until } = await liveWorker(backend.storage, group);
      try {
        const { code, stdout, stderr } = await leasehold('rewind', '--storage', backend.url, '--group', group, '--to', 'trim-horizon', '--apply', '--timeout-ms', '30000');
        expect(stderr).toBe('');
        expect(code).toBe(0);
        expect(stdout).toContain('shard-0000  live-worker');
        expect(stdout).toMatch(/2\/2 moved after/);
        // Every record is handed over a second time.
        await until(() => seen.length >= 40, 'the records to be read again');
        expect([...seen.slice(20)].sort()).toEqual([...seen.slice(0, 20)].sort());
      } finally {
        await consumer.stop();
        await backend.close();
      }
    });
  }

  it('with --apply, exits 1 naming the shards not moved in time when their owner does not apply its request, which stays', async () => {
    const backend = await dynamoBackend(shared.dynamodb);
    const group = freshName('orders');
    await seed(backend.storage, [
      { group, leaseKey: 'shardId-000', checkpoint: '900', owner: 'stuck-worker', incarnation: 'stuck-worker-inc', epoch: 1 },
      { group, leaseKey: 'shardId-001', checkpoint: '300' },
    ]);
    const worker = heartbeater(backend.storage, group, 'stuck-worker');

    const { code, stdout, stderr } = await leasehold('rewind', '--storage', backend.url, '--group', group, '--to', 'trim-horizon', '--apply', '--timeout-ms', '1500');
    await worker.stop();

    expect(code).toBe(1);
    expect(stdout).toContain('the group has no leader record to mark');
    expect(stdout).toMatch(/1\/2 moved after \S+: shardId-001 \(direct, \S+\)\n/);
    expect(stderr).toMatch(/^leasehold: \[cli\] rewind \S+ of group "[^"]+" not done after 1\.5s: 1 of 2 shards have not moved yet \("shardId-000"\); their requests stay, and each is applied when its owner sees it \(see leasehold status\)\n$/);
    const held = await backend.storage.getLease(group, 'shardId-000');
    expect(held?.checkpoint).toBe('900');
    expect(rewindRequestOf(held!)?.to).toBe('TRIM_HORIZON');
  });

  it('--stream selects the leases of that stream only, not those of a stream whose id starts with it, and refuses a shard of another stream', async () => {
    const backend = redisBackend(shared.redis);
    const group = freshName('orders');
    await seed(backend.storage, [
      { group, leaseKey: 'orders:shardId-000', checkpoint: '900' },
      { group, leaseKey: 'orders:eu:shardId-000', checkpoint: '950' },
    ]);

    const { code, stdout } = await leasehold('rewind', '--storage', backend.url, '--group', group, '--to', 'trim-horizon', '--stream', 'orders', '--json');
    expect(code).toBe(0);
    expect((JSON.parse(stdout) as { plan: { selected: string[] } }).plan.selected).toEqual(['orders:shardId-000']);

    for (const shard of ['orders:eu:shardId-000', 'eu:shardId-000']) {
      const refused = await leasehold('rewind', '--storage', backend.url, '--group', group, '--to', 'trim-horizon', '--stream', 'orders', '--shard', shard, '--apply');
      expect({ shard, code: refused.code, stderr: refused.stderr }).toEqual({
        shard,
        code: 2,
        stderr: 'leasehold: [core] lease "orders:eu:shardId-000" is not a lease of stream "orders" (it is a lease of stream "orders:eu")\n',
      });
    }
    expect((await backend.storage.getLease(group, 'orders:eu:shardId-000'))?.checkpoint).toBe('950');
    await backend.close();
  });

  it('refuses a bad time, a sequence number without exactly one shard, an unknown shard and a negative timeout with exit 2, naming the value', async () => {
    const backend = redisBackend(shared.redis);
    const group = freshName('orders');
    await seed(backend.storage, [{ group, leaseKey: 'shardId-000', checkpoint: '900' }, { group, leaseKey: 'shardId-001', checkpoint: '950' }]);
    const cases: Array<[string[], string]> = [
      [['--to', '2024-13-01T00:00:00Z'], 'leasehold: [core] rewind time "2024-13-01T00:00:00Z" is not a valid ISO time: no such day\n'],
      [['--to', '4242'], 'leasehold: [core] a rewind to position "4242" names a place in one shard: select exactly one lease, not every lease\n'],
      [['--to', 'trim-horizon', '--shard', 'shardId-009'], `leasehold: [core] group "${group}" has no lease "shardId-009"\n`],
      [['--to', 'trim-horizon', '--apply', '--timeout-ms=-5'], 'leasehold: [cli] --timeout-ms must be a whole number of at least 0, got "-5"\n'],
    ];
    for (const [args, message] of cases) {
      const { code, stderr } = await leasehold('rewind', '--storage', backend.url, '--group', group, ...args);
      expect({ args, code, stderr }).toEqual({ args, code: 2, stderr: message });
    }
    expect((await backend.storage.getLease(group, 'shardId-000'))?.checkpoint).toBe('900');
    await backend.close();
  });
});
