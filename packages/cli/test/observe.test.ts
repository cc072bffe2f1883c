import { MemoryStorage } from '@leasehold/core';
import { describe, expect, it } from 'vitest';
import { Observer, observeLiveness } from '../src/observe.js';

describe('Observer', () => {
  it('gives no age on the first sighting, a lower bound while the version stays, and the time since a change after one', () => {
    let now = 1000;
    const observer = new Observer(() => now);

    expect(observer.observe([{ leaseKey: 'a', version: 1 }]).get('a')).toEqual({ ageMs: null, atLeastMs: 0 });
    now = 1500;
    expect(observer.observe([{ leaseKey: 'a', version: 1 }]).get('a')).toEqual({ ageMs: null, atLeastMs: 500 });
    now = 1700;
    expect(observer.observe([{ leaseKey: 'a', version: 2 }]).get('a')).toEqual({ ageMs: 0, atLeastMs: 0 });
    now = 2000;
    expect(observer.observe([{ leaseKey: 'a', version: 2 }]).get('a')).toEqual({ ageMs: 300, atLeastMs: 300 });
    expect(observer.changed('a')).toBe(true);
  });

  it('starts over for a lease that disappeared from a listing', () => {
    let now = 0;
    const observer = new Observer(() => now);
    observer.observe([{ leaseKey: 'a', version: 1 }]);
    observer.observe([{ leaseKey: 'a', version: 2 }]);
    observer.observe([]);
    now = 10;

    expect(observer.observe([{ leaseKey: 'a', version: 3 }]).get('a')).toEqual({ ageMs: null, atLeastMs: 0 });
    expect(observer.changed('a')).toBe(false);
  });
});

describe('observeLiveness', () => {
  it('decides at once that a group none of whose leases has an owner is not live', async () => {
    const storage = new MemoryStorage();
    await storage.createLease({ group: 'g', leaseKey: 'a' });
    const sleeps: number[] = [];

    const verdict = await observeLiveness(storage, 'g', { observeMs: 10_000, pollMs: 1000, now: () => 0, sleep: async (ms) => void sleeps.push(ms) });

    expect(verdict).toMatchObject({ live: false, owned: 0 });
    expect(sleeps).toEqual([]);
  });

  it('watches an owned lease for observeMs and finds it not live when its version never moves', async () => {
    const storage = new MemoryStorage();
    await storage.createLease({ group: 'g', leaseKey: 'a', owner: 'w' });
    let now = 0;

    const verdict = await observeLiveness(storage, 'g', { observeMs: 2500, pollMs: 1000, now: () => now, sleep: async (ms) => void (now += ms) });

    expect(verdict).toMatchObject({ live: false, owned: 1 });
    expect(now).toBe(2500);
  });

  it('finds the group live as soon as an owned lease is renewed, naming the lease', async () => {
    const storage = new MemoryStorage();
    const created = await storage.createLease({ group: 'g', leaseKey: 'a', owner: 'w' });
    if (created.status !== 'applied') throw new Error('seed failed');
    let now = 0;
    const renew = async (ms: number): Promise<void> => {
      now += ms;
      if (now === 2000) await storage.updateLeases('g', [{ leaseKey: 'a', expectedVersion: 1, next: created.record }]);
    };

    const verdict = await observeLiveness(storage, 'g', { observeMs: 12_000, pollMs: 1000, now: () => now, sleep: renew });

    expect(verdict.live).toBe(true);
    expect(verdict.renewed.map((lease) => lease.leaseKey)).toEqual(['a']);
    expect(now).toBe(2000);
  });
  it('gives the corrupt leases of its last listing, which count as neither owned nor renewed', async () => {
    const storage = new MemoryStorage();
    await storage.createLease({ group: 'g', leaseKey: 'a', owner: 'w' });
    await storage.createLease({ group: 'g', leaseKey: 'b', owner: 'w' });
    storage.corrupt('g', 'b');
    let now = 0;

    const verdict = await observeLiveness(storage, 'g', { observeMs: 1000, pollMs: 500, now: () => now, sleep: async (ms) => void (now += ms) });

    expect(verdict).toMatchObject({ live: false, owned: 1 });
    expect(verdict.leases.map((lease) => lease.leaseKey)).toEqual(['a']);
    expect(verdict.corrupt.map((error) => error.leaseKey)).toEqual(['b']);
  });
});
