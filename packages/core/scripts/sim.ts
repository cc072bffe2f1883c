/**
 * `pnpm sim`: runs the deterministic simulations over many seeds, or replays one.
 *
 *   pnpm sim --seeds 500                       the lease simulation, 500 seeds from 1
 *   pnpm sim --seeds 200 --workers 16 --leases 256
 *   pnpm sim --seeds 3 --from 101 --workers 1000 --leases 1000 --fault-ms 10000
 *                                              a group of 1,000 workers (limits.maxMembers), four to five CPU
 *                                              minutes a seed; like every run, its faults crash the leader and
 *                                              a tenth of the group at once, and it ends by crashing both together
 *   pnpm sim --seed 1234 --trace               replay one seed and print its events
 *   pnpm sim --seeds 200 --slow-listings       adds to the faults a member's lease listings stalling while its
 *                                              heartbeats go on (off by default: the fixed seeds keep their
 *                                              schedules); with --consumer too
 *   pnpm sim --seeds 200 --late-leases        adds leases created while the group runs, one of them during the
 *                                              cold start (off by default, as --slow-listings)
 *   pnpm sim --seeds 200 --faults latency,lateLeases
 *                                              draws only the fault kinds named (a replay names them when a run
 *                                              turned some of the default ones off)
 *   pnpm sim --seeds 200 --no-change-feed      only runs without a change feed (a third of the seeds, by default),
 *                                              as on the DynamoDB adapter; --change-feed runs only with one
 *   pnpm sim --seeds 200 --no-roster-moves     only runs whose store does not say whom the digest's moves named
 *                                              (half the seeds, by default); --roster-moves only runs whose does
 *   pnpm sim --seeds 200 --failure-domains 4  only runs whose workers name one of 4 failure domains, each mass crash
 *                                              a whole domain (a third of the seeds run 4 to 6, drawn; 0 for none)
 *   pnpm sim --seeds 200 --no-lease-reads      only runs whose store reads each lease by key alone (no getLeases;
 *                                              half the seeds, by default); --lease-reads only runs whose does not
 *   pnpm sim --consumer --seeds 1000           the consumer simulation (whole runtime, resharding source)
 *   pnpm sim --consumer --seed 77 --trace      replay one consumer seed
 *   pnpm sim --consumer --seeds 200 --exactly-once
 *                                              handlers commit their effects with their checkpoints; each applies once
 *   pnpm sim --consumer --multi-stream --seeds 500
 *                                              only multi-stream groups (a third of the seeds are, by default);
 *                                              --single-stream runs only groups of one stream
 *   pnpm sim --consumer --rewind --seeds 300   only runs where an operator rewinds the live group (a quarter of
 *                                              the seeds do, by default); --no-rewind runs none
 *   pnpm sim --consumer --seeds 200 --unsafe-keep-failed-pump
 *                                              bring back one runtime defect and watch the checks catch it
 */
import { parseArgs } from 'node:util';
import {
  consumerUnsafeFlags,
  faultsNamed,
  seededRandom,
  simulate,
  simulateConsumers,
  type ConsumerSimulationConfig,
  type InitialPositionKind,
  type SimulationConfig,
} from '../src/testing/index.js';

/**
 * The failure domains a seed runs with when none is asked for: a third of the seeds run 4, 5 or 6 (each
 * mass crash then a whole domain), the rest none; drawn apart from the run's randomness.
 */
function drawnDomains(seed: number): number {
  const draw = seededRandom((seed * 2_971 + 5) >>> 0);
  return draw.next() < 1 / 3 ? 4 + Math.floor(draw.next() * 3) : 0;
}

const { values } = parseArgs({
  options: {
    seeds: { type: 'string', default: '100' },
    from: { type: 'string', default: '1' },
    seed: { type: 'string' },
    workers: { type: 'string' },
    leases: { type: 'string' },
    'fault-ms': { type: 'string' },
    trace: { type: 'boolean', default: false },
    'unsafe-skip-self-fencing': { type: 'boolean', default: false },
    'unsafe-expiry-factor': { type: 'string' },
    'unsafe-own-duration-only': { type: 'boolean', default: false },
    'unsafe-skip-roster-digest': { type: 'boolean', default: false },
    'unsafe-moves-unread': { type: 'boolean', default: false },
    'unsafe-ring-keeps-the-dead': { type: 'boolean', default: false },
    'unsafe-note-trusted': { type: 'boolean', default: false },
    'unsafe-asks-trusted': { type: 'boolean', default: false },
    'unsafe-free-retry-ignores-owner': { type: 'boolean', default: false },
    'unsafe-adoption-ignores-cap': { type: 'boolean', default: false },
    'unsafe-given-back-planned': { type: 'boolean', default: false },
    'unsafe-shortfall-ignored': { type: 'boolean', default: false },
    'unsafe-below-ignored': { type: 'boolean', default: false },
    'unsafe-cold-deal-trusted': { type: 'boolean', default: false },
    'unsafe-roster-before-listing': { type: 'boolean', default: false },
    'unsafe-cold-listing-ignores-news': { type: 'boolean', default: false },
    'unsafe-cold-dealer-awaited': { type: 'boolean', default: false },
    'unsafe-late-deal-ignored': { type: 'boolean', default: false },
    'unsafe-feed-addressed-to-self': { type: 'boolean', default: false },
    'unsafe-handover-to-leaving': { type: 'boolean', default: false },
    'unsafe-feed-unaddressed': { type: 'boolean', default: false },
    'no-change-feed': { type: 'boolean', default: false },
    'slow-listings': { type: 'boolean', default: false },
    'late-leases': { type: 'boolean', default: false },
    faults: { type: 'string' },
    'change-feed': { type: 'boolean', default: false },
    'no-watcher-reads': { type: 'boolean', default: false },
    'roster-moves': { type: 'boolean', default: false },
    'no-roster-moves': { type: 'boolean', default: false },
    'lease-reads': { type: 'boolean', default: false },
    'failure-domains': { type: 'string' },
    'unsafe-domains-ignored': { type: 'boolean', default: false },
    'unsafe-lost-domains-dealt': { type: 'boolean', default: false },
    'unsafe-due-reads-skipped': { type: 'boolean', default: false },
    'unsafe-reads-out-of-turn': { type: 'boolean', default: false },
    'no-lease-reads': { type: 'boolean', default: false },
    'whole-roster-up-to': { type: 'string' },
    consumer: { type: 'boolean', default: false },
    'exactly-once': { type: 'boolean', default: false },
    'multi-stream': { type: 'boolean', default: false },
    'single-stream': { type: 'boolean', default: false },
    rewind: { type: 'boolean', default: false },
    'no-rewind': { type: 'boolean', default: false },
    shards: { type: 'string' },
    'initial-position': { type: 'string' },
    ...Object.fromEntries(consumerUnsafeFlags.filter(([name]) => name !== 'skipSelfFencing').map(([, flag]) => [flag.slice(2), { type: 'boolean' as const, default: false }])),
  },
});

const number = (value: string | undefined): number | undefined => (value === undefined ? undefined : Number(value));
const seeds = values.seed !== undefined ? [Number(values.seed)] : Array.from({ length: Number(values.seeds) }, (_, i) => Number(values.from) + i);
const trace = values.trace ? (line: string): void => console.log(line) : undefined;
const flag = (name: string): boolean => (values as Record<string, unknown>)[name] === true;

let failed = 0;
const started = performance.now();
/** How long each passing lease seed took to balance after its faults stopped, for the closing summary. */
const balanced: { seed: number; ms: number }[] = [];
if (values.consumer) {
  const unsafe = Object.fromEntries(consumerUnsafeFlags.filter(([, option]) => flag(option.slice(2))).map(([name]) => [name, true]));
  const initialPosition = values['initial-position'];
  if (initialPosition !== undefined && !['TRIM_HORIZON', 'LATEST', 'AT_TIMESTAMP'].includes(initialPosition)) {
    throw new Error(`--initial-position must be TRIM_HORIZON, LATEST or AT_TIMESTAMP, got ${initialPosition}`);
  }
  if (values['multi-stream'] && values['single-stream']) throw new Error('--multi-stream and --single-stream exclude each other');
  const multiStream = values['multi-stream'] ? true : values['single-stream'] ? false : undefined;
  if (values.rewind && values['no-rewind']) throw new Error('--rewind and --no-rewind exclude each other');
  const rewind = values.rewind ? true : values['no-rewind'] ? false : undefined;
  for (const seed of seeds) {
    const config: ConsumerSimulationConfig = {
      seed,
      multiStream,
      workers: number(values.workers),
      shards: number(values.shards),
      initialPosition: initialPosition as InitialPositionKind | undefined,
      faultPhaseMs: number(values['fault-ms']),
      unsafe: Object.keys(unsafe).length > 0 ? unsafe : undefined,
      exactlyOnce: values['exactly-once'],
      rewind,
      ...(values['slow-listings'] ? { faults: { slowListings: true } } : {}),
      trace,
    };
    const result = await simulateConsumers(config);
    const { shape, stats } = result;
    const streams = shape.multiStream ? `${shape.multiStream.streams.length} streams (${shape.multiStream.streams.map((stream) => stream.life).join(', ')}), ` : '';
    const rewinds = shape.rewind ? `, ${shape.rewind.rewinds.map((draw) => `${draw.target} of ${draw.selection}`).join(' and ')} rewinds ${shape.rewind.changeFeed ? 'with' : 'without'} a change feed` : '';
    const described = `${shape.workers} workers, ${streams}${shape.shards} shards, ${shape.initialPosition}, ${stats.generations} generations${rewinds}`;
    if (result.violations.length > 0) {
      failed++;
      console.log(`seed ${seed} (${described}): ${result.violations.length} violations`);
      for (const violation of result.violations.slice(0, 5)) console.log(`  ${violation.guarantee} at ${violation.atMs.toFixed(0)} ms: ${violation.detail}`);
      console.log(`  replay: ${result.replay}`);
    } else if (seeds.length === 1 || values.trace) {
      console.log(`seed ${seed} (${described}): ok, ${stats.delivered} of ${stats.owed} owed records delivered, drained ${stats.drainedAfterMs.toFixed(0)} ms after faults stopped`, stats);
    }
  }
} else {
  const unsafe = {
    ...(values['unsafe-skip-self-fencing'] ? { skipSelfFencing: true } : {}),
    ...(values['unsafe-expiry-factor'] !== undefined ? { expiryFactor: Number(values['unsafe-expiry-factor']) } : {}),
    ...(values['unsafe-own-duration-only'] ? { ownDurationOnly: true } : {}),
    ...(values['unsafe-skip-roster-digest'] ? { skipRosterDigest: true } : {}),
    ...(values['unsafe-moves-unread'] ? { movesUnread: true } : {}),
    ...(values['unsafe-ring-keeps-the-dead'] ? { ringKeepsTheDead: true } : {}),
    ...(values['unsafe-note-trusted'] ? { noteTrusted: true } : {}),
    ...(values['unsafe-asks-trusted'] ? { asksTrusted: true } : {}),
    ...(values['unsafe-free-retry-ignores-owner'] ? { freeRetryIgnoresOwner: true } : {}),
    ...(values['unsafe-adoption-ignores-cap'] ? { adoptionIgnoresCap: true } : {}),
    ...(values['unsafe-given-back-planned'] ? { givenBackPlanned: true } : {}),
    ...(values['unsafe-shortfall-ignored'] ? { shortfallIgnored: true } : {}),
    ...(values['unsafe-below-ignored'] ? { belowIgnored: true } : {}),
    ...(values['unsafe-cold-deal-trusted'] ? { coldDealTrusted: true } : {}),
    ...(values['unsafe-roster-before-listing'] ? { rosterBeforeListing: true } : {}),
    ...(values['unsafe-cold-listing-ignores-news'] ? { coldListingIgnoresNews: true } : {}),
    ...(values['unsafe-cold-dealer-awaited'] ? { coldDealerAwaited: true } : {}),
    ...(values['unsafe-late-deal-ignored'] ? { lateDealIgnored: true } : {}),
    ...(values['unsafe-feed-addressed-to-self'] ? { feedAddressedToSelf: true } : {}),
    ...(values['unsafe-handover-to-leaving'] ? { handoverToLeaving: true } : {}),
    ...(values['unsafe-feed-unaddressed'] ? { feedUnaddressed: true } : {}),
    ...(values['unsafe-domains-ignored'] ? { domainsIgnored: true } : {}),
    ...(values['unsafe-lost-domains-dealt'] ? { lostDomainsDealt: true } : {}),
    ...(values['unsafe-due-reads-skipped'] ? { dueReadsSkipped: true } : {}),
    ...(values['unsafe-reads-out-of-turn'] ? { readsOutOfTurn: true } : {}),
  };
  if (values['no-change-feed'] && values['change-feed']) throw new Error('--change-feed and --no-change-feed exclude each other');
  for (const seed of seeds) {
    const config: SimulationConfig = {
      seed,
      workers: number(values.workers),
      leases: number(values.leases),
      faultPhaseMs: number(values['fault-ms']),
      coordinator:
        Object.keys(unsafe).length > 0 || values['whole-roster-up-to'] !== undefined
          ? { ...(Object.keys(unsafe).length > 0 ? { unsafe } : {}), ...(values['whole-roster-up-to'] !== undefined ? { wholeRosterUpTo: Number(values['whole-roster-up-to']) } : {}) }
          : undefined,
      ...(values['no-watcher-reads'] ? { watcherReads: false } : {}),
      ...(values['no-roster-moves'] ? { rosterMoves: false } : values['roster-moves'] ? { rosterMoves: true } : {}),
      ...(values['no-lease-reads'] ? { leaseReads: false } : values['lease-reads'] ? { leaseReads: true } : {}),
      failureDomains: values['failure-domains'] !== undefined ? Number(values['failure-domains']) : drawnDomains(seed),
      ...(values['no-change-feed'] ? { changeFeed: false } : values['change-feed'] ? { changeFeed: true } : {}),
      ...(values.faults !== undefined
        ? { faults: faultsNamed(values.faults) }
        : values['slow-listings'] || values['late-leases']
          ? { faults: { ...(values['slow-listings'] ? { slowListings: true } : {}), ...(values['late-leases'] ? { lateLeases: true } : {}) } }
          : {}),
      trace,
    };
    const result = await simulate(config);
    if (result.balancedAfterMs >= 0) balanced.push({ seed, ms: result.balancedAfterMs });
    if (result.violations.length > 0) {
      failed++;
      console.log(`seed ${seed} (${result.workers} workers, ${result.leases} leases): ${result.violations.length} violations`);
      for (const violation of result.violations.slice(0, 5)) console.log(`  ${violation.guarantee} at ${violation.atMs.toFixed(0)} ms: ${violation.detail}`);
      console.log(`  replay: ${result.replay}`);
    } else if (seeds.length === 1 || values.trace) {
      console.log(
        `seed ${seed} (${result.workers} workers, ${result.leases} leases): ok, owned ${result.ownedAfterMs.toFixed(0)} ms, balanced ${result.balancedAfterMs.toFixed(0)} ms and led ${result.leaderAfterMs.toFixed(0)} ms after faults stopped`,
        result.stats,
      );
    }
  }
}
if (balanced.length > 1) {
  const sorted = [...balanced].sort((a, b) => a.ms - b.ms);
  const at = (q: number): number => (sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] as { ms: number }).ms;
  const slowest = sorted[sorted.length - 1] as { seed: number; ms: number };
  console.log(`balanced after faults stopped: p50 ${at(0.5).toFixed(0)} ms, p99 ${at(0.99).toFixed(0)} ms, max ${slowest.ms.toFixed(0)} ms (seed ${slowest.seed})`);
}
console.log(`${seeds.length - failed} passed, ${failed} failed (${((performance.now() - started) / 1000).toFixed(1)} s)`);
process.exitCode = failed === 0 ? 0 : 1;
