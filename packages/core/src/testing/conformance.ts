/**
 * The adapter conformance suite. Any storage adapter, in any repository, proves it keeps the contract of
 * `storage.ts` by running this against its real backend:
 *
 * ```ts
 * import { describe, it } from 'vitest';
 * import { runConformanceSuite } from '@leasehold/core/testing';
 * runConformanceSuite({ describe, it }, { name: 'MyStorage', createStorage: async () => new MyStorage(...) });
 * ```
 *
 * Each test works in a fresh, random group, so tests never depend on each other's cleanup and a failed
 * test leaves its records behind to be read. Test titles state the rules of the contract in the words
 * the contract's documentation uses. A test that needs a hook the target does not provide is skipped,
 * and its skip note says what was not checked.
 *
 * The first test, "contract version" in `conformance-contract-version.ts`, checks that the adapter declares
 * the storage contract version of this core; when it does not, that test fails with the
 * `ContractVersionError` core would throw and every other test is skipped.
 *
 * The rules live in one file per group of tests, so that a failing test's name leads to its file: "lease
 * contract" in `conformance-leases.ts`, "leader contract" in `conformance-leader.ts`, "roster contract" in
 * `conformance-roster.ts`, "listing, names and limits" in `conformance-limits.ts`, "concurrency",
 * "monotonicity" and "reads while others write" in `conformance-concurrency.ts`, "bad input" in
 * `conformance-bad-input.ts`, "corrupt records" in `conformance-corruption.ts`, "change feed" in
 * `conformance-change-feed.ts`, "lost connections" in `conformance-faults.ts`, "watchers' reads" in
 * `conformance-watchers.ts`, "roster moves" in `conformance-roster-moves.ts` and "transactional checkpoint" in
 * `conformance-transactions.ts`. What they
 * share is in `conformance-kit.ts`; `@leasehold/core/testing` exports each group's `*Contract` from its file.
 */
import { contractVersionContract } from './conformance-contract-version.js';
import { badInputContract } from './conformance-bad-input.js';
import { changeFeedContract } from './conformance-change-feed.js';
import { concurrencyContract, monotonicityContract, readsWhileWritingContract } from './conformance-concurrency.js';
import { corruptionContract } from './conformance-corruption.js';
import { faultContract } from './conformance-faults.js';
import { leaderContract } from './conformance-leader.js';
import { leaseContract } from './conformance-leases.js';
import { limitsContract } from './conformance-limits.js';
import { rosterContract } from './conformance-roster.js';
import { transactionalCheckpointContract } from './conformance-transactions.js';
import { watcherReadsContract } from './conformance-watchers.js';
import { leaseReadsContract } from './conformance-lease-reads.js';
import { rosterMovesContract } from './conformance-roster-moves.js';
import type { ConformanceTarget, TestApi } from './conformance-kit.js';

/** Runs every group of the conformance suite. */
export function runConformanceSuite(t: TestApi, target: ConformanceTarget): void {
  // First: an adapter of another contract version fails this one test, and the others are skipped.
  contractVersionContract(t, target);
  leaseContract(t, target);
  leaderContract(t, target);
  rosterContract(t, target);
  limitsContract(t, target);
  concurrencyContract(t, target);
  monotonicityContract(t, target);
  badInputContract(t, target);
  corruptionContract(t, target);
  changeFeedContract(t, target);
  faultContract(t, target);
  readsWhileWritingContract(t, target);
  watcherReadsContract(t, target);
  leaseReadsContract(t, target);
  rosterMovesContract(t, target);
  transactionalCheckpointContract(t, target);
}
