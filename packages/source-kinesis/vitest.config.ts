import { fileURLToPath } from 'node:url';
import { defineProject } from 'vitest/config';
import { sourceAliases } from '../../vitest.config.js';

export default defineProject({
  resolve: {
    alias: [
      ...sourceAliases,
      // The launcher is tested from its sources too, so that no build is needed first.
      { find: /^@leasehold\/local-stack$/, replacement: fileURLToPath(new URL('../local-stack/src/index.ts', import.meta.url)) },
    ],
  },
  test: {
    name: 'source-kinesis',
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // The AWS SDK warns on Node 20 that future releases will need Node 22: true, and noise in test output.
    env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
  },
});
