/**
 * The conformance suite's rules for the watchers' reads (`getMembers`, `getRosterDigest`,
 * `advanceRosterDigest`, see `storage.ts`): optional, all three or none. `runConformanceSuite` runs them
 * with the rest, in the groups "watchers' reads" and "watchers' reads between processes". An adapter with
 * none of the three passes the capability rule and has each other rule reported as skipped, its skip note
 * saying why, as the change feed's rules are for an adapter without `subscribe()`; an adapter with one or
 * two fails the capability rule. They use the harness and fixtures the rule files share,
 * `conformance-kit.ts`.
 */
import assert from 'node:assert/strict';
import { limits } from '../validation.js';
import type { MemberRecord, Roster, Storage } from '../storage.js';
import { checkWatcherReads, type WatcherReads } from '../watcher-reads.js';
import {
  applied,
  assertCorruptMember,
  assertInvalidInput,
  badNames,
  byWorker,
  corruptMemberHook,
  define,
  heartbeat,
  join,
  largestMember,
  members,
  plain,
  sharedProcesses,
  show,
  type ConformanceTarget,
  type Context,
  type TestApi,
} from './conformance-kit.js';

type Watching = Storage & WatcherReads;

const CAPABILITY = 'an adapter has all three of getMembers, getRosterDigest and advanceRosterDigest, or none';

/** The client, with its watchers' reads; a test of a client without all three ends as skipped, saying why. */
function watching(storage: Storage, context: Context): Watching {
  let has: boolean;
  try {
    has = checkWatcherReads(storage, 'testing');
  } catch (error) {
    // Reported once, by the capability rule; the other rules cannot run on half of the reads.
    context.notChecked(`not checked: ${(error as Error).message} (the rule "${CAPABILITY}" fails)`);
  }
  if (!has) context.notChecked('not checked: the adapter has no getMembers, getRosterDigest nor advanceRosterDigest (the watchers\' reads are optional)');
  return storage as Watching;
}

/**
 * Checks the watchers' reads on a client of this process: a client in another process forwards every
 * method the suite knows, whether or not the adapter has it.
 */
async function watchingHere(target: ConformanceTarget, context: Context): Promise<void> {
  const local = await target.createStorage();
  context.cleanup(() => target.closeStorage?.(local));
  watching(local, context);
}

/** `getMembers`, checking that the answer names its group. */
async function read(storage: Watching, group: string, workerIds: readonly string[]): Promise<Roster> {
  const roster = await storage.getMembers(group, workerIds);
  assert.equal(roster.group, group, 'getMembers names its group');
  return roster;
}

/** The members `getMembers` reads, by worker id, checking that none is corrupt. */
async function readMembers(storage: Watching, group: string, workerIds: readonly string[]): Promise<MemberRecord[]> {
  const roster = await read(storage, group, workerIds);
  assert.deepEqual(roster.corrupt, [], 'no member named is corrupt');
  return byWorker(roster.members);
}

/** Group names beside `base` that a key scheme could confuse with it: prefixes, extensions, separators. */
function groupsBeside(base: string): string[] {
  const extensions = ['#members', '#digest', ':x', ':', '#', ':digest', '.digest', '/digest', '_digest', '{x}', '}', '*', '%', ' 2'];
  return [base, base.slice(0, -1), ...extensions.map((extension) => `${base}${extension}`)];
}

/** Worker ids a store that kept the digest as a member might give it. */
const DIGEST_LOOKALIKES = ['digest', '#digest', ':digest', '_digest', 'rosterDigest', 'roster-digest', '__digest__', '0', '#'];

/** How many advances each racing client makes. */
const ADVANCES_EACH = 8;

const races: Array<[string, (context: Context, target: ConformanceTarget) => Promise<void>]> = [
  [
    '32 clients advancing one group\'s roster digest at once: every advance is counted, and each returns a distinct value',
    async (context, target) => {
      await watchingHere(target, context);
      const racers = (await context.clients(32)) as Watching[];
      const g = context.group();
      const returned = (
        await Promise.all(
          racers.map(async (storage) => {
            const values: number[] = [];
            for (let i = 0; i < ADVANCES_EACH; i++) values.push(await storage.advanceRosterDigest(g));
            return values;
          }),
        )
      ).flat();
      const total = racers.length * ADVANCES_EACH;
      const repeated = returned.filter((value, i) => returned.indexOf(value) !== i);
      assert.deepEqual([...new Set(repeated)].slice(0, 20), [], `${total} advances returned a value twice: an advance was lost to another`);
      assert.equal(await (racers[0] as Watching).getRosterDigest(g), total, `${total} advances end at ${total}`);
      assert.deepEqual([...returned].sort((a, b) => a - b), Array.from({ length: total }, (_, i) => i + 1), 'each advance returns the value it wrote, from 1 up');
    },
  ],
];

/**
 * The watchers' reads: `getMembers` reads named members exactly as the roster gives them, strongly
 * consistent; the roster digest starts at 0, counts every advance, is kept per group and is no member.
 * With the target's `crossProcess`, the advances race from separate processes too.
 */
export function watcherReadsContract(t: TestApi, target: ConformanceTarget): void {
  t.describe(`${target.name}: watchers' reads`, () => {
    define(t, target, CAPABILITY, async ({ clients }) => {
      const [storage] = (await clients(1)) as [Storage];
      checkWatcherReads(storage, target.name);
    });

    define(t, target, 'getMembers reads exactly the named members as the roster gives them, with the same versions and state, and leaves out worker ids with no member and removed members', async (context) => {
      const [storage] = (await context.clients(1)) as [Storage];
      const client = watching(storage, context);
      const g = context.group();
      assert.deepEqual(plain(await client.getMembers(g, ['w1', 'w2'])), { group: g, members: [], corrupt: [] }, 'a group nobody joined');
      const later = { held: 3, changes: 2, requests: [{ leaseKey: 'shard-ü', from: 'w2', 'x-asked': { at: 1 } }], metadata: { note: 'línea\nnext' }, 'x-later': [1.5, null, 'ü'] };
      await join(client, g, 'w1', later);
      await heartbeat(client, await join(client, g, 'w2'), { status: 'dead', changes: 1 }, 'declare w2 dead');
      await join(client, g, 'w3');
      const gone = await heartbeat(client, await join(client, g, 'gone'));
      assert.equal((await client.removeMember(g, 'gone', gone.version)).status, 'applied', 'remove gone');
      const again = await join(client, g, 'again');
      assert.equal((await client.removeMember(g, 'again', again.version)).status, 'applied', 'remove again');
      await join(client, g, 'again', { incarnation: 'incarnation-2' });
      const named = ['w1', 'w2', 'gone', 'never', 'again'];
      const roster = await members(client, g);
      assert.deepEqual(
        plain(await readMembers(client, g, named)),
        plain(roster.filter((member) => named.includes(member.workerId))),
        'the members named, as the roster gives them; no member for an id that never joined or was removed',
      );
      assert.deepEqual(plain(await client.getMembers(g, ['gone'])), { group: g, members: [], corrupt: [] }, 'a removed member alone');
      assert.deepEqual(plain(await client.getMembers(g, [])), { group: g, members: [], corrupt: [] }, 'no worker id');
      assert.deepEqual(plain(await readMembers(client, g, ['w3'])), plain(roster.filter((member) => member.workerId === 'w3')), 'one member');
    });

    define(t, target, 'a worker id named more than once in one getMembers call is read once', async (context) => {
      const [storage] = (await context.clients(1)) as [Storage];
      const client = watching(storage, context);
      const g = context.group();
      const w1 = await join(client, g, 'w1');
      const w2 = await join(client, g, 'w2');
      const roster = await read(client, g, ['w1', 'w2', 'w1', 'w1', 'absent', 'absent', 'w2']);
      assert.deepEqual(plain(byWorker(roster.members)), plain([w1, w2]), show(roster.members.map((member) => member.workerId)));
    });

    define(t, target, 'getMembers reports a corrupt member in corrupt, naming its worker id, and still reads every other member named', async (context) => {
      const [storage] = (await context.clients(1)) as [Storage];
      const client = watching(storage, context);
      const corrupt = corruptMemberHook(target, context);
      const g = context.group();
      const joined = await Promise.all(['w1', 'w2', 'w3', 'w4'].map((workerId) => join(client, g, workerId)));
      await corrupt(g, 'w2');
      const roster = await read(client, g, ['w1', 'w2', 'w3', 'absent']);
      assert.deepEqual(plain(byWorker(roster.members)), plain(joined.filter((member) => ['w1', 'w3'].includes(member.workerId))), 'every other member named reads fine');
      assert.equal(roster.corrupt.length, 1, `one CorruptRecordError, for w2: ${show(roster.corrupt)}`);
      assertCorruptMember(roster.corrupt[0], g, 'w2');
      assert.deepEqual(plain(await readMembers(client, g, ['w4'])), plain(joined.slice(3)), 'a corrupt member not named is not reported');
    });

    define(t, target, `getMembers reads ${limits.maxWatchedMembers} members of the largest size in one call`, async (context) => {
      const [storage] = (await context.clients(1)) as [Storage];
      const client = watching(storage, context);
      const g = context.group();
      const workerIds = Array.from({ length: limits.maxWatchedMembers }, (_, i) => `worker-${String(i).padStart(2, '0')}`);
      const joined = await Promise.all(workerIds.map(async (workerId, i) => applied(await client.putMember(g, workerId, null, largestMember(`v${i}`)), `join ${workerId}`)));
      assert.deepEqual(plain(await readMembers(client, g, workerIds)), plain(byWorker(joined)));
    });

    define(
      t,
      target,
      `invalid input to the watchers' reads is refused with an InvalidInputError before anything is sent: ${limits.maxWatchedMembers + 1} worker ids, a bad worker id, worker ids that are no array, a bad group`,
      async (context) => {
        const [storage] = (await context.clients(1)) as [Storage];
        const client = watching(storage, context);
        const g = context.group();
        await join(client, g, 'w1');
        const tooMany = Array.from({ length: limits.maxWatchedMembers + 1 }, (_, i) => `w${i}`);
        await assert.rejects(client.getMembers(g, tooMany), (error) => assertInvalidInput(error, String(tooMany.length)), `${tooMany.length} worker ids`);
        await assert.rejects(client.getMembers(g, 'w1' as unknown as string[]), (error) => assertInvalidInput(error, 'array'), 'a worker id that is no array');
        await assert.rejects(client.getMembers(g, ['w1', 5 as unknown as string]), (error) => assertInvalidInput(error, 'worker id'), 'a worker id that is no string');
        for (const [what, name, mentions] of badNames) {
          const check = (error: unknown): true => assertInvalidInput(error, mentions);
          await assert.rejects(client.getMembers(g, ['w1', name]), check, `getMembers of ${what} as a worker id`);
          await assert.rejects(client.getMembers(name, ['w1']), check, `getMembers in ${what}`);
          await assert.rejects(client.getRosterDigest(name), check, `a digest read of ${what}`);
          await assert.rejects(client.advanceRosterDigest(name), check, `an advance of ${what}`);
        }
        assert.equal(await client.getRosterDigest(g), 0, 'nothing advanced');
      },
    );

    define(t, target, 'a client sees a member another client wrote at once through getMembers: no client serves it from a cache of its own', async (context) => {
      const [writer, reader] = (await context.clients(2)) as [Storage, Storage];
      const client = watching(reader, context);
      const g = context.group();
      const named = ['w1', 'w2'];
      assert.deepEqual(await readMembers(client, g, named), []);
      const joined = await join(writer, g, 'w1');
      assert.deepEqual(plain(await readMembers(client, g, named)), [plain(joined)], 'the reader sees the join');
      const beat = await heartbeat(writer, joined);
      assert.deepEqual(plain(await readMembers(client, g, named)), [plain(beat)], 'the reader sees the heartbeat');
      const other = await join(writer, g, 'w2');
      assert.deepEqual(plain(await readMembers(client, g, named)), plain([beat, other]), 'the reader sees the second join');
      assert.equal((await writer.removeMember(g, 'w1', beat.version)).status, 'applied');
      assert.deepEqual(plain(await readMembers(client, g, named)), [plain(other)], 'the reader sees the remove');
      const back = await join(writer, g, 'w1', { incarnation: 'incarnation-2' });
      assert.deepEqual(plain(await readMembers(client, g, named)), plain([back, other]), 'the reader sees the join again');
    });

    define(t, target, 'getMembers reads only its own group\'s members, even when one group\'s name is a prefix or an extension of another\'s', async (context) => {
      const [storage] = (await context.clients(1)) as [Storage];
      const client = watching(storage, context);
      const groups = groupsBeside(context.group());
      const joined = await Promise.all(groups.map(async (g, i) => [await join(client, g, 'shared', { incarnation: `of-${i}` }), await join(client, g, `only-${i}`, { incarnation: `of-${i}` })]));
      for (const [i, g] of groups.entries()) {
        const neighbours = [i - 1, i + 1].filter((j) => j >= 0 && j < groups.length).map((j) => `only-${j}`);
        assert.deepEqual(plain(await readMembers(client, g, ['shared', `only-${i}`, ...neighbours])), plain(byWorker(joined[i] as MemberRecord[])), `group ${JSON.stringify(g)} reads only its own members`);
      }
    });

    define(t, target, 'the roster digest of a group never advanced reads 0, even after members joined, moved and left', async (context) => {
      const [storage] = (await context.clients(1)) as [Storage];
      const client = watching(storage, context);
      const g = context.group();
      assert.equal(await client.getRosterDigest(g), 0, 'a group nobody joined');
      const joined = await join(client, g, 'w1');
      const moved = await heartbeat(client, joined, { held: 2, changes: 1, requests: [{ leaseKey: 'k', from: 'w2' }] });
      await join(client, g, 'w2');
      assert.equal((await client.removeMember(g, 'w1', moved.version)).status, 'applied');
      assert.equal(await client.getRosterDigest(g), 0, 'core advances the digest; member writes do not');
    });

    define(t, target, 'each advance of the roster digest adds one and returns the value it wrote, greater than the last read, and every client reads it at once', async (context) => {
      const [a, b] = (await context.clients(2)) as [Storage, Storage];
      const first = watching(a, context);
      const second = watching(b, context);
      const g = context.group();
      let last = 0;
      for (let i = 0; i < 6; i++) {
        const [advancer, other] = i % 2 === 0 ? [first, second] : [second, first];
        const before = await advancer.getRosterDigest(g);
        assert.equal(before, last, `the read before advance ${i + 1}`);
        const value = await advancer.advanceRosterDigest(g);
        assert.ok(value > before, `advance ${i + 1} returned ${value}, not above the ${before} last read`);
        assert.equal(value, before + 1, `advance ${i + 1} adds one`);
        assert.equal(await advancer.getRosterDigest(g), value, 'the advancing client reads the value its advance returned');
        assert.equal(await other.getRosterDigest(g), value, 'another client reads it at once');
        last = value;
      }
    });

    define(t, target, 'the roster digests of groups side by side never move each other, even when one name is a prefix or an extension of another', async (context) => {
      const [storage] = (await context.clients(1)) as [Storage];
      const client = watching(storage, context);
      const groups = groupsBeside(context.group());
      await Promise.all(groups.map((g, i) => join(client, g, `only-${i}`)));
      // Round robin, so that each group's advances fall between every other group's.
      for (let round = 0; round < groups.length; round++) {
        await Promise.all(groups.slice(round).map((g) => client.advanceRosterDigest(g)));
      }
      for (const [i, g] of groups.entries()) {
        assert.equal(await client.getRosterDigest(g), i + 1, `group ${JSON.stringify(g)} was advanced ${i + 1} times`);
        assert.deepEqual((await members(client, g)).map((member) => member.workerId), [`only-${i}`], `group ${JSON.stringify(g)} has its one member`);
      }
    });

    define(t, target, 'the roster digest is no member: the roster and getMembers never show it, and a group with only a digest has an empty roster and no lease', async (context) => {
      const [storage] = (await context.clients(1)) as [Storage];
      const client = watching(storage, context);
      const g = context.group();
      const lookalikes = [...DIGEST_LOOKALIKES, g];
      for (let i = 0; i < 3; i++) await client.advanceRosterDigest(g);
      assert.deepEqual(plain(await client.getRoster(g)), { group: g, members: [], corrupt: [] }, 'a group with only a digest has an empty roster');
      assert.deepEqual(plain(await client.getMembers(g, lookalikes)), { group: g, members: [], corrupt: [] }, 'getMembers reads no digest');
      assert.deepEqual(plain(await client.listLeases(g)), { leases: [], corrupt: [] }, 'a group with only a digest lists no lease');
      const joined = await join(client, g, 'w1');
      await client.advanceRosterDigest(g);
      assert.deepEqual(plain(await members(client, g)), [plain(joined)], 'the roster holds its one member');
      assert.deepEqual(plain(await readMembers(client, g, [...lookalikes, 'w1'])), [plain(joined)], 'getMembers reads the one member');
      assert.equal(await client.getRosterDigest(g), 4);
    });

    for (const [title, body] of races) define(t, target, title, (context) => body(context, target));
  });

  t.describe(`${target.name}: watchers' reads between processes`, () => {
    const mode = sharedProcesses(t, target);
    for (const [title, body] of races) define(t, target, `${title}, from separate processes`, (context) => body(context, target), mode);
  });
}
