/**
 * The roster digest's moves (README, "The digest's moves"; core's `getRosterMoves`): which members each
 * advance of the digest named, so that a worker whose digest read finds it moved reads those members by
 * key instead of the whole roster.
 *
 * Where they live: a ring of `limits.rosterMovesKept` (256) slot items under a partition key of their
 * own, `pk` = `<group>#moves`, `sk` = `move:<slot>` (three digits, the advance's digest modulo 256), each
 * holding the digest it was written for (`digest`) and the names (`named`, a list of strings). An advance
 * moves the digest with `ADD` as before, then writes its slot on a condition that the slot holds no later
 * advance. A reader reads the digest first, then the slots of the advances after its `since` with one
 * strongly consistent `Query` (two where the range wraps past slot 255), and keeps a slot only if it
 * holds the very digest it stands for: a slot whose write is still on its way, was lost, or was written
 * again by an advance 256 later reads as an advance that named nobody, and the reader reads the whole
 * roster. So nothing is ever deleted, the slots never grow past 256 items a group, and a reader never takes
 * another advance's names for the one it asked about.
 *
 * Why not on the digest's item: a `GetItem` bills the whole item whatever it projects, and every worker
 * reads the digest every take tick; names kept there would multiply that read's units at every tick to
 * save some only at the ticks when the digest moved. Why a key of its own rather than the digest's: at
 * 1,000 workers the digest's reads take a sixth of a partition, and the slots' reads at most as much
 * again (one small `Query` a worker a tick while the digest moves at every tick); apart, neither key
 * passes a third. No item of another group is ever read: `<group>#moves` is the partition key of a group
 * named so, whose leases, leader and earlier roster item have the sort keys `lease:...`, `leader` and
 * `roster`, and whose digest and members live under keys ending in `#digest` and in a digit; the slots are
 * read only by the range `move:000` to `move:255`, which none of those sort keys falls in.
 */
import { PutItemCommand, type DynamoDBClient, type QueryCommandInput } from '@aws-sdk/client-dynamodb';
import type { RosterMoves } from '@leasehold/core';
import { limits, rosterMovesOf, type KeptAdvance } from '@leasehold/core/adapter';
import { numberOf, type Item, type Sent } from './items.js';
import { attr } from './schema.js';

/** Suffix of the group that makes the digest's moves' partition key: `<group>#moves`. */
export const MOVES_PARTITION_SUFFIX = '#moves';
/** Prefix of a slot's sort key: `move:<slot>`, the slot in three digits. */
export const MOVE_PREFIX = 'move:';
/** How many slots a group's ring has: the advances the contract asks a store to keep. */
export const MOVE_SLOTS = limits.rosterMovesKept;

/** What the moves need of the storage: its table, its writes, its reads. */
export interface RosterMovesIo {
  readonly tableName: string;
  /** Sends a conditional write: applied, failed its condition, or failed. */
  send(request: (client: DynamoDBClient) => Promise<unknown>): Promise<Sent>;
  /** Every item one paginated `Query` finds; a failure throws a `StorageUnavailableError` naming `what`. */
  queryAll(what: string, input: (startKey: Item | undefined) => QueryCommandInput): Promise<Item[]>;
}

export function movesPartitionKey(group: string): string {
  return `${group}${MOVES_PARTITION_SUFFIX}`;
}

function slotSortKey(slot: number): string {
  return `${MOVE_PREFIX}${String(slot).padStart(3, '0')}`;
}

/**
 * Writes the names of the advance that wrote `digest` to its slot, unless the slot already holds a later
 * advance. Whether it was written: a slot left unwritten (the names empty, a later advance there first, the
 * write failed) reads as an advance that named nobody, which costs the readers a whole roster read and
 * nothing else, so a failure here does not fail the advance, whose digest has moved.
 */
export async function keepAdvance(io: RosterMovesIo, group: string, digest: number, workerIds: readonly string[]): Promise<boolean> {
  const names = [...new Set(workerIds)];
  if (names.length === 0) return false;
  const sent = await io.send((client) =>
    client.send(
      new PutItemCommand({
        TableName: io.tableName,
        Item: {
          [attr.pk]: { S: movesPartitionKey(group) },
          [attr.sk]: { S: slotSortKey(digest % MOVE_SLOTS) },
          [attr.digest]: { N: String(digest) },
          [attr.named]: { L: names.map((name) => ({ S: name })) },
        },
        ConditionExpression: 'attribute_not_exists(#digest) OR #digest < :digest',
        ExpressionAttributeNames: { '#digest': attr.digest },
        ExpressionAttributeValues: { ':digest': { N: String(digest) } },
      }),
    ),
  );
  return sent.kind === 'applied';
}

/**
 * The advances after `since` up to `digest` (read before this, strongly consistent), from their slots:
 * nothing is read when the digest did not move, or moved by more than the ring holds (then `null`).
 */
export async function readMoves(io: RosterMovesIo, group: string, since: number, digest: number, what: string): Promise<RosterMoves> {
  if (since >= digest || digest - since > MOVE_SLOTS) return rosterMovesOf(since, digest, []);
  const first = (since + 1) % MOVE_SLOTS;
  const last = digest % MOVE_SLOTS;
  const ranges: Array<[number, number]> = first <= last ? [[first, last]] : [[first, MOVE_SLOTS - 1], [0, last]];
  const pages = await Promise.all(
    ranges.map(([from, to]) =>
      io.queryAll(what, (startKey) => ({
        TableName: io.tableName,
        KeyConditionExpression: '#pk = :pk AND #sk BETWEEN :from AND :to',
        ExpressionAttributeNames: { '#pk': attr.pk, '#sk': attr.sk },
        ExpressionAttributeValues: { ':pk': { S: movesPartitionKey(group) }, ':from': { S: slotSortKey(from) }, ':to': { S: slotSortKey(to) } },
        ConsistentRead: true,
        ...(startKey === undefined ? {} : { ExclusiveStartKey: startKey }),
      })),
    ),
  );
  const kept: KeptAdvance[] = [];
  for (const item of pages.flat()) {
    const advance = keptOf(item);
    if (advance !== undefined) kept.push(advance);
  }
  return rosterMovesOf(since, digest, kept);
}

/** A slot as the advance it keeps; `undefined` for one that cannot be read back, which reads as naming nobody. */
function keptOf(item: Item): KeptAdvance | undefined {
  const digest = numberOf(item[attr.digest]);
  const named = item[attr.named]?.L;
  if (typeof digest !== 'number' || !Number.isSafeInteger(digest) || named === undefined) return undefined;
  const workerIds: string[] = [];
  for (const value of named) {
    if (typeof value.S !== 'string' || value.S === '') return undefined;
    workerIds.push(value.S);
  }
  return { digest, workerIds };
}
