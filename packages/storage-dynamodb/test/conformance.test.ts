import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { UpdateItemCommand, type DynamoDBClient, type DynamoDBClientConfig } from '@aws-sdk/client-dynamodb';
import type { Storage } from '@leasehold/core';
import { runConformanceSuite } from '@leasehold/core/testing';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { DynamoDBStorage } from '../src/index.js';
import { memberItemKey } from '../src/items.js';
import { localClient, randomTableName } from './support.js';

// dynalite runs in a process of its own here, so that the emulator and the suite's clients do not take
// turns on one event loop: the suite sends tens of thousands of requests.
let dynalite: { endpoint: string; process: ChildProcess };
const tableName = randomTableName('conformance');
const clients = new Map<Storage, DynamoDBClient>();

beforeAll(async () => {
  const child = spawn(
    process.execPath,
    ['--input-type=module', '-e', `import { startDynalite } from '@leasehold/local-stack'; console.log((await startDynalite()).endpoint);`],
    { cwd: fileURLToPath(new URL('..', import.meta.url)), stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const [line] = (await once(child.stdout, 'data')) as [Buffer];
  dynalite = { endpoint: line.toString().trim(), process: child };
  const client = localClient(dynalite.endpoint);
  try {
    await new DynamoDBStorage({ client, tableName }).createTable();
  } finally {
    client.destroy();
  }
});

afterAll(() => {
  dynalite?.process.kill();
});

/** A client per storage, as separate worker processes would have; `endpoint` may be the suite's proxy. */
function open(endpoint: string, config: DynamoDBClientConfig = {}): DynamoDBStorage {
  const client = localClient(endpoint, config);
  const storage = new DynamoDBStorage({ client, tableName });
  clients.set(storage, client);
  return storage;
}

runConformanceSuite(
  { describe, it, afterAll },
  {
    name: 'DynamoDBStorage',
    createStorage: async () => open(dynalite.endpoint),
    closeStorage: async (storage) => {
      clients.get(storage)?.destroy();
      clients.delete(storage);
    },
    // A state that is not JSON, written by another program.
    corruptLease: async (group, leaseKey) => {
      const client = localClient(dynalite.endpoint);
      try {
        await client.send(
          new UpdateItemCommand({
            TableName: tableName,
            Key: { pk: { S: group }, sk: { S: `lease:${leaseKey}` } },
            UpdateExpression: 'SET #state = :state',
            ExpressionAttributeNames: { '#state': 'state' },
            ExpressionAttributeValues: { ':state': { S: '{"owner":' } },
          }),
        );
      } finally {
        client.destroy();
      }
    },
    // A member state that is not JSON, written by another program that moves the version as a writer does.
    corruptMember: async (group, workerId) => {
      const client = localClient(dynalite.endpoint);
      try {
        const output = await client.send(
          new UpdateItemCommand({
            TableName: tableName,
            Key: memberItemKey(group, workerId),
            UpdateExpression: 'SET #version = #version + :one, #state = :state',
            ExpressionAttributeNames: { '#version': 'version', '#state': 'state' },
            ExpressionAttributeValues: { ':one': { N: '1' }, ':state': { S: '{"status":' } },
            ReturnValues: 'UPDATED_NEW',
          }),
        );
        return { version: Number(output.Attributes?.version?.N) };
      } finally {
        client.destroy();
      }
    },
    faults: {
      kind: 'proxy',
      upstream: () => {
        const url = new URL(dynalite.endpoint);
        return { host: url.hostname, port: Number(url.port) };
      },
      createStorage: async (through) => open(`http://${through.host}:${through.port}`),
      // The SDK sends a request again after a reset connection by default: this client makes one attempt,
      // so that a cut call fails and the adapter's own handling of the failure answers.
      createStorageWithoutResend: async (through) => open(`http://${through.host}:${through.port}`, { maxAttempts: 1 }),
    },
    crossProcess: {
      module: new URL('./conformance-client.ts', import.meta.url),
      closeExportName: 'closeClient',
      options: () => ({ endpoint: dynalite.endpoint, tableName }),
      execArgv: ['--import', 'tsx'],
    },
    // The suite's large tests (4,097 leases listed at 42 sizes, 5,000-lease batches) are CPU work for
    // dynalite: over 120 s each on a busy machine. The bound only catches a test that hangs.
    timeoutMs: 600_000,
  },
);
