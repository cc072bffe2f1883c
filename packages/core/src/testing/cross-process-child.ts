/**
 * A process of the conformance suite's cross-process mode: opens its own clients with the target's module,
 * runs each call the suite sends it on them, and answers with the result or the error.
 */
import type { Storage } from '../storage.js';
import type { FromChild, ToChild } from './cross-process.js';
import { REMOTE_METHODS } from './cross-process.js';
import { errorToWire, fromWire, toWire } from './wire.js';

type Opener = (options: unknown) => Promise<Storage>;

const clients: Storage[] = [];
let closeClient: ((storage: Storage) => Promise<void>) | undefined;
const allowed: ReadonlySet<string> = new Set(REMOTE_METHODS);

function send(message: FromChild): void {
  process.send?.(message);
}

async function open(message: Extract<ToChild, { type: 'open' }>): Promise<void> {
  try {
    const module = (await import(message.module)) as Record<string, unknown>;
    const opener = module[message.exportName];
    if (typeof opener !== 'function') {
      throw new Error(`[testing] ${message.module} has no export ${JSON.stringify(message.exportName)} that opens a client`);
    }
    if (message.closeExportName !== undefined) {
      const closer = module[message.closeExportName];
      if (typeof closer !== 'function') throw new Error(`[testing] ${message.module} has no export ${JSON.stringify(message.closeExportName)}`);
      closeClient = closer as (storage: Storage) => Promise<void>;
    }
    const options = fromWire(message.options);
    for (let i = 0; i < message.count; i++) clients.push(await (opener as Opener)(options));
    send({ type: 'ready' });
  } catch (error) {
    send({ type: 'failed', error: errorToWire(error) });
  }
}

async function call(message: Extract<ToChild, { type: 'call' }>): Promise<void> {
  try {
    const client = clients[message.client];
    if (!client || !allowed.has(message.method)) throw new Error(`[testing] no client ${message.client} or no method ${message.method}`);
    const method = (client as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>)[message.method];
    if (typeof method !== 'function') throw new Error(`[testing] the client has no method ${message.method}`);
    const value = await method.apply(client, fromWire(message.args) as unknown[]);
    send({ type: 'reply', id: message.id, value: toWire(value) });
  } catch (error) {
    send({ type: 'reply', id: message.id, error: errorToWire(error) });
  }
}

async function close(): Promise<void> {
  for (const client of clients) {
    try {
      if (closeClient) await closeClient(client);
      else await (client as Storage & { close?: () => Promise<void> }).close?.();
    } catch {
      // The process ends anyway; a failing close must not keep it alive.
    }
  }
  process.exit(0);
}

process.on('message', (message: ToChild) => {
  if (message.type === 'open') void open(message);
  else if (message.type === 'call') void call(message);
  else void close();
});
// The suite going away ends the process, whatever state it is in.
process.on('disconnect', () => process.exit(0));
