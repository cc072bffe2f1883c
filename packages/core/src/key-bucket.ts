/**
 * A stable spread of names over a few buckets, for adapters that keep a group's records under several
 * keys so that no one key takes the group's whole traffic (the DynamoDB adapter's member items, under
 * four partition keys). Stored layouts depend on it: it gives the same bucket for the same name in every
 * process and every release, and must never change.
 */
import { describeValue, InvalidInputError } from './errors.js';

/**
 * The bucket of `name`, from 0 to `buckets - 1`: FNV-1a over the name's UTF-8 bytes, then MurmurHash3's
 * finalizer, so that names that differ only in their last characters (`host-1`, `host-2`, ...) spread
 * over the buckets as evenly as names that differ everywhere.
 */
export function keyBucket(name: string, buckets: number): number {
  if (!Number.isSafeInteger(buckets) || buckets < 1 || buckets > 0xffffffff) {
    throw new InvalidInputError(`[core] buckets must be an integer from 1 to 4294967295, got ${describeValue(buckets)}`);
  }
  let hash = 0x811c9dc5;
  for (const byte of Buffer.from(name, 'utf8')) {
    hash ^= byte;
    hash = Math.imul(hash, 0x01000193);
  }
  return mixed(hash) % buckets;
}

/** MurmurHash3's 32-bit finalizer: every bit of `hash` moves every bit of the result. Unsigned. */
export function mixed(hash: number): number {
  hash ^= hash >>> 16;
  hash = Math.imul(hash, 0x85ebca6b);
  hash ^= hash >>> 13;
  hash = Math.imul(hash, 0xc2b2ae35);
  hash ^= hash >>> 16;
  return hash >>> 0;
}
