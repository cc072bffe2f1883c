/**
 * The resume hint of a polling read (see core's `RecordsBatch.resumeHint`): the `NextShardIterator` of the
 * GetRecords call that returned a batch, with the shard it reads, so that the next owner of the shard's
 * lease reads on without a GetShardIterator call. Kinesis lets any caller use an iterator for 5 minutes
 * after it was returned; the consumer gives one back for 4 at most, and a read whose first GetRecords
 * call with it fails in any way (`ExpiredIteratorException`, `InvalidArgumentException`...) asks for a
 * fresh iterator for the position instead.
 */
/** How long after its GetRecords call a hint may start a read: a minute under Kinesis's 5, for clock rates and delays. */
export const RESUME_HINT_MAX_AGE_MS = 240_000;

/** The hint after a GetRecords answer whose `NextShardIterator` is `iterator`. */
export function resumeHintOf(shardId: string, iterator: string): string {
  return `${shardId} ${iterator}`;
}

/** The iterator a hint carries for `shardId`, or `undefined` for none, a malformed one or another shard's. */
export function iteratorOfHint(hint: string | undefined, shardId: string): string | undefined {
  if (hint === undefined || !hint.startsWith(`${shardId} `)) return undefined;
  const iterator = hint.slice(shardId.length + 1);
  return iterator.length > 0 && iterator.length <= 512 && !/\s/.test(iterator) ? iterator : undefined;
}
