/**
 * Deliberately broken adapters: each breaks one rule of the storage contract, and the conformance suite
 * must catch each one. They prove the suite bites.
 */
import {
  MemoryStorage,
  result,
  type LeaseRecord,
  type LeaseUpdate,
  type NewLease,
  type WriteResult,
  validateLeaseUpdates,
} from '../../src/index.js';

/** Applies every update whatever version the caller read: a lost-update machine. */
export class IgnoresVersionStorage extends MemoryStorage {
  override async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    validateLeaseUpdates(group, updates);
    const results: WriteResult<LeaseRecord>[] = [];
    for (const update of updates) {
      // The bug: the caller's expected version is replaced by whatever is stored at the time of writing.
      for (;;) {
        const current = await this.getLease(group, update.leaseKey);
        if (!current) {
          results.push(result.conflict(null));
          break;
        }
        const [outcome] = await super.updateLeases(group, [{ ...update, expectedVersion: current.version }]);
        if (outcome?.status === 'applied') {
          results.push(outcome);
          break;
        }
      }
    }
    return results;
  }
}

const KNOWN_METADATA = new Set(['count', 'padding', 'note', 'k']);

function dropUnknown(metadata: Readonly<Record<string, string>> | undefined): Record<string, string> {
  return Object.fromEntries(Object.entries(metadata ?? {}).filter(([key]) => KNOWN_METADATA.has(key)));
}

/** Stores only the metadata keys it knows about: a store that interprets what it should round-trip. */
export class DropsUnknownMetadataStorage extends MemoryStorage {
  override async createLease(lease: NewLease): Promise<WriteResult<LeaseRecord>> {
    return super.createLease({ ...lease, metadata: dropUnknown(lease.metadata) });
  }

  override async updateLeases(group: string, updates: readonly LeaseUpdate[]): Promise<WriteResult<LeaseRecord>[]> {
    return super.updateLeases(
      group,
      updates.map((update) => ({ ...update, next: { ...update.next, metadata: dropUnknown(update.next.metadata) } })),
    );
  }
}
