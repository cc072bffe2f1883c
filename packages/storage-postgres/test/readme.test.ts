import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { afterAll, expect, it } from 'vitest';
import { useServer } from './support.js';

const server = useServer('lh_readme', 2);
const snippetFile = new URL('./.readme-snippet.ts', import.meta.url);

afterAll(() => {
  rmSync(snippetFile, { force: true });
});

it('runs the usage snippet of the README as written, in a fresh schema', async () => {
  const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
  const snippet = /## Usage\n\n```ts\n([\s\S]*?)```/.exec(readme)?.[1];
  expect(snippet).toBeDefined();
  const { host, port, database, user } = server.pool().options;
  const runnable = (snippet as string)
    .replace(`from '@leasehold/storage-postgres'`, `from '../src/index.js'`)
    .replace(`schema: 'leasehold'`, `schema: ${JSON.stringify(server.schema)}`)
    .replace('process.env.DATABASE_URL', JSON.stringify(`postgres://${user}@${host}:${port}/${database}`));
  expect(runnable).toContain(server.schema);
  writeFileSync(snippetFile, `${runnable}\nexport {};\n`);
  const printed: unknown[] = [];
  const log = console.log;
  console.log = (...args: unknown[]) => printed.push(...args);
  try {
    await import(snippetFile.href);
  } finally {
    console.log = log;
  }
  expect(printed).toEqual(['applied']);
});
