import { InvalidConfigError } from '@leasehold/core';
import { describeValue } from '@leasehold/core/adapter';

export const PKG = 'storage-redis';

/** Letters, digits and `. _ : / -`: nothing that could open a hash tag, split a line or need quoting. */
const PREFIX_PATTERN = /^[A-Za-z0-9._:/-]{0,128}$/;

/** Throws an `InvalidConfigError` naming the prefix unless it is safe to put in front of every key. */
export function validateKeyPrefix(prefix: unknown): asserts prefix is string {
  if (typeof prefix !== 'string' || !PREFIX_PATTERN.test(prefix)) {
    throw new InvalidConfigError(
      `[${PKG}] key prefix ${describeValue(prefix)} may only contain letters, digits and . _ : / - (at most 128 characters)`,
    );
  }
}

/**
 * The field of the roster hash that holds the group's member version counter: a worker id is never empty,
 * so it never names a member.
 */
export const COUNTER_FIELD = '';

/** The keys and channel of one group. They share one hash tag, so every script touches one cluster slot. */
export interface GroupKeys {
  readonly leases: string;
  readonly tombstones: string;
  /** The highest epoch of a lease whose epoch was written lower than before (rare; kept for recreates). */
  readonly epochs: string;
  readonly incarnation: string;
  readonly leader: string;
  /** The group's roster: one hash, a field per member and one for the group's member version counter. */
  readonly roster: string;
  /** The group's roster digest: a counter that core advances after member writes others must look at. */
  readonly rosterDigest: string;
  /** The worker ids each of the digest's last advances named: a hash of the digest value an advance wrote to its names (a JSON array). */
  readonly rosterMoves: string;
  /** The group's change feed; a handover to a worker goes out on `<channel>:to:<worker id>` instead, under the same hash tag. */
  readonly channel: string;
}

/**
 * The group name is base64url-encoded inside the tag: a `}` in it can neither end the tag early nor make
 * two groups share keys, and base64url has no character that means anything to Redis.
 */
export function groupKeys(prefix: string, group: string): GroupKeys {
  const base = `${prefix}{${Buffer.from(group, 'utf8').toString('base64url')}}`;
  return {
    leases: `${base}:leases`,
    tombstones: `${base}:tombstones`,
    epochs: `${base}:epochs`,
    incarnation: `${base}:incarnation`,
    leader: `${base}:leader`,
    roster: `${base}:roster`,
    rosterDigest: `${base}:roster-digest`,
    rosterMoves: `${base}:roster-moves`,
    channel: `${base}:changes`,
  };
}
