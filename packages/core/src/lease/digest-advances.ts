/**
 * This worker's advances of its group's roster digest (DESIGN section 4, "Watchers and the roster digest"):
 * after a member write others must look at (a join, a leave, a declaration of death, a removal, a heartbeat
 * that changes anything but the version), an advance that names the members it announces, so that members
 * reading only their watched few read them at their next tick. Advances go out one after another, without
 * holding up the write before them; one that fails is owed, and the next take tick sends it before it reads.
 * The membership (membership.ts) owns one.
 */
import type { CheckpointStorage } from '../storage.js';
import { limits } from '../validation.js';
import type { LeaseCoordinatorEvents } from './events.js';

/** What the digest's advances need of the membership. */
export interface DigestAdvancesParts {
  readonly storage: CheckpointStorage;
  readonly group: string;
  /** Whether the store has the watchers' reads (and so a digest). */
  readonly watcherReads: boolean;
  /** Whether the store has `getRosterMoves`: an advance names the members it announces. */
  readonly rosterMoves: boolean;
  /** Unsafe: member writes never advance the roster digest. */
  readonly skipRosterDigest: boolean;
  emit(name: 'storage', event: LeaseCoordinatorEvents['storage']): void;
  report(error: unknown, operation: string): void;
}

export class DigestAdvances {
  readonly #parts: DigestAdvancesParts;
  /**
   * A member write others must look at applied (or may have) and its advance has not: advance at the next
   * tick, naming these members (`null`: nobody, so that readers read the whole roster); `false`: none owed.
   */
  #owed: Set<string> | null | false = false;
  /** The advances sent after member writes, one after another. */
  #advancing: Promise<void> = Promise.resolve();

  constructor(parts: DigestAdvancesParts) {
    this.#parts = parts;
  }

  /** The advances on their way, one after another: resolves once the last one sent is done. */
  get advancing(): Promise<void> {
    return this.#advancing;
  }

  /**
   * Advances the roster digest after a member write others must look at, without holding up the writer:
   * a heartbeat's hold is extended when its write applied, not when the advance that follows it returned
   * (on a busy connection pool the advance may queue behind the pool's other work past the hold).
   */
  announce(workerIds: readonly string[] | null): void {
    this.#advancing = this.#advancing.then(async () => {
      await this.advance(workerIds);
    });
  }

  /** Advances the digest naming nobody, after the advances already on their way: the value written, or `undefined` when none was. */
  afterThoseOnTheirWay(): Promise<number | undefined> {
    const advance = this.#advancing.then(() => this.advance(null));
    this.#advancing = advance.then(() => undefined);
    return advance;
  }

  /** Whether an advance failed and is owed (see {@link payOwed}). */
  get owes(): boolean {
    return this.#owed !== false;
  }

  /** Sends the advance owed, naming what every owed advance named: before the take tick reads the digest. */
  async payOwed(): Promise<void> {
    const owed = this.#owed;
    if (owed !== false) await this.advance(owed === null ? null : [...owed]);
  }

  /**
   * Advances the roster digest after a member write others must look at, so that members that read only
   * their watched few read the members it names at their next tick (`null`: nobody, and they read the
   * whole roster). One that fails is owed: the next tick advances it before reading, naming what every
   * owed advance named. The value written, or `undefined` when nothing was.
   */
  async advance(workerIds: readonly string[] | null): Promise<number | undefined> {
    const parts = this.#parts;
    if (!parts.watcherReads || parts.skipRosterDigest) return undefined;
    const owed = this.#owed;
    const merged = workerIds === null || owed === null ? null : new Set([...(owed === false ? [] : owed), ...workerIds]);
    // More members than one advance names: nobody, and readers read the whole roster.
    const named = merged !== null && merged.size <= limits.maxWatchedMembers ? merged : null;
    this.#owed = named;
    try {
      const storage = parts.storage as { advanceRosterDigest(group: string, workerIds?: readonly string[]): Promise<number> };
      const digest = await (parts.rosterMoves ? storage.advanceRosterDigest(parts.group, named === null ? [] : [...named]) : storage.advanceRosterDigest(parts.group));
      this.#owed = false;
      parts.emit('storage', { operation: 'advance-digest', applied: 1, conflict: 0, unknown: 0 });
      return digest;
    } catch (error) {
      parts.emit('storage', { operation: 'advance-digest', applied: 0, conflict: 0, unknown: 1 });
      parts.report(error, 'advance-digest');
      return undefined;
    }
  }
}
