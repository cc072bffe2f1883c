import { describe, expect, it } from 'vitest';
import { InvalidConfigError, LeaderElector, MemoryStorage, type LeaderElectorOptions } from '../src/index.js';
import { seededRandom, FaultyStorage, noFaults, VirtualScheduler } from '../src/testing/index.js';
import { run } from './support/virtual.js';

const GROUP = 'scheduler-service';


function world() {
  const scheduler = new VirtualScheduler();
  const store = new MemoryStorage();
  let seed = 1;
  const candidate = (workerId: string, options: Partial<LeaderElectorOptions> = {}) => {
    const clock = scheduler.clock();
    const faults = noFaults();
    const terms: number[] = [];
    const demotions: string[] = [];
    const elector = new LeaderElector({
      store: new FaultyStorage(store, clock, seededRandom(seed), faults),
      group: GROUP,
      workerId,
      clock,
      random: seededRandom(seed++),
      onElected: (term) => void terms.push(term),
      onDemoted: (term, reason) => void demotions.push(`${term}:${reason}`),
      ...options,
    });
    return { elector, faults, clock, terms, demotions };
  };
  return { scheduler, store, candidate };
}

describe('LeaderElector', () => {
  it('refuses invalid options with an InvalidConfigError naming the value', () => {
    const store = new MemoryStorage();
    expect(() => new LeaderElector({ store, group: '' })).toThrow(InvalidConfigError);
    expect(() => new LeaderElector({ store, group: 'g', leaseDurationMs: -1 })).toThrow('leaseDurationMs must be a positive number of milliseconds, got -1');
    expect(() => new LeaderElector({ store, group: 'g', leaseDurationMs: 1000, renewIntervalMs: 2000 })).toThrow('renewIntervalMs (2000) must be below leaseDurationMs (1000)');
    expect(() => new LeaderElector({ store: {} as never, group: 'g' })).toThrow('store must implement LeaderStore');
  });

  it('refuses an option it does not take with an InvalidConfigError naming it, and what it takes', () => {
    const store = new MemoryStorage();
    const options = { store, group: 'g', takeIntervalMs: 1000 } as unknown as LeaderElectorOptions;
    expect(() => new LeaderElector(options)).toThrow(InvalidConfigError);
    expect(() => new LeaderElector(options)).toThrow('[core] LeaderElector has no option "takeIntervalMs"; it takes store, group, workerId, leaseDurationMs,');
    const misspelt = { store, group: 'g', renewIntervalMS: 1000 } as unknown as LeaderElectorOptions;
    expect(() => new LeaderElector(misspelt)).toThrow('[core] LeaderElector has no option "renewIntervalMS"; did you mean renewIntervalMs?');
  });

  it('elects the first candidate for term 1 and no other while it renews', async () => {
    const { scheduler, candidate } = world();
    const first = candidate('first');
    await run(scheduler, first.elector.start());
    const second = candidate('second');
    await run(scheduler, second.elector.start());
    await scheduler.advance(120_000);
    expect(first.terms).toEqual([1]);
    expect(first.elector.isLeader()).toBe(true);
    expect(first.elector.term).toBe(1);
    expect(second.terms).toEqual([]);
    expect(second.elector.isLeader()).toBe(false);
    await run(scheduler, Promise.all([first.elector.stop(), second.elector.stop()]));
  });

  it('a leader cut off from the store demotes itself before a successor is elected for the next term', async () => {
    const { scheduler, candidate } = world();
    const first = candidate('first');
    await run(scheduler, first.elector.start());
    const successor = candidate('successor');
    await run(scheduler, successor.elector.start());
    const demotedAt: number[] = [];
    const electedAt: number[] = [];
    first.elector.on('demoted', () => demotedAt.push(scheduler.now));
    successor.elector.on('elected', () => electedAt.push(scheduler.now));
    first.faults.cutOff = true;
    await scheduler.advance(40_000);
    expect(first.demotions).toEqual(['1:self-fenced']);
    expect(successor.terms).toEqual([2]);
    expect(demotedAt[0] as number).toBeLessThan(electedAt[0] as number);
    await run(scheduler, Promise.all([first.elector.stop(), successor.elector.stop()]));
  });

  it('a renewal that applied but whose answer was lost does not make the leader step down', async () => {
    const { scheduler, candidate } = world();
    const leader = candidate('leader');
    await run(scheduler, leader.elector.start());
    leader.faults.ambiguousAfterApply = 1;
    await scheduler.advance(4_000); // one renewal applies, and its answer is lost
    leader.faults.ambiguousAfterApply = 0;
    await scheduler.advance(30_000);
    expect(leader.demotions).toEqual([]);
    expect(leader.elector.isLeader()).toBe(true);
    expect(leader.terms).toEqual([1]);
    await run(scheduler, leader.elector.stop());
  });

  it('writes metadata on the leader record only while it leads, keeping it across renewals and successors', async () => {
    const { scheduler, store, candidate } = world();
    const leader = candidate('leader');
    await run(scheduler, leader.elector.start());
    expect(await run(scheduler, leader.elector.annotate({ born: 'yes' }))).toBe(true);
    await scheduler.advance(10_000);
    expect((await store.getLeader(GROUP))?.metadata).toEqual({ born: 'yes' });
    const follower = candidate('follower');
    await run(scheduler, follower.elector.start());
    expect(await run(scheduler, follower.elector.annotate({ born: 'no' }))).toBe(false);
    await run(scheduler, leader.elector.stop());
    await scheduler.advance(10_000);
    expect(follower.terms).toEqual([2]);
    expect(follower.elector.record?.metadata).toEqual({ born: 'yes' });
    await run(scheduler, follower.elector.stop());
  });

  it('keeps a field another client wrote on the leader record at its version, holder and term unchanged, and every candidate sees it within a renew interval', async () => {
    const { scheduler, store, candidate } = world();
    const leader = candidate('leader');
    await run(scheduler, leader.elector.start());
    const follower = candidate('follower');
    await run(scheduler, follower.elector.start());
    await scheduler.advance(5_000);
    // An operator's tool: one conditional write on the version it read, keeping holder and term.
    const read = (await store.getLeader(GROUP))!;
    const written = await store.updateLeader(GROUP, read.version, { format: read.format, holder: read.holder, term: read.term, metadata: { ...read.metadata, marker: 'm1' } });
    expect(written.status).toBe('applied');
    await scheduler.advance(leader.elector.renewIntervalMs * 1.1);
    // The leader's next renewal conflicts, finds its own holder and term, adopts the record and renews on it.
    expect(leader.elector.isLeader()).toBe(true);
    expect(leader.terms).toEqual([1]);
    expect(leader.demotions).toEqual([]);
    expect(leader.elector.record?.metadata).toEqual({ marker: 'm1' });
    expect(follower.elector.record?.metadata).toEqual({ marker: 'm1' });
    await scheduler.advance(30_000);
    expect((await store.getLeader(GROUP))?.metadata).toEqual({ marker: 'm1' });
    await run(scheduler, Promise.all([leader.elector.stop(), follower.elector.stop()]));
  });

  it('an annotation written over another client\'s field keeps that field', async () => {
    const { scheduler, store, candidate } = world();
    const leader = candidate('leader');
    await run(scheduler, leader.elector.start());
    const read = (await store.getLeader(GROUP))!;
    expect((await store.updateLeader(GROUP, read.version, { format: read.format, holder: read.holder, term: read.term, metadata: { marker: 'm1' } })).status).toBe('applied');
    // The leader still holds the record it last wrote: its annotation conflicts, and is written again on the stored one.
    expect(await run(scheduler, leader.elector.annotate({ born: 'yes' }))).toBe(true);
    expect((await store.getLeader(GROUP))?.metadata).toEqual({ marker: 'm1', born: 'yes' });
    await run(scheduler, leader.elector.stop());
  });

  it('stops with a RecordFormatError on a leader record of a newer format, and never writes it', async () => {
    const { scheduler, store, candidate } = world();
    await store.createLeader({ group: GROUP, holder: 'future', term: 4, format: 2 });
    const before = await store.getLeader(GROUP);
    const old = candidate('old');
    const fatal: Error[] = [];
    old.elector.on('fatal', ({ error }) => void fatal.push(error));
    await run(scheduler, old.elector.start());
    await scheduler.advance(30_000);
    expect(fatal.map((error) => error.name)).toEqual(['RecordFormatError']);
    expect(await store.getLeader(GROUP)).toEqual(before);
    await run(scheduler, old.elector.stop());
  });

  it('fires the leadership signal when leadership ends', async () => {
    const { scheduler, candidate } = world();
    let leadership: AbortSignal | undefined;
    const leader = candidate('leader', { onElected: (_term, signal) => void (leadership = signal) });
    await run(scheduler, leader.elector.start());
    expect(leadership?.aborted).toBe(false);
    await run(scheduler, leader.elector.stop());
    expect(leadership?.aborted).toBe(true);
  });

  it('a leader that steps down on stop is succeeded at the next look, not after the lease duration', async () => {
    const { scheduler, store, candidate } = world();
    const first = candidate('first');
    await run(scheduler, first.elector.start());
    const second = candidate('second');
    await run(scheduler, second.elector.start());
    const stoppedAt = scheduler.now;
    await run(scheduler, first.elector.stop());
    expect(first.demotions).toEqual(['1:stepped-down']);
    expect((await store.getLeader(GROUP))?.holder).toBeNull();
    const electedAt: number[] = [];
    second.elector.on('elected', () => electedAt.push(scheduler.now));
    await scheduler.advance(second.elector.renewIntervalMs * 1.1);
    expect(second.terms).toEqual([2]);
    expect((electedAt[0] as number) - stoppedAt).toBeLessThan(second.elector.leaseDurationMs / 2);
    await run(scheduler, second.elector.stop());
  });

  it('a crashed leader is replaced after the record stays unchanged for the lease duration', async () => {
    const { scheduler, candidate } = world();
    const first = candidate('first');
    await run(scheduler, first.elector.start());
    const second = candidate('second');
    await run(scheduler, second.elector.start());
    first.clock.kill();
    const killedAt = scheduler.now;
    const electedAt: number[] = [];
    second.elector.on('elected', () => electedAt.push(scheduler.now));
    await scheduler.advance(30_000);
    expect(second.terms).toEqual([2]);
    expect((electedAt[0] as number) - killedAt).toBeGreaterThanOrEqual(second.elector.leaseDurationMs - second.elector.renewIntervalMs);
    await run(scheduler, second.elector.stop());
  });
});
