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
