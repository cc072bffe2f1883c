/**
 * The conformance suite's rules on the transactional checkpoint, the group "transactional checkpoint"
 * (needs the target's `transactionalCheckpoint` hook).
 */
import assert from 'node:assert/strict';
import { LeaseholdError } from '../errors.js';
import { leaseStateOf } from '../storage.js';
import type { LeaseRecord, Storage, WriteResult } from '../storage.js';
import {
  applied,
  conflict,
  define,
  plain,
  proxied,
  settles,
  show,
  update,
  type ConformanceTarget,
  type Context,
  type TestApi,
  type TransactionalCheckpoint,
} from './conformance-kit.js';

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
