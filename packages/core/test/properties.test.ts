import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { compareNumericPositions, type LeaseState, type MemberState } from '../src/index.js';
import { decodeLease, decodeMember, encodeLeaseState, encodeMemberState, limits } from '../src/adapter.js';

const sequence = fc.bigInt({ min: 0n, max: 2n ** 128n - 1n });
const position = fc.oneof(
  sequence.map((n) => n.toString()),
  fc.tuple(sequence, fc.nat({ max: 10_000 })).map(([n, sub]) => `${n}:${sub}`),
  fc.constantFrom('TRIM_HORIZON', 'SHARD_END'),
  fc.nat().map((ms) => `AT_TIMESTAMP:${ms}`),
);

describe('position order', () => {
  it('is a total order: antisymmetric, transitive, and zero only for equal positions', () => {
    fc.assert(
      fc.property(position, position, position, (a, b, c) => {
        expect(Math.sign(compareNumericPositions(a, b)) + Math.sign(compareNumericPositions(b, a))).toBe(0);
        expect(compareNumericPositions(a, b) === 0).toBe(a === b);
        if (compareNumericPositions(a, b) <= 0 && compareNumericPositions(b, c) <= 0) {
          expect(compareNumericPositions(a, c)).toBeLessThanOrEqual(0);
        }
      }),
    );
  });

  it('orders 128-bit sequence numbers as integers, not as strings, and a whole record after its sub-records', () => {
    fc.assert(
      fc.property(sequence, sequence, fc.nat({ max: 1000 }), (x, y, sub) => {
        expect(Math.sign(compareNumericPositions(x.toString(), y.toString()))).toBe(x < y ? -1 : x > y ? 1 : 0);
        expect(compareNumericPositions(`${x}:${sub}`, x.toString())).toBeLessThan(0);
        expect(compareNumericPositions('TRIM_HORIZON', x.toString())).toBeLessThan(0);
        expect(compareNumericPositions('SHARD_END', `${x}:${sub}`)).toBeGreaterThan(0);
      }),
    );
  });
});

const name = fc.string({ minLength: 1, maxLength: 40 }).filter((value) => !value.includes('\u0000') && value.isWellFormed());
const state: fc.Arbitrary<LeaseState> = fc.record({
  format: fc.constant(1),
  owner: fc.option(name, { nil: null }),
  epoch: fc.nat(),
  checkpoint: fc.option(position, { nil: null }),
  parentKeys: fc.array(name, { maxLength: 3 }),
  incarnation: fc.option(name, { nil: null }),
  metadata: fc.dictionary(name, fc.string({ maxLength: 50 }), { maxKeys: 5 }),
});

describe('the lease state codec', () => {
  it('decodes exactly what it encoded, for any valid state', () => {
    fc.assert(
      fc.property(state, fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }), (original, version) => {
        const decoded = decodeLease('group', 'key', version, encodeLeaseState(original));
        expect(decoded).toEqual({ group: 'group', leaseKey: 'key', version, ...original });
      }),
    );
  });
});

const member: fc.Arbitrary<MemberState> = fc
  .record({
    format: fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }),
    incarnation: name,
    leaseDurationMs: fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }),
    status: fc.constantFrom('alive' as const, 'dead' as const),
    held: fc.maxSafeNat(),
    changes: fc.maxSafeNat(),
    requests: fc.array(fc.record({ leaseKey: name, from: name }), { maxLength: limits.maxRequests }),
    metadata: fc.dictionary(name, fc.string({ maxLength: 50 }), { maxKeys: 5 }),
  })
  .filter((state) => Buffer.byteLength(encodeMemberState(state)) <= limits.maxMemberBytes);

describe('the member state codec', () => {
  it('decodes exactly what it encoded, for any valid member state', () => {
    fc.assert(
      fc.property(member, fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }), (original, version) => {
        const decoded = decodeMember('group', 'worker', version, encodeMemberState(original));
        expect(decoded).toEqual({ group: 'group', workerId: 'worker', version, ...original });
      }),
    );
  });
});
