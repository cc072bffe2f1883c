/**
 * The conformance suite's rules for the read of many leases by key (`getLeases`, see `storage.ts`):
 * optional. `runConformanceSuite` runs them with the rest, in the group "reads of many leases". An adapter
 * without it has each rule reported as skipped, its skip note saying why, as the watchers' reads are for
 * an adapter without them. Its reads raced by other clients' writes are rules of the groups "monotonicity"
 * and "reads while others write", in `conformance-concurrency.ts`. They use the harness and fixtures the
 * rule files share, `conformance-kit.ts`.
 */
import assert from 'node:assert/strict';
import { LeaseholdError } from '../errors.js';
import { limits } from '../validation.js';
import type { LeaseListing, LeaseRecord, Storage } from '../storage.js';
import {
  applied,
  assertInvalidInput,
  badNames,
  createMany,
  define,
  full,
  listed,
  plain,
  reading,
  show,
  update,
  type ConformanceTarget,
  type Reading,
  type TestApi,
} from './conformance-kit.js';

/** The leases `getLeases` reads, by key, checking that none is corrupt. */
async function readLeases(storage: Reading, group: string, leaseKeys: readonly string[]): Promise<LeaseRecord[]> {
  const listing = await storage.getLeases(group, leaseKeys);
  assert.deepEqual(listing.corrupt, [], 'no lease named is corrupt');
  return sortedLeases(listing);
}

function sortedLeases(listing: LeaseListing): LeaseRecord[] {
  return [...listing.leases].sort((a, b) => (a.leaseKey < b.leaseKey ? -1 : a.leaseKey > b.leaseKey ? 1 : 0));
}

/** What `getLease` gives for each key, in key order, leaving out the keys with no lease. */
async function oneByOne(storage: Storage, group: string, leaseKeys: readonly string[]): Promise<LeaseRecord[]> {
  const leases = await Promise.all([...new Set(leaseKeys)].map((leaseKey) => storage.getLease(group, leaseKey)));
  return sortedLeases({ leases: leases.filter((lease): lease is LeaseRecord => lease !== null), corrupt: [] });
}

/** Group names beside `base` that a key scheme could confuse with it: prefixes, extensions, separators. */
function groupsBeside(base: string): string[] {
  const extensions = [':x', ':', '#', '{x}', '}', '*', '%', ' 2', '/leases', ':leases'];
  return [base, base.slice(0, -1), ...extensions.map((extension) => `${base}${extension}`)];
}

function assertCorruptLease(error: unknown, group: string, leaseKey: string): void {
  assert.ok(error instanceof LeaseholdError, `expected a CorruptRecordError, got ${show(error)}`);
  const typed = error as LeaseholdError & { group?: unknown; leaseKey?: unknown };
  assert.deepEqual([typed.name, typed.code, typed.group, typed.leaseKey], ['CorruptRecordError', 'ERR_CORRUPT_RECORD', group, leaseKey], typed.message);
}

/**
 * The read of many leases by key: `getLeases` reads the named leases exactly as `getLease` gives them,
 * strongly consistent, each once, reports a corrupt one by key without losing the others, and refuses bad
 * input before anything is sent.
 */
export function leaseReadsContract(t: TestApi, target: ConformanceTarget): void {
  t.describe(`${target.name}: reads of many leases`, () => {
    define(t, target, 'getLeases reads exactly the named leases as getLease gives them, with the same versions and state, and leaves out keys that never had a lease and deleted leases', async (context) => {
      const [storage] = (await context.clients(1)) as [Storage];
      const client = reading(storage, context);
      const g = context.group();
      assert.deepEqual(plain(await client.getLeases(g, ['a', 'b'])), { leases: [], corrupt: [] }, 'a group with no lease');
      applied(await client.createLease({ group: g, leaseKey: 'full', ...full }), 'create full');
      const moved = await update(client, g, applied(await client.createLease({ group: g, leaseKey: 'shard/ü:{1}' }), 'create'), { owner: 'w1', epoch: 3, checkpoint: '42' }, 'take');
      const gone = applied(await client.createLease({ group: g, leaseKey: 'gone' }), 'create gone');
      assert.equal((await client.deleteLease(g, 'gone', gone.version)).status, 'applied', 'delete gone');
      const again = applied(await client.createLease({ group: g, leaseKey: 'again' }), 'create again');
      assert.equal((await client.deleteLease(g, 'again', again.version)).status, 'applied', 'delete again');
      applied(await client.createLease({ group: g, leaseKey: 'again', owner: 'w2' }, { recreate: true }), 'recreate again');
      await createMany(client, g, ['not-named-1', 'not-named-2']);
      const named = ['full', 'shard/ü:{1}', 'gone', 'never', 'again'];
      assert.deepEqual(plain(await readLeases(client, g, named)), plain(await oneByOne(client, g, named)), 'the leases named, as getLease gives them; none for a key that never had one or was deleted');
      assert.equal((await readLeases(client, g, ['shard/ü:{1}']))[0]?.version, moved.version, 'the version of the last write');
      assert.deepEqual(plain(await client.getLeases(g, ['gone'])), { leases: [], corrupt: [] }, 'a deleted lease alone');
      assert.deepEqual(plain(await client.getLeases(g, [])), { leases: [], corrupt: [] }, 'no key');
    });

    define(t, target, 'a lease key named more than once in one getLeases call is read once', async (context) => {
      const [storage] = (await context.clients(1)) as [Storage];
      const client = reading(storage, context);
      const g = context.group();
      await createMany(client, g, ['a', 'b']);
      const listing = await client.getLeases(g, ['a', 'b', 'a', 'a', 'absent', 'absent', 'b']);
      assert.deepEqual(plain(sortedLeases(listing)), plain(await oneByOne(client, g, ['a', 'b'])), show(listing.leases.map((lease) => lease.leaseKey)));
    });

    define(t, target, `getLeases reads ${limits.maxLeasesPerRead} leases of a few KiB each in one call, and as many again as they change`, async (context) => {
      const [storage] = (await context.clients(1)) as [Storage];
      const client = reading(storage, context);
      const g = context.group();
      const keys = Array.from({ length: limits.maxLeasesPerRead }, (_, i) => `lease-${String(i).padStart(3, '0')}`);
      await createMany(client, g, keys, (leaseKey) => ({ checkpoint: 'c'.repeat(limits.maxCheckpointBytes), metadata: { note: `${leaseKey} ${'ü'.repeat(1000)}` } }));
      const created = sortedLeases({ leases: await listed(client, g), corrupt: [] });
      assert.deepEqual(plain(await readLeases(client, g, [...keys].reverse())), plain(created), 'every lease, as listed');
      const moved = await Promise.all(created.filter((_, i) => i % 3 === 0).map((lease) => update(client, g, lease, { owner: 'w', epoch: lease.epoch + 1 }, `take ${lease.leaseKey}`)));
      const now = await readLeases(client, g, keys);
      assert.deepEqual(plain(now), plain(sortedLeases({ leases: await listed(client, g), corrupt: [] })), 'every lease at its last write');
      assert.equal(now.filter((lease) => lease.owner === 'w').length, moved.length, 'the leases written since are read at their new owner');
    });

    define(t, target, 'getLeases reports a corrupt lease in corrupt, naming its key, and still reads every other lease named', async (context) => {
      const [storage] = (await context.clients(1)) as [Storage];
      const client = reading(storage, context);
      if (!target.corruptLease) context.notChecked(`not checked: ${target.notApplicable?.corruptLease ?? 'the target has no corruptLease hook to write a corrupt record'}`);
      const g = context.group();
      await createMany(client, g, ['a', 'bad', 'c', 'd']);
      const before = await listed(client, g);
      await (target.corruptLease as NonNullable<ConformanceTarget['corruptLease']>)(g, 'bad');
      const listing = await client.getLeases(g, ['a', 'bad', 'c', 'absent']);
      // Both in key order: a listing is in any order.
      assert.deepEqual(plain(sortedLeases(listing)), plain(sortedLeases({ leases: before.filter((lease) => ['a', 'c'].includes(lease.leaseKey)), corrupt: [] })), 'every other lease named reads fine');
      assert.equal(listing.corrupt.length, 1, `one CorruptRecordError, for bad: ${show(listing.corrupt)}`);
      assertCorruptLease(listing.corrupt[0], g, 'bad');
      assert.deepEqual(plain(await readLeases(client, g, ['d'])), plain(before.filter((lease) => lease.leaseKey === 'd')), 'a corrupt lease not named is not reported');
    });

    define(t, target, 'a client sees a lease another client wrote at once through getLeases: no client serves it from a cache of its own', async (context) => {
      const [writer, reader] = (await context.clients(2)) as [Storage, Storage];
      const client = reading(reader, context);
      const g = context.group();
      const named = ['k1', 'k2'];
      assert.deepEqual(await readLeases(client, g, named), []);
      const created = applied(await writer.createLease({ group: g, leaseKey: 'k1' }), 'create');
      assert.deepEqual(plain(await readLeases(client, g, named)), [plain(created)], 'the reader sees the create');
      const moved = await update(writer, g, created, { owner: 'w', epoch: 1 }, 'take');
      assert.deepEqual(plain(await readLeases(client, g, named)), [plain(moved)], 'the reader sees the update');
      const other = applied(await writer.createLease({ group: g, leaseKey: 'k2' }), 'create k2');
      assert.deepEqual(plain(await readLeases(client, g, named)), plain([moved, other]), 'the reader sees the second create');
      assert.equal((await writer.deleteLease(g, 'k1', moved.version)).status, 'applied');
      assert.deepEqual(plain(await readLeases(client, g, named)), [plain(other)], 'the reader sees the delete');
    });

    define(t, target, "getLeases reads only its own group's leases, even when one group's name is a prefix or an extension of another's", async (context) => {
      const [storage] = (await context.clients(1)) as [Storage];
      const client = reading(storage, context);
      const groups = groupsBeside(context.group());
      const created = await Promise.all(
        groups.map(async (g, i) => [
          applied(await client.createLease({ group: g, leaseKey: 'shared', owner: `of-${i}` }), `create shared in ${g}`),
          applied(await client.createLease({ group: g, leaseKey: `only-${i}`, owner: `of-${i}` }), `create only-${i}`),
        ]),
      );
      for (const [i, g] of groups.entries()) {
        const neighbours = [i - 1, i + 1].filter((j) => j >= 0 && j < groups.length).map((j) => `only-${j}`);
        assert.deepEqual(plain(await readLeases(client, g, ['shared', `only-${i}`, ...neighbours])), plain(sortedLeases({ leases: created[i] as LeaseRecord[], corrupt: [] })), `group ${JSON.stringify(g)} reads only its own leases`);
      }
    });

    define(
      t,
      target,
      `invalid input to getLeases is refused with an InvalidInputError before anything is sent: ${limits.maxLeasesPerRead + 1} keys, a bad key, keys that are no array, a bad group`,
      async (context) => {
        const [storage] = (await context.clients(1)) as [Storage];
        const client = reading(storage, context);
        const g = context.group();
        await createMany(client, g, ['k1']);
        const tooMany = Array.from({ length: limits.maxLeasesPerRead + 1 }, (_, i) => `k${i}`);
        await assert.rejects(client.getLeases(g, tooMany), (error) => assertInvalidInput(error, String(tooMany.length)), `${tooMany.length} keys`);
        await assert.rejects(client.getLeases(g, 'k1' as unknown as string[]), (error) => assertInvalidInput(error, 'array'), 'keys that are no array');
        await assert.rejects(client.getLeases(g, ['k1', 5 as unknown as string]), (error) => assertInvalidInput(error, 'lease key'), 'a key that is no string');
        for (const [what, name, mentions] of badNames) {
          const check = (error: unknown): true => assertInvalidInput(error, mentions);
          await assert.rejects(client.getLeases(g, ['k1', name]), check, `getLeases of ${what} as a lease key`);
          await assert.rejects(client.getLeases(name, ['k1']), check, `getLeases in ${what}`);
        }
        assert.equal((await client.getLease(g, 'k1'))?.version, 1, 'nothing written');
      },
    );
  });
}
