/**
 * What the end-to-end test files share: the lease backends a run can use (each with the command that
 * starts it when it cannot be reached) and kinesis-local, started once per file.
 */
import { postgresUrl, redisUrl, START_POSTGRES, START_REDIS, startDynalite, startKinesisLocal, type RunningDynalite, type RunningKinesisLocal } from '@leasehold/local-stack';
import { afterAll, beforeAll } from 'vitest';
import type { KinesisEndpoint } from '../src/kinesis.js';
import { prepareStorage } from '../src/storage-url.js';

export const POSTGRES_URL = postgresUrl();
export { START_POSTGRES };
const REDIS_URL = redisUrl();

export interface Backend {
  readonly name: string;
  /** The storage URL, and a way to release what was started for it. */
  open(): Promise<{ url: string; close(): Promise<void> }>;
  /** How to start the server when it cannot be reached. */
  readonly startWith: string | undefined;
}

export const POSTGRES: Backend = { name: 'postgres', open: async () => ({ url: POSTGRES_URL, close: async () => undefined }), startWith: START_POSTGRES };

export const BACKENDS: readonly Backend[] = [
  POSTGRES,
  {
    name: 'redis',
    open: async () => ({ url: REDIS_URL, close: async () => undefined }),
    startWith: START_REDIS,
  },
  {
    name: 'dynamodb (dynalite)',
    open: async () => {
      const dynalite: RunningDynalite = await startDynalite();
      return { url: `dynamodb://leasehold-e2e?endpoint=${encodeURIComponent(dynalite.endpoint)}&region=us-east-1`, close: () => dynalite.close() };
    },
    startWith: undefined,
  },
];

/** Prepares the run `runId` in an opened backend; an unreachable one fails with the command that starts it. */
export async function prepareBackend(backend: Backend, url: string, runId: string): Promise<string> {
  return prepareStorage(url, runId).catch((error: unknown) => {
    throw new Error(`${backend.name} at ${url} cannot be used (${(error as Error).message})${backend.startWith ? `; start it with: ${backend.startWith}` : ''}`, { cause: error });
  });
}

/** Starts kinesis-local before the file's tests and closes it after them; the endpoint is there from the first test on. */
export function useKinesisLocal(): KinesisEndpoint {
  let kinesis: RunningKinesisLocal | undefined;
  const endpoint = {
    get endpoint(): string {
      return kinesis!.endpoint;
    },
    get region(): string {
      return kinesis!.region;
    },
  };
  beforeAll(async () => {
    try {
      kinesis = await startKinesisLocal();
    } catch (error) {
      throw new Error(`kinesis-local could not be started; try it by hand with "npx kinesis-local" in packages/local-stack: ${(error as Error).message}`, { cause: error });
    }
  });
  afterAll(async () => {
    await kinesis?.close();
  });
  return endpoint;
}
