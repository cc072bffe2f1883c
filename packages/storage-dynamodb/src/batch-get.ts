/**
 * Items read by key in one `BatchGetItem`, strongly consistent. DynamoDB may answer with only some of the
 * items and the rest in `UnprocessedKeys` (throttled keys, or a response past 16 MB); those are sent again
 * after a backoff with full jitter, as the SDK backs off a throttled request, a few times before giving up.
 */
import { BatchGetItemCommand, type AttributeValue, type DynamoDBClient, type KeysAndAttributes } from '@aws-sdk/client-dynamodb';

type Item = Record<string, AttributeValue>;

/** How many times keys are sent in all, the first included. */
export const BATCH_GET_ATTEMPTS = 5;
/** The backoff before the n-th resend is a random time up to `BATCH_GET_BASE_DELAY_MS` × 2^(n-1), at most `BATCH_GET_MAX_DELAY_MS`. */
export const BATCH_GET_BASE_DELAY_MS = 50;
export const BATCH_GET_MAX_DELAY_MS = 1_000;

/**
 * The items found under `keys` (at most 100, none repeated, which DynamoDB refuses), in no particular
 * order; a key with no item has none. Throws what the client throws, or an error counting the keys still
 * unprocessed after {@link BATCH_GET_ATTEMPTS} attempts.
 */
export async function batchGetItems(client: DynamoDBClient, tableName: string, keys: readonly Item[]): Promise<Item[]> {
  const items: Item[] = [];
  let pending: Item[] = [...keys];
  for (let attempt = 1; pending.length > 0; attempt++) {
    if (attempt > BATCH_GET_ATTEMPTS) {
      throw Object.assign(new Error(`${pending.length} of ${keys.length} keys were still unprocessed after ${BATCH_GET_ATTEMPTS} BatchGetItem attempts`), {
        name: 'UnprocessedKeys',
      });
    }
    if (attempt > 1) await backoff(attempt - 1);
    const request: KeysAndAttributes = { Keys: pending, ConsistentRead: true };
    const output = await client.send(new BatchGetItemCommand({ RequestItems: { [tableName]: request } }));
    items.push(...(output.Responses?.[tableName] ?? []));
    pending = output.UnprocessedKeys?.[tableName]?.Keys ?? [];
  }
  return items;
}

function backoff(resend: number): Promise<void> {
  const capMs = Math.min(BATCH_GET_MAX_DELAY_MS, BATCH_GET_BASE_DELAY_MS * 2 ** (resend - 1));
  return new Promise((resolve) => setTimeout(resolve, Math.random() * capMs));
}
