import { fileURLToPath } from 'node:url';
import { defineProject } from 'vitest/config';
import { sourceAliases } from '../../vitest.config.js';

const source = (name: string): string => fileURLToPath(new URL(`../${name}/src/index.ts`, import.meta.url));

// The workers a test runs in this process (the KCL import's) read from the sources, over the one copy of
// core the aliases give; the binary under test runs from its build.
const packageAliases = ['source-kinesis', 'storage-dynamodb'].map((name) => ({ find: new RegExp(`^@leasehold/${name}$`), replacement: source(name) }));

export default defineProject({
  resolve: { alias: [...sourceAliases, ...packageAliases] },
  test: {
    name: 'cli',
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
  },
});
