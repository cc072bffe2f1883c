/**
 * What the consumer simulation knows about its world and checks against it: every record put and every
 * hand-over of it, the shards and their lineage, and every write to the lease table. The simulation feeds
 * it; it reports each broken guarantee (DESIGN section 6) the moment it sees it. The entries it keeps (a
 * record, a shard, a stream) are declared in `consumer-ledger-entries.ts`.
 */
import type { MemoryWriteEvent } from '../memory/memory-storage.js';
import { compareNumericPositions } from '../position.js';
import { hasRewindRequest, REWIND_FIELDS, rewindRequestOf } from '../rewind.js';
import type { SourceRecord } from '../source.js';
import { Checkpoint, type LeaseRecord, type Position } from '../storage.js';
import type { RecordEntry, ShardEntry, StartingPoint, StreamEntry } from './consumer-ledger-entries.js';

export type { RecordEntry, ShardEntry, StartingPoint } from './consumer-ledger-entries.js';

/** A guarantee of the consumer runtime that the simulation checks. */
export type ConsumerGuarantee =
  | 'delivery' // every record that must be handed over is, at least once
  | 'order' // per key, first hand-overs in put order across generations
  | 'resurrection' // no lease created again for a finished or deleted shard; SHARD_END never moves back
  | 'deletion' // a lease is deleted only when its shard finished or left the stream
  | 'checkpoint' // no acknowledged checkpoint is lost or moves back
  | 'fencing' // a checkpoint is written only within the tenure that handed its records over
  | 'single-owner' // a batch is handed over only by the holder of the lease, and nobody else holds it
  | 'progress' // once faults stop, a shard with records to deliver is owned and moves
  | 'stop-deadline' // stop({ timeoutMs }) returns within timeoutMs
  | 'stop-handover' // a stop while the handler fails every call hands the leases over well within its deadline, none left to lapse
  | 'shard-end' // a worker that checkpointed a shard's end reports it (shard-ended) before its stop returns
  | 'signal' // a handler whose tenure ended sees its signal fired before anything else
  | 'handled' // every record handed over ends succeeded, dead-lettered, or skipped by the policy the user chose
  | 'skip' // nothing is skipped silently: no checkpoint passes, and no skip names, a record neither succeeded nor given up as configured
  | 'exactly-once' // with effects committed with their checkpoint, each record's effect is applied exactly once
  | 'start' // a lease is created at its stream's initial position (LATEST pinned once per stream), a child's also at its beginning
  | 'streams' // every lease names a shard of one stream, and its parent keys that shard's parents in the same stream
  | 'removed-stream' // a removed stream is not read past a refresh interval, and its leases go only after the grace, and then do
  | 'balance' // once faults stop, every eligible lease of every stream is held and the counts differ by at most one
  | 'rewind' // a rewind moves a lease only to its target, by a rewind the tool asked for; awaitRewind completes once faults stop
  | 'unhandled-rejection'; // no promise rejection is left unhandled (it would end a real process)

/** A check failed: which guarantee, and what happened. */
export type Violate = (guarantee: ConsumerGuarantee, detail: string) => void;

/** Compares two positions, or `undefined` when they cannot be ordered (`LATEST`, foreign formats). */
function compare(a: Position, b: Position): number | undefined {
  try {
    return compareNumericPositions(a, b);
  } catch {
    return undefined;
  }
}

const RECORD_POSITION = /^\d+$/;
const decoder = new TextDecoder();

/** The simulation's ledger: the world's facts, the runtime's observed behaviour, and the checks between them. */
export class ConsumerLedger {
  readonly records: RecordEntry[] = [];
  readonly shards = new Map<string, ShardEntry>();
  readonly #streams = new Map<string, StreamEntry>();
  /** The lease table as the store holds it, mirrored from every applied write. */
  readonly leases = new Map<string, LeaseRecord | null>();

  readonly #now: () => number;
  readonly #effectCommitted: ((entry: RecordEntry) => boolean) | undefined;
  readonly #wallOf: (ms: number) => number;
  readonly #violate: Violate;
  readonly #perKey = new Map<string, number>();
  /** Per key, the greatest record number handed over for the first time so far, and where. */
  readonly #firstHandedMax = new Map<string, RecordEntry>();
  /** Records by stream and position (positions repeat across streams: each has its own sequence). */
  readonly #byPosition = new Map<string, RecordEntry>();
  readonly #orderReported = new Set<string>();
  /** Per shard, how many records were handed over in all (replays included): its progress. */
  readonly #handovers = new Map<string, number>();
  /** Per shard and tenure (epoch), the checkpoints it started from (taken over, or pinned for LATEST). */
  readonly #tenureStart = new Map<string, Position[]>();
  /** Per shard and tenure (epoch), the greatest record position handed over in it. */
  readonly #handedInTenure = new Map<string, number>();
  /** Per shard, the greatest checkpoint the runtime reported as stored. */
  readonly #acknowledged = new Map<string, Position>();
  /** Shards whose lease reached SHARD_END, and shards whose lease was deleted. */
  readonly #ended = new Set<string>();
  readonly #deleted = new Set<string>();
  /** Whether the run's failure policy has a dead-letter handler: then nothing may be skipped without it. */
  readonly #deadLetterConfigured: boolean;
  readonly #skipReported = new Set<string>();
  /** How long a removed stream's leases must be kept, in virtual ms (its grace at the fastest clock rate). */
  readonly #removedStreamGraceMs: number;
  /** The rewinds the tool planned, by id: where they move a lease they name, and one that descends from a finished lease. */
  readonly #rewinds = new Map<string, { to: Position; descendantTo: Position }>();
  /** Per lease a rewind moved: the checkpoints written since its last move (an acknowledgement of an earlier one is stale). */
  readonly #writtenSinceRewind = new Map<string, Set<Position>>();
  /** Per rewind and key, the greatest record number handed over for the first time since the rewind. */
  readonly #replayedMax = new Map<string, RecordEntry>();

  /**
   * `start` is where the group starts: the one stream's (`''`) start, and that of each stream added
   * without its own. `removedStreamGraceMs` is the shortest virtual time a removed stream's leases are kept.
   */
  constructor(options: {
    start: StartingPoint;
    now: () => number;
    wallOf: (ms: number) => number;
    violate: Violate;
    deadLetterConfigured?: boolean;
    removedStreamGraceMs?: number;
    /**
     * Exactly-once runs: whether a record's effect was committed. A rewind that moves a lease past a record
     * whose handler succeeded but whose commit was refused (its tenure ended first) skips that effect, as
     * it skips a record never handled.
     */
    effectCommitted?: (entry: RecordEntry) => boolean;
  }) {
    this.#deadLetterConfigured = options.deadLetterConfigured ?? false;
    this.#effectCommitted = options.effectCommitted;
    this.#now = options.now;
    this.#wallOf = options.wallOf;
    this.#violate = options.violate;
    this.#removedStreamGraceMs = options.removedStreamGraceMs ?? Infinity;
    this.addStream('', options.start);
  }

  // ------------------------------------------------------------------ the world

  /** A stream of a multi-stream group, with where its shards start; it is listed from now on. */
  addStream(streamId: string, start: StartingPoint): void {
    this.#streams.set(streamId, {
      streamId,
      start,
      firstCreationWallMs: null,
      earliestCreatedTimestampMs: null,
      pinned: null,
      listed: true,
      unlistedAtMs: null,
      removedForGood: false,
    });
  }

  /** The group's list now names the stream, or no longer does (`forGood`: it will not come back). */
  listStream(streamId: string, listed: boolean, forGood = false): void {
    const stream = this.#stream(streamId);
    stream.listed = listed;
    stream.unlistedAtMs = listed ? null : this.#now();
    stream.removedForGood = !listed && forGood;
  }

  /** Whether the group's list names the stream now. */
  isListed(streamId: string): boolean {
    return this.#stream(streamId).listed;
  }

  /** When the stream left the group's list, or `null` while it is listed. */
  unlistedAt(streamId: string): number | null {
    return this.#stream(streamId).unlistedAtMs;
  }

  #stream(streamId: string): StreamEntry {
    const stream = this.#streams.get(streamId);
    if (!stream) throw new Error(`[testing] the simulation has no stream ${JSON.stringify(streamId)}`);
    return stream;
  }

  addShard(shardId: string, parentShardIds: readonly string[], resharded: boolean, streamId = ''): void {
    const at = this.#now();
    this.#stream(streamId);
    this.shards.set(shardId, {
      shardId,
      streamId,
      parentShardIds,
      childShardIds: [],
      createdAtMs: at,
      createdWallMs: this.#wallOf(at),
      resharded,
      closedAtMs: null,
      trimmedAtMs: null,
      records: [],
    });
    for (const parentShardId of parentShardIds) this.shard(parentShardId).childShardIds.push(shardId);
  }

  closeShard(shardId: string): void {
    this.shard(shardId).closedAtMs = this.#now();
  }

  trimShard(shardId: string): void {
    this.shard(shardId).trimmedAtMs = this.#now();
  }

  /** The lease keys of a stream's shards, oldest first. */
  shardsOf(streamId: string): string[] {
    return [...this.shards.values()].filter((shard) => shard.streamId === streamId).map((shard) => shard.shardId);
  }

  shard(shardId: string): ShardEntry {
    const shard = this.shards.get(shardId);
    if (!shard) throw new Error(`[testing] the simulation has no shard ${shardId}`);
    return shard;
  }

  addRecord(partitionKey: string, shardId: string, position: Position, arrivedWallMs: number, poison = false): RecordEntry {
    const n = (this.#perKey.get(partitionKey) ?? 0) + 1;
    this.#perKey.set(partitionKey, n);
    const entry: RecordEntry = {
      index: this.records.length,
      partitionKey,
      n,
      shardId,
      position,
      arrivedWallMs,
      firstHandedAtMs: null,
      handovers: 0,
      poison,
      succeededAtMs: null,
      deadLetteredAtMs: null,
      skippedAtMs: null,
      replayOf: null,
      replayHandedAtMs: null,
      rewinds: 0,
      skippedByRewind: false,
    };
    this.records.push(entry);
    this.#byPosition.set(this.#positionKey(shardId, position), entry);
    this.shard(shardId).records.push(entry.index);
    return entry;
  }

  // ------------------------------------------------------------------ when the group was born, and what it owes

  /**
   * The group's birth on the wall clock (of its one stream): for LATEST, the earliest `AT_TIMESTAMP` a
   * created lease carried (the runtime pins LATEST to the moment the first leases were made), else the
   * first lease creation.
   */
  get birthWallMs(): number | null {
    return this.birthWallMsOf('');
  }

  /** A stream's birth on the wall clock, as {@link birthWallMs} for the group: each stream is born on its own. */
  birthWallMsOf(streamId: string): number | null {
    const stream = this.#stream(streamId);
    if (stream.start.kind === 'LATEST' && stream.earliestCreatedTimestampMs !== null) return stream.earliestCreatedTimestampMs;
    return stream.firstCreationWallMs;
  }

  /**
   * Whether a record must reach `processBatch`: all with TRIM_HORIZON; with a timestamp (given, or the
   * birth for LATEST) those that arrived at or after it; every record of a shard made by resharding after
   * the birth; and none that the stream trimmed before anyone read it. Each stream by its own start and
   * birth.
   */
  required(entry: RecordEntry): boolean {
    const shard = this.shard(entry.shardId);
    if (shard.trimmedAtMs !== null && (entry.firstHandedAtMs === null || entry.firstHandedAtMs > shard.trimmedAtMs)) return false;
    const { start } = this.#stream(shard.streamId);
    if (start.kind === 'TRIM_HORIZON') return true;
    const birth = this.birthWallMsOf(shard.streamId);
    // Never read yet: with LATEST nothing is owed until its birth fixes where it starts; with a timestamp
    // the records from it are owed all the same (a stream added while the group had no leader is still to read).
    if (birth === null) return start.kind === 'AT_TIMESTAMP' && entry.arrivedWallMs >= start.timestampMs;
    if (shard.resharded && shard.createdWallMs >= birth) return true;
    const from = start.kind === 'AT_TIMESTAMP' ? start.timestampMs : birth;
    return entry.arrivedWallMs >= from;
  }

  /**
   * Whether a record is owed now: required, and of a stream still in the group (a stream removed for good
   * is no longer read, so neither its later records nor those it had not delivered yet can be owed).
   */
  owes(entry: RecordEntry): boolean {
    const shard = this.shard(entry.shardId);
    if (this.#stream(shard.streamId).removedForGood || entry.skippedByRewind) return false;
    // A rewind's replay is owed whatever the start was, as long as the stream still holds the shard.
    return (entry.replayOf !== null && shard.trimmedAtMs === null) || this.required(entry);
  }

  /** Whether a record still waits for a hand-over: it never had one, or none since a rewind moved its lease back before it. */
  awaitsHandover(entry: RecordEntry): boolean {
    return entry.firstHandedAtMs === null || (entry.replayOf !== null && entry.replayHandedAtMs === null && this.shard(entry.shardId).trimmedAtMs === null);
  }

  /** The record at a position of a shard, if the shard's stream has it. */
  recordAt(shardId: string, position: Position): RecordEntry | undefined {
    return this.#byPosition.get(this.#positionKey(shardId, position));
  }

  /** Positions repeat across streams: a record is found by its shard's stream and its position. */
  #positionKey(shardId: string, position: Position): string {
    return `${this.shards.get(shardId)?.streamId ?? ''}\u0000${position}`;
  }

  /** Whether a record was handled: succeeded, dead-lettered, or skipped by policy. */
  handled(entry: RecordEntry): boolean {
    return entry.succeededAtMs !== null || entry.deadLetteredAtMs !== null || entry.skippedAtMs !== null;
  }

  /**
   * The records still to finish, by shard: owed (never handed over), or handed over and neither succeeded
   * nor given up. A shard whose stream trimmed it is excused the second kind: nothing is left to retry.
   */
  unfinished(): Map<string, RecordEntry[]> {
    const unfinished = new Map<string, RecordEntry[]>();
    for (const entry of this.records) {
      if (!this.owes(entry)) continue;
      if (!this.awaitsHandover(entry) && (this.handled(entry) || this.shard(entry.shardId).trimmedAtMs !== null)) continue;
      const entries = unfinished.get(entry.shardId);
      if (entries) entries.push(entry);
      else unfinished.set(entry.shardId, [entry]);
    }
    return unfinished;
  }

  /** The records that must be handed over and were not yet, by shard. */
  owed(): Map<string, RecordEntry[]> {
    const owed = new Map<string, RecordEntry[]>();
    for (const entry of this.records) {
      if (!this.awaitsHandover(entry) || !this.owes(entry)) continue;
      const entries = owed.get(entry.shardId);
      if (entries) entries.push(entry);
      else owed.set(entry.shardId, [entry]);
    }
    return owed;
  }

  /** Whether a shard no longer holds back its children: its lease ended, it left the stream, or it closed with nothing owed. */
  done(shardId: string, owed: ReadonlyMap<string, RecordEntry[]>): boolean {
    const shard = this.shard(shardId);
    // A lease that carries a rewind request is about to be read again: it holds its children back.
    const lease = this.leases.get(shardId);
    if (lease && hasRewindRequest(lease)) return false;
    return this.#ended.has(shardId) || shard.trimmedAtMs !== null || (shard.closedAtMs !== null && !owed.has(shardId));
  }

  // ------------------------------------------------------------------ what the runtime does

  /**
   * A batch reaches `processBatch`: order per key across generations (first hand-overs only; replays
   * are fine), and the tenure's reach, for the fencing check of its checkpoints.
   */
  handOver(shardId: string, fencingToken: number, records: readonly SourceRecord[], worker: string): void {
    const at = this.#now();
    const tenure = `${shardId}#${fencingToken}`;
    // A child starts only after every parent reached SHARD_END (or left the stream), whatever keys it holds.
    for (const parent of records.length > 0 ? (this.shards.get(shardId)?.parentShardIds ?? []) : []) {
      if (this.#ended.has(parent) || this.shard(parent).trimmedAtMs !== null || this.#orderReported.has(`${shardId} ${parent}`)) continue;
      this.#orderReported.add(`${shardId} ${parent}`);
      this.#violate('order', `${worker} handed over records of ${shardId} before its parent ${parent} reached SHARD_END (lease ${describeLease(this.leases.get(parent))})`);
    }
    for (const record of records) {
      const entry = this.recordAt(shardId, record.position);
      if (!entry) {
        this.#violate('delivery', `${worker} handed over a record the stream never had: position ${record.position} of ${shardId}`);
        continue;
      }
      if (entry.shardId !== shardId) {
        this.#violate('delivery', `${worker} handed over record ${entry.partitionKey}#${entry.n} of ${entry.shardId} as a record of ${shardId}`);
      }
      // The simulation's records carry their index: a record of another stream at the same position tells.
      const index = decoder.decode(record.data);
      const put = RECORD_POSITION.test(index) ? this.records[Number(index)] : entry;
      if (put !== entry && put) {
        this.#violate('streams', `${worker} handed over record ${put.partitionKey}#${put.n} of ${put.shardId} as the record at ${record.position} of ${shardId}`);
      }
      entry.handovers++;
      this.#handovers.set(shardId, (this.#handovers.get(shardId) ?? 0) + 1);
      if (RECORD_POSITION.test(record.position)) {
        this.#handedInTenure.set(tenure, Math.max(this.#handedInTenure.get(tenure) ?? 0, Number(record.position)));
      }
      if (entry.replayOf !== null && entry.replayHandedAtMs === null) {
        // A replay is checked as first hand-overs are, per rewind: its own first hand-overs per key in order.
        this.#replayed(entry, worker, at);
        entry.firstHandedAtMs ??= at;
        continue;
      }
      if (entry.firstHandedAtMs !== null) continue;
      entry.firstHandedAtMs = at;
      const latest = this.#firstHandedMax.get(entry.partitionKey);
      if (latest && latest.n > entry.n) {
        // One report per key and pair of shards: a whole batch out of order is one fault, not ten.
        const pair = `${entry.partitionKey} ${entry.shardId} ${latest.shardId}`;
        if (this.#orderReported.has(pair)) continue;
        this.#orderReported.add(pair);
        this.#violate(
          'order',
          `record ${entry.partitionKey}#${entry.n} (${entry.shardId} at ${entry.position}) was first handed over by ${worker} after ${entry.partitionKey}#${latest.n} (${latest.shardId} at ${latest.position}, first handed over at ${latest.firstHandedAtMs?.toFixed(0) ?? '?'} ms)`,
        );
      } else {
        this.#firstHandedMax.set(entry.partitionKey, entry);
      }
    }
  }

  /** The handler returned with these records of the shard done. */
  succeeded(shardId: string, records: readonly SourceRecord[], worker: string): void {
    for (const record of records) {
      const entry = this.recordAt(shardId, record.position);
      if (!entry) continue; // reported by handOver
      if (entry.poison) this.#violate('handled', `${worker}'s handler of ${shardId} claimed poison record ${entry.partitionKey}#${entry.n} at ${entry.position} done`);
      entry.succeededAtMs ??= this.#now();
    }
  }

  /** The dead-letter handler accepted these records. */
  deadLettered(shardId: string, positions: readonly Position[], worker: string): void {
    for (const position of positions) {
      const entry = this.recordAt(shardId, position);
      if (!entry || entry.shardId !== shardId || entry.handovers === 0) {
        this.#violate('handled', `${worker} dead-lettered position ${position} of ${shardId}, which ${!entry ? 'the stream never had' : entry.shardId !== shardId ? `belongs to ${entry.shardId}` : 'was never handed to the handler'}`);
        continue;
      }
      entry.deadLetteredAtMs ??= this.#now();
    }
  }

  /** The runtime reported a record skipped; with a dead-letter handler, it must have accepted the record first. */
  skipped(shardId: string, position: Position, deadLettered: boolean, worker: string): void {
    const entry = this.recordAt(shardId, position);
    if (!entry || entry.shardId !== shardId) {
      this.#violate('skip', `${worker} skipped position ${position} of ${shardId}, which is not a record of that shard`);
      return;
    }
    if (this.#deadLetterConfigured && (!deadLettered || entry.deadLetteredAtMs === null)) {
      this.#violate('skip', `${worker} skipped record ${entry.partitionKey}#${entry.n} of ${shardId} at ${position} without the dead-letter handler accepting it`);
    }
    entry.skippedAtMs ??= this.#now();
  }

  /** How many records of the shard were handed over so far, replays included. */
  handovers(shardId: string): number {
    return this.#handovers.get(shardId) ?? 0;
  }

  /** The runtime reported a checkpoint as stored. */
  acknowledged(shardId: string, position: Position): void {
    // Heard after a rewind moved the lease back, of a checkpoint written before it: what it stood for is undone.
    if (this.#writtenSinceRewind.get(shardId)?.has(position) === false) return;
    const previous = this.#acknowledged.get(shardId);
    const order = previous === undefined ? 1 : compare(position, previous);
    if (order !== undefined && order > 0) this.#acknowledged.set(shardId, position);
  }

  /** Every write the store applies, at the instant it applies. */
  onWrite(event: MemoryWriteEvent): void {
    if (event.kind !== 'lease') return;
    const { leaseKey, before, after } = event;
    this.leases.set(leaseKey, after);
    if (before === null && after !== null) this.#created(after);
    else if (before !== null && after === null) this.#removed(before);
    else if (before !== null && after !== null) this.#updated(before, after);
    if (after?.checkpoint === Checkpoint.SHARD_END) this.#ended.add(leaseKey);
  }

  #created(lease: LeaseRecord): void {
    const at = this.#wallOf(this.#now());
    const shard = this.shards.get(lease.leaseKey);
    if (!shard) {
      this.#violate('streams', `lease ${lease.leaseKey} created (parents [${lease.parentKeys.join(', ')}]), which names no shard of any stream of the group`);
    } else {
      const stream = this.#stream(shard.streamId);
      stream.firstCreationWallMs ??= at;
      const timestamp = lease.checkpoint === null ? undefined : Checkpoint.timestampOf(lease.checkpoint);
      if (timestamp !== undefined) stream.earliestCreatedTimestampMs = Math.min(stream.earliestCreatedTimestampMs ?? Infinity, timestamp);
      this.#checkCreated(lease, shard, stream);
    }
    if (this.#ended.has(lease.leaseKey) || this.#deleted.has(lease.leaseKey)) {
      this.#violate(
        'resurrection',
        `lease of ${lease.leaseKey} created again (checkpoint ${String(lease.checkpoint)}, version ${lease.version}) after it ${this.#ended.has(lease.leaseKey) ? 'reached SHARD_END' : 'was deleted'}`,
      );
    }
    this.#checkAcknowledged(lease);
  }

  /**
   * A lease names a shard of one stream with that shard's parents, and starts where its stream starts: an
   * initial shard of the stream at the stream's initial position (for LATEST one pinned moment per
   * stream), a shard of resharding there too or at its own beginning.
   */
  #checkCreated(lease: LeaseRecord, shard: ShardEntry, stream: StreamEntry): void {
    const { leaseKey, checkpoint } = lease;
    const parents = [...lease.parentKeys].sort();
    const expected = [...shard.parentShardIds].sort();
    if (parents.length !== expected.length || parents.some((parent, i) => parent !== expected[i])) {
      this.#violate('streams', `lease of ${leaseKey} created with parents [${lease.parentKeys.join(', ')}], but the shard's parents are [${shard.parentShardIds.join(', ')}]`);
    }
    const { start } = stream;
    let startsThere: boolean;
    if (start.kind === 'TRIM_HORIZON') startsThere = checkpoint === Checkpoint.TRIM_HORIZON;
    else if (start.kind === 'AT_TIMESTAMP') startsThere = checkpoint === Checkpoint.atTimestamp(start.timestampMs);
    else {
      startsThere = checkpoint !== null && Checkpoint.timestampOf(checkpoint) !== undefined && (stream.pinned === null || stream.pinned === checkpoint);
      if (startsThere) stream.pinned ??= checkpoint;
    }
    if (!startsThere && (!shard.resharded || checkpoint !== Checkpoint.TRIM_HORIZON)) {
      const where = start.kind === 'LATEST' ? `LATEST${stream.pinned === null ? '' : `, pinned at ${stream.pinned}`}` : start.kind === 'AT_TIMESTAMP' ? Checkpoint.atTimestamp(start.timestampMs) : start.kind;
      this.#violate(
        'start',
        `lease of ${leaseKey} created at ${String(checkpoint)}, though ${stream.streamId === '' ? 'the group' : `stream ${stream.streamId}`} starts at ${where}${shard.resharded ? ' and a child at its beginning' : ''}`,
      );
    }
  }

  #removed(lease: LeaseRecord): void {
    this.#deleted.add(lease.leaseKey);
    const shard = this.shards.get(lease.leaseKey);
    if (lease.checkpoint === Checkpoint.SHARD_END || !shard || shard.trimmedAtMs !== null) return;
    const stream = this.#stream(shard.streamId);
    if (stream.unlistedAtMs === null) {
      this.#violate(
        'deletion',
        `lease of ${lease.leaseKey} deleted at checkpoint ${String(lease.checkpoint)} (owner ${String(lease.owner)}, version ${lease.version}) though the shard neither ended nor left the stream${stream.streamId === '' ? '' : ', and its stream is listed'}`,
      );
      return;
    }
    // A stream that left the group's list: its leases are kept for the grace period, on the leader's clock.
    const unlistedForMs = this.#now() - stream.unlistedAtMs;
    if (unlistedForMs < this.#removedStreamGraceMs) {
      this.#violate(
        'removed-stream',
        `lease of ${lease.leaseKey} deleted at checkpoint ${String(lease.checkpoint)} (owner ${String(lease.owner)}, version ${lease.version}) ${unlistedForMs.toFixed(0)} ms after its stream left the list, within the grace of ${this.#removedStreamGraceMs.toFixed(0)} ms`,
      );
    }
  }

  /** The leases of a stream that remain in the lease table now. */
  leasesOf(streamId: string): LeaseRecord[] {
    const leases: LeaseRecord[] = [];
    for (const [leaseKey, lease] of this.leases) if (lease && this.shards.get(leaseKey)?.streamId === streamId) leases.push(lease);
    return leases;
  }

  #updated(before: LeaseRecord, after: LeaseRecord): void {
    const { leaseKey } = after;
    if (after.epoch < before.epoch) this.#violate('fencing', `epoch of ${leaseKey} went from ${before.epoch} to ${after.epoch}`);
    // A tenure begins at the checkpoint it took the lease at (or pinned for LATEST): what lies before that
    // is the tenure's to checkpoint without handing it over (a reader that starts at a timestamp skips it).
    // A timestamp in the future stands for every record that arrives before it, so it is resolved when used.
    const tenure = `${leaseKey}#${after.epoch}`;
    // A rewind moves a lease once: its request written again on a lease it moved already would replace a
    // later rewind's request, or move the lease back a second time over what was read since the replay.
    const requested = rewindRequestOf(after);
    if (requested !== undefined && requested.id !== rewindRequestOf(before)?.id && after.metadata[REWIND_FIELDS.rewound] === requested.id) {
      this.#violate('rewind', `rewind ${requested.id} requested again on ${leaseKey}, which it moved already (checkpoint ${String(after.checkpoint)}, version ${after.version})`);
    }
    if (this.#rewindOf(before, after)) {
      this.#rewound(after, tenure);
      return;
    }
    if (after.checkpoint !== null && (after.epoch !== before.epoch || Checkpoint.timestampOf(after.checkpoint) !== undefined)) {
      this.#tenureStart.set(tenure, [...(this.#tenureStart.get(tenure) ?? []), after.checkpoint]);
    }
    if (after.checkpoint !== null) this.#writtenSinceRewind.get(leaseKey)?.add(after.checkpoint);
    if (before.checkpoint === after.checkpoint) return;
    if (before.checkpoint === Checkpoint.SHARD_END) {
      this.#violate('resurrection', `SHARD_END checkpoint of ${leaseKey} moved back to ${String(after.checkpoint)} (owner ${String(after.owner)})`);
    } else if (before.checkpoint !== null) {
      const order = after.checkpoint === null ? -1 : compare(after.checkpoint, before.checkpoint);
      if (order !== undefined && order < 0) {
        this.#violate('checkpoint', `checkpoint of ${leaseKey} moved back from ${before.checkpoint} to ${String(after.checkpoint)} (owner ${String(after.owner)})`);
      }
    }
    if (after.owner !== before.owner || after.epoch !== before.epoch) {
      this.#violate('fencing', `checkpoint of ${leaseKey} changed by a write that also changed its owner (${String(before.owner)} -> ${String(after.owner)})`);
    } else if (after.checkpoint !== null && RECORD_POSITION.test(after.checkpoint)) {
      // A checkpoint claims that its tenure handed every record up to it to the handler: one written in a
      // tenure that never handed that far over comes from an earlier tenure (or from nowhere).
      const handed = this.#handedInTenure.get(tenure);
      const started = Math.max(0, ...(this.#tenureStart.get(tenure) ?? []).map((position) => this.#covered(leaseKey, position)));
      if (Number(after.checkpoint) > Math.max(handed ?? 0, started)) {
        this.#violate(
          'fencing',
          `checkpoint ${after.checkpoint} of ${leaseKey} written in tenure ${after.epoch} of ${String(after.owner)}, which started at ${started} and had handed over ${handed === undefined ? 'nothing' : `records up to ${handed}`}${this.#writtenSinceRewind.has(leaseKey) ? ' (since a rewind moved the lease last)' : ''}`,
        );
      }
    }
    this.#checkHandledBefore(after);
    this.#checkAcknowledged(after);
  }

  /** The rewind tool planned a rewind: its id, and where it moves the leases it names. */
  rewindPlanned(rewindId: string, to: Position): void {
    // A lease that descends from a finished lease the rewind moves back goes to the rewind's time, or to its start.
    this.#rewinds.set(rewindId, { to, descendantTo: Checkpoint.timestampOf(to) !== undefined ? to : Checkpoint.TRIM_HORIZON });
  }

  /**
   * Whether a write is a rewind's move of the lease (it records a rewind's id the lease did not carry): by a
   * rewind the tool planned, to its target, or it is reported.
   */
  #rewindOf(before: LeaseRecord, after: LeaseRecord): boolean {
    const rewindId = after.metadata[REWIND_FIELDS.rewound];
    if (rewindId === undefined || rewindId === before.metadata[REWIND_FIELDS.rewound]) return false;
    const rewind = this.#rewinds.get(rewindId);
    if (!rewind) {
      this.#violate('rewind', `lease of ${after.leaseKey} moved from ${String(before.checkpoint)} to ${String(after.checkpoint)} by rewind ${rewindId}, which the tool never planned`);
    } else if (after.checkpoint !== rewind.to && after.checkpoint !== rewind.descendantTo) {
      this.#violate('rewind', `rewind ${rewindId} moved lease of ${after.leaseKey} from ${String(before.checkpoint)} to ${String(after.checkpoint)}, not to its target ${rewind.to} (or ${rewind.descendantTo} for a descendant)`);
    }
    return true;
  }

  /**
   * A rewind moved the lease: every record after the new checkpoint is owed again, each record it passes
   * that was not handled is skipped by the operator, the tenure starts anew there (a checkpoint of it
   * claims only what was handed over since), and the shard, if it had ended, is to be read again.
   */
  #rewound(lease: LeaseRecord, tenure: string): void {
    const { leaseKey, checkpoint } = lease;
    const rewindId = lease.metadata[REWIND_FIELDS.rewound] as string;
    this.#writtenSinceRewind.set(leaseKey, new Set(checkpoint === null ? [] : [checkpoint]));
    this.#acknowledged.delete(leaseKey);
    this.#tenureStart.set(tenure, checkpoint === null ? [] : [checkpoint]);
    this.#handedInTenure.delete(tenure);
    if (checkpoint !== Checkpoint.SHARD_END) this.#ended.delete(leaseKey);
    const shard = this.shards.get(leaseKey);
    if (!shard || checkpoint === Checkpoint.SHARD_END) return;
    const covered = this.#covered(leaseKey, checkpoint);
    for (const index of shard.records) {
      const entry = this.records[index] as RecordEntry;
      if (Number(entry.position) <= covered) {
        // Moved past: the operator skips it, or the replay an earlier rewind owed of it (and, in an
        // exactly-once run, an effect that was not committed).
        if (!this.handled(entry) || this.#effectCommitted?.(entry) === false) entry.skippedByRewind = true;
        if (entry.replayHandedAtMs === null) entry.replayOf = null;
        continue;
      }
      entry.replayOf = rewindId;
      entry.replayHandedAtMs = null;
      entry.skippedByRewind = false;
      entry.rewinds++;
    }
  }

  /** A record owed again since a rewind is handed over: per key, in put order among that rewind's replays. */
  #replayed(entry: RecordEntry, worker: string, at: number): void {
    entry.replayHandedAtMs = at;
    const key = `${entry.replayOf ?? ''}\u0000${entry.partitionKey}`;
    const latest = this.#replayedMax.get(key);
    if (!latest || latest.n < entry.n) {
      this.#replayedMax.set(key, entry);
      return;
    }
    const pair = `${entry.replayOf ?? ''} ${entry.partitionKey} ${entry.shardId} ${latest.shardId}`;
    if (this.#orderReported.has(pair)) return;
    this.#orderReported.add(pair);
    this.#violate(
      'order',
      `record ${entry.partitionKey}#${entry.n} (${entry.shardId} at ${entry.position}) was handed over again by ${worker} after rewind ${entry.replayOf ?? '?'} later than ${entry.partitionKey}#${latest.n} (${latest.shardId} at ${latest.position}, handed over again at ${latest.replayHandedAtMs?.toFixed(0) ?? '?'} ms)`,
    );
  }

  /**
   * A checkpoint says every record up to it is done: each record it covers that had to be handed over
   * must have succeeded or been given up as configured (dead-lettered, or skipped by policy). `SHARD_END`
   * covers the whole shard, unless the stream trimmed it (then nothing was left to read).
   */
  #checkHandledBefore(lease: LeaseRecord): void {
    const { leaseKey, checkpoint } = lease;
    const shard = this.shards.get(leaseKey);
    if (!shard || checkpoint === null) return;
    let upTo: number;
    if (checkpoint === Checkpoint.SHARD_END) {
      if (shard.trimmedAtMs !== null) return;
      upTo = Infinity;
    } else if (RECORD_POSITION.test(checkpoint)) {
      upTo = Number(checkpoint);
    } else {
      return;
    }
    for (const index of shard.records) {
      const entry = this.records[index] as RecordEntry;
      if (Number(entry.position) > upTo || !this.required(entry) || this.handled(entry) || entry.skippedByRewind) continue;
      const key = `${leaseKey} ${entry.position}`;
      if (this.#skipReported.has(key)) continue;
      this.#skipReported.add(key);
      this.#violate(
        'skip',
        `checkpoint ${checkpoint} of ${leaseKey} (owner ${String(lease.owner)}, epoch ${lease.epoch}) passes record ${entry.partitionKey}#${entry.n} at ${entry.position}${entry.poison ? ' (poison)' : ''}, ` +
          `which was ${entry.firstHandedAtMs === null ? 'never handed over' : `handed over ${entry.handovers} times`} and neither succeeded nor given up`,
      );
    }
  }

  /** The greatest record position a checkpoint stands for: its own, or the last record before its timestamp. */
  #covered(shardId: string, checkpoint: Position | null): number {
    if (checkpoint === null) return 0;
    if (RECORD_POSITION.test(checkpoint)) return Number(checkpoint);
    const timestamp = Checkpoint.timestampOf(checkpoint);
    if (timestamp === undefined) return 0;
    let covered = 0;
    for (const index of this.shards.get(shardId)?.records ?? []) {
      const entry = this.records[index] as RecordEntry;
      if (entry.arrivedWallMs < timestamp) covered = Math.max(covered, Number(entry.position));
    }
    return covered;
  }

  #checkAcknowledged(lease: LeaseRecord): void {
    const acknowledged = this.#acknowledged.get(lease.leaseKey);
    if (acknowledged === undefined) return;
    const order = lease.checkpoint === null ? -1 : compare(lease.checkpoint, acknowledged);
    if (order !== undefined && order < 0) {
      this.#violate('checkpoint', `acknowledged checkpoint ${acknowledged} of ${lease.leaseKey} lost: stored ${String(lease.checkpoint)} (version ${lease.version})`);
    }
  }

  /** At the end: every acknowledged checkpoint of a lease that still exists is stored. */
  checkAcknowledgedAtEnd(): void {
    for (const [leaseKey, acknowledged] of this.#acknowledged) {
      const lease = this.leases.get(leaseKey);
      if (!lease) continue; // deleted: the deletion check judged it
      const order = lease.checkpoint === null ? -1 : compare(lease.checkpoint, acknowledged);
      if (order !== undefined && order < 0) {
        this.#violate('checkpoint', `acknowledged checkpoint ${acknowledged} of ${leaseKey} lost at the end: stored ${String(lease.checkpoint)}`);
      }
    }
  }

  /** At the end: one violation per shard with records handed over that neither succeeded nor were given up. */
  checkHandled(): void {
    const byShard = new Map<string, RecordEntry[]>();
    for (const entry of this.records) {
      if (entry.firstHandedAtMs === null || this.handled(entry) || !this.owes(entry) || this.shard(entry.shardId).trimmedAtMs !== null) continue;
      byShard.set(entry.shardId, [...(byShard.get(entry.shardId) ?? []), entry]);
    }
    for (const [shardId, entries] of byShard) {
      const first = entries[0] as RecordEntry;
      this.#violate(
        'handled',
        `${entries.length} records of ${shardId} were handed over but neither succeeded nor were given up (first: ${first.partitionKey}#${first.n} at ${first.position}${first.poison ? ', poison' : ''}, handed over ${first.handovers} times); lease ${describeLease(this.leases.get(shardId))}`,
      );
    }
  }

  /** At the end: one violation per shard whose owed records never reached the handler. */
  checkDelivery(): void {
    for (const [shardId, entries] of this.owed()) {
      const shard = this.shard(shardId);
      const lease = this.leases.get(shardId);
      const first = entries[0] as RecordEntry;
      const all = shard.records.length;
      this.#violate(
        'delivery',
        `${entries.length} of ${all} records of ${shardId} ${first.firstHandedAtMs === null ? 'never handed over' : `not handed over again since rewind ${first.replayOf ?? '?'}`} (first: ${first.partitionKey}#${first.n} at ${first.position}, arrived ${first.arrivedWallMs - (this.birthWallMsOf(shard.streamId) ?? 0)} ms after birth); ` +
          `shard ${shard.closedAtMs === null ? 'open' : 'closed'}, parents [${shard.parentShardIds.join(', ')}], lease ${describeLease(lease)}`,
      );
    }
  }
}

/** A lease for a message: owner, epoch, checkpoint, or why there is none. */
export function describeLease(lease: LeaseRecord | null | undefined): string {
  if (lease === undefined) return 'never created';
  if (lease === null) return 'deleted';
  return `owner ${String(lease.owner)} epoch ${lease.epoch} checkpoint ${String(lease.checkpoint)} parents [${lease.parentKeys.join(', ')}]`;
}
