import { MemoryStorage, type MemberState, type Roster } from '@leasehold/core';
import { RECORD_FORMAT } from '@leasehold/core/adapter';
import { describe, expect, it } from 'vitest';
import { watchGroup } from '../src/commands/status.js';
import { memberLiveness, Observer, ownerLiveness, watchRoster } from '../src/observe.js';

function member(overrides: Partial<MemberState> = {}): MemberState {
  return { format: RECORD_FORMAT, incarnation: 'i1', leaseDurationMs: 1000, status: 'alive', held: 0, changes: 0, requests: [], metadata: {}, ...overrides };
}

/** A clock the test moves, and a sleep that moves it (running `onSleep` at each new time). */
function fakeTime(onSleep: (now: number) => Promise<void> = async () => undefined): {
  now: () => number;
  sleep: (ms: number) => Promise<void>;
  pause: (ms: number) => Promise<boolean>;
  advance: (ms: number) => void;
  sleeps: number[];
} {
  let now = 0;
  const sleeps: number[] = [];
  const sleep = async (ms: number): Promise<void> => {
    sleeps.push(ms);
    now += ms;
    await onSleep(now);
  };
  return {
    now: () => now,
    sleeps,
    sleep,
    pause: async (ms) => {
      await sleep(ms);
      return true;
    },
    advance: (ms) => {
      now += ms;
    },
  };
}

/** A memory store whose first roster read answers `ms` late on `time`'s clock, as on a busy machine or a slow link. */
class SlowFirstRead extends MemoryStorage {
  #slowMs: number;

  constructor(
    slowMs: number,
    private readonly time: { advance(ms: number): void },
  ) {
    super();
    this.#slowMs = slowMs;
  }

  override async getRoster(group: string): Promise<Roster> {
    const roster = await super.getRoster(group);
    this.time.advance(this.#slowMs);
    this.#slowMs = 0;
    return roster;
  }
}

describe('Observer', () => {
  it('gives no age on the first sighting, a lower bound while the version stays, and the time since a change after one', () => {
    let now = 1000;
    const observer = new Observer(() => now);

    expect(observer.observe([{ key: 'a', version: 1 }]).get('a')).toEqual({ ageMs: null, atLeastMs: 0 });
    now = 1500;
    expect(observer.observe([{ key: 'a', version: 1 }]).get('a')).toEqual({ ageMs: null, atLeastMs: 500 });
    now = 1700;
    expect(observer.observe([{ key: 'a', version: 2 }]).get('a')).toEqual({ ageMs: 0, atLeastMs: 0 });
    now = 2000;
    expect(observer.observe([{ key: 'a', version: 2 }]).get('a')).toEqual({ ageMs: 300, atLeastMs: 300 });
    expect(observer.changed('a')).toBe(true);
  });

  it('starts over for a record that disappeared from a read', () => {
    let now = 0;
    const observer = new Observer(() => now);
    observer.observe([{ key: 'a', version: 1 }]);
    observer.observe([{ key: 'a', version: 2 }]);
    observer.observe([]);
    now = 10;

    expect(observer.observe([{ key: 'a', version: 3 }]).get('a')).toEqual({ ageMs: null, atLeastMs: 0 });
    expect(observer.changed('a')).toBe(false);
  });
});

describe('memberLiveness and ownerLiveness', () => {
  it('judges a member dead when declared dead, expired once watched still for its lease duration, alive otherwise', () => {
    expect(memberLiveness({ status: 'dead', leaseDurationMs: 1000 }, { ageMs: null, atLeastMs: 0 })).toBe('dead');
    expect(memberLiveness({ status: 'alive', leaseDurationMs: 1000 }, { ageMs: null, atLeastMs: 999 })).toBe('alive');
    expect(memberLiveness({ status: 'alive', leaseDurationMs: 1000 }, { ageMs: null, atLeastMs: 1000 })).toBe('expired');
    expect(memberLiveness({ status: 'alive', leaseDurationMs: 1000 }, { ageMs: 1500, atLeastMs: 1500 }, 2000)).toBe('alive');
    expect(memberLiveness({ status: 'alive', leaseDurationMs: 1000 }, undefined)).toBe('alive');
  });

  it('judges a lease held only by an alive member in the incarnation the lease names', () => {
    const members = new Map([
      ['a', { group: 'g', workerId: 'a', version: 3, ...member({ incarnation: 'a2' }) }],
      ['d', { group: 'g', workerId: 'd', version: 4, ...member({ incarnation: 'd1', status: 'dead' }) }],
      ['e', { group: 'g', workerId: 'e', version: 5, ...member({ incarnation: 'e1' }) }],
    ]);
    const liveness = new Map([['a', 'alive'], ['d', 'dead'], ['e', 'expired']] as const);
    const unreadable = new Set(['x']);
    const of = (owner: string | null, incarnation: string | null): unknown => ownerLiveness({ owner, incarnation }, members, liveness, unreadable);

    expect(of(null, null)).toBeNull();
    expect(of('a', 'a2')).toBe('alive');
    expect(of('a', 'a1')).toBe('other-incarnation');
    expect(of('d', 'd1')).toBe('dead');
    expect(of('e', 'e1')).toBe('expired');
    expect(of('nobody', 'n1')).toBe('not-a-member');
    expect(of('x', 'x1')).toBe('unreadable');
  });
});

describe('watchRoster', () => {
  it('decides at once that a group without alive members is not live, whatever its leases say', async () => {
    const storage = new MemoryStorage();
    await storage.createLease({ group: 'g', leaseKey: 'a', owner: 'w', incarnation: 'i1' });
    await storage.putMember('g', 'w', null, member({ status: 'dead' }));
    const time = fakeTime();

    const verdict = await watchRoster(storage, 'g', { minimumMs: 0, unreadableMs: 12_000, pollMs: 250, ...time });

    expect(verdict.live).toBe(false);
    expect(time.sleeps).toEqual([]);
  });

  it('watches an alive member for its own lease duration and finds it expired when its record never moves', async () => {
    const storage = new MemoryStorage();
    await storage.putMember('g', 'w', null, member({ leaseDurationMs: 1100 }));
    const time = fakeTime();

    const verdict = await watchRoster(storage, 'g', { minimumMs: 0, unreadableMs: 12_000, pollMs: 500, ...time });

    expect(verdict).toMatchObject({ live: false, watchedMs: 1100 });
    expect(verdict.expired.map((expired) => expired.workerId)).toEqual(['w']);
    expect(time.sleeps).toEqual([500, 500, 100]);
  });

  it('never judges from a lease version: a lease written meanwhile does not make the group live', async () => {
    const storage = new MemoryStorage();
    const created = await storage.createLease({ group: 'g', leaseKey: 'a', owner: 'w', incarnation: 'i1' });
    if (created.status !== 'applied') throw new Error('seed failed');
    let version = created.record.version;
    const time = fakeTime(async () => {
      const [outcome] = await storage.updateLeases('g', [{ leaseKey: 'a', expectedVersion: version, next: created.record }]);
      if (outcome?.status === 'applied') version = outcome.record.version;
    });

    const verdict = await watchRoster(storage, 'g', { minimumMs: 0, unreadableMs: 12_000, pollMs: 100, ...time });

    expect(verdict.live).toBe(false);
  });

  it('finds the group live as soon as an alive member heartbeats, naming it', async () => {
    const storage = new MemoryStorage();
    const joined = await storage.putMember('g', 'w', null, member({ leaseDurationMs: 10_000 }));
    if (joined.status !== 'applied') throw new Error('seed failed');
    const time = fakeTime(async (now) => {
      if (now === 1000) await storage.putMember('g', 'w', joined.record.version, member({ leaseDurationMs: 10_000 }));
    });

    const verdict = await watchRoster(storage, 'g', { minimumMs: 0, unreadableMs: 12_000, pollMs: 500, ...time });

    expect(verdict.live).toBe(true);
    expect(verdict.moved.map((moved) => moved.workerId)).toEqual(['w']);
    expect(time.now()).toBe(1000);
  });

  it('watches a member that cannot be read back for unreadableMs, and finds the group live if it becomes readable', async () => {
    const still = new MemoryStorage();
    await still.putMember('g', 'bad', null, member());
    still.corruptMember('g', 'bad');
    const stillTime = fakeTime();
    const repaired = new MemoryStorage();
    await repaired.putMember('g', 'bad', null, member());
    const { version } = repaired.corruptMember('g', 'bad');
    const repairedTime = fakeTime(async (now) => {
      if (now === 500) await repaired.putMember('g', 'bad', version, member());
    });

    const stayed = await watchRoster(still, 'g', { minimumMs: 0, unreadableMs: 2000, pollMs: 500, ...stillTime });
    const healed = await watchRoster(repaired, 'g', { minimumMs: 0, unreadableMs: 2000, pollMs: 500, ...repairedTime });

    expect(stayed).toMatchObject({ live: false, watchedMs: 2000 });
    expect(healed).toMatchObject({ live: true, repaired: ['bad'] });
  });

  it('counts the watch of a member that cannot be read back from the first read\'s answer: a slow first read does not shorten it', async () => {
    const time = fakeTime();
    const storage = new SlowFirstRead(1500, time);
    await storage.putMember('g', 'bad', null, member());
    storage.corruptMember('g', 'bad');

    const verdict = await watchRoster(storage, 'g', { minimumMs: 0, unreadableMs: 2000, pollMs: 500, ...time });

    expect(verdict).toMatchObject({ live: false, watchedMs: 2000 });
    // 1,500 ms went by before the member was first seen; it was then watched for the whole 2,000 ms.
    expect(time.now()).toBe(3500);
  });
});

describe('watchGroup (status --observe-ms)', () => {
  it('judges a member that stood still for the whole window expired although the first read took longer than the window', async () => {
    const time = fakeTime();
    const storage = new SlowFirstRead(900, time);
    await storage.putMember('g', 'stuck', null, member({ leaseDurationMs: 300 }));
    const observer = new Observer(time.now);

    const { state, started } = await watchGroup(storage, 'g', 'memory:', observer, 600, new AbortController().signal, time);

    const [stuck] = state.members;
    if (stuck === undefined) throw new Error('the member was not read');
    const age = observer.observe([{ key: 'stuck', version: stuck.version }]).get('stuck');
    expect(memberLiveness(stuck, age)).toBe('expired');
    expect(age).toEqual({ ageMs: null, atLeastMs: 600 });
    expect(started).toBe(900);
  });

  it('sees a member that heartbeats during the window move, and judges it alive', async () => {
    const storage = new MemoryStorage();
    const joined = await storage.putMember('g', 'live', null, member({ leaseDurationMs: 300 }));
    if (joined.status !== 'applied') throw new Error('seed failed');
    let version = joined.record.version;
    const time = fakeTime(async () => {
      const beat = await storage.putMember('g', 'live', version, member({ leaseDurationMs: 300 }));
      if (beat.status === 'applied') version = beat.record.version;
    });
    const observer = new Observer(time.now);

    const { state } = await watchGroup(storage, 'g', 'memory:', observer, 600, new AbortController().signal, time);

    const [live] = state.members;
    if (live === undefined) throw new Error('the member was not read');
    const age = observer.observe([{ key: 'live', version: live.version }]).get('live');
    expect(observer.changed('live')).toBe(true);
    expect(age?.ageMs).toBeLessThan(300);
    expect(memberLiveness(live, age)).toBe('alive');
  });
});
