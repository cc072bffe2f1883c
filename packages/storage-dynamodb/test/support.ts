import { randomUUID } from 'node:crypto';
import { DynamoDBClient, type AttributeValue, type DynamoDBClientConfig } from '@aws-sdk/client-dynamodb';
import type { MemberState } from '@leasehold/core';
import { RECORD_FORMAT } from '@leasehold/core/adapter';
import { startDynalite, type RunningDynalite } from '@leasehold/local-stack';
import { afterAll, beforeAll } from 'vitest';
import { createTable, DynamoDBStorage } from '../src/index.js';

/** A client of a local dynalite: fixed region and dummy credentials, everything else as the caller says. */
export function localClient(endpoint: string, config: DynamoDBClientConfig = {}): DynamoDBClient {
  return new DynamoDBClient({
    region: 'us-east-1',
    endpoint,
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
    ...config,
  });
}

/** A table name no other test file uses. */
export function randomTableName(prefix: string): string {
  return `${prefix}-${randomUUID().slice(0, 8)}`;
}

/** Starts dynalite in this process; a failure names the package that provides it. */
export async function startLocalDynamo(): Promise<RunningDynalite> {
  try {
    return await startDynalite();
  } catch (error) {
    throw new Error('could not start dynalite in process; build it with `pnpm --filter @leasehold/local-stack build`', { cause: error });
  }
}

/** The dynalite and table of one test file, from {@link useDynalite}. */
export interface LocalDynamo {
  /** The file's table, created before its first test. */
  readonly tableName: string;
  /** A new client of the file's dynalite, destroyed after its last test. */
  client(config?: DynamoDBClientConfig): DynamoDBClient;
}

/**
 * Starts dynalite in this process before the file's first test, creates a table no other file uses, and
 * destroys every client made through it and stops dynalite after the last test. Call it at the top of a
 * test file.
 */
export function useDynalite(prefix: string): LocalDynamo {
  const tableName = randomTableName(prefix);
  const opened: DynamoDBClient[] = [];
  let dynalite: RunningDynalite | undefined;
  const client = (config: DynamoDBClientConfig = {}): DynamoDBClient => {
    if (dynalite === undefined) throw new Error('useDynalite: clients are made in tests, once dynalite has started');
    const made = localClient(dynalite.endpoint, config);
    opened.push(made);
    return made;
  };
  beforeAll(async () => {
    dynalite = await startLocalDynamo();
    await createTable(client(), tableName);
  });
  afterAll(async () => {
    for (const made of opened) made.destroy();
    await dynalite?.close();
  });
  return { tableName, client };
}

/** What a fault injection sees of one attempt: the command, a function that sends it, and its input. */
export type Injection = (commandName: string, send: () => Promise<unknown>, input: unknown) => Promise<unknown>;

/**
 * Makes every attempt of `client` (inside the SDK's retry loop, as a lost response or a throttle would be)
 * go through `inject`, which decides whether to send it and what the SDK sees. Returns the client.
 */
export function injectFaults(client: DynamoDBClient, inject: Injection): DynamoDBClient {
  type Middleware = Parameters<DynamoDBClient['middlewareStack']['addRelativeTo']>[0];
  const middleware = (next: (args: { input: object }) => Promise<unknown>, context: { commandName?: string }) =>
    (args: { input: object }) => inject(context.commandName ?? '', () => next(args), args.input);
  client.middlewareStack.addRelativeTo(middleware as unknown as Middleware, {
    relation: 'after',
    toMiddleware: 'retryMiddleware',
    name: 'injectFaults',
  });
  return client;
}

/** The sort key a write or read names, to aim a fault at one record. */
export function sortKeyOf(input: unknown): string | undefined {
  const request = input as { Key?: Record<string, AttributeValue>; Item?: Record<string, AttributeValue> };
  return (request.Key ?? request.Item)?.sk?.S;
}

/** One request as a metering client saw it: the command, the sort key it names, the capacity DynamoDB reported. */
export interface Metered {
  readonly command: string;
  readonly sortKey: string | undefined;
  readonly units: number;
}

/** Makes `client` ask DynamoDB (here dynalite) for the capacity each request consumed, and log it. */
export function meter(client: DynamoDBClient): { client: DynamoDBClient; log: Metered[] } {
  const log: Metered[] = [];
  type Add = (middleware: unknown, options: { step: 'initialize'; name: string }) => void;
  type Consumed = { CapacityUnits?: number };
  // At the initialize step, before the request is serialized, so that the parameter is sent.
  const middleware = (next: (args: { input: Record<string, unknown> }) => Promise<{ output: { ConsumedCapacity?: Consumed | Consumed[] } }>, context: { commandName?: string }) =>
    async (args: { input: Record<string, unknown> }) => {
      args.input.ReturnConsumedCapacity = 'TOTAL';
      const answer = await next(args);
      // A batch reports one entry per table.
      const consumed = answer.output.ConsumedCapacity;
      const units = Array.isArray(consumed) ? consumed.reduce((sum, entry) => sum + (entry.CapacityUnits ?? Number.NaN), 0) : (consumed?.CapacityUnits ?? Number.NaN);
      log.push({ command: context.commandName ?? '', sortKey: sortKeyOf(args.input), units });
      return answer;
    };
  (client.middlewareStack.add as Add).call(client.middlewareStack, middleware, { step: 'initialize', name: 'meterCapacity' });
  return { client, log };
}

/** A member's state as a worker heartbeats it. */
export function memberState(overrides: Partial<MemberState> = {}): MemberState {
  return { format: RECORD_FORMAT, incarnation: 'inc-1', leaseDurationMs: 10_000, status: 'alive', held: 0, changes: 0, requests: [], metadata: {}, ...overrides };
}

/**
 * A storage whose requests are logged as `<command> <sort key>` (the command alone when it names no key),
 * for tests that check which requests a call sends.
 */
export function loggedStorage(client: DynamoDBClient, tableName: string): { storage: DynamoDBStorage; sent: string[] } {
  const sent: string[] = [];
  type Add = (middleware: unknown, options: { step: 'initialize'; name: string }) => void;
  const middleware =
    (next: (args: { input: { Key?: Record<string, AttributeValue> } }) => Promise<unknown>, context: { commandName?: string }) =>
    async (args: { input: { Key?: Record<string, AttributeValue> } }) => {
      sent.push(`${context.commandName ?? ''} ${args.input.Key?.sk?.S ?? ''}`.trim());
      return next(args);
    };
  (client.middlewareStack.add as Add).call(client.middlewareStack, middleware, { step: 'initialize', name: 'logRequests' });
  return { storage: new DynamoDBStorage({ client, tableName }), sent };
}
