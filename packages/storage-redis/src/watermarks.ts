/**
 * Regression detection. Redis acknowledges a write before it is durable unless `appendfsync always` is
 * set, and a replica promoted by a failover may lag its primary; either way, acknowledged writes can
 * vanish and versions, epochs and terms can go backwards. This keeps, in the adapter's memory, the
 * highest state seen per group, lease and leader record, and roster (its member version counter, which
 * every applied member write raises), and turns any observation that contradicts it
 * into a `RegressionError`.
 *
 * Only observations that were made before an operation was sent are compared with its result: the
 * replies of concurrent operations may be handled in any order, and a reply can only be expected to be
 * at least as new as what was known when its request left.
 */
import { RegressionError } from '@leasehold/core';
import { describeValue } from '@leasehold/core/adapter';
import { PKG } from './keys.js';
import type { Tombstone } from './codec.js';

interface LeaseMark {
  readonly version: number;
  readonly epoch: number;
  /** Seen deleted at `version`: a live record must come back with a greater version. */
  readonly deleted: boolean;
  readonly at: number;
}

interface LeaderMark {
  readonly version: number;
  readonly term: number;
  readonly at: number;
}

interface GroupMarks {
  incarnation: { readonly value: string; readonly at: number } | undefined;
  leader: LeaderMark | undefined;
  /** The roster's counter: the greatest member version of the group. */
  roster: { readonly high: number; readonly at: number } | undefined;
  /** The roster digest, which only grows. */
  digest: { readonly value: number; readonly at: number } | undefined;
  readonly leases: Map<string, LeaseMark>;
}

function leaseName(group: string, leaseKey: string): string {
  return `lease ${describeValue(leaseKey)} of group ${describeValue(group)}`;
}

const LOSS = 'Redis lost acknowledged writes (a restart without appendfsync always, or a failover to a replica that lagged)';

export class Watermarks {
  #tick = 0;
  readonly #groups = new Map<string, GroupMarks>();
  readonly #regressions = new Map<string, RegressionError>();

  /** Call just before a request is sent; pass the result to the checks of its reply. */
  begin(): number {
    return ++this.#tick;
  }

  /** Throws the regression already found in the group, if any: the group stays refused until an operator acts. */
  assertHealthy(group: string): void {
    const found = this.#regressions.get(group);
    if (found) throw found;
  }

  /** The lease keys of the group last seen alive (before `sentAt`) that `listed` does not hold. */
  vanishedFrom(group: string, sentAt: number, listed: ReadonlyMap<string, unknown>): string[] {
    const vanished: string[] = [];
    for (const [leaseKey, mark] of this.#marks(group).leases) {
      if (!mark.deleted && mark.at < sentAt && !listed.has(leaseKey)) vanished.push(leaseKey);
    }
    return vanished;
  }

  incarnation(group: string, sentAt: number, value: string | null): void {
    const marks = this.#marks(group);
    const known = marks.incarnation;
    if (known === undefined) {
      if (value !== null) marks.incarnation = { value, at: ++this.#tick };
      return;
    }
    if (known.at < sentAt && value !== known.value) {
      const now = value === null ? 'it is gone' : `it is now ${describeValue(value)}`;
      this.#fail(group, `group ${describeValue(group)} was reset: its incarnation marker was ${describeValue(known.value)} and ${now}; ${LOSS}`);
    }
  }

  /**
   * A live lease at `version` with `epoch`. `written` marks the adapter's own applied write: its epoch is
   * what the caller chose, not something Redis could have lost.
   */
  lease(group: string, leaseKey: string, sentAt: number, version: number, epoch: number, written = false): void {
    const marks = this.#marks(group);
    const mark = marks.leases.get(leaseKey);
    if (mark && mark.at < sentAt) {
            if (mark.deleted && version <= mark.version) {
        this.#fail(group, `${leaseName(group, leaseKey)} was deleted at version ${mark.version} and came back at version ${version}; ${LOSS}`);
      }
      if (!mark.deleted && version < mark.version) {
        this.#fail(group, `${leaseName(group, leaseKey)} went back from version ${mark.version} to version ${version}; ${LOSS}`);
      }
      if (!mark.deleted && version === mark.version && epoch !== mark.epoch) {
        this.#fail(group, `${leaseName(group, leaseKey)} changed its epoch from ${mark.epoch} to ${epoch} at the same version ${version}; ${LOSS}`);
      }
      if (!written && epoch < mark.epoch) {
        this.#fail(group, `${leaseName(group, leaseKey)} went back from epoch ${mark.epoch} to epoch ${epoch}; ${LOSS}`);
      }
    }
    if (!mark || version > mark.version) {
      marks.leases.set(leaseKey, { version, epoch, deleted: false, at: ++this.#tick });
    }
  }

  /** No live lease, and the tombstone found in its place (or none). */
  absent(group: string, leaseKey: string, sentAt: number, tombstone: Tombstone | null): void {
    const marks = this.#marks(group);
    const mark = marks.leases.get(leaseKey);
    if (mark && mark.at < sentAt) {
            if (tombstone === null) {
        this.#fail(group, `${leaseName(group, leaseKey)} was seen at version ${mark.version} and is gone without a tombstone; ${LOSS}`);
      } else if (tombstone.version < mark.version) {
        this.#fail(group, `${leaseName(group, leaseKey)} was seen at version ${mark.version} but its tombstone says it was deleted at version ${tombstone.version}; ${LOSS}`);
      } else if (tombstone.highEpoch < mark.epoch) {
        this.#fail(group, `${leaseName(group, leaseKey)} was seen at epoch ${mark.epoch} but its tombstone keeps epoch ${tombstone.highEpoch}; ${LOSS}`);
      }
    }
    if (tombstone && (!mark || tombstone.version > mark.version || (tombstone.version === mark.version && !mark.deleted))) {
      marks.leases.set(leaseKey, { version: tombstone.version, epoch: tombstone.highEpoch, deleted: true, at: ++this.#tick });
    }
  }

  /** A delete through this adapter applied at `version`. */
  deleted(group: string, leaseKey: string, version: number): void {
    const marks = this.#marks(group);
    const mark = marks.leases.get(leaseKey);
    if (!mark || version >= mark.version) {
      marks.leases.set(leaseKey, { version, epoch: mark?.epoch ?? 0, deleted: true, at: ++this.#tick });
    }
  }

  /** The leader record at `version` with `term`, or `null` when there is none; `written` as for leases. */
  leader(group: string, sentAt: number, observed: { version: number; term: number } | null, written = false): void {
    const marks = this.#marks(group);
    const mark = marks.leader;
    if (mark && mark.at < sentAt) {
      if (observed === null) {
        this.#fail(group, `leader record of group ${describeValue(group)} was seen at version ${mark.version} and is gone; ${LOSS}`);
      } else if (observed.version < mark.version) {
        this.#fail(group, `leader record of group ${describeValue(group)} went back from version ${mark.version} to version ${observed.version}; ${LOSS}`);
      } else if (observed.version === mark.version && observed.term !== mark.term) {
        this.#fail(group, `leader record of group ${describeValue(group)} changed its term from ${mark.term} to ${observed.term} at the same version ${mark.version}; ${LOSS}`);
      } else if (!written && observed.term < mark.term) {
        this.#fail(group, `leader record of group ${describeValue(group)} went back from term ${mark.term} to term ${observed.term}; ${LOSS}`);
      }
    }
    if (observed && (!mark || observed.version > mark.version)) {
      marks.leader = { version: observed.version, term: observed.term, at: ++this.#tick };
    }
  }

  /**
   * The roster's counter as a reply showed it, or `null` when the roster had none. It only grows (a
   * removal keeps it), so a lower one, or none after one was seen, means lost writes.
   */
  roster(group: string, sentAt: number, high: number | null): void {
    const marks = this.#marks(group);
    const mark = marks.roster;
    if (mark && mark.at < sentAt) {
      if (high === null) {
        this.#fail(group, `roster of group ${describeValue(group)} was seen at member version ${mark.high} and is gone; ${LOSS}`);
      } else if (high < mark.high) {
        this.#fail(group, `roster of group ${describeValue(group)} went back from member version ${mark.high} to member version ${high}; ${LOSS}`);
      }
    }
    if (high !== null && (!mark || high > mark.high)) {
      marks.roster = { high, at: ++this.#tick };
    }
  }

  /**
   * The roster digest as a reply showed it: `value` read (0 when the group has none), or written by the
   * adapter's own advance (`advanced`), which found it one below. It only grows, so a lower one means
   * lost writes.
   */
  digest(group: string, sentAt: number, value: number, advanced = false): void {
    const marks = this.#marks(group);
    const mark = marks.digest;
    const found = advanced ? value - 1 : value;
    if (mark && mark.at < sentAt && found < mark.value) {
      this.#fail(group, `roster digest of group ${describeValue(group)} went back from ${mark.value} to ${found}; ${LOSS}`);
    }
    if (!mark || value > mark.value) marks.digest = { value, at: ++this.#tick };
  }

  #marks(group: string): GroupMarks {
    let marks = this.#groups.get(group);
    if (!marks) {
      marks = { incarnation: undefined, leader: undefined, roster: undefined, digest: undefined, leases: new Map() };
      this.#groups.set(group, marks);
    }
    return marks;
  }

  #fail(group: string, detail: string): never {
    const error = new RegressionError(`[${PKG}] ${detail}`);
    this.#regressions.set(group, error);
    throw error;
  }
}
