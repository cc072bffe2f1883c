/**
 * `leasehold status`: a group's members, its leases with the liveness of each lease's owner, and its
 * leader, once or refreshed in place; with the failure domains its members name, whether they protect it. Liveness is judged from the roster as core's workers judge it: a
 * member is alive while its record keeps moving, expired once this command watched it not moving for its
 * lease duration, dead once declared dead; a lease is held while its owner is an alive member in the
 * incarnation the lease names. Records that cannot be read back are listed with their error instead of
 * failing the command; stalls the workers reported are shown per lease.
 */
import { Checkpoint, parseStreamLeaseKey, type HandoffRequest, type LeaderRecord, type LeaseRecord, type MemberRecord, type Storage } from '@leasehold/core';
import { parseStreamBirths, RECORD_FORMAT, STREAMS_FIELD } from '@leasehold/core/adapter';
import { openBackend } from '../connect.js';
import { failureDomainOf, failureDomainsOf, renderDomains, type FailureDomainsView } from '../domains.js';
import { isNewerFormat, stallOf, type Stall } from '../health.js';
import { memberLiveness, monotonicNow, Observer, ownerLiveness, unreadableMembers, type Age, type MemberLiveness, type Now, type OwnerLiveness } from '../observe.js';
import { checkGroup, formatDuration, readGroup, readKnownGroup, table, type GroupState, type Io } from '../shared.js';
import { parseStorageUrl } from '@leasehold/connect';

/** Options of {@link status}. */
export interface StatusOptions {
  readonly storage: string;
  readonly group: string;
  readonly json: boolean;
  readonly watch: boolean;
  readonly intervalMs: number;
  /** With `watch`: stop after this many screens; `undefined` runs until interrupted. */
  readonly iterations: number | undefined;
  /** Watch the roster this long before the first screen, so that members that stopped heartbeating show as expired. */
  readonly observeMs: number;
  /**
   * The text's members table shows at most this many members (those a person must see first, see
   * {@link membersToShow}) and counts the others; `--json` always gives every member.
   */
  readonly memberRows: number;
}

/** One lease as `--json` shows it: the stored record (its `format` and `incarnation` included) plus its owner's liveness. */
export interface LeaseView extends LeaseRecord {
  /** The liveness of the owner in the incarnation the lease names (see `OwnerLiveness`), or `null` for a free lease. */
  readonly ownerLiveness: OwnerLiveness | null;
  /** Whether the lease is held: its owner is an alive member in the lease's incarnation. */
  readonly held: boolean;
  /** The stall its worker reports on it (from `leasehold.stalledSince` and `leasehold.stalledReason`), or `null`. */
  readonly stalled: Stall | null;
}

/** A member of the roster as `--json` shows it: the stored record plus what this command observed. */
export interface MemberView extends MemberRecord {
  /** `alive`, `expired` (watched not moving for its lease duration) or `dead` (declared dead, or left). */
  readonly liveness: MemberLiveness;
  /** Milliseconds since this command saw its record move; `null` until it has seen a move. */
  readonly sinceMovedMs: number | null;
  /** Its record has not moved for at least this long: the time since this command first saw its version. */
  readonly sinceMovedAtLeastMs: number;
  /** How many leases of the group name it in its current incarnation, as stored. */
  readonly leases: number;
  /** Whether it is the group's leader (the leader record names its worker id). */
  readonly leader: boolean;
  /** The failure domain it names (`leasehold.failureDomain` in its metadata), or `null` for none. */
  readonly failureDomain: string | null;
}

/** A stored record that cannot be read back, as `--json` shows it. */
export interface CorruptView {
  /** What it is: a lease, a member, or the leader record. */
  readonly kind: 'lease' | 'member' | 'leader';
  /** The lease key, the worker id, or `null` for the leader record. */
  readonly key: string | null;
  /** The error's message: what is wrong with it. */
  readonly error: string;
}

/** The whole `--json` document of one screen. */
export interface StatusView {
  readonly group: string;
  readonly storage: string;
  /** How long this command had watched the roster when the screen was drawn, in milliseconds. */
  readonly observedMs: number;
  readonly members: MemberView[];
  readonly leases: LeaseView[];
  readonly leader: (LeaderRecord & { readonly ageMs: number | null; readonly ageAtLeastMs: number }) | null;
  /** The group's records that cannot be read back (leases, members, the leader record): nobody writes them. */
  readonly corrupt: CorruptView[];
  /** A multi-stream group's streams (from its lease keys and the leader's record of births); empty otherwise. */
  readonly streams: StreamView[];
  /**
   * The failure domains its members name, with their members and leases, whether the workers spread the
   * watchers' ring by them, and why not when they give no protection; `null` when no member names one.
   */
  readonly failureDomains: FailureDomainsView | null;
  /** The group's roster digest (0 if never advanced), when the store keeps one; absent otherwise. */
  readonly rosterDigest?: number;
}

/** One stream of a multi-stream group as `--json` shows it. */
export interface StreamView {
  readonly streamId: string;
  readonly leases: number;
  readonly held: number;
  /** Leases at `SHARD_END`, waiting for the leader to clean them up. */
  readonly finished: number;
  /** Whether the leader recorded the stream's first complete shard sync; `null` when it recorded nothing of it (a stream removed, or not seen yet). */
  readonly born: boolean | null;
}

const CLEAR_SCREEN = '\u001b[H\u001b[2J';

/** Prints the group's status; with `watch`, again every `intervalMs` until interrupted or `iterations` screens. */
export async function status(options: StatusOptions, io: Io): Promise<void> {
  checkGroup(options.group);
  const target = parseStorageUrl(options.storage);
  const backend = await openBackend(target);
  try {
    const memberObserver = new Observer(REAL_TIME.now);
    const leaderObserver = new Observer(REAL_TIME.now);
    const watched = await watchGroup(backend.storage, options.group, target.display, memberObserver, options.observeMs, io.signal);
    const { started } = watched;
    let { state } = watched;
    for (let screen = 1; ; screen++) {
      const rosterDigest = await readRosterDigest(backend.storage, options.group);
      const view = viewOf(options.group, target.display, state, memberObserver, leaderObserver, REAL_TIME.now() - started, rosterDigest);
      io.out(render(view, options, io, screen));
      if (!options.watch || screen === options.iterations || io.signal.aborted) return;
      if (!(await pause(options.intervalMs, io.signal))) return;
      state = await readGroup(backend.storage, options.group);
    }
  } finally {
    await backend.close();
  }
}

/** The group's roster digest, or `undefined` for a store that keeps none. */
export function readRosterDigest(storage: Storage, group: string): Promise<number | undefined> {
  return storage.getRosterDigest?.(group) ?? Promise.resolve(undefined);
}

/** The clock and the pauses of {@link watchGroup}; tests pass virtual ones. */
export interface WatchTime {
  readonly now: Now;
  /** Waits `ms`, or less when the signal fires; tells whether to go on. */
  readonly pause: (ms: number, signal: AbortSignal) => Promise<boolean>;
}

const REAL_TIME: WatchTime = { now: monotonicNow, pause };

/**
 * Reads the group, then watches its roster for `observeMs` (when above 0), feeding every read's members to
 * `observer`. The watch is counted from the first read's answer, when this process first saw each member's
 * version, not from the command's start: on a slow connection or a busy machine the first read can take
 * longer than the whole window, and a member that stood still throughout would be judged on what is left
 * of it and shown alive. Returns the last read and when the watch began (on `time`'s clock).
 */
export async function watchGroup(
  storage: Storage,
  group: string,
  display: string,
  observer: Observer,
  observeMs: number,
  signal: AbortSignal,
  time: WatchTime = REAL_TIME,
): Promise<{ state: GroupState; started: number }> {
  let state = await readKnownGroup(storage, group, display);
  // Without a watch, the first screen is the first sighting.
  if (observeMs <= 0) return { state, started: time.now() };
  observeMembers(observer, state);
  // Not before the first sighting: no member is watched longer than the watch says it lasted.
  const started = time.now();
  // Watch the roster first: a member is judged expired only once watched for its lease duration.
  const deadline = started + observeMs;
  const poll = Math.max(20, Math.min(500, Math.floor(observeMs / 10)));
  for (;;) {
    const left = deadline - time.now();
    if (left <= 0 || !(await time.pause(Math.min(poll, left), signal))) break;
    state = await readGroup(storage, group);
    observeMembers(observer, state);
  }
  return { state, started };
}

function observeMembers(observer: Observer, state: GroupState): Map<string, Age> {
  return observer.observe(state.members.map((member) => ({ key: member.workerId, version: member.version })));
}

function render(view: StatusView, options: StatusOptions, io: Io, screen: number): string {
  if (options.json) return `${JSON.stringify(view, null, options.watch ? undefined : 2)}\n`;
  const text = `${renderText(view, options.memberRows)}\n`;
  if (!options.watch) return text;
  if (io.isTTY) return `${CLEAR_SCREEN}${text}`;
  return screen === 1 ? text : `\n${text}`;
}

/**
 * One screen of a group: its members judged by `members` (fed this read), its leases with their owners'
 * liveness, its leader aged by `leaders`, its corrupt records and streams. `leasehold dashboard` builds
 * its snapshots on it too.
 */
export function viewOf(
  group: string,
  storage: string,
  state: GroupState,
  members: Observer,
  leaders: Observer,
  observedMs: number,
  rosterDigest: number | undefined,
): StatusView {
  const wallNow = Date.now();
  const ages = observeMembers(members, state);
  const leaderAge = state.leader === null ? undefined : leaders.observe([{ key: 'leader', version: state.leader.version }]).get('leader');
  const byId = new Map(state.members.map((member) => [member.workerId, member]));
  const liveness = new Map(state.members.map((member) => [member.workerId, memberLiveness(member, ages.get(member.workerId))]));
  const unreadable = unreadableMembers(state.corruptMembers);
  const leases = state.leases.map((lease): LeaseView => {
    const owner = ownerLiveness(lease, byId, liveness, unreadable);
    return { ...lease, ownerLiveness: owner, held: owner === 'alive', stalled: stallOf(lease, wallNow) };
  });
  const holder = state.leader?.holder ?? null;
  // Counted once per lease rather than once per member and lease: a group of 1,000 members over 100,000
  // leases would otherwise take a hundred million comparisons per screen.
  const naming = new Map<string, number>();
  for (const lease of state.leases) {
    if (lease.owner !== null) naming.set(`${lease.owner}\n${lease.incarnation}`, (naming.get(`${lease.owner}\n${lease.incarnation}`) ?? 0) + 1);
  }
  const memberViews = state.members.map((member): MemberView => {
    const age = ages.get(member.workerId);
    return {
      ...member,
      liveness: liveness.get(member.workerId) ?? 'alive',
      sinceMovedMs: round(age?.ageMs ?? null),
      sinceMovedAtLeastMs: round(age?.atLeastMs ?? 0),
      leases: naming.get(`${member.workerId}\n${member.incarnation}`) ?? 0,
      leader: member.workerId === holder,
      failureDomain: failureDomainOf(member),
    };
  });
  return {
    group,
    storage,
    observedMs: Math.round(observedMs),
    members: memberViews,
    leases,
    leader: state.leader === null ? null : { ...state.leader, ...ageFields(leaderAge) },
    streams: streamsOf(leases, state.leader),
    failureDomains: failureDomainsOf(memberViews),
    corrupt: [
      ...state.corruptMembers.map((error): CorruptView => ({ kind: 'member', key: error.workerId ?? null, error: error.message })),
      ...state.corrupt.map((error): CorruptView => ({ kind: 'lease', key: error.leaseKey ?? null, error: error.message })),
      ...(state.corruptLeader === null ? [] : [{ kind: 'leader' as const, key: null, error: state.corruptLeader.message }]),
    ],
    ...(rosterDigest === undefined ? {} : { rosterDigest }),
  };
}

/** The streams a multi-stream group's lease keys and leader record name, with their lease counts. */
function streamsOf(leases: readonly LeaseView[], leader: LeaderRecord | null): StreamView[] {
  // A multi-stream group's leader records its streams' births; a one-stream group has no such field.
  if (leader?.metadata[STREAMS_FIELD] === undefined) return [];
  const births = parseStreamBirths(leader.metadata[STREAMS_FIELD]);
  const byStream = new Map<string, { leases: number; held: number; finished: number }>();
  for (const streamId of Object.keys(births)) byStream.set(streamId, { leases: 0, held: 0, finished: 0 });
  for (const lease of leases) {
    const parsed = parseStreamLeaseKey(lease.leaseKey);
    if (!parsed) continue;
    const counts = byStream.get(parsed.streamId) ?? { leases: 0, held: 0, finished: 0 };
    counts.leases++;
    if (lease.held) counts.held++;
    if (lease.checkpoint === Checkpoint.SHARD_END) counts.finished++;
    byStream.set(parsed.streamId, counts);
  }
  return [...byStream.entries()]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([streamId, counts]) => ({ streamId, ...counts, born: births[streamId] === undefined ? null : births[streamId]?.b === 1 }));
}

function ageFields(age: Age | undefined): { ageMs: number | null; ageAtLeastMs: number } {
  return { ageMs: age === undefined ? null : round(age.ageMs), ageAtLeastMs: round(age?.atLeastMs ?? 0) };
}

function round(ms: number): number;
function round(ms: number | null): number | null;
function round(ms: number | null): number | null {
  return ms === null ? null : Math.round(ms);
}

function showAge(ageMs: number | null, atLeastMs: number): string {
  if (ageMs !== null) return formatDuration(ageMs);
  return atLeastMs === 0 ? '—' : `≥${formatDuration(atLeastMs)}`;
}

function showStall(stall: Stall | null): string {
  if (stall === null) return '-';
  return stall.forMs === null ? `${stall.reason} since ${stall.since}` : `${stall.reason} ${formatDuration(stall.forMs)}`;
}

function showRequests(requests: readonly HandoffRequest[]): string {
  return requests.length === 0 ? '-' : requests.map((request) => `${request.leaseKey}←${request.from}`).join(', ');
}

const OWNER_WORDS: Record<OwnerLiveness, string> = {
  alive: 'alive',
  expired: 'expired',
  dead: 'dead',
  'other-incarnation': 'gone (rejoined)',
  'not-a-member': 'gone (no member)',
  unreadable: 'unknown (member unreadable)',
};

/**
 * The members the text's table shows, in worker id order: all of them when they fit in `limit` rows;
 * otherwise first those a person must see (expired, the leader, those asking for handoffs or written by a
 * newer Leasehold, then the dead ones), then the others by worker id, up to `limit`.
 */
export function membersToShow(members: readonly MemberView[], limit: number): MemberView[] {
  if (members.length <= limit) return [...members];
  const rank = (member: MemberView): number => {
    if (member.liveness === 'expired') return 0;
    if (member.leader) return 1;
    if (member.requests.length > 0 || isNewerFormat(member)) return 2;
    return member.liveness === 'dead' ? 3 : 4;
  };
  // A stable sort keeps worker id order within a rank.
  const chosen = new Set([...members].sort((a, b) => rank(a) - rank(b)).slice(0, limit));
  return members.filter((member) => chosen.has(member));
}

/** `990 alive, 4 expired, 6 dead`, leaving out the liveness nobody has. */
function livenessCounts(members: readonly MemberView[]): string {
  const counts = (['alive', 'expired', 'dead'] as const).map((liveness) => [liveness, members.filter((member) => member.liveness === liveness).length] as const);
  return counts.filter(([, count]) => count > 0).map(([liveness, count]) => `${count} ${liveness}`).join(', ');
}

function renderText(view: StatusView, memberRows: number): string {
  const lines = [`group ${view.group} in ${view.storage}`];
  const leader = view.leader;
  const corruptLeader = view.corrupt.find((record) => record.kind === 'leader');
  lines.push(
    corruptLeader !== undefined
      ? `leader: unknown, the leader record cannot be read back: ${corruptLeader.error}`
      : leader === null
        ? 'leader: none (no leader record)'
        : `leader: ${leader.holder ?? 'none'} (term ${leader.term}, version ${leader.version}, age ${showAge(leader.ageMs, leader.ageAtLeastMs)})`,
  );
  if (view.rosterDigest !== undefined) lines.push(`roster digest: ${view.rosterDigest} (workers re-read the roster when it moves)`);
  lines.push('');
  const corruptMembers = view.corrupt.filter((record) => record.kind === 'member');
  if (view.members.length === 0 && corruptMembers.length === 0) lines.push('members: none (no worker has joined the group)');
  else {
    lines.push(`members (liveness as observed for ${formatDuration(view.observedMs)}; a member expires once its record has not moved for its lease duration):`);
    const shown = membersToShow(view.members, memberRows);
    lines.push(
      table(
        ['WORKER', 'DOMAIN', 'INCARNATION', 'STATUS', 'MOVED', 'LEASE', 'HELD', 'LEASES', 'REQUESTS'],
        shown.map((member) => [
          `${member.workerId}${member.leader ? ' (leader)' : ''}`,
          member.failureDomain ?? '-',
          member.incarnation,
          member.liveness,
          member.sinceMovedMs === null ? (member.sinceMovedAtLeastMs === 0 ? '—' : `≥${formatDuration(member.sinceMovedAtLeastMs)} ago`) : `${formatDuration(member.sinceMovedMs)} ago`,
          formatDuration(member.leaseDurationMs),
          String(member.held),
          String(member.leases),
          showRequests(member.requests),
        ]),
      ),
    );
    if (shown.length < view.members.length) {
      const visible = new Set(shown);
      const hidden = view.members.filter((member) => !visible.has(member));
      lines.push(
        `... and ${hidden.length} more members not shown: ${livenessCounts(hidden)} (--member-rows ${view.members.length} shows every one; --json and leasehold member list give them all)`,
      );
    }
  }
  if (view.failureDomains !== null) {
    lines.push('');
    lines.push(...renderDomains(view.failureDomains));
  }
  if (corruptMembers.length > 0) {
    lines.push('');
    lines.push(`corrupt members (they cannot be read back; their leases wait for an operator; see leasehold doctor --group ${view.group}):`);
    for (const record of corruptMembers) lines.push(`  ${record.key ?? '?'}: ${record.error}`);
  }
  if (view.streams.length > 0) {
    lines.push('');
    lines.push('streams:');
    lines.push(
      table(
        ['STREAM', 'LEASES', 'HELD', 'FINISHED', 'BORN'],
        view.streams.map((stream) => [stream.streamId, String(stream.leases), String(stream.held), String(stream.finished), stream.born === null ? '?' : stream.born ? 'yes' : 'not yet']),
      ),
    );
  }
  lines.push('');
  lines.push(
    table(
      ['LEASE', 'OWNER', 'INCARNATION', 'OWNER IS', 'CHECKPOINT', 'EPOCH', 'STALLED'],
      view.leases.map((lease) => [
        lease.leaseKey,
        lease.owner ?? '-',
        lease.incarnation ?? '-',
        lease.ownerLiveness === null ? '-' : OWNER_WORDS[lease.ownerLiveness],
        lease.checkpoint ?? '-',
        String(lease.epoch),
        showStall(lease.stalled),
      ]),
    ),
  );
  const corruptLeases = view.corrupt.filter((record) => record.kind === 'lease');
  if (corruptLeases.length > 0) {
    lines.push('');
    lines.push(`corrupt leases (they cannot be read back and nobody takes them; see leasehold doctor --group ${view.group}):`);
    for (const record of corruptLeases) lines.push(`  ${record.key ?? '?'}: ${record.error}`);
  }
  const held = view.leases.filter((lease) => lease.held).length;
  const free = view.leases.filter((lease) => !lease.held && lease.ownerLiveness !== 'unreadable').length;
  const stalled = view.leases.filter((lease) => lease.stalled !== null).length;
  const newer = [...view.leases, ...view.members].filter(isNewerFormat).length;
  const alive = view.members.filter((member) => member.liveness === 'alive').length;
  const counts = [`${view.members.length} members (${alive} alive)`, `${view.leases.length} leases`, `${held} held`, `${free} free to take`];
  if (corruptMembers.length > 0) counts.push(`${corruptMembers.length} corrupt members`);
  if (corruptLeases.length > 0) counts.push(`${corruptLeases.length} corrupt leases`);
  if (stalled > 0) counts.push(`${stalled} stalled`);
  if (newer > 0) counts.push(`${newer} records of a record format newer than ${RECORD_FORMAT} (upgrade the CLI)`);
  lines.push('');
  lines.push(counts.join(', '));
  return lines.join('\n');
}

/** Waits `ms`, or less when the signal fires; tells whether to go on. */
function pause(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const onAbort = (): void => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve(true);
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
