/**
 * Opens `RedisStorage` clients in whatever process imports it, each on a connection of its own: the
 * conformance suite's cross-process mode runs its races from clients opened here.
 */
import type { Storage } from '@leasehold/core';
import { Redis } from 'ioredis';
import { RedisStorage } from '../src/index.js';

const connections = new Map<Storage, Redis>();

export async function openClient(options: { host: string; port: number; keyPrefix: string }): Promise<Storage> {
  const client = new Redis({ host: options.host, port: options.port });
  const storage = new RedisStorage({ client, keyPrefix: options.keyPrefix });
  connections.set(storage, client);
  return storage;
}

export async function closeClient(storage: Storage): Promise<void> {
  await (storage as RedisStorage).close();
  connections.get(storage)?.disconnect();
  connections.delete(storage);
}
