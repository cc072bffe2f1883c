/**
 * The coordinator's subscription to the change feed, addressed to the owners whose handovers it acts on
 * (DESIGN section 4, "Handovers addressed to their owners"): this worker, the members it watches, and the
 * members it declared dead lately. A handover to anyone else is of no use to it (`LeaseCoordinator`
 * skips one that names another owner), and in a group of 1,000 a cold start hands 100,000 leases: heard
 * by everyone, that is 10^8 deliveries where each worker needs its 100 and its watched members' 300.
 */
import type { ChangeSubscription, LeaseChange, SubscribeOptions } from '../storage.js';
import { limits } from '../validation.js';

/** How the subscription is addressed: as designed, or one of the unsafe switches' ways. */
export type Addressing = 'watched' | 'self-only' | 'everyone';

export interface AddressedFeedOptions {
  readonly storage: { subscribe(group: string, listener: (change: LeaseChange) => void, options?: SubscribeOptions): Promise<ChangeSubscription> };
  readonly group: string;
  readonly listener: (change: LeaseChange) => void;
  readonly addressing: Addressing;
  readonly report: (error: unknown, operation: string) => void;
  /** Whether the coordinator still listens (a subscription that opens after it stopped is closed at once). */
  readonly running: () => boolean;
}

/**
 * One open subscription, moved to a new address when the owners it is for change: the new one is opened
 * before the old one is closed, so that no change written meanwhile is missed (one may be heard twice,
 * which the listener takes as it takes any repeated announcement).
 */
export class AddressedFeed {
  readonly #options: AddressedFeedOptions;
  #subscription: ChangeSubscription | null = null;
  /** The address the open subscription has, sorted, or `null` for every change. */
  #address: readonly string[] | null = null;
  /** The address wanted once a move under way is done. */
  #wanted: readonly string[] | null = null;
  #moving = false;
  #closed = false;

  constructor(options: AddressedFeedOptions) {
    this.#options = options;
  }

  /** Whether a subscription is open. */
  get open(): boolean {
    return this.#subscription !== null;
  }

  /** The owners the open subscription hears the handovers of, sorted; `null` for every handover. */
  get address(): readonly string[] | null {
    return this.#address;
  }

  /**
   * The address for `self`, the members it `watched` and those it `declared` lately, under this feed's
   * addressing; `null` (every handover) when they are more than a subscription may name.
   */
  addressFor(self: string, watched: Iterable<string>, declared: Iterable<string>): readonly string[] | null {
    switch (this.#options.addressing) {
      case 'everyone':
        return null;
      case 'self-only':
        return [self];
      case 'watched': {
        const owners = [...new Set([self, ...watched, ...declared])].sort();
        return owners.length > limits.maxWatchedMembers ? null : owners;
      }
    }
  }

  /** Opens the subscription at `address`; a failure is thrown (the coordinator then runs without a feed). */
  async subscribe(address: readonly string[] | null): Promise<void> {
    this.#subscription = await this.#open(address);
    this.#address = address;
    this.#wanted = address;
  }

  /**
   * Moves the subscription to `address` if it differs, in the background: a failure is reported, and the
   * old subscription goes on hearing what it heard.
   */
  readdress(address: readonly string[] | null): void {
    if (this.#closed || this.#subscription === null) return;
    this.#wanted = address;
    if (this.#moving || sameAddress(address, this.#address)) return;
    this.#moving = true;
    void this.#move().finally(() => {
      this.#moving = false;
    });
  }

  /** Closes the subscription; a move under way closes what it opens. */
  async close(): Promise<void> {
    this.#closed = true;
    const subscription = this.#subscription;
    this.#subscription = null;
    if (subscription) await subscription.close();
  }

  async #move(): Promise<void> {
    while (!this.#closed && !sameAddress(this.#wanted, this.#address)) {
      const address = this.#wanted;
      let next: ChangeSubscription;
      try {
        next = await this.#open(address);
      } catch (error) {
        this.#options.report(error, 'subscribe');
        return;
      }
      if (this.#closed || !this.#options.running()) {
        await next.close().catch((error: unknown) => this.#options.report(error, 'unsubscribe'));
        return;
      }
      const old = this.#subscription;
      this.#subscription = next;
      this.#address = address;
      await old?.close().catch((error: unknown) => this.#options.report(error, 'unsubscribe'));
    }
  }

  #open(address: readonly string[] | null): Promise<ChangeSubscription> {
    const { storage, group, listener } = this.#options;
    return address === null ? storage.subscribe(group, listener) : storage.subscribe(group, listener, { addressedTo: address });
  }
}

function sameAddress(a: readonly string[] | null, b: readonly string[] | null): boolean {
  if (a === null || b === null) return a === b;
  return a.length === b.length && a.every((owner, i) => owner === b[i]);
}
