/**
 * The roster table of schema version 2, which an earlier release keeps one row per group in, holding every
 * member: the marker a join of this release writes there so that the earlier release's workers stop, and
 * how the members still alive there are found and named. One group, one roster (see `putMember` in core's
 * `storage.ts`); the transaction that marks the row is `PostgresStorage`'s, in `#joinBesideEarlierRoster`.
 */
import { RecordFormatError, type MemberRecord } from '@leasehold/core';
import { describeValue, encodeMemberState, memberStateOf } from '@leasehold/core/adapter';
import { decodeStoredMember, type MemberOutcomeRow } from './rows.js';
import { PKG } from './schema.js';

/** How a join beside the roster row of schema version 2 ended: its own outcome, the members alive there, or a lost COMMIT answer. */
export type EarlierJoin = { readonly row: MemberOutcomeRow | undefined } | { readonly alive: readonly string[] } | { readonly lost: unknown };

/**
 * The worker id of the member a join writes into the group's row of the roster table of schema version 2
 * (see `#joinBesideEarlierRoster` in postgres-storage.ts). A worker of the earlier release stops on it with a `RecordFormatError`
 * naming it, so the name says what happened and what to do.
 */
export const EARLIER_ROSTER_MARKER = '(leasehold) members moved to one row each: upgrade';

/** The record format of every member an earlier release wrote in the roster table (its core's `RECORD_FORMAT`). */
const EARLIER_FORMAT = 1;

/**
 * The marker's state: a member of a format above the earlier core's, which that core reads (it decodes any
 * positive format) and then stops on, as it stops on every record of a newer format. Dead, holding
 * nothing, naming the table the members moved to.
 */
export function earlierRosterMarker(movedTo: string): string {
  return encodeMemberState(
    memberStateOf({
      format: EARLIER_FORMAT + 1,
      incarnation: 'storage-postgres schema version 3',
      leaseDurationMs: 10_000,
      status: 'dead',
      held: 0,
      changes: 0,
      requests: [],
      metadata: { movedTo },
    }),
  );
}

/**
 * The worker ids of the members of an earlier release's roster row still alive there: decoded as that
 * release's core decodes them, of its format, with status `alive`. A member that cannot be read back names
 * no worker that could be proven alive, and the marker is of a later format.
 */
export function aliveInEarlierRoster(group: string, members: unknown): string[] {
  if (typeof members !== 'object' || members === null || Array.isArray(members)) return [];
  const alive: string[] = [];
  for (const [workerId, stored] of Object.entries(members as Record<string, unknown>)) {
    let member: MemberRecord;
    try {
      member = decodeStoredMember(group, workerId, stored);
    } catch {
      continue;
    }
    if (member.format === EARLIER_FORMAT && member.status === 'alive') alive.push(workerId);
  }
  return alive.sort();
}

/** The refusal of a join while members of the earlier release are alive in `rosterTable`: it names them, and says what to do. */
export function membersStillInEarlierRoster(group: string, alive: readonly string[], rosterTable: string): RecordFormatError {
  const listed = alive.slice(0, 10).map((workerId) => describeValue(workerId)).join(', ');
  const more = alive.length > 10 ? ` and ${alive.length - 10} more` : '';
  return new RecordFormatError(
    `[${PKG}] group ${describeValue(group)} still has members alive in the roster table ${rosterTable} of an earlier release (one row per group): ${listed}${more}; ` +
      'this worker does not join beside them, which would split the group in two. Stop the workers of the earlier release ' +
      '(the roster is marked now: each one still running stops at its next roster read), ' +
      "or remove the members of those that are gone with the earlier release's leasehold member remove; then start this worker again",
    EARLIER_FORMAT,
  );
}
