/**
 * What the two layouts before this one share when a join checks them (`earlier-roster.ts`: one roster item;
 * `single-members-key.ts`: member items under one partition key): which members found there a join must
 * not run beside, and the one error that says so and what to do.
 */
import { CorruptRecordError, RecordFormatError } from '@leasehold/core';
import { decodeMember, describeValue } from '@leasehold/core/adapter';
import { PKG } from './schema.js';

/** A member as a layout before kept it: its worker id, its version and its state JSON, as stored. */
export interface StoredMember {
  readonly workerId: string;
  readonly version: unknown;
  readonly state: string | undefined;
}

/** The members of a layout before a join must not run beside: alive, or unreadable (so maybe alive). */
export interface BlockingMembers {
  readonly alive: readonly string[];
  readonly unreadable: readonly string[];
  /** The greatest record format among the live members (`baseFormat` when none is readable). */
  readonly format: number;
}

/** Sorts the members found, the layout's marker aside, into those a join must not run beside. */
export function blockingMembersOf(group: string, members: Iterable<StoredMember>, markerWorkerId: string, baseFormat: number): BlockingMembers {
  const alive: string[] = [];
  const unreadable: string[] = [];
  let format = baseFormat;
  for (const { workerId, version, state } of members) {
    if (workerId === markerWorkerId) continue;
    try {
      const member = decodeMember(group, workerId, version, state, PKG);
      if (member.status === 'alive') {
        alive.push(workerId);
        format = Math.max(format, member.format);
      }
    } catch (error) {
      if (!(error instanceof CorruptRecordError)) throw error;
      unreadable.push(workerId);
    }
  }
  return { alive: alive.sort(), unreadable: unreadable.sort(), format };
}

/** How the error names the layout before and this release's. */
export interface LayoutWords {
  /** Where the members are: `in the roster item of an earlier release of ... (sk "roster")`. */
  readonly where: string;
  /** What this release does instead: `keeps each member in an item of its own`. */
  readonly now: string;
  /** Whose workers and command line: `the earlier release's`. */
  readonly release: string;
  /** What holds the marker: `the item`, `the key`. */
  readonly holder: string;
  readonly markerWorkerId: string;
  readonly markerFormat: number;
}

/** The error that refuses a join beside members of a layout before; `undefined` when there are none. */
export function blockingMembersError(group: string, members: BlockingMembers, words: LayoutWords): RecordFormatError | undefined {
  if (members.alive.length === 0 && members.unreadable.length === 0) return undefined;
  const named = [
    ...(members.alive.length > 0 ? [`alive: ${members.alive.map(describeValue).join(', ')}`] : []),
    ...(members.unreadable.length > 0 ? [`unreadable (so maybe alive): ${members.unreadable.map(describeValue).join(', ')}`] : []),
  ].join('; ');
  return new RecordFormatError(
    `[${PKG}] group ${describeValue(group)} still has members ${words.where}, ${named}. ` +
      `This release ${words.now}, and joining beside them would split the group in two, so it did not join. ` +
      `Stop ${words.release} workers (each stops by itself at its next roster read, now that ${words.holder} holds the member ${describeValue(words.markerWorkerId)} of record format ${words.markerFormat}), ` +
      `or remove the members of workers that no longer run with ${words.release} \`leasehold member remove\`; then start this worker again`,
    members.format,
  );
}
