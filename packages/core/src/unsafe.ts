/**
 * The deliberately unsafe switches: each brings back one defect the runtime once had, so that the
 * simulations can prove they catch it. They are in no published option type: a test attaches them to an
 * options object with `withUnsafe` (exported only by `@leasehold/core/testing`), and the component given
 * that object reads them with `unsafeOf`. Never set in production.
 */

/** The lease coordinator's switches. */
export interface CoordinatorUnsafe {
  /** The holder keeps writing after its lease may have expired (no self-fencing). */
  skipSelfFencing?: boolean | undefined;
  /** A member counts as expired after this multiple of its lease duration (below 1: too early). */
  expiryFactor?: number | undefined;
  /** A checkpoint is fenced by worker and key only, not by the tenure (fencing token) it was made in. */
  checkpointPerKey?: boolean | undefined;
  /** A member's expiry is judged by the judge's own lease duration, not the longer of the two. */
  ownDurationOnly?: boolean | undefined;
  /**
   * A release refused because another client wrote the lease without taking it (an operator's rewind
   * request) is taken for a loss, not sent again on the record the conflict carries: the lease lapses.
   */
  releaseWithoutRetry?: boolean | undefined;
  /**
   * A stopping worker's handover that leaves the lease its own (the recipient left meanwhile, or other
   * clients' writes, such as an operator's rewind requests, kept moving its version) is given up instead
   * of written free: the lease is left naming the stopped worker, to lapse.
   */
  stopHandoverKeeps?: boolean | undefined;
  /**
   * Member writes others must look at (joins, deaths, requests, held counts) never advance the roster
   * digest: members that read only the digest and their watched few learn of them at the next whole read.
   */
  skipRosterDigest?: boolean | undefined;
  /**
   * A read of the roster digest's moves (a store with `getRosterMoves`) takes the move for read without
   * reading the members it names: joins, leaves, deaths and held counts are seen only at the next whole read.
   */
  movesUnread?: boolean | undefined;
  /** The watchers' ring keeps the members declared dead: a member whose watchers all died is watched by nobody alive. */
  ringKeepsTheDead?: boolean | undefined;
  /**
   * Watched members are read at the take ticks only, never when their heartbeat is due: a watcher first
   * sees a heartbeat up to a tick after it was written, and declares a crashed member that much later.
   */
  dueReadsSkipped?: boolean | undefined;
  /**
   * The membership's reads between the take ticks (at a watched member's heartbeat, or its moment to be
   * named a suspect) run beside the tick's reads: one answered late takes effect after a read sent later,
   * and leaves the view older than that read.
   */
  readsOutOfTurn?: boolean | undefined;
  /**
   * The watchers' ring ignores the members' failure domains (`failureDomain`): a domain lost at once may take
   * a member with all its watchers, which is then taken over a round later than the spread ring promises.
   */
  domainsIgnored?: boolean | undefined;
  /**
   * A declarer deals a dead member's leases, and owners offer theirs, to members that did not answer a
   * suspect named in the roster in the time they had: to members that died in the same crash, where the
   * leases wait for a second declaration.
   */
  unansweredDealt?: boolean | undefined;
  /**
   * A dead member's lease whose deal or free by its declarer conflicted is written again on the record the
   * conflict carries, whoever that names: a lease another worker took meanwhile is written to another
   * member, or free, under it.
   */
  freeRetryIgnoresOwner?: boolean | undefined;
  /**
   * Without a change feed, the declarer of a dead member takes its leases beyond its own portion whatever
   * its `maxLeasesPerWorker`: it holds more than its cap.
   */
  adoptionIgnoresCap?: boolean | undefined;
  /**
   * The leases a listing shows naming this worker count as its own in the plan of moves, those it gives
   * back beyond its `maxLeasesPerWorker` too: a member at its cap handed one more lease (an offer and an
   * answer crossing) offers one of its own to make room, asks for one back once below, and is over its cap
   * again; the group does not settle.
   */
  givenBackPlanned?: boolean | undefined;
  /**
   * A member never lists because the members' counts fall short of the leases its last listing found: a
   * lease dealt to a member that does not take it (its hold lapsed, its take failed) waits for a listing
   * something else brings, up to the safety-net interval.
   */
  shortfallIgnored?: boolean | undefined;
  /**
   * With a change feed, a member two or more below another never lists for it, below its share or not:
   * only the members above offer leases on their counts, and a member below its share that no member
   * above sees two below it (its count on its way from a leave or asks, or a member at its cap) waits for
   * a listing something else brings.
   */
  belowIgnored?: boolean | undefined;
  /**
   * The portions a cold start's deal gave the other members count as on their way to them until this
   * worker's next listing, not for five take ticks: a member that never takes its portion (its listing
   * failed for good, its take never landed and it stopped looking) hides those leases from the counts'
   * shortfall, and they wait for a listing something else brings, up to the safety-net interval.
   */
  coldDealTrusted?: boolean | undefined;
  /**
   * A leave's note of the leases it handed over is taken for one naming every lease the member had, and
   * its count for leases on their way to their recipients, for as long as the note is read: a lease the
   * leaver wrote free, or handed to a member that never read it, waits for a listing something else
   * brings, up to the safety-net interval.
   */
  noteTrusted?: boolean | undefined;
  /**
   * A newcomer's asks count, for the members that read them, as leases on their way to it for as long as
   * they were read once, even after the newcomer dropped them, not for the few ticks its givers take to
   * answer: a lease it asked for and never held (a giver that refused, a handover lost) hides a lease
   * without a live owner, which waits for a listing something else brings, up to the safety-net interval.
   */
  asksTrusted?: boolean | undefined;
  /**
   * A listing that cannot read a lease (corrupt) forgets the tenure this worker let go of it (a handover
   * that did not drain in time, a loss): once repaired, a lease still naming this incarnation in that
   * tenure is held as if handed to it, in the same tenure, and the let-go tenure's deferred handover
   * writes it to another member under it.
   */
  letGoForgetsUnreadable?: boolean | undefined;
  /**
   * A stop waits for the take tick in flight before it drains any lease: meanwhile the readers go on taking
   * new batches, of a stream that left the worker's list too (it no longer learns of that once stopping).
   */
  drainAfterTakeTick?: boolean | undefined;
  /**
   * A stop returns without waiting for a handover to a member that asked or was offered a lease, begun
   * before the stop: its write may still be on its way when the process exits, and the lease lapses.
   */
  stopSkipsHandoffs?: boolean | undefined;
  /**
   * A take tick judges the listed owners on a roster read before its listing instead of after it: a member
   * that joined while the listing was on its way, and took leases, is missing from that roster, so its
   * leases look ownerless and are taken from it while it holds them.
   */
  rosterBeforeListing?: boolean | undefined;
  /**
   * A large group's cold start deals from the listing it read while the members were joining, whatever
   * changed in the group's leases since: a lease created or released meanwhile waits, unheld, for the
   * next listing that something else brings.
   */
  coldListingIgnoresNews?: boolean | undefined;
  /**
   * With a change feed, a large group's cold start waits for its dealer's deal however long it takes: a
   * dealer that dies, stops or fails to list before it deals leaves the other members waiting, holding
   * nothing, for a listing that something else brings.
   */
  coldDealerAwaited?: boolean | undefined;
  /**
   * With a change feed, a lease another declarer wrote to a member this worker had declared dead a moment
   * before (that declarer's view still showed it alive) is left as it is: it names a dead incarnation whose
   * declarer dealt its leases already, and waits for the counts' shortfall, take ticks later.
   */
  lateDealIgnored?: boolean | undefined;
  /**
   * With failure domains, a dead member's leases are dealt to the other members of its domain even when
   * that domain looks lost whole (another of its members doubted too): a host lost at once has its first
   * declared member's leases written to members of the same host, where they wait for a second declaration.
   */
  lostDomainsDealt?: boolean | undefined;
  /**
   * A stop waits for the take tick's listing in flight however long the store takes to answer it (before
   * it drains and hands its leases over): a listing stalled past the stop's timeout leaves the leases to
   * lapse.
   */
  stopWaitsForListing?: boolean | undefined;
  /**
   * A newer record of a held lease that carries an operator's rewind request, adopted after a write's
   * conflict or from a listing, is not announced to the runtime: an owner that held the lease from a record
   * older than the request (and saw the request's mark before it held it) never applies it.
   */
  adoptedRequestIgnored?: boolean | undefined;
  /**
   * The change feed's subscription names no owners: every worker hears every handover of the group (the
   * feed before it was addressed). Safe, and what it costs is the point: at 1,000 x 100,000 a dealt cold
   * start delivers 10^8 changes, 100,000 to each worker to find its 100.
   */
  feedUnaddressed?: boolean | undefined;
  /**
   * The change feed's subscription names this worker alone, not the members it watches or declared dead:
   * watchers keep no leases of the members they watch, and a declarer hears nothing of the leases written
   * to a member it declared dead a moment before.
   */
  feedAddressedToSelf?: boolean | undefined;
  /**
   * A handover to a member that asked for the lease, or was chosen for it, is written even when the
   * member's record says it began to stop since: a lease written to it after its stop withdrew its
   * requests names a member gone, found only at a listing.
   */
  handoverToLeaving?: boolean | undefined;
}

/** Every switch of {@link CoordinatorUnsafe} by name, for tools that take them by name (the type checker keeps the list whole). */
export const COORDINATOR_UNSAFE_KEYS = Object.keys({
  skipSelfFencing: true,
  expiryFactor: true,
  checkpointPerKey: true,
  ownDurationOnly: true,
  releaseWithoutRetry: true,
  stopHandoverKeeps: true,
  skipRosterDigest: true,
  movesUnread: true,
  ringKeepsTheDead: true,
  dueReadsSkipped: true,
  readsOutOfTurn: true,
  domainsIgnored: true,
  unansweredDealt: true,
  freeRetryIgnoresOwner: true,
  adoptionIgnoresCap: true,
  givenBackPlanned: true,
  shortfallIgnored: true,
  belowIgnored: true,
  coldDealTrusted: true,
  noteTrusted: true,
  asksTrusted: true,
  letGoForgetsUnreadable: true,
  drainAfterTakeTick: true,
  stopSkipsHandoffs: true,
  rosterBeforeListing: true,
  coldListingIgnoresNews: true,
  coldDealerAwaited: true,
  lateDealIgnored: true,
  lostDomainsDealt: true,
  stopWaitsForListing: true,
  adoptedRequestIgnored: true,
  feedUnaddressed: true,
  feedAddressedToSelf: true,
  handoverToLeaving: true,
} satisfies Record<keyof CoordinatorUnsafe, true>) as ReadonlyArray<keyof CoordinatorUnsafe>;

/** The leader elector's switches. */
export interface ElectorUnsafe {
  /** The leader keeps acting after its term may have expired (no self-fencing). */
  skipSelfFencing?: boolean | undefined;
}

/** Shard sync's switches. */
export interface ShardSyncUnsafe {
  /**
   * Only a shard whose direct child has a lease counts as retired, and creates ask the store to create a
   * deleted key again, as the contract once allowed: finished ancestors come back.
   */
  oneGenerationSync?: boolean;
  /** Create in listing order whatever the parents' state, and never retry a parent a child names. */
  birthRace?: boolean;
  /** List shards before leases and delete every lease the listing does not name, at the listed version. */
  deleteOnStaleView?: boolean;
  /** Delete a finished lease whose parent still has a lease: a rewind of the parent cannot find it to read again. */
  deleteBeforeParents?: boolean;
  /** Delete the lease of a shard gone from the stream while its parent still has a lease: its children become eligible before the parent is done. */
  goneBeforeParents?: boolean;
  /** Settling a rewind leaves a descendant nobody holds that never started unwritten: a take on a listing from before the request reads it first. */
  unstartedLeftAlone?: boolean;
  /**
   * A lease learned from a create's conflict, after the round's roster read, is judged on that roster: a
   * member that joined meanwhile and took it looks dead, and a rewind request on it is applied directly.
   */
  lateRecordJudged?: boolean;
  /** Create leases without a checkpoint, so that a child's reader starts at the initial position. */
  childrenAtInitialPosition?: boolean;
  /** Wait for the listing and roster read in flight after the term ended: a stop waits for a slow store. */
  stopWaitsForListing?: boolean;
}

/** A multi-stream group's sync's switches. */
export interface MultiStreamSyncUnsafe extends ShardSyncUnsafe {
  /** Each stream's sync sees every stream's leases and takes another stream's for a shard gone from its own. */
  crossStreamSync?: boolean;
  /** A stream is judged gone on the list resolved before the round's listing, whatever the list says after it. */
  formerOnStaleList?: boolean;
  /** A stream off the list whose only leases left cannot be read back has its birth forgotten, as one with none. */
  birthForgetsUnreadable?: boolean;
}

/** The consumer runtime's switches (it passes the coordinator's, the elector's and shard sync's on). */
export interface ConsumerUnsafe {
  /** A child shard with no checkpoint starts at the consumer's initial position, not at the child's start. */
  childrenAtInitialPosition?: boolean;
  /** Shard sync looks one generation down: finished ancestors whose leases were cleaned up are created again. */
  oneGenerationSync?: boolean;
  /** Workers take before the first shard sync, sync creates leases in listing order, and a pump creates a merge child without its other parent. */
  birthRace?: boolean;
  /** The leader deletes every lease the shard listing does not name, at the version it listed, whoever owns it. */
  deleteOnStaleView?: boolean;
  /** The leader deletes a finished lease while its parent still has a lease, so a rewind of the parent replays its grandchildren before it. */
  deleteBeforeParents?: boolean;
  /** The leader deletes the lease of a shard gone from the stream (trimmed) while its parent is still read: the grandchildren are read before the parent's last records. */
  goneBeforeParents?: boolean;
  /**
   * Passed to shard sync and given to the simulation's rewind tool: settling a rewind leaves a descendant
   * of a finished lease unwritten when nobody holds it and it never started, so a worker that listed the
   * group before the finished lease's request takes it at the version it listed and reads it first.
   */
  unstartedLeftAlone?: boolean;
  /**
   * Passed to shard sync: a lease its round learns of from a create's conflict is judged on the roster it
   * read before: a member that joined meanwhile and took it looks dead, and the round applies a rewind
   * request on its lease directly while it reads (its child is read before the parent is read again).
   */
  lateRecordJudged?: boolean;
  /** A checkpoint is fenced by worker and key only, not by the tenure (fencing token) it was made in. */
  checkpointPerKey?: boolean;
  /** A pump that failed for good keeps its lease, renewed with nobody reading. */
  keepFailedPump?: boolean;
  /** Passed to the coordinator and the elector: no self-fencing. */
  skipSelfFencing?: boolean;
  /** Passed to the coordinator: a release refused by a rewind request's write is taken for a loss, and the lease lapses. */
  releaseWithoutRetry?: boolean;
  /** Passed to the coordinator: a listing that cannot read a lease forgets the tenure the worker let go of it (see the coordinator's switch). */
  letGoForgetsUnreadable?: boolean;
  /** Passed to the coordinator: a stopping worker's handover that leaves the lease its own is given up, the lease left to lapse. */
  stopHandoverKeeps?: boolean;
  /** Passed to the coordinator and shard sync: a stop waits for a take tick's or the leader's listing in flight, however slow. */
  stopWaitsForListing?: boolean;
  /** Passed to the coordinator: a newer record of a held lease carrying a rewind request is adopted without announcing it. */
  adoptedRequestIgnored?: boolean;
  /** Passed to the coordinator: a stop drains its leases only once its take tick in flight is done, its readers reading on meanwhile. */
  drainAfterTakeTick?: boolean;
  /** Passed to the coordinator: a stop returns without waiting for a handover to a member that asked or was offered a lease, begun before it. */
  stopSkipsHandoffs?: boolean;
  /** Passed to the coordinator: a handover is written to a member whose record says it began to stop since it asked or was chosen. */
  handoverToLeaving?: boolean;
  /**
   * An owner's rewind whose write's outcome is unknown (applied, and not read back) lets a reader start
   * before a retry read the lease back: it reads on from the checkpoint of before the rewind, and its
   * checkpoints move the rewound lease forward past records it was to hand over again.
   */
  rewindUnknownReadsOn?: boolean;
  /** A handler's report of its first failed record (`{ failedAt }`) is ignored: the whole batch counts as done. */
  ignoreBatchResponse?: boolean;
  /**
   * A handler call that checkpointed part of its records (`checkpointWith` or `checkpoint`) and then
   * failed has them handed over again: only a call that committed all of its records counts as done. Nor
   * are records the lease's stored checkpoint covers in the tenure (an earlier call's unknown outcome that
   * applied, learned from a later conflict) taken out of a retry.
   */
  retryCheckpointedPrefix?: boolean;
  /**
   * A failed batch's retries and backoff go on through a drain or a rewind's pause: a stop or a handoff
   * waits for a failing handler until its timeout, and the lease is left to lapse.
   */
  retryThroughDrain?: boolean;
  /**
   * A drain (a graceful stop, a handover) does not wait for a shard's end being finished: once `SHARD_END`
   * is checkpointed the stop hands the finished lease on and returns before the end is reported.
   */
  drainCutsEnd?: boolean;
  /**
   * A child's lease whose create throws at its parent's end (refused before it was sent) ends the parent's
   * reader there: `SHARD_END` is checkpointed, but the end is not reported and the lease not given back.
   */
  childCreateEndsReader?: boolean;
  /**
   * A rewind that found nothing to apply (its request was applied before the lease came here) starts the
   * reader without looking at the lease's parents, even while the reader's own start is reading them: a
   * child rewound while it was handed over is read before its parent is read again.
   */
  rewindStartSkipsParents?: boolean;
  /** Records given up under a poison policy are skipped without calling its dead-letter handler. */
  skipWithoutDeadLetter?: boolean;
  /**
   * A multi-stream group's shard sync of each stream sees every stream's leases, and takes another
   * stream's lease for a shard gone from its own stream (as when lease keys did not name their stream):
   * it deletes other streams' leases that nobody holds.
   */
  crossStreamSync?: boolean;
  /**
   * The leader judges a stream gone, and deletes its leases past the grace, on the list it resolved before
   * the round's listing: a stream added back while the listing was slow to answer loses its leases (and
   * their checkpoints) though it is listed.
   */
  formerOnStaleList?: boolean;
  /**
   * A stream off the group's list whose leases left in the listing cannot be read back (corrupt) counts as
   * one with no lease left: its birth is forgotten, and added back it is born again with `LATEST` pinned
   * anew, so that a shard whose lease the first birth had not created yet starts at the new pin and the
   * records that came between are never read.
   */
  birthForgetsUnreadable?: boolean;
  /**
   * A shard's readers of before a rewind (paused for it, or ended earlier) still let their batches'
   * contexts checkpoint: a handler that kept one moves the rewound checkpoint forward again, past records
   * it was to hand over again.
   */
  checkpointAfterRewind?: boolean;
  /**
   * A reader starts from the resume hint its lease was handed over with whatever checkpoint the hint was
   * made for (its tenure and age are still checked): one made for a batch the last owner never finished
   * skips the rest of that batch.
   */
  resumeHintAnyCheckpoint?: boolean;
  /**
   * Given to the simulation's rewind tool (`applyRewind`): a lease that records the tool's rewind as applied
   * but carries a later rewind's request counts as not reached yet, so the tool writes its request again
   * over the later one: that rewind is lost, and the owner moves the lease back a second time.
   */
  rewindRequestedAgain?: boolean;
  /**
   * Given to the simulation's rewind tool (`planRewind`, `applyRewind`): a rewind that reads a finished
   * lease again also moves the leases whose line runs through a lease that cannot be read back, before
   * that lease (which may descend from the finished one) carries the request: one is taken and read
   * before its ancestors are read again.
   */
  rewindBehindUnreadable?: boolean;
}


/** Every switch of every component; each reads its own. */
export type UnsafeSwitches = CoordinatorUnsafe & ElectorUnsafe & ConsumerUnsafe;

const registry = new WeakMap<object, UnsafeSwitches>();

/**
 * Attaches unsafe switches to `options` and returns the same object, for a simulation's own tests: the
 * component given it brings back the defects they name. `undefined` or no switch attaches nothing.
 */
export function withUnsafe<T extends object>(options: T, switches: UnsafeSwitches | undefined): T {
  if (switches !== undefined && Object.values(switches).some((value) => value !== undefined && value !== false)) registry.set(options, switches);
  return options;
}

/** The switches attached to `options` (none for options no test marked). */
export function unsafeOf(options: object): UnsafeSwitches {
  return registry.get(options) ?? {};
}
