/**
 * Fenced sink writes into DynamoDB: exactly-once effects on items of the user's own table, whatever
 * backend the leases live in. Without a transaction, a fence can only guard the item it lives in, so each
 * sink item carries, per shard that writes it, the fencing token and the position of the last record it
 * applied; an update applies, in the same conditional write, only when its token is not older and its
 * position is after the stored one. Records of a shard are written to an item in order by whoever owns
 * the shard, so an item that stores position p has applied every record up to p that touches it: a replay
 * is refused, and a zombie is refused once the new owner wrote the item.
 */
import { GetItemCommand, UpdateItemCommand, type AttributeValue, type DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { Checkpoint, InvalidConfigError, LeaseLostError, StorageOutcomeUnknownError, StorageUnavailableError, type Position } from '@leasehold/core';
import { describeValue } from '@leasehold/core/adapter';
import { errorName, errorText, missingTable, PKG, validateTableName } from './schema.js';

/** Options of {@link fencedUpdate}. */
export interface FencedUpdateOptions {
  /** The sink table. */
  readonly tableName: string;
  /** The key of the sink item. */
  readonly key: Record<string, AttributeValue>;
  /** The shard the record comes from (`ctx.shardId`). */
  readonly shardId: string;
  /** The batch's fencing token (`ctx.fencingToken`). */
  readonly fencingToken: number;
  /** The record's own position (`record.position`): a numeric Kinesis sequence number, `<sequence>[:<sub>]`. */
  readonly position: Position;
  /** Your update, e.g. `ADD #total :amount` or `SET #status = :status`, without a condition. */
  readonly updateExpression: string;
  readonly expressionAttributeNames?: Record<string, string>;
  readonly expressionAttributeValues?: Record<string, AttributeValue>;
}

/** What {@link fencedUpdate} did. */
export type FencedUpdateResult = 'applied' | 'replay';

/** The attribute names of a shard's fence on a sink item. */
export function fenceAttributes(shardId: string): { token: string; position: string } {
  return { token: `leasehold:token:${shardId}`, position: `leasehold:position:${shardId}` };
}

const DIGITS = 80;
const SUB_DIGITS = 20;
const WHOLE_RECORD = 2n ** 64n;
const NUMERIC = /^(\d+)(?::(\d+))?$/;

/**
 * A numeric position as a string whose byte order is the order of `compareNumericPositions`, so that
 * DynamoDB's condition (`<` on strings) compares positions: the sequence number zero-padded to 80 digits,
 * then the sub-sequence (a bare sequence number means the whole record, after each of its sub-sequences).
 */
export function encodeFencePosition(position: Position): string {
  const match = typeof position === 'string' && !Checkpoint.isSentinel(position) ? NUMERIC.exec(position) : null;
  const sequence = match ? BigInt(match[1] as string) : -1n;
  const sub = match?.[2] === undefined ? WHOLE_RECORD : BigInt(match[2]);
  if (!match || sequence.toString().length > DIGITS || (match[2] !== undefined && sub >= WHOLE_RECORD)) {
    throw new InvalidConfigError(`[${PKG}] fence position ${describeValue(position)} is not a record position (a sequence number, with an optional :sub-sequence)`);
  }
  return `${sequence.toString().padStart(DIGITS, '0')}.${sub.toString().padStart(SUB_DIGITS, '0')}`;
}

/**
 * Applies `updateExpression` to one sink item in one conditional write with the shard's fence on that
 * item: only if the item has no fence of the shard yet, or its token is not newer than `fencingToken` and
 * its position is before `position`. Returns `'replay'` when the item applied this record already; throws
 * a `LeaseLostError` when a newer owner of the shard wrote the item. Write every record's updates in the
 * shard's order, each with the record's own position, and go on to the next record only once each is
 * `applied` or `'replay'`: a write whose answer was lost (`StorageOutcomeUnknownError`) is sent again as
 * it was, and the fence tells.
 */
export async function fencedUpdate(client: DynamoDBClient, options: FencedUpdateOptions): Promise<FencedUpdateResult> {
  const { tableName, key, shardId, fencingToken, updateExpression } = options;
  validateTableName(tableName);
  if (typeof key !== 'object' || key === null || Object.keys(key).length === 0) throw new InvalidConfigError(`[${PKG}] fencedUpdate key must name the sink item, got ${describeValue(key)}`);
  if (typeof shardId !== 'string' || shardId.length === 0) throw new InvalidConfigError(`[${PKG}] fencedUpdate shardId must be a non-empty string, got ${describeValue(shardId)}`);
  if (!Number.isSafeInteger(fencingToken) || fencingToken < 0) {
    throw new InvalidConfigError(`[${PKG}] fencedUpdate fencingToken must be a non-negative integer, got ${describeValue(fencingToken)}`);
  }
  if (typeof updateExpression !== 'string' || updateExpression.trim().length === 0) {
    throw new InvalidConfigError(`[${PKG}] fencedUpdate updateExpression must be a non-empty string, got ${describeValue(updateExpression)}`);
  }
  const names = options.expressionAttributeNames ?? {};
  const values = options.expressionAttributeValues ?? {};
  for (const name of [...Object.keys(names), ...Object.keys(values)]) {
    if (name.startsWith('#lh') || name.startsWith(':lh')) throw new InvalidConfigError(`[${PKG}] fencedUpdate placeholder ${describeValue(name)} is reserved for the fence`);
  }
  const position = encodeFencePosition(options.position);
  const fence = fenceAttributes(shardId);
  // One SET clause at most in an update expression: the fence joins the caller's, or comes first.
  const fenceSet = 'SET #lhToken = :lhToken, #lhPosition = :lhPosition';
  const set = /\bSET\s/i.test(updateExpression) ? updateExpression.replace(/\bSET\s/i, `${fenceSet}, `) : `${fenceSet} ${updateExpression}`;
  try {
    await client.send(
      new UpdateItemCommand({
        TableName: tableName,
        Key: key,
        UpdateExpression: set,
        ConditionExpression: 'attribute_not_exists(#lhToken) OR (#lhToken <= :lhToken AND #lhPosition < :lhPosition)',
        ExpressionAttributeNames: { ...names, '#lhToken': fence.token, '#lhPosition': fence.position },
        ExpressionAttributeValues: { ...values, ':lhToken': { N: String(fencingToken) }, ':lhPosition': { S: position } },
      }),
    );
    return 'applied';
  } catch (error) {
    const name = errorName(error);
    if (name === 'ConditionalCheckFailedException') return refusal(client, options, fence);
    if (name === 'ResourceNotFoundException') throw missingTable(tableName, error);
    if (name === 'ValidationException') throw new InvalidConfigError(`[${PKG}] fencedUpdate of table ${describeValue(tableName)} was refused: ${errorText(error)}`, { cause: error });
    throw new StorageOutcomeUnknownError(
      `[${PKG}] fencedUpdate of shard ${describeValue(shardId)} at ${describeValue(options.position)} may or may not have applied (${errorText(error)}); sending it again is safe: the fence tells`,
      { cause: error },
    );
  }
}

/** Why the fence refused: read the item strongly consistently (its fence only moves forward). */
async function refusal(client: DynamoDBClient, options: FencedUpdateOptions, fence: { token: string; position: string }): Promise<FencedUpdateResult> {
  let item: Record<string, AttributeValue> | undefined;
  try {
    ({ Item: item } = await client.send(
      new GetItemCommand({
        TableName: options.tableName,
        Key: options.key,
        ConsistentRead: true,
        ProjectionExpression: '#t',
        ExpressionAttributeNames: { '#t': fence.token },
      }),
    ));
  } catch (error) {
    throw new StorageUnavailableError(`[${PKG}] fencedUpdate was refused by the fence, and the fence could not be read: ${errorText(error)}`, { cause: error });
  }
  const stored = Number(item?.[fence.token]?.N ?? -1);
  if (stored > options.fencingToken) {
    throw new LeaseLostError(
      `[${PKG}] fencing token ${options.fencingToken} of shard ${describeValue(options.shardId)} is older than the ${stored} item ${describeValue(options.key)} of ${describeValue(options.tableName)} last saw: another worker owns the shard now`,
      options.shardId,
    );
  }
  return 'replay';
}
