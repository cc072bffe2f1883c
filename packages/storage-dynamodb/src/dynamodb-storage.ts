import { randomUUID } from 'node:crypto';
import {
  GetItemCommand,
  PutItemCommand,
  QueryCommand,
  UpdateItemCommand,
  type AttributeValue,
  type DynamoDBClient,
  type PutItemCommandInput,
} from '@aws-sdk/client-dynamodb';
import {
  InvalidConfigError,
  InvalidInputError,
  StorageOutcomeUnknownError,
  StorageSchemaError,
  StorageUnavailableError,
  type CreateLeaseOptions,
  type DeleteResult,
  type LeaderRecord,
  type LeaderState,
  type LeaseListing,
  type LeaseRecord,
  type LeaseState,
  type LeaseUpdate,
  type MemberRecord,
  type MemberState,
  type NewLeader,
  type NewLease,
  type Roster,
  type Storage,
  type Unknown,
  type WriteResult,
} from '@leasehold/core';
import {
  describeValue,
  leaderStateOf,
  leaseStateOf,
  listingOf,
  result,
  validateGroup,
  validateLeaderState,
  validateLeaseKey,
  validateLeaseKeys,
  validateLeaseUpdates,
  validateNewLeader,
  validateNewLease,
  validateVersion,
  optionKeys,
  refuseUnknownOptions,
} from '@leasehold/core/adapter';
import { batchGetItems } from './batch-get.js';
import {
  ambiguous,
  corruptOutcome,
  counterOf,
  isTombstone,
  leaderAttributes,
  leaderItemKey,
  leaderOf,
  leaseAttributes,
  leaseItemKey,
  leaseKeyOf,
  leaseOf,
  TRUE,
  unreadConflict,
  type Item,
  type Sent,
} from './items.js';
import {
  LEASE_PREFIX,
  PKG,
  attr,
  checkItemSize,
  checkTable,
  createTable,
  errorName,
  errorText,
  missingTable,
  validateTableName,
  type CreateTableOptions,
} from './schema.js';
import * as members from './members.js';

/** Options of {@link DynamoDBStorage}. */
export interface DynamoDBStorageOptions {
  /**
   * The client to send requests with; you create it, configure its region, credentials and retries, and
   * destroy it. Its retry strategy (the SDK's standard or adaptive mode) retries throttling and transient
   * errors with backoff and jitter; this adapter recognises the writes those retries make (see README).
   */
  client: DynamoDBClient;
  /** The table holding every group's leases and leader record: 3 to 255 of `a-z A-Z 0-9 _ - .`. */
  tableName: string;
  /** How many conditional writes of one `updateLeases` batch are in flight at once. Default 16. */
  writeConcurrency?: number;
}

const OPTION_KEYS = optionKeys<DynamoDBStorageOptions>({ client: true, tableName: true, writeConcurrency: true });

/** Whose write the item that failed a condition holds. */
type Verdict =
  | { readonly kind: 'mine' }
  | { readonly kind: 'ambiguous' }
  | { readonly kind: 'other'; readonly item: Item | undefined };

const THROTTLING = new Set(['ProvisionedThroughputExceededException', 'ThrottlingException', 'RequestLimitExceeded']);
const MAX_CREATE_ROUNDS = 8;

/**
 * Leases, checkpoints and leader records in one DynamoDB table, every write a conditional `PutItem` or
 * `UpdateItem` on the record's version. Many groups share one table; create it with
 * {@link DynamoDBStorage.createTable} (or the `createTable` function) before first use.
 */
export class DynamoDBStorage implements Storage {
  /** The storage contract version this adapter implements (UPGRADING.md); core refuses any other. */
  readonly contractVersion = 8;

  readonly #client: DynamoDBClient;
  readonly #tableName: string;
  readonly #writeConcurrency: number;
  readonly #membersIo: members.MembersIo;

  constructor(options: DynamoDBStorageOptions) {
    if (typeof options !== 'object' || options === null) {
      throw new InvalidConfigError(`[${PKG}] options must be an object, got ${describeValue(options)}`);
    }
    refuseUnknownOptions(PKG, 'DynamoDBStorage', options, OPTION_KEYS);
    validateTableName(options.tableName);
    if (typeof options.client?.send !== 'function') {
      throw new InvalidConfigError(`[${PKG}] client must be a DynamoDBClient, got ${describeValue(options.client)}`);
    }
    const writeConcurrency = options.writeConcurrency ?? 16;
    if (!Number.isSafeInteger(writeConcurrency) || writeConcurrency < 1 || writeConcurrency > 1000) {
      throw new InvalidConfigError(`[${PKG}] writeConcurrency must be an integer from 1 to 1000, got ${describeValue(writeConcurrency)}`);
    }
    this.#client = options.client;
    this.#tableName = options.tableName;
    this.#writeConcurrency = writeConcurrency;
    // What the members' reads and writes (`members.ts`) need of this storage.
    this.#membersIo = {
      client: this.#client,
      tableName: this.#tableName,
      send: (request) => this.#send(request),
      read: (what, request) => this.#read(what, request),
      failed: (error, what) => this.#failedWrite(error, what),
      getItem: (key) => this.#getItem(key),
    };
  }

  /** The table this store writes to. */
  get tableName(): string {
    return this.#tableName;
  }

  /** Creates the table (on-demand billing) and waits until it is active; harmless when it exists. */
  async createTable(options?: CreateTableOptions): Promise<void> {
    await createTable(this.#client, this.#tableName, options);
  }

  /** Throws a `StorageSchemaError` when the table is missing or has another key schema. */
  async checkTable(): Promise<void> {
    await checkTable(this.#client, this.#tableName);
  }

  /**
   * Ends the adapter's use of the client. It opens no connection of its own (no change feed), so there is
   * nothing more to release; the client stays open: it is the caller's to `destroy()`, as the pool is for
   * `PostgresStorage` and the client for `RedisStorage`.
   */
  async close(): Promise<void> {}

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  async listLeases(group: string): Promise<LeaseListing> {
    validateGroup(group, PKG);
    const listing: LeaseListing = { leases: [], corrupt: [] };
    let startKey: Item | undefined;
    do {
      const page = await this.#read(`list the leases of group ${describeValue(group)}`, () =>
        this.#client.send(
          new QueryCommand({
            TableName: this.#tableName,
            ConsistentRead: true,
            KeyConditionExpression: '#pk = :pk AND begins_with(#sk, :prefix)',
            FilterExpression: 'attribute_not_exists(#deleted)',
            ExpressionAttributeNames: { '#pk': attr.pk, '#sk': attr.sk, '#deleted': attr.deleted },
            ExpressionAttributeValues: { ':pk': { S: group }, ':prefix': { S: LEASE_PREFIX } },
            ExclusiveStartKey: startKey,
          }),
        ),
      );
      // An item that cannot be read back is reported by its key and never hides the others.
      const decoded = listingOf(page.Items ?? [], (item) => leaseOf(group, leaseKeyOf(group, item), item));
      listing.leases.push(...decoded.leases);
      listing.corrupt.push(...decoded.corrupt);
      startKey = page.LastEvaluatedKey;
    } while (startKey !== undefined);
    return listing;
  }

  async getLease(group: string, leaseKey: string): Promise<LeaseRecord | null> {
    validateGroup(group, PKG);
    validateLeaseKey(leaseKey, PKG);
    const item = await this.#read(`read lease ${describeValue(leaseKey)} of group ${describeValue(group)}`, () =>
      this.#getItem(leaseItemKey(group, leaseKey)),
    );
    return item === undefined || isTombstone(item) ? null : leaseOf(group, leaseKey, item);
  }

  /**
   * One strongly consistent `BatchGetItem` of the named leases' items (keys DynamoDB leaves unprocessed are
   * sent again after a backoff: see `batch-get.ts`), each decoded as {@link getLease} decodes it: a key with
   * no item or a tombstone is left out, an item that cannot be read back is in `corrupt` naming its key. A
   * repeated key is read once (DynamoDB refuses a batch that names a key twice); the leases come in the
   * order their keys were first named. Up to `limits.maxLeasesPerRead` (100) keys: BatchGetItem's own limit.
   */
  async getLeases(group: string, leaseKeys: readonly string[]): Promise<LeaseListing> {
    validateGroup(group, PKG);
    validateLeaseKeys(leaseKeys, PKG);
    const keys = [...new Set(leaseKeys)];
    if (keys.length === 0) return { leases: [], corrupt: [] };
    const what = `read ${keys.length} lease(s) of group ${describeValue(group)}`;
    const items = await this.#read(what, () => batchGetItems(this.#client, this.#tableName, keys.map((leaseKey) => leaseItemKey(group, leaseKey))));
    const bySortKey = new Map(items.map((item) => [item[attr.sk]?.S, item]));
    const found = keys.flatMap((leaseKey) => {
      const item = bySortKey.get(`${LEASE_PREFIX}${leaseKey}`);
      return item === undefined || isTombstone(item) ? [] : [{ leaseKey, item }];
    });
    // An item that cannot be read back is reported by its key and never hides the others.
    return listingOf(found, ({ leaseKey, item }) => leaseOf(group, leaseKey, item));
  }

  async createLease(lease: NewLease, options: CreateLeaseOptions = {}): Promise<WriteResult<LeaseRecord>> {
    const { group, leaseKey, state } = validateNewLease(lease, PKG);
    const what = `create of lease ${describeValue(leaseKey)} in group ${describeValue(group)}`;
    const key = leaseItemKey(group, leaseKey);
    // A deleted key leaves a tombstone. Only a recreate writes over it: the new lease continues its
    // version and keeps its highest epoch.
    let tombstone: { version: number; epoch: number } | undefined;
    for (let round = 0; round < MAX_CREATE_ROUNDS; round++) {
      const version = (tombstone?.version ?? 0) + 1;
      const next: LeaseState = { ...state, epoch: Math.max(state.epoch, tombstone?.epoch ?? 0) };
      const writeId = randomUUID();
      const item: Item = { ...key, ...leaseAttributes(version, next, writeId) };
      checkItemSize(item, `lease ${describeValue(leaseKey)} of group ${describeValue(group)}`);
      const input: PutItemCommandInput = tombstone
        ? {
            TableName: this.#tableName,
            Item: item,
            ConditionExpression: '#version = :base AND #deleted = :true',
            ExpressionAttributeNames: { '#version': attr.version, '#deleted': attr.deleted },
            ExpressionAttributeValues: { ':base': { N: String(tombstone.version) }, ':true': TRUE },
            ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
          }
        : {
            TableName: this.#tableName,
            Item: item,
            ConditionExpression: 'attribute_not_exists(#pk)',
            ExpressionAttributeNames: { '#pk': attr.pk },
            ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
          };
      const sent = await this.#send(() => this.#client.send(new PutItemCommand(input)));
      const record: LeaseRecord = { group, leaseKey, version, ...next };
      if (sent.kind === 'applied') return result.applied(record);
      if (sent.kind === 'failed') return this.#failedWrite(sent.error, what);
      const verdict = await this.#judge(sent, key, version, writeId);
      if (verdict === undefined) return result.unknown(unreadConflict(what));
      if (verdict.kind === 'mine') return result.applied(record);
      if (verdict.kind === 'ambiguous') return result.unknown(ambiguous(what));
      const current = verdict.item;
      try {
        if (current !== undefined && !isTombstone(current)) return result.conflict(leaseOf(group, leaseKey, current));
        if (current !== undefined && options.recreate !== true) return result.conflict(null);
        tombstone = current === undefined ? undefined : {
          version: counterOf(current, attr.version, group, leaseKey),
          epoch: counterOf(current, attr.epoch, group, leaseKey),
        };
      } catch (error) {
        return corruptOutcome(error);
      }
    }
    return result.unknown(new StorageOutcomeUnknownError(`[${PKG}] ${what} lost ${MAX_CREATE_ROUNDS} races in a row with deletes and creates of the same key`));
  }

  async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    validateLeaseUpdates(group, updates, PKG);
    // Every item is checked before the first one is sent: one bad update refuses the whole batch.
    const prepared = updates.map((update) => {
      const writeId = randomUUID();
      const next = leaseStateOf(update.next);
      const attributes = leaseAttributes(update.expectedVersion + 1, next, writeId);
      checkItemSize(
        { ...leaseItemKey(group, update.leaseKey), ...attributes },
        `lease ${describeValue(update.leaseKey)} of group ${describeValue(group)}`,
      );
      return { update, next, writeId, attributes };
    });
    const settled = await mapBounded(prepared, this.#writeConcurrency, async ({ update, next, writeId, attributes }) => {
      const { leaseKey, expectedVersion } = update;
      const what = `update of lease ${describeValue(leaseKey)} in group ${describeValue(group)}`;
      const key = leaseItemKey(group, leaseKey);
      const version = expectedVersion + 1;
      const sent = await this.#send(() =>
        this.#client.send(
          new UpdateItemCommand({
            TableName: this.#tableName,
            Key: key,
            UpdateExpression: 'SET #version = :version, #epoch = :epoch, #state = :state, #writeId = :writeId',
            ConditionExpression: '#version = :expected AND attribute_not_exists(#deleted)',
            ExpressionAttributeNames: {
              '#version': attr.version,
              '#epoch': attr.epoch,
              '#state': attr.state,
              '#writeId': attr.writeId,
              '#deleted': attr.deleted,
            },
            ExpressionAttributeValues: {
              ':version': attributes[attr.version] as AttributeValue,
              ':epoch': attributes[attr.epoch] as AttributeValue,
              ':state': attributes[attr.state] as AttributeValue,
              ':writeId': attributes[attr.writeId] as AttributeValue,
              ':expected': { N: String(expectedVersion) },
            },
            ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
          }),
        ),
      );
      // Identity first: leaseStateOf never returns it, and a spread placed last is cloned far faster
      // than properties added after one (this runs once per lease of every renewal).
      const record: LeaseRecord = { group, leaseKey, version, ...next };
      return this.#outcome(sent, what, key, version, writeId, record, (item) => leaseOf(group, leaseKey, item));
    });
    return unwrap(settled);
  }

  async deleteLease(group: string, leaseKey: string, expectedVersion: number): Promise<DeleteResult> {
    validateGroup(group, PKG);
    validateLeaseKey(leaseKey, PKG);
    validateVersion(expectedVersion, PKG);
    const what = `delete of lease ${describeValue(leaseKey)} in group ${describeValue(group)}`;
    const key = leaseItemKey(group, leaseKey);
    const version = expectedVersion + 1;
    const writeId = randomUUID();
    // A delete leaves a tombstone with the next version and the epoch, so that neither ever repeats.
    const sent = await this.#send(() =>
      this.#client.send(
        new UpdateItemCommand({
          TableName: this.#tableName,
          Key: key,
          UpdateExpression: 'SET #version = :version, #deleted = :true, #writeId = :writeId REMOVE #state',
          ConditionExpression: '#version = :expected AND attribute_not_exists(#deleted)',
          ExpressionAttributeNames: { '#version': attr.version, '#deleted': attr.deleted, '#writeId': attr.writeId, '#state': attr.state },
          ExpressionAttributeValues: {
            ':version': { N: String(version) },
            ':true': TRUE,
            ':writeId': { S: writeId },
            ':expected': { N: String(expectedVersion) },
          },
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
        }),
      ),
    );
    const outcome = await this.#outcome(sent, what, key, version, writeId, null, (item) => leaseOf(group, leaseKey, item));
    return outcome.status === 'applied' ? { status: 'applied' } : outcome;
  }

  getRoster(group: string): Promise<Roster> {
    return members.getRoster(this.#membersIo, group);
  }

  /**
   * One strongly consistent `BatchGetItem` of the members' items (keys DynamoDB leaves unprocessed are sent
   * again after a backoff), decoded as {@link getRoster} decodes them: tombstones left out, a member that
   * cannot be read back in `corrupt`. Members come in the order their ids were first named.
   */
  getMembers(group: string, workerIds: readonly string[]): Promise<Roster> {
    return members.getMembers(this.#membersIo, group, workerIds);
  }

  /** One strongly consistent `GetItem` of the group's digest item; 0 when there is none. */
  getRosterDigest(group: string): Promise<number> {
    return members.getRosterDigest(this.#membersIo, group);
  }

  /**
   * One `UpdateItem` that `ADD`s 1 to the group's digest item, creating it at 1, and returns the value
   * written. Its only condition is that a stored digest is a number: a damaged item is reported, never
   * overwritten. A lost answer the SDK sends again may advance twice, which the contract allows.
   */
  advanceRosterDigest(group: string): Promise<number> {
    return members.advanceRosterDigest(this.#membersIo, group);
  }

  putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    return members.putMember(this.#membersIo, group, workerId, expectedVersion, next);
  }

  removeMember(group: string, workerId: string, expectedVersion: number): Promise<DeleteResult<MemberRecord>> {
    return members.removeMember(this.#membersIo, group, workerId, expectedVersion);
  }

  async getLeader(group: string): Promise<LeaderRecord | null> {
    validateGroup(group, PKG);
    const item = await this.#read(`read the leader record of group ${describeValue(group)}`, () => this.#getItem(leaderItemKey(group)));
    return item === undefined ? null : leaderOf(group, item);
  }

  async createLeader(leader: NewLeader): Promise<WriteResult<LeaderRecord>> {
    const { group, state } = validateNewLeader(leader, PKG);
    const what = `create of the leader record of group ${describeValue(group)}`;
    const key = leaderItemKey(group);
    const writeId = randomUUID();
    const item: Item = { ...key, ...leaderAttributes(1, state, writeId) };
    checkItemSize(item, `leader record of group ${describeValue(group)}`);
    const sent = await this.#send(() =>
      this.#client.send(
        new PutItemCommand({
          TableName: this.#tableName,
          Item: item,
          ConditionExpression: 'attribute_not_exists(#pk)',
          ExpressionAttributeNames: { '#pk': attr.pk },
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
        }),
      ),
    );
    const outcome = await this.#outcome(sent, what, key, 1, writeId, { group, version: 1, ...state }, (current) => leaderOf(group, current));
    // The leader record is never deleted, so a create that finds no record cannot have lost a race.
    if (outcome.status === 'conflict' && outcome.current === null) return result.unknown(unreadConflict(what));
    return outcome;
  }

  async updateLeader(group: string, expectedVersion: number, next: LeaderState): Promise<WriteResult<LeaderRecord>> {
    validateGroup(group, PKG);
    validateVersion(expectedVersion, PKG);
    validateLeaderState(next, PKG);
    const what = `update of the leader record of group ${describeValue(group)}`;
    const key = leaderItemKey(group);
    const version = expectedVersion + 1;
    const state = leaderStateOf(next);
    const writeId = randomUUID();
    const attributes = leaderAttributes(version, state, writeId);
    checkItemSize({ ...key, ...attributes }, `leader record of group ${describeValue(group)}`);
    const sent = await this.#send(() =>
      this.#client.send(
        new UpdateItemCommand({
          TableName: this.#tableName,
          Key: key,
          UpdateExpression: 'SET #version = :version, #term = :term, #state = :state, #writeId = :writeId',
          ConditionExpression: '#version = :expected',
          ExpressionAttributeNames: { '#version': attr.version, '#term': attr.term, '#state': attr.state, '#writeId': attr.writeId },
          ExpressionAttributeValues: {
            ':version': attributes[attr.version] as AttributeValue,
            ':term': attributes[attr.term] as AttributeValue,
            ':state': attributes[attr.state] as AttributeValue,
            ':writeId': attributes[attr.writeId] as AttributeValue,
            ':expected': { N: String(expectedVersion) },
          },
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
        }),
      ),
    );
    return this.#outcome(sent, what, key, version, writeId, { group, version, ...state }, (item) => leaderOf(group, item));
  }

  /** Sends one conditional write and sorts its outcome; it never throws. */
  async #send(request: () => Promise<unknown>): Promise<Sent> {
    try {
      const output = (await request()) as { Attributes?: Item } | undefined;
      return { kind: 'applied', attributes: output?.Attributes };
    } catch (error) {
      if (errorName(error) !== 'ConditionalCheckFailedException') return { kind: 'failed', error };
      const failed = error as { Item?: Item; $metadata?: { attempts?: number } };
      return { kind: 'condition-failed', item: failed.Item, attempts: failed.$metadata?.attempts };
    }
  }

  /**
   * Turns a sent write into its exact result. `record` is what the write stored if it applied (`null`
   * for a delete, which leaves a tombstone and reports no record).
   */
  async #outcome<T>(
    sent: Sent,
    what: string,
    key: Item,
    version: number,
    writeId: string,
    record: T,
    decode: (item: Item) => T,
  ): Promise<WriteResult<NonNullable<T>>> {
    if (sent.kind === 'applied') return result.applied(record as NonNullable<T>);
    if (sent.kind === 'failed') return this.#failedWrite(sent.error, what);
    const verdict = await this.#judge(sent, key, version, writeId);
    if (verdict === undefined) return result.unknown(unreadConflict(what));
    if (verdict.kind === 'mine') return result.applied(record as NonNullable<T>);
    if (verdict.kind === 'ambiguous') return result.unknown(ambiguous(what));
    const current = verdict.item;
    try {
      return result.conflict(current === undefined || isTombstone(current) ? null : (decode(current) as NonNullable<T>));
    } catch (error) {
      // The write did not apply, and the record it met cannot be read: the caller must not act on it.
      return corruptOutcome(error);
    }
  }

  /**
   * Decides whose write a failed condition met. Every write carries a random `writeId`, so an item with
   * this write's id and version can only be this write: its first attempt applied and the SDK's retry
   * then failed the condition (KCL's "false conflict"). When the SDK retried and the item has moved past
   * the version this write would have produced, the first attempt may have applied and been overwritten
   * since, so the outcome is unknown. Otherwise the write did not apply. `undefined`: the current item
   * could not be read.
   */
  async #judge(sent: Sent & { kind: 'condition-failed' }, key: Item, version: number, writeId: string): Promise<Verdict | undefined> {
    let item = sent.item;
    // DynamoDB returns the item with ALL_OLD; backends that ignore it (dynalite) need a consistent read.
    if (item === undefined) {
      try {
        item = await this.#getItem(key);
      } catch {
        return undefined;
      }
    }
    if (item === undefined) return { kind: 'other', item };
    const storedVersion = Number(item[attr.version]?.N);
    if (item[attr.writeId]?.S === writeId && storedVersion === version) return { kind: 'mine' };
    const retried = sent.attempts === undefined || sent.attempts > 1;
    if (retried && storedVersion > version) return { kind: 'ambiguous' };
    return { kind: 'other', item };
  }

  /** The result of a write that failed with something other than its condition. */
  async #failedWrite(error: unknown, what: string): Promise<Unknown> {
    const name = errorName(error);
    if (name === 'ResourceNotFoundException') throw missingTable(this.#tableName, error);
    // DynamoDB validates a request before it applies anything; a valid request refused is the table's shape.
    if (name === 'ValidationException') throw await this.#refused(error, what);
    const attempts = (error as { $metadata?: { attempts?: number } }).$metadata?.attempts ?? 1;
    const how = THROTTLING.has(name)
      ? `was still throttled after ${attempts} attempt(s) (${errorText(error)})`
      : `failed after ${attempts} attempt(s) with ${errorText(error)}`;
    return result.unknown(
      new StorageOutcomeUnknownError(`[${PKG}] ${what} ${how}; it may or may not have applied`, { cause: error }),
    );
  }

  async #read<T>(what: string, request: () => Promise<T>): Promise<T> {
    try {
      return await request();
    } catch (error) {
      const name = errorName(error);
      if (name === 'ResourceNotFoundException') throw missingTable(this.#tableName, error);
      if (name === 'ValidationException') throw await this.#refused(error, `request to ${what}`);
      throw new StorageUnavailableError(`[${PKG}] could not ${what}: ${errorText(error)}`, { cause: error });
    }
  }

  /** The error for a request DynamoDB refused as invalid: a wrong key schema when the table has one. */
  async #refused(error: unknown, what: string): Promise<Error> {
    try {
      await checkTable(this.#client, this.#tableName);
    } catch (schemaError) {
      if (schemaError instanceof StorageSchemaError) return schemaError;
    }
    return new InvalidInputError(`[${PKG}] DynamoDB refused the ${what}: ${errorText(error)}`, { cause: error });
  }

  async #getItem(key: Item): Promise<Item | undefined> {
    const output = await this.#client.send(new GetItemCommand({ TableName: this.#tableName, Key: key, ConsistentRead: true }));
    return output.Item;
  }
}

/** Runs `task` over `items` with at most `limit` in flight; each settles on its own, in the order given. */
async function mapBounded<T, R>(items: readonly T[], limit: number, task: (item: T) => Promise<R>): Promise<PromiseSettledResult<R>[]> {
  const settled = new Array<PromiseSettledResult<R>>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const index = next++;
      try {
        settled[index] = { status: 'fulfilled', value: await task(items[index] as T) };
      } catch (reason) {
        settled[index] = { status: 'rejected', reason };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return settled;
}

/** The values of a settled batch, or its first error once every write has finished. */
function unwrap<R>(settled: readonly PromiseSettledResult<R>[]): R[] {
  const failed = settled.find((entry) => entry.status === 'rejected');
  if (failed) throw failed.reason;
  return settled.map((entry) => (entry as PromiseFulfilledResult<R>).value);
}
