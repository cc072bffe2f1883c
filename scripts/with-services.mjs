#!/usr/bin/env node
/**
 * Runs a command (the test suite) with the PostgreSQL and Redis it needs: the ones the environment names
 * (PGHOST/PGPORT/PGUSER/PGDATABASE, REDIS_HOST/REDIS_PORT; by default 127.0.0.1:5432 and :6379) when they
 * answer, else throwaway ones started from the binaries on this machine, stopped again when the command
 * ends. Needs the local stack built (`turbo run build` does it).
 *
 *   node scripts/with-services.mjs vitest run
 *   node scripts/with-services.mjs --long vitest run    the long suite (LEASEHOLD_TESTS=long)
 */
import { runChild } from './run-child.mjs';

const argv = process.argv.slice(2);
const long = argv[0] === '--long';
const [command, ...args] = long ? argv.slice(1) : argv;
if (!command) {
  process.stderr.write('usage: node scripts/with-services.mjs <command> [args...]\n');
  process.exit(2);
}
const { ensureTestServices } = await import('../packages/local-stack/dist/index.js');
let services;
try {
  services = await ensureTestServices();
} catch (error) {
  process.stderr.write(`${error.message}\n`);
  process.exit(1);
}
for (const line of services.summary) process.stdout.write(`test services: ${line}\n`);
const code = await runChild(command, args, { ...process.env, ...services.env, ...(long ? { LEASEHOLD_TESTS: 'long' } : {}) });
await services.close();
process.exit(code);
