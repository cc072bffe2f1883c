// Copies the Lua scripts next to the compiled module, which reads them at run time relative to itself.
import { cpSync, statSync } from 'node:fs';
import { fileURLToPath, URL } from 'node:url';

const from = fileURLToPath(new URL('../src/scripts/', import.meta.url));
const to = fileURLToPath(new URL('../dist/scripts/', import.meta.url));
cpSync(from, to, { recursive: true, filter: (path) => statSync(path).isDirectory() || path.endsWith('.lua') });
