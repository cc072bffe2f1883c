import { consumerSimulationSeedList } from './support/consumer-simulation-seeds.js';

// Handlers commit their effects with their checkpoints (ctx.checkpointWith) under every fault of the
// consumer simulation; the effect of each record must be applied exactly once.
consumerSimulationSeedList(
  'with effects committed with their checkpoints (exactly once), seeds 1 to 100',
  Array.from({ length: 100 }, (_, i) => i + 1),
  { exactlyOnce: true },
);
