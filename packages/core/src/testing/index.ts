export {
  runConformanceSuite,
  leaseContract,
  leaderContract,
  rosterContract,
  limitsContract,
  concurrencyContract,
  monotonicityContract,
  badInputContract,
  corruptionContract,
  changeFeedContract,
  faultContract,
  readsWhileWritingContract,
  transactionalCheckpointContract,
  type ConformanceTarget,
  type TransactionalCheckpoint,
  type UserWrite,
  type ProxyFaults,
  type BreakableFaults,
  type TestApi,
} from './conformance.js';
export { watcherReadsContract } from './conformance-watchers.js';
export { TcpProxy, type TcpAddress } from './tcp-proxy.js';
export { openProcessClients, type CrossProcessClients, type ProcessClients } from './cross-process.js';
export { VirtualScheduler, VirtualClock, VIRTUAL_EPOCH_MS, type VirtualClockOptions } from './virtual-time.js';
export { FaultyStorage, noFaults, type FaultPlan } from './faulty-storage.js';
export {
  simulate,
  shapeOf,
  replayCommand,
  type SimulationConfig,
  type SimulationResult,
  type Violation,
  type FaultKind,
} from './simulation.js';
export {
  simulateConsumers,
  consumerShapeOf,
  consumerReplayCommand,
  consumerUnsafeFlags,
  type ConsumerSimulationConfig,
  type ConsumerSimulationResult,
  type ConsumerShape,
  type PoisonShape,
  type ConsumerViolation,
  type ConsumerGuarantee,
  type ConsumerFaultKind,
  type InitialPositionKind,
} from './consumer-simulation.js';
export { ProcessSource } from './process-source.js';
export { seededRandom, shuffled } from '../clock.js';
export {
  withUnsafe,
  type UnsafeSwitches,
  type CoordinatorUnsafe,
  type ElectorUnsafe,
  type ConsumerUnsafe,
  type ShardSyncUnsafe,
  type MultiStreamSyncUnsafe,
} from '../unsafe.js';
