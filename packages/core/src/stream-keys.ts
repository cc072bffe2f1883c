/**
 * The lease keys of a multi-stream group, `<streamId>:<shardId>`: how they are made and split, below the
 * runtime so that the rewind and the tools read them without importing the consumer.
 */

/** Between a stream id and a shard id in a lease key. */
export const STREAM_SEPARATOR = ':';

/** The lease key of a shard of a stream in a multi-stream group. */
export function streamLeaseKey(streamId: string, shardId: string): string {
  return `${streamId}${STREAM_SEPARATOR}${shardId}`;
}

/**
 * The stream and shard a multi-stream lease key names, split at its last `:` (shard ids have none), or
 * `undefined` for a key without one.
 */
export function parseStreamLeaseKey(leaseKey: string): { streamId: string; shardId: string } | undefined {
  const at = leaseKey.lastIndexOf(STREAM_SEPARATOR);
  if (at <= 0 || at === leaseKey.length - 1) return undefined;
  return { streamId: leaseKey.slice(0, at), shardId: leaseKey.slice(at + 1) };
}
