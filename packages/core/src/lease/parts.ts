/**
 * What every part of the coordinator that deals in leases (taking, handovers) is built with: the group's
 * identity and store, the clock and random source, the limits, and the parts built before it. The
 * coordinator builds it once; each part keeps it whole rather than copying it field by field.
 */
import type { Clock, Random } from '../clock.js';
import type { CheckpointStorage } from '../storage.js';
import type { FencedWrites } from './fenced-writes.js';
import type { Hold } from './hold.js';
import type { Membership } from './membership.js';
import type { RosterView } from './roster-view.js';

export interface LeaseParts {
  readonly storage: CheckpointStorage;
  readonly group: string;
  readonly workerId: string;
  readonly leaseDurationMs: number;
  readonly takeIntervalMs: number;
  readonly maxLeases: number;
  readonly maxSteals: number;
  readonly clock: Clock;
  readonly random: Random;
  readonly members: Membership;
  readonly view: RosterView;
  readonly hold: Hold;
  readonly writes: FencedWrites;
  /** Unsafe: leases are held whatever the hold says. */
  readonly skipSelfFencing: boolean;
}
