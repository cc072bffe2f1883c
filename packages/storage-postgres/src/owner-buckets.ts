/**
 * The owner buckets of the change feed. A handover that names its owner is published on one of
 * {@link OWNER_BUCKETS} channels, chosen from its group and owner, so that a subscriber addressed to a few
 * owners LISTENs on their buckets and is not sent every handover of the group. LISTEN has no patterns and
 * a channel name is an identifier of at most 63 bytes, so a channel per owner has to be a bounded set.
 *
 * Both are part of the feed's wire format: every release that writes and every release that reads must
 * agree on them, so a release that changes either must publish, or listen, both ways for a release.
 * Computed here, by the writer, rather than with PostgreSQL's hash functions, which may change between
 * server versions.
 */

/** The number of owner channels per lease table. */
export const OWNER_BUCKETS = 256;

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;
/** Mixed in between group and owner: no UTF-16 code unit equals it, so no two pairs read as one sequence. */
const SEPARATOR = 0x10000;

/**
 * The bucket, from 0 to {@link OWNER_BUCKETS} - 1, of the handovers to `owner` in `group`: FNV-1a over the
 * UTF-16 code units of the group, a separator no code unit equals, and the owner, finished with
 * MurmurHash3's fmix32 (FNV-1a's low bits depend on the low bits of its input alone; the finish mixes the
 * high ones in). Plain 32-bit integer arithmetic: the same in every JavaScript engine, for good.
 */
export function ownerBucket(group: string, owner: string): number {
  let hash = FNV_OFFSET;
  for (let i = 0; i < group.length; i++) hash = Math.imul(hash ^ group.charCodeAt(i), FNV_PRIME);
  hash = Math.imul(hash ^ SEPARATOR, FNV_PRIME);
  for (let i = 0; i < owner.length; i++) hash = Math.imul(hash ^ owner.charCodeAt(i), FNV_PRIME);
  hash ^= hash >>> 16;
  hash = Math.imul(hash, 0x85ebca6b);
  hash ^= hash >>> 13;
  hash = Math.imul(hash, 0xc2b2ae35);
  hash ^= hash >>> 16;
  return (hash >>> 0) % OWNER_BUCKETS;
}
