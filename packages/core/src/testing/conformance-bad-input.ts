/**
 * The conformance suite's rules on invalid input, the group "bad input": refused with a typed error
 * before anything is written.
 */
import assert from 'node:assert/strict';
import { limits } from '../validation.js';
import { leaseStateOf, RECORD_FORMAT } from '../storage.js';
import type { LeaseChangeKind, LeaseState, Storage } from '../storage.js';
import {
  applied,
  assertInvalidInput,
  badNames,
  define,
  full,
  listed,
  plain,
  type ConformanceTarget,
  type TestApi,
} from './conformance-kit.js';

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
        if (storage.subscribe) await assert.rejects(storage.subscribe(g, () => undefined, { addressedTo: ['w', bad] }), check);
        assert.deepEqual(plain(await listed(storage, g)), [plain(good)], 'one bad update refuses its whole batch');
        assert.equal(await storage.getLeader(g), null);
      });
    }

    define(t, target, 'a subscription addressed to too many owners, or with an address that is no list, is refused', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      if (!storage.subscribe) return;
      const g = group();
      const many = Array.from({ length: limits.maxWatchedMembers + 1 }, (_, i) => `w${i}`);
      await assert.rejects(storage.subscribe(g, () => undefined, { addressedTo: many }), (error) => assertInvalidInput(error, String(many.length)));
      await assert.rejects(storage.subscribe(g, () => undefined, { addressedTo: 'w1' as unknown as string[] }), (error) => assertInvalidInput(error, 'w1'));
      await assert.rejects(storage.subscribe(g, () => undefined, 'w1' as unknown as { addressedTo: string[] }), (error) => assertInvalidInput(error, 'w1'));
      const most = await storage.subscribe(g, () => undefined, { addressedTo: many.slice(1) });
      await most.close();
    });

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
