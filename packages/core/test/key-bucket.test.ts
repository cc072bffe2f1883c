import { describe, expect, it } from 'vitest';
import { InvalidInputError } from '../src/index.js';
import { keyBucket } from '../src/adapter.js';

describe('keyBucket', () => {
  it('gives the same bucket for a name in every release: the values stored layouts were written with', () => {
    // Fixed values: a change here moves records of every stored group that spreads keys with it.
    expect(['w1', 'w2', 'w3', 'leader', 'digest', '', 'é', 'ip-10-0-0-1.eu-west-1.compute.internal-48213-000001'].map((name) => keyBucket(name, 4))).toEqual([
      3, 3, 1, 2, 2, 3, 3, 0,
    ]);
    expect(keyBucket('w1', 1)).toBe(0);
  });

  it('spreads names that differ only in their last characters evenly: 4,000 host names over 4 buckets, each within 10% of a quarter', () => {
    const counts = [0, 0, 0, 0];
    for (let i = 0; i < 4_000; i++) counts[keyBucket(`ip-10-0-${Math.floor(i / 250)}-${i % 250}.eu-west-1.compute.internal-48213-${String(i).padStart(6, '0')}`, 4)]! += 1;
    for (const count of counts) expect(Math.abs(count - 1_000)).toBeLessThan(100);
  });

  it('hashes UTF-8 bytes, so that a name outside the Basic Multilingual Plane lands where its bytes say', () => {
    expect(keyBucket('😀', 1 << 30)).toBe(keyBucket('\u{1F600}', 1 << 30));
    expect(keyBucket('😀', 1 << 30)).not.toBe(keyBucket('\uD83D', 1 << 30));
  });

  it('refuses a bucket count that is not a positive integer, naming it', () => {
    for (const bad of [0, -1, 1.5, Number.NaN, 2 ** 32]) expect(() => keyBucket('w', bad)).toThrow(InvalidInputError);
    expect(() => keyBucket('w', 0)).toThrow('[core] buckets must be an integer from 1 to 4294967295, got 0');
  });
});
