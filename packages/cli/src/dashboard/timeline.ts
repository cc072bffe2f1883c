/**
 * What changed between two snapshots of a group, as the dashboard's timeline lists it. A pure function
 * of the two reads: a change that came and went between them (a lease taken and released within one
 * interval) is not seen, and nothing is guessed about it.
 */
import type { MemberView } from '../commands/status.js';
import type { DashboardLease, Snapshot } from './snapshot.js';

/** The kinds of change the timeline tells. */
export type TimelineKind =
  | 'lease-created'
  | 'lease-deleted'
  | 'finished'
  | 'take'
  | 'handover'
  | 'release'
  | 'member-joined'
  | 'member-expired'
  | 'member-dead'
  | 'member-back'
  | 'member-removed'
  | 'rewind-requested'
  | 'rewind-applied'
  | 'stall'
  | 'stall-cleared'
  | 'leader-changed';

/** One change. */
export interface TimelineEvent {
  /** The later snapshot's time (wall clock, for people). */
  readonly at: string;
  readonly kind: TimelineKind;
  /** The lease it concerns, when it concerns one. */
  readonly leaseKey?: string;
  /** The worker it concerns, when it concerns one. */
  readonly workerId?: string;
  /** One line for people. */
  readonly text: string;
}

/** The changes from `before` to `after`, members first, then leases by key, then the leader. */
export function changesBetween(before: Snapshot, after: Snapshot): TimelineEvent[] {
  const at = after.takenAt;
  return [...memberChanges(before, after, at), ...leaseChanges(before, after, at), ...leaderChanges(before, after, at)];
}

function memberChanges(before: Snapshot, after: Snapshot, at: string): TimelineEvent[] {
  const events: TimelineEvent[] = [];
  const earlier = new Map(before.members.map((member) => [member.workerId, member]));
  const later = new Set(after.members.map((member) => member.workerId));
  for (const member of after.members) {
    const was = earlier.get(member.workerId);
    const event = (kind: TimelineKind, text: string): void => {
      events.push({ at, kind, workerId: member.workerId, text });
    };
    if (was === undefined || was.incarnation !== member.incarnation) {
      event('member-joined', `${member.workerId} joined (incarnation ${member.incarnation})`);
    } else if (was.liveness !== member.liveness) {
      if (member.liveness === 'expired') event('member-expired', `${member.workerId} expired: its record stood still for its lease duration (${member.leaseDurationMs} ms)`);
      else if (member.liveness === 'dead') event('member-dead', `${member.workerId} was declared dead or left`);
      else event('member-back', `${member.workerId} heartbeats again`);
    }
  }
  for (const member of before.members) {
    if (!later.has(member.workerId)) events.push({ at, kind: 'member-removed', workerId: member.workerId, text: `${member.workerId} left the roster` });
  }
  return events;
}

function leaseChanges(before: Snapshot, after: Snapshot, at: string): TimelineEvent[] {
  const events: TimelineEvent[] = [];
  const earlier = new Map(before.leases.map((lease) => [lease.leaseKey, lease]));
  const later = new Set(after.leases.map((lease) => lease.leaseKey));
  const members = new Map<string, MemberView>(before.members.map((member) => [member.workerId, member]));
  for (const lease of after.leases) {
    const key = lease.leaseKey;
    const event = (kind: TimelineKind, text: string, workerId?: string): void => {
      events.push({ at, kind, leaseKey: key, ...(workerId === undefined ? {} : { workerId }), text });
    };
    const was = earlier.get(key);
    if (was === undefined) {
      const parents = lease.parentKeys.length === 0 ? '' : ` (child of ${lease.parentKeys.join(', ')})`;
      event('lease-created', `${key} created${parents}`);
      continue;
    }
    ownerChange(was, lease, members, event);
    if (!was.finished && lease.finished) event('finished', `${key} finished: its shard was read to its end`);
    if (lease.rewindRequest !== null && lease.rewindRequest.id !== was.rewindRequest?.id) {
      event('rewind-requested', `${key}: rewind ${lease.rewindRequest.id} to ${lease.rewindRequest.to} requested`);
    }
    if (lease.rewound !== null && lease.rewound !== was.rewound) event('rewind-applied', `${key}: rewind ${lease.rewound} applied, checkpoint ${lease.checkpoint ?? '-'}`);
    if (!was.checkpointStalled && lease.checkpointStalled) {
      event('stall', `${key}: checkpoint still for ${Math.round(lease.checkpointStillAtLeastMs / 1000)} s under ${lease.owner ?? '-'} while other shards move`, lease.owner ?? undefined);
    }
    if (was.checkpointStalled && !lease.checkpointStalled) event('stall-cleared', `${key}: no longer stalled`);
  }
  for (const lease of before.leases) {
    if (!later.has(lease.leaseKey)) events.push({ at, kind: 'lease-deleted', leaseKey: lease.leaseKey, text: `${lease.leaseKey} deleted` });
  }
  return events;
}

/** A take (from nobody, or from an owner no longer alive), a handover (from an alive owner) or a release. */
function ownerChange(was: DashboardLease, now: DashboardLease, members: ReadonlyMap<string, MemberView>, event: (kind: TimelineKind, text: string, workerId?: string) => void): void {
  if (was.owner === now.owner && was.incarnation === now.incarnation) return;
  const key = now.leaseKey;
  if (now.owner === null) {
    event('release', `${key} released by ${was.owner ?? '-'}`, was.owner ?? undefined);
    return;
  }
  if (was.owner === null) {
    event('take', `${now.owner} took ${key} (free)`, now.owner);
    return;
  }
  const from = members.get(was.owner);
  const fromAlive = was.held && from !== undefined && from.liveness === 'alive';
  if (fromAlive && was.owner !== now.owner) event('handover', `${key} handed over from ${was.owner} to ${now.owner}`, now.owner);
  else event('take', `${now.owner} took ${key} from ${was.owner} (${was.ownerLiveness ?? 'gone'})`, now.owner);
}

function leaderChanges(before: Snapshot, after: Snapshot, at: string): TimelineEvent[] {
  const was = before.leader?.holder ?? null;
  const now = after.leader?.holder ?? null;
  if (was === now) return [];
  return [{ at, kind: 'leader-changed', ...(now === null ? {} : { workerId: now }), text: now === null ? `no leader (was ${was ?? '-'})` : `${now} leads (was ${was ?? 'nobody'})` }];
}
