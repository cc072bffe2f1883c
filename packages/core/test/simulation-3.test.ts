import { simulationSeeds } from './support/simulation-seeds.js';

// 2,000 seeds in all, split over four files so that the runner spreads them over every core.
simulationSeeds(1001, 500);
