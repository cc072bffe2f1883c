/**
 * The adapter conformance suite. Any storage adapter, in any repository, proves it keeps the contract of
 * `storage.ts` by running this against its real backend:
 *
 * ```ts
 * import { describe, it } from 'vitest';
 * import { runConformanceSuite } from '@leasehold/core/testing';
 * runConformanceSuite({ describe, it }, { name: 'my-store', createStorage: async () => new MyStorage(...) });
 * ```
 *
 * Each test works in a fresh, random group, so tests never depend on each other's cleanup and a failed
 * test leaves its records behind to be read.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { limits } from '../limits.js';
import { RECORD_FORMAT } from '../storage.js';
import type {
  LeaderRecord,
  LeaseChange,
  LeaseRecord,
  LeaseState,
  LeaseUpdate,
  Storage,
  WriteResult,
} from '../storage.js';

/** The test functions of the caller's runner (vitest, jest, mocha, node:test all fit). */
export interface TestApi {
  describe(name: string, fn: () => void): void;
  it(name: string, fn: () => Promise<void>, timeoutMs?: number): void;
}

/** What the suite tests, and how to reach it. */
export interface ConformanceTarget {
  /** The adapter's name, shown in test titles. */
  name: string;
  /** Returns a new client of the same backend on every call: concurrency tests make one per racing worker. */
  createStorage: () => Promise<Storage>;
  /** Closes a client that `createStorage` returned. */
  closeStorage?: (storage: Storage) => Promise<void>;
  /** Whether the adapter implements `subscribe` (a change feed); if so, the feed is tested too. */
  changeFeed?: boolean;
  /** Per-test timeout in milliseconds. Default 60,000. */
  timeoutMs?: number;
}

type Body = (clients: (count: number) => Promise<Storage[]>, group: () => string) => Promise<void>;

function define(t: TestApi, target: ConformanceTarget, title: string, body: Body): void {
  t.it(
    title,
    async () => {
      const opened: Storage[] = [];
      const clients = async (count: number): Promise<Storage[]> => {
        const made = await Promise.all(Array.from({ length: count }, () => target.createStorage()));
        opened.push(...made);
        return made;
      };
      const group = (): string => `conformance-${randomUUID().slice(0, 13)}`;
      try {
        await body(clients, group);
      } finally {
        const close = target.closeStorage;
        if (close) await Promise.all(opened.map((storage) => close(storage)));
      }
    },
    target.timeoutMs ?? 60_000,
  );
}

function applied<T>(outcome: WriteResult<T>, what: string): T {
  if (outcome.status !== 'applied') {
    assert.fail(`${what}: expected applied, got ${outcome.status} ${JSON.stringify(outcome)}`);
  }
  return outcome.record;
}

function conflict<T>(outcome: WriteResult<T> | { readonly status: 'applied' }, what: string): T | null {
  if (outcome.status !== 'conflict') {
    assert.fail(`${what}: expected conflict, got ${outcome.status} ${JSON.stringify(outcome)}`);
  }
  return outcome.current;
}

function stateOf(record: LeaseRecord): LeaseState {
  return {
    format: record.format,
    owner: record.owner,
    epoch: record.epoch,
    checkpoint: record.checkpoint,
    parentKeys: [...record.parentKeys],
    pendingOwner: record.pendingOwner,
    metadata: { ...record.metadata },
  };
}

function plain<T>(value: T): T {
  return JSON.parse(JSON.stringify(value)) as T;
}

function byKey(leases: readonly LeaseRecord[]): Map<string, LeaseRecord> {
  return new Map(leases.map((lease) => [lease.leaseKey, lease]));
}

async function createMany(storage: Storage, group: string, keys: readonly string[], state: Partial<LeaseState> = {}): Promise<void> {
  const chunk = 100;
  for (let start = 0; start < keys.length; start += chunk) {
    await Promise.all(
      keys.slice(start, start + chunk).map(async (leaseKey) => {
        applied(await storage.createLease({ group, leaseKey, ...state }), `create ${leaseKey}`);
      }),
    );
  }
}

const full: LeaseState = {
  format: RECORD_FORMAT,
  owner: 'worker-ü-1',
  epoch: 7,
  checkpoint: '49590338271490256608559692538361571095921575989136588898:3',
  parentKeys: ['shardId-000000000001', 'shardId-000000000002'],
  pendingOwner: 'worker-2 "quoted"',
  metadata: { 'leasehold.note': 'línea\nnext', empty: '', 'with space': '{"json":true}' },
};

/** Every operation of `CheckpointStorage`, its applied and conflict paths, and round-tripping. */
export function leaseContract(t: TestApi, target: ConformanceTarget): void {
  t.describe(`${target.name}: lease contract`, () => {
    define(t, target, 'an unknown group lists no leases and an unknown key reads as null', async (clients, group) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      assert.deepEqual((await storage.listLeases(g)).leases, []);
      assert.equal(await storage.getLease(g, 'missing'), null);
    });

    define(t, target, 'a created lease reads back exactly, with a positive version and defaults for omitted fields', async (clients, group) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const created = applied(await storage.createLease({ group: g, leaseKey: 'plain' }), 'create');
      assert.equal(created.group, g);
      assert.equal(created.leaseKey, 'plain');
      assert.ok(Number.isSafeInteger(created.version) && created.version >= 1, `version ${created.version}`);
      assert.deepEqual(stateOf(created), {
        format: RECORD_FORMAT,
        owner: null,
        epoch: 0,
        checkpoint: null,
        parentKeys: [],
        pendingOwner: null,
        metadata: {},
      });
      assert.deepEqual(plain(await storage.getLease(g, 'plain')), plain(created));
      assert.deepEqual(plain((await storage.listLeases(g)).leases), [plain(created)]);
    });

    define(t, target, 'every field round-trips through create, update, get and list, including invented metadata keys', async (clients, group) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const invented = `x-${randomUUID()}`;
      const state: LeaseState = { ...full, metadata: { ...full.metadata, [invented]: randomUUID() } };
      const created = applied(await storage.createLease({ group: g, leaseKey: 'shard/ü:{1}', ...state }), 'create');
      assert.deepEqual(stateOf(created), plain(state));
      const next: LeaseState = {
        format: RECORD_FORMAT,
        owner: null,
        epoch: 8,
        checkpoint: 'SHARD_END',
        parentKeys: ['b', 'a'],
        pendingOwner: null,
        metadata: { [invented]: 'changed', [`y-${randomUUID()}`]: '✓' },
      };
      const updated = applied(
        (await storage.updateLeases(g, [{ leaseKey: 'shard/ü:{1}', expectedVersion: created.version, next }]))[0] as WriteResult<LeaseRecord>,
        'update',
      );
      assert.equal(updated.version, created.version + 1);
      assert.deepEqual(stateOf(updated), plain(next));
      assert.deepEqual(plain(await storage.getLease(g, 'shard/ü:{1}')), plain(updated));
      assert.deepEqual(plain((await storage.listLeases(g)).leases), [plain(updated)]);
    });

    define(t, target, 'creating a lease that exists is a conflict carrying the current lease, and changes nothing', async (clients, group) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const first = applied(await storage.createLease({ group: g, leaseKey: 'k', owner: 'a', epoch: 1 }), 'first create');
      const current = conflict(await storage.createLease({ group: g, leaseKey: 'k', owner: 'b', epoch: 9 }), 'second create');
      assert.deepEqual(plain(current), plain(first));
      assert.deepEqual(plain(await storage.getLease(g, 'k')), plain(first));
    });

    define(t, target, 'an update at the stored version applies and increments the version by one', async (clients, group) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const created = applied(await storage.createLease({ group: g, leaseKey: 'k' }), 'create');
      const next = { ...stateOf(created), owner: 'w1', epoch: 1 };
      const [outcome] = await storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: created.version, next }]);
      const record = applied(outcome as WriteResult<LeaseRecord>, 'update');
      assert.equal(record.version, created.version + 1);
      assert.equal(record.owner, 'w1');
    });

    define(t, target, 'an update at a stale version is a conflict carrying the current lease, and changes nothing', async (clients, group) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const created = applied(await storage.createLease({ group: g, leaseKey: 'k' }), 'create');
      const moved = applied(
        (await storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: created.version, next: { ...stateOf(created), owner: 'w1', epoch: 1 } }]))[0] as WriteResult<LeaseRecord>,
        'first update',
      );
      for (const stale of [created.version, moved.version + 1, 0]) {
        const [outcome] = await storage.updateLeases(g, [
          { leaseKey: 'k', expectedVersion: stale, next: { ...stateOf(created), owner: 'thief', epoch: 2 } },
        ]);
        assert.deepEqual(plain(conflict(outcome as WriteResult<LeaseRecord>, `update at version ${stale}`)), plain(moved));
      }
      assert.deepEqual(plain(await storage.getLease(g, 'k')), plain(moved));
    });

    define(t, target, 'an update of a missing lease is a conflict with no current lease, and creates nothing', async (clients, group) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const [outcome] = await storage.updateLeases(g, [
        { leaseKey: 'ghost', expectedVersion: 1, next: { ...full } },
      ]);
      assert.equal(conflict(outcome as WriteResult<LeaseRecord>, 'update of missing'), null);
      assert.equal(await storage.getLease(g, 'ghost'), null);
      assert.deepEqual((await storage.listLeases(g)).leases, []);
    });

    define(t, target, 'a batch update returns one exact result per lease, in order, mixing applied and conflicts', async (clients, group) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const keys = Array.from({ length: 50 }, (_, i) => `k${String(i).padStart(3, '0')}`);
      await createMany(storage, g, keys);
      const before = byKey((await storage.listLeases(g)).leases);
      const updates: LeaseUpdate[] = [...keys].reverse().map((leaseKey, i) => {
        const current = before.get(leaseKey) as LeaseRecord;
        return {
          leaseKey,
          expectedVersion: i % 3 === 0 ? current.version + 5 : current.version,
          next: { ...stateOf(current), owner: `w${i}`, epoch: current.epoch + 1 },
        };
      });
      updates.push({ leaseKey: 'missing', expectedVersion: 1, next: { ...full } });
      const results = await storage.updateLeases(g, updates);
      assert.equal(results.length, updates.length);
      const after = byKey((await storage.listLeases(g)).leases);
      updates.forEach((update, i) => {
        const outcome = results[i] as WriteResult<LeaseRecord>;
        if (update.leaseKey === 'missing') {
          assert.equal(conflict(outcome, 'missing'), null);
        } else if (i % 3 === 0) {
          assert.deepEqual(plain(conflict(outcome, update.leaseKey)), plain(before.get(update.leaseKey)));
          assert.equal(after.get(update.leaseKey)?.owner, null);
        } else {
          const record = applied(outcome, update.leaseKey);
          assert.equal(record.leaseKey, update.leaseKey);
          assert.equal(record.owner, `w${i}`);
          assert.deepEqual(plain(after.get(update.leaseKey)), plain(record));
        }
      });
    });

    define(t, target, 'an empty batch update returns no results', async (clients, group) => {
      const [storage] = (await clients(1)) as [Storage];
      assert.deepEqual(await storage.updateLeases(group(), []), []);
    });

    define(t, target, 'a delete at the stored version removes the lease; at a stale version it is a conflict', async (clients, group) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const created = applied(await storage.createLease({ group: g, leaseKey: 'k', owner: 'w' }), 'create');
      assert.deepEqual(plain(conflict(await storage.deleteLease(g, 'k', created.version + 1), 'stale delete')), plain(created));
      assert.deepEqual(plain(await storage.getLease(g, 'k')), plain(created));
      assert.equal((await storage.deleteLease(g, 'k', created.version)).status, 'applied');
      assert.equal(await storage.getLease(g, 'k'), null);
      assert.deepEqual((await storage.listLeases(g)).leases, []);
      assert.equal(conflict(await storage.deleteLease(g, 'k', created.version), 'delete of deleted'), null);
      const [update] = await storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: created.version, next: stateOf(created) }]);
      assert.equal(conflict(update as WriteResult<LeaseRecord>, 'update of deleted'), null);
    });

    define(t, target, 'groups side by side never see each other, even when one name is a prefix of another', async (clients, group) => {
      const [storage] = (await clients(1)) as [Storage];
      const base = group();
      const groups = [base, `${base}:1`, `${base}{x}`, `${base} 2`, `${base}/ü`];
      for (const [i, g] of groups.entries()) {
        await createMany(storage, g, ['shared', `only-${i}`], { owner: `owner-of-${i}`, epoch: i });
        applied(await storage.createLeader({ group: g, holder: `leader-${i}`, term: i }), `leader ${i}`);
      }
      const first = await storage.getLease(base, 'shared');
      applied(
        (await storage.updateLeases(base, [{ leaseKey: 'shared', expectedVersion: (first as LeaseRecord).version, next: { ...stateOf(first as LeaseRecord), checkpoint: '42' } }]))[0] as WriteResult<LeaseRecord>,
        'update in base group',
      );
      for (const [i, g] of groups.entries()) {
        const leases = (await storage.listLeases(g)).leases;
        assert.deepEqual(leases.map((lease) => lease.leaseKey).sort(), ['only-' + i, 'shared'].sort());
        for (const lease of leases) {
          assert.equal(lease.group, g);
          assert.equal(lease.owner, `owner-of-${i}`);
          assert.equal(lease.checkpoint, i === 0 && lease.leaseKey === 'shared' ? '42' : null);
        }
        assert.equal((await storage.getLeader(g))?.holder, `leader-${i}`);
      }
    });

    define(t, target, `a group of 2,500 leases lists completely`, async (clients, group) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const keys = Array.from({ length: 2500 }, (_, i) => `shardId-${String(i).padStart(12, '0')}`);
      await createMany(storage, g, keys, { metadata: { padding: 'p'.repeat(200) } });
      const listed = (await storage.listLeases(g)).leases;
      assert.equal(listed.length, keys.length);
      assert.deepEqual(listed.map((lease) => lease.leaseKey).sort(), keys);
    });

    define(t, target, 'a batch update of 1,000 leases applies to every one', async (clients, group) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const keys = Array.from({ length: 1000 }, (_, i) => `lease-${i}`);
      await createMany(storage, g, keys);
      const leases = (await storage.listLeases(g)).leases;
      const results = await storage.updateLeases(
        g,
        leases.map((lease) => ({ leaseKey: lease.leaseKey, expectedVersion: lease.version, next: { ...stateOf(lease), owner: 'renewer', epoch: 1 } })),
      );
      results.forEach((outcome, i) => applied(outcome, `lease ${i}`));
      assert.ok(((await storage.listLeases(g)).leases).every((lease) => lease.owner === 'renewer'));
    });
  });
}

/** Every operation of `LeaderStore`. */
export function leaderContract(t: TestApi, target: ConformanceTarget): void {
  t.describe(`${target.name}: leader contract`, () => {
    define(t, target, 'a group with no leader record reads as null', async (clients, group) => {
      const [storage] = (await clients(1)) as [Storage];
      assert.equal(await storage.getLeader(group()), null);
    });

    define(t, target, 'a created leader record reads back exactly; a second create is a conflict carrying it', async (clients, group) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const invented = `x-${randomUUID()}`;
      const created = applied(await storage.createLeader({ group: g, holder: 'w1', term: 3, metadata: { [invented]: 'v', note: 'ü\n' } }), 'create');
      assert.equal(created.group, g);
      assert.ok(created.version >= 1);
      assert.deepEqual(
        { format: RECORD_FORMAT, holder: created.holder, term: created.term, metadata: created.metadata },
        { format: RECORD_FORMAT, holder: 'w1', term: 3, metadata: { [invented]: 'v', note: 'ü\n' } },
      );
      assert.deepEqual(plain(await storage.getLeader(g)), plain(created));
      assert.deepEqual(plain(conflict(await storage.createLeader({ group: g, holder: 'w2', term: 9 }), 'second create')), plain(created));
      assert.deepEqual(plain(await storage.getLeader(g)), plain(created));
    });

    define(t, target, 'a created leader record without fields has no holder, term 0 and empty metadata', async (clients, group) => {
      const [storage] = (await clients(1)) as [Storage];
      const created = applied(await storage.createLeader({ group: group() }), 'create');
      assert.deepEqual({ format: RECORD_FORMAT, holder: created.holder, term: created.term, metadata: created.metadata }, { format: RECORD_FORMAT, holder: null, term: 0, metadata: {} });
    });

    define(t, target, 'a leader update at the stored version applies; at a stale version or for no record it is a conflict', async (clients, group) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const created = applied(await storage.createLeader({ group: g }), 'create');
      const next = { format: RECORD_FORMAT, holder: 'w1', term: 1, metadata: { k: 'v' } };
      const updated = applied(await storage.updateLeader(g, created.version, next), 'update');
      assert.equal(updated.version, created.version + 1);
      assert.deepEqual({ format: RECORD_FORMAT, holder: updated.holder, term: updated.term, metadata: updated.metadata }, next);
      assert.deepEqual(plain(conflict(await storage.updateLeader(g, created.version, { format: RECORD_FORMAT, holder: 'w2', term: 2, metadata: {} }), 'stale')), plain(updated));
      assert.deepEqual(plain(await storage.getLeader(g)), plain(updated));
      assert.equal(conflict(await storage.updateLeader(group(), 1, next), 'missing'), null);
    });

    define(t, target, 'the leader record is not a lease: it never lists, and a lease may have any key', async (clients, group) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      applied(await storage.createLeader({ group: g, holder: 'w1', term: 1 }), 'leader');
      for (const leaseKey of ['leader', '__leader__', '#leader', '$leader', '~leader']) {
        applied(await storage.createLease({ group: g, leaseKey }), `lease ${leaseKey}`);
      }
      assert.equal(((await storage.listLeases(g)).leases).length, 5);
      assert.equal((await storage.getLeader(g))?.holder, 'w1');
    });
  });
}

/** Real concurrent clients racing on one record: exactly one winner, no lost update. */
export function concurrencyContract(t: TestApi, target: ConformanceTarget): void {
  t.describe(`${target.name}: concurrency`, () => {
    define(t, target, '32 clients updating the same version: exactly one applies, the others see its write', async (clients, group) => {
      const racers = await clients(32);
      const g = group();
      const created = applied(await (racers[0] as Storage).createLease({ group: g, leaseKey: 'contested' }), 'create');
      const outcomes = await Promise.all(
        racers.map((storage, i) =>
          storage.updateLeases(g, [{ leaseKey: 'contested', expectedVersion: created.version, next: { ...stateOf(created), owner: `racer-${i}`, epoch: 1 } }]),
        ),
      );
      const flat = outcomes.map((batch) => batch[0] as WriteResult<LeaseRecord>);
      const winners = flat.filter((outcome) => outcome.status === 'applied');
      assert.equal(winners.length, 1, `applied: ${winners.length}`);
      const stored = (await (racers[0] as Storage).getLease(g, 'contested')) as LeaseRecord;
      assert.equal(stored.version, created.version + 1);
      assert.equal(stored.owner, (winners[0] as { record: LeaseRecord }).record.owner);
      for (const outcome of flat) {
        if (outcome.status === 'conflict') assert.equal(outcome.current?.owner, stored.owner);
        else assert.equal(outcome.status, 'applied');
      }
    });

    define(t, target, '32 clients creating the same lease: exactly one applies', async (clients, group) => {
      const racers = await clients(32);
      const g = group();
      const outcomes = await Promise.all(racers.map((storage, i) => storage.createLease({ group: g, leaseKey: 'new', owner: `racer-${i}`, epoch: 1 })));
      assert.equal(outcomes.filter((outcome) => outcome.status === 'applied').length, 1);
      assert.equal(outcomes.filter((outcome) => outcome.status === 'conflict').length, 31);
    });

    define(t, target, '32 clients electing themselves at once: exactly one leader record write applies', async (clients, group) => {
      const racers = await clients(32);
      const g = group();
      const creates = await Promise.all(racers.map((storage, i) => storage.createLeader({ group: g, holder: `racer-${i}`, term: 1 })));
      assert.equal(creates.filter((outcome) => outcome.status === 'applied').length, 1);
      const current = (await (racers[0] as Storage).getLeader(g)) as LeaderRecord;
      const updates = await Promise.all(racers.map((storage, i) => storage.updateLeader(g, current.version, { format: RECORD_FORMAT, holder: `next-${i}`, term: 2, metadata: {} })));
      assert.equal(updates.filter((outcome) => outcome.status === 'applied').length, 1);
    });

    define(t, target, '8 clients each making 125 conditional increments with re-read and retry lose no update', async (clients, group) => {
      const workers = await clients(8);
      const g = group();
      const created = applied(await (workers[0] as Storage).createLease({ group: g, leaseKey: 'counter', metadata: { count: '0' } }), 'create');
      await Promise.all(
        workers.map(async (storage) => {
          for (let done = 0; done < 125; ) {
            const current = (await storage.getLease(g, 'counter')) as LeaseRecord;
            const count = Number(current.metadata.count) + 1;
            const [outcome] = await storage.updateLeases(g, [
              { leaseKey: 'counter', expectedVersion: current.version, next: { ...stateOf(current), metadata: { count: String(count) } } },
            ]);
            if ((outcome as WriteResult<LeaseRecord>).status === 'applied') done++;
          }
        }),
      );
      const final = (await (workers[0] as Storage).getLease(g, 'counter')) as LeaseRecord;
      assert.equal(final.version, created.version + 1000);
      assert.equal(final.metadata.count, '1000');
    });

    define(t, target, 'two clients renewing overlapping batches: each lease applies exactly once', async (clients, group) => {
      const [a, b] = (await clients(2)) as [Storage, Storage];
      const g = group();
      const keys = Array.from({ length: 200 }, (_, i) => `k${i}`);
      await createMany(a, g, keys);
      const leases = (await a.listLeases(g)).leases;
      const batch = (owner: string): LeaseUpdate[] =>
        leases.map((lease) => ({ leaseKey: lease.leaseKey, expectedVersion: lease.version, next: { ...stateOf(lease), owner, epoch: 1 } }));
      const [fromA, fromB] = await Promise.all([a.updateLeases(g, batch('a')), b.updateLeases(g, batch('b'))]);
      const stored = byKey((await a.listLeases(g)).leases);
      keys.forEach((_, i) => {
        const key = leases[i]?.leaseKey as string;
        const wins = [fromA[i], fromB[i]].filter((outcome) => outcome?.status === 'applied');
        assert.equal(wins.length, 1, `lease ${key}`);
        const winner = fromA[i]?.status === 'applied' ? 'a' : 'b';
        assert.equal(stored.get(key)?.owner, winner);
      });
    });
  });
}

/** Epoch, term and version only grow: across release, take, and delete-then-recreate. */
export function monotonicityContract(t: TestApi, target: ConformanceTarget): void {
  t.describe(`${target.name}: monotonicity`, () => {
    define(t, target, 'the epoch written on take, release and take again reads back as written', async (clients, group) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      let lease = applied(await storage.createLease({ group: g, leaseKey: 'k' }), 'create');
      const steps: Array<Partial<LeaseState>> = [
        { owner: 'a', epoch: 1 },
        { owner: null, epoch: 1, checkpoint: '5' },
        { owner: 'b', epoch: 2 },
        { owner: 'b', epoch: 2, pendingOwner: 'c' },
        { owner: 'c', epoch: 3, pendingOwner: null },
      ];
      for (const step of steps) {
        const next = { ...stateOf(lease), ...step };
        lease = applied((await storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next }]))[0] as WriteResult<LeaseRecord>, JSON.stringify(step));
        assert.equal((await storage.getLease(g, 'k'))?.epoch, next.epoch);
      }
    });

    define(t, target, 'a lease deleted and created again gets a greater version and keeps its highest epoch', async (clients, group) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      let lease = applied(await storage.createLease({ group: g, leaseKey: 'k', owner: 'a', epoch: 4 }), 'create');
      lease = applied((await storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next: { ...stateOf(lease), owner: 'b', epoch: 5 } }]))[0] as WriteResult<LeaseRecord>, 'take');
      const old = lease;
      assert.equal((await storage.deleteLease(g, 'k', lease.version)).status, 'applied');
      const again = applied(await storage.createLease({ group: g, leaseKey: 'k' }, { recreate: true }), 'recreate');
      assert.ok(again.version > old.version, `version ${again.version} after ${old.version}`);
      assert.ok(again.epoch >= old.epoch, `epoch ${again.epoch} after ${old.epoch}`);
      const [stale] = await storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: old.version, next: { ...stateOf(old), owner: 'zombie' } }]);
      assert.equal((stale as WriteResult<LeaseRecord>).status, 'conflict', 'a writer holding the deleted version must not write the new lease');
      const higher = applied(await storage.createLease({ group: g, leaseKey: 'other', epoch: 3 }), 'other');
      assert.equal(higher.epoch, 3, 'a new key keeps the epoch it was created with');
    });

    define(t, target, 'a lease deleted and created again many times never repeats a version or lowers its epoch', async (clients, group) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      let highestVersion = 0;
      let highestEpoch = 0;
      for (let round = 0; round < 5; round++) {
        const lease = applied(await storage.createLease({ group: g, leaseKey: 'cycled', epoch: round % 2 === 0 ? 0 : highestEpoch + 1 }, { recreate: true }), `create ${round}`);
        assert.ok(lease.version > highestVersion && lease.epoch >= highestEpoch, JSON.stringify({ lease, highestVersion, highestEpoch }));
        highestVersion = lease.version;
        highestEpoch = lease.epoch;
        assert.equal((await storage.deleteLease(g, 'cycled', lease.version)).status, 'applied');
      }
    });

    define(t, target, 'the term written on each change of leader reads back as written', async (clients, group) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      let leader = applied(await storage.createLeader({ group: g, holder: 'a', term: 1 }), 'create');
      for (const [holder, term] of [['a', 1], [null, 1], ['b', 2], ['c', 3]] as const) {
        leader = applied(await storage.updateLeader(g, leader.version, { format: RECORD_FORMAT, holder, term, metadata: {} }), `${holder} ${term}`);
        assert.equal((await storage.getLeader(g))?.term, term);
      }
    });
  });
}

function assertInvalidInput(error: unknown, mentions: string): true {
  assert.ok(error instanceof Error, `expected an Error, got ${String(error)}`);
  const typed = error as Error & { code?: unknown };
  assert.equal(typed.code, 'ERR_INVALID_INPUT', `expected code ERR_INVALID_INPUT, got ${String(typed.code)}: ${typed.message}`);
  assert.equal(typed.name, 'InvalidInputError');
  assert.ok(typed.message.includes(mentions), `message ${JSON.stringify(typed.message)} should mention ${JSON.stringify(mentions)}`);
  return true;
}

/** Invalid input is refused with a typed error before anything is written. */
export function badInputContract(t: TestApi, target: ConformanceTarget): void {
  t.describe(`${target.name}: bad input`, () => {
    const longName = 'n'.repeat(limits.maxNameBytes + 1);
    const longUnicodeName = 'é'.repeat(limits.maxNameBytes / 2 + 1);
    const badNames: Array<[string, string, string]> = [
      ['an empty name', '', 'must not be empty'],
      ['a name over 512 bytes', longName, 'the limit is 512'],
      ['a name of 257 two-byte characters', longUnicodeName, 'the limit is 512'],
      ['a name with NUL', 'a\u0000b', 'NUL'],
    ];

    for (const [label, bad, mentions] of badNames) {
      define(t, target, `${label} as a group is refused by every operation`, async (clients) => {
        const [storage] = (await clients(1)) as [Storage];
        const check = (error: unknown): true => assertInvalidInput(error, mentions);
        await assert.rejects(storage.listLeases(bad), check);
        await assert.rejects(storage.getLease(bad, 'k'), check);
        await assert.rejects(storage.createLease({ group: bad, leaseKey: 'k' }), check);
        await assert.rejects(storage.updateLeases(bad, [{ leaseKey: 'k', expectedVersion: 1, next: full }]), check);
        await assert.rejects(storage.deleteLease(bad, 'k', 1), check);
        await assert.rejects(storage.getLeader(bad), check);
        await assert.rejects(storage.createLeader({ group: bad }), check);
        await assert.rejects(storage.updateLeader(bad, 1, { format: RECORD_FORMAT, holder: null, term: 0, metadata: {} }), check);
      });

      define(t, target, `${label} as a lease key is refused and nothing is written`, async (clients, group) => {
        const [storage] = (await clients(1)) as [Storage];
        const g = group();
        const check = (error: unknown): true => assertInvalidInput(error, mentions);
        const good = applied(await storage.createLease({ group: g, leaseKey: 'good' }), 'create');
        await assert.rejects(storage.getLease(g, bad), check);
        await assert.rejects(storage.createLease({ group: g, leaseKey: bad }), check);
        await assert.rejects(storage.deleteLease(g, bad, 1), check);
        await assert.rejects(
          storage.updateLeases(g, [
            { leaseKey: 'good', expectedVersion: good.version, next: { ...stateOf(good), owner: 'w' } },
            { leaseKey: bad, expectedVersion: 1, next: full },
          ]),
          check,
        );
        await assert.rejects(storage.createLease({ group: g, leaseKey: 'other', parentKeys: [bad] }), check);
        await assert.rejects(storage.createLease({ group: g, leaseKey: 'other', owner: bad }), check);
        assert.deepEqual(plain((await storage.listLeases(g)).leases), [plain(good)], 'one bad update refuses its whole batch');
      });
    }

    define(t, target, 'an oversize checkpoint is refused and nothing is written', async (clients, group) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const big = '9'.repeat(limits.maxCheckpointBytes + 1);
      const check = (error: unknown): true => assertInvalidInput(error, 'checkpoint');
      await assert.rejects(storage.createLease({ group: g, leaseKey: 'k', checkpoint: big }), check);
      const lease = applied(await storage.createLease({ group: g, leaseKey: 'k', checkpoint: '1' }), 'create');
      await assert.rejects(storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next: { ...stateOf(lease), checkpoint: big } }]), check);
      await assert.rejects(storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next: { ...stateOf(lease), checkpoint: '' } }]), check);
      assert.deepEqual(plain(await storage.getLease(g, 'k')), plain(lease));
      const exact = applied(
        (await storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next: { ...stateOf(lease), checkpoint: '9'.repeat(limits.maxCheckpointBytes) } }]))[0] as WriteResult<LeaseRecord>,
        'a checkpoint of exactly the limit',
      );
      assert.equal(exact.checkpoint?.length, limits.maxCheckpointBytes);
    });

    define(t, target, 'oversize or non-string metadata is refused and nothing is written', async (clients, group) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const big = { blob: 'm'.repeat(limits.maxMetadataBytes) };
      await assert.rejects(storage.createLease({ group: g, leaseKey: 'k', metadata: big }), (error) => assertInvalidInput(error, 'metadata'));
      await assert.rejects(
        storage.createLease({ group: g, leaseKey: 'k', metadata: { n: 5 as unknown as string } }),
        (error) => assertInvalidInput(error, 'metadata'),
      );
      await assert.rejects(storage.createLeader({ group: g, metadata: big }), (error) => assertInvalidInput(error, 'metadata'));
      assert.deepEqual((await storage.listLeases(g)).leases, []);
      assert.equal(await storage.getLeader(g), null);
    });

    define(t, target, 'negative or fractional versions, epochs and terms are refused', async (clients, group) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const lease = applied(await storage.createLease({ group: g, leaseKey: 'k' }), 'create');
      await assert.rejects(storage.createLease({ group: g, leaseKey: 'x', epoch: -1 }), (error) => assertInvalidInput(error, 'epoch'));
      await assert.rejects(storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: -1, next: stateOf(lease) }]), (error) => assertInvalidInput(error, 'version'));
      await assert.rejects(storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: 1.5, next: stateOf(lease) }]), (error) => assertInvalidInput(error, 'version'));
      await assert.rejects(storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next: { ...stateOf(lease), epoch: 0.5 } }]), (error) => assertInvalidInput(error, 'epoch'));
      await assert.rejects(storage.deleteLease(g, 'k', -3), (error) => assertInvalidInput(error, 'version'));
      await assert.rejects(storage.createLeader({ group: g, term: -1 }), (error) => assertInvalidInput(error, 'term'));
      assert.deepEqual(plain((await storage.listLeases(g)).leases), [plain(lease)]);
      assert.equal(await storage.getLeader(g), null);
    });

    define(t, target, 'a batch naming one lease twice is refused and nothing is written', async (clients, group) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const lease = applied(await storage.createLease({ group: g, leaseKey: 'k' }), 'create');
      const next = { ...stateOf(lease), owner: 'w' };
      await assert.rejects(
        storage.updateLeases(g, [
          { leaseKey: 'k', expectedVersion: lease.version, next },
          { leaseKey: 'k', expectedVersion: lease.version, next },
        ]),
        (error) => assertInvalidInput(error, 'twice'),
      );
      assert.deepEqual(plain(await storage.getLease(g, 'k')), plain(lease));
    });
  });
}

/** The optional change feed: a subscriber of a group hears its releases and handoffs, and only those. */
export function changeFeedContract(t: TestApi, target: ConformanceTarget): void {
  t.describe(`${target.name}: change feed`, () => {
    define(t, target, 'a release published by one client reaches a subscriber on another client, and no other group', async (clients, group) => {
      const [writer, reader] = (await clients(2)) as [Storage, Storage];
      assert.ok(typeof reader.subscribe === 'function', 'the adapter declares a change feed but has no subscribe()');
      const g = group();
      const other = group();
      const heard: LeaseChange[] = [];
      const elsewhere: LeaseChange[] = [];
      const subscribe = (group: string, listener: (change: LeaseChange) => void) => (reader.subscribe as NonNullable<Storage['subscribe']>).call(reader, group, listener);
      const subscription = await subscribe(g, (change) => heard.push(change));
      const otherSubscription = await subscribe(other, (change) => elsewhere.push(change));
      try {
        const lease = applied(await writer.createLease({ group: g, leaseKey: 'k', owner: 'a', epoch: 1 }), 'create');
        applied(
          (await writer.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next: { ...stateOf(lease), owner: null }, notify: 'released' }]))[0] as WriteResult<LeaseRecord>,
          'release',
        );
        const [stale] = await writer.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next: stateOf(lease), notify: 'handed-off' }]);
        assert.equal((stale as WriteResult<LeaseRecord>).status, 'conflict');
        const deadline = Date.now() + 5000;
        while (heard.length === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
        await new Promise((resolve) => setTimeout(resolve, 100));
        assert.deepEqual(heard, [{ group: g, leaseKey: 'k', kind: 'released' }], 'only the write that applied is published');
        assert.deepEqual(elsewhere, []);
      } finally {
        await subscription.close();
        await otherSubscription.close();
      }
    });
  });
}

/** Runs every group of the conformance suite. */
export function runConformanceSuite(t: TestApi, target: ConformanceTarget): void {
  leaseContract(t, target);
  leaderContract(t, target);
  concurrencyContract(t, target);
  monotonicityContract(t, target);
  badInputContract(t, target);
  if (target.changeFeed) changeFeedContract(t, target);
}
