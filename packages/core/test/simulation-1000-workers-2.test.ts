import { thousandWorkerSeeds } from './support/simulation-groups.js';

// Two files of one seed each, so that the runner puts them on two cores.
thousandWorkerSeeds([2]);
