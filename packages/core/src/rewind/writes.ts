/**
 * The two writes both applying and settling a rewind make: a lease's update (moved directly, or given a
 * request), and the mark on the leader record that tells workers without a change feed to look at their
 * leases.
 */
import { describeValue, LeaseholdError, RecordFormatError } from '../errors.js';
import { leaderStateOf, RECORD_FORMAT, type LeaderStore, type LeaseRecord, type LeaseUpdate } from '../storage.js';
import { stateWithoutResume } from '../lease/resume-hint.js';
import { REWIND_FIELDS, REWIND_MARKER_FIELD, rewoundState, type RewindRequest } from './request.js';
import type { AppliedRewind, RewindMove } from './types.js';

const PKG = 'core';

export function updateOf(lease: LeaseRecord, move: Pick<RewindMove, 'how' | 'to'>, rewindId: string, requestedAt: string): LeaseUpdate {
  if (move.how === 'direct') return { leaseKey: lease.leaseKey, expectedVersion: lease.version, next: rewoundState(lease, { id: rewindId, to: move.to }) };
  const request: RewindRequest = { id: rewindId, to: move.to, requestedAt };
  // A resume hint a handover left is dropped, as by every write of core but a handover's.
  const state = stateWithoutResume(lease);
  return {
    leaseKey: lease.leaseKey,
    expectedVersion: lease.version,
    // Only the request is added: owner, epoch, incarnation and checkpoint stay as they are.
    next: { ...state, metadata: { ...state.metadata, [REWIND_FIELDS.request]: JSON.stringify(request) } },
    notify: 'rewind',
  };
}

export async function mark(storage: Partial<LeaderStore>, group: string, rewindId: string, value: string, attempts: number): Promise<AppliedRewind['marker']> {
  if (typeof storage.getLeader !== 'function' || typeof storage.updateLeader !== 'function') return 'no-leader-record';
  for (let attempt = 0; attempt < attempts; attempt++) {
    const leader = await storage.getLeader(group);
    if (leader === null) return 'no-leader-record';
    if (leader.format > RECORD_FORMAT) {
      throw new RecordFormatError(`[${PKG}] the leader record of group ${describeValue(group)} is in record format ${leader.format}, newer than the ${RECORD_FORMAT} this Leasehold knows: upgrade it`, leader.format);
    }
    if (leader.metadata[REWIND_MARKER_FIELD] === value) return 'written';
    const outcome = await storage.updateLeader(group, leader.version, { ...leaderStateOf(leader), metadata: { ...leader.metadata, [REWIND_MARKER_FIELD]: value } });
    if (outcome.status === 'applied') return 'written';
  }
  throw new LeaseholdError(
    'ERR_REWIND_NOT_ANNOUNCED',
    `[${PKG}] rewind ${rewindId} of group ${describeValue(group)} is written on its leases, but its mark on the leader record could not be written after ${attempts} attempts: owners without a change feed may not see it; run the rewind again`,
  );
}
