/**
 * The tests run the real binary, so it is built first: the workspace packages it imports (only when
 * their build output is missing; `pnpm build` keeps them current) and then this package, always.
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../../..', import.meta.url));
const cli = fileURLToPath(new URL('..', import.meta.url));
const dependencies = ['core', 'connect', 'local-stack', 'storage-postgres', 'storage-redis', 'storage-dynamodb'];

export default function setup(): void {
  if (dependencies.some((name) => !existsSync(`${root}/packages/${name}/dist/index.js`))) {
    execFileSync(process.execPath, ['scripts/pnpm.mjs', '--filter', '@leasehold/cli^...', 'run', 'build'], { cwd: root, stdio: 'inherit' });
  }
  execFileSync(process.execPath, [`${root}/node_modules/typescript/bin/tsc`, '-p', 'tsconfig.build.json'], { cwd: cli, stdio: 'inherit' });
}
