import { defineProject } from 'vitest/config';
import { longRun, sourceAliases } from '../../vitest.config.js';

/**
 * The fixed-seed simulation runs: `npm run test:long` runs them (CI runs both commands). The first pattern
 * takes the lease simulation's 2,000 seeds and its groups of 1,000 workers (simulation-1000-workers-*).
 */
const LONG = [
  'test/simulation-[0-9]*.test.ts',
  'test/consumer-simulation-[0-9]*.test.ts',
  'test/consumer-simulation-exactly-once.test.ts',
  'test/consumer-simulation-multi-stream.test.ts',
  'test/consumer-simulation-rewind.test.ts',
];

export default defineProject({
  resolve: { alias: sourceAliases },
  test: {
    name: 'core',
    ...longRun(['test/**/*.test.ts'], LONG),
    testTimeout: 60_000,
  },
});
