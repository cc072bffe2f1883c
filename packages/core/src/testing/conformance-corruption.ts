/**
 * The conformance suite's rules on records that cannot be read back, the group "corrupt records" (needs
 * the target's `corruptLease` and `corruptMember` hooks).
 */
import assert from 'node:assert/strict';
import { LeaseholdError } from '../errors.js';
import { leaseStateOf } from '../storage.js';
import type { DeleteResult, LeaseRecord, LeaseState, MemberRecord, Storage, WriteResult } from '../storage.js';
import {
  applied,
  assertCorruptMember,
  byKey,
  byWorker,
  corruptMemberHook,
  createMany,
  define,
  heartbeat,
  join,
  listed,
  members,
  memberState,
  plain,
  show,
  type ConformanceTarget,
  type Context,
  type TestApi,
} from './conformance-kit.js';

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
