import { defineProject } from 'vitest/config';
import { sourceAliases } from '../../vitest.config.js';

export default defineProject({
  resolve: { alias: sourceAliases },
  test: {
    name: 'cli',
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
  },
});
