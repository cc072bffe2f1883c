import { defineProject } from 'vitest/config';
import { sourceAliases } from '../../vitest.config.js';

export default defineProject({
  resolve: { alias: sourceAliases },
  test: {
    name: 'storage-dynamodb',
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // The SDK warns on every run that it will require Node 22 from 2027; harmless, and noise in test output.
    env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
  },
});
