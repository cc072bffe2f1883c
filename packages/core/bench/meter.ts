/**
 * Bills a worker's storage calls as each backend would, by the size models of `billing.ts`: DynamoDB
 * request units and item bytes, and the bytes of stored JSON Redis and Postgres move. A `Ledger`, shared
 * by every worker of a cluster, knows the size of every record as last read or written (what an UpdateItem
 * is billed on before it applies) and what a roster Query and a lease listing bill as a whole; each
 * worker's `Usage` adds up what its own calls cost, by operation, by item and by partition key, so that
 * the hottest item and the hottest partition key of the group can be found.
 *
 * A roster read and a listing are billed from the ledger's running totals when they return as many
 * records as the ledger knows (every write goes through a meter, so the ledger follows the store): a
 * read of 1,000 members then costs the bench nothing per member. A read that returns another count (a
 * member joined or left in between) is billed member by member. A watcher's read of its few members
 * (`getMembers`) and the roster digest's reads and advances are billed item by item.
 */
import type { DeleteResult, LeaseRecord, MemberRecord, WriteResult } from '../src/index.js';
import {
  DIGEST_POSTGRES_BYTES,
  DIGEST_SORT_KEY,
  digestItemBytes,
  MOVE_SLOTS,
  moveSlotBytes,
  movesKey,
  digestKey,
  digestRedisBytes,
  leaseItemBytes,
  leaseJsonBytes,
  memberItemBytes,
  memberJsonBytes,
  memberTombstoneBytes,
  pagedReadUnits,
  readUnits,
  utf8Bytes,
  writeUnits,
} from './billing.js';
import { byUtf8, MEMBER_SORT_PREFIX, membersKey, rosterQuery, singleMembersKey, type RosterQuery } from './roster-size.js';

export type Backend = 'dynamodb' | 'redis' | 'postgres';
export const BACKENDS: readonly Backend[] = ['dynamodb', 'redis', 'postgres'];

/** The sort key of the item the DynamoDB adapter reads on a join to find an earlier release's roster. */
export const OLD_ROSTER_SORT_KEY = 'roster';
/**
 * What the group's first join writes to mark that item (the earlier release's roster item holding the
 * marker member alone, well under 1 KB): 1 write unit. Every later join finds it marked and only reads it.
 */
const MARKING_WRITE_UNITS = 1;
/**
 * What a join's Query of the members' key of the release before bills (`<group>#members`: the marker and
 * any members of that release, under 4 KB): 1 read unit. The group's first join puts the marker there (1
 * write unit, the same small item) and queries the key again.
 */
const OLD_KEY_QUERY_UNITS = 1;
/** The marker's worker id under that key, as the DynamoDB adapter writes it. */
const OLD_KEY_MARKER_WORKER_ID = '(leasehold) members moved to four keys: upgrade';

/** What a kind of call cost: DynamoDB request units, and bytes read and written per backend. */
export interface OpUsage {
  calls: number;
  rru: number;
  wru: number;
  read: Record<Backend, number>;
  written: Record<Backend, number>;
}

/**
 * The load on one DynamoDB item or partition key: writes, reads (GetItems and Queries, each one request)
 * and their units. `queries` counts the reads that were Queries: a Query of a partition key reads every
 * item under it.
 */
export interface Load {
  writes: number;
  wru: number;
  reads: number;
  rru: number;
  queries: number;
}

/** An item's load, and the partition key it lives under. */
export interface ItemLoad extends Load {
  partition: string;
}

export interface Usage {
  /** By storage method. */
  byOp: Record<string, OpUsage>;
  /**
   * By item's sort key (`member:<workerId>`, `lease:<leaseKey>`, `roster`, `digest`): the writes and the
   * GetItems of that one item (a BatchGetItem's reads each count as one). The Queries that read it are
   * counted on its partition key.
   */
  byItem: Map<string, ItemLoad>;
  /**
   * By partition key (`<group>#members`, `<group>#digest`, `<group>`): every request on it, each item of a
   * BatchGetItem as one read.
   */
  byPartition: Map<string, Load>;
}

const zeroBytes = (): Record<Backend, number> => ({ dynamodb: 0, redis: 0, postgres: 0 });
const zeroLoad = (): Load => ({ writes: 0, wru: 0, reads: 0, rru: 0, queries: 0 });

export function emptyUsage(): Usage {
  return { byOp: {}, byItem: new Map(), byPartition: new Map() };
}

export function emptyOpUsage(): OpUsage {
  return { calls: 0, rru: 0, wru: 0, read: zeroBytes(), written: zeroBytes() };
}

export function addOpUsage(into: OpUsage, from: OpUsage): OpUsage {
  into.calls += from.calls;
  into.rru += from.rru;
  into.wru += from.wru;
  for (const backend of BACKENDS) {
    into.read[backend] += from.read[backend];
    into.written[backend] += from.written[backend];
  }
  return into;
}

function addLoad<T extends Load>(into: T, from: Load): T {
  into.writes += from.writes;
  into.wru += from.wru;
  into.reads += from.reads;
  into.rru += from.rru;
  into.queries += from.queries;
  return into;
}

/** The sum over operations of one worker's usage. */
export function totalOf(usage: Usage): OpUsage {
  return Object.values(usage.byOp).reduce(addOpUsage, emptyOpUsage());
}

/** Every worker's usage added together, items and partition keys merged by name. */
export function addUsage(into: Usage, from: Usage): Usage {
  for (const [name, op] of Object.entries(from.byOp)) into.byOp[name] = addOpUsage(into.byOp[name] ?? emptyOpUsage(), op);
  for (const [name, load] of from.byItem) into.byItem.set(name, addLoad(into.byItem.get(name) ?? { ...zeroLoad(), partition: load.partition }, load));
  for (const [name, load] of from.byPartition) into.byPartition.set(name, addLoad(into.byPartition.get(name) ?? zeroLoad(), load));
  return into;
}

/** The item with the most requests, and what they cost. */
export interface HotItem {
  item: string;
  partition: string;
  writes: number;
  wru: number;
  /** Its GetItems (BatchGetItems' reads included) and the Queries of its partition key, which read it too. */
  reads: number;
  /**
   * Read units: its GetItems' own, and one for each Query that read it (every item the bench's Queries read
   * is under 4 KB: an upper bound on its share of the Query's units).
   */
  rru: number;
}

/**
 * The item with the most requests a second: its own writes and GetItems, plus every Query of its partition
 * key (a Query reads every item under the key; in a steady window every member item exists throughout).
 */
export function hottestItem(usage: Usage): HotItem | undefined {
  let hottest: HotItem | undefined;
  for (const [item, load] of usage.byItem) {
    const queries = usage.byPartition.get(load.partition)?.queries ?? 0;
    const reads = load.reads + queries;
    if (hottest === undefined || load.writes + reads > hottest.writes + hottest.reads) hottest = { item, partition: load.partition, writes: load.writes, wru: load.wru, reads, rru: load.rru + queries };
  }
  return hottest;
}

/** The item written most often: the write side's hot spot (the item with the most requests may be one only read). */
export function mostWrittenItem(usage: Usage): HotItem | undefined {
  let hottest: HotItem | undefined;
  for (const [item, load] of usage.byItem) {
    if (hottest === undefined || load.writes > hottest.writes) {
      const queries = usage.byPartition.get(load.partition)?.queries ?? 0;
      hottest = { item, partition: load.partition, writes: load.writes, wru: load.wru, reads: load.reads + queries, rru: load.rru + queries };
    }
  }
  return hottest;
}

/** What DynamoDB serves from one partition a second: 1,000 write units and 3,000 read units. */
export const PARTITION_WCU = 1_000;
export const PARTITION_RCU = 3_000;

/** The share of one partition's limits a load a second takes: the larger of WCU/s / 1,000 and RCU/s / 3,000. */
export const partitionShare = (wcuPerSecond: number, rcuPerSecond: number): number => Math.max(wcuPerSecond / PARTITION_WCU, rcuPerSecond / PARTITION_RCU);

/** The partition key nearest its limits: the largest share of 1,000 WCU/s or 3,000 RCU/s, over `seconds`. */
export function hottestPartition(usage: Usage, seconds: number): { partition: string; load: Load; share: number } | undefined {
  let hottest: { partition: string; load: Load; share: number } | undefined;
  for (const [partition, load] of usage.byPartition) {
    const share = partitionShare(load.wru / seconds, load.rru / seconds);
    if (hottest === undefined || share > hottest.share) hottest = { partition, load, share };
  }
  return hottest;
}

interface Sized {
  version: number;
  dynamodb: number;
  json: number;
}

interface MemberSized extends Sized {
  /** A removed member's item is a tombstone: still read (and billed) by every roster Query. */
  removed: boolean;
}

/** The sizes of a group's records as last seen by any worker: one per cluster. */
export class Ledger {
  readonly group: string;
  readonly #members = new Map<string, MemberSized>();
  /** The worker ids in sort key order; null when a new one must be placed. */
  #memberOrder: string[] | null = null;
  #liveMembers = 0;
  #liveJson = 0;
  /** What a roster read bills, while no member item changed size; null when it must be computed again. */
  #query: RosterQuery | null = null;
  readonly #leases = new Map<string, Sized>();
  /** The lease keys in sort key order; null when a new one must be placed. */
  #leaseOrder: string[] | null = null;
  /** What a listing of every lease bills, while no lease changed size; null when it must be computed again. */
  #listing: { dynamodb: number; json: number; units: number } | null = null;

  constructor(group: string) {
    this.group = group;
  }

  /** The partition key of a member's item: its bucket's. */
  membersKey(workerId: string): string {
    return membersKey(this.group, workerId);
  }

  /** Live members the ledger knows. */
  get liveMembers(): number {
    return this.#liveMembers;
  }

  /** A roster read of every member item the ledger knows (tombstones included): its bytes and read units, by bucket too. */
  rosterQuery(): RosterQuery {
    this.#query ??= this.queryOf(() => true);
    return this.#query;
  }

  /**
   * A roster read of the member items `read` (known to the ledger) and every tombstone: what a read
   * billed that returned other members than the ledger knows.
   */
  queryOf(read: (workerId: string) => boolean): RosterQuery {
    this.#memberOrder ??= byUtf8(this.#members.keys(), (workerId) => workerId);
    const items: { workerId: string; bytes: number }[] = [];
    for (const workerId of this.#memberOrder) {
      const sized = this.#members.get(workerId)!;
      if (sized.removed || read(workerId)) items.push({ workerId, bytes: sized.dynamodb });
    }
    return rosterQuery(this.group, items, true);
  }

  /** The bytes of every live member's worker id and state JSON: a roster read on Redis and on Postgres. */
  rosterJson(): number {
    return this.#liveJson;
  }

  /** A member's sizes, computed once per version. */
  member(record: MemberRecord): MemberSized {
    const known = this.#members.get(record.workerId);
    if (known?.version === record.version && !known.removed) return known;
    const sized = { version: record.version, dynamodb: memberItemBytes(record), json: memberJsonBytes(record), removed: false };
    this.#set(record.workerId, known, sized);
    return sized;
  }

  /** The size last known of a member's item (a tombstone's too), if any worker read or wrote it. */
  knownMember(workerId: string): MemberSized | undefined {
    return this.#members.get(workerId);
  }

  /** Whether a join marked the earlier release's roster item of the group (the first join does). */
  oldRosterMarked = false;
  /** Whether a join put the marker under the members' key of the release before (the first join does). */
  oldKeyMarked = false;

  /** A member removed at `version`: its item becomes a tombstone that keeps the version. */
  removeMember(workerId: string, version: number): MemberSized {
    const sized = { version, dynamodb: memberTombstoneBytes(this.group, workerId, version), json: 0, removed: true };
    this.#set(workerId, this.#members.get(workerId), sized);
    return sized;
  }

  #set(workerId: string, known: MemberSized | undefined, sized: MemberSized): void {
    if (known === undefined) this.#memberOrder = null;
    else if (!known.removed) {
      this.#liveMembers--;
      this.#liveJson -= known.json;
    }
    if (!sized.removed) {
      this.#liveMembers++;
      this.#liveJson += sized.json;
    }
    if (known?.dynamodb !== sized.dynamodb) this.#query = null;
    this.#members.set(workerId, sized);
  }

  /** Leases the ledger knows. */
  get leases(): number {
    return this.#leases.size;
  }

  /** A listing of every lease the ledger knows, in key order: its bytes on each backend and its read units. */
  listing(): { dynamodb: number; json: number; units: number } {
    if (this.#listing === null) {
      this.#leaseOrder ??= byUtf8(this.#leases.keys(), (leaseKey) => leaseKey);
      const sizes: number[] = [];
      let dynamodb = 0;
      let json = 0;
      for (const leaseKey of this.#leaseOrder) {
        const sized = this.#leases.get(leaseKey)!;
        sizes.push(sized.dynamodb);
        dynamodb += sized.dynamodb;
        json += sized.json;
      }
      this.#listing = { dynamodb, json, units: pagedReadUnits(sizes) };
    }
    return this.#listing;
  }

  /** A lease's sizes, computed once per version. */
  lease(record: LeaseRecord): Sized {
    const known = this.#leases.get(record.leaseKey);
    if (known?.version === record.version) return known;
    const sized = { version: record.version, dynamodb: leaseItemBytes(record), json: leaseJsonBytes(record) };
    if (known === undefined) this.#leaseOrder = null;
    if (known?.dynamodb !== sized.dynamodb || known.json !== sized.json) this.#listing = null;
    this.#leases.set(record.leaseKey, sized);
    return sized;
  }

  /** The size last known of a lease's item, if any worker read or wrote it. */
  knownLease(leaseKey: string): Sized | undefined {
    return this.#leases.get(leaseKey);
  }

  forgetLease(leaseKey: string): void {
    if (!this.#leases.delete(leaseKey)) return;
    this.#leaseOrder = null;
    this.#listing = null;
  }
}

/** Bills one worker's calls into its `Usage`. */
export class Meter {
  usage = emptyUsage();
  /** The read units of this worker's last whole roster read, as DynamoDB billed its Queries; none before one. */
  lastRosterUnits: number | undefined;
  readonly ledger: Ledger;

  constructor(ledger: Ledger) {
    this.ledger = ledger;
  }

  #op(name: string): OpUsage {
    let op = this.usage.byOp[name];
    if (op === undefined) this.usage.byOp[name] = op = emptyOpUsage();
    op.calls++;
    return op;
  }

  #partition(name: string): Load {
    let load = this.usage.byPartition.get(name);
    if (load === undefined) this.usage.byPartition.set(name, (load = zeroLoad()));
    return load;
  }

  /** One write of one item: counted on the item and on its partition key. */
  #itemWrite(partition: string, item: string, units: number): void {
    let load = this.usage.byItem.get(item);
    if (load === undefined) this.usage.byItem.set(item, (load = { ...zeroLoad(), partition }));
    load.writes++;
    load.wru += units;
    const key = this.#partition(partition);
    key.writes++;
    key.wru += units;
  }

  /** One GetItem of one item: counted on the item and on its partition key. */
  #itemRead(partition: string, item: string, units: number): void {
    let load = this.usage.byItem.get(item);
    if (load === undefined) this.usage.byItem.set(item, (load = { ...zeroLoad(), partition }));
    load.reads++;
    load.rru += units;
    const key = this.#partition(partition);
    key.reads++;
    key.rru += units;
  }

  /** One Query of a partition key: one request on the key, billed its units. */
  #query(partition: string, units: number): void {
    const key = this.#partition(partition);
    key.reads++;
    key.queries++;
    key.rru += units;
  }

  /**
   * A strongly consistent Query of each bucket's partition key, tombstones included; Redis reads every
   * field of the roster hash, Postgres every live row of the members table.
   */
  getRoster(members: readonly MemberRecord[]): void {
    const op = this.#op('getRoster');
    let query: RosterQuery;
    let json: number;
    if (members.length === this.ledger.liveMembers) {
      query = this.ledger.rosterQuery();
      json = this.ledger.rosterJson();
    } else {
      // The read and the ledger disagree on who is a member (one joined or left meanwhile): bill what this
      // read returned, and the tombstones the ledger knows.
      const read = new Set<string>();
      json = 0;
      for (const member of members) {
        json += this.ledger.member(member).json;
        read.add(member.workerId);
      }
      query = this.ledger.queryOf((workerId) => read.has(workerId));
    }
    this.lastRosterUnits = query.units;
    op.rru += query.units;
    op.read.dynamodb += query.bytes;
    op.read.redis += json;
    op.read.postgres += json;
    for (const [key, units] of query.byKey) this.#query(key, units);
  }

  /**
   * An UpdateItem of the member's own item, billed on the larger of the item before and after (a write
   * whose condition failed, on the item it found); Redis writes the member's hash field and Postgres its
   * row: its worker id and state JSON. A join (no expected version) first reads the earlier release's
   * roster item under the group's key (a strongly consistent GetItem of a small item, 1 unit), and the
   * group's first join marks it (an UpdateItem, 1 unit); then it queries the members' key of the release
   * before (1 unit), and the group's first join puts the marker there (a PutItem, 1 unit) and queries it
   * again, as the DynamoDB adapter does.
   */
  putMember(workerId: string, expectedVersion: number | null, outcome: WriteResult<MemberRecord>): void {
    const op = this.#op('putMember');
    if (outcome.status === 'conflict' && outcome.current !== null) this.ledger.member(outcome.current);
    const before = this.ledger.knownMember(workerId);
    const after = outcome.status === 'applied' ? this.ledger.member(outcome.record) : undefined;
    const billed = Math.max(before?.dynamodb ?? 0, after?.dynamodb ?? 0);
    const units = Math.max(1, writeUnits(billed));
    op.wru += units;
    op.written.dynamodb += billed;
    op.written.redis += after?.json ?? 0;
    op.written.postgres += after?.json ?? 0;
    this.#itemWrite(this.ledger.membersKey(workerId), `${MEMBER_SORT_PREFIX}${workerId}`, units);
    if (expectedVersion === null) {
      op.rru += 1;
      this.#itemRead(this.ledger.group, OLD_ROSTER_SORT_KEY, 1);
      if (!this.ledger.oldRosterMarked) {
        this.ledger.oldRosterMarked = true;
        op.wru += MARKING_WRITE_UNITS;
        this.#itemWrite(this.ledger.group, OLD_ROSTER_SORT_KEY, MARKING_WRITE_UNITS);
      }
      const oldKey = singleMembersKey(this.ledger.group);
      op.rru += OLD_KEY_QUERY_UNITS;
      this.#query(oldKey, OLD_KEY_QUERY_UNITS);
      if (!this.ledger.oldKeyMarked) {
        this.ledger.oldKeyMarked = true;
        op.wru += MARKING_WRITE_UNITS;
        op.rru += OLD_KEY_QUERY_UNITS;
        this.#itemWrite(oldKey, `${MEMBER_SORT_PREFIX}${OLD_KEY_MARKER_WORKER_ID}`, MARKING_WRITE_UNITS);
        this.#query(oldKey, OLD_KEY_QUERY_UNITS);
      }
    }
  }

  /**
   * An UpdateItem that turns the member's item into a tombstone (keeping `expectedVersion`), billed on the
   * larger of the item before and after;
   * Redis deletes the hash field and Postgres marks the row, both naming the worker id.
   */
  removeMember(workerId: string, expectedVersion: number, outcome: DeleteResult<MemberRecord>): void {
    const op = this.#op('removeMember');
    if (outcome.status === 'conflict' && outcome.current !== null) this.ledger.member(outcome.current);
    const before = this.ledger.knownMember(workerId);
    const after = outcome.status === 'applied' ? this.ledger.removeMember(workerId, expectedVersion) : undefined;
    const billed = Math.max(before?.dynamodb ?? 0, after?.dynamodb ?? 0);
    const units = Math.max(1, writeUnits(billed));
    op.wru += units;
    op.written.dynamodb += billed;
    if (outcome.status === 'applied') {
      op.written.redis += utf8Bytes(workerId);
      op.written.postgres += utf8Bytes(workerId);
    }
    this.#itemWrite(this.ledger.membersKey(workerId), `${MEMBER_SORT_PREFIX}${workerId}`, units);
  }

  /**
   * A watcher's read of the members `workerIds` names: one BatchGetItem of strongly consistent reads, each
   * item billed as a GetItem of its own (at least 1 unit, a tombstone on its size, an id with no item 1);
   * Redis reads the named fields of the roster hash (`HMGET`), Postgres the named rows.
   */
  getMembers(workerIds: readonly string[], members: readonly MemberRecord[]): void {
    const op = this.#op('getMembers');
    const read = new Map(members.map((member) => [member.workerId, member]));
    for (const workerId of new Set(workerIds)) {
      const member = read.get(workerId);
      const sized = member === undefined ? this.ledger.knownMember(workerId) : this.ledger.member(member);
      const units = Math.max(1, readUnits(sized?.dynamodb ?? 0));
      op.rru += units;
      op.read.dynamodb += sized?.dynamodb ?? 0;
      if (member !== undefined) {
        op.read.redis += sized!.json;
        op.read.postgres += sized!.json;
      }
      this.#itemRead(this.ledger.membersKey(workerId), `${MEMBER_SORT_PREFIX}${workerId}`, units);
    }
  }

  /**
   * A strongly consistent GetItem of the digest item (1 unit, also when the group has none: digest 0);
   * Redis `GET`s its key, Postgres reads its row.
   */
  getRosterDigest(digest: number): void {
    const op = this.#op('getRosterDigest');
    const bytes = digest === 0 ? 0 : digestItemBytes(this.ledger.group, digest);
    const units = Math.max(1, readUnits(bytes));
    op.rru += units;
    op.read.dynamodb += bytes;
    op.read.redis += digest === 0 ? 0 : digestRedisBytes(this.ledger.group, digest);
    op.read.postgres += digest === 0 ? 0 : DIGEST_POSTGRES_BYTES;
    this.#itemRead(digestKey(this.ledger.group), DIGEST_SORT_KEY, units);
  }

  /**
   * The digest with the names of the advances after `since` (`getRosterMoves`): Redis and Postgres read the
   * digest and the kept names in the same call (the digest's bytes and each name's). The DynamoDB adapter has
   * no `getRosterMoves`; billed as the design that was measured and not kept (commit 928873b; README, "Moves
   * read by name on DynamoDB"): the digest item, then, when the digest moved by at most the 256 advances its
   * ring of slots keeps, one Query of their slots billed by their bytes, rounded up to 4 KB (two Queries
   * where the range wraps past slot 255).
   */
  getRosterMoves(digest: number, since: number, moved: readonly string[] | null): void {
    this.getRosterDigest(digest);
    const op = this.#op('getRosterMoves');
    const names = (moved ?? []).reduce((sum, workerId) => sum + Buffer.byteLength(workerId, 'utf8'), 0);
    op.read.redis += names;
    op.read.postgres += names;
    const advances = digest - since;
    if (advances <= 0 || advances > MOVE_SLOTS) return;
    // Each name is a string of a list: its bytes and one more.
    const bytes = advances * moveSlotBytes(this.ledger.group, digest, []) + names + (moved?.length ?? 0);
    const queries = (since + 1) % MOVE_SLOTS <= digest % MOVE_SLOTS ? 1 : 2;
    const units = Math.max(queries, readUnits(bytes));
    op.rru += units;
    op.read.dynamodb += bytes;
    this.#query(movesKey(this.ledger.group), units - (queries - 1));
    if (queries === 2) this.#query(movesKey(this.ledger.group), 1);
  }

  /**
   * An UpdateItem that adds one to the digest item (`digest` is the value it wrote), billed on the larger
   * of the item before and after; Redis `INCR`s its key, Postgres updates its row. With `named` (a store
   * that keeps the moves), DynamoDB also puts the advance's slot.
   */
  advanceRosterDigest(digest: number, named?: readonly string[]): void {
    const op = this.#op('advanceRosterDigest');
    const billed = digestItemBytes(this.ledger.group, digest);
    const units = Math.max(1, writeUnits(Math.max(billed, digestItemBytes(this.ledger.group, digest - 1))));
    op.wru += units;
    op.written.dynamodb += billed;
    op.written.redis += digestRedisBytes(this.ledger.group, digest);
    op.written.postgres += DIGEST_POSTGRES_BYTES;
    this.#itemWrite(digestKey(this.ledger.group), DIGEST_SORT_KEY, units);
    if (named === undefined || named.length === 0) return;
    const slot = moveSlotBytes(this.ledger.group, digest, [...new Set(named)]);
    const slotUnits = Math.max(1, writeUnits(slot));
    op.wru += slotUnits;
    op.written.dynamodb += slot;
    this.#itemWrite(movesKey(this.ledger.group), `move:${digest % MOVE_SLOTS}`, slotUnits);
  }

  /** A Query of the group's lease items, billed per page; Redis and Postgres read every lease's JSON. */
  listLeases(leases: readonly LeaseRecord[]): void {
    const op = this.#op('listLeases');
    // Every listing returns the group's every lease: the ledger's totals serve once it knows them all.
    if (leases.length !== this.ledger.leases) for (const lease of leases) this.ledger.lease(lease);
    let listing: { dynamodb: number; json: number; units: number };
    if (leases.length === this.ledger.leases) {
      listing = this.ledger.listing();
    } else {
      const sizes = leases.map((lease) => this.ledger.lease(lease));
      listing = { dynamodb: 0, json: 0, units: pagedReadUnits(sizes.map((sized) => sized.dynamodb)) };
      for (const sized of sizes) {
        listing.dynamodb += sized.dynamodb;
        listing.json += sized.json;
      }
    }
    op.rru += listing.units;
    op.read.dynamodb += listing.dynamodb;
    op.read.redis += listing.json;
    op.read.postgres += listing.json;
    this.#query(this.ledger.group, listing.units);
  }

  /** A GetItem of one lease item: at least one read unit, also when there is no item. */
  getLease(leaseKey: string, lease: LeaseRecord | null): void {
    this.#leaseRead(this.#op('getLease'), leaseKey, lease);
  }

  /** A BatchGetItem of lease items: one call, each item billed as its GetItem would be. */
  getLeases(reads: ReadonlyArray<readonly [leaseKey: string, lease: LeaseRecord | null]>): void {
    const op = this.#op('getLeases');
    for (const [leaseKey, lease] of reads) this.#leaseRead(op, leaseKey, lease);
  }

  #leaseRead(op: OpUsage, leaseKey: string, lease: LeaseRecord | null): void {
    const sized = lease === null ? undefined : this.ledger.lease(lease);
    const units = Math.max(1, readUnits(sized?.dynamodb ?? 0));
    op.rru += units;
    op.read.dynamodb += sized?.dynamodb ?? 0;
    op.read.redis += sized?.json ?? 0;
    op.read.postgres += sized?.json ?? 0;
    this.#itemRead(this.ledger.group, `lease:${leaseKey}`, units);
  }

  /**
   * A write of one lease item (PutItem or UpdateItem), billed on the larger of the item before and after;
   * one whose condition failed, on the item it found. `count` false for the items of an updateLeases
   * batch, whose call is counted once by `updateLeasesCall`.
   */
  leaseWrite(name: string, leaseKey: string, outcome: WriteResult<LeaseRecord> | DeleteResult, count = true): void {
    const op = count ? this.#op(name) : (this.usage.byOp[name] ??= emptyOpUsage());
    if (outcome.status === 'conflict' && outcome.current !== null) this.ledger.lease(outcome.current);
    const before = this.ledger.knownLease(leaseKey);
    let after: Sized | undefined;
    if (outcome.status === 'applied') {
      if ('record' in outcome) after = this.ledger.lease(outcome.record);
      else this.ledger.forgetLease(leaseKey);
    }
    const billed = Math.max(before?.dynamodb ?? 0, after?.dynamodb ?? 0);
    const units = Math.max(1, writeUnits(billed));
    op.wru += units;
    op.written.dynamodb += billed;
    op.written.redis += after?.json ?? 0;
    op.written.postgres += after?.json ?? 0;
    this.#itemWrite(this.ledger.group, `lease:${leaseKey}`, units);
  }

  /** One updateLeases call: a call, then a write per lease (the DynamoDB adapter sends one UpdateItem each). */
  updateLeasesCall(): void {
    this.#op('updateLeases');
  }
}
