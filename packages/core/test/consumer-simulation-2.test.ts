import { consumerSimulationSeeds } from './support/consumer-simulation-seeds.js';

consumerSimulationSeeds(501, 500);
