import { consumerSimulationSeeds } from './support/consumer-simulation-seeds.js';

// 1,000 consumer seeds in all, split over two files so that the runner spreads them over both cores.
consumerSimulationSeeds(1, 500);
