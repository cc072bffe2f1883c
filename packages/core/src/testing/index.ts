export { runConformanceSuite } from './conformance.js';
export type { ConformanceTarget, TransactionalCheckpoint, UserWrite, ProxyFaults, BreakableFaults, TestApi } from './conformance-kit.js';
export { contractVersionContract } from './conformance-contract-version.js';
export { leaseContract } from './conformance-leases.js';
export { leaderContract } from './conformance-leader.js';
export { rosterContract } from './conformance-roster.js';
export { limitsContract } from './conformance-limits.js';
export { concurrencyContract, monotonicityContract, readsWhileWritingContract } from './conformance-concurrency.js';
export { badInputContract } from './conformance-bad-input.js';
export { corruptionContract } from './conformance-corruption.js';
export { changeFeedContract } from './conformance-change-feed.js';
export { faultContract } from './conformance-faults.js';
export { watcherReadsContract } from './conformance-watchers.js';
export { leaseReadsContract } from './conformance-lease-reads.js';
export { rosterMovesContract } from './conformance-roster-moves.js';
export { transactionalCheckpointContract } from './conformance-transactions.js';
export { TcpProxy, type TcpAddress } from './tcp-proxy.js';
export { openProcessClients, type CrossProcessClients, type ProcessClients } from './cross-process.js';
export { VirtualScheduler, VirtualClock, VIRTUAL_EPOCH_MS, type VirtualClockOptions } from './virtual-time.js';
export { FaultyStorage, noFaults, type FaultPlan } from './faulty-storage.js';
export {
  simulate,
  shapeOf,
  replayCommand,
  faultsNamed,
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
export { ringOrder, watchersOf } from '../lease/watchers.js';
export {
  withUnsafe,
  type UnsafeSwitches,
  type CoordinatorUnsafe,
  type ElectorUnsafe,
  type ConsumerUnsafe,
  type ShardSyncUnsafe,
  type MultiStreamSyncUnsafe,
} from '../unsafe.js';
