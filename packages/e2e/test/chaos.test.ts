/**
 * The short chaos run of CI: a minute of seeded faults per backend (see src/chaos), then the guarantees
 * of DESIGN section 6 checked from the workers' reports and the monitor's reads of storage. A failure
 * names the command that replays its fault schedule. CHAOS_SEED and CHAOS_SECONDS change the run.
 */
import { startKinesisLocal, type RunningKinesisLocal } from '@leasehold/local-stack';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runChaos, type ChaosResult } from '../src/chaos/harness.js';
import { failuresOf, formatResult } from '../src/chaos/report.js';
import type { StorageKind } from '../src/storage-url.js';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';

const SEED = Number(process.env.CHAOS_SEED ?? 20_251_130);
const SECONDS = Number(process.env.CHAOS_SECONDS ?? 60);

let kinesis: RunningKinesisLocal;

beforeAll(async () => {
  kinesis = await startKinesisLocal();
}, 120_000);

afterAll(async () => {
  await kinesis?.close();
});

describe.each<StorageKind>(['postgres', 'redis', 'dynamodb'])('chaos on %s', (backend) => {
  it(
    'keeps every guarantee under kills, pauses, a backend restart, storage cut-offs and resharding',
    async () => {
      const lines: string[] = [];
      const result: ChaosResult = await runChaos({ backend, seed: SEED, durationMs: SECONDS * 1000, kinesis, log: (line) => lines.push(line) });
      const replay = `replay: pnpm chaos --backend ${backend} --seconds ${SECONDS} --seed ${SEED}\n${lines.join('\n')}\n${formatResult(result)}`;
      const { verdict } = result;
      expect(failuresOf(result), replay).toEqual([]);
      expect(result.drained, replay).toBe(true);
      expect(verdict.ledger.produced, replay).toBeGreaterThan(0);
      expect(verdict.ledger.processed, replay).toBe(verdict.ledger.produced);
      expect(verdict.ledger.lost, replay).toEqual([]);
      expect(verdict.ledger.orderViolations, replay).toEqual([]);
      expect(verdict.badDuplicates, replay).toEqual([]);
      expect(verdict.regressions, replay).toEqual([]);
      expect(verdict.zombies, replay).toEqual([]);
      // Every kind of fault was carried out, so the run proved something about each.
      expect(result.injected.some((line) => line.startsWith('SIGKILL')), replay).toBe(true);
      expect(result.injected.some((line) => line.startsWith('SIGSTOP')), replay).toBe(true);
      expect(result.injected.some((line) => line.includes('cut off from storage')), replay).toBe(true);
      expect(result.injected.some((line) => line.startsWith('split ')), replay).toBe(true);
      expect(result.injected.some((line) => line.startsWith('merged ')), replay).toBe(true);
      expect(result.monitorReads, replay).toBeGreaterThan(0);
    },
    SECONDS * 1000 + 240_000,
  );
});
