import { consumerSimulationSeedList, consumerSimulationSeeds, FOUND_SEEDS } from './support/consumer-simulation-seeds.js';

consumerSimulationSeeds(501, 500);
consumerSimulationSeedList('seeds that once found a bug', FOUND_SEEDS.map(({ seed, multiStream }) => ({ seed, multiStream })));
