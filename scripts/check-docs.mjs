#!/usr/bin/env node
// Checks the READMEs against the code, where a sentence cannot be type-checked:
// - an option table preceded by `<!-- options: <file>#<Interface> -->` names every option of that
//   interface (inherited ones included) and no option it lacks;
// - every option docs/DESIGN.md names (a backticked duration, interval or limit) exists in some package;
// - the list of the conformance suite's rules between `<!-- suite-rules:start -->` and
//   `<!-- suite-rules:end -->` in core's README quotes every test title of the suite, word for word, and
//   nothing else. It reads the built suite, so run it after the build.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import ts from 'typescript';

const root = fileURLToPath(new URL('..', import.meta.url));
const readmes = [
  join(root, 'README.md'),
  ...readdirSync(join(root, 'packages')).map((name) => join(root, 'packages', name, 'README.md')),
  join(root, 'examples', 'README.md'),
].filter((path) => existsSync(path));

const problems = [];

/** The option names of `name` in `file`: every property of the interface's type, inherited ones included. */
function optionsOf(file, name) {
  const program = ts.createProgram([file], { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, strict: true, noEmit: true });
  const source = program.getSourceFile(file);
  if (!source) throw new Error(`${file} cannot be read`);
  const checker = program.getTypeChecker();
  const declaration = source.statements.find((statement) => (ts.isInterfaceDeclaration(statement) || ts.isTypeAliasDeclaration(statement)) && statement.name.text === name);
  if (!declaration) return undefined;
  const type = checker.getTypeAtLocation(declaration.name);
  return new Set(checker.getPropertiesOfType(type).map((symbol) => symbol.getName()));
}

/** The option names a table lists: the backticked names of each row's first cell (`a`, `b(x)` gives a and b). */
function tableOptions(lines, start) {
  const names = new Set();
  let i = start;
  while (i < lines.length && !lines[i].startsWith('|')) i++;
  for (i += 2; i < lines.length && lines[i].startsWith('|'); i++) {
    const cell = lines[i].split('|')[1] ?? '';
    for (const match of cell.matchAll(/`([A-Za-z_$][\w$]*)/g)) names.add(match[1]);
  }
  return names;
}

let tables = 0;
for (const readme of readmes) {
  const lines = readFileSync(readme, 'utf8').split('\n');
  lines.forEach((line, index) => {
    const marker = /^<!-- options: (\S+)#(\w+) -->$/.exec(line.trim());
    if (!marker) return;
    tables++;
    const where = `${relative(root, readme)}:${index + 1}`;
    const declared = optionsOf(join(root, marker[1]), marker[2]);
    if (!declared) {
      problems.push(`${where}: ${marker[1]} declares no ${marker[2]}`);
      return;
    }
    const listed = tableOptions(lines, index + 1);
    for (const name of listed) if (!declared.has(name)) problems.push(`${where}: the table names \`${name}\`, which ${marker[2]} does not have`);
    for (const name of declared) if (!listed.has(name)) problems.push(`${where}: the table misses \`${name}\` of ${marker[2]}`);
  });
}

// DESIGN names options in backticks: each name that reads as an option (a duration, a limit, an
// interval) must be a property of an exported options or policy type of some package.
{
  const sources = readdirSync(join(root, 'packages'))
    .flatMap((name) => {
      const dir = join(root, 'packages', name, 'src');
      return existsSync(dir) ? readdirSync(dir, { recursive: true }).map((file) => join(dir, String(file))) : [];
    })
    .filter((file) => file.endsWith('.ts') && !file.endsWith('.d.ts'));
  const program = ts.createProgram(sources, { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, strict: true, noEmit: true });
  const checker = program.getTypeChecker();
  const options = new Set();
  for (const file of sources) {
    for (const statement of program.getSourceFile(file)?.statements ?? []) {
      if (!(ts.isInterfaceDeclaration(statement) || ts.isTypeAliasDeclaration(statement)) || !/(Options|Policy)$/.test(statement.name.text)) continue;
      const type = checker.getTypeAtLocation(statement.name);
      for (const part of type.isUnion() ? type.types : [type]) for (const symbol of checker.getPropertiesOfType(part)) options.add(symbol.getName());
    }
  }
  const design = readFileSync(join(root, 'docs/DESIGN.md'), 'utf8');
  for (const [, name] of design.matchAll(/`([a-z][A-Za-z0-9]*(?:Ms|Interval|PerWorker|PerTick|Drift|Concurrency))`/g)) {
    if (!options.has(name)) problems.push(`docs/DESIGN.md: \`${name}\` is no option of any package`);
  }
}

// The suite's titles, as it registers them (no test runs: `it` only records the title).
const suite = join(root, 'packages/core/dist/testing/index.js');
let rules = 0;
if (!existsSync(suite)) {
  problems.push('packages/core is not built: the conformance suite\'s titles cannot be read (run the build first)');
} else {
  const { runConformanceSuite } = await import(pathToFileURL(suite).href);
  const titles = [];
  runConformanceSuite({ describe: (_name, fn) => fn(), it: (title) => void titles.push(title) }, { name: 'docs', createStorage: async () => { throw new Error('not run'); } });
  const crossProcess = ', from separate processes';
  const readme = join(root, 'packages/core/README.md');
  const text = readFileSync(readme, 'utf8');
  const section = /<!-- suite-rules:start -->([\s\S]*?)<!-- suite-rules:end -->/.exec(text);
  if (!section) {
    problems.push('packages/core/README.md: no suite-rules section');
  } else {
    const quoted = new Set([...section[1].matchAll(/^\s*- (.+)$/gm)].map((match) => match[1].trim()));
    rules = quoted.size;
    const known = new Set(titles);
    for (const rule of quoted) if (!known.has(rule)) problems.push(`packages/core/README.md: "${rule}" is no test title of the conformance suite`);
    for (const title of titles) {
      const base = title.endsWith(crossProcess) ? title.slice(0, -crossProcess.length) : title;
      if (!quoted.has(base)) problems.push(`packages/core/README.md: the suite-rules section misses "${title}"`);
    }
  }
}

for (const problem of problems) console.error(problem);
console.log(`docs: ${tables} option tables, DESIGN's option names and ${rules} suite rules checked, ${problems.length} problems`);
process.exit(problems.length === 0 ? 0 : 1);
