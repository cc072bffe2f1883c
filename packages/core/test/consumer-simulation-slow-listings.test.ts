import { consumerSimulationSeedList } from './support/consumer-simulation-seeds.js';

// The opt-in fault of lease listings that stall while their worker's heartbeats go on (`pnpm sim --consumer
// --slow-listings`), on seeds 1-100. Seeds 53 and 90 found that a stop waited for a take tick's listing
// (53: its leases were not handed over in time and lapsed) or the leader's (90: the stop took its whole
// timeout) however long the store took to answer; a stopping worker now gives such a read up. Seed 327
// found that a stop waited for its take tick's writes before draining, its readers reading on meanwhile a
// stream that had left the list; a stop now drains the leases it holds at once.
consumerSimulationSeedList(
  'with stalled lease listings, seeds 1 to 100 and 327',
  [...Array.from({ length: 100 }, (_, i) => i + 1), 327],
  { faults: { slowListings: true } },
);

// Seed 183 (rewinding) found that an owner without a change feed that held a lease from a listing read
// before a rewind request was written on it, having seen the request's mark on the leader record before
// it held the lease, never applied the request: it now hears of it from the newer record its next write's
// conflict (or a listing) brings.
// Seed 1181 (rewinding) stops a worker whose handler fails every call while its storage answers three
// calls slowly (0.2-1.7 s each, the storage's rare slow answers): the stop's time is then not judged.
consumerSimulationSeedList('rewinding, with stalled lease listings, seeds 151 to 200 (183 among them) and 1181', [...Array.from({ length: 50 }, (_, i) => i + 151), 1181], {
  rewind: true,
  faults: { slowListings: true },
});
