/**
 * What the Redis tests set up alike: a member's state and a write's applied record, a client that rides
 * out a server going away, and the shared server under a key prefix of one describe block's own, so that
 * each test file reads as its assertions.
 */
import { randomUUID } from 'node:crypto';
import type { MemberRecord, MemberState, WriteResult } from '@leasehold/core';
import { RECORD_FORMAT } from '@leasehold/core/adapter';
import { Redis } from 'ioredis';
import { afterAll, beforeAll } from 'vitest';
import { connectShared, deletePrefix, SHARED_HOST, SHARED_PORT } from './servers.js';

/** An alive member's state, with `changes` over the defaults. */
export function state(incarnation: string, changes: Partial<MemberState> = {}): MemberState {
  return { format: RECORD_FORMAT, incarnation, leaseDurationMs: 10_000, status: 'alive', held: 0, changes: 0, requests: [], metadata: {}, ...changes };
}

/** The record of a write that must have applied; anything else fails the test with the outcome. */
export function applied<T>(outcome: WriteResult<T> | undefined): T {
  if (outcome?.status !== 'applied') throw new Error(`expected applied, got ${JSON.stringify(outcome)}`);
  return outcome.record;
}

/** A client of the server on `port` that reconnects quickly and never ends the process with an unheard 'error'. */
export function connect(port: number): Redis {
  const client = new Redis({ host: port === SHARED_PORT ? SHARED_HOST : '127.0.0.1', port, retryStrategy: (attempt: number) => Math.min(attempt * 20, 500) });
  client.on('error', () => undefined);
  return client;
}

/** Members in worker id order, as a roster is compared. */
export function byWorker(members: readonly MemberRecord[]): MemberRecord[] {
  return [...members].sort((a, b) => (a.workerId < b.workerId ? -1 : a.workerId > b.workerId ? 1 : 0));
}

/**
 * The shared server for the tests of the calling describe block, under a fresh prefix that starts with
 * `name`: connected before them, and every key under the prefix deleted after them.
 */
export function onSharedServer(name: string): { readonly keyPrefix: string; readonly client: Redis } {
  const keyPrefix = `${name}-${randomUUID().slice(0, 8)}:`;
  let client: Redis | undefined;

  beforeAll(async () => {
    client = await connectShared();
  });

  afterAll(async () => {
    if (client === undefined) return;
    await deletePrefix(client, keyPrefix);
    await client.quit();
  });

  return {
    keyPrefix,
    get client(): Redis {
      if (client === undefined) throw new Error('the shared server is connected only once the describe block runs');
      return client;
    },
  };
}

/** Runs `body` with fresh clients of the server on `port`, one per parameter it names, and disconnects them all after. */
export async function withClients<T>(port: number, count: number, body: (...clients: Redis[]) => Promise<T>): Promise<T> {
  const clients = Array.from({ length: count }, () => connect(port));
  try {
    return await body(...clients);
  } finally {
    for (const client of clients) client.disconnect();
  }
}
