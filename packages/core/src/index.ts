export * from './errors.js';
export * from './storage.js';
export * from './source.js';
export * from './limits.js';
export * from './clock.js';
export { compareNumericPositions } from './position.js';
export { MemoryStorage, type MemoryStorageOptions } from './memory/memory-storage.js';
export { TypedEmitter, type Listener } from './events.js';
export {
  LeaseCoordinator,
  parentsFinished,
  type LeaseCoordinatorOptions,
  type LeaseCoordinatorEvents,
  type HeldLease,
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
