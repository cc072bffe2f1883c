/**
 * What removed members cost a group's roster read as the group ages: 100 live members, then tombstones
 * made by members that join under fresh ids and are removed (as every restart under a new worker id leaves
 * one), and after each step the median time of 15 `getRoster` calls and, on DynamoDB, the read units one
 * roster read bills (dynalite's `ReturnConsumedCapacity`). `docs/proposals/membership-at-scale.md`, "What
 * removed members cost as a group ages", has the figures and what they mean at 10, 100 and 1,000 workers.
 *
 *   node scripts/with-services.mjs node --import tsx packages/e2e/bench/tombstones.ts [postgres,redis,dynamodb]
 */
import type { MemberState, Storage } from '@leasehold/core';
import { BACKENDS, OPEN, type Backend } from './backends.js';

const GROUP = 'tombstones';
const LIVE = 100;
const STEPS = [0, 1_000, 5_000];
const READS = 15;

const backends = (process.argv[2]?.split(',') ?? BACKENDS) as Backend[];

function memberState(held: number): MemberState {
  return { format: 1, incarnation: `incarnation-${Math.random().toString(36).slice(2, 12)}`, leaseDurationMs: 10_000, status: 'alive', held, changes: 0, requests: [], metadata: {} };
}

async function medianRosterMs(storage: Storage): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < READS; i++) {
    const at = performance.now();
    await storage.getRoster(GROUP);
    times.push(performance.now() - at);
  }
  return times.sort((a, b) => a - b)[Math.floor(READS / 2)]!;
}

/** Joins `count` members under ids never used before and removes each: `count` tombstones where the backend keeps them. */
async function leaveTombstones(storage: Storage, from: number, count: number): Promise<void> {
  for (let i = from; i < from + count; i += 50) {
    await Promise.all(
      Array.from({ length: Math.min(50, from + count - i) }, async (_, j) => {
        const workerId = `ip-10-0-${Math.floor((i + j) / 250)}-${(i + j) % 250}-${1000 + j}-${(i + j).toString(36)}`;
        const joined = await storage.putMember(GROUP, workerId, null, memberState(0));
        if (joined.status !== 'applied') throw new Error(`join of ${workerId}: ${joined.status}`);
        const removed = await storage.removeMember(GROUP, workerId, joined.record.version);
        if (removed.status !== 'applied') throw new Error(`removal of ${workerId}: ${removed.status}`);
      }),
    );
  }
}

for (const backend of backends) {
  const opened = await OPEN[backend]();
  try {
    const storage = opened.storage;
    for (let i = 0; i < LIVE; i++) await storage.putMember(GROUP, `worker-${String(i).padStart(4, '0')}-host-1234-abcdef`, null, memberState(100));
    let made = 0;
    for (const step of STEPS) {
      await leaveTombstones(storage, made, step - made);
      made = step;
      const ms = await medianRosterMs(storage);
      const inspected = opened.inspect ? await opened.inspect(GROUP) : {};
      const units = typeof inspected.rcuPerRosterRead === 'number' ? `, ${inspected.rcuPerRosterRead} read units a roster read` : '';
      console.log(`${backend}: ${LIVE} live members, ${made} removed under fresh ids: getRoster median ${ms.toFixed(2)} ms${units}`);
    }
  } finally {
    await opened.close();
  }
}
process.exit(0);
