import { describe, expect, it } from 'vitest';
import { shapeOf, simulate, type CoordinatorUnsafe } from '../src/testing/index.js';

async function firstViolation(unsafe: CoordinatorUnsafe, timing: { wholeRosterUpTo?: number } = {}, seeds = 200) {
  for (let seed = 1; seed <= seeds; seed++) {
    const result = await simulate({ seed, coordinator: { ...timing, unsafe } });
    if (result.violations.length > 0) return result;
  }
  return undefined;
}

describe('the simulation harness', () => {
  it('catches a coordinator that skips self-fencing within 200 seeds, and names the replay command', async () => {
    const result = await firstViolation({ skipSelfFencing: true });
    expect(result).toBeDefined();
    expect(result?.violations.map((violation) => violation.guarantee)).toContain('single-owner');
    expect(result?.replay).toMatch(/^pnpm sim --seed \d+ --workers \d+ --leases \d+ --unsafe-skip-self-fencing --trace$/);
  }, 600_000);

  it('catches a coordinator that counts a lease expired after half its duration within 200 seeds', async () => {
    const result = await firstViolation({ expiryFactor: 0.5 });
    expect(result).toBeDefined();
    expect(result?.violations.map((violation) => violation.guarantee)).toContain('single-owner');
  }, 600_000);

  it('catches a coordinator that declares a member dead after its own, shorter lease duration instead of the member\'s within 200 seeds', async () => {
    const result = await firstViolation({ ownDurationOnly: true });
    expect(result?.violations.some((violation) => violation.guarantee === 'single-owner')).toBe(true);
  });

  // A member must die together with every one of its watchers for this defect to show: one seed in a hundred or so.
  it('catches a coordinator whose ring of watchers keeps the members declared dead within 400 seeds: a member whose watchers died with it is watched by nobody alive', async () => {
    const result = await firstViolation({ ringKeepsTheDead: true }, { wholeRosterUpTo: 0 }, 400);
    expect(result?.violations.map((violation) => violation.guarantee)).toContain('liveness');
    expect(result?.replay).toMatch(/--unsafe-ring-keeps-the-dead --whole-roster-up-to 0 --trace$/);
  }, 600_000);

  // The members that did not declare a death leave its leases to the declarer's deal for a take tick and a
  // half, so a deal rarely conflicts with a take: 2 of seeds 1-500 show the defect, the first at 315 (4,
  // the first at 45, before a large group's cold start dealt from its early listing and its declarations
  // read back the leases a deal gave the dead).
  it('catches a declarer that deals or frees a dead member\'s lease again on the record its conflict carries, whoever that names, within 500 seeds', async () => {
    const result = await firstViolation({ freeRetryIgnoresOwner: true }, { wholeRosterUpTo: 0 }, 500);
    expect(result?.violations.some((violation) => violation.guarantee === 'single-owner' && /written free while|got .* while .* still held it/.test(violation.detail))).toBe(true);
    expect(result?.replay).toMatch(/--unsafe-free-retry-ignores-owner --whole-roster-up-to 0 --trace$/);
  }, 600_000);

  it('catches a declarer that, without a change feed, takes a dead member\'s leases beyond its maxLeasesPerWorker, within 200 seeds', async () => {
    const result = await firstViolation({ adoptionIgnoresCap: true }, { wholeRosterUpTo: 0 });
    expect(result?.violations.some((violation) => violation.guarantee === 'balance' && /above its maxLeasesPerWorker/.test(violation.detail))).toBe(true);
    expect(result?.replay).toMatch(/--unsafe-adoption-ignores-cap --whole-roster-up-to 0 --trace$/);
  }, 600_000);

  it('catches members that never list when the members\' counts fall short of the leases they listed, within 200 seeds: a lease handed or freed while nobody was looking waits, and the group is not whole or not balanced in time', async () => {
    const result = await firstViolation({ shortfallIgnored: true });
    expect(result?.violations.some((violation) => violation.guarantee === 'liveness' || violation.guarantee === 'balance')).toBe(true);
    expect(result?.replay).toMatch(/--unsafe-shortfall-ignored --trace$/);
  }, 600_000);

  // Seeds 1-200 catch it 3 times, the first at 63 (a lease without a live holder), then 120 and 200 (not balanced).
  it('catches members that take a leave\'s note of its handovers for one naming every lease it had, whatever it says, within 200 seeds: the leases it wrote free or lost track of wait for a listing something else brings', async () => {
    const result = await firstViolation({ noteTrusted: true });
    expect(result?.violations.some((violation) => violation.guarantee === 'liveness' || violation.guarantee === 'balance')).toBe(true);
    expect(result?.replay).toMatch(/--unsafe-note-trusted --trace$/);
  }, 600_000);

  // A join that names its givers: for four take ticks the members count what a newcomer asked for and does not
  // hold yet as on its way; trusted for as long as the asks are read, a giver's refusal (or a handover lost)
  // hides a shortfall. Without a change feed the first seed that catches it is 39 (5 workers over 16
  // leases), then 80 and 120. (5 of 1-400, the first at 95, before the watchers read a member when its
  // heartbeat is due, which moved every run's timing; 12 of 1-1000, the first at 13, before a cold start's
  // portions counted as on their way.)
  it('catches members that count a newcomer\'s asks as leases on their way for as long as they read them, on seed 39 without a change feed: the group is not whole or not balanced in time', async () => {
    expect((await simulate({ seed: 39, changeFeed: false })).violations).toEqual([]);
    const result = await simulate({ seed: 39, changeFeed: false, coordinator: { unsafe: { asksTrusted: true } } });
    expect(result.violations.some((violation) => violation.guarantee === 'liveness' || violation.guarantee === 'balance')).toBe(true);
    expect(result.replay).toMatch(/--seed 39 .*--unsafe-asks-trusted --no-change-feed --trace$/);
  }, 600_000);

  // With a change feed, on a store that reads leases by key one at a time, the first seed that catches it is
  // 122 (6 of seeds 1-400, with `pnpm sim`'s failure domains; 175 before the feed was addressed to each
  // handover's owner and its watchers, which moved every run's timing, and 80 before the watchers read a
  // member when its heartbeat is due); on one that reads many in one call (`getLeases`), 73 with 6 failure
  // domains (2 of 400; 217 before, 122 before that; without failure domains none of 1-400 since the feed
  // was addressed): a member that waits for a deal that never comes to it (its dealer crashed, paused or
  // was cut off before it dealt) holds nothing until the run ends.
  for (const [seed, leaseReads, failureDomains] of [
    [122, false, 0],
    [73, true, 6],
  ] as const) {
    it(`catches cold start members that wait for their dealer's deal however long it takes, on seed ${seed} with a change feed, ${leaseReads ? 'with' : 'without'} getLeases: the group is not whole or not balanced in time`, async () => {
      const shape = { seed, changeFeed: true, leaseReads, ...(failureDomains > 0 ? { failureDomains } : {}) };
      expect((await simulate(shape)).violations).toEqual([]);
      const result = await simulate({ ...shape, coordinator: { unsafe: { coldDealerAwaited: true } } });
      expect(result.violations.some((violation) => violation.guarantee === 'liveness' || violation.guarantee === 'balance')).toBe(true);
      const domains = failureDomains > 0 ? ` --failure-domains ${failureDomains}` : '';
      expect(result.replay).toMatch(new RegExp(`--seed ${seed} .*--unsafe-cold-dealer-awaited ${leaseReads ? '--lease-reads' : '--no-lease-reads'}${domains} --change-feed --trace$`));
    }, 600_000);
  }

  // The rule had no switch before; seeds 1-1000 catch it 4 times, the first at 269 (3, the first at 296,
  // before a large group's cold start dealt from its early listing; slow listings do not catch it more often).
  it('catches a take tick that judges the listed owners on a roster read before its listing within 300 seeds: a member that joined meanwhile has its leases taken while it holds them', async () => {
    const result = await firstViolation({ rosterBeforeListing: true }, {}, 300);
    expect(result?.violations.some((violation) => violation.guarantee === 'single-owner' && /got .* while .* still held it|both hand records of/.test(violation.detail))).toBe(true);
    expect(result?.replay).toMatch(/--unsafe-roster-before-listing( |$)/);
  }, 600_000);

  it('runs groups whose members\' listings stall while their heartbeats go on (opt-in) through the same faults, and names the option in the replay', async () => {
    let stalls = 0;
    for (let seed = 1; seed <= 40; seed++) {
      const result = await simulate({ seed, faults: { slowListings: true }, trace: (line) => void (/fault slowListings/.test(line) && stalls++) });
      expect(result.violations).toEqual([]);
      expect(result.replay).toMatch(/--slow-listings --trace$/);
    }
    expect(stalls).toBeGreaterThan(10);
  }, 600_000);

  it('draws no slow listings and creates no late leases unless a run turns them on, so that the fixed seeds keep their schedules', async () => {
    let optIn = 0;
    for (let seed = 1; seed <= 20; seed++) await simulate({ seed, trace: (line) => void (/fault (slowListings|lateLeases)/.test(line) && optIn++) });
    expect(optIn).toBe(0);
  }, 600_000);

  it('runs groups whose leases are created while they run (opt-in), one of them during the cold start, through the same faults, and names the option in the replay', async () => {
    let created = 0;
    for (let seed = 1; seed <= 40; seed++) {
      const result = await simulate({ seed, faults: { lateLeases: true }, trace: (line) => void (/fault lateLeases created/.test(line) && created++) });
      expect(result.violations).toEqual([]);
      expect(result.replay).toMatch(/--late-leases --trace$/);
    }
    expect(created).toBe(120);
  }, 600_000);

  // A large group's cold start deals from the listing its members asked for while they were joining
  // (DESIGN section 4, taking, step 3). Faults of their own bring listings that would find the lease, so
  // the run is short and draws none: the cold start ends in the quiet phase, whose bound catches it.
  it('catches a cold start that deals from its early listing after a lease was created meanwhile, within 100 seeds of short runs without crashes: the lease waits unheld', async () => {
    const faults = { crash: false, pause: false, cutOff: false, gracefulStop: false, join: false, leaderCrash: false, massCrash: false, watcherCrash: false, lateLeases: true };
    let caught: Awaited<ReturnType<typeof simulate>> | undefined;
    for (let seed = 1; seed <= 100 && !caught; seed++) {
      const result = await simulate({ seed, faultPhaseMs: 3_000, faults, coordinator: { wholeRosterUpTo: 0, unsafe: { coldListingIgnoresNews: true } } });
      if (result.violations.length > 0) caught = result;
    }
    expect(caught?.violations.some((violation) => violation.guarantee === 'liveness' && /without a live holder .*late-/.test(violation.detail))).toBe(true);
    expect(caught?.replay).toMatch(/--unsafe-cold-listing-ignores-news --whole-roster-up-to 0 --faults latency,errors,ambiguous,drift,mixedDurations,capped,lateLeases --trace$/);
    // The same run without the switch keeps every lease held.
    expect((await simulate({ seed: caught?.seed ?? 0, faultPhaseMs: 3_000, faults, coordinator: { wholeRosterUpTo: 0 } })).violations).toEqual([]);
  }, 600_000);

  it('runs a group without a change feed (the DynamoDB adapter has none; a third of the seeds by default) through the same faults', async () => {
    for (let seed = 1; seed <= 20; seed++) {
      const result = await simulate({ seed, changeFeed: false, coordinator: { wholeRosterUpTo: 0 } });
      expect(result.violations).toEqual([]);
      expect(result.replay).toMatch(/--no-change-feed/);
    }
  }, 600_000);

  it('measures liveness from a worker\'s self-fence in the quiet phase, where latency stays: seed 106889 (a heartbeat outlasting its hold 17 s after faults stopped) owns every lease within the bound from it', async () => {
    const result = await simulate({ seed: 106889 });
    expect(result.violations).toEqual([]);
    expect(result.replay).toMatch(/--seed 106889 /);
  }, 600_000);

  // Since a join brings no listing, the first seed that shows it (23) has a lease handed to a member that
  // self-fenced meanwhile, which nobody sees left unheld; the next (49, 75, 109), the join at the end of the faults.
  it('catches members that never advance the roster digest within 200 seeds: the changes are seen only at their next whole read, and the group is not whole or not balanced in time', async () => {
    const result = await firstViolation({ skipRosterDigest: true }, { wholeRosterUpTo: 0 });
    expect(result?.violations.some((violation) => violation.guarantee === 'balance' || violation.guarantee === 'liveness')).toBe(true);
    expect(result?.replay).toMatch(/--unsafe-skip-roster-digest --whole-roster-up-to 0 --trace$/);
  }, 600_000);

  // Seed 74 (2 workers over 9 leases): the new member's join is announced, and a worker that takes the move
  // for read without reading the member keeps its leases until its next whole read, 30 take ticks later.
  // Since the watchers read a member when its heartbeat is due, which moved every run's timing, the first
  // seed that catches it is 232 (2 workers over 4 leases), then 256 and 260.
  it('catches members that take the roster digest\'s moves for read without reading the members named, within 300 seeds: changes are seen only at the next whole read, and the group is not balanced in time', async () => {
    let caught: Awaited<ReturnType<typeof simulate>> | undefined;
    for (let seed = 1; seed <= 300 && !caught; seed++) {
      const result = await simulate({ seed, rosterMoves: true, coordinator: { wholeRosterUpTo: 0, unsafe: { movesUnread: true } } });
      if (result.violations.length > 0) caught = result;
    }
    expect(caught?.violations.some((violation) => violation.guarantee === 'balance' || violation.guarantee === 'liveness')).toBe(true);
    expect(caught?.replay).toMatch(/--unsafe-moves-unread --roster-moves --whole-roster-up-to 0 --trace$/);
    // The same run without the switch reads the members named, and holds.
    expect((await simulate({ seed: caught?.seed ?? 0, rosterMoves: true, coordinator: { wholeRosterUpTo: 0 } })).violations).toEqual([]);
  }, 600_000);

  it('runs groups whose store says whom each move of the roster digest named, and groups whose store does not (half the seeds each), through the same faults', async () => {
    for (const rosterMoves of [true, false]) {
      for (let seed = 1; seed <= 20; seed++) {
        const result = await simulate({ seed, rosterMoves, coordinator: { wholeRosterUpTo: 0 } });
        expect(result.violations).toEqual([]);
        expect(result.replay).toMatch(rosterMoves ? /--roster-moves / : /--no-roster-moves /);
      }
    }
  }, 600_000);

  it('runs groups whose workers name failure domains (2 and 4), each mass crash losing a whole domain, through the same faults, and names them in the replay', async () => {
    let domainCrashes = 0;
    for (const failureDomains of [2, 4]) {
      for (let seed = 1; seed <= 20; seed++) {
        const result = await simulate({ seed, failureDomains, coordinator: { wholeRosterUpTo: 0 }, trace: (line) => void (/fault massCrash/.test(line) && domainCrashes++) });
        expect(result.violations).toEqual([]);
        expect(result.replay).toMatch(new RegExp(`--failure-domains ${failureDomains} `));
      }
    }
    expect(domainCrashes).toBeGreaterThan(5);
  }, 600_000);

  it('runs a group on a store without the watchers\' reads (every member reading the whole roster) through the same faults', async () => {
    for (let seed = 1; seed <= 20; seed++) {
      const result = await simulate({ seed, watcherReads: false });
      expect(result.violations).toEqual([]);
    }
  }, 600_000);

  // Found by fresh seeds: without a change feed, a member at its maxLeasesPerWorker handed one lease more
  // (two owners' offers crossing) counted the one it gave back in its plan of moves, handed one of its own
  // away, asked for one back, and was over its cap again: the group passed leases to and fro until the bound.
  // Seeds 148403 and 149568 failed with that count fixed alone: a capped member's leases lost to
  // self-fencing, which it had no room to take back, stayed named for it (it now gives them back).
  // Since a join brings no listing, 145900 runs another schedule: 151199 without a feed (1 of seeds
  // 151000-151199) showed the count. Since a newcomer waits one tick and a stop and a start read together
  // bring no listing, no seed found shows it: none of 162,500-167,499 without a feed, 1-2,000 of 12
  // workers over 60 leases with only capped, join, stop, crash and latency faults (with a feed and
  // without), 151,000-152,499 without the watchers' reads or with watchers everywhere; nor, on the way to
  // that change, 140,000-142,999 and 151,200-154,199 without a feed, 1-3,000 with only capped, join and
  // stop faults. The unit pair in membership.test.ts shows what the switch brings back; the seeds that
  // found the defect keep running here.
  it('keeps seed 145900 balanced, and 151199 without a feed: a member at its cap handed one lease more gives back only that one', async () => {
    for (const seed of [145900, 148403, 149568]) expect((await simulate({ seed })).violations).toEqual([]);
    expect((await simulate({ seed: 151199, changeFeed: false })).violations).toEqual([]);
  }, 600_000);

  // Found by fresh seeds while a join was made to bring no listing: a member two below the most loaded that
  // listed only when the plan of moves on the members' counts gave it a lease missed, without a feed, a lease
  // offered to it by an owner whose counts differed, which waited for the safety-net listing.
  it('keeps seeds 148731, 152630 and 153189 whole without a change feed: a member two below the most loaded lists every tick', async () => {
    for (const seed of [148731, 152630, 153189]) expect((await simulate({ seed, changeFeed: false })).violations).toEqual([]);
  }, 600_000);

  it('replays a seed exactly: the same seed gives the same run', async () => {
    const [a, b] = [await simulate({ seed: 77 }), await simulate({ seed: 77 })];
    expect(b).toEqual(a);
    expect(a.stats.acquisitions).toBeGreaterThan(0);
    expect(a.stats.checkpoints).toBeGreaterThan(0);
  });

  it('draws mostly small groups from seeds, and sometimes 16 workers over 256 leases', () => {
    const shapes = Array.from({ length: 2000 }, (_, i) => shapeOf(i + 1));
    expect(Math.max(...shapes.map((shape) => shape.workers))).toBe(16);
    expect(Math.max(...shapes.map((shape) => shape.leases))).toBe(256);
    expect(shapes.filter((shape) => shape.leases <= 24).length).toBeGreaterThan(1000);
  });
});
