/**
 * The stall watch (DESIGN section 5, "The shard lifecycle", rule 9, "Stalls"): every quarter of
 * `stallAfterMs` it looks at each shard this worker holds, and one whose handler call has not returned,
 * whose source has not answered, or that nobody reads, for that long, is reported once (an event, a log
 * line and two metadata fields on its lease) and reported resumed when it moves again. A shard held back
 * at records it does not give up is reported at once, by its reader. The consumer owns one; it asks back
 * through {@link StallHost} for the readers, the failed reads and its events.
 */
import type { Clock } from '../clock.js';
import type { HeldLease, LeaseCoordinator } from '../lease/coordinator.js';
import type { ConsumerEvents, StallReason } from './events.js';
import type { Logger } from './options.js';

/** The lease metadata fields a worker writes while a shard it holds is stalled (read by `leasehold status`). */
export const STALL_FIELDS = { since: 'leasehold.stalledSince', reason: 'leasehold.stalledReason' } as const;

/** What the watch reads of a shard's reader. */
export interface StallProbe {
  readonly heldBack: { readonly reason: StallReason; readonly since: number } | null;
  readonly handlingSince: number | null;
  readonly lastReadAt: number;
}

/** What the stall watch needs back from the consumer that owns it. */
export interface StallHost {
  /** Gives a held lease left without a reader a new one; run before each look. */
  reconcile(): void;
  /** The shard's reader, or `undefined` when nobody reads it. */
  pump(shardId: string): StallProbe | undefined;
  /** Since when reads of a shard nobody reads have failed, if they did. */
  failedSince(shardId: string): number | undefined;
  emit<K extends keyof ConsumerEvents>(name: K, event: ConsumerEvents[K]): void;
  report(error: unknown, operation: string): void;
}

export interface StallWatchOptions {
  readonly coordinator: LeaseCoordinator;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly stallAfterMs: number;
  readonly host: StallHost;
}

/** The shards reported stalled, and the loop that reports them. */
export class StallWatch {
  readonly #coordinator: LeaseCoordinator;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #stallAfterMs: number;
  readonly #host: StallHost;
  /** Shards reported stalled, with the tenure the report was written in. */
  readonly #stalled = new Map<string, { fencingToken: number }>();

  constructor(options: StallWatchOptions) {
    this.#coordinator = options.coordinator;
    this.#clock = options.clock;
    this.#logger = options.logger;
    this.#stallAfterMs = options.stallAfterMs;
    this.#host = options.host;
  }

  /** How many shards stand reported stalled (for diagnostics). */
  get size(): number {
    return this.#stalled.size;
  }

  /** Whether the shard was reported stalled in this tenure of its lease. */
  reportedIn(lease: HeldLease): boolean {
    return this.#stalled.get(lease.leaseKey)?.fencingToken === lease.fencingToken;
  }

  /** Looks at the held shards every quarter of `stallAfterMs` until `signal` fires. */
  async watch(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      try {
        await this.#clock.sleep(this.#stallAfterMs / 4, signal);
      } catch {
        return;
      }
      this.#host.reconcile();
      const now = this.#clock.now();
      const held = new Map(this.#coordinator.heldLeases().map((lease) => [lease.leaseKey, lease]));
      for (const shardId of this.#stalled.keys()) if (!held.has(shardId)) this.#stalled.delete(shardId);
      for (const lease of held.values()) {
        const stall = this.#stallOf(lease.leaseKey, now);
        const reported = this.#stalled.get(lease.leaseKey);
        if (stall && !reported) this.reportStalled(lease, stall);
        else if (!stall && reported) this.reportResumed(lease);
      }
    }
  }

  reportStalled(lease: HeldLease, stall: { reason: StallReason; sinceMs: number; error?: Error | undefined }): void {
    const shardId = lease.leaseKey;
    const { reason, sinceMs, error } = stall;
    this.#stalled.set(shardId, { fencingToken: lease.fencingToken });
    if (error) {
      const message =
        reason === 'give-up-limit'
          ? 'shard stalled: too many records given up in a row; the shard holds at the next one and retries it until a record succeeds'
          : 'shard stalled: the handler failed with an error that is not the records\' fault; nothing is given up, the records are retried';
      this.#logger.error({ shardId, reason, err: error }, message);
    } else {
      this.#logger.warn({ shardId, reason, sinceMs }, 'shard stalled');
    }
    this.#host.emit('shard-stalled', { shardId, reason, sinceMs, ...(error ? { error } : {}) });
    const since = new Date(this.#clock.wallTime() - sinceMs).toISOString();
    this.#annotate(lease, { [STALL_FIELDS.since]: since, [STALL_FIELDS.reason]: reason });
  }

  reportResumed(lease: HeldLease): void {
    this.#stalled.delete(lease.leaseKey);
    this.#host.emit('shard-resumed', { shardId: lease.leaseKey });
    this.#annotate(lease, { [STALL_FIELDS.since]: null, [STALL_FIELDS.reason]: null });
  }

  #stallOf(shardId: string, now: number): { reason: StallReason; sinceMs: number } | undefined {
    const pump = this.#host.pump(shardId);
    // A shard held back at records it does not give up is stalled from the first moment (reported then).
    const held = pump?.heldBack;
    if (held) return { reason: held.reason, sinceMs: now - held.since };
    let stall: { reason: StallReason; since: number };
    if (!pump) stall = { reason: 'failed', since: this.#host.failedSince(shardId) ?? now };
    else if (pump.handlingSince !== null) stall = { reason: 'handler', since: pump.handlingSince };
    else stall = { reason: 'reader', since: pump.lastReadAt };
    const sinceMs = now - stall.since;
    return sinceMs >= this.#stallAfterMs ? { reason: stall.reason, sinceMs } : undefined;
  }

  #annotate(lease: HeldLease, fields: Record<string, string | null>): void {
    this.#coordinator.annotate(lease, fields).catch((error: unknown) => this.#host.report(error, 'annotate'));
  }
}
