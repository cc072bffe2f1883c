/**
 * Items read by key in one `BatchGetItem`, strongly consistent. DynamoDB may answer with only some of the
 * items and the rest in `UnprocessedKeys`: throttled keys, a response past 16 MB, or more than 1 MB asked of
 * one partition (every lease of a group shares its partition key, so 100 leases of tens of KB each come
 * back over several answers; dynalite cuts its answers at about 1.4 MB). Those keys are sent again after a
 * backoff with full jitter, as the SDK backs off a throttled request. An answer that gives back some items
 * is progress, and the keys it left are sent again after the shortest backoff; only answers that give back
 * none count towards giving up, and each of those doubles the next backoff.
 */
import { BatchGetItemCommand, type AttributeValue, type DynamoDBClient, type KeysAndAttributes } from '@aws-sdk/client-dynamodb';

type Item = Record<string, AttributeValue>;

/**
 * How many answers that give back no item and leave keys unprocessed (the first request's included) end
 * the read with an error. Answers that give back some are not counted, so a read of n keys sends at most
 * n + `BATCH_GET_ATTEMPTS` requests.
 */
export const BATCH_GET_ATTEMPTS = 5;
/**
 * The backoff before a resend is a random time up to `BATCH_GET_BASE_DELAY_MS` × 2^(n-1), at most
 * `BATCH_GET_MAX_DELAY_MS`, n being how many answers so far gave back no item (at least 1).
 */
export const BATCH_GET_BASE_DELAY_MS = 50;
export const BATCH_GET_MAX_DELAY_MS = 1_000;

/**
 * The items found under `keys` (at most 100, none repeated, which DynamoDB refuses), in no particular
 * order; a key with no item has none. Throws what the client throws, or an error counting the keys still
 * unprocessed once {@link BATCH_GET_ATTEMPTS} answers gave back no item: never a part of the items.
 */
export async function batchGetItems(client: DynamoDBClient, tableName: string, keys: readonly Item[]): Promise<Item[]> {
  const items: Item[] = [];
  let pending: Item[] = [...keys];
  let stalled = 0;
  for (let attempt = 1; pending.length > 0; attempt++) {
    if (attempt > 1) await backoff(Math.max(1, stalled));
    const request: KeysAndAttributes = { Keys: pending, ConsistentRead: true };
    const output = await client.send(new BatchGetItemCommand({ RequestItems: { [tableName]: request } }));
    const read = output.Responses?.[tableName] ?? [];
    items.push(...read);
    const sent = pending.length;
    pending = output.UnprocessedKeys?.[tableName]?.Keys ?? [];
    if (pending.length > 0 && (read.length === 0 || pending.length >= sent)) stalled++;
    if (pending.length > 0 && stalled >= BATCH_GET_ATTEMPTS) {
      throw Object.assign(new Error(`${pending.length} of ${keys.length} keys were still unprocessed after ${attempt} BatchGetItem attempts`), {
        name: 'UnprocessedKeys',
      });
    }
  }
  return items;
}

function backoff(stalled: number): Promise<void> {
  const capMs = Math.min(BATCH_GET_MAX_DELAY_MS, BATCH_GET_BASE_DELAY_MS * 2 ** (stalled - 1));
  return new Promise((resolve) => setTimeout(resolve, Math.random() * capMs));
}
