#!/usr/bin/env node
// The packed packages work outside the workspace: builds @leasehold/core and @leasehold/storage-postgres,
// packs them with `pnpm pack` (which replaces the `workspace:` ranges), installs the tarballs with npm into
// a scratch project in the system's temporary folder, type-checks a small TypeScript program against the
// installed declarations, then runs it on the shared PostgreSQL server (a fresh schema of the `test`
// database) and checks what it prints. Exits non-zero on the first failure; the scratch folder is removed
// on success and kept (its path printed) on failure.
//
//   node scripts/pack-smoke/run.mjs [--no-build] [--keep]
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../../', import.meta.url));
const args = new Set(process.argv.slice(2));
const packages = ['core', 'storage-postgres'];
const started = performance.now();

/** Versions installed next to the tarballs: the peer the user brings, and its types for the type check. */
const PG_VERSION = '8.23.1';
const TYPES_PG_VERSION = '8.23.1';

const database = {
  host: process.env.PGHOST ?? '127.0.0.1',
  port: Number(process.env.PGPORT ?? 5432),
  database: process.env.PGDATABASE ?? 'test',
  user: process.env.PGUSER ?? 'root',
};

function step(message) {
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  console.log(`[pack-smoke ${seconds.padStart(5)}s] ${message}`);
}

function run(command, commandArgs, cwd, env = {}) {
  const result = spawnSync(command, commandArgs, {
    cwd,
    encoding: 'utf8',
    env: { ...process.env, npm_config_update_notifier: 'false', npm_config_fund: 'false', npm_config_audit: 'false', ...env },
  });
  if (result.error) throw result.error;
  if (result.status !== 0) {
    throw new Error(
      `\`${command} ${commandArgs.join(' ')}\` in ${cwd} exited with ${result.status}\n${result.stdout}\n${result.stderr}`,
    );
  }
  return result.stdout;
}

const scratch = mkdtempSync(join(tmpdir(), 'leasehold-pack-smoke-'));
assert.ok(relative(root, scratch).startsWith(`..${sep}`), `the scratch folder ${scratch} must be outside the workspace`);
let passed = false;

try {
  if (!args.has('--no-build')) {
    step('build');
    run(process.execPath, [
      join(root, 'scripts/pnpm.mjs'), 'exec', 'turbo', 'run', 'build', '--output-logs=errors-only',
      ...packages.map((name) => `--filter=@leasehold/${name}`),
    ], root);
  }

  step(`pnpm pack ${packages.join(', ')} into ${scratch}`);
  const tarballs = [];
  for (const name of packages) {
    const before = new Set(readdirSync(scratch));
    run(process.execPath, [join(root, 'scripts/pnpm.mjs'), 'pack', '--pack-destination', scratch], join(root, 'packages', name));
    const added = readdirSync(scratch).filter((file) => !before.has(file) && file.endsWith('.tgz'));
    assert.equal(added.length, 1, `pnpm pack of ${name} made one tarball (made ${added.join(', ') || 'none'})`);
    const tarball = join(scratch, added[0]);
    tarballs.push(tarball);

    // The packed manifest: no workspace protocol left, and only dist, the README, the changelog, the
    // upgrade notes and the manifest inside. Core must carry UPGRADING.md: a ContractVersionError names it.
    const manifest = JSON.parse(run('tar', ['-xzOf', tarball, 'package/package.json'], scratch));
    for (const field of ['dependencies', 'peerDependencies', 'optionalDependencies', 'devDependencies']) {
      for (const [dependency, range] of Object.entries(manifest[field] ?? {})) {
        assert.ok(!String(range).startsWith('workspace:'), `${manifest.name} ${field}.${dependency} is still ${range}`);
      }
    }
    const files = run('tar', ['-tzf', tarball], scratch).trim().split('\n');
    const stray = files.filter((file) => !/^package\/(dist\/|package\.json$|README\.md$|CHANGELOG\.md$|UPGRADING\.md$|LICENSE)/.test(file));
    assert.deepEqual(stray, [], `${manifest.name} packs only dist, README, CHANGELOG, UPGRADING and package.json`);
    if (name === 'core') assert.ok(files.includes('package/UPGRADING.md'), '@leasehold/core packs the UPGRADING.md its ContractVersionError names');
    step(`  ${added[0]}: ${files.length} files, peers ${JSON.stringify(manifest.peerDependencies ?? {})}`);
  }

  step(`npm install the tarballs and pg@${PG_VERSION}`);
  const project = join(scratch, 'app');
  run('mkdir', ['-p', project], scratch);
  run('npm', ['init', '-y'], project);
  const pkg = JSON.parse(readFileSync(join(project, 'package.json'), 'utf8'));
  writeFileSync(join(project, 'package.json'), `${JSON.stringify({ ...pkg, type: 'module', private: true }, null, 2)}\n`);
  run('npm', [
    'install', '--no-audit', '--no-fund', '--loglevel=error',
    ...tarballs, `pg@${PG_VERSION}`, `@types/pg@${TYPES_PG_VERSION}`,
  ], project);

  writeFileSync(join(project, 'tsconfig.json'), `${JSON.stringify({
    compilerOptions: {
      target: 'ES2022', lib: ['ES2023'], module: 'NodeNext', moduleResolution: 'NodeNext', strict: true,
      types: ['node'], outDir: 'out', rootDir: 'src', skipLibCheck: false,
    },
    include: ['src'],
  }, null, 2)}\n`);
  run('mkdir', ['-p', join(project, 'src')], project);
  writeFileSync(join(project, 'src', 'main.ts'), `\
import pg from 'pg';
import { MemoryStorage, type LeaseRecord } from '@leasehold/core';
import { VirtualClock } from '@leasehold/core/testing';
import { PostgresStorage } from '@leasehold/storage-postgres';

const config = JSON.parse(process.env.SMOKE_DATABASE ?? '{}') as pg.PoolConfig;
const schema = \`pack_smoke_\${Date.now().toString(36)}_\${Math.random().toString(36).slice(2, 8)}\`;
const pool = new pg.Pool({ ...config, max: 4, connectionTimeoutMillis: 10_000 });
pool.on('error', () => undefined);

console.log('testing export:', typeof VirtualClock === 'function' && typeof MemoryStorage === 'function');
const storage = new PostgresStorage({ pool, schema });
try {
  await storage.migrate();
  console.log('migrated:', schema);
  const created = await storage.createLease({ group: 'smoke', leaseKey: 'shard-0' });
  console.log('created:', created.status);
  const read: LeaseRecord | null = await storage.getLease('smoke', 'shard-0');
  console.log('read:', JSON.stringify({ group: read?.group, leaseKey: read?.leaseKey, owner: read?.owner ?? null }));
} finally {
  await storage.close();
  await pool.query(\`DROP SCHEMA IF EXISTS "\${schema}" CASCADE\`);
  await pool.end();
}
`);

  step('type-check the program against the installed declarations');
  run(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-p', project], project);

  step('run the program');
  const output = run(process.execPath, [join(project, 'out', 'main.js')], project, {
    SMOKE_DATABASE: JSON.stringify(database),
  });
  console.log(output.trimEnd().replace(/^/gm, '    '));
  const lines = output.trim().split('\n');
  assert.equal(lines[0], 'testing export: true');
  assert.match(lines[1] ?? '', /^migrated: pack_smoke_\w+$/);
  assert.equal(lines[2], 'created: applied');
  assert.equal(lines[3], 'read: {"group":"smoke","leaseKey":"shard-0","owner":null}');
  assert.equal(lines.length, 4);

  passed = true;
  step('passed');
} finally {
  if (passed && !args.has('--keep')) rmSync(scratch, { recursive: true, force: true });
  else console.log(`[pack-smoke] scratch project kept at ${resolve(scratch)}`);
}
