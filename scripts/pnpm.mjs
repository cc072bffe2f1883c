#!/usr/bin/env node
// Runs the pinned pnpm (from package.json's packageManager) through npx, so that a fresh machine with only
// Node and npm needs nothing else installed: `npm test` and `npm run demo` go through here.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

const { packageManager } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
const result = spawnSync('npx', ['--yes', packageManager, ...process.argv.slice(2)], {
  stdio: 'inherit',
  env: { ...process.env, npm_config_update_notifier: 'false' },
});
if (result.error) throw result.error;
process.exit(result.status ?? 1);
