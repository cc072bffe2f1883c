import { describe, expect, it } from 'vitest';
import type { LeaseRecord, MemberRecord } from '../src/index.js';
import { RECORD_FORMAT } from '../src/adapter.js';
import {
  kclLeaseItemBytes,
  kclMonthly,
  leaseItemBytes,
  leaseJsonBytes,
  memberDocumentEntryBytes,
  memberJsonBytes,
  monthlyUsd,
  pagedReadUnits,
  readUnits,
  writeUnits,
} from '../bench/billing.js';
import { memberEntryBytes, numberBytes, rosterItemBytes } from '../bench/roster-size.js';

/** A worker id as long as a cloud host's default one: 54 bytes. */
const REAL_ID = 'ip-10-0-000-45.eu-west-1.compute.internal-12345-k3j9x2';

const lease: LeaseRecord = {
  group: 'bench',
  leaseKey: 'shard-000001',
  version: 3,
  format: RECORD_FORMAT,
  owner: 'w1',
  epoch: 2,
  checkpoint: null,
  parentKeys: [],
  incarnation: 'abcd',
  metadata: {},
};
const leaseJson = JSON.stringify({ format: RECORD_FORMAT, owner: 'w1', epoch: 2, checkpoint: null, parentKeys: [], incarnation: 'abcd', metadata: {} });

const member: MemberRecord = {
  group: 'bench',
  workerId: 'w1',
  version: 7,
  format: RECORD_FORMAT,
  incarnation: 'abcd',
  leaseDurationMs: 10_000,
  status: 'alive',
  held: 100,
  changes: 1,
  requests: [],
  metadata: {},
};
const memberJson = JSON.stringify({ format: RECORD_FORMAT, incarnation: 'abcd', leaseDurationMs: 10_000, status: 'alive', held: 100, changes: 1, requests: [], metadata: {} });

describe('DynamoDB item sizes and units, by the rules AWS documents', () => {
  it.each([
    [1, 2],
    [7, 2],
    [12, 2],
    [123, 3],
    [12_345, 4],
    [100_000, 2],
    [123_456, 4],
    [1_234_567, 5],
    [10.5, 3],
  ])('the number %d is billed as %d bytes (a byte per two digits paired from the decimal point, plus one)', (value, size) => {
    expect(numberBytes(value)).toBe(size);
  });

  it.each([
    [1, 1],
    [1_024, 1],
    [1_025, 2],
    [27_020, 27],
  ])('a write of an item of %d bytes costs %d write units (1 KB each)', (size, units) => {
    expect(writeUnits(size)).toBe(units);
  });

  it.each([
    [1, 1],
    [4_096, 1],
    [4_097, 2],
    [27_020, 7],
  ])('a strongly consistent read of an item of %d bytes costs %d read units (4 KB each)', (size, units) => {
    expect(readUnits(size)).toBe(units);
  });

  it.each([
    { items: [] as number[], units: 0 },
    { items: [100, 100], units: 1 },
    { items: [3_000, 3_000], units: 2 },
    // 262 items fill the first 1 MB page (1,048,000 bytes: 256 units), the other 38 the second (38 units);
    // billed as one sum it would be 293.
    { items: Array.from({ length: 300 }, () => 4_000), units: 294 },
  ])('a query of $items.length items costs $units read units: their sizes summed and rounded up per 4 KB, per page', ({ items, units }) => {
    expect(pagedReadUnits(items)).toBe(units);
  });

  it('a lease item is its key, version, epoch, state JSON and a 36-character write id', () => {
    // pk bench, sk lease:shard-000001, version 3, epoch 2, state, writeId.
    expect(leaseItemBytes(lease)).toBe(2 + 5 + 2 + 18 + 7 + 2 + 5 + 2 + 5 + Buffer.byteLength(leaseJson) + 7 + 36);
    expect(Buffer.byteLength(leaseJson)).toBe(leaseJsonBytes(lease) - 'shard-000001'.length);
  });

  it("a member on the roster item is v:<workerId> and m:<workerId>, a map of its state JSON and a 16-character write id", () => {
    expect(memberEntryBytes(member)).toBe(4 + 2 + 4 + 3 + (1 + 1 + Buffer.byteLength(memberJson)) + (1 + 1 + 16));
    expect(memberEntryBytes(member, REAL_ID) - memberEntryBytes(member)).toBe(2 * (REAL_ID.length - 2));
  });

  it('the roster item is its key, hv and every member', () => {
    const other = { ...member, workerId: 'w2', version: 12_345 };
    // pk bench, sk roster, hv 12,345 (4 bytes).
    expect(rosterItemBytes('bench', [member, other])).toBe(2 + 5 + 2 + 6 + 2 + 4 + memberEntryBytes(member) + memberEntryBytes(other));
  });
});

describe('Redis and Postgres: the bytes of the stored JSON', () => {
  it('Redis keeps a member as a field of the roster hash: its worker id and its state JSON', () => {
    expect(memberJsonBytes(member)).toBe(2 + Buffer.byteLength(memberJson));
  });

  it('Postgres keeps a member as an entry of the roster document, its state as a JSON string', () => {
    const entry = `"w1":${JSON.stringify({ v: 7, s: memberJson })},`;
    expect(memberDocumentEntryBytes(member)).toBe(Buffer.byteLength(entry));
  });
});

describe("KCL 2.x's lease table and the monthly bill", () => {
  it('a KCL lease item before its first checkpoint, owned by a 54-byte worker id, is 328 bytes', () => {
    expect(kclLeaseItemBytes(0, REAL_ID)).toBe(328);
  });

  it.each([
    { wru: 1_000, rru: 0, usd: 27 },
    { wru: 0, rru: 1_000, usd: 5.4 },
    { wru: 18_000, rru: 0, usd: 486 },
  ])('$wru write and $rru read units a minute cost $usd dollars a month on demand', ({ wru, rru, usd }) => {
    expect(monthlyUsd(wru, rru)).toBeCloseTo(usd, 6);
  });

  it('KCL at 10 x 1,000: 18,000 renewals a minute, and 10 workers scanning 81 read units 3 times a minute', () => {
    const kcl = kclMonthly(10, 1_000, () => REAL_ID);
    expect(kcl.wruPerMinute).toBe(18_000);
    expect(kcl.tableBytes).toBeGreaterThan(327_000);
    expect(kcl.rruPerMinute).toBe(10 * 3 * pagedReadUnits(Array.from({ length: 1_000 }, (_, i) => kclLeaseItemBytes(i, REAL_ID))));
    expect(kcl.writesUsd).toBeCloseTo(486, 6);
  });
});
