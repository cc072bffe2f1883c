import { randomBytes, randomUUID } from 'node:crypto';
import {
  CorruptRecordError,
  InvalidConfigError,
  LeaseholdError,
  StorageOutcomeUnknownError,
  StorageSchemaError,
  StorageUnavailableError,
  type ChangeSubscription,
  type CreateLeaseOptions,
  type DeleteResult,
  type LeaderRecord,
  type LeaderState,
  type LeaseChange,
  type LeaseListing,
  type LeaseRecord,
  type LeaseUpdate,
  type MemberRecord,
  type MemberState,
  type NewLeader,
  type NewLease,
  type Roster,
  type RosterMoves,
  type Storage,
  type SubscribeOptions,
  type Unknown,
  type WriteResult,
} from '@leasehold/core';
import {
  describeValue,
  leaderStateOf,
  leaseStateOf,
  listingOf,
  memberStateOf,
  encodeMemberState,
  result,
  rosterOf,
  validateGroup,
  validateLeaderState,
  validateLeaseKey,
  validateLeaseKeys,
  validateLeaseUpdates,
  validateNewLeader,
  validateNewLease,
  validateMemberWrite,
  validateVersion,
  validateWorkerId,
  validateWorkerIds,
  validateSubscribeOptions,
  validateDigest,
  limits,
  optionKeys,
  refuseUnknownOptions,
} from '@leasehold/core/adapter';
import type { Cluster, Redis } from 'ioredis';
import {
  decodeRosterCounter,
  decodeRosterDigest,
  decodeRosterMoves,
  decodeStoredLeader,
  decodeStoredLease,
  decodeStoredMember,
  decodeTombstone,
  encodeLeaderBody,
  encodeLeaseBody,
  encodeLeaseValue,
} from './codec.js';
import { ChangeFeed } from './change-feed.js';
import { COUNTER_FIELD, groupKeys, PKG, validateKeyPrefix, type GroupKeys } from './keys.js';
import { bindScripts, type Scripts } from './scripts.js';
import { Watermarks } from './watermarks.js';

/** Leases a listing decodes between two turns of the event loop. */
const DECODE_SLICE = 500;

/** Resolves once the event loop has turned: timers and I/O that are due run first. */
const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** Options of {@link RedisStorage}. */
export interface RedisStorageOptions {
  /**
   * The `ioredis` client (`Redis`) or cluster client (`Cluster`) to use. The adapter registers its
   * scripts on it and changes none of its settings; closing it stays the caller's job.
   */
  client: Redis | Cluster;
  /**
   * Put in front of every key and channel name. Letters, digits and `. _ : / -` only, at most 128
   * characters. Default `"leasehold:"`.
   */
  keyPrefix?: string;
  /** How many leases one page of a listing asks for (the `COUNT` hint of `HSCAN`). Default 1,000. */
  listPageSize?: number;
  /** How many lease updates go into one script call; larger batches take several. Default 10,000. */
  maxBatchSize?: number;
}

const OPTION_KEYS = optionKeys<RedisStorageOptions>({ client: true, keyPrefix: true, listPageSize: true, maxBatchSize: true });

const TOMBSTONE_PAGE = 1000;
const KEY_CACHE_SIZE = 10_000;

/**
 * Leasehold storage on Redis: leases, checkpoints, leader records and rosters, each operation one atomic Lua
 * script on keys that share one hash tag per group, so that it runs unchanged on Redis Cluster.
 * Implements both `CheckpointStorage` and `LeaderStore`, and a change feed over pub/sub.
 *
 * It keeps, in memory, the highest version, epoch, term and member version it has seen per group and refuses, with a
 * `RegressionError`, any reply showing Redis went back on them (see the README for the settings that
 * keep Redis from losing acknowledged writes).
 */
export class RedisStorage implements Storage {
  /** The storage contract version this adapter implements (UPGRADING.md); core refuses any other. */
  readonly contractVersion = 8;

  readonly #prefix: string;
  readonly #listPageSize: number;
  readonly #maxBatchSize: number;
  readonly #scripts: Scripts;
  readonly #marks = new Watermarks();
  readonly #feed: ChangeFeed;
  /** Unique per instance; with a counter it makes the token that tags each write. */
  readonly #tokenPrefix = randomBytes(9).toString('base64url');
  #writes = 0;
  readonly #keyCache = new Map<string, GroupKeys>();

  constructor(options: RedisStorageOptions) {
    if (typeof options !== 'object' || options === null) {
      throw new InvalidConfigError(`[${PKG}] options must be an object, got ${describeValue(options)}`);
    }
    refuseUnknownOptions(PKG, 'RedisStorage', options, OPTION_KEYS);
    const client = options.client as unknown;
    if (typeof client !== 'object' || client === null || typeof (client as Redis).defineCommand !== 'function') {
      throw new InvalidConfigError(`[${PKG}] client must be an ioredis Redis or Cluster instance, got ${describeValue(client)}`);
    }
    refuseDroppingClient(options.client);
    const prefix = options.keyPrefix ?? 'leasehold:';
    validateKeyPrefix(prefix);
    this.#listPageSize = positiveInteger('listPageSize', options.listPageSize, 1000);
    this.#maxBatchSize = positiveInteger('maxBatchSize', options.maxBatchSize, 10_000);
    this.#prefix = prefix;
    this.#scripts = bindScripts(options.client);
    this.#feed = new ChangeFeed(options.client);
  }

  /**
   * Every lease of the group, read page by page with `HSCAN` until the cursor comes back to 0. A stored
   * value that cannot be read back is listed in `corrupt`, by its key.
   */
  async listLeases(group: string): Promise<LeaseListing> {
    const keys = this.#keys(group);
    const sentAt = this.#marks.begin();
    const raw = new Map<string, unknown>();
    let cursor = '0';
    do {
      const reply = await this.#read(() => `list the leases of group ${describeValue(group)}`, () =>
        this.#scripts.listLeases(keys.leases, keys.incarnation, cursor, this.#listPageSize),
      );
      const [incarnation, next, flat] = tuple(reply, 3, 'listLeases');
      this.#marks.incarnation(group, sentAt, optionalString(incarnation, 'listLeases'));
      const fields = array(flat, 'listLeases');
      // A field that HSCAN returns twice was read twice; the later read is the newer one.
      for (let i = 0; i + 1 < fields.length; i += 2) raw.set(String(fields[i]), fields[i + 1]);
      cursor = String(next);
    } while (cursor !== '0');

    // Decoded a slice at a time, the event loop turning between slices: 25 listings of 10,000 leases at
    // once (25 coordinators of one process, on a roster change) held a process's loop for 0.65 s when each
    // decoded its whole listing in one go, and its heartbeats' timers with it.
    const entries = [...raw];
    const listing: { leases: LeaseRecord[]; corrupt: CorruptRecordError[] } = { leases: [], corrupt: [] };
    for (let from = 0; from < entries.length; from += DECODE_SLICE) {
      if (from > 0) await nextTurn();
      const slice = listingOf(entries.slice(from, from + DECODE_SLICE), ([leaseKey, value]) => {
        const { record } = decodeStoredLease(group, leaseKey, value);
        this.#marks.lease(group, leaseKey, sentAt, record.version, record.epoch);
        return record;
      });
      listing.leases.push(...slice.leases);
      listing.corrupt.push(...slice.corrupt);
    }
    // A corrupt lease is still stored under its key: it was not deleted, so it is not looked for as vanished.
    await this.#checkVanished(group, keys, sentAt, raw);
    return listing;
  }

  async getLease(group: string, leaseKey: string): Promise<LeaseRecord | null> {
    const keys = this.#keys(group);
    validateLeaseKey(leaseKey, PKG);
    const sentAt = this.#marks.begin();
    const reply = await this.#read(() => `read lease ${describeValue(leaseKey)} of group ${describeValue(group)}`, () =>
      this.#scripts.getLease(keys.leases, keys.tombstones, keys.incarnation, leaseKey),
    );
    const [incarnation, current, tombstone] = tuple(reply, 3, 'getLease');
    this.#marks.incarnation(group, sentAt, optionalString(incarnation, 'getLease'));
    if (current === null) {
      this.#marks.absent(group, leaseKey, sentAt, decodeTombstone(group, leaseKey, tombstone));
      return null;
    }
    const { record } = decodeStoredLease(group, leaseKey, current);
    this.#marks.lease(group, leaseKey, sentAt, record.version, record.epoch);
    return record;
  }

  /**
   * The named leases in one script call, one round trip (`HMGET` of their fields, of the tombstones of those
   * with none, and the incarnation marker), each read and checked as `getLease` reads it: a version or
   * epoch that went back, or a lease gone without a tombstone, is a `RegressionError`. A key named twice is
   * sent once; a key with no lease is left out. A value that cannot be read back (or the malformed tombstone
   * of a key with no lease, which `getLease` throws for) is in `corrupt`, by its key, and every other lease
   * named is still read.
   */
  async getLeases(group: string, leaseKeys: readonly string[]): Promise<LeaseListing> {
    const keys = this.#keys(group);
    validateLeaseKeys(leaseKeys, PKG);
    const unique = [...new Set(leaseKeys)];
    const listing: { leases: LeaseRecord[]; corrupt: CorruptRecordError[] } = { leases: [], corrupt: [] };
    if (unique.length === 0) return listing;
    const sentAt = this.#marks.begin();
    const reply = await this.#read(() => `read ${unique.length} leases of group ${describeValue(group)}`, () =>
      this.#scripts.getLeases(keys.leases, keys.tombstones, keys.incarnation, ...unique),
    );
    const [incarnation, ...found] = tuple(reply, 2 * unique.length + 1, 'getLeases');
    this.#marks.incarnation(group, sentAt, optionalString(incarnation, 'getLeases'));
    unique.forEach((leaseKey, i) => {
      const current = found[2 * i];
      try {
        if (current === null) {
          this.#marks.absent(group, leaseKey, sentAt, decodeTombstone(group, leaseKey, found[2 * i + 1]));
          return;
        }
        const { record } = decodeStoredLease(group, leaseKey, current);
        this.#marks.lease(group, leaseKey, sentAt, record.version, record.epoch);
        listing.leases.push(record);
      } catch (error) {
        // A regression found is thrown, as getLease throws it: the group is refused from now on.
        if (!(error instanceof CorruptRecordError)) throw error;
        listing.corrupt.push(error);
      }
    });
    return listing;
  }

  async createLease(lease: NewLease, options: CreateLeaseOptions = {}): Promise<WriteResult<LeaseRecord>> {
    const { group, leaseKey, state } = validateNewLease(lease, PKG);
    const keys = this.#keysOfValid(group);
    const token = this.#token();
    const recreate = options.recreate === true ? '1' : '0';
    const sentAt = this.#marks.begin();
    const reply = await this.#write(() => `creating lease ${describeValue(leaseKey)} of group ${describeValue(group)}`, () =>
      this.#scripts.createLease(keys.leases, keys.tombstones, keys.incarnation, token, randomUUID(), leaseKey, String(state.epoch), encodeLeaseBody(state), recreate, keys.channel),
    );
    if (reply instanceof LeaseholdError) return result.unknown(reply);
    try {
      const [incarnation, status, value] = tuple(reply, 3, 'createLease');
      this.#marks.incarnation(group, sentAt, optionalString(incarnation, 'createLease'));
      if (status === 2) {
        decodeTombstone(group, leaseKey, value);
        throw new CorruptRecordError(`[${PKG}] stored tombstone of lease ${describeValue(leaseKey)} of group ${describeValue(group)} is corrupt: ${describeValue(value)}`, { group, leaseKey });
      }
      if (status === 3) {
        // The key was deleted: without recreate it stays so, and the tombstone says how far it had gone.
        const tombstone = decodeTombstone(group, leaseKey, value);
        this.#marks.absent(group, leaseKey, sentAt, tombstone);
        return result.conflict(null);
      }
      const stored = decodeStoredLease(group, leaseKey, value);
      this.#marks.lease(group, leaseKey, sentAt, stored.record.version, stored.record.epoch);
      // A conflict with this very call's token is the client resending the command after a reconnect.
      if (status === 1 || stored.token === token) return result.applied(stored.record);
      return result.conflict(stored.record);
    } catch (error) {
      return unknownOutcome(error);
    }
  }

  /** Every update of the batch in one script call (or one per `maxBatchSize` updates): one round trip. */
  async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    validateLeaseUpdates(group, updates, PKG);
    const keys = this.#keysOfValid(group);
    const results: WriteResult<LeaseRecord>[] = [];
    for (let start = 0; start < updates.length; start += this.#maxBatchSize) {
      const chunk = updates.length <= this.#maxBatchSize ? updates : updates.slice(start, start + this.#maxBatchSize);
      const outcome = await this.#updateChunk(group, keys, chunk);
      if (outcome instanceof LeaseholdError) {
        // The chunks after a failed one are not sent; core re-reads after an unknown either way.
        const unknown = result.unknown(outcome);
        for (let i = start; i < updates.length; i++) results.push(unknown);
        break;
      }
      results.push(...outcome);
    }
    return results;
  }

  async deleteLease(group: string, leaseKey: string, expectedVersion: number): Promise<DeleteResult> {
    const keys = this.#keys(group);
    validateLeaseKey(leaseKey, PKG);
    validateVersion(expectedVersion, PKG);
    const token = this.#token();
    const sentAt = this.#marks.begin();
    const reply = await this.#write(() => `deleting lease ${describeValue(leaseKey)} of group ${describeValue(group)}`, () =>
      this.#scripts.deleteLease(keys.leases, keys.tombstones, keys.incarnation, keys.epochs, token, leaseKey, String(expectedVersion)),
    );
    if (reply instanceof LeaseholdError) return result.unknown(reply);
    try {
      const [incarnation, status, value] = tuple(reply, 3, 'deleteLease');
      this.#marks.incarnation(group, sentAt, optionalString(incarnation, 'deleteLease'));
      if (status === 1) {
        this.#marks.deleted(group, leaseKey, expectedVersion);
        return { status: 'applied' };
      }
      if (status === 2) {
        const tombstone = decodeTombstone(group, leaseKey, value ?? null);
        if (tombstone?.token === token) return { status: 'applied' };
        this.#marks.absent(group, leaseKey, sentAt, tombstone);
        return result.conflict(null);
      }
      const { record } = decodeStoredLease(group, leaseKey, value);
      this.#marks.lease(group, leaseKey, sentAt, record.version, record.epoch);
      return result.conflict(record);
    } catch (error) {
      return unknownOutcome(error);
    }
  }

  /**
   * Calls `listener` when a lease of the group is created, released or handed over, through a pub/sub
   * connection of its own (a duplicate of the client, opened on first use and closed by `close()`).
   *
   * A handover that names its new owner is published on that owner's channel of the group, everything else
   * on the group's channel. Without `addressedTo` the subscription is on the group's channel and on a pattern
   * matching every owner's channel of the group; with it, on the group's channel and the channels of the
   * owners it names, so that the connection is never sent the handovers to anyone else. Channels and
   * patterns are shared by the client's subscriptions and each subscription is handed only what it asked
   * for, once.
   */
  async subscribe(group: string, listener: (change: LeaseChange) => void, options?: SubscribeOptions): Promise<ChangeSubscription> {
    const keys = this.#keys(group);
    if (typeof listener !== 'function') {
      throw new InvalidConfigError(`[${PKG}] listener must be a function, got ${describeValue(listener)}`);
    }
    validateSubscribeOptions(options, PKG);
    return this.#feed.subscribe(group, keys.channel, listener, options?.addressedTo);
  }

  async getLeader(group: string): Promise<LeaderRecord | null> {
    const keys = this.#keys(group);
    const sentAt = this.#marks.begin();
    const reply = await this.#read(() => `read the leader record of group ${describeValue(group)}`, () =>
      this.#scripts.getLeader(keys.leader, keys.incarnation),
    );
    const [incarnation, value] = tuple(reply, 2, 'getLeader');
    this.#marks.incarnation(group, sentAt, optionalString(incarnation, 'getLeader'));
    if (value === null) {
      this.#marks.leader(group, sentAt, null);
      return null;
    }
    const { record } = decodeStoredLeader(group, value);
    this.#marks.leader(group, sentAt, record);
    return record;
  }

  async createLeader(leader: NewLeader): Promise<WriteResult<LeaderRecord>> {
    const { group, state } = validateNewLeader(leader, PKG);
    const keys = this.#keysOfValid(group);
    const token = this.#token();
    const sentAt = this.#marks.begin();
    const reply = await this.#write(() => `creating the leader record of group ${describeValue(group)}`, () =>
      this.#scripts.createLeader(keys.leader, keys.incarnation, token, randomUUID(), encodeLeaderBody(state)),
    );
    if (reply instanceof LeaseholdError) return result.unknown(reply);
    try {
      const [incarnation, status, value] = tuple(reply, 3, 'createLeader');
      this.#marks.incarnation(group, sentAt, optionalString(incarnation, 'createLeader'));
      const stored = decodeStoredLeader(group, value);
      this.#marks.leader(group, sentAt, stored.record);
      if (status === 1 || stored.token === token) return result.applied(stored.record);
      return result.conflict(stored.record);
    } catch (error) {
      return unknownOutcome(error);
    }
  }

  async updateLeader(group: string, expectedVersion: number, next: LeaderState): Promise<WriteResult<LeaderRecord>> {
    const keys = this.#keys(group);
    validateVersion(expectedVersion, PKG);
    validateLeaderState(next, PKG);
    const token = this.#token();
    const version = expectedVersion + 1;
    const sentAt = this.#marks.begin();
    const reply = await this.#write(() => `updating the leader record of group ${describeValue(group)}`, () =>
      this.#scripts.updateLeader(keys.leader, keys.incarnation, token, String(expectedVersion), String(version), encodeLeaderBody(next)),
    );
    if (reply instanceof LeaseholdError) return result.unknown(reply);
    try {
      const [incarnation, status, value] = tuple(reply, 3, 'updateLeader');
      this.#marks.incarnation(group, sentAt, optionalString(incarnation, 'updateLeader'));
      if (status === 1) {
        const record: LeaderRecord = { group, version, ...leaderStateOf(next) };
        this.#marks.leader(group, sentAt, record, true);
        return result.applied(record);
      }
      if (status === 2) {
        this.#marks.leader(group, sentAt, null);
        return result.conflict(null);
      }
      const stored = decodeStoredLeader(group, value);
      this.#marks.leader(group, sentAt, stored.record);
      if (stored.token === token && stored.record.version === version) return result.applied(stored.record);
      return result.conflict(stored.record);
    } catch (error) {
      return unknownOutcome(error);
    }
  }

  /**
   * The group's roster in one command (`HGETALL` of one hash, inside a script) whatever its size. A member
   * whose value cannot be read back is listed in `corrupt`, by its worker id.
   */
  async getRoster(group: string): Promise<Roster> {
    const keys = this.#keys(group);
    const sentAt = this.#marks.begin();
    const reply = await this.#read(() => `read the roster of group ${describeValue(group)}`, () => this.#scripts.getRoster(keys.roster));
    const fields = array(reply, 'getRoster');
    let counter: unknown = null;
    const rows: Array<[string, unknown]> = [];
    for (let i = 0; i + 1 < fields.length; i += 2) {
      const field = String(fields[i]);
      if (field === COUNTER_FIELD) counter = fields[i + 1];
      else rows.push([field, fields[i + 1]]);
    }
    const roster = rosterOf(group, rows, ([workerId, value]) => decodeStoredMember(group, workerId, value).record);
    this.#markRosterCounter(group, sentAt, counter);
    return roster;
  }

  /**
   * The named members of the group in one command (`HMGET` of their fields and the counter, inside a
   * script), whatever the size of the roster. A member whose value cannot be read back is listed in
   * `corrupt`, by its worker id, as `getRoster` lists it.
   */
  async getMembers(group: string, workerIds: readonly string[]): Promise<Roster> {
    const keys = this.#keys(group);
    validateWorkerIds(workerIds, PKG);
    const unique = [...new Set(workerIds)];
    const sentAt = this.#marks.begin();
    const reply = await this.#read(() => `read ${unique.length} members of group ${describeValue(group)}`, () => this.#scripts.getMembers(keys.roster, ...unique));
    const [counter, ...values] = tuple(reply, unique.length + 1, 'getMembers');
    const rows = unique.flatMap((workerId, i): Array<[string, unknown]> => (values[i] === null ? [] : [[workerId, values[i]]]));
    const roster = rosterOf(group, rows, ([workerId, value]) => decodeStoredMember(group, workerId, value).record);
    this.#markRosterCounter(group, sentAt, counter);
    return roster;
  }

  /** The group's roster digest: one `GET` of its key (inside a script, so that it reaches the primary), 0 when there is none. */
  async getRosterDigest(group: string): Promise<number> {
    const keys = this.#keys(group);
    const sentAt = this.#marks.begin();
    const reply = await this.#read(() => `read the roster digest of group ${describeValue(group)}`, () => this.#scripts.getRosterDigest(keys.rosterDigest));
    const digest = decodeRosterDigest(group, reply);
    this.#marks.digest(group, sentAt, digest);
    return digest;
  }

  /**
   * Adds one to the group's roster digest and keeps the worker ids it names (for {@link getRosterMoves}) in
   * one script call: an `INCR` of the digest's key, which creates it at 1, and an `HSET` of the names under
   * the value written in the moves' hash, dropping the advance `limits.rosterMovesKept` before it. A
   * failure throws a `StorageOutcomeUnknownError`: the script may have run. A call the client resends after
   * a reconnect advances twice, which the contract allows.
   */
  async advanceRosterDigest(group: string, workerIds: readonly string[] = []): Promise<number> {
    const keys = this.#keys(group);
    validateWorkerIds(workerIds, PKG);
    const names = JSON.stringify([...new Set(workerIds)]);
    const sentAt = this.#marks.begin();
    const reply = await this.#write(
      () => `advancing the roster digest of group ${describeValue(group)}`,
      () => this.#scripts.advanceRosterDigest(keys.rosterDigest, keys.rosterMoves, names, limits.rosterMovesKept),
    );
    if (reply instanceof LeaseholdError) throw reply;
    if (typeof reply !== 'number' || !Number.isSafeInteger(reply) || reply < 1) {
      throw new StorageOutcomeUnknownError(`[${PKG}] the outcome of advancing the roster digest of group ${describeValue(group)} is unknown: the script answered ${describeValue(reply)}`);
    }
    this.#marks.digest(group, sentAt, reply, true);
    return reply;
  }

  /**
   * The group's roster digest with the names of the advances after `since`: one script call that `GET`s the
   * digest and `HMGET`s each advance's names from the moves' hash. An advance that left no names (one of an
   * earlier release of this package, which only `INCR`ed) reads as naming nobody.
   */
  async getRosterMoves(group: string, since: number): Promise<RosterMoves> {
    const keys = this.#keys(group);
    validateDigest(since, PKG);
    const sentAt = this.#marks.begin();
    const reply = await this.#read(
      () => `read the roster moves of group ${describeValue(group)}`,
      () => this.#scripts.getRosterMoves(keys.rosterDigest, keys.rosterMoves, since, limits.rosterMovesKept),
    );
    const moves = decodeRosterMoves(group, since, reply);
    this.#marks.digest(group, sentAt, moves.digest);
    return moves;
  }

  /**
   * Writes one member in one script call that reads and writes only its field and the group's counter:
   * the new version is one above the counter, so versions never repeat for a worker id.
   */
  async putMember(group: string, workerId: string, expectedVersion: number | null, next: MemberState): Promise<WriteResult<MemberRecord>> {
    validateMemberWrite(group, workerId, expectedVersion, next, PKG);
    const keys = this.#keysOfValid(group);
    const token = this.#token();
    const sentAt = this.#marks.begin();
    const reply = await this.#write(() => `writing member ${describeValue(workerId)} of group ${describeValue(group)}`, () =>
      this.#scripts.putMember(keys.roster, workerId, expectedVersion === null ? '' : String(expectedVersion), token, encodeMemberState(next)),
    );
    if (reply instanceof LeaseholdError) return result.unknown(reply);
    try {
      const [status, counter, value] = tuple(reply, 3, 'putMember');
      const high = decodeRosterCounter(group, counter);
      this.#marks.roster(group, sentAt, high?.high ?? null);
      if (status === 1 && high !== null) return result.applied({ group, workerId, version: high.high, ...memberStateOf(next) });
      if (status !== 0) throw new StorageSchemaError(`[${PKG}] script putMember answered ${describeValue(reply)}`);
      if (value === null) return result.conflict(null);
      const stored = decodeStoredMember(group, workerId, value);
      // A conflict with this very call's token is the client resending the command after a reconnect.
      if (stored.token === token) return result.applied(stored.record);
      return result.conflict(stored.record);
    } catch (error) {
      return unknownOutcome(error);
    }
  }

  async removeMember(group: string, workerId: string, expectedVersion: number): Promise<DeleteResult<MemberRecord>> {
    const keys = this.#keys(group);
    validateWorkerId(workerId, PKG);
    validateVersion(expectedVersion, PKG);
    const token = this.#token();
    const sentAt = this.#marks.begin();
    const reply = await this.#write(() => `removing member ${describeValue(workerId)} of group ${describeValue(group)}`, () =>
      this.#scripts.removeMember(keys.roster, workerId, String(expectedVersion), token),
    );
    if (reply instanceof LeaseholdError) return result.unknown(reply);
    try {
      const [status, counter, value] = tuple(reply, 3, 'removeMember');
      const high = decodeRosterCounter(group, counter);
      this.#marks.roster(group, sentAt, high?.high ?? null);
      if (status === 1) return { status: 'applied' };
      // No member: gone already, or removed by this very call, which the client resent after a reconnect.
      if (status === 2) return high?.removal === token ? { status: 'applied' } : result.conflict(null);
      if (status !== 0) throw new StorageSchemaError(`[${PKG}] script removeMember answered ${describeValue(reply)}`);
      return result.conflict(decodeStoredMember(group, workerId, value).record);
    } catch (error) {
      return unknownOutcome(error);
    }
  }

  /** Closes the adapter's own pub/sub connection, if it opened one. The caller's client stays open. */
  async close(): Promise<void> {
    await this.#feed.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  async #updateChunk(group: string, keys: GroupKeys, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[] | LeaseholdError> {
    const token = this.#token();
    const args: string[] = [keys.leases, keys.tombstones, keys.incarnation, keys.epochs, keys.channel, String(updates.length)];
    const changes: string[] = [];
    updates.forEach((update, i) => {
      args.push(update.leaseKey, String(update.expectedVersion), encodeLeaseValue(update.expectedVersion + 1, update.next, token));
      if (update.notify !== undefined) changes.push(String(i + 1), update.notify, addressedTo(update));
    });
    args.push(...changes);
    const sentAt = this.#marks.begin();
    const reply = await this.#write(() => `updating ${updates.length} leases of group ${describeValue(group)}`, () => this.#scripts.updateLeases(...args));
    if (reply instanceof LeaseholdError) return reply;
    let outcomes: unknown[];
    try {
      const [incarnation, ...rest] = tuple(reply, updates.length + 1, 'updateLeases');
      this.#marks.incarnation(group, sentAt, optionalString(incarnation, 'updateLeases'));
      outcomes = rest;
    } catch (error) {
      // A reply that cannot be taken as an answer (a reset group found, a reply of the wrong shape) makes
      // every update of the call unknown.
      if (error instanceof LeaseholdError) return error;
      throw error;
    }
    // Each result is read on its own: a corrupt record makes its own update unknown, never the batch's.
    return updates.map((update, i): WriteResult<LeaseRecord> => {
      const outcome = outcomes[i];
      const { leaseKey } = update;
      const version = update.expectedVersion + 1;
      try {
        if (outcome === 1) {
          // Identity first: leaseStateOf never returns it, and a spread placed last is cloned far faster
          // than properties added after one (this runs once per lease of every renewal).
          const record: LeaseRecord = { group, leaseKey, version, ...leaseStateOf(update.next) };
          this.#marks.lease(group, leaseKey, sentAt, version, record.epoch, true);
          return result.applied(record);
        }
        if (Array.isArray(outcome)) {
          this.#marks.absent(group, leaseKey, sentAt, decodeTombstone(group, leaseKey, outcome[0] ?? null));
          return result.conflict(null);
        }
        const stored = decodeStoredLease(group, leaseKey, outcome);
        this.#marks.lease(group, leaseKey, sentAt, stored.record.version, stored.record.epoch);
        if (stored.token === token && stored.record.version === version) return result.applied(stored.record);
        return result.conflict(stored.record);
      } catch (error) {
        return unknownOutcome(error);
      }
    });
  }

  /** Leases seen alive before a listing and missing from it must have been deleted: their tombstones say so. */
  async #checkVanished(group: string, keys: GroupKeys, sentAt: number, listed: ReadonlyMap<string, unknown>): Promise<void> {
    const missing = this.#marks.vanishedFrom(group, sentAt, listed);
    for (let start = 0; start < missing.length; start += TOMBSTONE_PAGE) {
      const page = missing.slice(start, start + TOMBSTONE_PAGE);
      const reply = await this.#read(() => `read tombstones of group ${describeValue(group)}`, () =>
        this.#scripts.getTombstones(keys.tombstones, keys.incarnation, ...page),
      );
      const [incarnation, ...tombstones] = tuple(reply, page.length + 1, 'getTombstones');
      this.#marks.incarnation(group, sentAt, optionalString(incarnation, 'getTombstones'));
      page.forEach((leaseKey, i) => this.#marks.absent(group, leaseKey, sentAt, decodeTombstone(group, leaseKey, tombstones[i] ?? null)));
    }
  }

  /** Checks the roster's counter as a read found it. One that cannot be read spoils no member; only the check that it never went back is skipped. */
  #markRosterCounter(group: string, sentAt: number, counter: unknown): void {
    let high: number | null;
    try {
      high = decodeRosterCounter(group, counter)?.high ?? null;
    } catch (error) {
      if (error instanceof CorruptRecordError) return;
      throw error;
    }
    this.#marks.roster(group, sentAt, high);
  }

  /** Validates the group, refuses it if a regression was found in it, and returns its keys. */
  #keys(group: string): GroupKeys {
    validateGroup(group, PKG);
    return this.#keysOfValid(group);
  }

  #keysOfValid(group: string): GroupKeys {
    this.#marks.assertHealthy(group);
    let keys = this.#keyCache.get(group);
    if (!keys) {
      // A worker uses a handful of groups; the bound only keeps an unusual caller from growing it forever.
      if (this.#keyCache.size >= KEY_CACHE_SIZE) this.#keyCache.clear();
      keys = groupKeys(this.#prefix, group);
      this.#keyCache.set(group, keys);
    }
    return keys;
  }

  #token(): string {
    this.#writes += 1;
    return `${this.#tokenPrefix}.${this.#writes.toString(36)}`;
  }

  async #read(what: () => string, send: () => Promise<unknown>): Promise<unknown> {
    try {
      return await send();
    } catch (error) {
      if (error instanceof LeaseholdError) throw error;
      throw new StorageUnavailableError(`[${PKG}] could not ${what()}: ${messageOf(error)}`, { cause: error });
    }
  }

  /**
   * Sends a write. Any failure is returned as an error meaning "outcome unknown": the client may have
   * sent the command before the connection failed, and a conditional write is never retried blindly.
   */
  async #write(what: () => string, send: () => Promise<unknown>): Promise<unknown> {
    try {
      return await send();
    } catch (error) {
      if (error instanceof LeaseholdError) return error;
      return new StorageOutcomeUnknownError(`[${PKG}] the outcome of ${what()} is unknown: ${messageOf(error)}`, { cause: error });
    }
  }
}

/**
 * The outcome of a write whose reply cannot be taken as an answer: `unknown`, carrying the error (a
 * record that cannot be read back, a regression found, a reply of the wrong shape), as the contract wants
 * for a write that may have reached the backend. Only a bug of the adapter's own is thrown.
 */
function unknownOutcome(error: unknown): Unknown {
  if (error instanceof LeaseholdError) return result.unknown(error);
  throw error;
}

/**
 * Refuses a client that would leave a call unanswered for ever: with `autoResendUnfulfilledCommands: false`,
 * ioredis drops the commands in flight when a connection drops, without failing them, unless
 * `maxRetriesPerRequest` is 0 (then it fails them at once). A write cut that way would never return, where
 * the contract wants `unknown`. A cluster's node connections take the same options from `redisOptions`.
 */
function refuseDroppingClient(client: Redis | Cluster): void {
  const settings: { autoResendUnfulfilledCommands?: boolean; maxRetriesPerRequest?: number | null } | undefined = client.isCluster
    ? (client as Cluster).options.redisOptions
    : (client as Redis).options;
  if (settings?.autoResendUnfulfilledCommands !== false || settings.maxRetriesPerRequest === 0) return;
  throw new InvalidConfigError(
    `[${PKG}] client has autoResendUnfulfilledCommands false and maxRetriesPerRequest ${describeValue(settings.maxRetriesPerRequest)}: ioredis then drops the commands in flight when a connection drops without answering them, so a write would never return; set maxRetriesPerRequest to 0 too (a cut call then fails, and a write is unknown), or leave autoResendUnfulfilledCommands on`,
  );
}

function positiveInteger(name: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) {
    throw new InvalidConfigError(`[${PKG}] ${name} must be a positive integer, got ${describeValue(value)}`);
  }
  return value;
}

/**
 * The owner whose channel an update's change goes out on, or '' for the group's channel: given for a
 * `handed-off` that names its new owner alone, the change a worker reads the lease for only when it is the
 * new owner. Every other change is for the whole group.
 */
function addressedTo(update: LeaseUpdate): string {
  return update.notify === 'handed-off' && typeof update.next.owner === 'string' ? update.next.owner : '';
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function array(value: unknown, script: string): unknown[] {
  if (!Array.isArray(value)) {
    throw new StorageSchemaError(`[${PKG}] script ${script} answered ${describeValue(value)}, not an array: is something else using these keys?`);
  }
  return value as unknown[];
}

/** The scripts whose reply leaves out trailing entries that do not apply to its status. */
const SHORT_REPLIES: ReadonlySet<string> = new Set(['deleteLease', 'updateLeader', 'putMember', 'removeMember']);

/** The reply of a script as an array of exactly `length` entries (Lua's `false` arrives as null). */
function tuple(value: unknown, length: number, script: string): unknown[] {
  const items = array(value, script);
  if (items.length > length || (items.length < length && !SHORT_REPLIES.has(script))) {
    throw new StorageSchemaError(`[${PKG}] script ${script} answered ${items.length} values, expected ${length}`);
  }
  return Array.from({ length }, (_, i) => items[i] ?? null);
}

function optionalString(value: unknown, script: string): string | null {
  if (value === null || typeof value === 'string') return value;
  throw new StorageSchemaError(`[${PKG}] script ${script} answered ${describeValue(value)} where a string was expected`);
}
