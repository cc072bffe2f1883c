import { defineProject } from 'vitest/config';
import { sourceAliases } from '../../vitest.config.js';

export default defineProject({
  resolve: { alias: sourceAliases },
  test: {
    name: 'connect',
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
  },
});
