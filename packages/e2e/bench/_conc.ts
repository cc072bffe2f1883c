import { Checkpoint, MemorySource, ShardSync, systemClock } from '@leasehold/core';
import { OPEN, runId } from './backends.js';
const backend = (process.argv[2] ?? 'postgres') as 'postgres';
const opened = await OPEN[backend]();
const source = new MemorySource(2000);
for (const c of [1, 2, 4, 8, 16, 1, 4, 16]) {
  const t = performance.now();
  await new ShardSync({ group: `c-${runId}-${c}-${Math.random()}`, source, storage: opened.storage, initialPosition: Checkpoint.TRIM_HORIZON, clock: systemClock, isLeader: () => true, createConcurrency: c }).run(new AbortController().signal);
  console.log(backend, c, ((performance.now() - t) / 1000).toFixed(2));
}
await opened.close();
