/**
 * The adapter conformance suite. Any storage adapter, in any repository, proves it keeps the contract of
 * `storage.ts` by running this against its real backend:
 *
 * ```ts
 * import { describe, it } from 'vitest';
 * import { runConformanceSuite } from '@leasehold/core/testing';
 * runConformanceSuite({ describe, it }, { name: 'MyStorage', createStorage: async () => new MyStorage(...) });
 * ```
 *
 * Each test works in a fresh, random group, so tests never depend on each other's cleanup and a failed
 * test leaves its records behind to be read. Test titles state the rules of the contract in the words
 * the contract's documentation uses. A test that needs a hook the target does not provide is skipped,
 * and its skip note says what was not checked.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { LeaseholdError } from '../errors.js';
import { limits } from '../validation.js';
import { leaderStateOf, leaseStateOf, memberStateOf, RECORD_FORMAT } from '../storage.js';
import type {
  DeleteResult,
  MemberRecord,
  MemberState,
  LeaderRecord,
  LeaderState,
  LeaseChange,
  LeaseChangeKind,
  LeaseRecord,
  LeaseState,
  LeaseUpdate,
  Storage,
  WriteResult,
} from '../storage.js';
import { TcpProxy } from './tcp-proxy.js';
import { watcherReadsContract } from './conformance-watchers.js';
import {
  applied,
  assertCorruptMember,
  assertInvalidInput,
  awkwardMemberMetadata,
  badNames,
  byWorker,
  corruptMemberHook,
  define,
  heartbeat,
  join,
  largestMember,
  members,
  memberOfSize,
  memberState,
  plain,
  sharedProcesses,
  show,
  sized,
  type Body,
  type BreakableFaults,
  type ConformanceTarget,
  type Context,
  type TestApi,
  type TransactionalCheckpoint,
} from './conformance-kit.js';

export type { TestApi, ProxyFaults, BreakableFaults, ConformanceTarget, UserWrite, TransactionalCheckpoint } from './conformance-kit.js';

// ---------------------------------------------------------------------------------------------------
// Assertions and fixtures

function conflict<T>(outcome: WriteResult<T> | DeleteResult | undefined, what: string): T | null {
  if (outcome?.status !== 'conflict') {
    assert.fail(`${what}: expected conflict, got ${show(outcome)}`);
  }
  return outcome.current as T | null;
}

function byKey(leases: readonly LeaseRecord[]): Map<string, LeaseRecord> {
  return new Map(leases.map((lease) => [lease.leaseKey, lease]));
}

async function update(storage: Storage, group: string, record: LeaseRecord, next: Partial<LeaseState>, what: string): Promise<LeaseRecord> {
  const [outcome] = await storage.updateLeases(group, [{ leaseKey: record.leaseKey, expectedVersion: record.version, next: { ...leaseStateOf(record), ...next } }]);
  return applied(outcome, what);
}

async function createMany(storage: Storage, group: string, keys: readonly string[], state: (leaseKey: string) => Partial<LeaseState> = () => ({})): Promise<void> {
  const chunk = 100;
  for (let start = 0; start < keys.length; start += chunk) {
    await Promise.all(
      keys.slice(start, start + chunk).map(async (leaseKey) => {
        applied(await storage.createLease({ group, leaseKey, ...state(leaseKey) }), `create ${leaseKey}`);
      }),
    );
  }
}

async function listed(storage: Storage, group: string): Promise<LeaseRecord[]> {
  const listing = await storage.listLeases(group);
  assert.deepEqual(listing.corrupt, [], 'no lease of this group is corrupt');
  return listing.leases;
}

function assertKeys(leases: readonly LeaseRecord[], expected: readonly string[], what: string): void {
  const keys = leases.map((lease) => lease.leaseKey);
  const duplicates = keys.filter((key, i) => keys.indexOf(key) !== i);
  assert.deepEqual(duplicates, [], `${what}: no lease is listed twice`);
  const have = new Set(keys);
  const want = new Set(expected);
  const missing = expected.filter((key) => !have.has(key));
  const extra = keys.filter((key) => !want.has(key));
  assert.deepEqual({ missing: missing.slice(0, 20), extra: extra.slice(0, 20), count: keys.length }, { missing: [], extra: [], count: expected.length }, what);
}

async function waitUntil(condition: () => boolean, what: string, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) assert.fail(`${what} (waited ${timeoutMs} ms)`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** An object whose JSON is exactly `bytes` UTF-8 bytes: `fields` plus one ASCII filler field. */
function jsonOfSize<T extends Record<string, unknown>>(bytes: number, fields: T, filler: string): T {
  const bare = Buffer.byteLength(JSON.stringify({ ...fields, [filler]: '' }));
  const value = { ...fields, [filler]: 'f'.repeat(bytes - bare) };
  assert.equal(Buffer.byteLength(JSON.stringify(value)), bytes);
  return value;
}

const full: LeaseState = {
  format: RECORD_FORMAT,
  owner: 'worker-ü-1',
  epoch: 7,
  checkpoint: '49590338271490256608559692538361571095921575989136588898:3',
  parentKeys: ['shardId-000000000001', 'shardId-000000000002'],
  incarnation: 'incarnation-ü "quoted"',
  metadata: { 'leasehold.note': 'línea\nnext', empty: '', 'with space': '{"json":true}' },
};

/** Fields a later core might add: JSON values of every kind, nested. */
const laterFields = {
  assignedAt: 1767225600123,
  lineage: { depth: 2, via: ['shardId-000000000001', null, true, { nested: [1.5, -2, 'ü'] }] },
  'x-flag': false,
  'x-empty': {},
  'x-none': null,
};

// ---------------------------------------------------------------------------------------------------
// The lease contract

/** Every operation of `CheckpointStorage`, its applied and conflict paths, and round-tripping. */
export function leaseContract(t: TestApi, target: ConformanceTarget): void {
  t.describe(`${target.name}: lease contract`, () => {
    define(t, target, 'an unknown group lists no leases and an unknown key reads as null', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      assert.deepEqual(await storage.listLeases(g), { leases: [], corrupt: [] });
      assert.equal(await storage.getLease(g, 'missing'), null);
    });

    define(t, target, 'a new key starts at version 1 and reads back exactly, with defaults for omitted fields', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const created = applied(await storage.createLease({ group: g, leaseKey: 'plain' }), 'create');
      assert.equal(created.group, g);
      assert.equal(created.leaseKey, 'plain');
      assert.equal(created.version, 1);
      assert.deepEqual(leaseStateOf(created), {
        format: RECORD_FORMAT,
        owner: null,
        epoch: 0,
        checkpoint: null,
        parentKeys: [],
        incarnation: null,
        metadata: {},
      });
      assert.deepEqual(plain(await storage.getLease(g, 'plain')), plain(created));
      assert.deepEqual(plain(await listed(storage, g)), [plain(created)]);
    });

    define(t, target, 'every field round-trips through create, update, get and list, including invented metadata keys', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const invented = `x-${randomUUID()}`;
      const state: LeaseState = { ...full, metadata: { ...full.metadata, [invented]: randomUUID() } };
      const created = applied(await storage.createLease({ group: g, leaseKey: 'shard/ü:{1}', ...state }), 'create');
      assert.deepEqual(leaseStateOf(created), plain(state));
      const next: LeaseState = {
        format: RECORD_FORMAT,
        owner: null,
        epoch: 8,
        checkpoint: 'SHARD_END',
        parentKeys: ['b', 'a'],
        incarnation: null,
        metadata: { [invented]: 'changed', [`y-${randomUUID()}`]: '✓' },
      };
      const [outcome] = await storage.updateLeases(g, [{ leaseKey: 'shard/ü:{1}', expectedVersion: created.version, next }]);
      const updated = applied(outcome, 'update');
      assert.equal(updated.version, created.version + 1);
      assert.deepEqual(leaseStateOf(updated), plain(next));
      assert.deepEqual(plain(await storage.getLease(g, 'shard/ü:{1}')), plain(updated));
      assert.deepEqual(plain(await listed(storage, g)), [plain(updated)]);
    });

    define(t, target, 'the format and fields core does not name round-trip exactly through create, update, get, list and a conflict\'s current record', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const state = { ...full, format: RECORD_FORMAT + 1, ...laterFields };
      const created = applied(await storage.createLease({ group: g, leaseKey: 'k', ...state }), 'create');
      assert.deepEqual(plain(leaseStateOf(created)), plain(state), 'the created record carries every field it was given');
      assert.deepEqual(plain(await storage.getLease(g, 'k')), plain(created));
      assert.deepEqual(plain(await listed(storage, g)), [plain(created)]);
      assert.deepEqual(plain(conflict(await storage.createLease({ group: g, leaseKey: 'k' }), 'create again')), plain(created));

      const next = { ...full, format: RECORD_FORMAT + 2, owner: 'w2', lineage: { depth: 3 }, 'x-added': ['later'] };
      const [outcome] = await storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: created.version, next }]);
      const updated = applied(outcome, 'update');
      assert.deepEqual(plain(leaseStateOf(updated)), plain(next), 'an update replaces the whole state: fields it leaves out are gone');
      assert.deepEqual(plain(await storage.getLease(g, 'k')), plain(updated));
      assert.deepEqual(plain(await listed(storage, g)), [plain(updated)]);
      const [stale] = await storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: created.version, next: state }]);
      assert.deepEqual(plain(conflict(stale, 'stale update')), plain(updated));
    });

    define(t, target, 'creating a lease that exists is a conflict carrying the current lease, and changes nothing', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const first = applied(await storage.createLease({ group: g, leaseKey: 'k', owner: 'a', epoch: 1 }), 'first create');
      const current = conflict(await storage.createLease({ group: g, leaseKey: 'k', owner: 'b', epoch: 9 }), 'second create');
      assert.deepEqual(plain(current), plain(first));
      assert.deepEqual(plain(conflict(await storage.createLease({ group: g, leaseKey: 'k', owner: 'b', epoch: 9 }, { recreate: true }), 'create with recreate')), plain(first));
      assert.deepEqual(plain(await storage.getLease(g, 'k')), plain(first));
    });

    define(t, target, 'creating a lease over a free lease is a conflict too: its checkpoint is kept', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const created = applied(await storage.createLease({ group: g, leaseKey: 'k', owner: 'a', epoch: 1, checkpoint: '100' }), 'create');
      const released = await update(storage, g, created, { owner: null, checkpoint: '250' }, 'release with a checkpoint');
      const current = conflict(await storage.createLease({ group: g, leaseKey: 'k', checkpoint: 'TRIM_HORIZON' }), 'create over the free lease');
      assert.deepEqual(plain(current), plain(released));
      assert.deepEqual(plain(await storage.getLease(g, 'k')), plain(released));
    });

    define(t, target, 'an update at the stored version applies and increments the version by one', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const created = applied(await storage.createLease({ group: g, leaseKey: 'k' }), 'create');
      const record = await update(storage, g, created, { owner: 'w1', epoch: 1 }, 'update');
      assert.equal(record.version, created.version + 1);
      assert.equal(record.owner, 'w1');
    });

    define(t, target, 'an update that writes exactly the stored state (a renewal) still increments the version', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      let lease = applied(await storage.createLease({ group: g, leaseKey: 'k', owner: 'w1', epoch: 1, checkpoint: '7' }), 'create');
      for (let renewal = 1; renewal <= 3; renewal++) {
        const renewed = await update(storage, g, lease, {}, `renewal ${renewal}`);
        assert.equal(renewed.version, lease.version + 1, `renewal ${renewal} moves the version: others see the owner alive only by it`);
        assert.equal((await storage.getLease(g, 'k'))?.version, renewed.version, `the stored version after renewal ${renewal}`);
        const [again] = await storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next: leaseStateOf(lease) }]);
        assert.deepEqual(plain(conflict(again, `renewal ${renewal} at the version it replaced`)), plain(renewed));
        lease = renewed;
      }
    });

    define(t, target, 'an update that changes only the checkpoint, only the metadata or only the incarnation increments the version', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      let lease = applied(await storage.createLease({ group: g, leaseKey: 'k', owner: 'w1', epoch: 1 }), 'create');
      const steps: Array<[string, Partial<LeaseState>]> = [
        ['checkpoint', { checkpoint: '100' }],
        ['checkpoint again', { checkpoint: '200' }],
        ['metadata', { metadata: { note: 'x' } }],
        ['incarnation', { incarnation: 'i-2' }],
        ['format', { format: RECORD_FORMAT + 1 }],
      ];
      for (const [what, step] of steps) {
        const next = await update(storage, g, lease, step, what);
        assert.equal(next.version, lease.version + 1, `a write of the ${what} moves the version`);
        assert.deepEqual(plain(await storage.getLease(g, 'k')), plain(next));
        lease = next;
      }
    });

    define(t, target, 'an update at a stale version is a conflict carrying the current lease, and changes nothing', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const created = applied(await storage.createLease({ group: g, leaseKey: 'k' }), 'create');
      const moved = await update(storage, g, created, { owner: 'w1', epoch: 1 }, 'first update');
      for (const stale of [created.version, moved.version + 1, 0]) {
        const [outcome] = await storage.updateLeases(g, [
          { leaseKey: 'k', expectedVersion: stale, next: { ...leaseStateOf(created), owner: 'thief', epoch: 2 } },
        ]);
        assert.deepEqual(plain(conflict(outcome, `update at version ${stale}`)), plain(moved));
      }
      assert.deepEqual(plain(await storage.getLease(g, 'k')), plain(moved));
    });

    define(t, target, 'an update at a stale version is a conflict even when it names the current owner and epoch: a checkpoint never moves back', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const created = applied(await storage.createLease({ group: g, leaseKey: 'k', owner: 'w1', epoch: 1, checkpoint: '100' }), 'create');
      const ahead = await update(storage, g, created, { checkpoint: '200' }, 'checkpoint 200');
      const [late] = await storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: created.version, next: { ...leaseStateOf(created), checkpoint: '150' } }]);
      assert.deepEqual(plain(conflict(late, 'the owner\'s delayed checkpoint at the version it replaced')), plain(ahead));
      assert.equal((await storage.getLease(g, 'k'))?.checkpoint, '200');
    });

    define(t, target, 'an update of a missing lease is a conflict with no current lease, and creates nothing', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const [outcome] = await storage.updateLeases(g, [{ leaseKey: 'ghost', expectedVersion: 1, next: { ...full } }]);
      assert.equal(conflict(outcome, 'update of missing'), null);
      assert.equal(await storage.getLease(g, 'ghost'), null);
      assert.deepEqual(await listed(storage, g), []);
    });

    define(t, target, 'a batch update returns one exact result per lease, in order, mixing applied and conflicts', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const keys = Array.from({ length: 50 }, (_, i) => `k${String(i).padStart(3, '0')}`);
      await createMany(storage, g, keys);
      const before = byKey(await listed(storage, g));
      const updates: LeaseUpdate[] = [...keys].reverse().map((leaseKey, i) => {
        const current = before.get(leaseKey) as LeaseRecord;
        return {
          leaseKey,
          expectedVersion: i % 3 === 0 ? current.version + 5 : current.version,
          next: { ...leaseStateOf(current), owner: `w${i}`, epoch: current.epoch + 1 },
        };
      });
      updates.push({ leaseKey: 'missing', expectedVersion: 1, next: { ...full } });
      const results = await storage.updateLeases(g, updates);
      assert.equal(results.length, updates.length);
      const after = byKey(await listed(storage, g));
      updates.forEach((entry, i) => {
        const outcome = results[i];
        if (entry.leaseKey === 'missing') {
          assert.equal(conflict(outcome, 'missing'), null);
        } else if (i % 3 === 0) {
          assert.deepEqual(plain(conflict(outcome, entry.leaseKey)), plain(before.get(entry.leaseKey)));
          assert.equal(after.get(entry.leaseKey)?.owner, null);
        } else {
          const record = applied(outcome, entry.leaseKey);
          assert.equal(record.leaseKey, entry.leaseKey);
          assert.equal(record.owner, `w${i}`);
          assert.deepEqual(plain(after.get(entry.leaseKey)), plain(record));
        }
      });
    });

    define(t, target, 'an empty batch update returns no results', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      assert.deepEqual(await storage.updateLeases(group(), []), []);
    });

    define(t, target, 'a delete at the stored version removes the lease; at a stale version it is a conflict', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const created = applied(await storage.createLease({ group: g, leaseKey: 'k', owner: 'w' }), 'create');
      assert.deepEqual(plain(conflict(await storage.deleteLease(g, 'k', created.version + 1), 'stale delete')), plain(created));
      assert.deepEqual(plain(await storage.getLease(g, 'k')), plain(created));
      assert.equal((await storage.deleteLease(g, 'k', created.version)).status, 'applied');
      assert.equal(await storage.getLease(g, 'k'), null);
      assert.deepEqual(await listed(storage, g), []);
      assert.equal(conflict(await storage.deleteLease(g, 'k', created.version), 'delete of deleted'), null);
      const [outcome] = await storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: created.version, next: leaseStateOf(created) }]);
      assert.equal(conflict(outcome, 'update of deleted'), null);
    });

    define(t, target, 'a deleted key is not created again without recreate: a conflict with no current lease, and nothing is created', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const created = applied(await storage.createLease({ group: g, leaseKey: 'finished', owner: 'a', epoch: 3, checkpoint: 'SHARD_END' }), 'create');
      assert.equal((await storage.deleteLease(g, 'finished', created.version)).status, 'applied');
      for (const attempt of [{}, { checkpoint: 'TRIM_HORIZON' }, { owner: 'b', epoch: 9 }]) {
        assert.equal(conflict(await storage.createLease({ group: g, leaseKey: 'finished', ...attempt }), `create again ${JSON.stringify(attempt)}`), null);
        assert.equal(conflict(await storage.createLease({ group: g, leaseKey: 'finished', ...attempt }, { recreate: false }), 'create again with recreate: false'), null);
      }
      assert.equal(await storage.getLease(g, 'finished'), null);
      assert.deepEqual(await listed(storage, g), []);
    });

    define(t, target, 'a key never used is created with recreate like any new key, at version 1', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const created = applied(await storage.createLease({ group: g, leaseKey: 'fresh', epoch: 2 }, { recreate: true }), 'create with recreate');
      assert.equal(created.version, 1);
      assert.equal(created.epoch, 2);
    });

    define(t, target, 'a client reads what another client wrote: get and list see its create, update and delete at once', async ({ clients, group }) => {
      const [writer, reader] = (await clients(2)) as [Storage, Storage];
      const g = group();
      assert.equal(await reader.getLease(g, 'k'), null);
      assert.deepEqual(await listed(reader, g), []);
      assert.equal(await reader.getLeader(g), null);
      const created = applied(await writer.createLease({ group: g, leaseKey: 'k', owner: 'a', epoch: 1 }), 'create');
      assert.deepEqual(plain(await reader.getLease(g, 'k')), plain(created), 'the reader sees the create');
      assert.deepEqual(plain(await listed(reader, g)), [plain(created)]);
      const moved = await update(writer, g, created, { checkpoint: '42' }, 'update');
      assert.deepEqual(plain(await reader.getLease(g, 'k')), plain(moved), 'the reader sees the update');
      assert.deepEqual(plain(await listed(reader, g)), [plain(moved)]);
      const [late] = await reader.updateLeases(g, [{ leaseKey: 'k', expectedVersion: created.version, next: leaseStateOf(created) }]);
      assert.deepEqual(plain(conflict(late, 'the reader writing at the version it read first')), plain(moved));
      assert.equal((await writer.deleteLease(g, 'k', moved.version)).status, 'applied');
      assert.equal(await reader.getLease(g, 'k'), null, 'the reader sees the delete');
      assert.deepEqual(await listed(reader, g), []);
      const leader = applied(await writer.createLeader({ group: g, holder: 'a', term: 1 }), 'create leader');
      assert.deepEqual(plain(await reader.getLeader(g)), plain(leader), 'the reader sees the leader record');
      const next = applied(await writer.updateLeader(g, leader.version, { ...leaderStateOf(leader), holder: 'b', term: 2 }), 'update leader');
      assert.deepEqual(plain(await reader.getLeader(g)), plain(next), 'the reader sees the new leader');
    });

    define(t, target, 'groups side by side never see each other, even when one name is a prefix of another', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const base = group();
      const groups = [base, `${base}:1`, `${base}{x}`, `${base} 2`, `${base}/ü`, `${base}*`, `${base}%`, `${base}_`];
      for (const [i, g] of groups.entries()) {
        await createMany(storage, g, ['shared', `only-${i}`], () => ({ owner: `owner-of-${i}`, epoch: i }));
        applied(await storage.createLeader({ group: g, holder: `leader-${i}`, term: i }), `leader ${i}`);
      }
      const first = (await storage.getLease(base, 'shared')) as LeaseRecord;
      await update(storage, base, first, { checkpoint: '42' }, 'update in base group');
      for (const [i, g] of groups.entries()) {
        const leases = await listed(storage, g);
        assert.deepEqual(leases.map((lease) => lease.leaseKey).sort(), ['only-' + i, 'shared'].sort());
        for (const lease of leases) {
          assert.equal(lease.group, g);
          assert.equal(lease.owner, `owner-of-${i}`);
          assert.equal(lease.checkpoint, i === 0 && lease.leaseKey === 'shared' ? '42' : null);
        }
        assert.equal((await storage.getLeader(g))?.holder, `leader-${i}`);
      }
    });
  });
}

// ---------------------------------------------------------------------------------------------------
// Listing, names and limits

/** Group sizes around the page sizes adapters use (counts and powers of two), where listings go wrong. */
const LISTING_SIZES = [0, 1, 2, 3, 9, 10, 11, 16, 17, 25, 32, 33, 50, 51, 64, 65, 99, 100, 101, 128, 129, 255, 256, 257, 499, 500, 501, 511, 512, 513, 999, 1000, 1001, 1023, 1024, 1025, 2047, 2048, 2049, 4095, 4096, 4097];

/** How many updates the large-batch test sends in one call: a worker renews all its leases in one batch. */
const LARGE_BATCH = 5000;

/** Listings complete at every size, batches of any size, names and values at the contract's limits. */
export function limitsContract(t: TestApi, target: ConformanceTarget): void {
  t.describe(`${target.name}: listing, names and limits`, () => {
    define(t, target, `a group lists completely at every size from 0 to ${LISTING_SIZES.at(-1)} leases, across the page sizes adapters use`, async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const keys: string[] = [];
      for (const size of LISTING_SIZES) {
        const added = Array.from({ length: size - keys.length }, (_, i) => `shardId-${String(keys.length + i).padStart(12, '0')}`);
        // Leases of varied sizes, so that pages bounded by bytes end at varied places too.
        await createMany(storage, g, added, (leaseKey) => ({ metadata: { padding: 'p'.repeat(100 + (Number(leaseKey.slice(-3)) % 7) * 50) } }));
        keys.push(...added);
        assertKeys(await listed(storage, g), keys, `a group of ${size} leases`);
      }
    });

    define(t, target, 'a group lists completely when deleted leases lie among its live ones, however many in a row', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const keys = Array.from({ length: 2600 }, (_, i) => `lease-${String(i).padStart(6, '0')}`);
      await createMany(storage, g, keys);
      const leases = byKey(await listed(storage, g));
      // Every other one of the first 200, then 2,200 in a row, so that whole pages hold only deleted keys.
      const deleted = new Set([...keys.slice(0, 200).filter((_, i) => i % 2 === 0), ...keys.slice(300, 2500)]);
      for (const chunk of chunks([...deleted], 100)) {
        await Promise.all(chunk.map(async (leaseKey) => {
          assert.equal((await storage.deleteLease(g, leaseKey, (leases.get(leaseKey) as LeaseRecord).version)).status, 'applied', `delete ${leaseKey}`);
        }));
      }
      assertKeys(await listed(storage, g), keys.filter((key) => !deleted.has(key)), 'the live leases');
    });

    define(t, target, `a batch of ${LARGE_BATCH.toLocaleString('en')} updates applies to every lease: a worker holding that many renews them in one call`, async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const keys = Array.from({ length: LARGE_BATCH }, (_, i) => `lease-${i}`);
      await createMany(storage, g, keys);
      const leases = await listed(storage, g);
      const results = await storage.updateLeases(
        g,
        leases.map((lease) => ({ leaseKey: lease.leaseKey, expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner: 'renewer', epoch: 1 } })),
      );
      assert.equal(results.length, leases.length);
      results.forEach((outcome, i) => {
        const record = applied(outcome, `lease ${leases[i]?.leaseKey}`);
        assert.equal(record.leaseKey, leases[i]?.leaseKey, 'results come in the order of the updates');
      });
      const after = await listed(storage, g);
      assert.ok(after.every((lease) => lease.owner === 'renewer'), 'every lease is renewed');
    });

    define(t, target, 'names of 256 to 512 bytes are stored whole: keys, groups and worker ids that differ only in their last character stay apart', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const keys: string[] = [];
      for (const bytes of [256, 257, 300, 511, 512]) {
        for (const unit of ['k', 'é', '€', '𝄞']) {
          keys.push(sized(bytes, unit, 'a'), sized(bytes, unit, 'b'));
        }
      }
      const owner = (key: string): string => sized(limits.maxNameBytes, '𝄞', key.endsWith('a') ? '1' : '2');
      for (const key of keys) {
        const created = applied(await storage.createLease({ group: g, leaseKey: key, owner: owner(key), incarnation: sized(limits.maxNameBytes, 'é', 'p'), parentKeys: [key] }), `create a key of ${Buffer.byteLength(key)} bytes`);
        assert.equal(created.leaseKey, key);
      }
      for (const key of keys) {
        const lease = await storage.getLease(g, key);
        assert.equal(lease?.leaseKey, key, `a key of ${Buffer.byteLength(key)} bytes reads back whole`);
        assert.equal(lease?.owner, owner(key), 'a worker id of 512 bytes reads back whole');
        assert.deepEqual(lease?.parentKeys, [key]);
      }
      assertKeys(await listed(storage, g), keys, 'every long key');
      const prefix = `${g}-`;
      const rest = (bytes: number): number => bytes - Buffer.byteLength(prefix);
      const longGroups = [sized(rest(limits.maxNameBytes), '€', 'a'), sized(rest(limits.maxNameBytes), '€', 'b'), sized(rest(256), 'k', 'a'), sized(rest(256), 'k', 'b')].map((name) => prefix + name);
      for (const [i, long] of longGroups.entries()) {
        applied(await storage.createLease({ group: long, leaseKey: 'k', owner: `owner-${i}` }), `create in a group of ${Buffer.byteLength(long)} bytes`);
        applied(await storage.createLeader({ group: long, holder: `leader-${i}` }), `leader of a group of ${Buffer.byteLength(long)} bytes`);
      }
      for (const [i, long] of longGroups.entries()) {
        assert.deepEqual((await listed(storage, long)).map((lease) => [lease.group, lease.owner]), [[long, `owner-${i}`]]);
        assert.equal((await storage.getLeader(long))?.holder, `leader-${i}`);
      }
    });

    define(t, target, 'names that differ only in case, Unicode normalization or trailing spaces are different names', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const keys = ['Shard-1', 'shard-1', 'SHARD-1', 'caf\u00e9', 'cafe\u0301', 'a', 'a ', 'a  ', ' a', 'a\t', '\ufb01', 'fi', 'Stra\u00dfe', 'STRASSE', 'strasse', '\u0130', 'i\u0307', 'I', 'i', 'Ａ', 'A'];
      for (const [i, leaseKey] of keys.entries()) {
        applied(await storage.createLease({ group: g, leaseKey, owner: `owner-${i}` }), `create ${JSON.stringify(leaseKey)}`);
      }
      for (const [i, leaseKey] of keys.entries()) {
        const lease = await storage.getLease(g, leaseKey);
        assert.deepEqual([lease?.leaseKey, lease?.owner], [leaseKey, `owner-${i}`], `${JSON.stringify(leaseKey)} is its own lease`);
      }
      assertKeys(await listed(storage, g), keys, 'every look-alike key');
      const groups = [`${g}-G`, `${g}-g`, `${g}-caf\u00e9`, `${g}-cafe\u0301`, `${g}-x`, `${g}-x `];
      for (const [i, name] of groups.entries()) {
        applied(await storage.createLease({ group: name, leaseKey: 'k', owner: `owner-${i}` }), `create in group ${JSON.stringify(name)}`);
        applied(await storage.createLeader({ group: name, holder: `leader-${i}` }), `leader of group ${JSON.stringify(name)}`);
      }
      for (const [i, name] of groups.entries()) {
        assert.deepEqual((await listed(storage, name)).map((lease) => lease.owner), [`owner-${i}`], `group ${JSON.stringify(name)} is its own group`);
        assert.equal((await storage.getLeader(name))?.holder, `leader-${i}`);
      }
    });

    define(t, target, 'a lease with every field at its largest allowed value round-trips exactly through create, update, get, list and a conflict', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const leaseKey = sized(limits.maxNameBytes, '𝄞', 'k');
      const largest = (variant: string): LeaseState & Record<string, unknown> => ({
        ...jsonOfSize(limits.maxExtensionBytes, {
          numbers: [Number.MAX_SAFE_INTEGER, -Number.MAX_SAFE_INTEGER, 0.1, 1e21, 1.7976931348623157e308, 5e-324, -1.5e-7, 0],
          nested: { a: { b: { c: [[], {}, [null, true, false, ''], 'ü€𝄞'] } } },
          'x-variant': variant,
        }, 'x-filler'),
        format: Number.MAX_SAFE_INTEGER,
        owner: sized(limits.maxNameBytes, '€', variant),
        epoch: Number.MAX_SAFE_INTEGER - (variant === 'a' ? 1 : 0),
        checkpoint: sized(limits.maxCheckpointBytes, '€', variant),
        parentKeys: Array.from({ length: limits.maxParentKeys }, (_, i) => sized(limits.maxNameBytes, 'é', `${variant}${i.toString(16)}`)),
        incarnation: sized(limits.maxNameBytes, 'k', variant),
        metadata: jsonOfSize(limits.maxMetadataBytes, { [sized(limits.maxMetadataKeyBytes, 'é', variant)]: 'long key', 'ü€𝄞': variant }, 'filler'),
      });
      const first = largest('a');
      const created = applied(await storage.createLease({ group: g, leaseKey, ...first }), 'create at the limits');
      assert.deepEqual(plain(leaseStateOf(created)), plain(first));
      const second = largest('b');
      const [outcome] = await storage.updateLeases(g, [{ leaseKey, expectedVersion: created.version, next: second }]);
      const updated = applied(outcome, 'update at the limits');
      assert.deepEqual(plain(leaseStateOf(updated)), plain(second));
      assert.deepEqual(plain(await storage.getLease(g, leaseKey)), plain(updated));
      assert.deepEqual(plain(await listed(storage, g)), [plain(updated)]);
      assert.deepEqual(plain(conflict(await storage.createLease({ group: g, leaseKey, ...first }), 'create again')), plain(updated));
      const [stale] = await storage.updateLeases(g, [{ leaseKey, expectedVersion: created.version, next: first }]);
      assert.deepEqual(plain(conflict(stale, 'stale update')), plain(updated));
    });

    define(t, target, 'a leader record with every field at its largest allowed value round-trips exactly', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const prefix = `${group()}-`;
      const g = prefix + sized(limits.maxNameBytes - Buffer.byteLength(prefix), '𝄞', 'g');
      const largest = (variant: string): LeaderState & Record<string, unknown> => ({
        ...jsonOfSize(limits.maxExtensionBytes, { numbers: [Number.MAX_SAFE_INTEGER, 0.1, 1e21, 5e-324], 'x-variant': variant }, 'x-filler'),
        format: Number.MAX_SAFE_INTEGER,
        holder: sized(limits.maxNameBytes, '𝄞', variant),
        term: Number.MAX_SAFE_INTEGER - (variant === 'a' ? 1 : 0),
        metadata: jsonOfSize(limits.maxMetadataBytes, { [sized(limits.maxMetadataKeyBytes, '€', variant)]: variant }, 'filler'),
      });
      const created = applied(await storage.createLeader({ group: g, ...largest('a') }), 'create at the limits');
      assert.deepEqual(plain(leaderStateOf(created)), plain(largest('a')));
      const updated = applied(await storage.updateLeader(g, created.version, largest('b')), 'update at the limits');
      assert.deepEqual(plain(leaderStateOf(updated)), plain(largest('b')));
      assert.deepEqual(plain(await storage.getLeader(g)), plain(updated));
      assert.deepEqual(plain(conflict(await storage.updateLeader(g, created.version, largest('a')), 'stale update')), plain(updated));
      assert.deepEqual(plain(conflict(await storage.createLeader({ group: g, ...largest('a') }), 'create again')), plain(updated));
    });

    define(t, target, 'awkward metadata keys and field names round-trip exactly: __proto__, constructor, dots, dollars, brackets, quotes, digits', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const awkward = ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'prototype', '1', '01', '-1', '1.5', ' ', '.', '..', 'a.b', '$', '$set', '#', ':', '::', '*', '?', '%', '%s', '[0]', '{x}', '{{x}}', '"', "'", '\\', '/', '\n', 'ü', '€', '𝄞', 'null', 'undefined', 'true'];
      const metadata: Record<string, string> = {};
      for (const [i, key] of awkward.entries()) Object.defineProperty(metadata, key, { value: `value-${i}-${key}`, enumerable: true, writable: true, configurable: true });
      const fields: Record<string, unknown> = {};
      for (const [i, key] of awkward.entries()) {
        // `__proto__` as the name of a field of the state itself is refused by the contract (no copy of a
        // state by assignment could keep it), so it is a metadata key here only.
        if (key !== '__proto__') Object.defineProperty(fields, key, { value: { i, key }, enumerable: true, writable: true, configurable: true });
      }
      const state = { ...leaseStateOf({}), metadata, ...fields } as LeaseState;
      const created = applied(await storage.createLease({ group: g, leaseKey: 'k', ...state }), 'create');
      assert.deepEqual(Object.keys(created.metadata).sort(), Object.keys(metadata).sort(), 'every metadata key is kept');
      assert.deepEqual(plain(leaseStateOf(created)), plain(state));
      const next = { ...state, owner: 'w' };
      const [outcome] = await storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: created.version, next }]);
      assert.deepEqual(plain(leaseStateOf(applied(outcome, 'update'))), plain(next));
      const read = (await storage.getLease(g, 'k')) as LeaseRecord;
      assert.deepEqual(Object.keys(read.metadata).sort(), Object.keys(metadata).sort(), 'every metadata key reads back');
      assert.deepEqual(plain(leaseStateOf(read)), plain(next));
      assert.deepEqual(plain((await listed(storage, g)).map(leaseStateOf)), [plain(next)]);
      const leader = applied(await storage.createLeader({ group: g, metadata, ...fields }), 'create leader');
      assert.deepEqual(plain(await storage.getLeader(g)), plain(leader));
      assert.deepEqual(Object.keys(leader.metadata).sort(), Object.keys(metadata).sort());
    });

    define(t, target, 'strings the contract allows round-trip exactly: NUL, lone surrogates, line separators, quotes and backslashes in checkpoints, metadata and fields core does not name', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const awkward = ['a\u0000b', '\ud800', 'x\udfffy', '\u2028\u2029', '"\\/\b\f\n\r\t', '\u001f\u007f', '\ufeff', "'; --", '${x}', '\\u0000'];
      for (const [i, text] of awkward.entries()) {
        const state = { ...leaseStateOf({}), checkpoint: text, metadata: { value: text }, 'x-text': text, 'x-list': [text] } as LeaseState;
        const created = applied(await storage.createLease({ group: g, leaseKey: `k${i}`, ...state }), `create with ${JSON.stringify(text)}`);
        assert.deepEqual(plain(leaseStateOf(created)), plain(state), `create with ${JSON.stringify(text)}`);
        assert.deepEqual(plain(leaseStateOf((await storage.getLease(g, `k${i}`)) as LeaseRecord)), plain(state), `read with ${JSON.stringify(text)}`);
      }
      assert.equal((await listed(storage, g)).length, awkward.length);
    });
  });
}

function chunks<T>(items: readonly T[], size: number): T[][] {
  return Array.from({ length: Math.ceil(items.length / size) }, (_, i) => items.slice(i * size, i * size + size));
}

// ---------------------------------------------------------------------------------------------------
// The leader contract

/** Every operation of `LeaderStore`. */
export function leaderContract(t: TestApi, target: ConformanceTarget): void {
  t.describe(`${target.name}: leader contract`, () => {
    define(t, target, 'a group with no leader record reads as null', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      assert.equal(await storage.getLeader(group()), null);
    });

    define(t, target, 'a created leader record reads back exactly; a second create is a conflict carrying it', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const invented = `x-${randomUUID()}`;
      const created = applied(await storage.createLeader({ group: g, holder: 'w1', term: 3, metadata: { [invented]: 'v', note: 'ü\n' } }), 'create');
      assert.equal(created.group, g);
      assert.equal(created.version, 1, 'a new leader record starts at version 1');
      assert.deepEqual(leaderStateOf(created), { format: RECORD_FORMAT, holder: 'w1', term: 3, metadata: { [invented]: 'v', note: 'ü\n' } });
      assert.deepEqual(plain(await storage.getLeader(g)), plain(created));
      assert.deepEqual(plain(conflict(await storage.createLeader({ group: g, holder: 'w2', term: 9 }), 'second create')), plain(created));
      assert.deepEqual(plain(await storage.getLeader(g)), plain(created));
    });

    define(t, target, 'a created leader record without fields has no holder, term 0 and empty metadata', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const created = applied(await storage.createLeader({ group: group() }), 'create');
      assert.deepEqual(leaderStateOf(created), { format: RECORD_FORMAT, holder: null, term: 0, metadata: {} });
    });

    define(t, target, 'the format and fields core does not name round-trip exactly through a leader record\'s create, update, get and conflict', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const state = { format: RECORD_FORMAT + 1, holder: 'w1', term: 1, metadata: { k: 'v' }, ...laterFields };
      const created = applied(await storage.createLeader({ group: g, ...state }), 'create');
      assert.deepEqual(plain(leaderStateOf(created)), plain(state));
      assert.deepEqual(plain(await storage.getLeader(g)), plain(created));
      assert.deepEqual(plain(conflict(await storage.createLeader({ group: g }), 'create again')), plain(created));
      const next = { format: RECORD_FORMAT + 2, holder: 'w2', term: 2, metadata: {}, lineage: { depth: 9 }, 'x-added': [1] };
      const updated = applied(await storage.updateLeader(g, created.version, next), 'update');
      assert.deepEqual(plain(leaderStateOf(updated)), plain(next), 'an update replaces the whole state: fields it leaves out are gone');
      assert.deepEqual(plain(await storage.getLeader(g)), plain(updated));
      assert.deepEqual(plain(conflict(await storage.updateLeader(g, created.version, state), 'stale update')), plain(updated));
    });

    define(t, target, 'a leader update at the stored version applies; at a stale version or for no record it is a conflict', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const created = applied(await storage.createLeader({ group: g }), 'create');
      const next = { format: RECORD_FORMAT, holder: 'w1', term: 1, metadata: { k: 'v' } };
      const updated = applied(await storage.updateLeader(g, created.version, next), 'update');
      assert.equal(updated.version, created.version + 1);
      assert.deepEqual(leaderStateOf(updated), next);
      assert.deepEqual(plain(conflict(await storage.updateLeader(g, created.version, { format: RECORD_FORMAT, holder: 'w2', term: 2, metadata: {} }), 'stale')), plain(updated));
      assert.deepEqual(plain(await storage.getLeader(g)), plain(updated));
      assert.equal(conflict(await storage.updateLeader(group(), 1, next), 'missing'), null);
    });

    define(t, target, 'a leader update that writes exactly the stored record (a renewal) still increments the version', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      let leader = applied(await storage.createLeader({ group: g, holder: 'w1', term: 1 }), 'create');
      for (let renewal = 1; renewal <= 3; renewal++) {
        const renewed = applied(await storage.updateLeader(g, leader.version, leaderStateOf(leader)), `renewal ${renewal}`);
        assert.equal(renewed.version, leader.version + 1, `renewal ${renewal} moves the version: candidates see the leader alive only by it`);
        assert.equal((await storage.getLeader(g))?.version, renewed.version);
        assert.deepEqual(plain(conflict(await storage.updateLeader(g, leader.version, leaderStateOf(leader)), `renewal ${renewal} at the version it replaced`)), plain(renewed));
        leader = renewed;
      }
    });

    define(t, target, 'the leader record is not a lease: it never lists, and a lease may have any key', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      applied(await storage.createLeader({ group: g, holder: 'w1', term: 1 }), 'leader');
      for (const leaseKey of ['leader', '__leader__', '#leader', '$leader', '~leader', 'leader:', '{leader}']) {
        applied(await storage.createLease({ group: g, leaseKey }), `lease ${leaseKey}`);
      }
      assert.equal((await listed(storage, g)).length, 7);
      assert.equal((await storage.getLeader(g))?.holder, 'w1');
    });
  });
}

// ---------------------------------------------------------------------------------------------------
// The roster contract

async function memberOfRoster(storage: Storage, group: string, workerId: string): Promise<MemberRecord | null> {
  return (await members(storage, group)).find((member) => member.workerId === workerId) ?? null;
}

/**
 * Every operation of the roster (`getRoster`, `putMember`, `removeMember`): joins, conditional writes on
 * each member's own version, versions from one counter per group, names and values round-tripping, and
 * input refused before anything is sent.
 */
export function rosterContract(t: TestApi, target: ConformanceTarget): void {
  t.describe(`${target.name}: roster contract`, () => {
    define(t, target, 'a group nobody joined has an empty roster', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      assert.deepEqual(plain(await storage.getRoster(g)), { group: g, members: [], corrupt: [] });
    });

    define(t, target, 'a join applies only when the worker id has no member: a second join is a conflict carrying the stored member, and changes nothing', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const joined = await join(storage, g, 'w1', { incarnation: 'first', held: 3 });
      assert.equal(joined.group, g);
      assert.equal(joined.workerId, 'w1');
      assert.ok(Number.isSafeInteger(joined.version) && joined.version >= 1, `a member's version is a positive integer, got ${joined.version}`);
      assert.deepEqual(plain(memberStateOf(joined)), plain(memberState({ incarnation: 'first', held: 3 })));
      const moved = await heartbeat(storage, joined, { held: 4 });
      for (const state of [memberState({ incarnation: 'second' }), memberStateOf(moved), memberState({ incarnation: 'first', held: 3 })]) {
        assert.deepEqual(plain(conflict(await storage.putMember(g, 'w1', null, state), 'a second join')), plain(moved), 'a second join is a conflict carrying the stored member');
      }
      assert.deepEqual(plain(await members(storage, g)), [plain(moved)], 'the second join changed nothing');
    });

    define(t, target, 'a member put at the stored version applies; at a stale version it is a conflict carrying the stored member, and changes nothing', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const joined = await join(storage, g, 'w1');
      const moved = await heartbeat(storage, joined, { held: 2, changes: 1, requests: [{ leaseKey: 'k', from: 'w2' }] });
      assert.ok(moved.version > joined.version, `version ${moved.version} after ${joined.version}`);
      assert.deepEqual(plain(memberStateOf(moved)), plain(memberState({ held: 2, changes: 1, requests: [{ leaseKey: 'k', from: 'w2' }] })));
      for (const stale of [joined.version, moved.version + 1, moved.version + 1000, 0]) {
        const outcome = await storage.putMember(g, 'w1', stale, memberState({ status: 'dead', incarnation: 'thief' }));
        assert.deepEqual(plain(conflict(outcome, `a put at version ${stale}`)), plain(moved), 'a conflict carries the stored member');
      }
      assert.deepEqual(plain(await members(storage, g)), [plain(moved)], 'a stale put changed nothing');
      assert.equal(conflict(await storage.putMember(g, 'nobody', 1, memberState()), 'a put of an absent member at a version'), null, 'a put of an absent member at a version is a conflict with no current member');
      assert.deepEqual(plain(await members(storage, g)), [plain(moved)], 'and creates nothing');
    });

    define(t, target, 'every member write that applies moves the version, even a heartbeat that writes exactly the stored state', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      let member = await join(storage, g, 'w1', { held: 5 });
      for (let beat = 1; beat <= 3; beat++) {
        const next = await heartbeat(storage, member, {}, `heartbeat ${beat}`);
        assert.ok(next.version > member.version, `heartbeat ${beat} moves the version (${member.version} to ${next.version}): others see the member alive only by it`);
        assert.deepEqual(plain(memberStateOf(next)), plain(memberStateOf(member)));
        assert.deepEqual(plain(await memberOfRoster(storage, g, 'w1')), plain(next), `the stored member after heartbeat ${beat}`);
        assert.deepEqual(plain(conflict(await storage.putMember(g, 'w1', member.version, memberStateOf(member)), `heartbeat ${beat} at the version it replaced`)), plain(next));
        member = next;
      }
      for (const [what, step] of [['held', { held: 6 }], ['changes', { changes: 1 }], ['requests', { requests: [{ leaseKey: 'k', from: 'w2' }] }], ['metadata', { metadata: { note: 'x' } }], ['status', { status: 'dead' }], ['format', { format: RECORD_FORMAT + 1 }]] as const) {
        const next = await heartbeat(storage, member, step, what);
        assert.ok(next.version > member.version, `a write of the ${what} moves the version`);
        member = next;
      }
    });

    define(t, target, 'each applied member write gives a version greater than every version its worker id ever had, whatever other members write', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const current = new Map<string, MemberRecord>();
      const highest = new Map<string, number>();
      const check = (record: MemberRecord, what: string): void => {
        const before = highest.get(record.workerId) ?? 0;
        assert.ok(record.version > before, `${what}: version ${record.version}, but ${record.workerId} already had ${before}`);
        highest.set(record.workerId, record.version);
        current.set(record.workerId, record);
      };
      for (const workerId of ['a', 'b', 'c']) check(await join(storage, g, workerId), `join ${workerId}`);
      for (const workerId of ['c', 'a', 'a', 'b', 'c', 'b']) check(await heartbeat(storage, current.get(workerId) as MemberRecord), `heartbeat of ${workerId}`);
      const removed = current.get('b') as MemberRecord;
      assert.equal((await storage.removeMember(g, 'b', removed.version)).status, 'applied');
      check(await join(storage, g, 'd'), 'a join after a remove');
      check(await heartbeat(storage, current.get('a') as MemberRecord), 'a heartbeat after a remove');
      check(await join(storage, g, 'b'), 'b joining again after its remove');
    });

    define(t, target, 'a version never repeats for a worker id: a member removed and joining again gets a version greater than every version its worker id ever had', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const other = await heartbeat(storage, await join(storage, g, 'other'));
      let highest = 0;
      const seen = new Set<number>();
      for (let round = 0; round < 4; round++) {
        const joined = await join(storage, g, 'cycled', { incarnation: `incarnation-${round}` });
        assert.ok(joined.version > highest, `join ${round}: version ${joined.version}, but the worker id already had ${highest}`);
        assert.ok(!seen.has(joined.version), `join ${round}: version ${joined.version} repeats`);
        const beat = await heartbeat(storage, joined);
        assert.ok(beat.version > joined.version);
        seen.add(joined.version).add(beat.version);
        highest = beat.version;
        assert.equal((await storage.removeMember(g, 'cycled', beat.version)).status, 'applied', `remove ${round}`);
        assert.equal(conflict(await storage.putMember(g, 'cycled', beat.version, memberStateOf(beat)), 'a writer holding the removed version'), null, 'a writer holding the removed version must not write the member again');
        for (const old of seen) {
          assert.equal(conflict(await storage.putMember(g, 'cycled', old, memberState({ incarnation: 'zombie' })), `a put at the old version ${old}`), null);
        }
      }
      const last = await join(storage, g, 'cycled', { incarnation: 'last' });
      for (const old of seen) {
        assert.deepEqual(plain(conflict(await storage.putMember(g, 'cycled', old, memberState({ incarnation: 'zombie' })), `a put at the old version ${old}`)), plain(last), 'no old version of the worker id is its version again');
      }
      assert.deepEqual(plain(await memberOfRoster(storage, g, 'other')), plain(other), 'the other member is untouched');
      assert.equal((await storage.removeMember(g, 'other', other.version)).status, 'applied');
      assert.equal((await storage.removeMember(g, 'cycled', last.version)).status, 'applied');
      assert.deepEqual(await members(storage, g), [], 'every member left');
      const back = await join(storage, g, 'cycled', { incarnation: 'after an empty roster' });
      assert.ok(back.version > last.version, `a join after every member left: version ${back.version}, but the worker id already had ${last.version}`);
      assert.deepEqual(plain(conflict(await storage.putMember(g, 'other', other.version, memberStateOf(other)), 'a writer holding the version of a member that left')), null);
    });

    define(t, target, 'writes to different members never conflict with each other: each member is written at its own version alone', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      let a = await join(storage, g, 'a');
      let b = await join(storage, g, 'b');
      const c = await join(storage, g, 'c');
      for (let round = 0; round < 3; round++) {
        a = await heartbeat(storage, a, { held: round }, `a, round ${round}`);
        b = await heartbeat(storage, b, { held: round }, `b at the version it read before a moved, round ${round}`);
      }
      const joined = await join(storage, g, 'd');
      a = await heartbeat(storage, a, {}, 'a after another member joined');
      assert.equal((await storage.removeMember(g, 'd', joined.version)).status, 'applied');
      b = await heartbeat(storage, b, {}, 'b after another member was removed');
      assert.equal((await storage.removeMember(g, 'c', c.version)).status, 'applied', 'c is removed at the version it joined at, though every other member moved since');
      assert.deepEqual(plain(await members(storage, g)), plain([a, b]));
    });

    define(t, target, 'a remove at the stored version removes the member; at a stale version it is a conflict carrying the stored member; of an absent member a conflict with null', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const joined = await join(storage, g, 'w1');
      const moved = await heartbeat(storage, joined);
      const kept = await join(storage, g, 'w2');
      for (const stale of [joined.version, moved.version + 1000]) {
        assert.deepEqual(plain(conflict(await storage.removeMember(g, 'w1', stale), `a remove at version ${stale}`)), plain(moved));
      }
      assert.deepEqual(plain(await members(storage, g)), plain([moved, kept]), 'a stale remove changed nothing');
      assert.equal((await storage.removeMember(g, 'w1', moved.version)).status, 'applied');
      assert.deepEqual(plain(await members(storage, g)), [plain(kept)]);
      assert.equal(conflict(await storage.removeMember(g, 'w1', moved.version), 'a remove of a removed member'), null);
      assert.equal(conflict(await storage.removeMember(g, 'never', 1), 'a remove of a member that never joined'), null);
      assert.equal(conflict(await storage.removeMember(group(), 'never', 1), 'a remove in a group nobody joined'), null);
      assert.deepEqual(plain(await members(storage, g)), [plain(kept)]);
    });

    define(t, target, 'every member field round-trips exactly through join, put, the roster and a conflict: requests, metadata with awkward keys, the format and fields core does not name', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const first = memberState({
        format: RECORD_FORMAT + 1,
        incarnation: 'incarnation-ü "quoted"',
        leaseDurationMs: 12_345,
        held: 7,
        changes: 3,
        requests: [{ leaseKey: 'shard/ü:{1}', from: 'worker "b"' }, { leaseKey: 'shardId-2', from: 'w\u2028c' }],
        metadata: awkwardMemberMetadata(),
        ...laterFields,
      });
      const joined = await join(storage, g, 'w1', first);
      assert.deepEqual(plain(memberStateOf(joined)), plain(first), 'the joined member carries every field it was given');
      assert.deepEqual(Object.keys(joined.metadata).sort(), Object.keys(first.metadata).sort(), 'every metadata key is kept');
      assert.deepEqual(plain(await members(storage, g)), [plain(joined)]);
      assert.deepEqual(plain(conflict(await storage.putMember(g, 'w1', null, memberState()), 'join again')), plain(joined));
      const second = memberState({ format: RECORD_FORMAT + 2, status: 'dead', requests: [{ leaseKey: 'k', from: 'w2' }], metadata: { [`x-${randomUUID()}`]: '✓' }, ...{ lineage: { depth: 3 }, 'x-added': ['later'] } });
      const put = applied(await storage.putMember(g, 'w1', joined.version, second), 'put');
      assert.deepEqual(plain(memberStateOf(put)), plain(second), 'a put replaces the whole state: fields it leaves out are gone');
      const read = (await memberOfRoster(storage, g, 'w1')) as MemberRecord;
      assert.deepEqual(plain(read), plain(put));
      assert.deepEqual(plain(conflict(await storage.putMember(g, 'w1', joined.version, first), 'stale put')), plain(put));
      const emptied = applied(await storage.putMember(g, 'w1', put.version, memberState()), 'a put of empty requests and metadata');
      assert.deepEqual(plain(memberStateOf(emptied)), plain(memberState()));
      assert.deepEqual(plain(await members(storage, g)), [plain(emptied)]);
    });

    define(t, target, 'fields core does not name on a handoff request round-trip exactly through join, put, the roster and a conflict', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const requests = [
        { leaseKey: 'shardId-1', from: 'w2', ...laterFields },
        { leaseKey: 'shardId-2', from: 'w3', 'x-priority': 2, 'x-asked': { at: 1767225600123, why: ['balance', 'ü'] } },
      ];
      const joined = await join(storage, g, 'w1', { requests });
      assert.deepEqual(plain(joined.requests), plain(requests), 'the joined member carries every field of its requests');
      assert.deepEqual(plain((await memberOfRoster(storage, g, 'w1'))?.requests), plain(requests), 'the roster carries every field of its requests');
      const next = [{ leaseKey: 'shardId-3', from: 'w4', 'x-later': [true, null, 'ü'] }];
      const put = applied(await storage.putMember(g, 'w1', joined.version, memberState({ requests: next })), 'a put of other requests');
      assert.deepEqual(plain(put.requests), plain(next), 'a put replaces the requests whole, with their fields');
      assert.deepEqual(plain((await memberOfRoster(storage, g, 'w1'))?.requests), plain(next));
      assert.deepEqual(plain(conflict(await storage.putMember(g, 'w1', joined.version, memberState()), 'stale put')?.requests), plain(next));
      assert.deepEqual(plain(conflict(await storage.putMember(g, 'w1', null, memberState()), 'join again')?.requests), plain(next));
    });

    define(t, target, `a member state of ${limits.maxMemberBytes} bytes, with counters and leaseDurationMs at Number.MAX_SAFE_INTEGER and ${limits.maxRequests} requests, round-trips exactly`, async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const prefix = `${group()}-`;
      const g = prefix + sized(limits.maxNameBytes - Buffer.byteLength(prefix), '𝄞', 'g');
      const workerId = sized(limits.maxNameBytes, '€', 'w');
      const joined = applied(await storage.putMember(g, workerId, null, largestMember('a')), 'join at the limits');
      assert.deepEqual(plain(memberStateOf(joined)), plain(largestMember('a')));
      assert.deepEqual(plain(await members(storage, g)), [plain(joined)]);
      const put = applied(await storage.putMember(g, workerId, joined.version, largestMember('b')), 'put at the limits');
      assert.deepEqual(plain(memberStateOf(put)), plain(largestMember('b')));
      assert.deepEqual(plain(await members(storage, g)), [plain(put)]);
      assert.deepEqual(plain(conflict(await storage.putMember(g, workerId, joined.version, largestMember('a')), 'stale put')), plain(put));
      assert.deepEqual(plain(conflict(await storage.putMember(g, workerId, null, largestMember('a')), 'join again')), plain(put));
    });

    define(t, target, `a roster of ${limits.maxMembers} members of near the largest size reads back whole`, async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const ids = Array.from({ length: limits.maxMembers }, (_, i) => `worker-${String(i).padStart(3, '0')}-${sized(200, 'é', 'x')}`);
      // Near the largest size: a heartbeat below may add a digit to a counter.
      const written = new Map(ids.map((workerId, i) => [workerId, memberOfSize(limits.maxMemberBytes - 4 - (i % 3), memberState({ incarnation: `incarnation-${i}`, held: i % 10 }))]));
      const joined: MemberRecord[] = [];
      for (const chunk of chunks(ids, 16)) {
        joined.push(...(await Promise.all(chunk.map(async (workerId) => applied(await storage.putMember(g, workerId, null, written.get(workerId) as MemberState), `join ${workerId.slice(0, 10)}`)))));
      }
      const roster = await members(storage, g);
      assert.deepEqual(roster.map((member) => member.workerId), [...ids].sort((a, b) => (a < b ? -1 : 1)), `every one of the ${limits.maxMembers} members`);
      for (const member of roster) assert.deepEqual(plain(memberStateOf(member)), plain(written.get(member.workerId)), `member ${member.workerId.slice(0, 10)} reads back whole`);
      assert.deepEqual(plain(roster), plain(byWorker(joined)));
      const moved = await Promise.all(joined.map((member) => heartbeat(storage, member, { held: member.held + 1 })));
      assert.deepEqual(plain(await members(storage, g)), plain(byWorker(moved)), 'and again after every member moved');
    });

    define(t, target, 'worker ids and groups are compared byte for byte: ids that differ only in case, Unicode normalization or trailing spaces are different members, and ids of 256 to 512 bytes are stored whole', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const ids = ['Worker-1', 'worker-1', 'WORKER-1', 'caf\u00e9', 'cafe\u0301', 'a', 'a ', 'a  ', ' a', 'a\t', '\ufb01', 'fi', '\u0130', 'i\u0307', 'Ａ', 'A'];
      for (const bytes of [256, 257, 511, 512]) for (const unit of ['w', 'é', '€', '𝄞']) ids.push(sized(bytes, unit, 'a'), sized(bytes, unit, 'b'));
      const joined: MemberRecord[] = [];
      for (const [i, workerId] of ids.entries()) {
        const member = await join(storage, g, workerId, { incarnation: `incarnation-${i}`, requests: [{ leaseKey: workerId, from: workerId }] });
        assert.equal(member.workerId, workerId, `${JSON.stringify(workerId.slice(0, 20))} of ${Buffer.byteLength(workerId)} bytes is stored whole`);
        joined.push(member);
      }
      assert.deepEqual(plain(await members(storage, g)), plain(byWorker(joined)), 'every look-alike worker id is its own member');
      const beat = await heartbeat(storage, joined[0] as MemberRecord, { held: 9 });
      assert.deepEqual(plain(await memberOfRoster(storage, g, 'worker-1')), plain(joined[1]), 'a write of one id leaves its look-alikes untouched');
      const groups = [`${g}-G`, `${g}-g`, `${g}-caf\u00e9`, `${g}-cafe\u0301`, `${g}-x`, `${g}-x `];
      const prefix = `${g}-`;
      groups.push(...[sized(limits.maxNameBytes - Buffer.byteLength(prefix), '€', 'a'), sized(limits.maxNameBytes - Buffer.byteLength(prefix), '€', 'b')].map((name) => prefix + name));
      for (const [i, name] of groups.entries()) await join(storage, name, 'w', { incarnation: `group-${i}` });
      for (const [i, name] of groups.entries()) {
        assert.deepEqual((await members(storage, name)).map((member) => [member.group, member.workerId, member.incarnation]), [[name, 'w', `group-${i}`]], `group ${JSON.stringify(name.slice(0, 40))} is its own roster`);
      }
      assert.equal((await memberOfRoster(storage, g, (joined[0] as MemberRecord).workerId))?.version, beat.version);
    });

    define(t, target, 'groups side by side never see each other\'s members, even when one name is a prefix of another', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const base = group();
      const groups = [base, `${base}:1`, `${base}{x}`, `${base} 2`, `${base}/ü`, `${base}*`, `${base}%`, `${base}_`, `${base}:`, `${base}.members`];
      const joined = new Map<string, MemberRecord[]>();
      for (const [i, g] of groups.entries()) {
        joined.set(g, [await join(storage, g, 'shared', { incarnation: `of-${i}` }), await join(storage, g, `only-${i}`, { incarnation: `of-${i}` })]);
      }
      const [first] = joined.get(base) as MemberRecord[];
      joined.set(base, [await heartbeat(storage, first as MemberRecord, { held: 42 }), (joined.get(base) as MemberRecord[])[1] as MemberRecord]);
      for (const [i, g] of groups.entries()) {
        const roster = await members(storage, g);
        assert.deepEqual(plain(roster), plain(byWorker(joined.get(g) as MemberRecord[])), `group ${JSON.stringify(g)} sees only its own members`);
        for (const member of roster) assert.equal(member.incarnation, `of-${i}`);
      }
      const other = (joined.get(`${base}:1`) as MemberRecord[])[1] as MemberRecord;
      assert.equal(conflict(await storage.removeMember(base, 'only-1', other.version), 'a remove of another group\'s member'), null);
      assert.deepEqual(plain(await memberOfRoster(storage, `${base}:1`, 'only-1')), plain(other));
    });

    define(t, target, 'a client sees a member another client wrote at once: no client serves the roster from a cache of its own', async ({ clients, group }) => {
      const [writer, reader] = (await clients(2)) as [Storage, Storage];
      const g = group();
      assert.deepEqual(await members(reader, g), []);
      const joined = await join(writer, g, 'w1');
      assert.deepEqual(plain(await members(reader, g)), [plain(joined)], 'the reader sees the join');
      const beat = await heartbeat(writer, joined);
      assert.deepEqual(plain(await members(reader, g)), [plain(beat)], 'the reader sees the heartbeat');
      assert.deepEqual(plain(conflict(await reader.putMember(g, 'w1', joined.version, memberStateOf(joined)), 'the reader writing at the version it read first')), plain(beat));
      const other = await join(reader, g, 'w2');
      assert.deepEqual(plain(await members(writer, g)), plain([beat, other]), 'the writer sees the reader\'s join');
      assert.equal((await writer.removeMember(g, 'w1', beat.version)).status, 'applied');
      assert.deepEqual(plain(await members(reader, g)), [plain(other)], 'the reader sees the remove');
    });

    define(t, target, 'invalid member input is refused with an InvalidInputError before anything is sent: each bad field, too many requests, an oversize state, a bad group, worker id or expected version', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const joined = await join(storage, g, 'w1');
      const good = memberStateOf(joined);
      const bad = (fields: Record<string, unknown>): MemberState => ({ ...good, ...fields });
      const states: Array<[string, MemberState, string]> = [
        ['format 0', bad({ format: 0 }), 'format'],
        ['a fractional format', bad({ format: 1.5 }), 'format'],
        ['no format', bad({ format: undefined }), 'format'],
        ['an empty incarnation', bad({ incarnation: '' }), 'incarnation'],
        ['a null incarnation', bad({ incarnation: null }), 'incarnation'],
        ['an incarnation with NUL', bad({ incarnation: 'a\u0000b' }), 'incarnation'],
        ['an incarnation of 513 bytes', bad({ incarnation: 'i'.repeat(limits.maxNameBytes + 1) }), 'incarnation'],
        ['leaseDurationMs 0', bad({ leaseDurationMs: 0 }), 'leaseDurationMs'],
        ['a negative leaseDurationMs', bad({ leaseDurationMs: -1 }), 'leaseDurationMs'],
        ['a fractional leaseDurationMs', bad({ leaseDurationMs: 1.5 }), 'leaseDurationMs'],
        ['leaseDurationMs over Number.MAX_SAFE_INTEGER', bad({ leaseDurationMs: Number.MAX_SAFE_INTEGER + 1 }), 'leaseDurationMs'],
        ['a status that is neither alive nor dead', bad({ status: 'gone' }), 'status'],
        ['a negative held', bad({ held: -1 }), 'held'],
        ['held as -0', bad({ held: -0 }), 'held'],
        ['fractional changes', bad({ changes: 0.5 }), 'changes'],
        ['requests that are no array', bad({ requests: { leaseKey: 'k', from: 'w' } }), 'requests'],
        [`${limits.maxRequests + 1} requests`, bad({ requests: Array.from({ length: limits.maxRequests + 1 }, (_, i) => ({ leaseKey: `k${i}`, from: 'w2' })) }), `the limit is ${limits.maxRequests}`],
        ['a request with an empty lease key', bad({ requests: [{ leaseKey: '', from: 'w2' }] }), 'requested lease key'],
        ['a request with no from', bad({ requests: [{ leaseKey: 'k' }] }), 'requested from'],
        ['a request field core does not name that holds no JSON value', bad({ requests: [{ leaseKey: 'k', from: 'w2', 'x-bad': Number.NaN }] }), 'a handoff request\'s field "x-bad"'],
        ['metadata with a number', bad({ metadata: { n: 5 } }), 'metadata'],
        ['a field core does not name that holds no JSON value', bad({ 'x-bad': Number.NaN }), 'x-bad'],
        [`a state over ${limits.maxMemberBytes} bytes`, bad({ metadata: { blob: 'm'.repeat(limits.maxMemberBytes) } }), `the limit is ${limits.maxMemberBytes}`],
        [`a state of ${limits.maxMemberBytes + 1} bytes`, memberOfSize(limits.maxMemberBytes + 1, memberState()), `the limit is ${limits.maxMemberBytes}`],
      ];
      for (const [what, state, mentions] of states) {
        const check = (error: unknown): true => assertInvalidInput(error, mentions);
        await assert.rejects(storage.putMember(g, 'w1', joined.version, state), check, `a put of ${what}`);
        await assert.rejects(storage.putMember(g, 'new', null, state), check, `a join of ${what}`);
      }
      for (const [what, name, mentions] of badNames) {
        const check = (error: unknown): true => assertInvalidInput(error, mentions);
        await assert.rejects(storage.getRoster(name), check, `a roster of ${what}`);
        await assert.rejects(storage.putMember(name, 'w1', null, good), check, `a join in ${what}`);
        await assert.rejects(storage.putMember(g, name, null, good), check, `a join as ${what}`);
        await assert.rejects(storage.putMember(g, name, joined.version, good), check, `a put as ${what}`);
        await assert.rejects(storage.removeMember(name, 'w1', joined.version), check, `a remove in ${what}`);
        await assert.rejects(storage.removeMember(g, name, joined.version), check, `a remove as ${what}`);
      }
      for (const version of [-1, -0, 1.5, Number.NaN, Number.MAX_SAFE_INTEGER + 1, '1' as unknown as number, undefined as unknown as number]) {
        const check = (error: unknown): true => assertInvalidInput(error, 'version');
        await assert.rejects(storage.putMember(g, 'w1', version, good), check, `a put at version ${String(version)}`);
        await assert.rejects(storage.removeMember(g, 'w1', version), check, `a remove at version ${String(version)}`);
      }
      assert.deepEqual(plain(await members(storage, g)), [plain(joined)], 'nothing was written');
    });
  });
}

// ---------------------------------------------------------------------------------------------------
// Concurrency

const races: Array<[string, Body]> = [
  [
    '32 clients updating the same version: exactly one applies, and every other gets a conflict carrying its write',
    async ({ clients, group }) => {
      const racers = await clients(32);
      const g = group();
      const created = applied(await (racers[0] as Storage).createLease({ group: g, leaseKey: 'contested' }), 'create');
      const outcomes = await Promise.all(
        racers.map((storage, i) =>
          storage.updateLeases(g, [{ leaseKey: 'contested', expectedVersion: created.version, next: { ...leaseStateOf(created), owner: `racer-${i}`, epoch: 1 } }]),
        ),
      );
      const flat = outcomes.map((batch) => batch[0]);
      const winners = flat.filter((outcome) => outcome?.status === 'applied');
      assert.equal(winners.length, 1, `applied: ${winners.length}`);
      const stored = (await (racers[0] as Storage).getLease(g, 'contested')) as LeaseRecord;
      assert.equal(stored.version, created.version + 1);
      assert.deepEqual(plain(stored), plain(applied(winners[0], 'the winner')));
      for (const outcome of flat) {
        if (outcome?.status !== 'applied') assert.deepEqual(plain(conflict(outcome, 'a loser')), plain(stored), 'a conflict carries the stored record, not the one the loser read');
      }
    },
  ],
  [
    '32 clients creating the same lease: exactly one applies',
    async ({ clients, group }) => {
      const racers = await clients(32);
      const g = group();
      const outcomes = await Promise.all(racers.map((storage, i) => storage.createLease({ group: g, leaseKey: 'new', owner: `racer-${i}`, epoch: 1 })));
      const winners = outcomes.filter((outcome) => outcome.status === 'applied');
      assert.equal(winners.length, 1);
      const stored = await (racers[0] as Storage).getLease(g, 'new');
      for (const outcome of outcomes) {
        if (outcome.status !== 'applied') assert.deepEqual(plain(conflict(outcome, 'a loser')), plain(stored));
      }
    },
  ],
  [
    '32 clients re-creating the same deleted lease: exactly one applies, above every version the key had',
    async ({ clients, group }) => {
      const racers = await clients(32);
      const g = group();
      const first = applied(await (racers[0] as Storage).createLease({ group: g, leaseKey: 'again', epoch: 5 }), 'create');
      assert.equal((await (racers[0] as Storage).deleteLease(g, 'again', first.version)).status, 'applied');
      const outcomes = await Promise.all(racers.map((storage, i) => storage.createLease({ group: g, leaseKey: 'again', owner: `racer-${i}` }, { recreate: true })));
      const winners = outcomes.filter((outcome) => outcome.status === 'applied');
      assert.equal(winners.length, 1);
      const record = applied(winners[0], 'the winner');
      assert.ok(record.version > first.version && record.epoch >= first.epoch, show(record));
    },
  ],
  [
    '32 clients electing themselves at once: exactly one leader record write applies',
    async ({ clients, group }) => {
      const racers = await clients(32);
      const g = group();
      const creates = await Promise.all(racers.map((storage, i) => storage.createLeader({ group: g, holder: `racer-${i}`, term: 1 })));
      assert.equal(creates.filter((outcome) => outcome.status === 'applied').length, 1);
      const current = (await (racers[0] as Storage).getLeader(g)) as LeaderRecord;
      const updates = await Promise.all(racers.map((storage, i) => storage.updateLeader(g, current.version, { format: RECORD_FORMAT, holder: `next-${i}`, term: 2, metadata: {} })));
      assert.equal(updates.filter((outcome) => outcome.status === 'applied').length, 1);
      const stored = await (racers[0] as Storage).getLeader(g);
      for (const outcome of updates) {
        if (outcome.status !== 'applied') assert.deepEqual(plain(conflict(outcome, 'a loser')), plain(stored));
      }
    },
  ],
  [
    '8 clients each making 50 conditional increments with re-read and retry lose no update',
    async ({ clients, group }) => {
      const workers = await clients(8);
      const g = group();
      const created = applied(await (workers[0] as Storage).createLease({ group: g, leaseKey: 'counter', metadata: { count: '0' } }), 'create');
      await Promise.all(
        workers.map(async (storage) => {
          for (let done = 0; done < 50; ) {
            const current = (await storage.getLease(g, 'counter')) as LeaseRecord;
            const count = Number(current.metadata.count) + 1;
            const [outcome] = await storage.updateLeases(g, [
              { leaseKey: 'counter', expectedVersion: current.version, next: { ...leaseStateOf(current), metadata: { count: String(count) } } },
            ]);
            if (outcome?.status === 'applied') done++;
          }
        }),
      );
      const final = (await (workers[0] as Storage).getLease(g, 'counter')) as LeaseRecord;
      assert.equal(final.metadata.count, '400');
      assert.equal(final.version, created.version + 400);
    },
  ],
  [
    'two clients renewing overlapping batches: each lease applies exactly once, and the other gets a conflict carrying the stored record',
    async ({ clients, group }) => {
      const [a, b] = (await clients(2)) as [Storage, Storage];
      const g = group();
      const keys = Array.from({ length: 200 }, (_, i) => `k${i}`);
      await createMany(a, g, keys);
      const leases = await listed(a, g);
      const batch = (owner: string): LeaseUpdate[] =>
        leases.map((lease) => ({ leaseKey: lease.leaseKey, expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner, epoch: 1 } }));
      const [fromA, fromB] = await Promise.all([a.updateLeases(g, batch('a')), b.updateLeases(g, batch('b'))]);
      const stored = byKey(await listed(a, g));
      leases.forEach((lease, i) => {
        const key = lease.leaseKey;
        const outcomes = [fromA[i], fromB[i]];
        const wins = outcomes.filter((outcome) => outcome?.status === 'applied');
        assert.equal(wins.length, 1, `lease ${key}`);
        const winner = fromA[i]?.status === 'applied' ? 'a' : 'b';
        assert.equal(stored.get(key)?.owner, winner);
        const loser = winner === 'a' ? fromB[i] : fromA[i];
        assert.deepEqual(plain(conflict(loser, `the loser of lease ${key}`)), plain(stored.get(key)), 'a conflict carries the record as stored, not as the batch first saw it');
      });
    },
  ],
  [
    '32 members heartbeating at once: every write applies, none conflicts with another member\'s, and no member\'s version repeats',
    async ({ clients, group }) => {
      const racers = await clients(32);
      const g = group();
      const joined = await Promise.all(racers.map((storage, i) => join(storage, g, `member-${i}`, { incarnation: `incarnation-${i}` })));
      const last = await Promise.all(
        racers.map(async (storage, i) => {
          let member = joined[i] as MemberRecord;
          const versions = [member.version];
          for (let beat = 1; beat <= 10; beat++) {
            const outcome = await storage.putMember(g, member.workerId, member.version, { ...memberStateOf(member), held: beat });
            member = applied(outcome, `heartbeat ${beat} of ${member.workerId}, at its own version while the others beat`);
            assert.ok(member.version > (versions.at(-1) as number), `heartbeat ${beat} of ${member.workerId} moves its version up: ${versions.join(', ')}, then ${member.version}`);
            versions.push(member.version);
          }
          return member;
        }),
      );
      assert.deepEqual(plain(await members(racers[0] as Storage, g)), plain(byWorker(last)), 'every member is stored as its last heartbeat wrote it');
    },
  ],
  [
    '32 clients joining as the same worker id at once: exactly one applies, and every other gets a conflict carrying the stored member',
    async ({ clients, group }) => {
      const racers = await clients(32);
      const g = group();
      const outcomes = await Promise.all(racers.map((storage, i) => storage.putMember(g, 'contested', null, memberState({ incarnation: `racer-${i}` }))));
      const winners = outcomes.filter((outcome) => outcome.status === 'applied');
      assert.equal(winners.length, 1, `applied: ${winners.length}`);
      const stored = await members(racers[0] as Storage, g);
      assert.deepEqual(plain(stored), [plain(applied(winners[0], 'the winner'))]);
      for (const outcome of outcomes) {
        if (outcome.status !== 'applied') assert.deepEqual(plain(conflict(outcome, 'a loser')), plain(stored[0]), 'a conflict carries the stored member');
      }
    },
  ],
  [
    '32 clients putting the same member at the same version: exactly one applies, and every other gets a conflict carrying the stored member, not the one its statement first saw',
    async ({ clients, group }) => {
      const racers = await clients(32);
      const g = group();
      const joined = await join(racers[0] as Storage, g, 'contested');
      const outcomes = await Promise.all(racers.map((storage, i) => storage.putMember(g, 'contested', joined.version, memberState({ incarnation: `racer-${i}`, status: i % 2 === 0 ? 'alive' : 'dead' }))));
      const winners = outcomes.filter((outcome) => outcome.status === 'applied');
      assert.equal(winners.length, 1, `applied: ${winners.length}`);
      const stored = await members(racers[0] as Storage, g);
      assert.deepEqual(plain(stored), [plain(applied(winners[0], 'the winner'))]);
      assert.ok((stored[0] as MemberRecord).version > joined.version);
      for (const outcome of outcomes) {
        if (outcome.status !== 'applied') assert.deepEqual(plain(conflict(outcome, 'a loser')), plain(stored[0]), 'a conflict carries the member as stored when the write was refused, not as the loser read it');
      }
    },
  ],
];

/**
 * Real concurrent clients racing on one record: exactly one winner, no lost update. With the target's
 * `crossProcess`, the same races run again between clients in separate processes.
 */
export function concurrencyContract(t: TestApi, target: ConformanceTarget): void {
  t.describe(`${target.name}: concurrency`, () => {
    for (const [title, body] of races) define(t, target, title, body);
  });
  t.describe(`${target.name}: concurrency between processes`, () => {
    const mode = sharedProcesses(t, target);
    for (const [title, body] of races) define(t, target, `${title}, from separate processes`, body, mode);
  });
}

// ---------------------------------------------------------------------------------------------------
// Monotonicity

/** Epoch, term and version only grow: across release, take, and delete-then-recreate. */
export function monotonicityContract(t: TestApi, target: ConformanceTarget): void {
  t.describe(`${target.name}: monotonicity`, () => {
    define(t, target, 'the epoch written on take, release and take again reads back as written', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      let lease = applied(await storage.createLease({ group: g, leaseKey: 'k' }), 'create');
      const steps: Array<Partial<LeaseState>> = [
        { owner: 'a', epoch: 1 },
        { owner: null, epoch: 1, checkpoint: '5' },
        { owner: 'b', epoch: 2 },
        { owner: 'b', epoch: 2, incarnation: 'i-b' },
        { owner: 'c', epoch: 3, incarnation: 'i-c' },
      ];
      for (const step of steps) {
        lease = await update(storage, g, lease, step, JSON.stringify(step));
        assert.equal((await storage.getLease(g, 'k'))?.epoch, step.epoch);
      }
    });

    define(t, target, 'a lease deleted and created again with recreate gets a greater version and keeps its highest epoch', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      let lease = applied(await storage.createLease({ group: g, leaseKey: 'k', owner: 'a', epoch: 4 }), 'create');
      lease = await update(storage, g, lease, { owner: 'b', epoch: 5 }, 'take');
      const old = lease;
      assert.equal((await storage.deleteLease(g, 'k', lease.version)).status, 'applied');
      const again = applied(await storage.createLease({ group: g, leaseKey: 'k' }, { recreate: true }), 'recreate');
      assert.ok(again.version > old.version, `version ${again.version} after ${old.version}`);
      assert.ok(again.epoch >= old.epoch, `epoch ${again.epoch} after ${old.epoch}`);
      assert.deepEqual(plain(await storage.getLease(g, 'k')), plain(again));
      const [stale] = await storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: old.version, next: { ...leaseStateOf(old), owner: 'zombie' } }]);
      assert.deepEqual(plain(conflict(stale, 'a writer holding the deleted version')), plain(again), 'a writer holding the deleted version must not write the new lease');
      const higher = applied(await storage.createLease({ group: g, leaseKey: 'other', epoch: 3 }), 'other');
      assert.equal(higher.epoch, 3, 'a new key keeps the epoch it was created with');
    });

    define(t, target, 'a lease deleted and created again many times never repeats a version or lowers its epoch', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      let highestVersion = 0;
      let highestEpoch = 0;
      for (let round = 0; round < 5; round++) {
        let lease = applied(await storage.createLease({ group: g, leaseKey: 'cycled', epoch: round % 2 === 0 ? 0 : highestEpoch + 1 }, { recreate: true }), `create ${round}`);
        assert.ok(lease.version > highestVersion && lease.epoch >= highestEpoch, show({ lease, highestVersion, highestEpoch }));
        lease = await update(storage, g, lease, { owner: `w${round}`, epoch: lease.epoch + 1 }, `take ${round}`);
        highestVersion = lease.version;
        highestEpoch = lease.epoch;
        assert.equal((await storage.deleteLease(g, 'cycled', lease.version)).status, 'applied');
      }
    });

    define(t, target, 'the term written on each change of leader reads back as written', async ({ clients, group }) => {
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

// ---------------------------------------------------------------------------------------------------
// Bad input

/** Invalid input is refused with a typed error before anything is written. */
export function badInputContract(t: TestApi, target: ConformanceTarget): void {
  t.describe(`${target.name}: bad input`, () => {
    for (const [label, bad, mentions] of badNames) {
      define(t, target, `${label} as a group is refused by every operation`, async ({ clients }) => {
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
        if (storage.subscribe) await assert.rejects(storage.subscribe(bad, () => undefined), check);
      });

      define(t, target, `${label} as a lease key or a worker id is refused and nothing is written`, async ({ clients, group }) => {
        const [storage] = (await clients(1)) as [Storage];
        const g = group();
        const check = (error: unknown): true => assertInvalidInput(error, mentions);
        const good = applied(await storage.createLease({ group: g, leaseKey: 'good' }), 'create');
        await assert.rejects(storage.getLease(g, bad), check);
        await assert.rejects(storage.createLease({ group: g, leaseKey: bad }), check);
        await assert.rejects(storage.deleteLease(g, bad, 1), check);
        await assert.rejects(
          storage.updateLeases(g, [
            { leaseKey: 'good', expectedVersion: good.version, next: { ...leaseStateOf(good), owner: 'w' } },
            { leaseKey: bad, expectedVersion: 1, next: full },
          ]),
          check,
        );
        await assert.rejects(storage.updateLeases(g, [{ leaseKey: 'good', expectedVersion: good.version, next: { ...leaseStateOf(good), owner: bad } }]), check);
        await assert.rejects(storage.updateLeases(g, [{ leaseKey: 'good', expectedVersion: good.version, next: { ...leaseStateOf(good), incarnation: bad } }]), check);
        await assert.rejects(storage.createLease({ group: g, leaseKey: 'other', parentKeys: [bad] }), check);
        await assert.rejects(storage.createLease({ group: g, leaseKey: 'other', owner: bad }), check);
        await assert.rejects(storage.createLeader({ group: g, holder: bad }), check);
        assert.deepEqual(plain(await listed(storage, g)), [plain(good)], 'one bad update refuses its whole batch');
        assert.equal(await storage.getLeader(g), null);
      });
    }

    define(t, target, 'an oversize checkpoint is refused and nothing is written', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const big = '9'.repeat(limits.maxCheckpointBytes + 1);
      const check = (error: unknown): true => assertInvalidInput(error, 'checkpoint');
      await assert.rejects(storage.createLease({ group: g, leaseKey: 'k', checkpoint: big }), check);
      const lease = applied(await storage.createLease({ group: g, leaseKey: 'k', checkpoint: '1' }), 'create');
      await assert.rejects(storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next: { ...leaseStateOf(lease), checkpoint: big } }]), check);
      await assert.rejects(storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next: { ...leaseStateOf(lease), checkpoint: '' } }]), check);
      assert.deepEqual(plain(await storage.getLease(g, 'k')), plain(lease));
    });

    define(t, target, 'oversize or non-string metadata is refused and nothing is written', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const big = { blob: 'm'.repeat(limits.maxMetadataBytes) };
      await assert.rejects(storage.createLease({ group: g, leaseKey: 'k', metadata: big }), (error) => assertInvalidInput(error, 'metadata'));
      await assert.rejects(
        storage.createLease({ group: g, leaseKey: 'k', metadata: { n: 5 as unknown as string } }),
        (error) => assertInvalidInput(error, 'metadata'),
      );
      await assert.rejects(storage.createLeader({ group: g, metadata: big }), (error) => assertInvalidInput(error, 'metadata'));
      assert.deepEqual(await listed(storage, g), []);
      assert.equal(await storage.getLeader(g), null);
    });

    define(t, target, 'too many parent keys are refused and nothing is written', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const parentKeys = Array.from({ length: limits.maxParentKeys + 1 }, (_, i) => `p${i}`);
      await assert.rejects(storage.createLease({ group: g, leaseKey: 'k', parentKeys }), (error) => assertInvalidInput(error, 'parent keys'));
      assert.deepEqual(await listed(storage, g), []);
    });

    define(t, target, 'negative, negative-zero or fractional versions, epochs and terms are refused', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const lease = applied(await storage.createLease({ group: g, leaseKey: 'k' }), 'create');
      await assert.rejects(storage.createLease({ group: g, leaseKey: 'x', epoch: -1 }), (error) => assertInvalidInput(error, 'epoch'));
      await assert.rejects(storage.createLease({ group: g, leaseKey: 'x', epoch: -0 }), (error) => assertInvalidInput(error, 'epoch'));
      await assert.rejects(storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: -1, next: leaseStateOf(lease) }]), (error) => assertInvalidInput(error, 'version'));
      await assert.rejects(storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: 1.5, next: leaseStateOf(lease) }]), (error) => assertInvalidInput(error, 'version'));
      await assert.rejects(storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next: { ...leaseStateOf(lease), epoch: 0.5 } }]), (error) => assertInvalidInput(error, 'epoch'));
      await assert.rejects(storage.deleteLease(g, 'k', -3), (error) => assertInvalidInput(error, 'version'));
      await assert.rejects(storage.createLeader({ group: g, term: -1 }), (error) => assertInvalidInput(error, 'term'));
      await assert.rejects(storage.updateLeader(g, 0.5, { format: RECORD_FORMAT, holder: null, term: 0, metadata: {} }), (error) => assertInvalidInput(error, 'version'));
      assert.deepEqual(plain(await listed(storage, g)), [plain(lease)]);
      assert.equal(await storage.getLeader(g), null);
    });

    define(t, target, 'a format that is not a positive integer, and a field core does not name that holds no JSON value, is named __proto__ or is too large, are refused and nothing is written', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const lease = applied(await storage.createLease({ group: g, leaseKey: 'k' }), 'create');
      for (const format of [0, -1, 1.5, '1', null]) {
        const next = { ...leaseStateOf(lease), format } as unknown as LeaseState;
        await assert.rejects(storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next }]), (error) => assertInvalidInput(error, 'format'));
        // A create may leave the format out (null or undefined): it then gets the default.
        if (format === null) continue;
        await assert.rejects(storage.createLease({ group: g, leaseKey: 'x', ...next }), (error) => assertInvalidInput(error, 'format'));
        await assert.rejects(storage.createLeader({ group: g, format: format as number }), (error) => assertInvalidInput(error, 'format'));
      }
      for (const value of [Number.NaN, Number.POSITIVE_INFINITY, new Date(0), new Map(), () => 1, [1, Symbol('s')], 10n]) {
        const next = { ...leaseStateOf(lease), 'x-bad': value } as unknown as LeaseState;
        await assert.rejects(storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next }]), (error) => assertInvalidInput(error, 'x-bad'));
        // A create is checked after core's copy of its state, which turns a Date or a Map into {}.
        if (value instanceof Date || value instanceof Map) continue;
        await assert.rejects(storage.createLease({ group: g, leaseKey: 'x', ...({ 'x-bad': value } as object) }), (error) => assertInvalidInput(error, 'x-bad'));
        await assert.rejects(storage.createLeader({ group: g, ...({ 'x-bad': value } as object) }), (error) => assertInvalidInput(error, 'x-bad'));
      }
      const proto = leaseStateOf(lease);
      Object.defineProperty(proto, '__proto__', { value: { polluted: true }, enumerable: true, configurable: true, writable: true });
      await assert.rejects(storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next: proto }]), (error) => assertInvalidInput(error, '__proto__'));
      const oversize = { ...leaseStateOf(lease), 'x-big': 'b'.repeat(limits.maxExtensionBytes) } as LeaseState;
      await assert.rejects(storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next: oversize }]), (error) => assertInvalidInput(error, 'the limit is'));
      await assert.rejects(storage.createLease({ group: g, leaseKey: 'x', ...oversize }), (error) => assertInvalidInput(error, 'the limit is'));
      assert.deepEqual(plain(await listed(storage, g)), [plain(lease)]);
      assert.equal(await storage.getLeader(g), null);
    });

    define(t, target, 'a batch naming one lease twice, or a notify that is no change kind, is refused and nothing is written', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const lease = applied(await storage.createLease({ group: g, leaseKey: 'k' }), 'create');
      const next = { ...leaseStateOf(lease), owner: 'w' };
      await assert.rejects(
        storage.updateLeases(g, [
          { leaseKey: 'k', expectedVersion: lease.version, next },
          { leaseKey: 'k', expectedVersion: lease.version, next },
        ]),
        (error) => assertInvalidInput(error, 'twice'),
      );
      await assert.rejects(
        storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next, notify: 'stolen' as LeaseChangeKind }]),
        (error) => assertInvalidInput(error, 'notify'),
      );
      assert.deepEqual(plain(await storage.getLease(g, 'k')), plain(lease));
    });
  });
}

// ---------------------------------------------------------------------------------------------------
// Corrupt records

function corruptHook(target: ConformanceTarget, context: Context): (group: string, leaseKey: string) => Promise<unknown> {
  if (!target.corruptLease) {
    context.notChecked(`not checked: ${target.notApplicable?.corruptLease ?? 'the target has no corruptLease hook to write a corrupt record'}`);
  }
  return target.corruptLease;
}

/** The version a member damaged by the `corruptMember` hook is stored at: the one the hook says, or the one it had. */
function storedVersion(hooked: unknown, before: MemberRecord): number {
  const version = (hooked as { version?: unknown } | null | undefined)?.version;
  return typeof version === 'number' ? version : before.version;
}

function assertCorrupt(error: unknown, group: string, leaseKey: string): void {
  assert.ok(error instanceof LeaseholdError, `expected a CorruptRecordError, got ${show(error)}`);
  const typed = error as LeaseholdError & { group?: unknown; leaseKey?: unknown };
  assert.deepEqual([typed.name, typed.code, typed.group, typed.leaseKey], ['CorruptRecordError', 'ERR_CORRUPT_RECORD', group, leaseKey], typed.message);
}

/**
 * A stored lease that cannot be read back is reported and isolated, and a write at another version leaves
 * it as it is. Needs `corruptLease`. (A write at the version it is stored at may replace it: writes decide
 * on the version alone; the suite does not know that version, so it does not try.)
 */
export function corruptionContract(t: TestApi, target: ConformanceTarget): void {
  t.describe(`${target.name}: corrupt records`, () => {
    define(t, target, 'a listing reports each corrupt lease in corrupt, naming it, and still lists every other lease', async (context) => {
      const corrupt = corruptHook(target, context);
      const [storage] = (await context.clients(1)) as [Storage];
      const g = context.group();
      const keys = Array.from({ length: 300 }, (_, i) => `lease-${String(i).padStart(4, '0')}`);
      await createMany(storage, g, keys);
      const before = byKey(await listed(storage, g));
      const bad = [keys[0], keys[150], keys[299]] as string[];
      for (const leaseKey of bad) await corrupt(g, leaseKey);
      const listing = await storage.listLeases(g);
      assert.deepEqual(plain(listing.leases.sort((a, b) => a.leaseKey.localeCompare(b.leaseKey))), plain(keys.filter((key) => !bad.includes(key)).map((key) => before.get(key))));
      assert.equal(listing.corrupt.length, bad.length, 'one CorruptRecordError per corrupt lease');
      for (const error of listing.corrupt) assertCorrupt(error, g, (error as { leaseKey?: string }).leaseKey ?? '');
      assert.deepEqual(listing.corrupt.map((error) => error.leaseKey).sort(), [...bad].sort());
    });

    define(t, target, 'reading a corrupt lease throws a CorruptRecordError naming it', async (context) => {
      const corrupt = corruptHook(target, context);
      const [storage] = (await context.clients(1)) as [Storage];
      const g = context.group();
      applied(await storage.createLease({ group: g, leaseKey: 'bad' }), 'create');
      await corrupt(g, 'bad');
      await assert.rejects(storage.getLease(g, 'bad'), (error) => {
        assertCorrupt(error, g, 'bad');
        return true;
      });
    });

    define(t, target, 'a batch item on a corrupt lease at another version is unknown, carrying the CorruptRecordError, for that item only: the others apply', async (context) => {
      const corrupt = corruptHook(target, context);
      const [storage] = (await context.clients(1)) as [Storage];
      const g = context.group();
      await createMany(storage, g, ['a', 'bad', 'c']);
      const leases = byKey(await listed(storage, g));
      await corrupt(g, 'bad');
      const badVersion = (leases.get('bad') as LeaseRecord).version;
      const next = (key: string): LeaseState => ({ ...leaseStateOf(leases.get(key) as LeaseRecord), owner: 'w' });
      const results = await storage.updateLeases(g, [
        { leaseKey: 'a', expectedVersion: (leases.get('a') as LeaseRecord).version, next: next('a') },
        { leaseKey: 'bad', expectedVersion: badVersion + 1000, next: next('bad') },
        { leaseKey: 'c', expectedVersion: (leases.get('c') as LeaseRecord).version, next: next('c') },
      ]);
      assert.equal(applied(results[0], 'the item before').owner, 'w');
      assert.equal(results[1]?.status, 'unknown', `the corrupt item: ${show(results[1])}`);
      assertCorrupt((results[1] as { error: unknown }).error, g, 'bad');
      assert.equal(applied(results[2], 'the item after').owner, 'w');
      const listing = await storage.listLeases(g);
      assert.deepEqual(listing.corrupt.map((error) => error.leaseKey), ['bad'], 'the corrupt lease stays as it is');
    });

    define(t, target, 'creating a corrupt lease, or deleting it at another version, is unknown, carrying the CorruptRecordError, and leaves it as it is', async (context) => {
      const corrupt = corruptHook(target, context);
      const [storage] = (await context.clients(1)) as [Storage];
      const g = context.group();
      const lease = applied(await storage.createLease({ group: g, leaseKey: 'bad' }), 'create');
      await corrupt(g, 'bad');
      for (const options of [{}, { recreate: true }]) {
        const outcome = await storage.createLease({ group: g, leaseKey: 'bad', owner: 'w' }, options);
        assert.equal(outcome.status, 'unknown', `create over a corrupt lease ${show(options)}: ${show(outcome)}`);
        assertCorrupt((outcome as { error: unknown }).error, g, 'bad');
      }
      const deleted = await storage.deleteLease(g, 'bad', lease.version + 1000);
      assert.equal(deleted.status, 'unknown', `a delete of a corrupt lease at another version: ${show(deleted)}`);
      assertCorrupt((deleted as { error: unknown }).error, g, 'bad');
      assert.deepEqual((await storage.listLeases(g)).corrupt.map((error) => error.leaseKey), ['bad']);
    });

    define(t, target, 'a roster reports each corrupt member in corrupt, naming its worker id, and still lists every other member', async (context) => {
      const corrupt = corruptMemberHook(target, context);
      const [storage] = (await context.clients(1)) as [Storage];
      const g = context.group();
      const ids = Array.from({ length: 20 }, (_, i) => `worker-${String(i).padStart(2, '0')}`);
      const joined = await Promise.all(ids.map((workerId) => join(storage, g, workerId)));
      const bad = ['worker-00', 'worker-07', 'worker-19'];
      for (const workerId of bad) await corrupt(g, workerId);
      const roster = await storage.getRoster(g);
      assert.deepEqual(plain(byWorker(roster.members)), plain(byWorker(joined.filter((member) => !bad.includes(member.workerId)))), 'every other member reads fine');
      assert.equal(roster.corrupt.length, bad.length, 'one CorruptRecordError per corrupt member');
      for (const error of roster.corrupt) assertCorruptMember(error, g, (error as { workerId?: string }).workerId ?? '');
      assert.deepEqual(roster.corrupt.map((error) => error.workerId).sort(), bad);
    });

    define(t, target, 'a join, put or remove of a corrupt member at another version than the one it is stored at is unknown, carrying the CorruptRecordError, and leaves it as it is', async (context) => {
      const corrupt = corruptMemberHook(target, context);
      const [storage] = (await context.clients(1)) as [Storage];
      const g = context.group();
      const member = await join(storage, g, 'bad');
      const other = await join(storage, g, 'good');
      const stored = storedVersion(await corrupt(g, 'bad'), member);
      const elsewhere = Math.max(stored, member.version) + 1000;
      const writes: Array<[string, () => Promise<WriteResult<MemberRecord> | DeleteResult<MemberRecord>>]> = [
        ['a join', () => storage.putMember(g, 'bad', null, memberState({ incarnation: 'new' }))],
        ['a put at another version', () => storage.putMember(g, 'bad', elsewhere, memberState({ incarnation: 'new' }))],
        ['a remove at another version', () => storage.removeMember(g, 'bad', elsewhere)],
      ];
      if (stored !== member.version) writes.push(['a put at the version it had before the damage', () => storage.putMember(g, 'bad', member.version, memberState({ incarnation: 'new' }))]);
      for (const [what, write] of writes) {
        const outcome = await write();
        assert.equal(outcome.status, 'unknown', `${what} of a corrupt member: ${show(outcome)}`);
        assertCorruptMember((outcome as { error: unknown }).error, g, 'bad');
      }
      const roster = await storage.getRoster(g);
      assert.deepEqual(roster.corrupt.map((error) => error.workerId), ['bad'], 'the corrupt member stays as it is');
      assert.deepEqual(plain(roster.members), [plain(other)]);
      await heartbeat(storage, other, {}, 'a write of another member');
    });

    define(t, target, 'a member put or remove at the version a corrupt member is stored at replaces or removes it: writes decide on the version alone', async (context) => {
      const corrupt = corruptMemberHook(target, context);
      const [storage] = (await context.clients(1)) as [Storage];
      const g = context.group();
      const member = await join(storage, g, 'bad');
      const stored = storedVersion(await corrupt(g, 'bad'), member);
      const replaced = applied(await storage.putMember(g, 'bad', stored, memberState({ incarnation: 'repaired' })), 'a put at the stored version');
      assert.ok(replaced.version > stored, `version ${replaced.version} after ${stored}`);
      assert.deepEqual(plain(await members(storage, g)), [plain(replaced)], 'the member reads back again');
      const again = storedVersion(await corrupt(g, 'bad'), replaced);
      assert.equal((await storage.removeMember(g, 'bad', again)).status, 'applied', 'a remove at the stored version');
      assert.deepEqual(plain(await storage.getRoster(g)), { group: g, members: [], corrupt: [] });
    });
  });
}

// ---------------------------------------------------------------------------------------------------
// The change feed

interface Heard {
  readonly changes: LeaseChange[];
  close(): Promise<void>;
}

function feedOf(storage: Storage, target: ConformanceTarget, context: Context): NonNullable<Storage['subscribe']> {
  if (typeof storage.subscribe !== 'function') {
    assert.ok(!target.changeFeed, 'the target declares a change feed (changeFeed: true) but its clients have no subscribe()');
    context.notChecked('not checked: the adapter has no subscribe(), so it has no change feed to check');
  }
  return (group, listener) => (storage.subscribe as NonNullable<Storage['subscribe']>).call(storage, group, listener);
}

async function listen(storage: Storage, group: string, target: ConformanceTarget, context: Context): Promise<Heard> {
  const changes: LeaseChange[] = [];
  const subscription = await feedOf(storage, target, context)(group, (change) => changes.push(change));
  let closing: Promise<void> | undefined;
  const close = (): Promise<void> => (closing ??= subscription.close());
  context.cleanup(close);
  return { changes, close };
}

/**
 * Writes a release of a marker lease through `writer` and waits until `heard` has it: changes written
 * before it by the same client have then been delivered too. Returns what was heard before the marker.
 */
async function settle(writer: Storage, group: string, heard: Heard): Promise<LeaseChange[]> {
  const leaseKey = `marker-${randomUUID().slice(0, 8)}`;
  const marker = applied(await writer.createLease({ group, leaseKey, owner: 'm', epoch: 1 }), 'create the marker');
  const [outcome] = await writer.updateLeases(group, [{ leaseKey, expectedVersion: marker.version, next: { ...leaseStateOf(marker), owner: null }, notify: 'released' }]);
  applied(outcome, 'release the marker');
  await waitUntil(() => heard.changes.some((change) => change.leaseKey === leaseKey && change.kind === 'released'), 'the marker release was never delivered');
  return heard.changes.filter((change) => change.leaseKey !== leaseKey);
}

function sortChanges(changes: readonly LeaseChange[]): LeaseChange[] {
  return [...changes].sort((a, b) => `${a.leaseKey} ${a.kind}`.localeCompare(`${b.leaseKey} ${b.kind}`));
}

/**
 * The change feed, checked whenever the adapter has `subscribe()`: a subscriber of a group hears, on any
 * client including the writer's own, every change that applied, with its kind, and nothing else.
 */
export function changeFeedContract(t: TestApi, target: ConformanceTarget): void {
  t.describe(`${target.name}: change feed`, () => {
    define(t, target, 'a release published by one client reaches a subscriber on another client, and no other group', async (context) => {
      const [writer, reader] = (await context.clients(2)) as [Storage, Storage];
      const g = context.group();
      const heard = await listen(reader, g, target, context);
      const elsewhere = await listen(reader, context.group(), target, context);
      const lease = applied(await writer.createLease({ group: g, leaseKey: 'k', owner: 'a', epoch: 1 }), 'create');
      const [outcome] = await writer.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner: null }, notify: 'released' }]);
      applied(outcome, 'release');
      await waitUntil(() => heard.changes.some((change) => change.kind === 'released'), 'the release was never delivered');
      assert.deepEqual(heard.changes.filter((change) => change.kind === 'released'), [{ group: g, leaseKey: 'k', kind: 'released' }]);
      assert.deepEqual(elsewhere.changes, []);
    });

    define(t, target, 'each change reaches subscribers with the kind it was written with: created for a new lease, handed-off, rewind and released', async (context) => {
      const [writer, reader] = (await context.clients(2)) as [Storage, Storage];
      const g = context.group();
      const heard = await listen(reader, g, target, context);
      const lease = applied(await writer.createLease({ group: g, leaseKey: 'k', owner: 'a', epoch: 1 }), 'create');
      await waitUntil(() => heard.changes.length > 0, 'the creation of a lease was never published (an adapter with a feed publishes created for every lease it creates)');
      let current = lease;
      for (const [kind, step] of [
        ['handed-off', { owner: 'b', epoch: 2, incarnation: 'i-b' }],
        // A rewind request changes only the metadata: the owner hears it and applies it.
        ['rewind', { metadata: { 'leasehold.rewind': '{"id":"r1","to":"TRIM_HORIZON","requestedAt":"2024-01-01T00:00:00.000Z"}' } }],
        ['released', { owner: null, incarnation: null }],
      ] as const) {
        const [outcome] = await writer.updateLeases(g, [{ leaseKey: 'k', expectedVersion: current.version, next: { ...leaseStateOf(current), ...step }, notify: kind }]);
        current = applied(outcome, kind);
      }
      assert.deepEqual(await settle(writer, g, heard), [
        { group: g, leaseKey: 'k', kind: 'created' },
        { group: g, leaseKey: 'k', kind: 'handed-off' },
        { group: g, leaseKey: 'k', kind: 'rewind' },
        { group: g, leaseKey: 'k', kind: 'released' },
      ]);
    });

    define(t, target, 'only writes that applied are published: a batch mixing applied and refused items publishes the applied ones, a refused create nothing', async (context) => {
      const [writer, reader] = (await context.clients(2)) as [Storage, Storage];
      const g = context.group();
      const keys = ['a', 'b', 'c', 'd', 'e'];
      // Subscribed before every write it judges: a feed may deliver a change written just before a
      // subscription (Redis Cluster forwards publishes between nodes), and that is no fault.
      const heard = await listen(reader, g, target, context);
      await createMany(writer, g, keys, () => ({ owner: 'w', epoch: 1 }));
      const leases = byKey(await listed(writer, g));
      const kinds: LeaseChangeKind[] = ['released', 'handed-off', 'handed-off', 'released', 'handed-off'];
      const results = await writer.updateLeases(g, [
        ...keys.map((leaseKey, i) => {
          const lease = leases.get(leaseKey) as LeaseRecord;
          return { leaseKey, expectedVersion: i % 2 === 0 ? lease.version : lease.version + 7, next: { ...leaseStateOf(lease), owner: null }, notify: kinds[i] };
        }),
        { leaseKey: 'missing', expectedVersion: 1, next: full, notify: 'released' },
      ]);
      assert.deepEqual(results.map((outcome) => outcome.status), ['applied', 'conflict', 'applied', 'conflict', 'applied', 'conflict']);
      conflict(await writer.createLease({ group: g, leaseKey: 'a' }), 'create over a lease');
      assert.deepEqual(sortChanges(await settle(writer, g, heard)), sortChanges([
        ...keys.map((leaseKey) => ({ group: g, leaseKey, kind: 'created' as const })),
        { group: g, leaseKey: 'a', kind: 'released' },
        { group: g, leaseKey: 'c', kind: 'handed-off' },
        { group: g, leaseKey: 'e', kind: 'handed-off' },
      ]));
    });

    define(t, target, 'updates without notify publish nothing: renewals and checkpoints are not changes', async (context) => {
      const [writer, reader] = (await context.clients(2)) as [Storage, Storage];
      const g = context.group();
      const keys = Array.from({ length: 20 }, (_, i) => `k${i}`);
      const heard = await listen(reader, g, target, context);
      await createMany(writer, g, keys, () => ({ owner: 'w', epoch: 1 }));
      for (let round = 0; round < 3; round++) {
        const leases = await listed(writer, g);
        const results = await writer.updateLeases(g, leases.map((lease) => ({ leaseKey: lease.leaseKey, expectedVersion: lease.version, next: { ...leaseStateOf(lease), checkpoint: String(round) } })));
        results.forEach((outcome, i) => applied(outcome, `renewal of ${leases[i]?.leaseKey}`));
      }
      const leader = applied(await writer.createLeader({ group: g, holder: 'w', term: 1 }), 'leader');
      applied(await writer.updateLeader(g, leader.version, leaderStateOf(leader)), 'leader renewal');
      assert.deepEqual(sortChanges(await settle(writer, g, heard)), sortChanges(keys.map((leaseKey) => ({ group: g, leaseKey, kind: 'created' as const }))), 'only the creates are changes');
    });

    define(t, target, 'a subscriber hears the changes its own client writes, as well as another client\'s', async (context) => {
      const [own, other] = (await context.clients(2)) as [Storage, Storage];
      const g = context.group();
      const heard = await listen(own, g, target, context);
      applied(await own.createLease({ group: g, leaseKey: 'mine', owner: 'w', epoch: 1 }), 'create through the subscriber\'s own client');
      applied(await other.createLease({ group: g, leaseKey: 'theirs', owner: 'w', epoch: 1 }), 'create through another client');
      const leases = byKey(await listed(own, g));
      const release = (leaseKey: string): LeaseUpdate => {
        const lease = leases.get(leaseKey) as LeaseRecord;
        return { leaseKey, expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner: null }, notify: 'released' };
      };
      applied((await own.updateLeases(g, [release('mine')]))[0], 'release through the subscriber\'s own client');
      applied((await other.updateLeases(g, [release('theirs')]))[0], 'release through another client');
      await waitUntil(() => heard.changes.length >= 4, `both creates and both releases should be heard, heard ${show(heard.changes)}`);
      assert.deepEqual(sortChanges(await settle(own, g, heard)), sortChanges([
        { group: g, leaseKey: 'mine', kind: 'created' },
        { group: g, leaseKey: 'theirs', kind: 'created' },
        { group: g, leaseKey: 'mine', kind: 'released' },
        { group: g, leaseKey: 'theirs', kind: 'released' },
      ]));
    });

    define(t, target, 'a closed subscription hears nothing more, while another subscription of the group goes on', async (context) => {
      const [writer, reader] = (await context.clients(2)) as [Storage, Storage];
      const g = context.group();
      const closed = await listen(reader, g, target, context);
      const open = await listen(reader, g, target, context);
      const elsewhere = await listen(writer, g, target, context);
      await closed.close();
      const lease = applied(await writer.createLease({ group: g, leaseKey: 'k', owner: 'a', epoch: 1 }), 'create');
      applied((await writer.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner: null }, notify: 'released' }]))[0], 'release');
      await settle(writer, g, open);
      await settle(writer, g, elsewhere);
      assert.deepEqual(closed.changes, [], 'nothing reaches a closed subscription');
      assert.ok(open.changes.some((change) => change.leaseKey === 'k' && change.kind === 'released'), 'the open subscription hears the release');
    });

    define(t, target, 'member writes publish nothing on the change feed: joins, heartbeats and removes are not lease changes', async (context) => {
      const [writer, reader] = (await context.clients(2)) as [Storage, Storage];
      const g = context.group();
      const heard = await listen(reader, g, target, context);
      const own = await listen(writer, g, target, context);
      let member = await join(writer, g, 'w1');
      for (let beat = 0; beat < 3; beat++) member = await heartbeat(writer, member, { held: beat, changes: beat });
      const other = await join(reader, g, 'w2');
      member = await heartbeat(writer, member, { status: 'dead' });
      assert.equal((await writer.removeMember(g, 'w1', member.version)).status, 'applied');
      assert.equal((await reader.removeMember(g, 'w2', other.version)).status, 'applied');
      assert.deepEqual(await settle(writer, g, heard), [], 'a subscriber on another client heard a member write');
      assert.deepEqual((await settle(writer, g, own)).filter((change) => !change.leaseKey.startsWith('marker-')), [], 'a subscriber on the writer\'s client heard a member write');
    });
  });
}

// ---------------------------------------------------------------------------------------------------
// Faults: lost connections

/** How long a call may take to settle once its connection is cut: a call that hangs fails the test. */
const SETTLE_MS = 30_000;

async function settles<T>(promise: Promise<T>, what: string): Promise<{ value: T } | { thrown: unknown }> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not settle within ${SETTLE_MS} ms of its connection being cut`)), SETTLE_MS);
  });
  try {
    return await Promise.race([promise.then((value) => ({ value }), (thrown: unknown) => ({ thrown })), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Fifty leases of a fresh group checkpointed in one batch through `client`, whose connection the proxy
 * cuts once the backend answers: the leases before, how the call settled, and the leases stored after.
 */
async function cutBatch(
  proxy: TcpProxy,
  client: Storage,
  direct: Storage,
  g: string,
): Promise<{ before: LeaseRecord[]; settled: { value: WriteResult<LeaseRecord>[] } | { thrown: unknown }; stored: Map<string, LeaseRecord> }> {
  const keys = Array.from({ length: 50 }, (_, i) => `k${i}`);
  await createMany(direct, g, keys, () => ({ owner: 'w', epoch: 1 }));
  const before = await listed(direct, g);
  await client.getLease(g, 'k0');
  const updates = before.map((lease) => ({ leaseKey: lease.leaseKey, expectedVersion: lease.version, next: { ...leaseStateOf(lease), checkpoint: `cp-${lease.leaseKey}` } }));
  let cut = false;
  const armed = proxy.cutOnResponse().then(() => {
    cut = true;
  });
  const settled = await settles(client.updateLeases(g, updates), 'updateLeases');
  await Promise.race([armed, new Promise((resolve) => setTimeout(resolve, 50))]);
  proxy.disarm();
  assert.ok(cut, `the batch returned without the backend answering it (${show(settled)})`);
  return { before, settled, stored: byKey(await listed(direct, g)) };
}

function isUnavailable(error: unknown): boolean {
  return error instanceof LeaseholdError && error.code === 'ERR_STORAGE_UNAVAILABLE';
}

interface Proxied {
  readonly proxy: TcpProxy;
  /** A client connected through the proxy, warmed up so that its connections are open. */
  readonly client: Storage;
  /** A client connected to the backend directly, to see what really happened. */
  readonly direct: Storage;
}

async function proxied(target: ConformanceTarget, context: Context): Promise<Proxied> {
  const faults = target.faults;
  if (faults?.kind !== 'proxy') {
    context.notChecked(
      `not checked: ${
        target.notApplicable?.faults ??
        (faults
          ? `the target breaks its clients' connections in process (faults.kind 'break'), so no call was cut after the backend received it`
          : `the target has no proxy fault hook (faults.kind 'proxy'), so calls whose connection is cut after the backend received them were not tried`)
      }`,
    );
  }
  const proxy = await TcpProxy.start(faults.upstream());
  context.cleanup(() => proxy.close());
  const client = await faults.createStorage(proxy.address);
  context.cleanup(async () => target.closeStorage?.(client));
  const [direct] = (await context.clients(1)) as [Storage];
  return { proxy, client, direct };
}

/**
 * Runs a write on `client` while the proxy cuts the connection once the backend answers it, and checks
 * the outcome against what `read` (on a direct client) says is stored: the write is `unknown` (with a
 * typed error) or `applied` exactly as stored; never a conflict; thrown only as a `StorageUnavailableError`
 * when nothing was written.
 */
async function cutWrite<R extends { status: string }, S>(
  proxy: TcpProxy,
  write: () => Promise<R>,
  read: () => Promise<S>,
  expect: { before: S; written: (outcome: R | undefined) => S; what: string },
): Promise<void> {
  let cut = false;
  const armed = proxy.cutOnResponse().then(() => {
    cut = true;
  });
  const settled = await settles(write(), expect.what);
  await Promise.race([armed, new Promise((resolve) => setTimeout(resolve, 50))]);
  proxy.disarm();
  assert.ok(cut, `${expect.what}: the call returned without the backend answering it (${show(settled)})`);
  const stored = plain(await read());
  const wasWritten = show(stored) !== show(plain(expect.before));
  if ('thrown' in settled) {
    assert.ok(!wasWritten, `${expect.what}: threw ${show(settled.thrown)} although the write reached the backend and applied; a write that may have reached the backend must return unknown`);
    assert.ok(isUnavailable(settled.thrown), `${expect.what}: a call that sent nothing may throw only a StorageUnavailableError, got ${show(settled.thrown)}`);
    return;
  }
  const outcome = settled.value;
  if (outcome.status === 'unknown') {
    const error = (outcome as unknown as { error?: unknown }).error;
    assert.ok(error instanceof LeaseholdError, `${expect.what}: an unknown outcome carries a LeaseholdError, got ${show(error)}`);
  } else {
    assert.equal(outcome.status, 'applied', `${expect.what}: a write cut after the backend received it is unknown (or applied, if the adapter proved it), got ${show(outcome)}`);
    assert.deepEqual(stored, plain(expect.written(outcome)), `${expect.what}: an applied outcome is what is stored`);
  }
  if (wasWritten) assert.deepEqual(stored, plain(expect.written(outcome.status === 'applied' ? outcome : undefined)), `${expect.what}: the write is stored whole or not at all`);
}

/**
 * Runs a member write on `client` while the proxy cuts the connection once the backend answers it, and
 * checks the outcome against the member `read` (on a direct client) finds: `unknown` (with a typed error)
 * or `applied` exactly as stored; never a conflict; thrown only as a `StorageUnavailableError` when
 * nothing was written. `next` is the state a put writes (with a version above the one before), `null` for
 * a remove.
 */
async function cutMemberWrite(
  proxy: TcpProxy,
  write: () => Promise<WriteResult<MemberRecord> | DeleteResult<MemberRecord>>,
  read: () => Promise<MemberRecord | null>,
  expect: { before: MemberRecord | null; next: MemberState | null; what: string },
): Promise<void> {
  let cut = false;
  const armed = proxy.cutOnResponse().then(() => {
    cut = true;
  });
  const settled = await settles(write(), expect.what);
  await Promise.race([armed, new Promise((resolve) => setTimeout(resolve, 50))]);
  proxy.disarm();
  assert.ok(cut, `${expect.what}: the call returned without the backend answering it (${show(settled)})`);
  const stored = await read();
  const wasWritten = show(plain(stored)) !== show(plain(expect.before));
  if ('thrown' in settled) {
    assert.ok(!wasWritten, `${expect.what}: threw ${show(settled.thrown)} although the write reached the backend and applied; a write that may have reached the backend must return unknown`);
    assert.ok(isUnavailable(settled.thrown), `${expect.what}: a call that sent nothing may throw only a StorageUnavailableError, got ${show(settled.thrown)}`);
    return;
  }
  const outcome = settled.value;
  if (outcome.status === 'unknown') {
    assert.ok(outcome.error instanceof LeaseholdError, `${expect.what}: an unknown outcome carries a LeaseholdError, got ${show(outcome.error)}`);
  } else {
    assert.equal(outcome.status, 'applied', `${expect.what}: a write cut after the backend received it is unknown (or applied, if the adapter proved it), got ${show(outcome)}`);
    if ('record' in outcome) assert.deepEqual(plain(stored), plain(outcome.record), `${expect.what}: an applied outcome is what is stored`);
    else assert.equal(stored, null, `${expect.what}: an applied remove removed the member`);
  }
  if (!wasWritten) return;
  if (expect.next === null) {
    assert.equal(stored, null, `${expect.what}: the member is removed or left as it was`);
  } else {
    assert.ok(stored !== null && stored.version > (expect.before?.version ?? 0), `${expect.what}: a written member has a new version, got ${show(stored)}`);
    assert.deepEqual(plain(memberStateOf(stored)), plain(expect.next), `${expect.what}: the member is written whole or not at all`);
  }
}

async function assertRecovers(client: Storage, direct: Storage, group: string, leaseKey: string): Promise<void> {
  const settled = await settles(client.getLease(group, leaseKey), 'a read after the cut');
  assert.ok('value' in settled, `the client works again after a cut connection: a read threw ${show(settled)}`);
  assert.deepEqual(plain(settled.value), plain(await direct.getLease(group, leaseKey)), 'the client works again after a cut connection');
}

/**
 * Lost connections: a write whose connection is cut after the backend received it is `unknown`, never
 * thrown nor guessed; a cut read throws a `StorageUnavailableError` or returns the exact answer, never
 * part of it. Needs the target's `faults` hook.
 */
export function faultContract(t: TestApi, target: ConformanceTarget): void {
  t.describe(`${target.name}: lost connections`, () => {
    define(t, target, 'a create whose connection is cut after the backend received it is unknown, never thrown nor a conflict, and the client works again', async (context) => {
      const { proxy, client, direct } = await proxied(target, context);
      const g = context.group();
      await client.getLease(g, 'warm-up');
      await cutWrite(proxy, () => client.createLease({ group: g, leaseKey: 'k', owner: 'w', epoch: 1 }), () => direct.getLease(g, 'k'), {
        before: null,
        written: (outcome) => outcome?.status === 'applied' ? outcome.record : { format: RECORD_FORMAT, owner: 'w', epoch: 1, checkpoint: null, parentKeys: [], incarnation: null, metadata: {}, group: g, leaseKey: 'k', version: 1 },
        what: 'createLease',
      });
      await assertRecovers(client, direct, g, 'k');
    });

    define(t, target, 'an update whose connection is cut after the backend received it is unknown, never thrown nor a conflict, and the client works again', async (context) => {
      const { proxy, client, direct } = await proxied(target, context);
      const g = context.group();
      const lease = applied(await direct.createLease({ group: g, leaseKey: 'k', owner: 'w', epoch: 1 }), 'create');
      await client.getLease(g, 'k');
      const next = { ...leaseStateOf(lease), checkpoint: '77' };
      await cutWrite(proxy, async () => (await client.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next }]))[0] as WriteResult<LeaseRecord>, () => direct.getLease(g, 'k'), {
        before: lease,
        written: (outcome) => outcome?.status === 'applied' ? outcome.record : { ...next, group: g, leaseKey: 'k', version: lease.version + 1 },
        what: 'updateLeases',
      });
      await assertRecovers(client, direct, g, 'k');
    });

    define(t, target, 'a delete whose connection is cut after the backend received it is unknown, never thrown nor a conflict, and the client works again', async (context) => {
      const { proxy, client, direct } = await proxied(target, context);
      const g = context.group();
      const lease = applied(await direct.createLease({ group: g, leaseKey: 'k', owner: 'w', epoch: 1 }), 'create');
      await client.getLease(g, 'k');
      await cutWrite(proxy, () => client.deleteLease(g, 'k', lease.version), () => direct.getLease(g, 'k'), {
        before: lease,
        written: () => null,
        what: 'deleteLease',
      });
      await assertRecovers(client, direct, g, 'k');
    });

    define(t, target, 'a leader create or update whose connection is cut after the backend received it is unknown, never thrown nor a conflict', async (context) => {
      const { proxy, client, direct } = await proxied(target, context);
      const g = context.group();
      await client.getLeader(g);
      await cutWrite(proxy, () => client.createLeader({ group: g, holder: 'w', term: 1 }), () => direct.getLeader(g), {
        before: null,
        written: (outcome) => outcome?.status === 'applied' ? outcome.record : { format: RECORD_FORMAT, holder: 'w', term: 1, metadata: {}, group: g, version: 1 },
        what: 'createLeader',
      });
      const current = (await direct.getLeader(g)) ?? applied(await direct.createLeader({ group: g, holder: 'w', term: 1 }), 'create leader');
      await client.getLeader(g);
      const next = { ...leaderStateOf(current), holder: 'v', term: 2 };
      await cutWrite(proxy, () => client.updateLeader(g, current.version, next), () => direct.getLeader(g), {
        before: current,
        written: (outcome) => outcome?.status === 'applied' ? outcome.record : { ...next, group: g, version: current.version + 1 },
        what: 'updateLeader',
      });
    });

    define(t, target, 'a batch whose connection is cut after the backend received it is unknown or applied item by item, never thrown nor a conflict, and each lease is written whole or not at all', async (context) => {
      const { proxy, client, direct } = await proxied(target, context);
      const g = context.group();
      const { before, settled, stored } = await cutBatch(proxy, client, direct, g);
      const written = before.filter((lease) => stored.get(lease.leaseKey)?.version !== lease.version);
      for (const lease of before) {
        const now = stored.get(lease.leaseKey);
        const whole = now?.version === lease.version ? lease : { ...lease, checkpoint: `cp-${lease.leaseKey}`, version: lease.version + 1 };
        assert.deepEqual(plain(now), plain(whole), `lease ${lease.leaseKey} is written whole or not at all`);
      }
      if ('thrown' in settled) {
        assert.deepEqual(written.map((lease) => lease.leaseKey), [], `the batch threw ${show(settled.thrown)} although it reached the backend and applied; a write that may have reached the backend must return unknown`);
        assert.ok(isUnavailable(settled.thrown), `a batch that sent nothing may throw only a StorageUnavailableError, got ${show(settled.thrown)}`);
        return;
      }
      assert.equal(settled.value.length, before.length, 'one result per update');
      settled.value.forEach((outcome, i) => {
        const leaseKey = before[i]?.leaseKey as string;
        if (outcome.status === 'unknown') {
          assert.ok(outcome.error instanceof LeaseholdError, `item ${leaseKey}: an unknown outcome carries a LeaseholdError, got ${show(outcome.error)}`);
        } else {
          assert.equal(outcome.status, 'applied', `item ${leaseKey}: a write cut after the backend received it is unknown (or applied, if the adapter proved it), got ${show(outcome)}`);
          assert.deepEqual(plain(outcome.record), plain(stored.get(leaseKey)), `item ${leaseKey}: an applied outcome is what is stored`);
        }
      });
    });

    define(t, target, 'a read whose connection is cut before its answer arrives throws a StorageUnavailableError or returns the exact answer', async (context) => {
      const { proxy, client, direct } = await proxied(target, context);
      const g = context.group();
      await createMany(direct, g, ['a', 'b', 'c'], () => ({ owner: 'w', epoch: 1, checkpoint: '5' }));
      applied(await direct.createLeader({ group: g, holder: 'w', term: 1 }), 'leader');
      const reads: Array<[string, () => Promise<unknown>]> = [
        ['getLease', () => client.getLease(g, 'b')],
        ['getLeader', () => client.getLeader(g)],
        ['listLeases', async () => sortListing(await client.listLeases(g))],
      ];
      const truth: Record<string, unknown> = {
        getLease: await direct.getLease(g, 'b'),
        getLeader: await direct.getLeader(g),
        listLeases: sortListing(await direct.listLeases(g)),
      };
      for (const [what, read] of reads) {
        await client.getLease(g, 'warm-up');
        const armed = proxy.cutOnResponse();
        const settled = await settles(read(), what);
        proxy.disarm();
        void armed;
        if ('thrown' in settled) assert.ok(isUnavailable(settled.thrown), `${what}: a read that fails throws a StorageUnavailableError, got ${show(settled.thrown)}`);
        else assert.deepEqual(plain(settled.value), plain(truth[what]), `${what}: a read that returns returns the exact answer`);
      }
    });

    define(t, target, 'a listing whose connection is cut in the middle of its answer throws a StorageUnavailableError or returns every lease, never part of them', async (context) => {
      const { proxy, client, direct } = await proxied(target, context);
      const g = context.group();
      const keys = Array.from({ length: 600 }, (_, i) => `lease-${String(i).padStart(4, '0')}`);
      await createMany(direct, g, keys, () => ({ metadata: { padding: 'p'.repeat(1000) } }));
      const truth = sortListing(await direct.listLeases(g));
      const start = proxy.answeredBytes;
      assert.deepEqual(plain(sortListing(await client.listLeases(g))), plain(truth));
      const size = proxy.answeredBytes - start;
      for (const fraction of [0.25, 0.5, 0.9]) {
        await client.getLease(g, 'warm-up');
        const armed = proxy.cutOnResponse({ afterBytes: Math.floor(size * fraction) });
        const settled = await settles(client.listLeases(g), 'listLeases');
        proxy.disarm();
        void armed;
        if ('thrown' in settled) assert.ok(isUnavailable(settled.thrown), `cut after ${fraction * 100}% of the answer: a listing that fails throws a StorageUnavailableError, got ${show(settled.thrown)}`);
        else assert.deepEqual(plain(sortListing(settled.value)), plain(truth), `cut after ${fraction * 100}% of the answer: a listing that returns lists every lease`);
      }
    });

    define(t, target, 'a member join, put or remove whose connection is cut after the backend received it is unknown, never thrown nor a conflict, and the client works again', async (context) => {
      const { proxy, client, direct } = await proxied(target, context);
      const g = context.group();
      await client.getRoster(g);
      const read = (): Promise<MemberRecord | null> => memberOfRoster(direct, g, 'w');
      await cutMemberWrite(proxy, () => client.putMember(g, 'w', null, memberState({ held: 1 })), read, { before: null, next: memberState({ held: 1 }), what: 'a join' });
      const current = (await read()) ?? (await join(direct, g, 'w', { held: 1 }));
      await client.getRoster(g);
      await cutMemberWrite(proxy, () => client.putMember(g, 'w', current.version, { ...memberStateOf(current), held: 2 }), read, { before: current, next: { ...memberStateOf(current), held: 2 }, what: 'a put' });
      const now = (await read()) as MemberRecord;
      await client.getRoster(g);
      await cutMemberWrite(proxy, () => client.removeMember(g, 'w', now.version), read, { before: now, next: null, what: 'a remove' });
      const settled = await settles(client.getRoster(g), 'a roster read after the cut');
      assert.ok('value' in settled, `the client works again after a cut connection: a roster read threw ${show(settled)}`);
      assert.deepEqual(plain(byWorker(settled.value.members)), plain(await members(direct, g)), 'the client works again after a cut connection');
    });

    define(t, target, 'a roster read whose connection is cut in the middle of its answer throws a StorageUnavailableError or returns the whole roster, never part of it', async (context) => {
      const { proxy, client, direct } = await proxied(target, context);
      const g = context.group();
      await Promise.all(Array.from({ length: limits.maxMembers }, (_, i) => join(direct, g, `worker-${String(i).padStart(3, '0')}`, { metadata: { padding: 'p'.repeat(1500) } })));
      const truth = plain(await members(direct, g));
      const start = proxy.answeredBytes;
      assert.deepEqual(plain(await members(client, g)), truth);
      const size = proxy.answeredBytes - start;
      for (const fraction of [0, 0.25, 0.5, 0.9]) {
        await client.getRoster(`${g}-warm-up`);
        const armed = proxy.cutOnResponse(fraction === 0 ? {} : { afterBytes: Math.floor(size * fraction) });
        const settled = await settles(client.getRoster(g), 'getRoster');
        proxy.disarm();
        void armed;
        if ('thrown' in settled) assert.ok(isUnavailable(settled.thrown), `cut after ${fraction * 100}% of the answer: a roster read that fails throws a StorageUnavailableError, got ${show(settled.thrown)}`);
        else assert.deepEqual(plain({ ...settled.value, members: byWorker(settled.value.members) }), { group: g, members: truth, corrupt: [] }, `cut after ${fraction * 100}% of the answer: a roster read that returns returns the whole roster`);
      }
    });

    define(t, target, 'a client whose connection is broken fails each call with a typed error (thrown, or unknown for a write) and writes nothing', async (context) => {
      const faults = breakable(target, context);
      const [direct] = (await context.clients(1)) as [Storage];
      const g = context.group();
      const lease = applied(await direct.createLease({ group: g, leaseKey: 'k', owner: 'w', epoch: 1 }), 'create');
      const leader = applied(await direct.createLeader({ group: g, holder: 'w', term: 1 }), 'leader');
      const member = await join(direct, g, 'w');
      const calls: Array<[string, (storage: Storage) => Promise<unknown>]> = [
        ['listLeases', (storage) => storage.listLeases(g)],
        ['getLease', (storage) => storage.getLease(g, 'k')],
        ['getLeader', (storage) => storage.getLeader(g)],
        ['createLease', (storage) => storage.createLease({ group: g, leaseKey: 'new' })],
        ['updateLeases', (storage) => storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next: { ...leaseStateOf(lease), checkpoint: '9' } }])],
        ['deleteLease', (storage) => storage.deleteLease(g, 'k', lease.version)],
        ['createLeader', (storage) => storage.createLeader({ group: `${g}-other` })],
        ['updateLeader', (storage) => storage.updateLeader(g, leader.version, { ...leaderStateOf(leader), term: 2 })],
        ['getRoster', (storage) => storage.getRoster(g)],
        ['putMember (a join)', (storage) => storage.putMember(g, 'new', null, memberState())],
        ['putMember (a heartbeat)', (storage) => storage.putMember(g, 'w', member.version, memberStateOf(member))],
        ['removeMember', (storage) => storage.removeMember(g, 'w', member.version)],
      ];
      for (const [what, call] of calls) {
        const breakable = await faults.createStorage();
        const storage = breakable.storage;
        context.cleanup(async () => target.closeStorage?.(storage));
        await storage.getLease(g, 'warm-up');
        await breakable.breakConnection();
        const settled = await settles(call(storage), what);
        if ('thrown' in settled) {
          assert.ok(isUnavailable(settled.thrown), `${what}: a call on a broken connection throws a StorageUnavailableError, got ${show(settled.thrown)}`);
        } else {
          const outcomes = (Array.isArray(settled.value) ? settled.value : [settled.value]) as Array<{ status?: unknown; error?: unknown }>;
          for (const outcome of outcomes) {
            assert.equal(outcome?.status, 'unknown', `${what}: a call on a broken connection cannot succeed, got ${show(outcome)}`);
            assert.ok(outcome.error instanceof LeaseholdError, `${what}: an unknown outcome carries a LeaseholdError, got ${show(outcome.error)}`);
          }
        }
      }
      assert.deepEqual(plain(await listed(direct, g)), [plain(lease)], 'nothing was written');
      assert.deepEqual(plain(await direct.getLeader(g)), plain(leader));
      assert.equal(await direct.getLeader(`${g}-other`), null);
      assert.deepEqual(plain(await members(direct, g)), [plain(member)], 'no member was written');
    });

    define(t, target, 'a batch whose connection is cut on a client that does not send it again is unknown item by item, or applied as stored: never a conflict with no current lease', async (context) => {
      const faults = target.faults;
      const { proxy, client, direct } = await proxied(target, context);
      // A client of its own, through the same proxy, that never sends the batch again after the cut.
      const once = faults?.kind === 'proxy' && faults.createStorageWithoutResend ? await faults.createStorageWithoutResend(proxy.address) : client;
      if (once !== client) context.cleanup(async () => target.closeStorage?.(once));
      const g = context.group();
      const { before, settled, stored } = await cutBatch(proxy, once, direct, g);
      for (const lease of before) {
        const now = stored.get(lease.leaseKey);
        const whole = now?.version === lease.version ? lease : { ...lease, checkpoint: `cp-${lease.leaseKey}`, version: lease.version + 1 };
        assert.deepEqual(plain(now), plain(whole), `lease ${lease.leaseKey} is written whole or not at all`);
      }
      if ('thrown' in settled) {
        const written = before.filter((lease) => stored.get(lease.leaseKey)?.version !== lease.version);
        assert.deepEqual(written.map((lease) => lease.leaseKey), [], `the batch threw ${show(settled.thrown)} although it reached the backend and applied; a write that may have reached the backend must return unknown`);
        assert.ok(isUnavailable(settled.thrown), `a batch that sent nothing may throw only a StorageUnavailableError, got ${show(settled.thrown)}`);
        return;
      }
      assert.equal(settled.value.length, before.length, 'one result per update');
      settled.value.forEach((outcome, i) => {
        const leaseKey = before[i]?.leaseKey as string;
        if (outcome.status === 'unknown') {
          assert.ok(outcome.error instanceof LeaseholdError, `item ${leaseKey}: an unknown outcome carries a LeaseholdError, got ${show(outcome.error)}`);
        } else {
          const why = outcome.status === 'conflict' && outcome.current === null ? 'a conflict with no current lease, although the lease exists and may be held' : 'no other client wrote the lease, so the exact answer can only be applied';
          assert.equal(outcome.status, 'applied', `item ${leaseKey}: a batch whose call failed is unknown (or applied, if the adapter proved it), got ${show(outcome)}: ${why}`);
          assert.deepEqual(plain(outcome.record), plain(stored.get(leaseKey)), `item ${leaseKey}: an applied outcome is what is stored`);
        }
      });
      await assertRecovers(once, direct, g, 'k0');
    });
  });
}

function breakable(target: ConformanceTarget, context: Context): BreakableFaults {
  const faults = target.faults;
  if (faults?.kind !== 'break') {
    context.notChecked(
      `not checked: ${target.notApplicable?.faults ?? (faults ? 'the target cuts connections with a proxy instead (the tests above)' : `the target has no breakable fault hook (faults.kind 'break')`)}`,
    );
  }
  return faults;
}

function sortListing(listing: { leases: LeaseRecord[]; corrupt: unknown[] }): { leases: LeaseRecord[]; corrupt: unknown[] } {
  return { leases: [...listing.leases].sort((a, b) => (a.leaseKey < b.leaseKey ? -1 : a.leaseKey > b.leaseKey ? 1 : 0)), corrupt: listing.corrupt };
}

// ---------------------------------------------------------------------------------------------------
// Reads while others write

/** Writers racing a reader: how many members or leases, how many writers, and how long the reader reads. */
const READ_RACE = { members: 48, stableLeases: 600, writers: 4, reads: 16, readForMs: 20_000 } as const;

/** Lets other clients' calls in between, as a round trip to a backend would. */
function yieldTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * Runs `writers` until `read` has run `READ_RACE.reads` times (or for `READ_RACE.readForMs`, whichever
 * comes first), starting the reads once every writer has written once, so that the reads meet the writes.
 * A writer's failure fails the race.
 */
async function readWhileWriting(writers: Array<(writing: () => boolean, wrote: () => void) => Promise<void>>, read: (index: number) => Promise<void>): Promise<void> {
  let reading = true;
  const started = writers.map(() => {
    let wrote = (): void => undefined;
    const once = new Promise<void>((resolve) => {
      wrote = resolve;
    });
    return { once, wrote };
  });
  const running = writers.map((writer, i) => writer(() => reading, (started[i] as { wrote: () => void }).wrote));
  const failed = Promise.all(running).then(() => undefined);
  let writerFailed = false;
  failed.catch(() => {
    writerFailed = true;
  });
  try {
    await Promise.race([Promise.all(started.map((start) => start.once)), failed]);
    const until = Date.now() + READ_RACE.readForMs;
    for (let index = 0; index < READ_RACE.reads && !writerFailed && (index === 0 || Date.now() < until); index++) await read(index);
  } finally {
    reading = false;
    await Promise.allSettled(running);
  }
  await failed;
}

const readRaces: Array<[string, Body]> = [
  [
    'a roster read while members heartbeat, join and leave never misses a member that existed throughout the read, nor lists one twice',
    async ({ clients, group }) => {
      const [reader, ...writers] = (await clients(1 + READ_RACE.writers)) as [Storage, ...Storage[]];
      const g = group();
      const ids = Array.from({ length: READ_RACE.members }, (_, i) => `member-${String(i).padStart(3, '0')}`);
      const joined = await Promise.all(ids.map((workerId, i) => join(writers[i % writers.length] as Storage, g, workerId)));
      // The last version each member's heartbeat had acknowledged: a read begun after it sees at least that.
      const acknowledged = new Map(joined.map((member) => [member.workerId, member.version]));
      await readWhileWriting(
        writers.map((storage, w) => async (writing, wrote) => {
          let mine = joined.filter((_, i) => i % writers.length === w);
          for (let beat = 1; writing(); beat++) {
            mine = await Promise.all(mine.map((member) => heartbeat(storage, member, { held: beat }, `heartbeat ${beat} of ${member.workerId}`)));
            for (const member of mine) acknowledged.set(member.workerId, member.version);
            // A member passing through: joins and leaves while the roster is read.
            const passing = await join(storage, g, `passing-${w}-${beat}`);
            await yieldTurn();
            const removed = await storage.removeMember(g, passing.workerId, passing.version);
            assert.equal(removed.status, 'applied', `the remove of ${passing.workerId}: ${show(removed)}`);
            wrote();
            await yieldTurn();
          }
        }),
        async (index) => {
          const before = new Map(acknowledged);
          const roster = await reader.getRoster(g);
          assert.deepEqual(roster.corrupt, [], `read ${index}: no member is corrupt`);
          const seen = roster.members.map((member) => member.workerId);
          assert.deepEqual(seen.filter((workerId, i) => seen.indexOf(workerId) !== i), [], `read ${index}: no member is listed twice`);
          const found = new Map(roster.members.map((member) => [member.workerId, member]));
          const missing = ids.filter((workerId) => !found.has(workerId));
          assert.deepEqual(missing, [], `read ${index}: every member that existed throughout the read is in the roster (${seen.length} listed)`);
          const stale = ids.filter((workerId) => (found.get(workerId)?.version ?? 0) < (before.get(workerId) ?? 0));
          assert.deepEqual(stale, [], `read ${index}: no member is older than the heartbeat it had acknowledged before the read began`);
        },
      );
    },
  ],
  [
    'a listing while other clients delete and create leases never misses a lease that existed throughout the listing, nor lists one twice',
    async ({ clients, group }) => {
      const [reader, ...writers] = (await clients(1 + READ_RACE.writers)) as [Storage, ...Storage[]];
      const g = group();
      // Leases that stay, each followed in key order by one that is deleted and replaced meanwhile, so
      // that the deletes and creates land in every page of the listing.
      const position = (i: number): string => `lease-${String(i).padStart(4, '0')}`;
      const stable = Array.from({ length: READ_RACE.stableLeases }, (_, i) => `${position(i)}-a`);
      const passing = Array.from({ length: READ_RACE.stableLeases }, (_, i) => `${position(i)}-b`);
      await createMany(reader, g, [...stable, ...passing], () => ({ owner: 'w', epoch: 1 }));
      const created = byKey(await listed(reader, g));
      await readWhileWriting(
        writers.map((storage, w) => async (writing, wrote) => {
          const mine = passing.map((leaseKey, i) => ({ leaseKey, i })).filter(({ i }) => i % writers.length === w);
          const queue = mine.map(({ leaseKey, i }) => ({ record: created.get(leaseKey) as LeaseRecord, i }));
          for (let round = 1; writing(); round++) {
            const next = queue.shift() as { record: LeaseRecord; i: number };
            const deleted = await storage.deleteLease(g, next.record.leaseKey, next.record.version);
            assert.equal(deleted.status, 'applied', `the delete of ${next.record.leaseKey}: ${show(deleted)}`);
            await yieldTurn();
            const leaseKey = `${position(next.i)}-b${round}`;
            queue.push({ record: applied(await storage.createLease({ group: g, leaseKey, owner: 'w', epoch: 1 }), `create ${leaseKey}`), i: next.i });
            wrote();
            await yieldTurn();
          }
        }),
        async (index) => {
          const listing = await reader.listLeases(g);
          assert.deepEqual(listing.corrupt, [], `listing ${index}: no lease is corrupt`);
          const keys = listing.leases.map((lease) => lease.leaseKey);
          const found = byKey(listing.leases);
          const missing = stable.filter((leaseKey) => !found.has(leaseKey));
          assert.deepEqual(missing.slice(0, 20), [], `listing ${index}: every lease that existed throughout the listing is listed (${missing.length} missing of ${stable.length}, ${keys.length} listed)`);
          assert.deepEqual(keys.filter((leaseKey, i) => keys.indexOf(leaseKey) !== i).slice(0, 20), [], `listing ${index}: no lease is listed twice`);
          for (const leaseKey of stable) assert.deepEqual(plain(found.get(leaseKey)), plain(created.get(leaseKey)), `listing ${index}: lease ${leaseKey} is listed as stored`);
        },
      );
    },
  ],
];

/**
 * Reads racing writers: a roster read while members heartbeat, join and leave, and a listing while other
 * clients delete and create leases, each never missing a record that existed throughout the read. With the
 * target's `crossProcess`, the writers and the reader race from separate processes too.
 */
export function readsWhileWritingContract(t: TestApi, target: ConformanceTarget): void {
  t.describe(`${target.name}: reads while others write`, () => {
    for (const [title, body] of readRaces) define(t, target, title, body);
  });
  t.describe(`${target.name}: reads while others write, between processes`, () => {
    const mode = sharedProcesses(t, target);
    for (const [title, body] of readRaces) define(t, target, `${title}, from separate processes`, body, mode);
  });
}

// ---------------------------------------------------------------------------------------------------
// The transactional checkpoint

function transactional(target: ConformanceTarget, context: Context): TransactionalCheckpoint {
  const hook = target.transactionalCheckpoint;
  if (!hook) {
    context.notChecked(`not checked: ${target.notApplicable?.transactionalCheckpoint ?? 'the target offers no transactional checkpoint (transactionalCheckpoint)'}`);
  }
  return hook;
}

/** A lease as a worker holds it: owner, incarnation, epoch and a checkpoint. */
async function heldLease(storage: Storage, group: string, leaseKey: string): Promise<LeaseRecord> {
  return applied(await storage.createLease({ group, leaseKey, owner: 'worker-1', incarnation: 'incarnation-1', epoch: 3, checkpoint: '100' }), `create ${leaseKey}`);
}

/**
 * The transactional checkpoint (DESIGN section 4, "Exactly-once effects"), when the target offers one: the
 * user's write and the checkpoint apply together only while the lease is as the worker holds it, are
 * refused whole otherwise, and an answer lost at COMMIT leaves the lease telling whether the user's write
 * applied.
 */
export function transactionalCheckpointContract(t: TestApi, target: ConformanceTarget): void {
  t.describe(`${target.name}: transactional checkpoint`, () => {
    define(t, target, 'a transactional checkpoint applies the user\'s write and the checkpoint together while the lease is as the worker holds it', async (context) => {
      const hook = transactional(target, context);
      const [storage, other] = (await context.clients(2)) as [Storage, Storage];
      const g = context.group();
      const lease = await heldLease(storage, g, 'shard-1');
      const next = { ...leaseStateOf(lease), checkpoint: '200' };
      const first = applied(await hook.checkpoint(storage, lease, next, { key: `${g}/1`, value: 'one' }), 'a checkpoint of the lease as held');
      assert.deepEqual(plain(first), plain({ group: g, leaseKey: 'shard-1', version: lease.version + 1, ...next }), 'the record written is the state given, one version on');
      assert.deepEqual(plain(await other.getLease(g, 'shard-1')), plain(first), 'the checkpoint is stored');
      assert.equal(await hook.read(other, `${g}/1`), 'one', 'the user\'s write is visible with it');
      // The next batch follows from the record written.
      const second = applied(await hook.checkpoint(storage, first, { ...leaseStateOf(first), checkpoint: '300' }, { key: `${g}/2`, value: 'two' }), 'the next checkpoint');
      assert.equal(second.version, first.version + 1);
      assert.equal(await hook.read(other, `${g}/2`), 'two');
    });

    define(t, target, 'a transactional checkpoint is refused whole on a conflict: at a stale version, under another owner, incarnation or epoch, or of a deleted lease, the user\'s write is not visible and the lease is unchanged', async (context) => {
      const hook = transactional(target, context);
      const [storage, other] = (await context.clients(2)) as [Storage, Storage];
      const g = context.group();
      const lease = await heldLease(storage, g, 'shard-1');
      // A renewal by the owner moves the version on: the worker's copy is stale.
      const stored = await update(other, g, lease, {}, 'a renewal');
      const cases: Array<[string, LeaseRecord]> = [
        ['at a stale version', lease],
        ['under another owner', { ...stored, owner: 'worker-2' }],
        ['under another incarnation', { ...stored, incarnation: 'incarnation-2' }],
        ['under another epoch', { ...stored, epoch: stored.epoch - 1 }],
      ];
      for (const [what, current] of cases) {
        const key = `${g}/${what}`;
        const outcome = await hook.checkpoint(storage, current, { ...leaseStateOf(current), checkpoint: '200' }, { key, value: 'written' });
        assert.deepEqual(plain(conflict(outcome, `a checkpoint ${what}`)), plain(stored), `a checkpoint ${what} is a conflict carrying the stored lease`);
        assert.equal(await hook.read(other, key), null, `a checkpoint ${what}: the user's write is not visible`);
        assert.deepEqual(plain(await other.getLease(g, 'shard-1')), plain(stored), `a checkpoint ${what}: the lease is unchanged`);
      }
      const gone = await heldLease(storage, g, 'shard-2');
      assert.equal((await other.deleteLease(g, 'shard-2', gone.version)).status, 'applied');
      const outcome = await hook.checkpoint(storage, gone, { ...leaseStateOf(gone), checkpoint: '200' }, { key: `${g}/deleted`, value: 'written' });
      assert.equal(conflict(outcome, 'a checkpoint of a deleted lease'), null, 'a checkpoint of a deleted lease is a conflict with no current lease');
      assert.equal(await hook.read(other, `${g}/deleted`), null, 'a checkpoint of a deleted lease: the user\'s write is not visible');
      assert.equal(await other.getLease(g, 'shard-2'), null, 'a checkpoint of a deleted lease creates nothing');
    });

    define(t, target, 'a transactional checkpoint whose connection is cut at COMMIT or before it is unknown or applied, never a conflict nor thrown once applied: the lease read back moved to the state written exactly when the user\'s write is visible', async (context) => {
      const hook = transactional(target, context);
      const { proxy, client, direct } = await proxied(target, context);
      const g = context.group();
      // Leases and writes of equal sizes, so that each checkpoint's answers are as long as the measured one.
      const leases = new Map<string, LeaseRecord>();
      for (const name of ['m1', 'm2', 'w1', 'c1', 'w2', 'c2']) leases.set(name, await heldLease(direct, g, `shard-${name}`));
      const run = (name: string): Promise<WriteResult<LeaseRecord>> => {
        const lease = leases.get(name) as LeaseRecord;
        return hook.checkpoint(client, lease, { ...leaseStateOf(lease), checkpoint: '200' }, { key: `${g}/${name}`, value: 'written' });
      };
      // The first checkpoint opens the client's connection; the second measures the answers of one checkpoint.
      applied(await run('m1'), 'a first checkpoint through the proxy');
      const start = proxy.answeredBytes;
      applied(await run('m2'), 'a checkpoint through the proxy');
      const size = proxy.answeredBytes - start;
      // Cut before the last byte of its answers (COMMIT's), and halfway through them (before COMMIT), each
      // after a checkpoint that opens a connection again.
      const cuts: Array<[string, string, number, string]> = [
        ['c1', 'w1', size - 1, 'cut at COMMIT'],
        ['c2', 'w2', Math.floor(size / 2), 'cut halfway through its answers'],
      ];
      for (const [cutName, warmName, afterBytes, what] of cuts) {
        applied(await run(warmName), `a checkpoint that opens a connection again, before the one ${what}`);
        const before = leases.get(cutName) as LeaseRecord;
        let cut = false;
        const armed = proxy.cutOnResponse({ afterBytes }).then(() => {
          cut = true;
        });
        const settled = await settles(run(cutName), `a checkpoint ${what}`);
        await Promise.race([armed, new Promise((resolve) => setTimeout(resolve, 50))]);
        proxy.disarm();
        assert.ok(cut, `a checkpoint ${what}: it returned before its last answer (${show(settled)}); its answers were not as long as the measured one`);
        const stored = await direct.getLease(g, before.leaseKey);
        const moved = stored !== null && stored.version === before.version + 1 && show(plain(leaseStateOf(stored))) === show(plain({ ...leaseStateOf(before), checkpoint: '200' }));
        const visible = await hook.read(direct, `${g}/${cutName}`);
        assert.ok(moved || show(plain(stored)) === show(plain(before)), `a checkpoint ${what}: the lease is the one written or the one before, got ${show(stored)}`);
        assert.equal(visible, moved ? 'written' : null, `a checkpoint ${what}: the user's write is visible exactly when the lease moved to the state written (moved: ${String(moved)})`);
        if ('thrown' in settled) {
          assert.ok(!moved, `a checkpoint ${what}: threw ${show(settled.thrown)} although it applied; an answer lost at COMMIT is unknown`);
          continue;
        }
        const outcome = settled.value;
        if (outcome.status === 'unknown') {
          assert.ok(outcome.error instanceof LeaseholdError, `a checkpoint ${what}: an unknown outcome carries a LeaseholdError, got ${show(outcome.error)}`);
        } else {
          assert.equal(outcome.status, 'applied', `a checkpoint ${what}: an answer lost at COMMIT is unknown (or applied, if the adapter proved it), got ${show(outcome)}`);
          assert.deepEqual(plain(outcome.record), plain(stored), `a checkpoint ${what}: an applied outcome is what is stored`);
        }
      }
    });
  });
}

// ---------------------------------------------------------------------------------------------------

/** Runs every group of the conformance suite. */
export function runConformanceSuite(t: TestApi, target: ConformanceTarget): void {
  leaseContract(t, target);
  leaderContract(t, target);
  rosterContract(t, target);
  limitsContract(t, target);
  concurrencyContract(t, target);
  monotonicityContract(t, target);
  badInputContract(t, target);
  corruptionContract(t, target);
  changeFeedContract(t, target);
  faultContract(t, target);
  readsWhileWritingContract(t, target);
  watcherReadsContract(t, target);
  transactionalCheckpointContract(t, target);
}
