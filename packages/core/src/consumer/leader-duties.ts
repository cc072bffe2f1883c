import { unlessAborted, type Clock } from '../clock.js';
import { concurrencyLimit } from '../concurrency.js';
import { checkContractVersion } from '../contract-version.js';
import type { ShardInfo, ShardSource } from '../source.js';
import { hasRewindRequest, settleRewinds } from '../rewind.js';
import { Checkpoint, RECORD_FORMAT, type CheckpointStorage, type LeaseRecord, type Position } from '../storage.js';
import { unsafeOf } from '../unsafe.js';

/** What one round of the leader's chores did and saw. */
export interface ShardSyncReport {
  /** Leases created for shards that had none. */
  created: string[];
  /** Leases deleted: finished shards whose children all have leases, and shards the source confirmed gone. */
  deleted: string[];
  /** Shards whose lease must wait for a parent's lease to be settled (a create that did not apply yet). */
  pending: string[];
  /** Unfinished leases of shards the listing does not name, kept until the source confirms them gone. */
  missing: string[];
  /** Leases that cannot be read back: neither created over, deleted nor counted; an operator must act. */
  corrupt: string[];
  /** Whether every shard of the listing has a lease or is retired: the group is born once a round is complete. */
  complete: boolean;
  /** Leases a rewind moved that no owner could (see `settleRewinds`). */
  rewound: string[];
  /** In a multi-stream group, the stream this round synced. */
  streamId?: string;
}

/** What a shard sync round uses of the lease table. */
export type ShardSyncStorage = Pick<CheckpointStorage, 'contractVersion' | 'listLeases' | 'getRoster' | 'createLease' | 'deleteLease' | 'getLease' | 'updateLeases'>;

/** Options of {@link ShardSync}. */
export interface ShardSyncOptions {
  group: string;
  source: ShardSource;
  /** The lease table (a multi-stream group gives each stream's sync a view of its own leases). */
  storage: ShardSyncStorage;
  /** Where a shard seen at the group's birth starts: `TRIM_HORIZON`, `LATEST` or `AT_TIMESTAMP:<ms>`. */
  initialPosition: Position;
  /**
   * Pins `LATEST` once for the whole group, so that a birth spread over rounds (or leaders) starts every
   * shard at the same moment: returns the position already recorded, or records and returns `pinned`.
   * Default: pinned once per `ShardSync`.
   */
  pinBirth?: ((pinned: Position) => Promise<Position>) | undefined;
  /** This worker's clock: its wall time pins `LATEST`. */
  clock: Clock;
  /**
   * Told when a round created or deleted leases, so that the group lists its leases (the coordinator's
   * `noteLeasesChanged`): without a change feed, this is how other workers hear of new shards at once.
   */
  onLeasesChanged?: (() => void) | undefined;
  /** Whether this worker may still act as leader: asked right before every write. */
  isLeader: () => boolean;
  /**
   * Creates leases over keys whose leases were deleted (`createLease`'s `recreate`): for a stream that
   * joins a multi-stream group again after its leases were deleted. Retired shards are still never created
   * again (they are skipped before any create). Default false.
   */
  recreateDeleted?: boolean | undefined;
  /** Lease creates in flight at once in a round (parents still before children). Default 16. */
  createConcurrency?: number | undefined;
  /** Told of failures the round works around (a source that cannot say whether a shard is gone). */
  onError?: ((error: Error, operation: string) => void) | undefined;
}

/**
 * The leader's chores (DESIGN section 5), one round per {@link run}; every write is conditional and
 * harmless if done twice, and none is sent unless this worker still leads. A round:
 *
 * 1. lists the leases, then the shards (a lease the listing misses was created before the listing began,
 *    so only a lagging source can miss it, and lagging is no proof of anything);
 * 2. creates leases, parents before children, for shards that have none and are not retired: a shard is
 *    retired when it has no lease but a descendant of it has one (any generation, from the listing's
 *    lineage and the leases' parent keys), or it is gone from the stream. A lease is created only while
 *    each of its parents has a lease or is retired, so a parent without a lease is always a finished one.
 *    Leases created at the group's birth start at the initial position (`LATEST` pinned to this worker's
 *    wall time, so that a shard read later still starts there); a shard born of resharding starts at its
 *    own beginning. A key whose lease was deleted is never created again (the store refuses it);
 * 3. deletes the lease of a finished shard (`SHARD_END`) once every child of it has a lease and nobody
 *    holds it, and the lease of an unfinished shard only when the source confirms the shard gone and
 *    nobody holds it. Nobody holds a lease that is free or names an incarnation that is not alive in the
 *    roster read after the listing (a lease listed with an owner was taken after its owner joined, so an
 *    owner missing or dead in that roster is dead now); a record learned after that roster (a create's
 *    conflict) is held whenever it names an owner. Nothing else is ever deleted; a corrupt lease is
 *    reported, never touched.
 */
export class ShardSync {
  readonly #options: ShardSyncOptions;
  #pinned: Position | undefined;

  constructor(options: ShardSyncOptions) {
    checkContractVersion(options.storage, "ShardSync's storage");
    this.#options = options;
  }

  async run(signal: AbortSignal): Promise<ShardSyncReport> {
    const { group, source, storage, isLeader } = this.#options;
    const unsafe = unsafeOf(this.#options);
    let shards: ShardInfo[];
    let listing: Awaited<ReturnType<CheckpointStorage['listLeases']>>;
    // Reads are given up once the term ends (a stop steps down first): nothing waits for a slow store.
    const read = <T>(answer: Promise<T>): Promise<T> => (unsafe.stopWaitsForListing ? answer : unlessAborted(answer, signal));
    if (unsafe.deleteOnStaleView) {
      shards = await source.listShards({ signal });
      listing = await read(storage.listLeases(group));
    } else {
      listing = await read(storage.listLeases(group));
      shards = await source.listShards({ signal });
    }
    // Who holds what is judged on a roster read after the listing (see step 3).
    const roster = await read(storage.getRoster(group));
    const alive = new Map(roster.members.filter((member) => member.status === 'alive').map((member) => [member.workerId, member.incarnation]));
    const unreadable = new Set(roster.corrupt.map((error) => error.workerId));
    /**
     * Keys whose record this round learned after that roster was read (from a create's conflict: created
     * meanwhile by a parent's reader, and perhaps taken since): a member that joined after the roster read
     * would look dead in it, so such a record with an owner is taken for held.
     */
    const learnedAfterRoster = new Set<string>();
    const heldByAnyone = (lease: LeaseRecord): boolean =>
      lease.owner !== null && (learnedAfterRoster.has(lease.leaseKey) || unreadable.has(lease.owner) || alive.get(lease.owner) === lease.incarnation);
    const report: ShardSyncReport = { created: [], deleted: [], pending: [], missing: [], corrupt: [], complete: false, rewound: [] };
    const leases = new Map(listing.leases.map((lease) => [lease.leaseKey, lease]));
    const corrupt = new Set<string>();
    for (const error of listing.corrupt) {
      const leaseKey = (error as { leaseKey?: unknown }).leaseKey;
      if (typeof leaseKey === 'string') corrupt.add(leaseKey);
    }
    report.corrupt.push(...corrupt);
    const inStream = new Map(shards.map((shard) => [shard.shardId, shard]));
    const lineage = new Lineage(shards, listing.leases);
    /** Keys with a lease (or a corrupt one) when the round began. */
    const leasedAtStart = new Set([...leases.keys(), ...corrupt]);
    const hadLease = (key: string): boolean => leasedAtStart.has(key);
    /** Keys with a lease now: had one, or one was created (or found) during this round. */
    const arrived = new Set<string>();
    const hasLease = (key: string): boolean => hadLease(key) || arrived.has(key);
    // Retired: no lease, but a descendant has one, so the group processed it to its end and cleaned it up.
    const retiredByGroup = new Set<string>();
    const leasedBelow = lineage.descendantTest(hadLease);
    for (const shard of shards) {
      const key = shard.shardId;
      if (hadLease(key)) continue;
      const descendantLeased = unsafe.oneGenerationSync ? lineage.children(key).some(hadLease) : leasedBelow(key);
      if (descendantLeased) retiredByGroup.add(key);
    }
    const deletedBefore = new Set<string>();
    /** Nothing left to read: retired by the group, deleted before, or gone from the stream without a lease. */
    const isRetired = (key: string): boolean =>
      retiredByGroup.has(key) || deletedBefore.has(key) || (!hasLease(key) && !inStream.has(key));

    // Creating, parents first. A shard none of whose ancestors ever had a lease is part of the birth; one
    // that continues a shard the group had (in any generation, even one created earlier this round) is not.
    const ofResharding = new Set<string>();
    const continuesGroup = (parent: string): boolean =>
      hadLease(parent) || retiredByGroup.has(parent) || deletedBefore.has(parent) || ofResharding.has(parent);
    // Creates run concurrently (at most `createConcurrency` in flight), each after its parents' creates
    // of this round settled, so that a birth of thousands of shards costs a few round trips per
    // generation instead of one per shard, and a child still waits for its parents' outcome.
    let birthPosition: Promise<Position> | undefined;
    const creates = new Map<string, Promise<void>>();
    const limit = concurrencyLimit(unsafe.birthRace ? 1 : (this.#options.createConcurrency ?? DEFAULT_CREATE_CONCURRENCY));
    let stopped = false;
    const create = async (shard: ShardInfo, after: readonly Promise<void>[]): Promise<void> => {
      await Promise.all(after);
      if (stopped || signal.aborted) return;
      const key = shard.shardId;
      const parents = shard.parentShardIds;
      if (!unsafe.birthRace && parents.some((parent) => !hasLease(parent) && !isRetired(parent))) {
        report.pending.push(key);
        return;
      }
      const child = parents.some(continuesGroup);
      if (child) ofResharding.add(key);
      const checkpoint = unsafe.childrenAtInitialPosition
        ? null
        : child
          ? Checkpoint.TRIM_HORIZON
          : await (birthPosition ??= this.#birthPosition().catch((error: unknown) => {
              birthPosition = undefined;
              throw error;
            }));
      const outcome = await limit(async () => {
        if (stopped || !isLeader()) {
          stopped = true;
          return undefined;
        }
        return storage.createLease({ group, leaseKey: key, parentKeys: [...parents], checkpoint }, unsafe.oneGenerationSync || this.#options.recreateDeleted ? { recreate: true } : undefined);
      });
      if (outcome === undefined) return;
      if (outcome.status === 'applied') {
        arrived.add(key);
        leases.set(key, outcome.record);
        report.created.push(key);
      } else if (outcome.status === 'conflict' && outcome.current) {
        arrived.add(key); // created meanwhile, by a parent's reader at its end
        leases.set(key, outcome.current);
        // (Before, its owner was judged on the roster read before it: a worker that joined meanwhile and took
        // it looked dead, and the round applied a rewind request on its lease directly while it read, seed
        // 156412 of the multi-stream consumer simulation; unsafe switch lateRecordJudged.)
        if (!unsafe.lateRecordJudged) learnedAfterRoster.add(key);
      } else if (outcome.status === 'conflict') {
        deletedBefore.add(key); // its lease was deleted: it finished (or left the stream) before
      } else {
        report.pending.push(key); // unknown: settled by the next round, which sees the lease or its absence
      }
    };
    for (const shard of unsafe.birthRace ? shards : topological(shards)) {
      const key = shard.shardId;
      if (hasLease(key) || isRetired(key)) continue;
      // A birth race creates in listing order, one at a time, whatever the parents do.
      const after = unsafe.birthRace ? [...creates.values()] : shard.parentShardIds.flatMap((parent) => creates.get(parent) ?? []);
      creates.set(key, create(shard, after));
    }
    const settled = await Promise.allSettled(creates.values());
    const failed = settled.find((outcome): outcome is PromiseRejectedResult => outcome.status === 'rejected');
    if (failed) throw failed.reason;
    if (stopped || signal.aborted) return report;
    report.complete = report.pending.length === 0;

    // Deleting. A lease stays while a parent of it still has a lease (or one that cannot be read), until the
    // parent's is deleted, oldest generation first: finished or gone from the stream, a lease deleted under
    // a parent still being read would make its children eligible, and a rewind of the parent could not find
    // them through it.
    const parentStands = (lease: LeaseRecord): boolean => lease.parentKeys.some((parent) => (leases.has(parent) || corrupt.has(parent)) && !report.deleted.includes(parent));
    for (const lease of [...leases.values()]) {
      if (signal.aborted) return report;
      const key = lease.leaseKey;
      if (lease.format > RECORD_FORMAT) continue; // a newer core's record: not ours to judge
      if (unsafe.deleteOnStaleView && !inStream.has(key)) {
        await this.#delete(lease, report);
      } else if (
        finishedAndSettled(lease, inStream, lineage, hasLease) &&
        !heldByAnyone(lease) &&
        !hasRewindRequest(lease) &&
        (unsafe.deleteBeforeParents || !parentStands(lease))
      ) {
        // (A finished lease carrying a rewind request is read again soon: it stays.)
        await this.#delete(lease, report);
      } else if (lease.checkpoint !== Checkpoint.SHARD_END && !inStream.has(key)) {
        // A shard gone from the stream (trimmed) while a parent is still read: its children would be taken
        // and read before that parent's last records (seed 106122 of the exactly-once consumer simulation;
        // unsafe switch goneBeforeParents).
        const gone = !heldByAnyone(lease) && (unsafe.goneBeforeParents || !parentStands(lease)) && (await this.#confirmedGone(key, signal));
        if (!gone || !(await this.#delete(lease, report))) report.missing.push(key);
      }
    }
    // Rewinds: what no owner applies (a request on a lease nobody holds, a finished lease whose descendants stopped).
    if (!signal.aborted) {
      const standing = [...leases.values()].filter((lease) => !report.deleted.includes(lease.leaseKey));
      const rewound = await settleRewinds({
        storage,
        group,
        leases: standing,
        heldByAnyone,
        unreadable: [...corrupt],
        mayWrite: () => !signal.aborted && isLeader(),
        unstartedLeftAlone: unsafe.unstartedLeftAlone,
      });
      report.rewound.push(...rewound.map((lease) => lease.leaseKey));
    }
    if (report.created.length > 0 || report.deleted.length > 0 || report.rewound.length > 0) this.#options.onLeasesChanged?.();
    return report;
  }

  /** The source's word that a shard is gone; no answer (a throttled call, a network error) is not a yes. */
  async #confirmedGone(shardId: string, signal: AbortSignal): Promise<boolean> {
    const { source, onError } = this.#options;
    if (!source.isShardGone) return false;
    try {
      return await source.isShardGone(shardId, { signal });
    } catch (error) {
      onError?.(error instanceof Error ? error : new Error(String(error)), 'is-shard-gone');
      return false;
    }
  }

  /** `LATEST` means "from the group's birth on": pinned to a time once, so every birth shard starts there. */
  async #birthPosition(): Promise<Position> {
    const { initialPosition, clock, pinBirth } = this.#options;
    if (initialPosition !== Checkpoint.LATEST) return initialPosition;
    const pinned = Checkpoint.atTimestamp(clock.wallTime());
    if (pinBirth) return pinBirth(pinned);
    this.#pinned ??= pinned;
    return this.#pinned;
  }

  async #delete(lease: LeaseRecord, report: ShardSyncReport): Promise<boolean> {
    if (!this.#options.isLeader()) return false;
    const outcome = await this.#options.storage.deleteLease(this.#options.group, lease.leaseKey, lease.version);
    if (outcome.status !== 'applied') return false;
    report.deleted.push(lease.leaseKey);
    return true;
  }
}

const DEFAULT_CREATE_CONCURRENCY = 16;

/** A finished lease may go once every child of it has a lease (and nobody holds it, judged by the caller). */
function finishedAndSettled(
  lease: LeaseRecord,
  inStream: ReadonlyMap<string, ShardInfo>,
  lineage: Lineage,
  known: (key: string) => boolean,
): boolean {
  if (lease.checkpoint !== Checkpoint.SHARD_END) return false;
  const children = lineage.children(lease.leaseKey);
  // A finished shard still in the stream has its children beside it in any consistent listing.
  if (inStream.has(lease.leaseKey) && children.length === 0) return false;
  return children.every(known);
}

/** Parents before children (the listing's order otherwise); a cycle, which no stream has, keeps listing order. */
function topological(shards: readonly ShardInfo[]): ShardInfo[] {
  const byId = new Map(shards.map((shard) => [shard.shardId, shard]));
  const placed = new Set<string>();
  const visiting = new Set<string>();
  const order: ShardInfo[] = [];
  const place = (shard: ShardInfo): void => {
    if (placed.has(shard.shardId) || visiting.has(shard.shardId)) return;
    visiting.add(shard.shardId);
    for (const parent of shard.parentShardIds) {
      const info = byId.get(parent);
      if (info) place(info);
    }
    visiting.delete(shard.shardId);
    placed.add(shard.shardId);
    order.push(shard);
  };
  for (const shard of shards) place(shard);
  return order;
}

/** Who continues whom, from the stream's listing and from the parent keys the leases carry. */
class Lineage {
  readonly #children = new Map<string, Set<string>>();

  constructor(shards: readonly ShardInfo[], leases: readonly LeaseRecord[]) {
    for (const shard of shards) for (const parent of shard.parentShardIds) this.#link(parent, shard.shardId);
    for (const lease of leases) for (const parent of lease.parentKeys) this.#link(parent, lease.leaseKey);
  }

  children(key: string): string[] {
    return [...(this.#children.get(key) ?? [])];
  }

  /**
   * Whether any descendant of a key, in any generation, satisfies `test`, remembered per key: asked of
   * every shard of a long lineage, the whole round stays linear in the shards and leases.
   */
  descendantTest(test: (key: string) => boolean): (key: string) => boolean {
    const memo = new Map<string, boolean>();
    const below = (key: string): boolean => {
      const known = memo.get(key);
      if (known !== undefined) return known;
      // Deep lineages are walked without recursion: children first, then their parent.
      const stack: Array<{ key: string; children: string[]; next: number }> = [{ key, children: this.children(key), next: 0 }];
      memo.set(key, false);
      while (stack.length > 0) {
        const frame = stack[stack.length - 1] as { key: string; children: string[]; next: number };
        if (memo.get(frame.key) === true || frame.next >= frame.children.length) {
          stack.pop();
          const parent = stack[stack.length - 1];
          if (parent && memo.get(frame.key) === true) memo.set(parent.key, true);
          continue;
        }
        const child = frame.children[frame.next++] as string;
        if (test(child)) {
          memo.set(frame.key, true);
          continue;
        }
        const seen = memo.get(child);
        if (seen === true) memo.set(frame.key, true);
        else if (seen === undefined) {
          memo.set(child, false);
          stack.push({ key: child, children: this.children(child), next: 0 });
        }
      }
      return memo.get(key) as boolean;
    };
    return below;
  }

  /** Whether any descendant of `key`, in any generation, satisfies `test`. */
  hasDescendant(key: string, test: (key: string) => boolean): boolean {
    const stack = this.children(key);
    const visited = new Set<string>(stack);
    while (stack.length > 0) {
      const next = stack.pop() as string;
      if (test(next)) return true;
      for (const child of this.#children.get(next) ?? []) {
        if (!visited.has(child)) {
          visited.add(child);
          stack.push(child);
        }
      }
    }
    return false;
  }

  #link(parent: string, child: string): void {
    let set = this.#children.get(parent);
    if (!set) {
      set = new Set();
      this.#children.set(parent, set);
    }
    set.add(child);
  }
}

/** Runs `run` now and then every `intervalMs` until `signal` fires. */
export async function leaderLoop(
  run: () => Promise<void>,
  intervalMs: number,
  clock: Clock,
  signal: AbortSignal,
): Promise<void> {
  while (!signal.aborted) {
    await run();
    try {
      await clock.sleep(intervalMs, signal);
    } catch {
      return;
    }
  }
}
