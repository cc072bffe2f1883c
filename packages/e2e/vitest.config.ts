import { fileURLToPath } from 'node:url';
import { defineProject } from 'vitest/config';
import { longRun, sourceAliases } from '../../vitest.config.js';

const source = (name: string): string => fileURLToPath(new URL(`../${name}/src/index.ts`, import.meta.url));

// The worker processes run from source, so the test process does too.
const packageAliases = ['local-stack', 'source-kinesis', 'storage-dynamodb', 'storage-postgres', 'storage-redis'].map((name) => ({
  find: new RegExp(`^@leasehold/${name}$`),
  replacement: source(name),
}));

export default defineProject({
  resolve: { alias: [...sourceAliases, ...packageAliases] },
  test: {
    name: 'e2e',
    // The chaos runs (every backend, its faults, a split then a merge) go with the long suite.
    ...longRun(['test/**/*.test.ts'], ['test/chaos.test.ts']),
    testTimeout: 120_000,
    hookTimeout: 60_000,
  },
});
