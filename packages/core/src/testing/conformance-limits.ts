/**
 * The conformance suite's rules on sizes, the group "listing, names and limits": listings complete at every
 * size, batches of any size, and names and values at the contract's limits.
 */
import assert from 'node:assert/strict';
import { limits } from '../validation.js';
import { leaderStateOf, leaseStateOf } from '../storage.js';
import type { LeaderState, LeaseRecord, LeaseState, Storage } from '../storage.js';
import {
  applied,
  byKey,
  chunks,
  conflict,
  createMany,
  define,
  listed,
  plain,
  sized,
  type ConformanceTarget,
  type TestApi,
} from './conformance-kit.js';

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

/** An object whose JSON is exactly `bytes` UTF-8 bytes: `fields` plus one ASCII filler field. */
function jsonOfSize<T extends Record<string, unknown>>(bytes: number, fields: T, filler: string): T {
  const bare = Buffer.byteLength(JSON.stringify({ ...fields, [filler]: '' }));
  const value = { ...fields, [filler]: 'f'.repeat(bytes - bare) };
  assert.equal(Buffer.byteLength(JSON.stringify(value)), bytes);
  return value;
}

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
