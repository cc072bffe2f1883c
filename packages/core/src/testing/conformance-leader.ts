/**
 * The conformance suite's leader rules, the group "leader contract": every operation of `LeaderStore`.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { leaderStateOf, RECORD_FORMAT } from '../storage.js';
import type { Storage } from '../storage.js';
import {
  applied,
  conflict,
  define,
  laterFields,
  listed,
  plain,
  type ConformanceTarget,
  type TestApi,
} from './conformance-kit.js';

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
