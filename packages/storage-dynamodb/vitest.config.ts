import { defineProject } from 'vitest/config';
import { sourceAliases } from '../../vitest.config.js';

export default defineProject({
  resolve: { alias: sourceAliases },
  test: {
    name: 'storage-dynamodb',
    include: ['test/**/*.test.ts'],
    // dynalite is DynamoDB written in JavaScript: its tests of thousands of items are CPU work that a busy
    // machine slows several times over (the 3,000-lease listing took over 60 s under load). The timeout
    // only catches a test that hangs.
    testTimeout: 300_000,
    hookTimeout: 60_000,
    // The SDK warns on every run that it will require Node 22 from 2027; harmless, and noise in test output.
    env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
  },
});
