/**
 * `leasehold member list|remove`: the group's roster, and an operator's tool to remove a member that is
 * dead or cannot be read back. Workers remove members dead for ten lease durations that no lease names on
 * their own; this is for the others: a member whose record was damaged (its leases wait for an operator),
 * or a dead one an operator wants gone now.
 *
 * Removing a member frees every lease that names it, so an alive member is removed only once this command
 * watched its record not moving for its lease duration (its worker holds nothing then), and a member that
 * cannot be read back only once it stayed unreadable for the watch (a heartbeat at its stored version would
 * have replaced the damage; one at another version fails, and its worker holds nothing past its hold).
 * Every remove is conditional on the stored version the operator names, and is followed by an advance of
 * the group's roster digest when the store has one, so that workers that read only the digest see it.
 */
import { LeaseholdError, InvalidConfigError, type MemberRecord, type Storage } from '@leasehold/core';
import { describeValue, validateWorkerId } from '@leasehold/core/adapter';
import { openBackend } from '../connect.js';
import { failureDomainOf } from '../domains.js';
import { UNREADABLE_WATCH_MS, pollOf } from '../guard.js';
import { isNewerFormat } from '../health.js';
import { watchRoster } from '../observe.js';
import { checkGroup, formatDuration, readKnownGroup, table, type Io } from '../shared.js';
import { parseStorageUrl } from '@leasehold/connect';
import { PKG } from '../pkg.js';

/** Options of {@link memberList}. */
export interface MemberListOptions {
  readonly storage: string;
  readonly group: string;
  readonly json: boolean;
}

/** Options of {@link memberRemove}. */
export interface MemberRemoveOptions {
  readonly storage: string;
  readonly group: string;
  readonly worker: string;
  /** The stored version to remove at: the member's version as `member list` shows it, or as stored in the backend for one that cannot be read back. */
  readonly version: number;
  /** Watch an alive member at least this long (0: its own lease duration), and an unreadable one this long (0: 12 s). */
  readonly observeMs: number;
}

/** Lists the roster as stored: every member with its failure domain, and every member that cannot be read back. No liveness is judged (see `status`). */
export async function memberList(options: MemberListOptions, io: Io): Promise<void> {
  checkGroup(options.group);
  const target = parseStorageUrl(options.storage);
  const backend = await openBackend(target);
  try {
    const state = await readKnownGroup(backend.storage, options.group, target.display);
    // Counted once per lease, not once per member and lease: 1,000 members over 100,000 leases stay quick.
    const naming = new Map<string, number>();
    for (const lease of state.leases) {
      if (lease.owner !== null) naming.set(`${lease.owner}\n${lease.incarnation}`, (naming.get(`${lease.owner}\n${lease.incarnation}`) ?? 0) + 1);
    }
    const named = (member: MemberRecord): number => naming.get(`${member.workerId}\n${member.incarnation}`) ?? 0;
    if (options.json) {
      const members = state.members.map((member) => ({ ...member, leases: named(member), failureDomain: failureDomainOf(member) }));
      const corrupt = state.corruptMembers.map((error) => ({ workerId: error.workerId ?? null, error: error.message }));
      io.out(`${JSON.stringify({ group: options.group, storage: target.display, members, corrupt }, null, 2)}\n`);
      return;
    }
    if (state.members.length === 0 && state.corruptMembers.length === 0) {
      io.out(`group ${options.group} has no members\n`);
      return;
    }
    io.out(
      `${table(
        ['WORKER', 'DOMAIN', 'VERSION', 'INCARNATION', 'STATUS', 'LEASE', 'HELD', 'LEASES', 'FORMAT'],
        [
          ...state.members.map((member) => [
            member.workerId,
            failureDomainOf(member) ?? '-',
            String(member.version),
            member.incarnation,
            member.status,
            formatDuration(member.leaseDurationMs),
            String(member.held),
            String(named(member)),
            String(member.format),
          ]),
          ...state.corruptMembers.map((error) => [error.workerId ?? '?', '?', '?', '?', 'corrupt', '?', '?', '?', '?']),
        ],
      )}\n`,
    );
    for (const error of state.corruptMembers) io.out(`${error.workerId ?? '?'}: ${error.message}\n`);
    const dead = state.members.filter((member) => member.status === 'dead').length;
    const unreadable = state.corruptMembers.length > 0 ? `, ${state.corruptMembers.length} that cannot be read back` : '';
    io.out(`${state.members.length} members (${state.members.length - dead} alive, ${dead} dead, as they last wrote)${unreadable}\n`);
    io.out('status alive is what the member last wrote; leasehold status watches the records to tell which are still heartbeating\n');
  } finally {
    await backend.close();
  }
}

/**
 * Removes one member at the stored version given: at once when it is dead; an alive one only once watched
 * not moving for its lease duration; one that cannot be read back only once it stayed unreadable for the
 * watch. Refuses a member of a newer record format, and any member whose record moved.
 */
export async function memberRemove(options: MemberRemoveOptions, io: Io): Promise<void> {
  checkGroup(options.group);
  try {
    validateWorkerId(options.worker, PKG);
  } catch (error) {
    throw new InvalidConfigError(`${(error as Error).message} (--worker)`, { cause: error });
  }
  const target = parseStorageUrl(options.storage);
  const backend = await openBackend(target);
  try {
    const storage = backend.storage;
    const state = await readKnownGroup(storage, options.group, target.display);
    const member = state.members.find((candidate) => candidate.workerId === options.worker);
    const unreadable = state.corruptMembers.some((error) => error.workerId === options.worker);
    if (member === undefined && !unreadable) {
      throw new LeaseholdError('ERR_UNKNOWN_MEMBER', `[${PKG}] group ${describeValue(options.group)} has no member ${describeValue(options.worker)} in ${describeValue(target.display)}`);
    }
    // An alive member is watched before its version is compared: a heartbeating one has moved on anyway.
    if (member !== undefined) refuseMember(member, member.status === 'dead' ? options : undefined);
    const naming = member === undefined ? [] : state.leases.filter((lease) => lease.owner === member.workerId && lease.incarnation === member.incarnation);

    if (member === undefined || member.status === 'alive') {
      const what = member === undefined ? 'cannot be read back' : 'is alive in its record';
      const watchMs = member === undefined ? options.observeMs || UNREADABLE_WATCH_MS : Math.max(options.observeMs, member.leaseDurationMs);
      io.err(`member ${describeValue(options.worker)} ${what}: watching it for ${formatDuration(watchMs)} to see whether its worker heartbeats\n`);
      const verdict = await watchRoster(storage, options.group, {
        minimumMs: options.observeMs,
        unreadableMs: UNREADABLE_WATCH_MS,
        pollMs: pollOf(options.observeMs),
        only: new Set([options.worker]),
      });
      if (verdict.live) {
        throw new LeaseholdError(
          'ERR_MEMBER_ALIVE',
          `[${PKG}] member ${describeValue(options.worker)} of group ${describeValue(options.group)} is alive: its record ${verdict.repaired.length > 0 ? 'became readable' : 'moved'} while watched (its worker heartbeats); stop its worker first, nothing was removed`,
        );
      }
      const now = verdict.roster.members.find((candidate) => candidate.workerId === options.worker);
      const stillUnreadable = verdict.roster.corrupt.some((error) => error.workerId === options.worker);
      if (now === undefined && !stillUnreadable) throw new LeaseholdError('ERR_UNKNOWN_MEMBER', `[${PKG}] member ${describeValue(options.worker)} was removed while watched`);
      if (now !== undefined) refuseMember(now, options);
    }

    const outcome = await storage.removeMember(options.group, options.worker, options.version);
    // A removal whose outcome is unknown may have applied: the digest moves for it too (a needless
    // advance only makes workers read the member once more). The advance names the member, so that a
    // worker on a store that keeps the names reads it alone and finds it gone, not the whole roster.
    const removal = `removal of member ${describeValue(options.worker)}`;
    const named = { workerIds: [options.worker] };
    if (outcome.status === 'unknown') await advanceRosterDigest(storage, options.group, removal, named).catch(() => undefined);
    if (outcome.status === 'conflict') {
      const now = outcome.current === null ? 'it was removed meanwhile' : `it is at version ${outcome.current.version}`;
      throw new LeaseholdError('ERR_MEMBER_NOT_REMOVED', `[${PKG}] member ${describeValue(options.worker)} was not removed at version ${options.version}: ${now}`);
    }
    if (outcome.status === 'unknown') {
      throw new LeaseholdError(
        'ERR_MEMBER_NOT_REMOVED',
        `[${PKG}] removing member ${describeValue(options.worker)} at version ${options.version}: the outcome is unknown (${outcome.error.message}); check with leasehold member list`,
        { cause: outcome.error },
      );
    }
    const how = member === undefined ? 'unreadable member' : `${member.status === 'dead' ? 'dead' : 'expired'} member (incarnation ${describeValue(member.incarnation)})`;
    io.out(`removed ${how} ${describeValue(options.worker)} at version ${options.version}\n`);
    if (naming.length > 0) io.out(`${naming.length} leases named it and are free to take now: ${naming.map((lease) => lease.leaseKey).join(', ')}\n`);
    else if (member === undefined) io.out('the leases that named it are free to take now\n');
    await advanceRosterDigest(storage, options.group, removal, named);
  } finally {
    await backend.close();
  }
}

/** A member this command line must not remove: of a newer record format, or (with `options`) at another version than given. */
function refuseMember(member: MemberRecord, options: MemberRemoveOptions | undefined): void {
  if (isNewerFormat(member)) {
    throw new LeaseholdError(
      'ERR_RECORD_FORMAT',
      `[${PKG}] member ${describeValue(member.workerId)} was written by a newer Leasehold (record format ${member.format}): upgrade @leasehold/cli; nothing was removed`,
    );
  }
  if (options !== undefined && member.version !== options.version) {
    throw new LeaseholdError(
      'ERR_MEMBER_NOT_REMOVED',
      `[${PKG}] member ${describeValue(member.workerId)} is at version ${member.version}, not ${options.version}; nothing was removed (see leasehold member list)`,
    );
  }
}

/** Options of {@link advanceRosterDigest}. */
export interface AdvanceOptions {
  /** How many times to send the advance before giving up. Default 3. */
  readonly attempts?: number;
  /** The pause between two attempts, in milliseconds. Default 200. */
  readonly pauseMs?: number;
  /** The members whose write the advance announces (up to 16; a store that keeps them lets workers read those alone). Default: none named, and every worker reads the whole roster. */
  readonly workerIds?: readonly string[];
}

/**
 * Advances the group's roster digest after a member write `what` (nothing for a store without a digest),
 * so that workers that read only the digest re-read the roster. An advance that fails or whose outcome is
 * unknown is sent again: an advance sent twice only makes workers read the roster once more. Throws,
 * saying the write stands, when every attempt failed.
 */
export async function advanceRosterDigest(storage: Storage, group: string, what: string, options: AdvanceOptions = {}): Promise<void> {
  if (storage.advanceRosterDigest === undefined) return;
  const attempts = options.attempts ?? 3;
  let last: unknown;
  for (let attempt = 1; attempt <= attempts; attempt++) {
    if (attempt > 1) await new Promise((resolve) => setTimeout(resolve, options.pauseMs ?? 200));
    try {
      await storage.advanceRosterDigest(group, options.workerIds);
      return;
    } catch (error) {
      last = error;
    }
  }
  throw new LeaseholdError(
    'ERR_DIGEST_NOT_ADVANCED',
    `[${PKG}] the ${what} stands, but the roster digest of group ${describeValue(group)} could not be advanced after ${attempts} attempt(s) (${last instanceof Error ? last.message : String(last)}): workers that watch the digest see the change once it next moves`,
    { cause: last },
  );
}
