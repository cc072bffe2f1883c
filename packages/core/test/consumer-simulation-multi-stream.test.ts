import { consumerSimulationSeeds } from './support/consumer-simulation-seeds.js';

// Multi-stream groups whatever the seed draws (a third of the other files' seeds are too): streams added,
// removed and added back, removed for good, listings that fail, and per-stream initial positions.
consumerSimulationSeeds(1001, 200, { multiStream: true });
