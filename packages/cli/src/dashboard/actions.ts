/**
 * The dashboard's actions: the command line's own commands (`member remove`, `rewind`, `checkpoint set`),
 * called with what the page posted, their guards and refusals included. Nothing here writes a record: each
 * action is the command, run with its output captured for the page.
 */
import { InvalidInputError } from '@leasehold/core';
import { describeValue } from '@leasehold/core/adapter';
import { checkpointSet } from '../commands/checkpoint.js';
import { memberRemove } from '../commands/member.js';
import { rewind } from '../commands/rewind.js';
import { PKG } from '../pkg.js';
import { errorLine, exitCodeOf, type Io } from '../shared.js';

/** What the page may ask. `rewind-plan` writes nothing; the others write, and need `confirm: true`. */
export type ActionName = 'member-remove' | 'rewind-plan' | 'rewind-request' | 'checkpoint-set';

const WRITES: ReadonlySet<ActionName> = new Set(['member-remove', 'rewind-request', 'checkpoint-set']);
const NAMES: ReadonlySet<string> = new Set<ActionName>(['member-remove', 'rewind-plan', 'rewind-request', 'checkpoint-set']);

/** What an action printed, and its exit code as the command line's (0 done, 1 refused or failed, 2 bad input). */
export interface ActionResult {
  readonly action: ActionName;
  readonly code: number;
  readonly out: string;
  readonly err: string;
}

/** Where actions go: the storage URL the commands open, the group, and how long a rewind request waits for its shards. */
export interface ActionTarget {
  readonly storageUrl: string;
  readonly group: string;
  readonly rewindTimeoutMs: number;
  readonly signal: AbortSignal;
}

/**
 * Checks a posted body and runs its action through the command's function. Throws an `InvalidInputError`
 * naming the bad field for a body that is not an action, or a write without `confirm: true`.
 */
export async function runAction(body: unknown, target: ActionTarget): Promise<ActionResult> {
  const fields = objectOf(body);
  const action = fields.action;
  if (typeof action !== 'string' || !NAMES.has(action)) {
    throw new InvalidInputError(`[${PKG}] action must be one of ${[...NAMES].join(', ')}, got ${describeValue(action)}`);
  }
  const name = action as ActionName;
  if (WRITES.has(name) && fields.confirm !== true) {
    throw new InvalidInputError(`[${PKG}] action ${name} writes to the group: the request needs "confirm": true, got ${describeValue(fields.confirm)}`);
  }
  let out = '';
  let err = '';
  const io: Io = { out: (text) => void (out += text), err: (text) => void (err += text), isTTY: false, signal: target.signal };
  const common = { storage: target.storageUrl, group: target.group };
  try {
    switch (name) {
      case 'member-remove':
        await memberRemove({ ...common, worker: text(fields, 'worker'), version: count(fields, 'version'), observeMs: 0 }, io);
        break;
      case 'rewind-plan':
      case 'rewind-request':
        await rewind(
          {
            ...common,
            stream: optionalText(fields, 'stream'),
            shards: texts(fields, 'shards'),
            to: text(fields, 'to'),
            apply: name === 'rewind-request',
            timeoutMs: target.rewindTimeoutMs,
            json: false,
          },
          io,
        );
        break;
      case 'checkpoint-set':
        await checkpointSet(
          { ...common, lease: text(fields, 'lease'), position: text(fields, 'position'), reopenFinished: fields.reopenFinished === true, force: false, observeMs: 0 },
          io,
        );
        break;
    }
    return { action: name, code: 0, out, err };
  } catch (error) {
    return { action: name, code: exitCodeOf(error), out, err: `${err}${errorLine(error)}\n` };
  }
}

function objectOf(body: unknown): Record<string, unknown> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new InvalidInputError(`[${PKG}] an action is a JSON object, got ${describeValue(body)}`);
  return body as Record<string, unknown>;
}

function text(fields: Record<string, unknown>, name: string): string {
  const value = fields[name];
  if (typeof value !== 'string' || value === '') throw new InvalidInputError(`[${PKG}] ${name} must be a non-empty string, got ${describeValue(value)}`);
  return value;
}

function optionalText(fields: Record<string, unknown>, name: string): string | undefined {
  return fields[name] === undefined || fields[name] === '' ? undefined : text(fields, name);
}

function texts(fields: Record<string, unknown>, name: string): string[] {
  const value = fields[name] ?? [];
  if (!Array.isArray(value) || !value.every((item): item is string => typeof item === 'string' && item !== '')) {
    throw new InvalidInputError(`[${PKG}] ${name} must be a list of non-empty strings, got ${describeValue(value)}`);
  }
  return value;
}

function count(fields: Record<string, unknown>, name: string): number {
  const value = fields[name];
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) throw new InvalidInputError(`[${PKG}] ${name} must be a whole number of at least 1, got ${describeValue(value)}`);
  return value;
}
