/**
 * What `leasehold dashboard` shows of a group at one read: `leasehold status`'s view (members judged by
 * observed version age, leases with their owners' liveness, the leader, corrupt records, streams), plus
 * what only a watcher that keeps reading can tell: how long each checkpoint has stood still as observed
 * on this process's monotonic clock, which held shards stall while others move, the rewinds asked for
 * and applied, and each lease's generation in its stream's lineage.
 */
import { Checkpoint, parseStreamLeaseKey, type Storage } from '@leasehold/core';
import { LEAVING_FIELD, REWIND_FIELDS, rewindRequestOf } from '@leasehold/core/adapter';
import { readRosterDigest, viewOf, type LeaseView, type MemberView, type StatusView } from '../commands/status.js';
import { monotonicNow, Observer, type Now } from '../observe.js';
import { readGroup } from '../shared.js';

/** One lease as the dashboard shows it. */
export interface DashboardLease extends LeaseView {
  /** The stream of a multi-stream group's lease (`<stream>:<shard>` keys), `null` in a one-stream group. */
  readonly streamId: string | null;
  /** Whether its shard was read to its end (`SHARD_END`). */
  readonly finished: boolean;
  /** Milliseconds since this dashboard saw the checkpoint move; `null` until it has seen a move. */
  readonly checkpointMovedMs: number | null;
  /** The checkpoint has stood at least this long: the time since this dashboard first saw it. */
  readonly checkpointStillAtLeastMs: number;
  /**
   * Held, not finished, its checkpoint watched standing for `stallMs` or more while another lease's
   * checkpoint moved within `stallMs`: a shard that stalls while the stream flows.
   */
  readonly checkpointStalled: boolean;
  /** The rewind asked of its owner and not applied yet: its id and target, or `null`. */
  readonly rewindRequest: { readonly id: string; readonly to: string } | null;
  /** The id of the last rewind applied to it, or `null`. */
  readonly rewound: string | null;
  /** Its generation in its stream's lineage: 0 without parents among the leases, else one more than its oldest-generation parent. */
  readonly generation: number;
}

/** One member as the dashboard shows it. */
export interface DashboardMember extends MemberView {
  /** Whether its last heartbeat said it is stopping (its leases are being handed over or released). */
  readonly leaving: boolean;
}

/**
 * A lease gone from the group that a lease still names as its parent: a finished shard the leader cleaned
 * up. The lineage keeps it so that children are still drawn after their parents.
 */
export interface RetiredLease {
  readonly leaseKey: string;
  readonly streamId: string | null;
  /** Its parents as last seen by this dashboard; empty when it was gone before the dashboard started. */
  readonly parentKeys: readonly string[];
  readonly generation: number;
}

/** The group at one read, as the page gets it. */
export interface Snapshot extends Omit<StatusView, 'leases' | 'members'> {
  readonly members: DashboardMember[];
  readonly leases: DashboardLease[];
  /** The deleted ancestors the leases name, for the lineage. */
  readonly retired: RetiredLease[];
  /** When the read was taken, by this machine's wall clock (for people only). */
  readonly takenAt: string;
  /** The threshold of `checkpointStalled`, in milliseconds. */
  readonly stallMs: number;
  /** Lag is shown only where the stream can be read; the dashboard reads none, so it says why. */
  readonly lag: { readonly available: false; readonly reason: string };
}

const NO_LAG = {
  available: false,
  reason: 'lag is not available: the dashboard reads the group\'s storage only, not the stream',
} as const;

/** Remembers, per lease, its checkpoint and when this observer saw it change. */
class CheckpointWatch {
  readonly #seen = new Map<string, { checkpoint: string | null; at: number; moved: boolean }>();

  observe(leases: readonly { leaseKey: string; checkpoint: string | null }[], now: number): Map<string, { movedMs: number | null; atLeastMs: number }> {
    const ages = new Map<string, { movedMs: number | null; atLeastMs: number }>();
    const present = new Set<string>();
    for (const lease of leases) {
      present.add(lease.leaseKey);
      const last = this.#seen.get(lease.leaseKey);
      const entry = last === undefined ? { checkpoint: lease.checkpoint, at: now, moved: false } : last.checkpoint === lease.checkpoint ? last : { checkpoint: lease.checkpoint, at: now, moved: true };
      this.#seen.set(lease.leaseKey, entry);
      ages.set(lease.leaseKey, { movedMs: entry.moved ? now - entry.at : null, atLeastMs: now - entry.at });
    }
    for (const key of this.#seen.keys()) if (!present.has(key)) this.#seen.delete(key);
    return ages;
  }
}

/** Options of {@link GroupWatch}. */
export interface GroupWatchOptions {
  readonly group: string;
  /** The storage URL with its password hidden: the only form of it a snapshot carries. */
  readonly display: string;
  readonly stallMs: number;
  readonly now?: Now;
}

/** Reads a group again and again, keeping what each read observed, and makes a {@link Snapshot} of each. */
export class GroupWatch {
  readonly #options: GroupWatchOptions;
  readonly #now: Now;
  readonly #members: Observer;
  readonly #leaders: Observer;
  readonly #checkpoints = new CheckpointWatch();
  /** The parent keys of every lease seen, while a lease still descends from it. */
  readonly #lineage = new Map<string, readonly string[]>();
  #started: number | undefined;

  constructor(options: GroupWatchOptions) {
    this.#options = options;
    this.#now = options.now ?? monotonicNow;
    this.#members = new Observer(this.#now);
    this.#leaders = new Observer(this.#now);
  }

  /** Reads the group once (its leases, leader record, roster and roster digest) and returns the snapshot. */
  async read(storage: Storage): Promise<Snapshot> {
    const state = await readGroup(storage, this.#options.group);
    const rosterDigest = await readRosterDigest(storage, this.#options.group);
    const now = this.#now();
    this.#started ??= now;
    const view = viewOf(this.#options.group, this.#options.display, state, this.#members, this.#leaders, now - this.#started, rosterDigest);
    const ages = this.#checkpoints.observe(view.leases, now);
    const stallMs = this.#options.stallMs;
    const flowing = view.leases.filter((lease) => {
      const age = ages.get(lease.leaseKey);
      return age?.movedMs !== null && age?.movedMs !== undefined && age.movedMs < stallMs;
    });
    const retired = this.#retired(view.leases);
    const generations = generationsOf([...view.leases, ...retired]);
    const leases = view.leases.map((lease): DashboardLease => {
      const age = ages.get(lease.leaseKey) ?? { movedMs: null, atLeastMs: 0 };
      const finished = lease.checkpoint === Checkpoint.SHARD_END;
      const request = rewindRequestOf(lease);
      const othersFlow = flowing.some((other) => other.leaseKey !== lease.leaseKey);
      return {
        ...lease,
        streamId: parseStreamLeaseKey(lease.leaseKey)?.streamId ?? null,
        finished,
        checkpointMovedMs: age.movedMs === null ? null : Math.round(age.movedMs),
        checkpointStillAtLeastMs: Math.round(age.atLeastMs),
        checkpointStalled: lease.held && !finished && age.atLeastMs >= stallMs && othersFlow,
        rewindRequest: request === undefined ? null : { id: request.id, to: request.to },
        rewound: lease.metadata[REWIND_FIELDS.rewound] ?? null,
        generation: generations.get(lease.leaseKey) ?? 0,
      };
    });
    const members = view.members.map((member): DashboardMember => ({ ...member, leaving: member.metadata[LEAVING_FIELD] !== undefined }));
    return {
      ...view,
      members,
      leases,
      retired: retired.map((lease) => ({ ...lease, streamId: parseStreamLeaseKey(lease.leaseKey)?.streamId ?? null, generation: generations.get(lease.leaseKey) ?? 0 })),
      takenAt: new Date().toISOString(),
      stallMs,
      lag: NO_LAG,
    };
  }

  /** The ancestors of `leases` that are gone, with their parents as remembered; forgets those no lease descends from. */
  #retired(leases: readonly { leaseKey: string; parentKeys: readonly string[] }[]): Array<{ leaseKey: string; parentKeys: readonly string[] }> {
    for (const lease of leases) this.#lineage.set(lease.leaseKey, lease.parentKeys);
    const present = new Set(leases.map((lease) => lease.leaseKey));
    const wanted = new Set<string>();
    const stack = leases.flatMap((lease) => lease.parentKeys);
    while (stack.length > 0) {
      const key = stack.pop() as string;
      if (wanted.has(key)) continue;
      wanted.add(key);
      stack.push(...(this.#lineage.get(key) ?? []));
    }
    for (const key of this.#lineage.keys()) if (!present.has(key) && !wanted.has(key)) this.#lineage.delete(key);
    return [...wanted].filter((key) => !present.has(key)).sort().map((leaseKey) => ({ leaseKey, parentKeys: this.#lineage.get(leaseKey) ?? [] }));
  }
}

/**
 * Each lease's generation: 0 for a lease none of whose parents is among the leases (a shard of the
 * stream's start, or one whose parents were cleaned up), else one more than its parents' greatest. Parent
 * keys that loop (a damaged record) end the walk instead of recursing for ever.
 */
export function generationsOf(leases: readonly { leaseKey: string; parentKeys: readonly string[] }[]): Map<string, number> {
  const parents = new Map(leases.map((lease) => [lease.leaseKey, lease.parentKeys]));
  const generation = new Map<string, number>();
  const visit = (key: string, path: Set<string>): number => {
    const known = generation.get(key);
    if (known !== undefined) return known;
    path.add(key);
    let depth = 0;
    for (const parent of parents.get(key) ?? []) {
      if (!parents.has(parent) || path.has(parent)) continue;
      depth = Math.max(depth, visit(parent, path) + 1);
    }
    path.delete(key);
    generation.set(key, depth);
    return depth;
  };
  for (const key of parents.keys()) visit(key, new Set());
  return generation;
}
