/**
 * Storage for the demo, the end-to-end tests and the chaos runs, opened from the same URLs as the
 * `leasehold` CLI through `@leasehold/connect`. {@link prepareStorage} gives a run its own space (a fresh
 * schema or key prefix) and sets the backend up there, so that runs never share records.
 */
import { openStorage as open, parseStorageUrl, type OpenedStorage, type StorageKind as AnyKind } from '@leasehold/connect';
import { LOCAL_CREDENTIALS } from './kinesis.js';

export { hidePassword } from '@leasehold/connect';

/** The backends a run can use (memory lives in one process, and every run has several). */
export type StorageKind = Exclude<AnyKind, 'memory'>;

/**
 * Opens the storage a URL names, with a pool of four connections per process. A DynamoDB endpoint (an
 * emulator) gets the emulator's credentials and a region, so that a run needs no AWS configuration.
 */
export async function openStorage(raw: string): Promise<OpenedStorage> {
  const target = parseStorageUrl(raw);
  if (target.kind === 'memory') throw new Error('a run has several processes; memory: cannot be shared between them');
  const local = target.kind === 'dynamodb' && target.endpoint !== undefined;
  return open(target, {
    maxConnections: 4,
    ...(local ? { dynamodb: { credentials: LOCAL_CREDENTIALS, region: target.region ?? 'us-east-1' } } : {}),
  });
}

/**
 * Gives the run `runId` its own space in the backend and sets it up there: a fresh schema migrated in
 * Postgres, a fresh key prefix in Redis, the table in DynamoDB. Returns the URL every process of the run
 * opens.
 */
export async function prepareStorage(raw: string, runId: string): Promise<string> {
  const kind = parseStorageUrl(raw).kind;
  const url = new URL(raw);
  if (kind === 'postgres' && !url.searchParams.has('schema')) url.searchParams.set('schema', `leasehold_e2e_${runId}`);
  if (kind === 'redis' && !url.searchParams.has('prefix')) url.searchParams.set('prefix', `leasehold-e2e:${runId}:`);
  const prepared = url.toString();
  await using opened = await openStorage(prepared);
  await opened.setup();
  // One read proves the backend answers before any worker starts.
  await opened.storage.listLeases(`probe-${runId}`);
  return prepared;
}
