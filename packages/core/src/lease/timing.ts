import { hostname } from 'node:os';
import type { Random } from '../clock.js';
import { describeValue, InvalidConfigError } from '../errors.js';
import { validateGroup, validateWorkerId, validateFailureDomain } from '../validation.js';

/**
 * How far each period of the coordinator's loops (heartbeats, take ticks) is drawn off its interval, each
 * way: a period lasts between `1 - TICK_JITTER` and `1 + TICK_JITTER` of it, so that workers started
 * together do not stay in step.
 */
export const TICK_JITTER = 0.05;

/** Timing shared by the lease coordinator and the leader elector. */
export interface HoldTiming {
  /** How long a lease lasts without renewal, as observed by others. */
  leaseDurationMs: number;
  /** How often the holder renews. */
  renewIntervalMs: number;
  /** The bound ρ on how far any clock's rate may be off: rates lie in [1 - ρ, 1 + ρ]. */
  maxClockDrift: number;
  /** Subtracted from the hold, to absorb scheduling delays between a check and its use. */
  safetyMarginMs: number;
}

/**
 * How long a holder may count a lease as held after sending a successful renewal, on its own clock:
 * `H = leaseDurationMs × (1 - ρ) / (1 + ρ) - safetyMarginMs` (DESIGN section 4). A taker waits
 * `leaseDurationMs` of its clock from a first sight that follows the renewal, at least
 * `leaseDurationMs / (1 + ρ)` of real time; the holder's `H / (1 - ρ)` of real time is shorter.
 */
export function holdMs(timing: HoldTiming): number {
  const { leaseDurationMs, maxClockDrift: rho, safetyMarginMs } = timing;
  return (leaseDurationMs * (1 - rho)) / (1 + rho) - safetyMarginMs;
}

export function positive(pkg: string, name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
    throw new InvalidConfigError(`[${pkg}] ${name} must be a positive number of milliseconds, got ${describeValue(value)}`);
  }
  return value;
}

export function nonNegative(pkg: string, name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
    throw new InvalidConfigError(`[${pkg}] ${name} must be a non-negative number, got ${describeValue(value)}`);
  }
  return value;
}

export function positiveInteger(pkg: string, name: string, value: unknown): number {
  if (typeof value !== 'number' || !(Number.isSafeInteger(value) || value === Infinity) || value < 1) {
    throw new InvalidConfigError(`[${pkg}] ${name} must be a positive integer, got ${describeValue(value)}`);
  }
  return value;
}

/** Validates and completes the timing options, refusing any combination under which the hold is unsafe or useless. */
export function resolveHoldTiming(
  pkg: string,
  options: Partial<HoldTiming>,
  names: { leaseDurationMs: string; renewIntervalMs: string },
): HoldTiming {
  const leaseDurationMs = positive(pkg, names.leaseDurationMs, options.leaseDurationMs ?? 10_000);
  const renewIntervalMs = positive(pkg, names.renewIntervalMs, options.renewIntervalMs ?? leaseDurationMs / 3);
  if (renewIntervalMs >= leaseDurationMs) {
    throw new InvalidConfigError(
      `[${pkg}] ${names.renewIntervalMs} (${renewIntervalMs}) must be below ${names.leaseDurationMs} (${leaseDurationMs})`,
    );
  }
  const maxClockDrift = nonNegative(pkg, 'maxClockDrift', options.maxClockDrift ?? 0.01);
  if (maxClockDrift >= 0.5) {
    throw new InvalidConfigError(`[${pkg}] maxClockDrift must be below 0.5 (a rate bound, e.g. 0.01 for 1%), got ${maxClockDrift}`);
  }
  const safetyMarginMs = nonNegative(pkg, 'safetyMarginMs', options.safetyMarginMs ?? Math.min(500, leaseDurationMs / 20));
  const timing = { leaseDurationMs, renewIntervalMs, maxClockDrift, safetyMarginMs };
  const hold = holdMs(timing);
  if (hold <= renewIntervalMs) {
    throw new InvalidConfigError(
      `[${pkg}] with ${names.leaseDurationMs} ${leaseDurationMs}, maxClockDrift ${maxClockDrift} and safetyMarginMs ${safetyMarginMs} a holder may count on only ${hold.toFixed(0)} ms after a renewal, not more than ${names.renewIntervalMs} ${renewIntervalMs}: renew more often or lengthen the lease`,
    );
  }
  return timing;
}

/**
 * Checks the group and worker id of a coordinator or elector (an `InvalidConfigError` naming the bad
 * value) and completes the worker id: host name, pid and a random suffix, unique among live processes.
 */
export function resolveIdentity(options: { group: string; workerId?: string | undefined; failureDomain?: string | undefined }, random: Random): { group: string; workerId: string } {
  try {
    validateGroup(options.group);
    if (options.workerId !== undefined) validateWorkerId(options.workerId);
    if (options.failureDomain !== undefined) validateFailureDomain(options.failureDomain);
  } catch (error) {
    throw new InvalidConfigError((error as Error).message, { cause: error });
  }
  const workerId = options.workerId ?? `${hostname()}-${process.pid}-${Math.floor(random.next() * 36 ** 6).toString(36)}`;
  return { group: options.group, workerId };
}
