import { randomUUID } from 'node:crypto';
import { DynamoDBClient, type DynamoDBClientConfig } from '@aws-sdk/client-dynamodb';
import { startDynalite, type RunningDynalite } from '@leasehold/local-stack';

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
