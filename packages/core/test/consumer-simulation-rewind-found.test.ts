import { consumerSimulationSeedList } from './support/consumer-simulation-seeds.js';

// A handful of rewinding seeds in every run, the long set runs 200 (consumer-simulation-rewind.test.ts).
// Seed 22 found that a free child already at the rewind's target was left unwritten, so a worker that had
// listed the group before the request landed took it and read it before its parent was read again; seed 25
// that a reader started while the rewind was being applied (the lease re-acquired while its last reader
// wound down) read on from the old checkpoint and checkpointed over the rewind; seed 5244 that a finished
// parent was moved back while a child whose record could not be read back was still being read; seed 5137
// that a batch's context of a reader that had failed before the rewind (its reader started again) still
// checkpointed over it; seed 5010 that a worker without a change feed, looking for a request when a stream
// left its list, read on from that stream until the look was done; seed 6170 that a child rewound while it
// was being handed over, its parent to be read again first, was read by the worker it was handed to;
// seed 5513 that a finished child deleted while its parent's lease stood (the parent held by a live
// owner) hid the grandchild from a rewind of the parent, which read the grandchild first (its switch,
// deleteBeforeParents, is shown by shard-sync.test.ts: the runs reach it too rarely for a bounded search);
// seed 102217 that a worker stopping while its handler failed every call gave up the handover of a lease
// whose version the rewind tool's retried requests moved twice, and left it to lapse; seed 104788 that a
// rewind's tool wrote its request again over a later rewind's on a lease it had moved already, whose owner
// then moved it back over what it had read since; seed 103304 that a rewind reset a lease whose parent
// could not be read back, and the lease was read before that parent, which descended from a finished
// lease the rewind read again. Seed 101840 stops a worker whose handler fails every call while requests it
// sent during a storage cut-off still time out (the stop's time is then not judged). Seeds 108717, 108846,
// 110801 and 110810 found that an owner whose write of a rewind applied with its answer lost, and could not
// be read back, read on from the checkpoint of before the rewind and moved the rewound lease past the replay.
// Seed 116943 found that settling left a child nobody held and nobody had started unwritten, so a worker
// that had listed it before the request took it and read it while its parent was moved back. Seed 175353
// found that a stop returned while a handover to a member that had been offered the lease, begun just
// before the stop, still waited for its write's answer: the process gone, the lease lapsed.
consumerSimulationSeedList(
  'rewinding the live group, seeds that found a rewind defect and a few more',
  [22, 25, 5244, 5137, 5010, 6170, 5513, 102217, 104788, 103304, 101840, 108717, 108846, 110801, 110810, 116943, 175353],
  { rewind: true },
);

