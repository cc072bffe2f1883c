/**
 * Bills a worker's storage calls as each backend would, by the size models of `billing.ts`: DynamoDB
 * request units and item bytes, and the bytes of stored JSON Redis and Postgres move. A `Ledger`, shared
 * by every worker of a cluster, knows the size of every record as last read or written (what an UpdateItem
 * is billed on before it applies); each worker's `Usage` adds up what its own calls cost, by operation and
 * by item, so that the hottest item of the group can be found.
 */
import type { DeleteResult, LeaseRecord, MemberRecord, WriteResult } from '../src/index.js';
import { leaseItemBytes, leaseJsonBytes, memberDocumentEntryBytes, memberEntryBytes, memberJsonBytes, pagedReadUnits, readUnits, writeUnits } from './billing.js';
import { rosterBaseBytes } from './roster-size.js';

export type Backend = 'dynamodb' | 'redis' | 'postgres';
export const BACKENDS: readonly Backend[] = ['dynamodb', 'redis', 'postgres'];

/** What a kind of call cost: DynamoDB request units, and bytes read and written per backend. */
export interface OpUsage {
  calls: number;
  rru: number;
  wru: number;
  read: Record<Backend, number>;
  written: Record<Backend, number>;
}

/** One item's (or key's) load: writes, strongly consistent reads, and their DynamoDB units. */
export interface ItemLoad {
  writes: number;
  wru: number;
  reads: number;
  rru: number;
}

export interface Usage {
  /** By storage method. */
  byOp: Record<string, OpUsage>;
  /** By item: `roster`, or `lease:<leaseKey>` for the leases read or written one at a time (a listing is billed per page, not per item). */
  byItem: Map<string, ItemLoad>;
}

const zeroBytes = (): Record<Backend, number> => ({ dynamodb: 0, redis: 0, postgres: 0 });

export function emptyUsage(): Usage {
  return { byOp: {}, byItem: new Map() };
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

/** The sum over operations of one worker's usage. */
export function totalOf(usage: Usage): OpUsage {
  return Object.values(usage.byOp).reduce(addOpUsage, emptyOpUsage());
}

/** Every worker's usage added together, items merged by name. */
export function addUsage(into: Usage, from: Usage): Usage {
  for (const [name, op] of Object.entries(from.byOp)) into.byOp[name] = addOpUsage(into.byOp[name] ?? emptyOpUsage(), op);
  for (const [name, load] of from.byItem) {
    const sum = into.byItem.get(name) ?? { writes: 0, wru: 0, reads: 0, rru: 0 };
    sum.writes += load.writes;
    sum.wru += load.wru;
    sum.reads += load.reads;
    sum.rru += load.rru;
    into.byItem.set(name, sum);
  }
  return into;
}

interface Sized {
  version: number;
  dynamodb: number;
  json: number;
  document: number;
}

/** The sizes of a group's records as last seen by any worker: one per cluster. */
export class Ledger {
  readonly #group: string;
  readonly #members = new Map<string, Sized>();
  readonly #leases = new Map<string, Sized>();
  #highVersion = 0;
  #rosterEntries = 0;
  #documentEntries = 0;

  constructor(group: string) {
    this.#group = group;
  }

  /** The roster item's DynamoDB size, and the Postgres roster document's bytes, as the ledger knows them. */
  roster(): { dynamodb: number; document: number } {
    return { dynamodb: rosterBaseBytes(this.#group, this.#highVersion) + this.#rosterEntries, document: 2 + this.#documentEntries };
  }

  /** A member's sizes, computed once per version. */
  member(record: MemberRecord): Sized {
    const known = this.#members.get(record.workerId);
    if (known?.version === record.version) return known;
    const sized = { version: record.version, dynamodb: memberEntryBytes(record), json: memberJsonBytes(record), document: memberDocumentEntryBytes(record) };
    this.#rosterEntries += sized.dynamodb - (known?.dynamodb ?? 0);
    this.#documentEntries += sized.document - (known?.document ?? 0);
    this.#highVersion = Math.max(this.#highVersion, record.version);
    this.#members.set(record.workerId, sized);
    return sized;
  }

  removeMember(workerId: string): void {
    const known = this.#members.get(workerId);
    if (known === undefined) return;
    this.#rosterEntries -= known.dynamodb;
    this.#documentEntries -= known.document;
    this.#members.delete(workerId);
  }

  /** A lease's sizes, computed once per version. */
  lease(record: LeaseRecord): Sized {
    const known = this.#leases.get(record.leaseKey);
    if (known?.version === record.version) return known;
    const sized = { version: record.version, dynamodb: leaseItemBytes(record), json: leaseJsonBytes(record), document: 0 };
    this.#leases.set(record.leaseKey, sized);
    return sized;
  }

  /** The size last known of a lease's item, if any worker read or wrote it. */
  knownLease(leaseKey: string): Sized | undefined {
    return this.#leases.get(leaseKey);
  }

  forgetLease(leaseKey: string): void {
    this.#leases.delete(leaseKey);
  }
}

/** Bills one worker's calls into its `Usage`. */
export class Meter {
  usage = emptyUsage();
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

  #item(name: string): ItemLoad {
    let load = this.usage.byItem.get(name);
    if (load === undefined) this.usage.byItem.set(name, (load = { writes: 0, wru: 0, reads: 0, rru: 0 }));
    return load;
  }

  /** A GetItem of the roster item; Redis reads every field of the roster hash, Postgres the roster row's document. */
  getRoster(members: readonly MemberRecord[]): void {
    const op = this.#op('getRoster');
    let json = 0;
    for (const member of members) json += this.ledger.member(member).json;
    const { dynamodb, document } = this.ledger.roster();
    const units = readUnits(dynamodb);
    op.rru += units;
    op.read.dynamodb += dynamodb;
    op.read.redis += json;
    op.read.postgres += document;
    const load = this.#item('roster');
    load.reads++;
    load.rru += units;
  }

  /**
   * An UpdateItem of the roster item, billed on the larger of the item before and after (a write whose
   * condition failed, on the item as it was); Redis writes the member's field, Postgres the whole row.
   */
  putMember(outcome: WriteResult<MemberRecord>): void {
    const op = this.#op('putMember');
    const before = this.ledger.roster();
    let after = before;
    let json = 0;
    if (outcome.status === 'applied') {
      json = this.ledger.member(outcome.record).json;
      after = this.ledger.roster();
    } else if (outcome.status === 'conflict' && outcome.current !== null) {
      this.ledger.member(outcome.current);
    }
    const billed = Math.max(before.dynamodb, after.dynamodb);
    const units = writeUnits(billed);
    op.wru += units;
    op.written.dynamodb += billed;
    op.written.redis += json;
    op.written.postgres += outcome.status === 'applied' ? after.document : 0;
    const load = this.#item('roster');
    load.writes++;
    load.wru += units;
  }

  removeMember(workerId: string, applied: boolean): void {
    const op = this.#op('removeMember');
    const before = this.ledger.roster();
    if (applied) this.ledger.removeMember(workerId);
    const units = writeUnits(before.dynamodb);
    op.wru += units;
    op.written.dynamodb += before.dynamodb;
    op.written.postgres += applied ? this.ledger.roster().document : 0;
    const load = this.#item('roster');
    load.writes++;
    load.wru += units;
  }

  /** A Query of the group's lease items, billed per page; Redis and Postgres read every lease's JSON. */
  listLeases(leases: readonly LeaseRecord[]): void {
    const op = this.#op('listLeases');
    const sizes = leases.map((lease) => this.ledger.lease(lease));
    const dynamodb = sizes.reduce((sum, sized) => sum + sized.dynamodb, 0);
    const json = sizes.reduce((sum, sized) => sum + sized.json, 0);
    op.rru += pagedReadUnits(sizes.map((sized) => sized.dynamodb));
    op.read.dynamodb += dynamodb;
    op.read.redis += json;
    op.read.postgres += json;
  }

  /** A GetItem of one lease item: at least one read unit, also when there is no item. */
  getLease(leaseKey: string, lease: LeaseRecord | null): void {
    const op = this.#op('getLease');
    const sized = lease === null ? undefined : this.ledger.lease(lease);
    const units = Math.max(1, readUnits(sized?.dynamodb ?? 0));
    op.rru += units;
    op.read.dynamodb += sized?.dynamodb ?? 0;
    op.read.redis += sized?.json ?? 0;
    op.read.postgres += sized?.json ?? 0;
    const load = this.#item(`lease:${leaseKey}`);
    load.reads++;
    load.rru += units;
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
    const load = this.#item(`lease:${leaseKey}`);
    load.writes++;
    load.wru += units;
  }

  /** One updateLeases call: a call, then a write per lease (the DynamoDB adapter sends one UpdateItem each). */
  updateLeasesCall(): void {
    this.#op('updateLeases');
  }
}
