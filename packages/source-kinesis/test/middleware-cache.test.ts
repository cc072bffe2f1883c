import { GetRecordsCommand, ListShardsCommand, type KinesisClient } from '@aws-sdk/client-kinesis';
import { AbortedError, Checkpoint } from '@leasehold/core';
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { KinesisSource } from '../src/index.js';
import { createStream, putRecords, readRecords, textEntries, useEmulator } from './support.js';

const kinesis = useEmulator();
let client: KinesisClient;

beforeAll(() => {
  client = kinesis.client();
});

afterEach(() => {
  vi.restoreAllMocks();
});

const SHARD_0 = 'shardId-000000000000';

describe('KinesisSource over a client built with cacheMiddleware: true', () => {
  it('keeps the client resolving each command middleware stack once', async () => {
    const { streamName } = await createStream(client, 1);
    await putRecords(client, streamName, textEntries('r', 30));
    const cached = kinesis.client({ cacheMiddleware: true });
    const getRecords = vi.spyOn(GetRecordsCommand.prototype, 'resolveMiddleware');
    const listShards = vi.spyOn(ListShardsCommand.prototype, 'resolveMiddleware');
    const source = new KinesisSource({ client: cached, streamName, maxRecordsPerCall: 5 });

    const { records } = await readRecords(source, SHARD_0, Checkpoint.TRIM_HORIZON, 30);
    await source.listShards();
    await source.listShards();
    cached.destroy();

    expect(records).toHaveLength(30);
    expect(getRecords).toHaveBeenCalledTimes(1);
    expect(listShards).toHaveBeenCalledTimes(1);
  });

  it('still ends a read with an AbortedError at once when the signal fires during a GetRecords that does not answer', async () => {
    const { streamName } = await createStream(client, 1);
    await putRecords(client, streamName, textEntries('r', 10));
    const cached = kinesis.client({ cacheMiddleware: true });
    let getRecordsSent!: () => void;
    const sent = new Promise<void>((resolve) => (getRecordsSent = resolve));
    // Every GetRecords hangs: only the signal can end the read.
    cached.middlewareStack.add(
      (next, context) => (args) => {
        if (context.commandName !== 'GetRecordsCommand') return next(args);
        getRecordsSent();
        return new Promise<never>(() => undefined);
      },
      { step: 'initialize', name: 'neverAnswer' },
    );
    const source = new KinesisSource({ client: cached, streamName });
    const controller = new AbortController();

    const read = (async () => {
      for await (const batch of source.read(SHARD_0, Checkpoint.TRIM_HORIZON, { signal: controller.signal })) void batch;
    })();
    await sent;
    controller.abort();

    await expect(read).rejects.toBeInstanceOf(AbortedError);
    cached.destroy();
  });
});
