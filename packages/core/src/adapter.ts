/**
 * `@leasehold/core/adapter`: what an author of a storage adapter or a shard source needs and a user of
 * the consumer, the coordinator or the elector does not. The contract itself (`CheckpointStorage`,
 * `LeaderStore`, `ShardSource` and the record types) and the errors an adapter throws are exported by
 * `@leasehold/core`, since users name them too; the conformance suite is in `@leasehold/core/testing`.
 */
export {
  limits,
  validateGroup,
  validateLeaseKey,
  validateWorkerId,
  validateWorkerIds,
  validateVersion,
  validateLeaseState,
  validateNewLease,
  validateLeaseUpdates,
  validateLeaderState,
  validateNewLeader,
  validateMemberState,
  validateMemberWrite,
} from './validation.js';
export {
  encodeLeaseState,
  decodeLease,
  listingOf,
  encodeLeaderState,
  decodeLeader,
  encodeMemberState,
  decodeMember,
  rosterOf,
  corruptRecord,
} from './codec.js';
export { RECORD_FORMAT, leaseStateOf, leaderStateOf, memberStateOf, result } from './storage.js';
export { describeValue } from './errors.js';
export { checkWatcherReads, WATCHER_READS, type WatcherReads } from './watcher-reads.js';
export { optionKeys, nestedOptionHints, refuseUnknownOptions, type OptionHints } from './known-options.js';
export { abortReason, systemClock, systemRandom } from './clock.js';
