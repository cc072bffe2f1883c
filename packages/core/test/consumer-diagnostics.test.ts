import { describe, expect, it } from 'vitest';
import { world } from './support/consumer-world.js';
import { run } from './support/virtual.js';

describe('Consumer.diagnostics', () => {
  it('counts a running worker’s readers and leases, and nothing is left once it stopped', async () => {
    const { scheduler, consumer, produce } = world(4);
    const worker = consumer('w1');
    await run(scheduler, worker.start());
    produce(['a', 'b', 'c', 'd'], 5);
    await scheduler.advance(10_000);
    const running = worker.diagnostics();
    expect(running.pumps).toBe(4);
    expect(running['coordinator.held']).toBe(4);
    expect(running['coordinator.roster']).toBe(1);
    await run(scheduler, worker.stop());
    const stopped = worker.diagnostics();
    expect(stopped.pumps).toBe(0);
    expect(stopped.drains).toBe(0);
    expect(stopped['coordinator.held']).toBe(0);
    expect(stopped['coordinator.transfers']).toBe(0);
  });

  it('stays bounded while leases move: a worker joining and leaving again and again leaves the long-lived worker’s bookkeeping within what it was after the first two', async () => {
    const { scheduler, consumer, produce } = world(4);
    const stayer = consumer('w1');
    await run(scheduler, stayer.start());
    const after: Array<Readonly<Record<string, number>>> = [];
    for (let round = 1; round <= 8; round++) {
      produce(['a', 'b', 'c', 'd'], 5, round * 5);
      const joiner = consumer(`joiner-${round}`);
      await run(scheduler, joiner.start());
      await scheduler.advance(30_000);
      await run(scheduler, joiner.stop());
      await scheduler.advance(30_000);
      after.push(stayer.diagnostics());
    }
    expect(after[0]!.pumps).toBe(4);
    // Departed members stay in the roster a while: each is removed by its first watcher ten lease durations
    // after it left (neither a join nor a leave that names its handovers brings a listing). The first three
    // rounds set the bound; every count of the later rounds stays within it: nothing piles up per join. The
    // tenures let go are kept by lease key (at most one each), and forgotten at a listing, which joins no
    // longer bring: their bound is the group's four leases.
    const bound = (name: string): number => (name === 'coordinator.letGo' ? 4 : Math.max(after[0]![name]!, after[1]![name]!, after[2]![name]!));
    for (const round of after.slice(3)) {
      for (const [name, value] of Object.entries(round)) expect({ name, value }).toEqual({ name, value: Math.min(value, bound(name)) });
    }
    await run(scheduler, stayer.stop());
  });
});
