/**
 * The conformance suite's rules for the roster digest's moves (`getRosterMoves`, and the worker ids an
 * `advanceRosterDigest` names, see `storage.ts`): optional, and only with the watchers' reads.
 * `runConformanceSuite` runs them with the rest, in the groups "roster moves" and "roster moves between
 * processes". An adapter without `getRosterMoves` passes the capability rule and has each other rule
 * reported as skipped, its skip note saying why. They use the harness and fixtures the rule files share,
 * `conformance-kit.ts`.
 */
import assert from 'node:assert/strict';
import { limits } from '../validation.js';
import type { RosterMoves, Storage } from '../storage.js';
import { checkRosterMoves, type WatcherReads } from '../watcher-reads.js';
import { assertInvalidInput, badNames, define, sharedProcesses, type ConformanceTarget, type Context, type TestApi } from './conformance-kit.js';

type Moving = Storage & WatcherReads & Required<Pick<Storage, 'getRosterMoves'>>;

const CAPABILITY = 'an adapter has getRosterMoves only with getMembers, getRosterDigest and advanceRosterDigest';

/** The client, with its roster moves; a test of a client without them ends as skipped, saying why. */
function moving(storage: Storage, context: Context): Moving {
  let has: boolean;
  try {
    has = checkRosterMoves(storage, 'testing');
  } catch (error) {
    context.notChecked(`not checked: ${(error as Error).message} (the rule "${CAPABILITY}" fails)`);
  }
  if (!has) context.notChecked('not checked: the adapter has no getRosterMoves (optional: a move of the digest is then read as the whole roster)');
  return storage as Moving;
}

/** Checks the roster moves on a client of this process: a client in another process forwards every method the suite knows. */
async function movingHere(target: ConformanceTarget, context: Context): Promise<void> {
  const local = await target.createStorage();
  context.cleanup(() => target.closeStorage?.(local));
  moving(local, context);
}

/** The moves as a comparable value: the names sorted (a store gives them in any order), checked to be each once. */
function sortedMoves(moves: RosterMoves): { digest: number; moved: string[] | null } {
  if (moves.moved === null) return { digest: moves.digest, moved: null };
  const moved = [...moves.moved];
  assert.equal(new Set(moved).size, moved.length, `each worker id once: ${JSON.stringify(moved)}`);
  return { digest: moves.digest, moved: moved.sort() };
}

async function movesOf(storage: Moving, group: string, since: number): Promise<{ digest: number; moved: string[] | null }> {
  return sortedMoves(await storage.getRosterMoves(group, since));
}

/** How many advances each racing client makes: the racers' advances together are the fewest a store keeps. */
const RACERS = 16;
const ADVANCES_EACH = limits.rosterMovesKept / RACERS;

const races: Array<[string, (context: Context, target: ConformanceTarget) => Promise<void>]> = [
  [
    `${RACERS} clients advancing one group's digest at once, each advance naming a worker id of its own: the moves since 0 name every one, at the digest that counts them all`,
    async (context, target) => {
      await movingHere(target, context);
      const racers = (await context.clients(RACERS)) as Moving[];
      const g = context.group();
      await Promise.all(
        racers.map(async (storage, i) => {
          for (let k = 0; k < ADVANCES_EACH; k++) await storage.advanceRosterDigest(g, [`racer-${i}-${k}`]);
        }),
      );
      const total = RACERS * ADVANCES_EACH;
      const names = racers.flatMap((_, i) => Array.from({ length: ADVANCES_EACH }, (__, k) => `racer-${i}-${k}`)).sort();
      assert.deepEqual(await movesOf(racers[0] as Moving, g, 0), { digest: total, moved: names }, 'no advance lost its names to another');
    },
  ],
];

/**
 * The roster digest's moves: which worker ids the advances after a digest named, read with the digest
 * from one moment, `null` where an advance named nobody or the store no longer keeps it, at least the last
 * {@link limits}.rosterMovesKept kept, per group. With the target's `crossProcess`, the advances race from
 * separate processes too.
 */
export function rosterMovesContract(t: TestApi, target: ConformanceTarget): void {
  t.describe(`${target.name}: roster moves`, () => {
    define(t, target, CAPABILITY, async ({ clients }) => {
      const [storage] = (await clients(1)) as [Storage];
      checkRosterMoves(storage, target.name);
    });

    define(t, target, 'getRosterMoves names each worker id the advances after since named, once, with the digest getRosterDigest reads; none when since is the digest', async (context) => {
      const [storage] = (await context.clients(1)) as [Storage];
      const client = moving(storage, context);
      const g = context.group();
      assert.deepEqual(await movesOf(client, g, 0), { digest: 0, moved: [] }, 'a group never advanced');
      assert.equal(await client.advanceRosterDigest(g, ['w1']), 1);
      assert.equal(await client.advanceRosterDigest(g, ['w2', 'w3']), 2);
      assert.equal(await client.advanceRosterDigest(g, ['w1']), 3);
      assert.equal(await client.getRosterDigest(g), 3);
      assert.deepEqual(await movesOf(client, g, 0), { digest: 3, moved: ['w1', 'w2', 'w3'] }, 'since 0');
      assert.deepEqual(await movesOf(client, g, 1), { digest: 3, moved: ['w1', 'w2', 'w3'] }, 'since 1');
      assert.deepEqual(await movesOf(client, g, 2), { digest: 3, moved: ['w1'] }, 'since 2');
      assert.deepEqual(await movesOf(client, g, 3), { digest: 3, moved: [] }, 'since the digest');
    });

    define(t, target, 'an advance that names nobody makes every read of the moves across it null; reads after it name as before', async (context) => {
      const [storage] = (await context.clients(1)) as [Storage];
      const client = moving(storage, context);
      const g = context.group();
      await client.advanceRosterDigest(g, ['a']);
      await client.advanceRosterDigest(g, []);
      await client.advanceRosterDigest(g, ['b']);
      await client.advanceRosterDigest(g);
      await client.advanceRosterDigest(g, ['c']);
      assert.deepEqual(await movesOf(client, g, 0), { digest: 5, moved: null }, 'across the advance naming an empty list');
      assert.deepEqual(await movesOf(client, g, 1), { digest: 5, moved: null }, 'from just before it');
      assert.deepEqual(await movesOf(client, g, 3), { digest: 5, moved: null }, 'across the advance given no list');
      assert.deepEqual(await movesOf(client, g, 4), { digest: 5, moved: ['c'] }, 'after both');
    });

    define(t, target, 'a since above the digest reads null with the digest', async (context) => {
      const [storage] = (await context.clients(1)) as [Storage];
      const client = moving(storage, context);
      const g = context.group();
      assert.deepEqual(await movesOf(client, g, 7), { digest: 0, moved: null }, 'a group never advanced');
      await client.advanceRosterDigest(g, ['w1']);
      assert.deepEqual(await movesOf(client, g, 2), { digest: 1, moved: null });
    });

    define(t, target, `the last ${limits.rosterMovesKept} advances are kept: since that many before the digest names them all; since older names them all or reads null`, async (context) => {
      const [storage] = (await context.clients(1)) as [Storage];
      const client = moving(storage, context);
      const g = context.group();
      const total = limits.rosterMovesKept + 36;
      for (let i = 1; i <= total; i++) await client.advanceRosterDigest(g, [`w${String(i).padStart(3, '0')}`]);
      const kept = Array.from({ length: limits.rosterMovesKept }, (_, i) => `w${String(total - limits.rosterMovesKept + 1 + i).padStart(3, '0')}`);
      assert.deepEqual(await movesOf(client, g, total - limits.rosterMovesKept), { digest: total, moved: kept }, `the last ${limits.rosterMovesKept}`);
      const older = await movesOf(client, g, 0);
      const all = Array.from({ length: total }, (_, i) => `w${String(i + 1).padStart(3, '0')}`);
      assert.ok(older.moved === null || JSON.stringify(older.moved) === JSON.stringify(all), `since 0 reads null or every name, got ${JSON.stringify(older.moved)}`);
      assert.equal(older.digest, total);
    });

    define(t, target, `an advance names up to ${limits.maxWatchedMembers} worker ids of the largest size and of any characters, read back exactly`, async (context) => {
      const [storage] = (await context.clients(1)) as [Storage];
      const client = moving(storage, context);
      const g = context.group();
      const awkward = ['ü-ñ-名前', 'with "quotes" and \'single\'', 'colon:hash#brace{x}', 'percent%star*', ' spaced ', 'line\\back'];
      const largest = Array.from({ length: limits.maxWatchedMembers - awkward.length }, (_, i) => `${String(i).padStart(2, '0')}${'x'.repeat(limits.maxNameBytes - 2)}`);
      const named = [...awkward, ...largest];
      await client.advanceRosterDigest(g, named);
      assert.deepEqual(await movesOf(client, g, 0), { digest: 1, moved: [...named].sort() });
    });

    define(t, target, 'the moves of groups side by side never mix', async (context) => {
      const [storage] = (await context.clients(1)) as [Storage];
      const client = moving(storage, context);
      const base = context.group();
      const groups = [base, `${base}x`, base.slice(0, -1), `${base}:`, `${base}#digest`];
      for (let round = 0; round < 3; round++) await Promise.all(groups.map((g, i) => client.advanceRosterDigest(g, [`only-${i}-${round}`])));
      for (const [i, g] of groups.entries()) {
        assert.deepEqual(await movesOf(client, g, 0), { digest: 3, moved: [`only-${i}-0`, `only-${i}-1`, `only-${i}-2`] }, `group ${JSON.stringify(g)}`);
      }
    });

    define(t, target, 'a client reads the moves another client advanced at once: no client serves them from a cache of its own', async (context) => {
      const [a, b] = (await context.clients(2)) as [Storage, Storage];
      const writer = moving(a, context);
      const reader = moving(b, context);
      const g = context.group();
      for (let i = 1; i <= 4; i++) {
        await writer.advanceRosterDigest(g, [`w${i}`]);
        assert.deepEqual(await movesOf(reader, g, i - 1), { digest: i, moved: [`w${i}`] }, `advance ${i}`);
      }
    });

    define(
      t,
      target,
      `invalid input is refused with an InvalidInputError before anything is sent: a since that is no non-negative safe integer, ${limits.maxWatchedMembers + 1} worker ids in an advance, a bad worker id, a bad group`,
      async (context) => {
        const [storage] = (await context.clients(1)) as [Storage];
        const client = moving(storage, context);
        const g = context.group();
        await client.advanceRosterDigest(g, ['w1']);
        for (const since of [-1, 1.5, Number.NaN, '1' as unknown as number, null as unknown as number, 2 ** 53]) {
          await assert.rejects(client.getRosterMoves(g, since), (error) => assertInvalidInput(error, 'roster digest'), `since ${String(since)}`);
        }
        const tooMany = Array.from({ length: limits.maxWatchedMembers + 1 }, (_, i) => `w${i}`);
        await assert.rejects(client.advanceRosterDigest(g, tooMany), (error) => assertInvalidInput(error, String(tooMany.length)), `${tooMany.length} worker ids`);
        await assert.rejects(client.advanceRosterDigest(g, 'w1' as unknown as string[]), (error) => assertInvalidInput(error, 'array'), 'worker ids that are no array');
        for (const [what, name, mentions] of badNames) {
          const check = (error: unknown): true => assertInvalidInput(error, mentions);
          await assert.rejects(client.advanceRosterDigest(g, ['w2', name]), check, `an advance naming ${what}`);
          await assert.rejects(client.getRosterMoves(name, 0), check, `the moves of ${what}`);
        }
        assert.deepEqual(await movesOf(client, g, 0), { digest: 1, moved: ['w1'] }, 'nothing advanced');
      },
    );

    for (const [title, body] of races) define(t, target, title, (context) => body(context, target));
  });

  t.describe(`${target.name}: roster moves between processes`, () => {
    const mode = sharedProcesses(t, target);
    for (const [title, body] of races) define(t, target, `${title}, from separate processes`, (context) => body(context, target), mode);
  });
}
