/**
 * The storage named by the environment, so that a program's code never changes between environments:
 * `LEASEHOLD_STORAGE=memory:` in a unit test, `postgres://...` on a laptop, `redis://...` or
 * `dynamodb://TABLE` in production. The `leasehold` command line reads the same variable for `--storage`.
 */
import { InvalidConfigError } from '@leasehold/core';
import { refuseUnknownOptions } from '@leasehold/core/adapter';
import { OPEN_STORAGE_KEYS, openStorage, type OpenedStorage, type OpenStorageOptions } from './open.js';
import { parseStorageUrl, PKG } from './url.js';

/** The environment variable holding the storage URL. */
export const STORAGE_ENV = 'LEASEHOLD_STORAGE';

/** Options of {@link openStorageFromEnv}. */
export interface StorageFromEnvOptions extends OpenStorageOptions {
  /** Where to read `LEASEHOLD_STORAGE` from. Default `process.env`. */
  env?: Readonly<Record<string, string | undefined>>;
  /**
   * The URL to use when the variable is unset or empty, such as `memory:` for a program tried on one
   * machine. Without it an unset variable is an `InvalidConfigError`: a deployment that forgot the
   * variable must not run on a store of its own process, where every worker would own every shard.
   */
  fallback?: string;
}

/** The storage URL the environment names (or the fallback), checked; throws an `InvalidConfigError` naming the variable. */
export function storageUrlFromEnv(options: Pick<StorageFromEnvOptions, 'env' | 'fallback'> = {}): string {
  const value = (options.env ?? process.env)[STORAGE_ENV];
  const url = value === undefined || value === '' ? options.fallback : value;
  if (url === undefined) {
    throw new InvalidConfigError(`[${PKG}] ${STORAGE_ENV} is not set; set it to a storage URL: postgres://..., redis://..., dynamodb://TABLE?region=... or memory:`);
  }
  try {
    parseStorageUrl(url);
  } catch (error) {
    if (!(error instanceof InvalidConfigError) || url !== value) throw error;
    throw new InvalidConfigError(error.message.replace(`[${PKG}] `, `[${PKG}] ${STORAGE_ENV}: `), { cause: error });
  }
  return url;
}

/** Opens the storage that `LEASEHOLD_STORAGE` names (see {@link openStorage} for what opening does). */
export async function openStorageFromEnv(options: StorageFromEnvOptions = {}): Promise<OpenedStorage> {
  if (typeof options === 'object' && options !== null) refuseUnknownOptions(PKG, 'openStorageFromEnv', options, [...OPEN_STORAGE_KEYS, 'env', 'fallback']);
  const { env, fallback, ...rest } = options;
  return openStorage(storageUrlFromEnv({ env, fallback }), rest);
}
