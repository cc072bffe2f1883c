import { once } from 'node:events';
import { createConnection, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { CorruptRecordError, InvalidInputError, StorageOutcomeUnknownError } from '../src/index.js';
import { result } from '../src/adapter.js';
import { TcpProxy } from '../src/testing/index.js';
import { fromWire, toWire } from '../src/testing/wire.js';

/** A backend that answers every chunk it receives with `answer`, and counts what it received. */
async function backend(answer: Buffer): Promise<{ server: Server; port: number; received: () => number }> {
  let received = 0;
  const server = createServer((socket) => {
    socket.on('data', (chunk: Buffer) => {
      received += chunk.length;
      socket.write(answer);
    });
    socket.on('error', () => undefined);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { server, port: (server.address() as AddressInfo).port, received: () => received };
}

/** Connects, sends `request`, and collects what arrives until `whole` bytes have, or the connection closes. */
async function exchange(port: number, request: string, whole: number): Promise<{ bytes: number; closed: boolean; socket: Socket }> {
  const socket = createConnection({ host: '127.0.0.1', port });
  socket.on('error', () => undefined);
  await once(socket, 'connect');
  let bytes = 0;
  let closed = false;
  await new Promise<void>((resolve) => {
    socket.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
      if (bytes >= whole) resolve();
    });
    socket.on('close', () => {
      closed = true;
      resolve();
    });
    socket.write(request);
  });
  return { bytes, closed, socket };
}

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe('TcpProxy', () => {
  it('passes requests and answers both ways until a cut is armed', async () => {
    const server = await backend(Buffer.alloc(1000, 1));
    cleanups.push(() => void server.server.close());
    const proxy = await TcpProxy.start({ host: '127.0.0.1', port: server.port });
    cleanups.push(() => proxy.close());
    const { bytes, closed, socket } = await exchange(proxy.address.port, 'hello', 1000);
    socket.destroy();
    expect({ bytes, closed, received: server.received(), cuts: proxy.cuts, answered: proxy.answeredBytes }).toEqual({ bytes: 1000, closed: false, received: 5, cuts: 0, answered: 1000 });
  });

  it('cuts every connection once the backend answers a request sent after arming, after the bytes it was told to let through', async () => {
    const server = await backend(Buffer.alloc(1000, 1));
    cleanups.push(() => void server.server.close());
    const proxy = await TcpProxy.start({ host: '127.0.0.1', port: server.port });
    cleanups.push(() => proxy.close());
    const cut = proxy.cutOnResponse({ afterBytes: 300 });
    const { bytes, closed } = await exchange(proxy.address.port, 'write this', 1000);
    await cut;
    expect({ bytes, closed, received: server.received(), cuts: proxy.cuts }).toEqual({ bytes: 300, closed: true, received: 10, cuts: 1 });
  });

  it('lets a new connection through after a cut', async () => {
    const server = await backend(Buffer.alloc(10, 1));
    cleanups.push(() => void server.server.close());
    const proxy = await TcpProxy.start({ host: '127.0.0.1', port: server.port });
    cleanups.push(() => proxy.close());
    void proxy.cutOnResponse();
    expect((await exchange(proxy.address.port, 'first', 10)).bytes).toBe(0);
    const again = await exchange(proxy.address.port, 'second', 10);
    again.socket.destroy();
    expect({ bytes: again.bytes, closed: again.closed }).toEqual({ bytes: 10, closed: false });
  });
});

describe('values crossing to another process', () => {
  it('carry typed errors back as their own classes, with their fields, and awkward keys as own keys', () => {
    const corrupt = new CorruptRecordError('[x] stored lease "k" of group "g" is corrupt', { group: 'g', leaseKey: 'k' });
    const metadata = JSON.parse('{"__proto__":"kept"}') as object;
    const value = fromWire(toWire([result.unknown(new StorageOutcomeUnknownError('[x] lost')), result.unknown(corrupt), { metadata }])) as Array<{ error?: unknown; metadata?: object }>;
    expect(value[0]?.error).toBeInstanceOf(StorageOutcomeUnknownError);
    expect(value[1]?.error).toBeInstanceOf(CorruptRecordError);
    expect(value[1]?.error).toMatchObject({ message: corrupt.message, group: 'g', leaseKey: 'k', code: 'ERR_CORRUPT_RECORD' });
    expect(Object.keys(value[2]?.metadata ?? {})).toEqual(['__proto__']);
    expect(fromWire(toWire(new InvalidInputError('[x] bad')))).toBeInstanceOf(InvalidInputError);
  });

  it('carry an error that is not a Leasehold error as a plain Error with its name, so that the suite sees it was untyped', () => {
    const error = fromWire(toWire(new TypeError('boom'))) as Error;
    expect(error.constructor).toBe(Error);
    expect([error.name, error.message]).toEqual(['TypeError', 'boom']);
  });
});
