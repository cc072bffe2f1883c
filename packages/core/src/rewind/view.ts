/**
 * The group as a rewind reads it: its leases by key, who holds each on the roster read after them,
 * the leases that could not be read back, and the lines of descent between leases. Planning, applying
 * and settling all decide on such a view.
 */
import { describeValue, RecordFormatError } from '../errors.js';
import { Checkpoint, RECORD_FORMAT, type CheckpointStorage, type LeaseRecord } from '../storage.js';

const PKG = 'core';

export interface GroupView {
  readonly leases: Map<string, LeaseRecord>;
  readonly corrupt: Set<string>;
  /** Children by parent key, from the leases' parent keys. */
  readonly children: Map<string, string[]>;
  /** The live owner of a lease, judged on a roster read after the listing; `null` when nobody holds it. */
  ownerOf(lease: LeaseRecord): string | null;
  /**
   * Whether the roster read says who holds a lease read after it (a conflict's current record): free,
   * alive in the roster, or of an incarnation the roster shows dead. An owner it does not know may have
   * joined since: only a fresh read of the roster can judge it.
   */
  judges(lease: LeaseRecord): boolean;
}

/**
 * Reads the group: its leases, then its roster. A lease listed with an owner was taken after that owner
 * joined, so an owner missing or dead in a roster read after the listing is dead now (the rule the
 * leader's cleanup uses); a member that cannot be read back may be alive.
 */
export async function readView(storage: CheckpointStorage, group: string): Promise<GroupView> {
  const listing = await storage.listLeases(group);
  const roster = await storage.getRoster(group);
  return viewOf(listing.leases, listing.corrupt.map((error) => error.leaseKey ?? ''), roster.members, roster.corrupt.map((error) => error.workerId ?? ''));
}

export function viewOf(
  leases: readonly LeaseRecord[],
  corrupt: readonly string[],
  members: readonly { workerId: string; incarnation: string; status: string }[],
  unreadableMembers: readonly string[],
): GroupView {
  const alive = new Map(members.filter((member) => member.status === 'alive').map((member) => [member.workerId, member.incarnation]));
  const dead = new Set(members.filter((member) => member.status !== 'alive').map((member) => `${member.workerId}\u0000${member.incarnation}`));
  const unreadable = new Set(unreadableMembers);
  const children = new Map<string, string[]>();
  for (const lease of leases) for (const parentKey of lease.parentKeys) children.set(parentKey, [...(children.get(parentKey) ?? []), lease.leaseKey]);
  return {
    leases: new Map(leases.map((lease) => [lease.leaseKey, lease])),
    corrupt: new Set(corrupt),
    children,
    ownerOf: (lease) => (lease.owner !== null && (unreadable.has(lease.owner) || alive.get(lease.owner) === lease.incarnation) ? lease.owner : null),
    judges: (lease) =>
      lease.owner === null || unreadable.has(lease.owner) || alive.get(lease.owner) === lease.incarnation || dead.has(`${lease.owner}\u0000${lease.incarnation}`),
  };
}

/** Every lease that descends from `leaseKey`, in any generation, each once. */
export function descendantsOf(view: GroupView, leaseKey: string): string[] {
  const found: string[] = [];
  const seen = new Set<string>([leaseKey]);
  const stack = [...(view.children.get(leaseKey) ?? [])];
  while (stack.length > 0) {
    const key = stack.shift() as string;
    if (seen.has(key)) continue;
    seen.add(key);
    if (!view.leases.has(key)) continue;
    found.push(key);
    stack.push(...(view.children.get(key) ?? []));
  }
  return found;
}

/** The keys in an order that puts every parent before its children (by the leases' parent keys); ties by key. */
export function ancestorsFirst(view: GroupView, keys: Iterable<string>): string[] {
  const wanted = new Set(keys);
  const depth = new Map<string, number>();
  const depthOf = (key: string, path: Set<string>): number => {
    const known = depth.get(key);
    if (known !== undefined) return known;
    if (path.has(key)) return 0; // a cycle, which no stream has
    path.add(key);
    const lease = view.leases.get(key);
    let d = 0;
    for (const parentKey of lease?.parentKeys ?? []) if (view.leases.has(parentKey)) d = Math.max(d, depthOf(parentKey, path) + 1);
    path.delete(key);
    depth.set(key, d);
    return d;
  };
  return [...wanted].sort((a, b) => depthOf(a, new Set()) - depthOf(b, new Set()) || (a < b ? -1 : a > b ? 1 : 0));
}

/** Whether `value` is an array; not a type guard, so that a checked `readonly` array keeps its element type. */
export function isList(value: unknown): boolean {
  return Array.isArray(value);
}

export function isFinished(lease: LeaseRecord): boolean {
  return lease.checkpoint === Checkpoint.SHARD_END;
}

export function newerFormat(lease: LeaseRecord): RecordFormatError {
  return new RecordFormatError(
    `[${PKG}] lease ${describeValue(lease.leaseKey)} is in record format ${lease.format}, newer than the ${RECORD_FORMAT} this Leasehold knows: upgrade it to rewind this group`,
    lease.format,
  );
}
