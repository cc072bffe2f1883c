/**
 * `@leasehold/core`: what a user of the consumer, the lease coordinator and the leader elector needs,
 * including the contracts a user implements (`CheckpointStorage`, `LeaderStore`, `ShardSource`) and the
 * errors. Helpers only an adapter author needs are in `@leasehold/core/adapter`; the conformance suite,
 * the simulations and deterministic clocks in `@leasehold/core/testing`.
 */
export {
  LeaseholdError,
  InvalidConfigError,
  InvalidInputError,
  StorageUnavailableError,
  StorageSchemaError,
  CorruptRecordError,
  RegressionError,
  RecordFormatError,
  LeaseLostError,
  MemberExpelledError,
  CheckpointBehindError,
  StorageOutcomeUnknownError,
  SourceError,
  AbortedError,
  ContractVersionError,
} from './errors.js';
export {
  Checkpoint,
  STORAGE_CONTRACT_VERSION,
  type Position,
  type LeaseState,
  type LeaseRecord,
  type NewLease,
  type LeaseChangeKind,
  type LeaseUpdate,
  type Applied,
  type Conflict,
  type Unknown,
  type WriteResult,
  type DeleteResult,
  type LeaseListing,
  type HandoffRequest,
  type MemberState,
  type MemberRecord,
  type Roster,
  type RosterMoves,
  type CreateLeaseOptions,
  type LeaseChange,
  type ChangeSubscription,
  type SubscribeOptions,
  type CheckpointStorage,
  type LeaderState,
  type LeaderRecord,
  type NewLeader,
  type LeaderStore,
  type Storage,
} from './storage.js';
export type { ShardInfo, SourceRecord, RecordsBatch, EndOfShard, ShardBatch, ReadOptions, ShardSource } from './source.js';
export type { Clock, Random } from './clock.js';
export { compareNumericPositions } from './position.js';
export { MemoryStorage, type MemoryStorageOptions } from './memory/memory-storage.js';
export type { TypedEmitter, Listener } from './events.js';
export {
  LeaseCoordinator,
  parentsFinished,
  type LeaseCoordinatorOptions,
  type LeaseCoordinatorEvents,
  type HeldLease,
  type LeaseTenure,
  type CheckpointWrite,
  type LossReason,
  type DrainReason,
  type EligibilityPredicate,
} from './lease/coordinator.js';
export {
  LeaderElector,
  type LeaderElectorOptions,
  type LeaderElectorEvents,
  type DemotionReason,
} from './leader/elector.js';
export { type MemoryWriteEvent } from './memory/memory-storage.js';
export { MemorySource, type MemorySourceOptions } from './memory/memory-source.js';
export { Consumer } from './consumer/consumer.js';
export { type ConsumerEvents, type StallReason } from './consumer/events.js';
export type { ShardSyncReport } from './consumer/leader-duties.js';
export type { MultiStreamSyncReport } from './consumer/stream-sync.js';
export { streamLeaseKey, parseStreamLeaseKey } from './stream-keys.js';
export { type StreamSpec, type StreamList } from './consumer/options.js';
export {
  planRewind,
  applyRewind,
  awaitRewind,
  parseRewindTarget,
  type RewindTarget,
  type RewindSelection,
  type RewindPlan,
  type RewindMove,
  type RewindHow,
  type RewindNote,
  type RewindRequest,
  type AppliedRewind,
  type RewindProgress,
  type RewindLeaseProgress,
  type PlanRewindOptions,
  type ApplyRewindOptions,
  type AwaitRewindOptions,
} from './rewind.js';
export type {
  ConsumerOptions,
  BatchContext,
  CheckpointPolicy,
  FailurePolicy,
  PoisonPolicy,
  FailedRecords,
  GiveUpReason,
  BatchResponse,
  InitialPosition,
  ShardHooks,
  Logger,
} from './consumer/options.js';
export { attachMetrics, type Instrumented } from './metrics.js';
