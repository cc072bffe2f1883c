import { existsSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

const core = (path: string): string => fileURLToPath(new URL(`./packages/core/src/${path}`, import.meta.url));

// Tests run against the sources of the workspace packages, so that a change is tested without a build.
export const sourceAliases = [
  { find: /^@leasehold\/core\/testing$/, replacement: core('testing/index.ts') },
  { find: /^@leasehold\/core\/adapter$/, replacement: core('adapter.ts') },
  { find: /^@leasehold\/core$/, replacement: core('index.ts') },
];

/**
 * The files a project runs: in `npm test` its tests but the `long` ones, in `npm run test:long`
 * (`LEASEHOLD_TESTS=long`) only those.
 */
export function longRun(include: string[], long: string[]): { include: string[]; exclude: string[] } {
  return process.env.LEASEHOLD_TESTS === 'long' ? { include: long, exclude: [] } : { include, exclude: [...long, '**/node_modules/**'] };
}

/**
 * The files that take longest, longest first, as a run of both commands on two cores measured them. Vitest
 * orders files by project name, and without its cache (a fresh clone, as CI is) by size within a project:
 * the adapters' conformance suites, a few lines each and in the last projects, started last and ran alone
 * for minutes at the end. Started first, they overlap everything else. A file missing from this list
 * keeps vitest's order after them; a slow new file belongs in it.
 */
const LONGEST_FIRST = [
  // npm test
  'packages/storage-dynamodb/test/conformance.test.ts',
  'packages/core/test/simulation-large-group.test.ts',
  'examples/test/sqlite-storage.test.ts',
  'packages/storage-postgres/test/conformance-unprepared.test.ts',
  'packages/storage-postgres/test/conformance.test.ts',
  'packages/core/test/conformance-suite.test.ts',
  'packages/storage-redis/test/conformance.test.ts',
  'packages/cli/test/status.test.ts',
  'packages/cli/test/kcl-resume.test.ts',
  'packages/core/test/consumer-simulation-unsafe.test.ts',
  'packages/storage-dynamodb/test/dynamodb.test.ts',
  'packages/core/test/simulation-busy-rebalance.test.ts',
  // npm run test:long
  'packages/core/test/simulation-1000-workers-1.test.ts',
  'packages/core/test/simulation-1000-workers-2.test.ts',
  'packages/e2e/test/chaos.test.ts',
];

const root = fileURLToPath(new URL('.', import.meta.url));

/** Vitest's own order, but the files of {@link LONGEST_FIRST} first, in its order. */
export class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const rank = (spec: TestSpecification): number => {
      const at = LONGEST_FIRST.indexOf(relative(root, spec.moduleId));
      return at === -1 ? LONGEST_FIRST.length : at;
    };
    const sorted = await super.sort(files);
    return sorted.map((spec, order) => ({ spec, order, rank: rank(spec) })).sort((a, b) => a.rank - b.rank || a.order - b.order).map(({ spec }) => spec);
  }
}

export default defineConfig({
  resolve: { alias: sourceAliases },
  test: {
    projects: ['packages/*/vitest.config.ts', 'examples/vitest.config.ts'].filter((pattern) => !pattern.startsWith('examples') || existsSync(new URL('./examples', import.meta.url))),
    silent: 'passed-only',
    sequence: { sequencer: LongestFirst },
    // Most test files spend their time waiting on a server, a worker process or a lease's timer, not on a
    // core: vitest's default (one worker fewer than the cores, so one on two cores) would run them one at
    // a time. Twice the cores, and at least four, keeps two cores busy.
    maxWorkers: Math.max(4, 2 * availableParallelism()),
  },
});
