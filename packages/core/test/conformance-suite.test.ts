import { describe, expect, it } from 'vitest';
import { MemoryStorage, type Storage } from '../src/index.js';
import { runConformanceSuite, type TestApi } from '../src/testing/index.js';
import { DropsUnknownMetadataStorage, IgnoresVersionStorage } from './support/broken-adapters.js';

interface Outcome {
  title: string;
  error?: unknown;
}

/** Runs the whole suite against a store, outside vitest's own runner, and reports each test's outcome. */
async function runSuiteAgainst(createStorage: () => Promise<Storage>): Promise<Outcome[]> {
  const tests: Array<{ title: string; fn: () => Promise<void> }> = [];
  const path: string[] = [];
  const api: TestApi = {
    describe(name, fn) {
      path.push(name);
      fn();
      path.pop();
    },
    it(name, fn) {
      tests.push({ title: [...path, name].join(' > '), fn });
    },
  };
  runConformanceSuite(api, { name: 'subject', createStorage, changeFeed: true });
  const outcomes: Outcome[] = [];
  for (const test of tests) {
    try {
      await test.fn();
      outcomes.push({ title: test.title });
    } catch (error) {
      outcomes.push({ title: test.title, error });
    }
  }
  return outcomes;
}

const failed = (outcomes: Outcome[]): string[] => outcomes.filter((outcome) => outcome.error).map((outcome) => outcome.title);

describe('the conformance suite', () => {
  it('passes every test against the reference MemoryStorage', async () => {
    const shared = new MemoryStorage();
    const outcomes = await runSuiteAgainst(async () => shared);
    expect(outcomes.length).toBeGreaterThan(30);
    expect(failed(outcomes)).toEqual([]);
  });

  it('fails an adapter that ignores the version condition, in its stale-update and race tests', async () => {
    const shared = new IgnoresVersionStorage();
    const failures = failed(await runSuiteAgainst(async () => shared));
    expect(failures).toEqual(
      expect.arrayContaining([
        'subject: lease contract > an update at a stale version is a conflict carrying the current lease, and changes nothing',
        'subject: concurrency > 32 clients updating the same version: exactly one applies, the others see its write',
        'subject: concurrency > 8 clients each making 125 conditional increments with re-read and retry lose no update',
      ]),
    );
  });

  it('fails an adapter that drops metadata fields it does not know, in its round-trip tests', async () => {
    const shared = new DropsUnknownMetadataStorage();
    const failures = failed(await runSuiteAgainst(async () => shared));
    expect(failures).toEqual(
      expect.arrayContaining([
        'subject: lease contract > every field round-trips through create, update, get and list, including invented metadata keys',
      ]),
    );
  });
});
