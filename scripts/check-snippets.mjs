#!/usr/bin/env node
// Type-checks every ```ts block of every package's README (and the root and examples READMEs), in the
// package's own folder so that its dependencies resolve. A snippet that does not compile is a bug.
// A block fenced as ```ts ignore is shown to readers but not checked (for fragments).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const folders = [
  root,
  ...readdirSync(join(root, 'packages')).map((name) => join(root, 'packages', name)),
  join(root, 'examples'),
].filter((folder) => existsSync(join(folder, 'README.md')) && existsSync(join(folder, 'package.json')));

let failures = 0;
let checked = 0;
for (const folder of folders) {
  const readme = readFileSync(join(folder, 'README.md'), 'utf8');
  const blocks = [...readme.matchAll(/^```ts[^\S\n]*(\w*)\n([\s\S]*?)^```/gm)].filter((match) => match[1] !== 'ignore');
  if (blocks.length === 0) continue;
  const out = join(folder, '.snippets');
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out);
  blocks.forEach((match, i) => writeFileSync(join(out, `snippet-${i + 1}.ts`), `${match[2]}\nexport {};\n`));
  writeFileSync(
    join(out, 'tsconfig.json'),
    JSON.stringify({
      extends: relative(out, join(root, 'tsconfig.base.json')),
      compilerOptions: { noEmit: true, noUnusedLocals: false },
      include: ['*.ts'],
    }),
  );
  const tsc = spawnSync(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-p', out], { encoding: 'utf8' });
  checked += blocks.length;
  if (tsc.status !== 0) {
    failures++;
    console.error(`${relative(root, folder) || '.'}/README.md: a snippet does not compile\n${tsc.stdout}${tsc.stderr}`);
  } else {
    rmSync(out, { recursive: true, force: true });
  }
}
console.log(`README snippets: ${checked} checked in ${folders.length} READMEs, ${failures} READMEs failing`);
process.exit(failures === 0 ? 0 : 1);
