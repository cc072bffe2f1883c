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
import { spawn } from 'node:child_process';

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
const child = spawn(command, args, { stdio: 'inherit', env: { ...process.env, ...services.env, ...(long ? { LEASEHOLD_TESTS: 'long' } : {}) } });
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => child.kill(signal));
const code = await new Promise((resolve) => {
  child.once('error', (error) => {
    process.stderr.write(`${command} could not be started: ${error.message}\n`);
    resolve(1);
  });
  child.once('exit', (exitCode, signal) => resolve(exitCode ?? (signal ? 1 : 0)));
});
await services.close();
process.exit(code);
