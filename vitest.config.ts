import { existsSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

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

export default defineConfig({
  resolve: { alias: sourceAliases },
  test: {
    projects: ['packages/*/vitest.config.ts', 'examples/vitest.config.ts'].filter((pattern) => !pattern.startsWith('examples') || existsSync(new URL('./examples', import.meta.url))),
    silent: 'passed-only',
    // Most test files spend their time waiting on a server, a worker process or a lease's timer, not on a
    // core: vitest's default (one worker fewer than the cores, so one on two cores) would run them one at
    // a time. Twice the cores, and at least four, keeps two cores busy.
    maxWorkers: Math.max(4, 2 * availableParallelism()),
  },
});
