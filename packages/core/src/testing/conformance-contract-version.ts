/**
 * The conformance suite's first test, the group "contract version": the adapter declares the version of
 * the storage contract this core implements. An adapter written for another version fails it with the
 * `ContractVersionError` core would throw, and every other test of the run is skipped, so that the run
 * says in one failure what to read (`UPGRADING.md`) instead of failing each rule that changed.
 */
import { checkContractVersion } from '../contract-version.js';
import { STORAGE_CONTRACT_VERSION } from '../storage.js';
import { versionTestedOn, type ConformanceTarget, type TestApi } from './conformance-kit.js';

/** The contract version test: run it first, before the groups whose rules it vouches for. */
export function contractVersionContract(t: TestApi, target: ConformanceTarget): void {
  versionTestedOn(target);
  t.describe(`${target.name}: contract version`, () => {
    t.it(
      `the adapter declares the storage contract version this core implements (contractVersion ${STORAGE_CONTRACT_VERSION})`,
      async () => {
        const storage = await target.createStorage();
        try {
          checkContractVersion(storage, `${target.name}'s storage`, 'testing');
        } finally {
          await target.closeStorage?.(storage);
        }
      },
      target.timeoutMs ?? 60_000,
    );
  });
}
