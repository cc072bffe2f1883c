/**
 * Runs a command as a child process with the terminal's input and output, passes Ctrl-C and SIGTERM on
 * to it, and resolves with its exit code (1 when it could not be started or died of a signal).
 */
import { spawn } from 'node:child_process';

/** @param {string} command @param {readonly string[]} args @param {NodeJS.ProcessEnv} [env] @returns {Promise<number>} */
export function runChild(command, args, env = process.env) {
  const child = spawn(command, args, { stdio: 'inherit', env });
  for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => child.kill(signal));
  return new Promise((resolve) => {
    child.once('error', (error) => {
      process.stderr.write(`${command} could not be started: ${error.message}\n`);
      resolve(1);
    });
    child.once('exit', (exitCode, signal) => resolve(exitCode ?? (signal ? 1 : 0)));
  });
}
