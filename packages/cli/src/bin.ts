#!/usr/bin/env node
/** The `leasehold` binary: runs the command line on the process's arguments and streams. */
import { run } from './program.js';

// The AWS SDK warns about Node 20 on every start; the notice is noise in a command line's output.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

const interrupt = new AbortController();
process.once('SIGINT', () => interrupt.abort());
process.once('SIGTERM', () => interrupt.abort());

const code = await run(process.argv.slice(2), {
  out: (text) => process.stdout.write(text),
  err: (text) => process.stderr.write(text),
  isTTY: process.stdout.isTTY === true,
  signal: interrupt.signal,
});
process.exitCode = code;
