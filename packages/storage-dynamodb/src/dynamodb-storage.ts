import { randomBytes, randomUUID } from 'node:crypto';
import {
  GetItemCommand,
  PutItemCommand,
  QueryCommand,
  UpdateItemCommand,
  type AttributeValue,
  type DynamoDBClient,
  type PutItemCommandInput,
  type QueryCommandInput,
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
  encodeMemberState,
  leaderStateOf,
  leaseStateOf,
  listingOf,
  memberStateOf,
  result,
  rosterOf,
  validateGroup,
  validateLeaderState,
  validateLeaseKey,
  validateLeaseKeys,
  validateLeaseUpdates,
  validateMemberWrite,
  validateNewLeader,
  validateNewLease,
  validateVersion,
  validateWorkerId,
  validateWorkerIds,
  optionKeys,
  refuseUnknownOptions,
} from '@leasehold/core/adapter';
import { batchGetItems } from './batch-get.js';
import { deleteFresh, freshJoin, type FreshMembersIo } from './fresh-members.js';
import { refuseBesideEarlierLayouts, type JoinCheckIo } from './join-check.js';
import {
  ambiguous,
  corruptDigest,
  corruptOutcome,
  counterOf,
  digestItemKey,
  digestOf,
  isRemoved,
  isTombstone,
  isVersion,
  leaderAttributes,
  leaderItemKey,
  leaderOf,
  leaseAttributes,
  leaseItemKey,
  leaseKeyOf,
  leaseOf,
  memberConflict,
  memberItemKey,
  memberOf,
  memberBucketKeys,
  numberOf,
  TRUE,
  unreadConflict,
  workerIdOf,
  type Item,
  type Sent,
} from './items.js';
import {
  LEASE_PREFIX,
  MEMBER_PREFIX,
  MEMBER_VERSION_SPAN,
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

  async getRoster(group: string): Promise<Roster> {
    validateGroup(group, PKG);
    // One Query per bucket, sent together; the members come back in sort key order, as one Query of one
    // key returned them.
    const buckets = await Promise.all(memberBucketKeys(group).map((key) => this.#membersUnder(group, key)));
    const items = buckets
      .flat()
      .map((item) => ({ item, order: Buffer.from(item[attr.sk]?.S ?? '', 'utf8') }))
      .sort((a, b) => Buffer.compare(a.order, b.order))
      .map(({ item }) => item);
    // A member that cannot be read back is reported by its worker id and never hides the others.
    return rosterOf(group, items, (item) => memberOf(group, workerIdOf(item), item));
  }

  /** Every member item under one bucket's partition key, tombstones left out. */
  async #membersUnder(group: string, partitionKey: string): Promise<Item[]> {
    // Pages follow the sort key (`member:<workerId>`), which no write moves: a member present throughout
    // the read is on exactly one page, however the others heartbeat, join and leave.
    const items = await this.#queryAll(`read the roster of group ${describeValue(group)}`, (startKey) => ({
      TableName: this.#tableName,
      KeyConditionExpression: '#pk = :pk AND begins_with(#sk, :member)',
      ExpressionAttributeNames: { '#pk': attr.pk, '#sk': attr.sk },
      ExpressionAttributeValues: { ':pk': { S: partitionKey }, ':member': { S: MEMBER_PREFIX } },
      ConsistentRead: true,
      ExclusiveStartKey: startKey,
    }));
    return items.filter((item) => !isRemoved(item));
  }

  /** Every item of a Query, page after page until `LastEvaluatedKey` is empty. */
  async #queryAll(what: string, input: (startKey: Item | undefined) => QueryCommandInput): Promise<Item[]> {
    const items: Item[] = [];
    let startKey: Item | undefined;
    do {
      const page = await this.#read(what, () => this.#client.send(new QueryCommand(input(startKey))));
      items.push(...(page.Items ?? []));
      startKey = page.LastEvaluatedKey;
    } while (startKey !== undefined && Object.keys(startKey).length > 0);
    return items;
  }

  /** What the join's checks of the layouts before use (`join-check.ts`). */
  #freshIo(): FreshMembersIo {
    return {
      tableName: this.#tableName,
      send: (request) => this.#send(() => request(this.#client)),
      met: (sent, key) => this.#memberMet(sent, key),
      failed: (error, what) => this.#failedWrite(error, what),
      getItem: (key) => this.#getItem(key),
    };
  }

  #joinCheckIo(): JoinCheckIo {
    return {
      tableName: this.#tableName,
      getItem: (what, key) => this.#read(what, () => this.#getItem(key)),
      queryAll: (what, input) => this.#queryAll(what, input),
      mark: async (what, request) => {
        const sent = await this.#send(() => request(this.#client));
        if (sent.kind === 'failed') {
          const outcome = await this.#failedWrite(sent.error, what);
          // Nothing of the join was sent: no record of it can have changed.
          throw new StorageUnavailableError(`${outcome.error.message}; the join was not sent`, { cause: outcome.error });
        }
        return sent.kind === 'applied' ? sent.attributes : sent.item;
      },
    };
  }


  /**
   * One strongly consistent `BatchGetItem` of the members' items (keys DynamoDB leaves unprocessed are sent
   * again after a backoff), decoded as {@link getRoster} decodes them: tombstones left out, a member that
   * cannot be read back in `corrupt`. Members come in the order their ids were first named.
   */
  async getMembers(group: string, workerIds: readonly string[]): Promise<Roster> {
    validateGroup(group, PKG);
    validateWorkerIds(workerIds, PKG);
    // DynamoDB refuses a batch that names a key twice, and one that names none.
    const ids = [...new Set(workerIds)];
    if (ids.length === 0) return { group, members: [], corrupt: [] };
    const what = `read ${ids.length} member(s) of group ${describeValue(group)}`;
    const items = await this.#read(what, () => batchGetItems(this.#client, this.#tableName, ids.map((workerId) => memberItemKey(group, workerId))));
    const byWorkerId = new Map(items.map((item) => [workerIdOf(item), item]));
    const found = ids.flatMap((workerId) => {
      const item = byWorkerId.get(workerId);
      return item === undefined || isRemoved(item) ? [] : [item];
    });
    return rosterOf(group, found, (item) => memberOf(group, workerIdOf(item), item));
  }

  /** One strongly consistent `GetItem` of the group's digest item; 0 when there is none. */
  async getRosterDigest(group: string): Promise<number> {
    validateGroup(group, PKG);
    const item = await this.#read(`read the roster digest of group ${describeValue(group)}`, () => this.#getItem(digestItemKey(group)));
    return item === undefined ? 0 : digestOf(group, item);
  }

  /**
   * One `UpdateItem` that `ADD`s 1 to the group's digest item, creating it at 1, and returns the value
   * written. Its only condition is that a stored digest is a number: a damaged item is reported, never
   * overwritten. A lost answer the SDK sends again may advance twice, which the contract allows.
   */
  async advanceRosterDigest(group: string): Promise<number> {
    validateGroup(group, PKG);
    const what = `advance of the roster digest of group ${describeValue(group)}`;
    const key = digestItemKey(group);
    const sent = await this.#send(() =>
      this.#client.send(
        new UpdateItemCommand({
          TableName: this.#tableName,
          Key: key,
          UpdateExpression: 'ADD #digest :one',
          ConditionExpression: 'attribute_not_exists(#digest) OR attribute_type(#digest, :number)',
          ExpressionAttributeNames: { '#digest': attr.digest },
          ExpressionAttributeValues: { ':one': { N: '1' }, ':number': { S: 'N' } },
          ReturnValues: 'UPDATED_NEW',
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
        }),
      ),
    );
    if (sent.kind === 'failed') throw (await this.#failedWrite(sent.error, what)).error;
    if (sent.kind === 'condition-failed') {
      // DynamoDB returns the item with ALL_OLD; backends that ignore it (dynalite) need a read.
      const item = sent.item ?? (await this.#read(`read the roster digest of group ${describeValue(group)}`, () => this.#getItem(key)));
      throw corruptDigest(group, item?.[attr.digest]);
    }
    const written = numberOf(sent.attributes?.[attr.digest]);
    if (!isVersion(written)) {
      throw new StorageOutcomeUnknownError(`[${PKG}] ${what} applied, but DynamoDB gave back the digest ${describeValue(written)}`);
    }
    return written;
  }

  async putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    validateMemberWrite(group, workerId, expectedVersion, next, PKG);
    const what =
      expectedVersion === null
        ? `join of member ${describeValue(workerId)} in group ${describeValue(group)}`
        : `write of member ${describeValue(workerId)} at version ${expectedVersion} in group ${describeValue(group)}`;
    if (expectedVersion === null) await refuseBesideEarlierLayouts(group, this.#joinCheckIo());
    const state = memberStateOf(next);
    const key = memberItemKey(group, workerId);
    const writeId = randomBytes(12).toString('base64url');
    const values: Item = { ':state': { S: encodeMemberState(state) }, ':writeId': { S: writeId } };
    if (expectedVersion === null) {
      const fresh = await freshJoin(this.#freshIo(), group, workerId, key, values, state, writeId, what);
      if (fresh !== undefined) return fresh;
    }
    // One UpdateItem of the member's own item. A join here applies over the worker id's tombstone (the
    // version after the tombstone's, which every operand reads as it was before the update), so the worker
    // id's versions only grow; one over no item is `freshJoin`'s (fresh-members.ts). A put applies at the stored version of a
    // member that is not removed; the put that would take a fresh member's versions past its span (see
    // MEMBER_VERSION_SPAN) makes it fresh no more. Nothing another member writes is read or compared.
    const leavesSpan = expectedVersion !== null && (expectedVersion + 1) % MEMBER_VERSION_SPAN === 0;
    const sent = await this.#send(() =>
      this.#client.send(
        new UpdateItemCommand(
          expectedVersion === null
            ? {
                TableName: this.#tableName,
                Key: key,
                UpdateExpression: 'SET #version = if_not_exists(#version, :zero) + :one, #state = :state, #writeId = :writeId REMOVE #removed',
                // A tombstone whose version is not a number is corrupt: the join fails its condition and
                // reports it, rather than failing on the arithmetic.
                ConditionExpression: 'attribute_not_exists(#pk) OR (attribute_exists(#removed) AND attribute_type(#version, :number))',
                ExpressionAttributeNames: { '#pk': attr.pk, '#version': attr.version, '#state': attr.state, '#writeId': attr.writeId, '#removed': attr.removed },
                ExpressionAttributeValues: { ...values, ':zero': { N: '0' }, ':one': { N: '1' }, ':number': { S: 'N' } },
                ReturnValues: 'UPDATED_NEW',
                ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
              }
            : {
                TableName: this.#tableName,
                Key: key,
                UpdateExpression: `SET #version = :version, #state = :state, #writeId = :writeId${leavesSpan ? ' REMOVE #fresh' : ''}`,
                ConditionExpression: '#version = :expected AND attribute_not_exists(#removed)',
                ExpressionAttributeNames: { '#version': attr.version, '#state': attr.state, '#writeId': attr.writeId, '#removed': attr.removed, ...(leavesSpan ? { '#fresh': attr.fresh } : {}) },
                ExpressionAttributeValues: { ...values, ':version': { N: String(expectedVersion + 1) }, ':expected': { N: String(expectedVersion) } },
                ReturnValues: 'UPDATED_NEW',
                ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
              },
        ),
      ),
    );
    const applied = (version: unknown): WriteResult<MemberRecord> =>
      isVersion(version)
        ? result.applied({ group, workerId, version, ...state })
        : result.unknown(new StorageOutcomeUnknownError(`[${PKG}] ${what} applied, but DynamoDB gave back the version ${describeValue(version)}`));
    if (sent.kind === 'applied') return applied(numberOf(sent.attributes?.[attr.version]));
    if (sent.kind === 'failed') return this.#failedWrite(sent.error, what);
    const met = await this.#memberMet(sent, key);
    if (met === undefined) return result.unknown(unreadConflict(what));
    // The SDK retried, and its first attempt applied: the member holds this write's id.
    if (met.item !== undefined && !isRemoved(met.item) && met.item[attr.writeId]?.S === writeId) return applied(numberOf(met.item[attr.version]));
    if (met.retried) return result.unknown(ambiguous(what));
    return memberConflict(group, workerId, met.item);
  }

  async removeMember(group: string, workerId: string, expectedVersion: number): Promise<DeleteResult<MemberRecord>> {
    validateGroup(group, PKG);
    validateWorkerId(workerId, PKG);
    validateVersion(expectedVersion, PKG);
    const what = `removal of member ${describeValue(workerId)} at version ${expectedVersion} from group ${describeValue(group)}`;
    const key = memberItemKey(group, workerId);
    const fresh = await deleteFresh(this.#freshIo(), group, workerId, key, expectedVersion, what);
    if (fresh !== 'not-fresh') return fresh;
    // Any other member becomes a tombstone that keeps its version: a worker of an earlier release joining
    // again under its id continues above it (its joins start at 1 over no item).
    const sent = await this.#send(() =>
      this.#client.send(
        new UpdateItemCommand({
          TableName: this.#tableName,
          Key: key,
          UpdateExpression: 'SET #removed = :true REMOVE #state, #writeId',
          ConditionExpression: '#version = :expected AND attribute_not_exists(#removed)',
          ExpressionAttributeNames: { '#version': attr.version, '#state': attr.state, '#writeId': attr.writeId, '#removed': attr.removed },
          ExpressionAttributeValues: { ':expected': { N: String(expectedVersion) }, ':true': TRUE },
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
        }),
      ),
    );
    if (sent.kind === 'applied') return { status: 'applied' };
    if (sent.kind === 'failed') return this.#failedWrite(sent.error, what);
    const met = await this.#memberMet(sent, key);
    if (met === undefined) return result.unknown(unreadConflict(what));
    // A removal leaves nothing to recognise it by: after a retry, a tombstone or a moved member may be
    // this removal's own first attempt (followed by a join).
    if (met.retried) return result.unknown(ambiguous(what));
    return memberConflict(group, workerId, met.item);
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

  /**
   * The member item a member write's failed condition met, and whether the SDK sent the write more than
   * once. `undefined`: the item could not be read. DynamoDB returns the item with ALL_OLD; backends that
   * ignore it (dynalite) need a consistent read, which may see a later write than the one that refused.
   */
  async #memberMet(sent: Sent & { kind: 'condition-failed' }, key: Item): Promise<{ item: Item | undefined; retried: boolean } | undefined> {
    let item = sent.item;
    if (item === undefined) {
      try {
        item = await this.#getItem(key);
      } catch {
        return undefined;
      }
    }
    return { item, retried: sent.attempts === undefined || sent.attempts > 1 };
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
