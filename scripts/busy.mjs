#!/usr/bin/env node
/**
 * Runs a command while child processes keep the machine's cores busy, and exits with the command's code:
 * a test that passes only on an idle machine fails here, as it would on a loaded CI runner.
 *
 *   node scripts/busy.mjs -- npm test
 *   node scripts/busy.mjs --burners 4 -- npx vitest run --project cli
 *
 * --burners N      CPU burners to start (default: one per core, `os.availableParallelism()`)
 * --max-minutes M  each burner stops by itself after this long (default 60), so that none outlives a run
 *                  that was killed without the chance to stop them
 *
 * A burner spins in slices of 50 ms and looks up between them: it stops when this process disconnects
 * (it ended, or was killed) or when its time is up.
 */
import { fork } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { setImmediate } from 'node:timers';
import { fileURLToPath } from 'node:url';
import { runChild } from './run-child.mjs';

const SLICE_MS = 50;

if (process.argv[2] === '--burn') {
  burn(Number(process.argv[3]));
} else {
  await run(process.argv.slice(2));
}

/** One burner: busy until `deadline` (epoch milliseconds) or until its parent goes away. */
function burn(deadline) {
  let sink = 0;
  const slice = () => {
    if (!process.connected || Date.now() >= deadline) process.exit(0);
    const end = performance.now() + SLICE_MS;
    while (performance.now() < end) sink = (sink + Math.sqrt(sink + 1)) % 1e9;
    setImmediate(slice);
  };
  process.on('disconnect', () => process.exit(0));
  slice();
}

async function run(argv) {
  const separator = argv.indexOf('--');
  const options = separator < 0 ? [] : argv.slice(0, separator);
  const [command, ...args] = separator < 0 ? argv : argv.slice(separator + 1);
  const burners = option(options, '--burners', availableParallelism());
  const maxMinutes = option(options, '--max-minutes', 60);
  if (!command || !Number.isInteger(burners) || burners < 0 || !(maxMinutes > 0)) {
    process.stderr.write('usage: node scripts/busy.mjs [--burners N] [--max-minutes M] -- <command> [args...]\n');
    process.exit(2);
  }

  const deadline = Date.now() + maxMinutes * 60_000;
  const self = fileURLToPath(import.meta.url);
  const children = Array.from({ length: burners }, () => fork(self, ['--burn', String(deadline)], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] }));
  const stopBurners = () => {
    for (const child of children) if (child.connected) child.disconnect();
    for (const child of children) child.kill('SIGKILL');
  };
  process.stdout.write(`busy: ${burners} CPU burners on ${availableParallelism()} cores (for at most ${maxMinutes} min) while: ${[command, ...args].join(' ')}\n`);

  const started = performance.now();
  const code = await runChild(command, args);
  stopBurners();
  const seconds = Math.round((performance.now() - started) / 1000);
  process.stdout.write(`busy: ${[command, ...args].join(' ')} exited with ${code} after ${seconds} s under ${burners} burners\n`);
  process.exit(code);
}

function option(options, name, fallback) {
  const at = options.indexOf(name);
  return at < 0 ? fallback : Number(options[at + 1]);
}
