/**
 * The check core runs on every storage it is handed (the coordinator, the elector, the consumer, the
 * leader's shard sync, the rewind helpers, the conformance suite): a storage written for another version
 * of the contract fails at once with one error that says what to read, instead of later with many that do
 * not.
 */
import { ContractVersionError, describeValue, InvalidConfigError } from './errors.js';
import { STORAGE_CONTRACT_VERSION } from './storage.js';

/** Where the upgrade notes are, as a reader of the repository or of the package finds them. */
const NOTES = 'UPGRADING.md';

/** `MyStorage` for an instance of a class, `a storage object` for a plain object. */
function adapterName(storage: object): string {
  const constructor = (storage as { constructor?: unknown }).constructor;
  const name = typeof constructor === 'function' ? constructor.name : '';
  return name && constructor !== Object ? name : 'a storage object';
}

/** The sections of the upgrade notes an adapter of `from` follows to reach this core's version. */
function sections(from: number): string {
  const first = Math.max(from + 1, 1);
  return first === STORAGE_CONTRACT_VERSION
    ? `section "Contract version ${STORAGE_CONTRACT_VERSION}"`
    : `sections "Contract version ${first}" to "Contract version ${STORAGE_CONTRACT_VERSION}"`;
}

/**
 * Throws a `ContractVersionError` unless `storage` declares, as its `contractVersion`, the storage contract
 * version this core implements ({@link STORAGE_CONTRACT_VERSION}); `role` says where it was handed
 * (`LeaseCoordinator's storage`), `pkg` who checks. A TypeScript adapter of another version is refused by
 * the compiler too; this is the check a JavaScript adapter, or one cast past the types, meets.
 */
export function checkContractVersion(storage: unknown, role = 'storage', pkg = 'core'): void {
  if (typeof storage !== 'object' || storage === null) {
    throw new InvalidConfigError(`[${pkg}] ${role} must be a storage object, got ${storage === null ? 'null' : typeof storage}`);
  }
  const declared = (storage as { contractVersion?: unknown }).contractVersion;
  if (declared === STORAGE_CONTRACT_VERSION) return;
  const name = adapterName(storage);
  const core = STORAGE_CONTRACT_VERSION;
  if (typeof declared !== 'number' || !Number.isSafeInteger(declared) || declared < 1) {
    const what = declared === undefined ? 'declares no storage contract version (no contractVersion property)' : `declares contractVersion ${describeValue(declared)}, which is not a contract version`;
    throw new ContractVersionError(
      `[${pkg}] ${role}, ${name}, ${what}; this core implements storage contract version ${core}. ` +
        `An adapter declares the version it was written for: one written before version ${core} must make the changes of ${NOTES}, ${sections(0)} it missed, then declare contractVersion = ${core}`,
      { adapterVersion: undefined, coreVersion: core },
    );
  }
  if (declared < core) {
    throw new ContractVersionError(
      `[${pkg}] ${role}, ${name}, implements storage contract version ${declared}, but this core implements version ${core}: ` +
        `make the changes of ${NOTES}, ${sections(declared)}, then declare contractVersion = ${core} (or use a core of contract version ${declared})`,
      { adapterVersion: declared, coreVersion: core },
    );
  }
  throw new ContractVersionError(
    `[${pkg}] ${role}, ${name}, implements storage contract version ${declared}, newer than version ${core} that this core implements: ` +
      `upgrade @leasehold/core to a release of contract version ${declared} (${NOTES}, section "Contract versions", lists them), or use a release of the adapter written for version ${core}`,
    { adapterVersion: declared, coreVersion: core },
  );
}
