/**
 * The deterministic simulation: real `LeaseCoordinator` and `LeaderElector` code, many simulated worker
 * processes, one `MemoryStorage` behind a fault injector per process, virtual time, and a seeded
 * schedule of faults. The guarantees of DESIGN section 6 are checked at every step; a violation names
 * the seed and the command that replays it exactly.
 */
import { Checkpoint, type LeaseRecord } from '../storage.js';
import { seededRandom } from '../clock.js';
import { describeValue, InvalidConfigError } from '../errors.js';
import { limits } from '../validation.js';
import { LeaseCoordinator, type LeaseCoordinatorOptions } from '../lease/coordinator.js';
import { LeaderElector } from '../leader/elector.js';
import { withUnsafe, type CoordinatorUnsafe } from '../unsafe.js';
import { MemoryStorage, type MemoryWriteEvent } from '../memory/memory-storage.js';
import { watchersOf } from '../lease/watchers.js';
import { withoutLeaseReads, withoutRosterMoves, withoutWatcherReads } from './without-watcher-reads.js';
import type { Storage } from '../storage.js';
import { compareNumericPositions } from '../position.js';
import { FaultyStorage, type FaultPlan } from './faulty-storage.js';
import { VirtualClock, VirtualScheduler } from './virtual-time.js';

/** What one simulation run does. Everything not given is drawn from the seed. */
export interface SimulationConfig {
  seed: number;
  /**
   * Workers at the start, 1 to `limits.maxMembers` (1,000). A group of 1,000 over 10,000 leases runs in a
   * minute or two of CPU.
   */
  workers?: number;
  /** Leases in the group, 1 or more. */
  leases?: number;
  /** Virtual milliseconds of faults before the quiet phase. Default 30,000. */
  faultPhaseMs?: number;
  /** Which faults may happen. Default: all but the opt-in ones (`slowListings`, `lateLeases`), which only `true` turns on. */
  faults?: Partial<Record<FaultKind, boolean>>;
  /** Lease timing and test-only weakening passed to every coordinator. */
  coordinator?: Pick<LeaseCoordinatorOptions, 'leaseDurationMs' | 'renewIntervalMs' | 'takeIntervalMs' | 'maxClockDrift' | 'watchers' | 'wholeRosterUpTo'> & { unsafe?: CoordinatorUnsafe | undefined };
  /**
   * Whether the store has the watchers' reads (`getMembers` and the roster digest). Default true; false
   * runs the group as on an adapter without them, every member reading the whole roster every tick.
   */
  watcherReads?: boolean;
  /**
   * Whether the store says which members each move of the roster digest named (`getRosterMoves`). Drawn
   * from the seed when not given: half the runs go without, as on the adapters that do not have it.
   */
  rosterMoves?: boolean;
  /**
   * Whether the store reads many leases by key in one call (`getLeases`). Drawn from the seed when not
   * given: half the runs go without, each lease announced to a worker read with `getLease`.
   */
  leaseReads?: boolean;
  /**
   * How many failure domains the workers run in (`failureDomain`, worker i in domain i mod k), and then
   * the mass crashes kill a victim's whole domain, as a host lost at once. 0 or absent: no domains, and a
   * mass crash kills a victim and the members after it in id order. `pnpm sim` draws it per seed.
   */
  failureDomains?: number;
  /**
   * Whether the coordinators listen to the store's change feed (`useChangeFeed`). Drawn from the seed
   * when not given: a third of the runs go without one, as on the DynamoDB adapter, which has none.
   */
  changeFeed?: boolean;
  /** Records a line per notable event, for replaying a failure by eye. */
  trace?: (line: string) => void;
}

/** The kinds of fault the schedule draws from. */
export type FaultKind =
  | 'crash'
  | 'pause'
  | 'cutOff'
  | 'latency'
  | 'errors'
  | 'ambiguous'
  | 'drift'
  | 'gracefulStop'
  | 'join'
  | 'mixedDurations'
  | 'capped'
  /** The current leader (the elector's) crashes. */
  | 'leaderCrash'
  /**
   * A member crashes together with the members after it in id order, a tenth of the group at once (at
   * least two, never all); the fault phase also ends with the leader, its watchers and the rest of a
   * tenth crashing so, for good, so that the quiet phase's bounds measure the failover of their leases and
   * of the leadership.
   */
  | 'massCrash'
  /** A member crashes together with every member that watches it (see `watchers`). */
  | 'watcherCrash'
  /**
   * A member's lease listings stall (see `FaultPlan.listingStallMs`) for a while: its take loop waits on
   * them and acts on listings older than what its heartbeats and the change feed have told it since,
   * while its heartbeats go on. Drawn only when `faults.slowListings` is true (`--slow-listings`), so
   * that the seeds of the default mix keep their schedules.
   */
  | 'slowListings'
  /**
   * Leases created while the group runs, as a leader's shard sync creates a resharded stream's children:
   * one while the members of the cold start are still joining (when a large group's members have asked
   * for the listing they will deal from), two more during the faults, each announced by a live member
   * (`noteLeasesChanged`, and the change feed where there is one). Drawn only when `faults.lateLeases` is
   * true (`--late-leases`), apart from the run's randomness, so that the seeds keep their schedules.
   */
  | 'lateLeases';

/** A broken guarantee, with the moment and the detail. */
export interface Violation {
  guarantee: 'single-owner' | 'fencing' | 'checkpoint' | 'one-leader' | 'liveness' | 'balance';
  atMs: number;
  detail: string;
}

/** The outcome of one run. */
export interface SimulationResult {
  seed: number;
  workers: number;
  leases: number;
  violations: Violation[];
  /** Virtual time from the end of faults until every eligible lease had a live holder. */
  ownedAfterMs: number;
  /** Virtual time from the end of faults until the assignment was balanced (max - min <= 1). */
  balancedAfterMs: number;
  /** Virtual time from the end of faults until a live worker led the group. */
  leaderAfterMs: number;
  /** The command that replays this run exactly. */
  replay: string;
  stats: {
    acquisitions: number;
    handoffs: number;
    checkpoints: number;
    faults: number;
    /** Crashes of the worker that led the group at the time. */
    leaderCrashes: number;
    /** The most workers that crashed at one instant. */
    mostCrashedAtOnce: number;
  };
}

const GROUP = 'simulated';
const ALL_FAULTS: FaultKind[] = ['crash', 'pause', 'cutOff', 'latency', 'errors', 'ambiguous', 'drift', 'gracefulStop', 'join', 'mixedDurations', 'capped', 'leaderCrash', 'massCrash', 'watcherCrash', 'slowListings', 'lateLeases'];
/** The faults a run draws only when its config turns them on. */
const OPT_IN_FAULTS: readonly FaultKind[] = ['slowListings', 'lateLeases'];

interface SimWorker {
  index: number;
  workerId: string;
  /** Its failure domain, when the run has them. */
  domain: string | undefined;
  clock: VirtualClock;
  plan: FaultPlan;
  coordinator: LeaseCoordinator;
  elector: LeaderElector;
  alive: boolean;
  stopping: boolean;
  /** Its `maxLeasesPerWorker`: Infinity unless the run caps it. */
  cap: number;
  /** Per held lease, the step of simulated work in flight (awaited by a drain). */
  work: Map<string, Promise<void>>;
}

/** Draws the run's shape from the seed: mostly small groups, sometimes large ones. */
export function shapeOf(seed: number): { workers: number; leases: number } {
  const random = seededRandom(seed ^ 0x5eed);
  const roll = random.next();
  if (roll < 0.7) return { workers: 2 + Math.floor(random.next() * 4), leases: 1 + Math.floor(random.next() * 24) };
  if (roll < 0.95) return { workers: 4 + Math.floor(random.next() * 5), leases: 16 + Math.floor(random.next() * 48) };
  if (roll < 0.98) return { workers: 12 + Math.floor(random.next() * 5), leases: 128 + Math.floor(random.next() * 129) };
  return { workers: 16, leases: 256 };
}

/**
 * The flags that give a run its faults: the opt-in ones by name, or, when the run turned any default fault
 * off, `--faults` with every kind it draws.
 */
function faultFlags(faults: SimulationConfig['faults']): string[] {
  if (faults === undefined) return [];
  if (Object.values(faults).some((on) => on === false)) {
    return [`--faults ${ALL_FAULTS.filter((kind) => faults[kind] ?? !OPT_IN_FAULTS.includes(kind)).join(',')}`];
  }
  return [faults.slowListings === true ? '--slow-listings' : '', faults.lateLeases === true ? '--late-leases' : ''];
}

/**
 * The faults `--faults a,b,c` names: those kinds and no other (an unknown kind is refused, naming it).
 */
export function faultsNamed(list: string): Record<FaultKind, boolean> {
  const named = list.split(',').map((kind) => kind.trim()).filter((kind) => kind !== '');
  for (const kind of named) {
    if (!(ALL_FAULTS as string[]).includes(kind)) throw new InvalidConfigError(`[simulation] unknown fault kind ${describeValue(kind)}; the kinds are ${ALL_FAULTS.join(', ')}`);
  }
  return Object.fromEntries(ALL_FAULTS.map((kind) => [kind, named.includes(kind)])) as Record<FaultKind, boolean>;
}

/** The command that replays a run. */
export function replayCommand(config: SimulationConfig & { workers: number; leases: number }): string {
  const unsafe = config.coordinator?.unsafe;
  const flags = [
    `--seed ${config.seed}`,
    `--workers ${config.workers}`,
    `--leases ${config.leases}`,
    config.faultPhaseMs !== undefined ? `--fault-ms ${config.faultPhaseMs}` : '',
    unsafe?.skipSelfFencing ? '--unsafe-skip-self-fencing' : '',
    unsafe?.expiryFactor !== undefined ? `--unsafe-expiry-factor ${unsafe.expiryFactor}` : '',
    unsafe?.ownDurationOnly ? '--unsafe-own-duration-only' : '',
    unsafe?.skipRosterDigest ? '--unsafe-skip-roster-digest' : '',
    unsafe?.movesUnread ? '--unsafe-moves-unread' : '',
    unsafe?.ringKeepsTheDead ? '--unsafe-ring-keeps-the-dead' : '',
    unsafe?.freeRetryIgnoresOwner ? '--unsafe-free-retry-ignores-owner' : '',
    unsafe?.adoptionIgnoresCap ? '--unsafe-adoption-ignores-cap' : '',
    unsafe?.givenBackPlanned ? '--unsafe-given-back-planned' : '',
    unsafe?.shortfallIgnored ? '--unsafe-shortfall-ignored' : '',
    unsafe?.belowIgnored ? '--unsafe-below-ignored' : '',
    unsafe?.coldDealTrusted ? '--unsafe-cold-deal-trusted' : '',
    unsafe?.noteTrusted ? '--unsafe-note-trusted' : '',
    unsafe?.asksTrusted ? '--unsafe-asks-trusted' : '',
    unsafe?.rosterBeforeListing ? '--unsafe-roster-before-listing' : '',
    unsafe?.coldListingIgnoresNews ? '--unsafe-cold-listing-ignores-news' : '',
    unsafe?.coldDealerAwaited ? '--unsafe-cold-dealer-awaited' : '',
    unsafe?.lateDealIgnored ? '--unsafe-late-deal-ignored' : '',
    config.watcherReads === false ? '--no-watcher-reads' : '',
    config.rosterMoves === false ? '--no-roster-moves' : config.rosterMoves === true ? '--roster-moves' : '',
    config.leaseReads === false ? '--no-lease-reads' : config.leaseReads === true ? '--lease-reads' : '',
    config.failureDomains !== undefined ? `--failure-domains ${config.failureDomains}` : '',
    unsafe?.domainsIgnored ? '--unsafe-domains-ignored' : '',
    unsafe?.lostDomainsDealt ? '--unsafe-lost-domains-dealt' : '',
    unsafe?.dueReadsSkipped ? '--unsafe-due-reads-skipped' : '',
    unsafe?.readsOutOfTurn ? '--unsafe-reads-out-of-turn' : '',
    config.changeFeed === false ? '--no-change-feed' : config.changeFeed === true ? '--change-feed' : '',
    config.coordinator?.wholeRosterUpTo !== undefined ? `--whole-roster-up-to ${config.coordinator.wholeRosterUpTo}` : '',
    ...faultFlags(config.faults),
  ].filter(Boolean);
  return `pnpm sim ${flags.join(' ')} --trace`;
}

/** Runs one seeded simulation and returns what it found. */
export async function simulate(config: SimulationConfig): Promise<SimulationResult> {
  const shape = shapeOf(config.seed);
  const workerCount = config.workers ?? shape.workers;
  const leaseCount = config.leases ?? shape.leases;
  const faultPhaseMs = config.faultPhaseMs ?? 30_000;
  /** The last self-fence of a worker in the quiet phase (a latency spike outlasting its hold), or -Infinity. */
  let lastQuietFenceAt = -Infinity;
  if (!Number.isInteger(workerCount) || workerCount < 1 || workerCount > limits.maxMembers) {
    throw new InvalidConfigError(`[simulation] workers must be an integer from 1 to ${limits.maxMembers} (limits.maxMembers), got ${describeValue(config.workers)}`);
  }
  if (!Number.isInteger(leaseCount) || leaseCount < 1) throw new InvalidConfigError(`[simulation] leases must be a positive integer, got ${describeValue(config.leases)}`);
  if (!Number.isFinite(faultPhaseMs) || faultPhaseMs < 0) throw new InvalidConfigError(`[simulation] faultPhaseMs must be a non-negative number, got ${describeValue(config.faultPhaseMs)}`);
  const random = seededRandom(config.seed);
  const enabled = (kind: FaultKind): boolean => config.faults?.[kind] ?? !OPT_IN_FAULTS.includes(kind);
  const scheduler = new VirtualScheduler();
  const trace = config.trace ?? (() => undefined);
  const leaseDurationMs = config.coordinator?.leaseDurationMs ?? 10_000;
  const takeIntervalMs = config.coordinator?.takeIntervalMs ?? 2_000;
  const maxClockDrift = config.coordinator?.maxClockDrift ?? 0.01;
  // The coordinator's own default heartbeat interval unless the run sets one.
  const renewIntervalMs = config.coordinator?.renewIntervalMs ?? Math.round(leaseDurationMs * 0.65);
  const watcherCount = config.coordinator?.watchers ?? 3;
  // Half the seeds watch at any size (the watchers' path), half read the whole roster while the group is
  // small (the default), drawn apart from the run's randomness; a run may also set it.
  const wholeRosterUpTo = config.coordinator?.wholeRosterUpTo ?? (seededRandom((config.seed * 104_723) >>> 0).next() < 0.5 ? 0 : 16);
  const watcherReads = config.watcherReads ?? true;
  const rosterMoves = config.rosterMoves ?? seededRandom((config.seed * 6_037 + 29) >>> 0).next() < 0.5;
  const leaseReads = config.leaseReads ?? seededRandom((config.seed * 4_201 + 11) >>> 0).next() < 0.5;
  const failureDomains = config.failureDomains ?? 0;
  const changeFeed = config.changeFeed ?? seededRandom((config.seed * 7_919 + 17) >>> 0).next() >= 1 / 3;
  const violations: Violation[] = [];
  const stats = { acquisitions: 0, handoffs: 0, checkpoints: 0, faults: 0, leaderCrashes: 0, mostCrashedAtOnce: 0 };
  const violate = (guarantee: Violation['guarantee'], detail: string): void => {
    if (violations.length < 20) violations.push({ guarantee, atMs: scheduler.now, detail });
    trace(`${scheduler.now.toFixed(0)} VIOLATION ${guarantee}: ${detail}`);
  };

  const workers: SimWorker[] = [];
  const byId = new Map<string, SimWorker>();
  /**
   * Per lease, every worker that acquired it and has not died since: the only ones that can hold it
   * (a coordinator counts a lease held only after its 'acquired' event). The checks look here instead of
   * at every worker, which in a group of 1,000 cost more than the run itself.
   */
  const acquirers = new Map<string, Set<SimWorker>>();
  /** The live workers (besides `except`) that hold `leaseKey` now. */
  const holdersOf = (leaseKey: string, except?: SimWorker): SimWorker[] => {
    const candidates = acquirers.get(leaseKey);
    if (!candidates) return [];
    const holders: SimWorker[] = [];
    for (const candidate of candidates) {
      if (!candidate.alive) candidates.delete(candidate);
      else if (candidate !== except && candidate.coordinator.isHeld(leaseKey)) holders.push(candidate);
    }
    return holders;
  };
  const acknowledged = new Map<string, string>();
  const leaders = new Map<number, string>();

  const checkWrite = (event: MemoryWriteEvent): void => {
    if (event.kind !== 'lease') return;
    const { before, after, leaseKey } = event;
    if (!before || !after) return;
    if (after.epoch < before.epoch) violate('fencing', `epoch of ${leaseKey} went from ${before.epoch} to ${after.epoch}`);
    if (before.checkpoint !== null && after.checkpoint !== before.checkpoint) {
      if (after.checkpoint === null || compareNumericPositions(after.checkpoint, before.checkpoint) < 0) {
        violate('checkpoint', `checkpoint of ${leaseKey} moved back from ${before.checkpoint} to ${String(after.checkpoint)}`);
      }
    }
    if (after.checkpoint !== before.checkpoint && (after.owner !== before.owner || after.epoch !== before.epoch)) {
      violate('fencing', `checkpoint of ${leaseKey} changed by a write that also changed its owner (${before.owner} -> ${after.owner})`);
    }
    const acked = acknowledged.get(leaseKey);
    if (acked !== undefined && (after.checkpoint === null || compareNumericPositions(after.checkpoint, acked) < 0)) {
      violate('checkpoint', `acknowledged checkpoint ${acked} of ${leaseKey} lost: stored ${String(after.checkpoint)}`);
    }
    const takenFrom = before.owner;
    if (after.owner === null && takenFrom !== null) {
      // Written free (a release, a give-back, or a dead member's leases freed by its declarer): whoever it
      // named must not believe it still holds the lease.
      const previous = byId.get(takenFrom);
      if (previous?.alive && previous.coordinator.isHeld(leaseKey)) violate('single-owner', `${leaseKey} written free while ${takenFrom} still held it`);
    }
    if (after.owner !== null && after.owner !== takenFrom && takenFrom !== null && after.epoch === before.epoch + 1) {
      // A take or a handoff: the previous owner must not believe it still holds the lease.
      const previous = byId.get(takenFrom);
      if (previous?.alive && previous.coordinator.isHeld(leaseKey)) {
        violate('single-owner', `${after.owner} got ${leaseKey} while ${takenFrom} still held it`);
      }
    }
  };

  const storage = new MemoryStorage({ onWrite: checkWrite });
  const reads: Storage = leaseReads ? storage : withoutLeaseReads(storage);
  const shared: Storage = !watcherReads ? withoutWatcherReads(reads) : rosterMoves ? reads : withoutRosterMoves(reads);
  for (let i = 0; i < leaseCount; i++) {
    // A few leases are children of earlier ones, so that parent-before-child is exercised too.
    const parentKeys = i >= 4 && random.next() < 0.1 ? [`shard-${Math.floor(random.next() * (i - 1))}`] : [];
    await storage.createLease({ group: GROUP, leaseKey: `shard-${i}`, parentKeys });
  }

  const basePlan = (): FaultPlan => ({
    latencyMs: (r) => (enabled('latency') ? (r.next() < 0.02 ? 200 + r.next() * 1_500 : r.next() * 20) : 0),
    errorBeforeSend: enabled('errors') ? 0.01 : 0,
    ambiguousAfterApply: enabled('ambiguous') ? 0.01 : 0,
    cutOff: false,
  });

  // Starting runs on virtual time, so it is never awaited here: the scheduler drives it.
  const startWorker = (index: number): SimWorker => {
    const rate = enabled('drift') ? 1 + (random.next() * 2 - 1) * maxClockDrift : 1;
    const clock = new VirtualClock(scheduler, { rate, offsetMs: random.next() * 1e6 });
    const workerRandom = seededRandom(Math.floor(random.next() * 2 ** 32));
    // Some workers run with half the group's lease duration (a deployment with mixed settings): they must
    // still wait the longer duration of a member before declaring it dead.
    const ownDurationMs = enabled('mixedDurations') && random.next() < 0.25 ? leaseDurationMs / 2 : leaseDurationMs;
    // Some of the first workers hold at most a little over an even share (maxLeasesPerWorker): owners must
    // never hand them more, and the rest must balance around them. Drawn apart from the run's randomness,
    // so that the rest of the run is the same with or without caps.
    const capDraw = seededRandom((config.seed * 7_919 + index * 104_729) >>> 0).next();
    const cap = enabled('capped') && index > 0 && index < workerCount && capDraw < 0.25 ? Math.ceil(leaseCount / workerCount) + 1 : Infinity;
    const plan = basePlan();
    const faulty = new FaultyStorage(shared, clock, workerRandom, plan);
    const workerId = `w${index}`;
    const domain = failureDomains > 0 ? `d${index % failureDomains}` : undefined;
    const worker: SimWorker = {
      index,
      workerId,
      domain,
      clock,
      plan,
      alive: true,
      stopping: false,
      cap,
      work: new Map(),
      coordinator: new LeaseCoordinator(withUnsafe({
        storage: faulty,
        group: GROUP,
        workerId,
        clock,
        random: workerRandom,
        leaseDurationMs: ownDurationMs,
        takeIntervalMs,
        renewIntervalMs: ownDurationMs === leaseDurationMs ? renewIntervalMs : undefined,
        maxLeasesPerWorker: Number.isFinite(cap) ? cap : undefined,
        maxClockDrift,
        watchers: watcherCount,
        wholeRosterUpTo,
        ...(domain === undefined ? {} : { failureDomain: domain }),
        useChangeFeed: changeFeed,
        onDrain: async (lease) => {
          await worker.work.get(lease.leaseKey);
        },
      }, config.coordinator?.unsafe)),
      elector: new LeaderElector(withUnsafe({
        store: faulty,
        group: GROUP,
        workerId,
        clock,
        random: workerRandom,
        leaseDurationMs,
        maxClockDrift,
        onElected: (term) => {
          const previous = leaders.get(term);
          if (previous !== undefined && previous !== workerId) violate('one-leader', `term ${term} led by ${previous} and ${workerId}`);
          leaders.set(term, workerId);
          for (const other of workers) {
            if (other !== worker && other.alive && other.elector.isLeader()) {
              violate('one-leader', `${workerId} elected for term ${term} while ${other.workerId} leads term ${String(other.elector.term)}`);
            }
          }
        },
      }, { skipSelfFencing: config.coordinator?.unsafe?.skipSelfFencing })),
    };
    byId.set(workerId, worker);
    workers.push(worker);
    worker.coordinator.on('acquired', ({ leaseKey, how }) => {
      stats.acquisitions++;
      let candidates = acquirers.get(leaseKey);
      if (!candidates) acquirers.set(leaseKey, (candidates = new Set()));
      candidates.add(worker);
      // maxLeasesPerWorker bounds what a worker holds at every instant, not only once the group is balanced.
      if (Number.isFinite(worker.cap) && worker.coordinator.heldLeases().length > worker.cap) {
        violate('balance', `${workerId} holds ${worker.coordinator.heldLeases().length} leases, above its maxLeasesPerWorker ${worker.cap}`);
      }
      if (how === 'handoff') stats.handoffs++;
      trace(`${scheduler.now.toFixed(0)} ${workerId} acquired ${leaseKey} (${how})`);
      void work(worker, leaseKey);
    });
    worker.coordinator.on('lost', ({ leaseKey, reason }) => {
      trace(`${scheduler.now.toFixed(0)} ${workerId} lost ${leaseKey} (${reason})`);
      // Latency stays in the quiet phase: a heartbeat slow enough to outlast the hold self-fences its worker,
      // whose leases are taken again as after any fault.
      if (reason === 'self-fenced' && scheduler.now >= faultPhaseMs) lastQuietFenceAt = Math.max(lastQuietFenceAt, scheduler.now);
    });
    worker.coordinator.on('handed-off', ({ leaseKey, to }) => trace(`${scheduler.now.toFixed(0)} ${workerId} handed ${leaseKey} to ${to}`));
    worker.coordinator.on('steal-requested', ({ leaseKey, from }) => trace(`${scheduler.now.toFixed(0)} ${workerId} asked ${from} for ${leaseKey}`));
    worker.coordinator.on('released', ({ leaseKey }) => trace(`${scheduler.now.toFixed(0)} ${workerId} released ${leaseKey}`));
    worker.coordinator.on('joined', ({ incarnation }) => trace(`${scheduler.now.toFixed(0)} ${workerId} joined as ${incarnation}`));
    worker.coordinator.on('member-dead', ({ workerId: dead }) => trace(`${scheduler.now.toFixed(0)} ${workerId} declared ${dead} dead`));
    worker.elector.on('elected', ({ term }) => trace(`${scheduler.now.toFixed(0)} ${workerId} elected for term ${term}`));
    void worker.coordinator.start().catch((error: unknown) => violate('liveness', `${workerId} failed to start: ${String(error)}`));
    void worker.elector.start().catch((error: unknown) => violate('liveness', `${workerId} failed to start its elector: ${String(error)}`));
    return worker;
  };

  /** Simulated user work: hand a record, checkpoint it, repeat while the lease is held. */
  const work = async (worker: SimWorker, leaseKey: string): Promise<void> => {
    const { coordinator, clock } = worker;
    while (worker.alive && coordinator.isHeld(leaseKey)) {
      let finish = (): void => undefined;
      const step = new Promise<void>((resolve) => (finish = resolve));
      worker.work.set(leaseKey, step);
      try {
        const lease = coordinator.lease(leaseKey);
        if (!lease || lease.draining) break;
        for (const other of holdersOf(leaseKey, worker)) {
          violate('single-owner', `${worker.workerId} and ${other.workerId} both hand records of ${leaseKey}`);
        }
        const next = String(lease.checkpoint === null ? 1 : Number(lease.checkpoint) + 1);
        await clock.sleep(50 + random.next() * 200);
        if (!worker.alive || !coordinator.isHeld(leaseKey)) break;
        await coordinator.checkpoint(lease, next).then(
          () => {
            stats.checkpoints++;
            const acked = acknowledged.get(leaseKey);
            if (acked === undefined || compareNumericPositions(next, acked) > 0) acknowledged.set(leaseKey, next);
          },
          () => undefined,
        );
        await clock.sleep(500 + random.next() * 1_500);
      } finally {
        finish();
      }
    }
  };

  for (let i = 0; i < workerCount; i++) startWorker(i);

  // The fault schedule: a fault every few seconds of the fault phase, each drawn from the seed.
  const faultKinds = ALL_FAULTS.filter(
    (kind) => enabled(kind) && kind !== 'latency' && kind !== 'errors' && kind !== 'ambiguous' && kind !== 'drift' && kind !== 'mixedDurations' && kind !== 'lateLeases',
  );
  let nextWorkerIndex = workerCount;
  const pending: Array<() => void> = [];
  const living = (): SimWorker[] => workers.filter((worker) => worker.alive && !worker.stopping);
  if (enabled('lateLeases')) {
    // Drawn apart from the run's randomness: the rest of the run draws as it would without them.
    const lateRandom = seededRandom((config.seed * 31_337 + 7) >>> 0);
    const times = [200 + lateRandom.next() * 2_800, 3_000 + lateRandom.next() * (faultPhaseMs - 3_000), 3_000 + lateRandom.next() * (faultPhaseMs - 3_000)];
    times.forEach((at, i) =>
      scheduler.schedule(at, () =>
        pending.push(() => {
          const leaseKey = `late-${i}`;
          stats.faults++;
          void storage.createLease({ group: GROUP, leaseKey }).then(() => {
            const alive = living();
            const announcer = alive[Math.floor(lateRandom.next() * alive.length)];
            trace(`${scheduler.now.toFixed(0)} fault lateLeases created ${leaseKey}, announced by ${announcer?.workerId ?? 'nobody'}`);
            announcer?.coordinator.noteLeasesChanged();
          });
        }),
      ),
    );
  }
  const byIdOrder = (a: SimWorker, b: SimWorker): number => (a.workerId < b.workerId ? -1 : a.workerId > b.workerId ? 1 : 0);
  /** The living worker whose elector leads now; with no leader at the moment, the first by id (the next leader's likeliest place is no better guess). */
  const leaderOf = (among: readonly SimWorker[]): SimWorker | undefined => among.find((worker) => worker.elector.isLeader()) ?? [...among].sort(byIdOrder)[0];
  /**
   * `first` and the members after it in id order, a tenth of the group (at least two, never the whole
   * group); with `itsWatchers`, `first`'s watchers on the ring come first among them.
   */
  const withObservers = (first: SimWorker, among: readonly SimWorker[], itsWatchers = false): SimWorker[] => {
    // With failure domains, a mass crash is a domain lost at once: every live member of the victim's (never
    // the whole group); with watcher crashes too, the victim's watchers on other domains die with it.
    if (first.domain !== undefined) {
      const dead = new Set<SimWorker>(among.filter((worker) => worker.domain === first.domain));
      dead.add(first);
      if (itsWatchers) for (const worker of watchersAmong(first, among)) dead.add(worker);
      if (dead.size < among.length) return [...dead];
    }
    const ring = [...among].sort(byIdOrder);
    const size = Math.min(ring.length - 1, Math.max(2, Math.ceil(ring.length / 10)));
    const dead = new Set<SimWorker>([first]);
    if (itsWatchers) for (const worker of watchersAmong(first, among)) if (dead.size < size) dead.add(worker);
    const at = ring.indexOf(first);
    for (let i = 1; dead.size < size; i++) dead.add(ring[(at + i) % ring.length] as SimWorker);
    return [...dead];
  };
  /** The members that watch `watched` on the ring of the live members `among`, as the coordinators place them. */
  const watchersAmong = (watched: SimWorker, among: readonly SimWorker[]): SimWorker[] =>
    watchersOf(watched.workerId, among.map((worker) => worker.workerId), watcherCount, domainOf).map((workerId) => byId.get(workerId) as SimWorker);
  /** Each worker's failure domain as the coordinators read it, when the run has them. */
  const domainOf = failureDomains > 0 ? (workerId: string): string | undefined => byId.get(workerId)?.domain : undefined;
  /**
   * How many rounds of declarations beyond the first a crash of `dead` among `among` takes: a member whose
   * watchers all died is declared only after they are, by the watchers the ring then gives it, a lease
   * duration after those first see it (DESIGN section 6, guarantee 6). With W watchers, a member followed on
   * the ring by c crashed members waits floor(c / W) rounds.
   */
  const extraRounds = (dead: readonly SimWorker[], among: readonly SimWorker[]): number => {
    if (!watcherReads || among.length <= wholeRosterUpTo) return 0;
    const ring = ringOf(among);
    const crashed = new Set(dead.map((worker) => worker.workerId));
    let most = 0;
    ring.forEach((workerId, at) => {
      if (!crashed.has(workerId)) return;
      let following = 0;
      while (following < ring.length - 1 && crashed.has(ring[(at + 1 + following) % ring.length] as string)) following++;
      most = Math.max(most, Math.floor(following / watcherCount));
    });
    return most;
  };
  /** The ring of `among` (the live members) in the coordinators' order. */
  const ringOf = (among: readonly SimWorker[]): string[] => {
    if (among.length === 0) return [];
    const first = among[0] as SimWorker;
    const others = among.map((worker) => worker.workerId);
    // watchersOf with as many watchers as members gives the whole ring after `first`, in order.
    return [first.workerId, ...watchersOf(first.workerId, others, others.length, domainOf)];
  };
  /** Crashes whose declarations take more than one round (see `extraRounds`): when, and how many rounds more. */
  const cascades: Array<{ at: number; rounds: number }> = [];
  const noteCascade = (dead: readonly SimWorker[], among: readonly SimWorker[]): number => {
    const rounds = extraRounds(dead, among);
    if (rounds > 0) cascades.push({ at: scheduler.now, rounds });
    return rounds;
  };
  /**
   * Kills workers at one instant. Each comes back `restartAfterMs` later if the fault phase still runs: under a
   * new id, as a process with a random id would, while the group has room for one more id; in a group at
   * `limits.maxMembers`, under its own id (as a pod of a StatefulSet would), since a new one could not join
   * until the dead were removed.
   */
  const crash = (dead: readonly SimWorker[], restartAfterMs: number | null): void => {
    stats.mostCrashedAtOnce = Math.max(stats.mostCrashedAtOnce, dead.length);
    for (const worker of dead) {
      worker.alive = false;
      worker.clock.kill();
      if (restartAfterMs === null) continue;
      const index = nextWorkerIndex < limits.maxMembers ? nextWorkerIndex++ : worker.index;
      scheduler.schedule(scheduler.now + restartAfterMs, () => {
        if (scheduler.now < faultPhaseMs) pending.push(() => startWorker(index));
      });
    }
  };
  for (let at = 2_000 + random.next() * 3_000; at < faultPhaseMs && faultKinds.length > 0; at += 2_000 + random.next() * 6_000) {
    const kind = faultKinds[Math.floor(random.next() * faultKinds.length)] as FaultKind;
    const pick = random.next();
    const duration = leaseDurationMs * (0.3 + random.next() * 1.7);
    scheduler.schedule(at, () => {
      const alive = living();
      const victim = kind === 'leaderCrash' ? leaderOf(alive) : alive[Math.floor(pick * alive.length)];
      if (!victim && kind !== 'join') return;
      stats.faults++;
      trace(`${scheduler.now.toFixed(0)} fault ${kind} ${victim?.workerId ?? ''} for ${duration.toFixed(0)} ms`);
      switch (kind) {
        case 'crash':
          if (alive.length > 1) crash([victim as SimWorker], duration);
          return;
        case 'leaderCrash':
          if (alive.length > 1) {
            if ((victim as SimWorker).elector.isLeader()) stats.leaderCrashes++;
            crash([victim as SimWorker], duration);
          }
          return;
        case 'massCrash': {
          if (alive.length <= 1) return;
          const dead = withObservers(victim as SimWorker, alive);
          const rounds = noteCascade(dead, alive);
          trace(`${scheduler.now.toFixed(0)} fault massCrash (${rounds} extra rounds) kills ${dead.map((worker) => worker.workerId).join(' ')}`);
          crash(dead, duration);
          return;
        }
        case 'watcherCrash': {
          const watchers = watchersAmong(victim as SimWorker, alive);
          if (alive.length <= watchers.length + 1) return;
          const dead = [victim as SimWorker, ...watchers];
          noteCascade(dead, alive);
          trace(`${scheduler.now.toFixed(0)} fault watcherCrash kills ${dead.map((worker) => worker.workerId).join(' ')}`);
          crash(dead, duration);
          return;
        }
        case 'pause':
          (victim as SimWorker).clock.pauseUntil(Math.min(scheduler.now + duration, faultPhaseMs));
          return;
        case 'cutOff': {
          const plan = (victim as SimWorker).plan;
          plan.cutOff = true;
          scheduler.schedule(Math.min(scheduler.now + duration, faultPhaseMs), () => (plan.cutOff = false));
          return;
        }
        case 'slowListings': {
          const plan = (victim as SimWorker).plan;
          plan.listingStallMs = duration;
          scheduler.schedule(Math.min(scheduler.now + duration, faultPhaseMs), () => {
            if (plan.listingStallMs === duration) plan.listingStallMs = 0;
          });
          return;
        }
        case 'gracefulStop': {
          if (alive.length <= 1) return;
          const leaving = victim as SimWorker;
          leaving.stopping = true;
          pending.push(() => {
            void Promise.all([leaving.coordinator.stop(), leaving.elector.stop()]).then(() => {
              leaving.alive = false;
              leaving.clock.kill();
            });
          });
          return;
        }
        case 'join':
          if (workers.filter((worker) => worker.alive).length < workerCount + 4 && nextWorkerIndex < limits.maxMembers) {
            const index = nextWorkerIndex++;
            pending.push(() => startWorker(index));
          }
          return;
        default:
          return;
      }
    });
  }
  // The last blow, at the end of the fault phase: the leader and the members that observe it first crash
  // at once and stay dead, so that the quiet phase's bounds are the failover bounds of their leases and of
  // the leadership, measured from the crash.
  if (enabled('massCrash')) {
    scheduler.schedule(faultPhaseMs, () => {
      const alive = living();
      const leader = leaderOf(alive);
      if (!leader || alive.length <= 1) return;
      // Its watchers die with it when the run has watcher crashes: its leases then wait a round more.
      const dead = withObservers(leader, alive, enabled('watcherCrash'));
      stats.faults++;
      if (leader.elector.isLeader()) stats.leaderCrashes++;
      const rounds = noteCascade(dead, alive);
      trace(`${scheduler.now.toFixed(0)} fault massCrash of the leader ${leader.workerId} and its first observers (${rounds} extra rounds): ${dead.map((worker) => worker.workerId).join(' ')}`);
      crash(dead, null);
    });
  }

  // The last join, at the end of the fault phase too: a new worker joins as the quiet phase starts, so that
  // the balance bound measures how soon the members that read only their watched few see a join (the
  // roster digest's move, DESIGN section 4), not only how soon they see a death.
  if (enabled('join')) {
    scheduler.schedule(faultPhaseMs, () => {
      if (nextWorkerIndex >= limits.maxMembers) return;
      const index = nextWorkerIndex++;
      stats.faults++;
      trace(`${scheduler.now.toFixed(0)} fault join (the last) of a new worker`);
      pending.push(() => startWorker(index));
    });
  }

  const afterEach = (): void => {
    while (pending.length > 0) (pending.shift() as () => void)();
  };
  await scheduler.advanceTo(faultPhaseMs, afterEach);

  // Quiet phase: no new faults; pauses and cut-offs end, injected errors stop, latency stays.
  for (const worker of workers) {
    worker.plan.errorBeforeSend = 0;
    worker.plan.ambiguousAfterApply = 0;
    worker.plan.cutOff = false;
    worker.plan.listingStallMs = 0;
  }
  const quietFrom = scheduler.now;
  const live = living;
  const eligible = (leases: readonly LeaseRecord[]): LeaseRecord[] => {
    const all = new Map(leases.map((lease) => [lease.leaseKey, lease]));
    return leases.filter(
      (lease) =>
        lease.checkpoint !== Checkpoint.SHARD_END &&
        lease.parentKeys.every((parent) => all.get(parent) === undefined || all.get(parent)?.checkpoint === Checkpoint.SHARD_END),
    );
  };
  const unowned = (leases: readonly LeaseRecord[]): string[] =>
    eligible(leases)
      .map((lease) => lease.leaseKey)
      .filter((leaseKey) => holdersOf(leaseKey).every((worker) => worker.stopping));
  /** Whether the live workers can hold every eligible lease (capped workers hold at most their cap). */
  const capacity = (): number => live().reduce((sum, worker) => sum + worker.cap, 0);
  /** Every eligible lease held, or, when the live workers cannot hold them all, every live worker at its cap. */
  const owned = (leases: readonly LeaseRecord[]): boolean =>
    capacity() >= eligible(leases).length ? unowned(leases).length === 0 : live().every((worker) => worker.coordinator.heldLeases().length === worker.cap);
  /** No worker above its cap, and none two or more below another unless it is at its cap. */
  const balancedNow = (): boolean => {
    const counts = live().map((worker) => ({ held: worker.coordinator.heldLeases().length, cap: worker.cap }));
    const most = Math.max(...counts.map((count) => count.held));
    return counts.every((count) => count.held <= count.cap && (count.held >= most - 1 || count.held === count.cap));
  };
  // Leadership: a live worker leads within a lease duration of the last renewal of a leader that died or
  // stopped, seen by candidates that look every renewal interval (one to start the watch, one to find it
  // run out), with the clock-rate margin and latency.
  const electorRenewMs = leaseDurationMs / 3;
  const leaderBound = leaseDurationMs * (1 + maxClockDrift) + 2 * electorRenewMs * 1.05 + 3_500;
  let leaderAfterMs = -1;
  const noteLeader = (): void => {
    if (leaderAfterMs < 0 && live().some((worker) => worker.elector.isLeader())) leaderAfterMs = scheduler.now - quietFrom;
  };

  // Liveness: every eligible lease held by a live worker within a lease duration after its owner's last
  // heartbeat, plus the take ticks that declare it dead, list and take (DESIGN 6.6), with the clock-rate
  // margin, a heartbeat interval, a rejoin's first tick, and latency; and, for an owner that died with all
  // its watchers, a lease duration and two ticks more per round of declarations it waited for.
  const roundMs = leaseDurationMs * (1 + maxClockDrift) + 2 * takeIntervalMs * 1.05;
  const cascadeMs = Math.max(0, ...cascades.map(({ at, rounds }) => at - quietFrom + rounds * roundMs));
  const ownedBound = leaseDurationMs * (1 + maxClockDrift) + 3 * takeIntervalMs * 1.05 + renewIntervalMs + 3_500 + cascadeMs;
  let ownedAfterMs = -1;
  // From when faults stopped, or from a worker's self-fence since (see lastQuietFenceAt).
  while (scheduler.now - Math.max(quietFrom, lastQuietFenceAt) <= ownedBound) {
    noteLeader();
    const { leases } = await storage.listLeases(GROUP);
    if (owned(leases)) {
      ownedAfterMs = scheduler.now - quietFrom;
      break;
    }
    await scheduler.advance(100, afterEach);
  }
  if (ownedAfterMs < 0) {
    const { leases } = await storage.listLeases(GROUP);
    const missing = unowned(leases);
    // When the live workers cannot hold every eligible lease, the ones below their cap say what is missing.
    const belowCap = capacity() >= eligible(leases).length ? [] : live().filter((worker) => worker.coordinator.heldLeases().length < worker.cap);
    violate(
      'liveness',
      `${missing.length} eligible leases without a live holder ${ownedBound.toFixed(0)} ms after faults stopped${lastQuietFenceAt > quietFrom ? ` and a worker's self-fence at ${lastQuietFenceAt.toFixed(0)} ms` : ''}: ${missing.slice(0, 5).join(', ')}` +
        (belowCap.length > 0 ? `; below their cap, with ${eligible(leases).length} eligible leases and room for ${capacity()}: ${belowCap.map((worker) => `${worker.workerId} ${worker.coordinator.heldLeases().length}/${worker.cap}`).join(', ')}` : ''),
    );
  }

  // Balance: max - min <= 1 soon after every lease is owned, whatever the number of leases to move:
  // owners above their share hand the excess over unasked in one round (a tick to see it, a drain of at
  // most the handoff timeout, the recipient's next tick), and a round after that for what views that
  // differed left over.
  const handoffTimeoutMs = leaseDurationMs / 2;
  const balanceBound = ownedBound + handoffTimeoutMs + 4 * takeIntervalMs * 1.05;
  let balancedAfterMs = -1;
  while (scheduler.now - quietFrom <= balanceBound) {
    noteLeader();
    if (balancedNow() && owned((await storage.listLeases(GROUP)).leases)) {
      balancedAfterMs = scheduler.now - quietFrom;
      break;
    }
    await scheduler.advance(100, afterEach);
  }
  if (balancedAfterMs < 0) {
    const counts = live().map((worker) => ({ worker, held: worker.coordinator.heldLeases().length }));
    const most = Math.max(...counts.map((count) => count.held));
    // In a large group only the members off balance are named, and the most loaded one.
    const named = counts.length <= 32 ? counts : counts.filter((count) => count.held < most - 1 || count.held > count.worker.cap || count.held === most).slice(0, 32);
    const described = named.map(({ worker, held }) => `${worker.workerId}:${held}${Number.isFinite(worker.cap) ? `/${worker.cap}` : ''}`);
    violate('balance', `not balanced ${balanceBound.toFixed(0)} ms after faults stopped: ${described.join(' ')}${named.length < counts.length ? ` (of ${counts.length} workers)` : ''}`);
  }
  while (leaderAfterMs < 0 && scheduler.now - quietFrom <= leaderBound) {
    noteLeader();
    if (leaderAfterMs < 0) await scheduler.advance(100, afterEach);
  }
  if (leaderAfterMs < 0) violate('liveness', `no live worker led the group ${leaderBound.toFixed(0)} ms after faults stopped`);

  for (const [leaseKey, acked] of acknowledged) {
    const stored = (await storage.getLease(GROUP, leaseKey))?.checkpoint ?? null;
    if (stored === null || compareNumericPositions(stored, acked) < 0) {
      violate('checkpoint', `acknowledged checkpoint ${acked} of ${leaseKey} lost at the end: stored ${String(stored)}`);
    }
  }

  // Shut every live worker down for real, so nothing is left running.
  for (const worker of live()) {
    void worker.coordinator.stop();
    void worker.elector.stop();
  }
  await scheduler.advance(leaseDurationMs * 2, afterEach);
  for (const worker of workers) worker.clock.kill();

  return {
    seed: config.seed,
    workers: workerCount,
    leases: leaseCount,
    violations,
    ownedAfterMs,
    balancedAfterMs,
    leaderAfterMs,
    replay: replayCommand({ ...config, workers: workerCount, leases: leaseCount }),
    stats,
  };
}
