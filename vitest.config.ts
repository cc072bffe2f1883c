import { existsSync } from 'node:fs';
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
  },
});
