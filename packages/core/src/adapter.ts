/**
 * `@leasehold/core/adapter`: what an author of a storage adapter, a shard source or a tool that reads a
 * group's records needs, and a user of the consumer, the coordinator or the elector does not. The contract
 * itself (`CheckpointStorage`, `LeaderStore`, `ShardSource` and the record types) and the errors an adapter
 * throws are exported by `@leasehold/core`, since users name them too; the conformance suite is in
 * `@leasehold/core/testing`.
 */
export {
  limits,
  validateGroup,
  validateLeaseKey,
  validateLeaseKeys,
  validateWorkerId,
  validateWorkerIds,
  validateSubscribeOptions,
  validateVersion,
  validateDigest,
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
export { STORAGE_CONTRACT_VERSION, RECORD_FORMAT, leaseStateOf, leaderStateOf, memberStateOf, result } from './storage.js';
export { describeValue } from './errors.js';
export { keyBucket } from './key-bucket.js';
export { rosterMovesOf, keptAfter, type KeptAdvance } from './roster-moves.js';
export { checkContractVersion } from './contract-version.js';
export { checkWatcherReads, checkRosterMoves, WATCHER_READS, type WatcherReads } from './watcher-reads.js';
export { optionKeys, nestedOptionHints, refuseUnknownOptions, type OptionHints } from './known-options.js';
export { abortReason, systemClock, systemRandom } from './clock.js';
// For tools that read a group's records from outside it (the CLI's `status`, `health` and `rewind`): the
// metadata fields the runtime writes, and the observed-expiry rule the coordinator judges liveness by.
export { VersionWatch, type Sighting } from './observed-expiry.js';
export { STALL_FIELDS, BORN_FIELD } from './consumer/consumer.js';
export { BIRTH_POSITION_FIELD } from './consumer/leader-rounds.js';
export { STREAMS_FIELD, parseStreamBirths, type StreamBirths } from './consumer/stream-sync.js';
export { REWIND_FIELDS, REWIND_MARKER_FIELD, rewindRequestOf, hasRewindRequest } from './rewind.js';
export { LEAVING_FIELD } from './lease/membership.js';
export { FAILURE_DOMAIN_FIELD } from './lease/watchers.js';
// The leader's shard sync on its own, for a source's author to measure the listings it makes of a source.
export { ShardSync, type ShardSyncOptions } from './consumer/leader-duties.js';
