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
