/**
 * `pnpm sim`: runs the deterministic simulation over many seeds, or replays one.
 *
 *   pnpm sim --seeds 500                       500 seeds from 1, shapes drawn from each seed
 *   pnpm sim --seeds 200 --workers 16 --leases 256
 *   pnpm sim --seed 1234 --trace               replay one seed and print its events
 */
import { parseArgs } from 'node:util';
import { simulate, type SimulationConfig } from '../src/testing/index.js';

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
  },
});

const number = (value: string | undefined): number | undefined => (value === undefined ? undefined : Number(value));
const seeds = values.seed !== undefined ? [Number(values.seed)] : Array.from({ length: Number(values.seeds) }, (_, i) => Number(values.from) + i);
const unsafe = {
  ...(values['unsafe-skip-self-fencing'] ? { skipSelfFencing: true } : {}),
  ...(values['unsafe-expiry-factor'] !== undefined ? { expiryFactor: Number(values['unsafe-expiry-factor']) } : {}),
};

let failed = 0;
const started = performance.now();
for (const seed of seeds) {
  const config: SimulationConfig = {
    seed,
    workers: number(values.workers),
    leases: number(values.leases),
    faultPhaseMs: number(values['fault-ms']),
    coordinator: Object.keys(unsafe).length > 0 ? { unsafe } : undefined,
    trace: values.trace ? (line) => console.log(line) : undefined,
  };
  const result = await simulate(config);
  if (result.violations.length > 0) {
    failed++;
    console.log(`seed ${seed} (${result.workers} workers, ${result.leases} leases): ${result.violations.length} violations`);
    for (const violation of result.violations.slice(0, 5)) console.log(`  ${violation.guarantee} at ${violation.atMs.toFixed(0)} ms: ${violation.detail}`);
    console.log(`  replay: ${result.replay}`);
  } else if (seeds.length === 1 || values.trace) {
    console.log(`seed ${seed}: ok, owned ${result.ownedAfterMs.toFixed(0)} ms and balanced ${result.balancedAfterMs.toFixed(0)} ms after faults stopped`, result.stats);
  }
}
console.log(`${seeds.length - failed} passed, ${failed} failed (${((performance.now() - started) / 1000).toFixed(1)} s)`);
process.exitCode = failed === 0 ? 0 : 1;
