/**
 * The keys a Consumer's options and each of their nested objects take: any other key is refused, naming
 * where it belongs (`leaseDurationMs` given at the top belongs under `lease`), instead of being ignored.
 */
import { nestedOptionHints, optionKeys, refuseUnknownOptions, type OptionHints } from '../known-options.js';
import { POISON_KEYS } from './failure-policy.js';
import type { CheckpointPolicy, ConsumerOptions } from './options.js';

const PKG = 'core';

type Defined<T> = Exclude<T, undefined | false | string>;

export const CONSUMER_KEYS = optionKeys<ConsumerOptions>({
  group: true,
  source: true,
  streams: true,
  streamRefreshIntervalMs: true,
  removedStreamGraceMs: true,
  storage: true,
  leaderStore: true,
  processBatch: true,
  checkpointing: true,
  initialPosition: true,
  onHandlerError: true,
  isRecordError: true,
  maxRecordsGivenUpInARow: true,
  retry: true,
  hooks: true,
  shardSyncIntervalMs: true,
  stallAfterMs: true,
  logger: true,
  lease: true,
  leader: true,
  metrics: true,
  workerId: true,
  clock: true,
  random: true,
});

const LEASE_KEYS = optionKeys<Defined<ConsumerOptions['lease']>>({
  leaseDurationMs: true,
  renewIntervalMs: true,
  takeIntervalMs: true,
  maxLeasesPerWorker: true,
  maxStealsPerTick: true,
  maxClockDrift: true,
  safetyMarginMs: true,
  handoffTimeoutMs: true,
  watchers: true,
  wholeRosterUpTo: true,
  failureDomain: true,
});

const LEADER_KEYS = optionKeys<Defined<ConsumerOptions['leader']>>({ leaseDurationMs: true, renewIntervalMs: true, maxClockDrift: true, safetyMarginMs: true });

const RETRY_KEYS = optionKeys<Defined<ConsumerOptions['retry']>>({ initialDelayMs: true, maxDelayMs: true, maxAttempts: true });

const CHECKPOINTING_KEYS = optionKeys<Defined<CheckpointPolicy>>({ everyRecords: true, everyMs: true });

const METRICS_KEYS = optionKeys<Defined<ConsumerOptions['metrics']>>({ meter: true });

/** Where each key of a nested object belongs, for a key given at the top. */
const TOP_HINTS = nestedOptionHints(CONSUMER_KEYS, {
  lease: LEASE_KEYS,
  leader: LEADER_KEYS,
  retry: RETRY_KEYS,
  checkpointing: CHECKPOINTING_KEYS,
  onHandlerError: [...POISON_KEYS],
  metrics: METRICS_KEYS,
});

/** A Consumer option given inside a nested object belongs at the top. */
const AT_TOP: OptionHints = Object.fromEntries(CONSUMER_KEYS.map((key) => [key, `${key} (an option of the Consumer itself)`]));

/**
 * Refuses a key of the Consumer's options, or of `lease`, `leader`, `retry`, `checkpointing` or
 * `metrics`, that they do not take (`onHandlerError` checks its own), naming it and where it belongs.
 * `hooks` and `logger` are objects of the user's methods, not options: they may carry anything.
 */
export function refuseUnknownConsumerOptions(options: object): void {
  refuseUnknownOptions(PKG, 'Consumer', options, CONSUMER_KEYS, TOP_HINTS);
  const given = options as ConsumerOptions;
  const nested: Array<[string, unknown, readonly string[], OptionHints]> = [
    ['lease', given.lease, LEASE_KEYS, AT_TOP],
    ['leader', given.leader, LEADER_KEYS, { ...AT_TOP, ...nestedOptionHints(LEADER_KEYS, { lease: LEASE_KEYS }) }],
    ['retry', given.retry, RETRY_KEYS, { ...AT_TOP, ...nestedOptionHints(RETRY_KEYS, { onHandlerError: [...POISON_KEYS] }) }],
    ['checkpointing', given.checkpointing, CHECKPOINTING_KEYS, AT_TOP],
    ['metrics', given.metrics, METRICS_KEYS, AT_TOP],
  ];
  for (const [name, value, keys, hints] of nested) {
    if (typeof value === 'object' && value !== null) refuseUnknownOptions(PKG, `Consumer option ${name}`, value, keys, hints, `${name}.`);
  }
}
