/**
 * The note a cold start's dealer writes in its member record (DESIGN section 4, taking, step 3, "One
 * member deals a cold start"): how many leases it dealt to the group. The members it dealt to never list
 * the group for their first listing: from the note and the roster they know the group's leases and their
 * own share, as a listing would have told them. One metadata field (metadata round-trips on every
 * adapter, and a worker of an earlier release ignores it and lists, as before), dropped a few ticks later
 * without moving the roster digest.
 */

/** Member metadata, written by a cold start's dealer only: the count of the leases it dealt, in decimal. */
export const COLD_DEALT_FIELD = 'leasehold.coldDealt';

/** The note for a deal of `total` leases. */
export function writeColdDealt(total: number): string {
  return String(total);
}

/** The count a note says, or `undefined` when there is none or it is not one (another writer's, or damaged). */
export function readColdDealt(value: string | undefined): number | undefined {
  if (value === undefined || !/^(0|[1-9][0-9]{0,8})$/.test(value)) return undefined;
  return Number(value);
}
