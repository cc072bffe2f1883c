/**
 * The conformance suite's lease rules, the group "lease contract": every operation of `CheckpointStorage`
 * (create, update, delete, get, list), its applied and conflict paths, and records round-tripping.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { leaderStateOf, leaseStateOf, RECORD_FORMAT } from '../storage.js';
import type { LeaseRecord, LeaseState, LeaseUpdate, Storage } from '../storage.js';
import {
  applied,
  byKey,
  conflict,
  createMany,
  define,
  full,
  laterFields,
  listed,
  plain,
  update,
  type ConformanceTarget,
  type TestApi,
} from './conformance-kit.js';

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
