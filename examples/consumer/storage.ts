/**
 * The backend chosen by one environment variable holding a storage URL, so that processing code never
 * changes between environments: memory in unit tests, Postgres on a laptop, Redis or DynamoDB in
 * production. The `leasehold` command line reads the same variable and the same URLs.
 *
 *   LEASEHOLD_STORAGE=memory:                                     (the default of this example)
 *   LEASEHOLD_STORAGE=postgres://user@host:5432/app?schema=leasehold
 *   LEASEHOLD_STORAGE=redis://host:6379?prefix=leasehold:
 *   LEASEHOLD_STORAGE=dynamodb://leasehold?region=eu-west-1       (&endpoint=http://... for an emulator)
 */
import { openStorageFromEnv, type OpenedStorage } from '@leasehold/connect';

/** Opens the storage that `env` names and sets its backend up (tables, schema version) on first use. */
export async function storageFromEnv(env: NodeJS.ProcessEnv = process.env): Promise<OpenedStorage> {
  // Without a fallback an unset variable is an error: a production worker must never run on memory.
  const opened = await openStorageFromEnv({ env, fallback: 'memory:' });
  try {
    await opened.setup(); // idempotent; safe when many workers start at once
  } catch (error) {
    await opened.close();
    throw error;
  }
  return opened;
}
