/**
 * The conformance suite's races between clients, the groups "concurrency", "monotonicity" and "reads while
 * others write" (each race also "between processes"). Where the target's clients have the optional read of
 * many leases by key (`getLeases`), its reads are raced by writers too, in the last two groups; without it
 * those rules are reported as skipped, as the group "reads of many leases" is.
 */
import assert from 'node:assert/strict';
import { limits } from '../validation.js';
import { leaseRecordOf, leaseStateOf, memberStateOf, RECORD_FORMAT } from '../storage.js';
import type { LeaderRecord, LeaseRecord, LeaseState, LeaseUpdate, MemberRecord, Storage } from '../storage.js';
import {
  applied,
  byKey,
  byWorker,
  conflict,
  createMany,
  define,
  heartbeat,
  join,
  listed,
  members,
  memberState,
  plain,
  reading,
  readingHere,
  sharedProcesses,
  show,
  update,
  type Body,
  type ConformanceTarget,
  type Context,
  type Reading,
  type TestApi,
} from './conformance-kit.js';

// ---------------------------------------------------------------------------------------------------
// Concurrency

const races: Array<[string, Body]> = [
  [
    '32 clients updating the same version: exactly one applies, and every other gets a conflict carrying its write',
    async ({ clients, group }) => {
      const racers = await clients(32);
      const g = group();
      const created = applied(await (racers[0] as Storage).createLease({ group: g, leaseKey: 'contested' }), 'create');
      const outcomes = await Promise.all(
        racers.map((storage, i) =>
          storage.updateLeases(g, [{ leaseKey: 'contested', expectedVersion: created.version, next: { ...leaseStateOf(created), owner: `racer-${i}`, epoch: 1 } }]),
        ),
      );
      const flat = outcomes.map((batch) => batch[0]);
      const winners = flat.filter((outcome) => outcome?.status === 'applied');
      assert.equal(winners.length, 1, `applied: ${winners.length}`);
      const stored = (await (racers[0] as Storage).getLease(g, 'contested')) as LeaseRecord;
      assert.equal(stored.version, created.version + 1);
      assert.deepEqual(plain(stored), plain(applied(winners[0], 'the winner')));
      for (const outcome of flat) {
        if (outcome?.status !== 'applied') assert.deepEqual(plain(conflict(outcome, 'a loser')), plain(stored), 'a conflict carries the stored record, not the one the loser read');
      }
    },
  ],
  [
    '32 clients creating the same lease: exactly one applies',
    async ({ clients, group }) => {
      const racers = await clients(32);
      const g = group();
      const outcomes = await Promise.all(racers.map((storage, i) => storage.createLease({ group: g, leaseKey: 'new', owner: `racer-${i}`, epoch: 1 })));
      const winners = outcomes.filter((outcome) => outcome.status === 'applied');
      assert.equal(winners.length, 1);
      const stored = await (racers[0] as Storage).getLease(g, 'new');
      for (const outcome of outcomes) {
        if (outcome.status !== 'applied') assert.deepEqual(plain(conflict(outcome, 'a loser')), plain(stored));
      }
    },
  ],
  [
    '32 clients re-creating the same deleted lease: exactly one applies, above every version the key had',
    async ({ clients, group }) => {
      const racers = await clients(32);
      const g = group();
      const first = applied(await (racers[0] as Storage).createLease({ group: g, leaseKey: 'again', epoch: 5 }), 'create');
      assert.equal((await (racers[0] as Storage).deleteLease(g, 'again', first.version)).status, 'applied');
      const outcomes = await Promise.all(racers.map((storage, i) => storage.createLease({ group: g, leaseKey: 'again', owner: `racer-${i}` }, { recreate: true })));
      const winners = outcomes.filter((outcome) => outcome.status === 'applied');
      assert.equal(winners.length, 1);
      const record = applied(winners[0], 'the winner');
      assert.ok(record.version > first.version && record.epoch >= first.epoch, show(record));
    },
  ],
  [
    '32 clients electing themselves at once: exactly one leader record write applies',
    async ({ clients, group }) => {
      const racers = await clients(32);
      const g = group();
      const creates = await Promise.all(racers.map((storage, i) => storage.createLeader({ group: g, holder: `racer-${i}`, term: 1 })));
      assert.equal(creates.filter((outcome) => outcome.status === 'applied').length, 1);
      const current = (await (racers[0] as Storage).getLeader(g)) as LeaderRecord;
      const updates = await Promise.all(racers.map((storage, i) => storage.updateLeader(g, current.version, { format: RECORD_FORMAT, holder: `next-${i}`, term: 2, metadata: {} })));
      assert.equal(updates.filter((outcome) => outcome.status === 'applied').length, 1);
      const stored = await (racers[0] as Storage).getLeader(g);
      for (const outcome of updates) {
        if (outcome.status !== 'applied') assert.deepEqual(plain(conflict(outcome, 'a loser')), plain(stored));
      }
    },
  ],
  [
    '8 clients each making 50 conditional increments with re-read and retry lose no update',
    async ({ clients, group }) => {
      const workers = await clients(8);
      const g = group();
      const created = applied(await (workers[0] as Storage).createLease({ group: g, leaseKey: 'counter', metadata: { count: '0' } }), 'create');
      await Promise.all(
        workers.map(async (storage) => {
          for (let done = 0; done < 50; ) {
            const current = (await storage.getLease(g, 'counter')) as LeaseRecord;
            const count = Number(current.metadata.count) + 1;
            const [outcome] = await storage.updateLeases(g, [
              { leaseKey: 'counter', expectedVersion: current.version, next: { ...leaseStateOf(current), metadata: { count: String(count) } } },
            ]);
            if (outcome?.status === 'applied') done++;
          }
        }),
      );
      const final = (await (workers[0] as Storage).getLease(g, 'counter')) as LeaseRecord;
      assert.equal(final.metadata.count, '400');
      assert.equal(final.version, created.version + 400);
    },
  ],
  [
    'two clients renewing overlapping batches: each lease applies exactly once, and the other gets a conflict carrying the stored record',
    async ({ clients, group }) => {
      const [a, b] = (await clients(2)) as [Storage, Storage];
      const g = group();
      const keys = Array.from({ length: 200 }, (_, i) => `k${i}`);
      await createMany(a, g, keys);
      const leases = await listed(a, g);
      const batch = (owner: string): LeaseUpdate[] =>
        leases.map((lease) => ({ leaseKey: lease.leaseKey, expectedVersion: lease.version, next: { ...leaseStateOf(lease), owner, epoch: 1 } }));
      const [fromA, fromB] = await Promise.all([a.updateLeases(g, batch('a')), b.updateLeases(g, batch('b'))]);
      const stored = byKey(await listed(a, g));
      leases.forEach((lease, i) => {
        const key = lease.leaseKey;
        const outcomes = [fromA[i], fromB[i]];
        const wins = outcomes.filter((outcome) => outcome?.status === 'applied');
        assert.equal(wins.length, 1, `lease ${key}`);
        const winner = fromA[i]?.status === 'applied' ? 'a' : 'b';
        assert.equal(stored.get(key)?.owner, winner);
        const loser = winner === 'a' ? fromB[i] : fromA[i];
        assert.deepEqual(plain(conflict(loser, `the loser of lease ${key}`)), plain(stored.get(key)), 'a conflict carries the record as stored, not as the batch first saw it');
      });
    },
  ],
  [
    '32 members heartbeating at once: every write applies, none conflicts with another member\'s, and no member\'s version repeats',
    async ({ clients, group }) => {
      const racers = await clients(32);
      const g = group();
      const joined = await Promise.all(racers.map((storage, i) => join(storage, g, `member-${i}`, { incarnation: `incarnation-${i}` })));
      const last = await Promise.all(
        racers.map(async (storage, i) => {
          let member = joined[i] as MemberRecord;
          const versions = [member.version];
          for (let beat = 1; beat <= 10; beat++) {
            const outcome = await storage.putMember(g, member.workerId, member.version, { ...memberStateOf(member), held: beat });
            member = applied(outcome, `heartbeat ${beat} of ${member.workerId}, at its own version while the others beat`);
            assert.ok(member.version > (versions.at(-1) as number), `heartbeat ${beat} of ${member.workerId} moves its version up: ${versions.join(', ')}, then ${member.version}`);
            versions.push(member.version);
          }
          return member;
        }),
      );
      assert.deepEqual(plain(await members(racers[0] as Storage, g)), plain(byWorker(last)), 'every member is stored as its last heartbeat wrote it');
    },
  ],
  [
    '32 clients joining as the same worker id at once: exactly one applies, and every other gets a conflict carrying the stored member',
    async ({ clients, group }) => {
      const racers = await clients(32);
      const g = group();
      const outcomes = await Promise.all(racers.map((storage, i) => storage.putMember(g, 'contested', null, memberState({ incarnation: `racer-${i}` }))));
      const winners = outcomes.filter((outcome) => outcome.status === 'applied');
      assert.equal(winners.length, 1, `applied: ${winners.length}`);
      const stored = await members(racers[0] as Storage, g);
      assert.deepEqual(plain(stored), [plain(applied(winners[0], 'the winner'))]);
      for (const outcome of outcomes) {
        if (outcome.status !== 'applied') assert.deepEqual(plain(conflict(outcome, 'a loser')), plain(stored[0]), 'a conflict carries the stored member');
      }
    },
  ],
  [
    '32 clients putting the same member at the same version: exactly one applies, and every other gets a conflict carrying the stored member, not the one its statement first saw',
    async ({ clients, group }) => {
      const racers = await clients(32);
      const g = group();
      const joined = await join(racers[0] as Storage, g, 'contested');
      const outcomes = await Promise.all(racers.map((storage, i) => storage.putMember(g, 'contested', joined.version, memberState({ incarnation: `racer-${i}`, status: i % 2 === 0 ? 'alive' : 'dead' }))));
      const winners = outcomes.filter((outcome) => outcome.status === 'applied');
      assert.equal(winners.length, 1, `applied: ${winners.length}`);
      const stored = await members(racers[0] as Storage, g);
      assert.deepEqual(plain(stored), [plain(applied(winners[0], 'the winner'))]);
      assert.ok((stored[0] as MemberRecord).version > joined.version);
      for (const outcome of outcomes) {
        if (outcome.status !== 'applied') assert.deepEqual(plain(conflict(outcome, 'a loser')), plain(stored[0]), 'a conflict carries the member as stored when the write was refused, not as the loser read it');
      }
    },
  ],
];

/**
 * Real concurrent clients racing on one record: exactly one winner, no lost update. With the target's
 * `crossProcess`, the same races run again between clients in separate processes.
 */
export function concurrencyContract(t: TestApi, target: ConformanceTarget): void {
  t.describe(`${target.name}: concurrency`, () => {
    for (const [title, body] of races) define(t, target, title, body);
  });
  t.describe(`${target.name}: concurrency between processes`, () => {
    const mode = sharedProcesses(t, target);
    for (const [title, body] of races) define(t, target, `${title}, from separate processes`, body, mode);
  });
}

// ---------------------------------------------------------------------------------------------------
// Monotonicity

/**
 * Epoch, term and version only grow: across release, take, and delete-then-recreate, and, through
 * `getLeases` when the target has it, across successive reads while other clients write.
 */
export function monotonicityContract(t: TestApi, target: ConformanceTarget): void {
  t.describe(`${target.name}: monotonicity`, () => {
    define(t, target, 'the epoch written on take, release and take again reads back as written', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      let lease = applied(await storage.createLease({ group: g, leaseKey: 'k' }), 'create');
      const steps: Array<Partial<LeaseState>> = [
        { owner: 'a', epoch: 1 },
        { owner: null, epoch: 1, checkpoint: '5' },
        { owner: 'b', epoch: 2 },
        { owner: 'b', epoch: 2, incarnation: 'i-b' },
        { owner: 'c', epoch: 3, incarnation: 'i-c' },
      ];
      for (const step of steps) {
        lease = await update(storage, g, lease, step, JSON.stringify(step));
        assert.equal((await storage.getLease(g, 'k'))?.epoch, step.epoch);
      }
    });

    define(t, target, 'a lease deleted and created again with recreate gets a greater version and keeps its highest epoch', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      let lease = applied(await storage.createLease({ group: g, leaseKey: 'k', owner: 'a', epoch: 4 }), 'create');
      lease = await update(storage, g, lease, { owner: 'b', epoch: 5 }, 'take');
      const old = lease;
      assert.equal((await storage.deleteLease(g, 'k', lease.version)).status, 'applied');
      const again = applied(await storage.createLease({ group: g, leaseKey: 'k' }, { recreate: true }), 'recreate');
      assert.ok(again.version > old.version, `version ${again.version} after ${old.version}`);
      assert.ok(again.epoch >= old.epoch, `epoch ${again.epoch} after ${old.epoch}`);
      assert.deepEqual(plain(await storage.getLease(g, 'k')), plain(again));
      const [stale] = await storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: old.version, next: { ...leaseStateOf(old), owner: 'zombie' } }]);
      assert.deepEqual(plain(conflict(stale, 'a writer holding the deleted version')), plain(again), 'a writer holding the deleted version must not write the new lease');
      const higher = applied(await storage.createLease({ group: g, leaseKey: 'other', epoch: 3 }), 'other');
      assert.equal(higher.epoch, 3, 'a new key keeps the epoch it was created with');
    });

    define(t, target, 'a lease deleted and created again many times never repeats a version or lowers its epoch', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      let highestVersion = 0;
      let highestEpoch = 0;
      for (let round = 0; round < 5; round++) {
        let lease = applied(await storage.createLease({ group: g, leaseKey: 'cycled', epoch: round % 2 === 0 ? 0 : highestEpoch + 1 }, { recreate: true }), `create ${round}`);
        assert.ok(lease.version > highestVersion && lease.epoch >= highestEpoch, show({ lease, highestVersion, highestEpoch }));
        lease = await update(storage, g, lease, { owner: `w${round}`, epoch: lease.epoch + 1 }, `take ${round}`);
        highestVersion = lease.version;
        highestEpoch = lease.epoch;
        assert.equal((await storage.deleteLease(g, 'cycled', lease.version)).status, 'applied');
      }
    });

    define(t, target, 'the term written on each change of leader reads back as written', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      let leader = applied(await storage.createLeader({ group: g, holder: 'a', term: 1 }), 'create');
      for (const [holder, term] of [['a', 1], [null, 1], ['b', 2], ['c', 3]] as const) {
        leader = applied(await storage.updateLeader(g, leader.version, { format: RECORD_FORMAT, holder, term, metadata: {} }), `${holder} ${term}`);
        assert.equal((await storage.getLeader(g))?.term, term);
      }
    });

    define(t, target, 'getLeases called again and again while other clients take, release, delete and re-create the leases it names never reads a version or an epoch lower than an earlier call read', async (context) => {
      const [reader, ...writers] = (await context.clients(1 + READ_RACE.writers)) as [Storage, ...Storage[]];
      const client = reading(reader, context);
      const g = context.group();
      const keys = Array.from({ length: limits.maxLeasesPerRead }, (_, i) => `lease-${String(i).padStart(3, '0')}`);
      await createMany(client, g, keys);
      const created = byKey(await listed(client, g));
      // The highest version and epoch any call read of each lease so far.
      const highest = new Map<string, { version: number; epoch: number }>();
      await readWhileWriting(
        writers.map((storage, w) => async (writing, wrote) => {
          const mine = keys.filter((_, i) => i % writers.length === w).map((leaseKey) => created.get(leaseKey) as LeaseRecord);
          for (let round = 1; writing(); round++) {
            // Every lease of the writer's in one batch: taken (a new epoch) on odd rounds, released on even ones.
            const take = round % 2 === 1;
            const outcomes = await storage.updateLeases(
              g,
              mine.map((lease) => ({ leaseKey: lease.leaseKey, expectedVersion: lease.version, next: { ...leaseStateOf(lease), ...(take ? { owner: `writer-${w}`, epoch: lease.epoch + 1 } : { owner: null, checkpoint: String(round) }) } })),
            );
            outcomes.forEach((outcome, i) => {
              mine[i] = applied(outcome, `round ${round} of ${(mine[i] as LeaseRecord).leaseKey}`);
            });
            // One of them deleted and created again: its version goes on above every one it had, its epoch stays.
            const index = round % mine.length;
            const gone = mine[index] as LeaseRecord;
            const deleted = await storage.deleteLease(g, gone.leaseKey, gone.version);
            assert.equal(deleted.status, 'applied', `the delete of ${gone.leaseKey}: ${show(deleted)}`);
            await yieldTurn();
            mine[index] = applied(await storage.createLease({ group: g, leaseKey: gone.leaseKey }, { recreate: true }), `re-create ${gone.leaseKey}`);
            wrote();
            await yieldTurn();
          }
        }),
        async (index) => {
          // Two calls one right after the other, as a worker reads again when a second handover is announced
          // while it reads the first: a store that answers calls from different copies shows it here.
          await yieldTurn();
          for (const call of ['first', 'second']) {
            const listing = await client.getLeases(g, keys);
            assert.deepEqual(listing.corrupt, [], `read ${index}, ${call} call: no lease is corrupt`);
            const backwards: string[] = [];
            for (const lease of listing.leases) {
              const before = highest.get(lease.leaseKey) ?? { version: 0, epoch: 0 };
              if (lease.version < before.version || lease.epoch < before.epoch) {
                backwards.push(`${lease.leaseKey} at version ${lease.version}, epoch ${lease.epoch} after version ${before.version}, epoch ${before.epoch}`);
              }
              highest.set(lease.leaseKey, { version: Math.max(before.version, lease.version), epoch: Math.max(before.epoch, lease.epoch) });
            }
            assert.deepEqual(backwards.slice(0, 10), [], `read ${index}, ${call} call: no lease reads lower than an earlier call read it (${backwards.length} of ${listing.leases.length})`);
          }
        },
      );
    });
  });
}

// ---------------------------------------------------------------------------------------------------
// Reads while others write

/**
 * One step of a writer that keeps leases passing through a group: deletes the oldest lease of `queue` (at
 * position `i` in key order) and creates its successor at that position under a key of this `round`, so
 * that a read paging through the group meets a delete and a create.
 */
async function replaceOldest(storage: Storage, g: string, queue: Array<{ record: LeaseRecord; i: number }>, position: (i: number) => string, round: number): Promise<void> {
  const next = queue.shift() as { record: LeaseRecord; i: number };
  const deleted = await storage.deleteLease(g, next.record.leaseKey, next.record.version);
  assert.equal(deleted.status, 'applied', `the delete of ${next.record.leaseKey}: ${show(deleted)}`);
  await yieldTurn();
  const leaseKey = `${position(next.i)}-b${round}`;
  queue.push({ record: applied(await storage.createLease({ group: g, leaseKey, owner: 'w', epoch: 1 }), `create ${leaseKey}`), i: next.i });
}

/** Writers racing a reader: how many members or leases, how many writers, and how long the reader reads. */
const READ_RACE = { members: 48, stableLeases: 600, writers: 4, reads: 16, readForMs: 20_000 } as const;

/** Lets other clients' calls in between, as a round trip to a backend would. */
function yieldTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * Runs `writers` until `read` has run `READ_RACE.reads` times (or for `READ_RACE.readForMs`, whichever
 * comes first), starting the reads once every writer has written once, so that the reads meet the writes.
 * A writer's failure fails the race.
 */
async function readWhileWriting(writers: Array<(writing: () => boolean, wrote: () => void) => Promise<void>>, read: (index: number) => Promise<void>): Promise<void> {
  let reading = true;
  const started = writers.map(() => {
    let wrote = (): void => undefined;
    const once = new Promise<void>((resolve) => {
      wrote = resolve;
    });
    return { once, wrote };
  });
  const running = writers.map((writer, i) => writer(() => reading, (started[i] as { wrote: () => void }).wrote));
  const failed = Promise.all(running).then(() => undefined);
  let writerFailed = false;
  failed.catch(() => {
    writerFailed = true;
  });
  try {
    await Promise.race([Promise.all(started.map((start) => start.once)), failed]);
    const until = Date.now() + READ_RACE.readForMs;
    for (let index = 0; index < READ_RACE.reads && !writerFailed && (index === 0 || Date.now() < until); index++) await read(index);
  } finally {
    reading = false;
    await Promise.allSettled(running);
  }
  await failed;
}

const readRaces: Array<[string, (context: Context, target: ConformanceTarget) => Promise<void>]> = [
  [
    'a roster read while members heartbeat, join and leave never misses a member that existed throughout the read, nor lists one twice',
    async ({ clients, group }) => {
      const [reader, ...writers] = (await clients(1 + READ_RACE.writers)) as [Storage, ...Storage[]];
      const g = group();
      const ids = Array.from({ length: READ_RACE.members }, (_, i) => `member-${String(i).padStart(3, '0')}`);
      const joined = await Promise.all(ids.map((workerId, i) => join(writers[i % writers.length] as Storage, g, workerId)));
      // The last version each member's heartbeat had acknowledged: a read begun after it sees at least that.
      const acknowledged = new Map(joined.map((member) => [member.workerId, member.version]));
      await readWhileWriting(
        writers.map((storage, w) => async (writing, wrote) => {
          let mine = joined.filter((_, i) => i % writers.length === w);
          for (let beat = 1; writing(); beat++) {
            mine = await Promise.all(mine.map((member) => heartbeat(storage, member, { held: beat }, `heartbeat ${beat} of ${member.workerId}`)));
            for (const member of mine) acknowledged.set(member.workerId, member.version);
            // A member passing through: joins and leaves while the roster is read.
            const passing = await join(storage, g, `passing-${w}-${beat}`);
            await yieldTurn();
            const removed = await storage.removeMember(g, passing.workerId, passing.version);
            assert.equal(removed.status, 'applied', `the remove of ${passing.workerId}: ${show(removed)}`);
            wrote();
            await yieldTurn();
          }
        }),
        async (index) => {
          const before = new Map(acknowledged);
          const roster = await reader.getRoster(g);
          assert.deepEqual(roster.corrupt, [], `read ${index}: no member is corrupt`);
          const seen = roster.members.map((member) => member.workerId);
          assert.deepEqual(seen.filter((workerId, i) => seen.indexOf(workerId) !== i), [], `read ${index}: no member is listed twice`);
          const found = new Map(roster.members.map((member) => [member.workerId, member]));
          const missing = ids.filter((workerId) => !found.has(workerId));
          assert.deepEqual(missing, [], `read ${index}: every member that existed throughout the read is in the roster (${seen.length} listed)`);
          const stale = ids.filter((workerId) => (found.get(workerId)?.version ?? 0) < (before.get(workerId) ?? 0));
          assert.deepEqual(stale, [], `read ${index}: no member is older than the heartbeat it had acknowledged before the read began`);
        },
      );
    },
  ],
  [
    'a listing while other clients delete and create leases never misses a lease that existed throughout the listing, nor lists one twice',
    async ({ clients, group }) => {
      const [reader, ...writers] = (await clients(1 + READ_RACE.writers)) as [Storage, ...Storage[]];
      const g = group();
      // Leases that stay, each followed in key order by one that is deleted and replaced meanwhile, so
      // that the deletes and creates land in every page of the listing.
      const position = (i: number): string => `lease-${String(i).padStart(4, '0')}`;
      const stable = Array.from({ length: READ_RACE.stableLeases }, (_, i) => `${position(i)}-a`);
      const passing = Array.from({ length: READ_RACE.stableLeases }, (_, i) => `${position(i)}-b`);
      await createMany(reader, g, [...stable, ...passing], () => ({ owner: 'w', epoch: 1 }));
      const created = byKey(await listed(reader, g));
      await readWhileWriting(
        writers.map((storage, w) => async (writing, wrote) => {
          const mine = passing.map((leaseKey, i) => ({ leaseKey, i })).filter(({ i }) => i % writers.length === w);
          const queue = mine.map(({ leaseKey, i }) => ({ record: created.get(leaseKey) as LeaseRecord, i }));
          for (let round = 1; writing(); round++) {
            await replaceOldest(storage, g, queue, position, round);
            wrote();
            await yieldTurn();
          }
        }),
        async (index) => {
          const listing = await reader.listLeases(g);
          assert.deepEqual(listing.corrupt, [], `listing ${index}: no lease is corrupt`);
          const keys = listing.leases.map((lease) => lease.leaseKey);
          const found = byKey(listing.leases);
          const missing = stable.filter((leaseKey) => !found.has(leaseKey));
          assert.deepEqual(missing.slice(0, 20), [], `listing ${index}: every lease that existed throughout the listing is listed (${missing.length} missing of ${stable.length}, ${keys.length} listed)`);
          assert.deepEqual(keys.filter((leaseKey, i) => keys.indexOf(leaseKey) !== i).slice(0, 20), [], `listing ${index}: no lease is listed twice`);
          for (const leaseKey of stable) assert.deepEqual(plain(found.get(leaseKey)), plain(created.get(leaseKey)), `listing ${index}: lease ${leaseKey} is listed as stored`);
        },
      );
    },
  ],
  [
    'a getLeases read while other clients update the leases it names, and delete and create others between them, reads each named lease exactly once, whole, as one write left it, and no older than a write acknowledged before the read began',
    async (context, target) => {
      await readingHere(target, context);
      const [reader, ...writers] = (await context.clients(1 + READ_RACE.writers)) as [Reading, ...Reading[]];
      const g = context.group();
      // As many named leases as one call reads, each followed in key order by one that is deleted and
      // replaced meanwhile, so that a read that pages through the group meets the deletes and creates.
      const position = (i: number): string => `lease-${String(i).padStart(4, '0')}`;
      const named = Array.from({ length: limits.maxLeasesPerRead }, (_, i) => `${position(i)}-a`);
      const passing = Array.from({ length: limits.maxLeasesPerRead }, (_, i) => `${position(i)}-b`);
      await createMany(reader, g, [...named, ...passing], () => ({ owner: 'w', epoch: 1 }));
      const created = byKey(await listed(reader, g));
      // Every record a write of a named lease left, by key and version: written down before the write is
      // sent, so that a read that sees it before its writer hears back finds it.
      const written = new Map(named.map((leaseKey) => [leaseKey, new Map([[(created.get(leaseKey) as LeaseRecord).version, plain(created.get(leaseKey))]])]));
      // The last version each named lease's writer had acknowledged: a read begun after it sees at least that.
      const acknowledged = new Map(named.map((leaseKey) => [leaseKey, (created.get(leaseKey) as LeaseRecord).version]));
      await readWhileWriting(
        writers.map((storage, w) => async (writing, wrote) => {
          let mine = named.filter((_, i) => i % writers.length === w).map((leaseKey) => created.get(leaseKey) as LeaseRecord);
          const queue = passing.flatMap((leaseKey, i) => (i % writers.length === w ? [{ record: created.get(leaseKey) as LeaseRecord, i }] : []));
          for (let round = 1; writing(); round++) {
            // Each write moves fields a read would take from different places: the owner and epoch, the
            // checkpoint, the metadata and a field core does not name.
            const updates: LeaseUpdate[] = mine.map((lease) => ({
              leaseKey: lease.leaseKey,
              expectedVersion: lease.version,
              next: { ...leaseStateOf(lease), owner: round % 2 === 1 ? `writer-${w}` : null, epoch: lease.epoch + (round % 2), checkpoint: `${round}`, metadata: { round: `${round}` }, 'x-round': round } as LeaseState,
            }));
            for (const { leaseKey, expectedVersion, next } of updates) (written.get(leaseKey) as Map<number, LeaseRecord>).set(expectedVersion + 1, plain(leaseRecordOf(g, leaseKey, expectedVersion + 1, next)));
            const outcomes = await storage.updateLeases(g, updates);
            mine = outcomes.map((outcome, i) => applied(outcome, `round ${round} of ${(mine[i] as LeaseRecord).leaseKey}`));
            for (const lease of mine) acknowledged.set(lease.leaseKey, lease.version);
            await replaceOldest(storage, g, queue, position, round);
            wrote();
            await yieldTurn();
          }
        }),
        async (index) => {
          const before = new Map(acknowledged);
          const listing = await reader.getLeases(g, named);
          assert.deepEqual(listing.corrupt, [], `read ${index}: no lease is corrupt`);
          const keys = listing.leases.map((lease) => lease.leaseKey);
          assert.deepEqual(keys.filter((leaseKey, i) => keys.indexOf(leaseKey) !== i).slice(0, 20), [], `read ${index}: no lease is read twice`);
          const found = byKey(listing.leases);
          const missing = named.filter((leaseKey) => !found.has(leaseKey));
          assert.deepEqual(missing.slice(0, 20), [], `read ${index}: every named lease, which existed throughout the read, is read (${missing.length} missing of ${named.length}, ${keys.length} read)`);
          assert.deepEqual(keys.filter((leaseKey) => !written.has(leaseKey)).slice(0, 20), [], `read ${index}: only the named leases are read`);
          for (const lease of listing.leases) {
            assert.deepEqual(plain(lease), written.get(lease.leaseKey)?.get(lease.version), `read ${index}: lease ${lease.leaseKey} is read whole, as the write of its version ${lease.version} left it`);
          }
          const stale = named.filter((leaseKey) => (found.get(leaseKey)?.version ?? 0) < (before.get(leaseKey) ?? 0));
          assert.deepEqual(stale.slice(0, 20), [], `read ${index}: no lease is older than the write its writer had acknowledged before the read began`);
        },
      );
    },
  ],
];

/**
 * Reads racing writers: a roster read while members heartbeat, join and leave, and a listing while other
 * clients delete and create leases, each never missing a record that existed throughout the read; and,
 * when the target has `getLeases`, a read of many leases by key while other clients write them, each lease
 * whole, as one write left it. With the target's `crossProcess`, the writers and the reader race from
 * separate processes too.
 */
export function readsWhileWritingContract(t: TestApi, target: ConformanceTarget): void {
  t.describe(`${target.name}: reads while others write`, () => {
    for (const [title, body] of readRaces) define(t, target, title, (context) => body(context, target));
  });
  t.describe(`${target.name}: reads while others write, between processes`, () => {
    const mode = sharedProcesses(t, target);
    for (const [title, body] of readRaces) define(t, target, `${title}, from separate processes`, (context) => body(context, target), mode);
  });
}
