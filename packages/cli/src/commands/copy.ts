/**
 * `leasehold copy`: copies a group's leases and leader record from one backend to another, refusing
 * while the group is live, then reads the target back and checks every field.
 *
 * Versions are not copied: each store numbers its own writes, and a copied record starts at the target's
 * next version. Everything core wrote is copied as it is: record format, owner, incarnation, epoch,
 * checkpoint, parents, metadata, fields this command line's core does not name, and the leader's holder
 * and term, so fencing tokens continue where they were. A record that cannot be read back cannot be
 * copied: a group with one is refused, naming it.
 *
 * The roster is not copied: members are live state (a worker's heartbeats), and a worker joins the
 * target's roster as a new incarnation when it starts on it. A copied lease names an owner that is no
 * member of the target's roster, so it is free to take there.
 */
import {
  InvalidConfigError,
  LeaseholdError,
  type LeaderRecord,
  type LeaderState,
  type LeaseRecord,
  type LeaseState,
  type Storage,
} from '@leasehold/core';
import { describeValue, leaderStateOf, leaseStateOf } from '@leasehold/core/adapter';
import { openBackend, type Backend } from '../connect.js';
import { refuseIfLive, type GuardOptions } from '../guard.js';
import { byLeaseKey, checkGroup, readGroup, readKnownGroup, type GroupState, type Io } from '../shared.js';
import { parseStorageUrl } from '@leasehold/connect';
import { PKG } from '../pkg.js';

/** Options of {@link copy}. */
export interface CopyOptions extends GuardOptions {
  readonly from: string;
  readonly to: string;
  readonly group: string;
  /** Overwrite the group's records in the target when they differ from the source's. */
  readonly replace: boolean;
  /** Set the target up first, as `leasehold setup` does (Postgres tables, the DynamoDB table). */
  readonly setup: boolean;
}

/** What to do with each record of the target. */
interface Plan {
  readonly create: LeaseRecord[];
  readonly same: LeaseRecord[];
  /** Source lease and the differing target lease it replaces. */
  readonly replace: { source: LeaseRecord; target: LeaseRecord }[];
  /** Target leases the source does not have. */
  readonly extra: LeaseRecord[];
  readonly leader: 'none' | 'create' | 'same' | 'replace';
}

/** Copies the group, verifies the copy and prints what moved. */
export async function copy(options: CopyOptions, io: Io): Promise<void> {
  checkGroup(options.group);
  const from = parseStorageUrl(options.from);
  const to = parseStorageUrl(options.to);
  if (from.display === to.display) throw new InvalidConfigError(`[${PKG}] --from and --to name the same storage ${describeValue(to.display)}`);
  const source = await openBackend(from);
  let target: Backend | undefined;
  try {
    target = await openBackend(to);
    refuseCorrupt(await readKnownGroup(source.storage, options.group, from.display), options.group, from.display);
    if (options.setup) await target.setup();
    // A first look at the target, so that a refusal comes before the wait for liveness.
    const firstTarget = await readGroup(target.storage, options.group);
    refuseCorruptTarget(firstTarget, options.group, to.display);
    refuseConflicts(planOf(await readGroup(source.storage, options.group), firstTarget), options, to.display);
    await refuseIfLive(source.storage, options.group, options, io);

    const snapshot = refuseCorrupt(await readKnownGroup(source.storage, options.group, from.display), options.group, from.display);
    const targetState = await readGroup(target.storage, options.group);
    refuseCorruptTarget(targetState, options.group, to.display);
    const plan = planOf(snapshot, targetState);
    refuseConflicts(plan, options, to.display);
    await apply(target.storage, options.group, snapshot, plan, io);
    const verified = await verify(target.storage, options.group, snapshot, to.display);
    await refuseIfSourceMoved(source.storage, options.group, snapshot);
    const leader = snapshot.leader === null ? 'no leader record' : 'the leader record';
    io.out(
      `copied group ${describeValue(options.group)} from ${from.display} to ${to.display}: ` +
        `${plan.create.length} leases copied, ${plan.replace.length} replaced, ${plan.same.length} already there, ${plan.extra.length} deleted; ` +
        `verified ${verified} leases and ${leader}\n`,
    );
    const members = snapshot.members.length + snapshot.corruptMembers.length;
    io.out(
      `members are live state and were not copied (${members} in the source's roster): workers join the target's roster when they start on it, and the copied leases are free to take there\n`,
    );
  } finally {
    await target?.close();
    await source.close();
  }
}

/**
 * Refuses a group with a record that cannot be read back, naming each: it cannot be copied, and a copy
 * without it would lose its shard's progress. Returns the state otherwise.
 */
function refuseCorrupt(state: GroupState, group: string, display: string): GroupState {
  const named = state.corrupt.map((error) => `lease ${describeValue(error.leaseKey)} (${error.message})`);
  if (state.corruptLeader !== null) named.push(`the leader record (${state.corruptLeader.message})`);
  if (named.length > 0) {
    throw new LeaseholdError(
      'ERR_CORRUPT_RECORD',
      `[${PKG}] group ${describeValue(group)} has ${named.length} records in ${display} that cannot be read back, so nothing was copied: ${named.join('; ')}; repair or delete them first (leasehold doctor --group)`,
    );
  }
  return state;
}

/** The group's records in the target that cannot be read back: they can be neither compared nor replaced. */
function refuseCorruptTarget(state: GroupState, group: string, display: string): void {
  const named = state.corrupt.map((error) => `lease ${describeValue(error.leaseKey)}`);
  if (state.corruptLeader !== null) named.push('the leader record');
  if (named.length === 0) return;
  throw new LeaseholdError(
    'ERR_CORRUPT_RECORD',
    `[${PKG}] ${display} holds ${named.length} records of group ${describeValue(group)} that cannot be read back (${named.join(', ')}), so nothing was copied; delete them there first (leasehold doctor --group)`,
  );
}

/** Every field of the two states, compared as values: stores may give object keys back in another order. */
function sameLease(a: LeaseState, b: LeaseState): boolean {
  return canonical(leaseStateOf(a)) === canonical(leaseStateOf(b));
}

function sameLeader(a: LeaderState, b: LeaderState): boolean {
  return canonical(leaderStateOf(a)) === canonical(leaderStateOf(b));
}

/** JSON with the keys of every object sorted: equal values give equal text. */
function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, field: unknown) =>
    field !== null && typeof field === 'object' && !Array.isArray(field)
      ? Object.fromEntries(Object.entries(field).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : field,
  );
}

/** Which fields of two lease states differ, for messages. */
function leaseDifference(source: LeaseState, target: LeaseState): string {
  const a = leaseStateOf(source) as unknown as Record<string, unknown>;
  const b = leaseStateOf(target) as unknown as Record<string, unknown>;
  const known = ['format', 'owner', 'incarnation', 'epoch', 'checkpoint', 'parentKeys', 'metadata'];
  const others = [...new Set([...Object.keys(a), ...Object.keys(b)])].filter((name) => !known.includes(name)).sort();
  const names = [...known, ...others];
  return names
    .filter((name) => canonical(a[name]) !== canonical(b[name]))
    .map((name) => (name === 'metadata' ? 'metadata' : `${name} ${describeValue(b[name])} instead of ${describeValue(a[name])}`))
    .join(', ');
}

function planOf(source: GroupState, target: GroupState): Plan {
  const targetByKey = new Map(target.leases.map((lease) => [lease.leaseKey, lease]));
  const sourceKeys = new Set(source.leases.map((lease) => lease.leaseKey));
  const plan: Plan = { create: [], same: [], replace: [], extra: [], leader: 'none' };
  for (const lease of source.leases) {
    const existing = targetByKey.get(lease.leaseKey);
    if (existing === undefined) plan.create.push(lease);
    else if (sameLease(lease, existing)) plan.same.push(lease);
    else plan.replace.push({ source: lease, target: existing });
  }
  plan.extra.push(...target.leases.filter((lease) => !sourceKeys.has(lease.leaseKey)));
  let leader: Plan['leader'] = 'none';
  if (source.leader !== null) {
    if (target.leader === null) leader = 'create';
    else leader = sameLeader(source.leader, target.leader) ? 'same' : 'replace';
  }
  return { ...plan, leader };
}

function refuseConflicts(plan: Plan, options: CopyOptions, display: string): void {
  const [first] = plan.replace;
  const [extra] = plan.extra;
  const differs = plan.replace.length + plan.extra.length + (plan.leader === 'replace' ? 1 : 0);
  if (differs > 0 && !options.replace) {
    const example = first
      ? `lease ${describeValue(first.source.leaseKey)} has ${leaseDifference(first.source, first.target)}`
      : extra
        ? `lease ${describeValue(extra.leaseKey)} is not in the source`
        : 'the leader record differs';
    throw new LeaseholdError(
      'ERR_TARGET_NOT_EMPTY',
      `[${PKG}] ${display} already holds group ${describeValue(options.group)} with ${differs} records that differ from the source (${example}); pass --replace to overwrite them`,
    );
  }
  // Replacing may never lower an epoch or a term in the target: a fencing token once handed out must not repeat.
  const lowered = plan.replace.find(({ source, target }) => target.epoch > source.epoch);
  if (lowered) {
    throw new LeaseholdError(
      'ERR_EPOCH_REGRESSION',
      `[${PKG}] lease ${describeValue(lowered.source.leaseKey)} has epoch ${lowered.target.epoch} in ${display}, above the source's ${lowered.source.epoch}; copying would lower a fencing token, so nothing was written`,
    );
  }
}

async function apply(storage: Storage, group: string, snapshot: GroupState, plan: Plan, io: Io): Promise<void> {
  const failures: string[] = [];
  // `recreate`: a key whose lease was deleted in the target is restored on purpose, its versions and epochs above the old ones.
  const created = await Promise.all(
    plan.create.map((lease) => storage.createLease({ ...leaseStateOf(lease), group, leaseKey: lease.leaseKey }, { recreate: true })),
  );
  plan.create.forEach((lease, i) => {
    const outcome = created[i];
    if (outcome?.status === 'applied') io.out(`copied    ${describeLease(lease)}\n`);
    else failures.push(`creating lease ${describeValue(lease.leaseKey)}: ${outcome?.status === 'unknown' ? outcome.error.message : 'another writer created it first'}`);
  });
  for (const lease of plan.same) io.out(`unchanged ${describeLease(lease)}\n`);
  if (plan.replace.length > 0) {
    const updates = plan.replace.map(({ source, target }) => ({ leaseKey: target.leaseKey, expectedVersion: target.version, next: leaseStateOf(source) }));
    const results = await storage.updateLeases(group, updates);
    plan.replace.forEach(({ source }, i) => {
      const outcome = results[i];
      if (outcome?.status === 'applied') io.out(`replaced  ${describeLease(source)}\n`);
      else failures.push(`replacing lease ${describeValue(source.leaseKey)}: ${outcome?.status === 'unknown' ? outcome.error.message : 'another writer changed it first'}`);
    });
  }
  for (const lease of plan.extra) {
    const outcome = await storage.deleteLease(group, lease.leaseKey, lease.version);
    if (outcome.status === 'applied') io.out(`deleted   ${lease.leaseKey} (not in the source)\n`);
    else failures.push(`deleting lease ${describeValue(lease.leaseKey)}: ${outcome.status === 'unknown' ? outcome.error.message : 'another writer changed it first'}`);
  }
  if (snapshot.leader !== null && plan.leader !== 'none') {
    const leader = await copyLeader(storage, group, snapshot.leader, plan.leader);
    if (leader !== undefined) failures.push(leader);
    else if (plan.leader !== 'same') io.out(`${plan.leader === 'create' ? 'copied   ' : 'replaced '} leader ${snapshot.leader.holder ?? '(none)'}, term ${snapshot.leader.term}\n`);
  }
  if (failures.length > 0) {
    throw new LeaseholdError('ERR_MIGRATION_FAILED', `[${PKG}] ${failures.length} records were not written: ${failures.join('; ')}`);
  }
}

async function copyLeader(storage: Storage, group: string, leader: LeaderRecord, how: Plan['leader']): Promise<string | undefined> {
  if (how === 'same') return undefined;
  const state = leaderStateOf(leader);
  if (how === 'create') {
    const outcome = await storage.createLeader({ group, ...state });
    return outcome.status === 'applied' ? undefined : `creating the leader record: ${outcome.status === 'unknown' ? outcome.error.message : 'another writer created it first'}`;
  }
  const current = await storage.getLeader(group);
  if (current === null) return 'replacing the leader record: it was deleted meanwhile';
  if (current.term > leader.term) {
    return `the leader record has term ${current.term} in the target, above the source's ${leader.term}; copying would lower it`;
  }
  const outcome = await storage.updateLeader(group, current.version, state);
  return outcome.status === 'applied' ? undefined : `replacing the leader record: ${outcome.status === 'unknown' ? outcome.error.message : 'another writer changed it first'}`;
}

function describeLease(lease: LeaseRecord): string {
  return `${lease.leaseKey} checkpoint ${lease.checkpoint === null ? '(none)' : describeValue(lease.checkpoint)} epoch ${lease.epoch} owner ${lease.owner === null ? '(none)' : describeValue(lease.owner)}`;
}

/** Reads the target back and checks every field of every record; returns how many leases it checked. */
async function verify(storage: Storage, group: string, snapshot: GroupState, display: string): Promise<number> {
  const copy = await readGroup(storage, group);
  const copied = new Map(copy.leases.map((lease) => [lease.leaseKey, lease]));
  const problems: string[] = copy.corrupt.map((error) => `lease ${describeValue(error.leaseKey)} cannot be read back (${error.message})`);
  for (const lease of snapshot.leases) {
    const found = copied.get(lease.leaseKey);
    if (found === undefined) {
      if (!copy.corrupt.some((error) => error.leaseKey === lease.leaseKey)) problems.push(`lease ${describeValue(lease.leaseKey)} is missing`);
    } else if (!sameLease(lease, found)) problems.push(`lease ${describeValue(lease.leaseKey)} has ${leaseDifference(lease, found)}`);
  }
  const sourceKeys = new Set(snapshot.leases.map((lease) => lease.leaseKey));
  for (const lease of copy.leases) if (!sourceKeys.has(lease.leaseKey)) problems.push(`lease ${describeValue(lease.leaseKey)} is not in the source`);
  if (snapshot.leader !== null && (copy.leader === null || !sameLeader(snapshot.leader, copy.leader))) {
    problems.push(copy.leader === null ? 'the leader record is missing' : `the leader record has holder ${describeValue(copy.leader.holder)} term ${copy.leader.term}`);
  }
  if (problems.length > 0) {
    throw new LeaseholdError('ERR_MIGRATION_MISMATCH', `[${PKG}] the copy in ${display} does not match the source: ${problems.join('; ')}`);
  }
  return snapshot.leases.length;
}

/** A worker that wrote to the source during the copy would make the copy stale: that is an error, not a success. */
async function refuseIfSourceMoved(storage: Storage, group: string, snapshot: GroupState): Promise<void> {
  const now = await readGroup(storage, group);
  const before = new Map(snapshot.leases.map((lease) => [lease.leaseKey, lease.version]));
  const moved = now.leases.filter((lease) => before.get(lease.leaseKey) !== lease.version).sort(byLeaseKey);
  const [first] = moved;
  const leaderMoved = (now.leader?.version ?? 0) !== (snapshot.leader?.version ?? 0);
  if (first !== undefined || moved.length !== 0 || now.leases.length !== snapshot.leases.length || leaderMoved) {
    const what = first ? `lease ${describeValue(first.leaseKey)} is at version ${first.version}` : leaderMoved ? 'the leader record changed' : 'a lease was deleted';
    throw new LeaseholdError(
      'ERR_SOURCE_CHANGED',
      `[${PKG}] the source changed during the copy (${what}); stop the group's workers and run copy again with --replace`,
    );
  }
}
