/**
 * The Lua scripts, one per operation, read from `./scripts/*.lua` beside this module (the build copies
 * them into `dist`). They are registered on the caller's client with `defineCommand`, which sends
 * EVALSHA and falls back to EVAL by itself when the server's script cache was flushed.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { StorageSchemaError } from '@leasehold/core';
import type { Cluster, Redis } from 'ioredis';
import { PKG } from './keys.js';

const SCRIPTS = {
  listLeases: { file: 'list-leases.lua', keys: 2 },
  getLease: { file: 'get-lease.lua', keys: 3 },
  getLeases: { file: 'get-leases.lua', keys: 3 },
  getTombstones: { file: 'get-tombstones.lua', keys: 2 },
  createLease: { file: 'create-lease.lua', keys: 3 },
  updateLeases: { file: 'update-leases.lua', keys: 4 },
  deleteLease: { file: 'delete-lease.lua', keys: 4 },
  getLeader: { file: 'get-leader.lua', keys: 2 },
  createLeader: { file: 'create-leader.lua', keys: 2 },
  updateLeader: { file: 'update-leader.lua', keys: 2 },
  getRoster: { file: 'get-roster.lua', keys: 1 },
  getMembers: { file: 'get-members.lua', keys: 1 },
  getRosterDigest: { file: 'get-roster-digest.lua', keys: 1 },
  advanceRosterDigest: { file: 'advance-roster-digest.lua', keys: 2 },
  getRosterMoves: { file: 'get-roster-moves.lua', keys: 2 },
  putMember: { file: 'put-member.lua', keys: 1 },
  removeMember: { file: 'remove-member.lua', keys: 1 },
} as const;

export type ScriptName = keyof typeof SCRIPTS;
type Arg = string | number;
export type ScriptCall = (...args: Arg[]) => Promise<unknown>;
export type Scripts = Readonly<Record<ScriptName, ScriptCall>>;

interface Source {
  readonly lua: string;
  readonly keys: number;
  /** The command name: versioned by the script's hash, so two versions of this package never clash on one client. */
  readonly command: string;
}

let sources: ReadonlyMap<ScriptName, Source> | undefined;

function loadSources(): ReadonlyMap<ScriptName, Source> {
  if (sources) return sources;
  const loaded = new Map<ScriptName, Source>();
  for (const [name, { file, keys }] of Object.entries(SCRIPTS) as Array<[ScriptName, { file: string; keys: number }]>) {
    let lua: string;
    try {
      lua = readFileSync(new URL(`./scripts/${file}`, import.meta.url), 'utf8');
    } catch (error) {
      throw new StorageSchemaError(`[${PKG}] cannot read the Lua script ${describeFile(file)}: ${(error as Error).message}`, { cause: error });
    }
    const sha = createHash('sha1').update(lua).digest('hex').slice(0, 12);
    loaded.set(name, { lua, keys, command: `leasehold_${name}_${sha}` });
  }
  sources = loaded;
  return loaded;
}

function describeFile(file: string): string {
  return JSON.stringify(`scripts/${file}`);
}

/**
 * Registers every script on the client (once per client and script version) and returns callers bound
 * to it. Registering adds methods to the client and changes none of its settings.
 */
export function bindScripts(client: Redis | Cluster): Scripts {
  const methods = client as unknown as Record<string, ScriptCall | undefined>;
  const bound = {} as Record<ScriptName, ScriptCall>;
  for (const [name, source] of loadSources()) {
    if (typeof methods[source.command] !== 'function') {
      client.defineCommand(source.command, { lua: source.lua, numberOfKeys: source.keys });
    }
    const method = methods[source.command] as ScriptCall;
    bound[name] = (...args: Arg[]) => method.apply(client, args);
  }
  return bound;
}
