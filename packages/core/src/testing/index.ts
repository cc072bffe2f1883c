export {
  runConformanceSuite,
  leaseContract,
  leaderContract,
  concurrencyContract,
  monotonicityContract,
  badInputContract,
  changeFeedContract,
  type ConformanceTarget,
  type TestApi,
} from './conformance.js';
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
  type ConsumerViolation,
  type ConsumerGuarantee,
  type ConsumerFaultKind,
  type InitialPositionKind,
} from './consumer-simulation.js';
export { ProcessSource } from './process-source.js';
