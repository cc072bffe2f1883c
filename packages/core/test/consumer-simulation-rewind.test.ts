import { consumerSimulationSeeds } from './support/consumer-simulation-seeds.js';

// An operator rewinds the live group whatever the seed draws (a quarter of the other files' seeds do too):
// to a time, to the stream's start, to a position of one lease and forward to now, of every lease, a few or
// a stream, with and without a change feed, while the workers reshard, hand over and crash.
consumerSimulationSeeds(1, 200, { rewind: true });
