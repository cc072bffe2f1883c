/**
 * The processing code: what a user writes. It knows nothing of Kinesis or of where leases live, so the
 * same handler runs over MemorySource and MemoryStorage in unit tests and over Kinesis and DynamoDB in
 * production.
 */
import type { BatchContext, SourceRecord } from '@leasehold/core';

/** One order event, as producers put it on the stream (JSON, partitioned by customer). */
export interface OrderPlaced {
  orderId: string;
  customer: string;
  amountCents: number;
}

/** Where the handler's results go: a database table in real life, fenced by the lease's epoch. */
export interface Totals {
  /**
   * Adds an order to a customer's total. `fencingToken` is the lease epoch: a real implementation stores
   * it with the row and refuses a write carrying a lower one, so a worker that lost its lease cannot
   * write after the next owner did.
   */
  add(order: OrderPlaced, fencingToken: number, shardId: string): Promise<void>;
}

const decoder = new TextDecoder();

/** Builds the `processBatch` function of a consumer that totals orders per customer. */
export function totalOrders(totals: Totals) {
  return async (records: readonly SourceRecord[], context: BatchContext): Promise<void> => {
    for (const record of records) {
      // The lease was lost or is being handed over: stop; the rest of the batch goes to the next owner.
      if (context.signal.aborted) return;
      const order = JSON.parse(decoder.decode(record.data)) as OrderPlaced;
      await totals.add(order, context.fencingToken, context.shardId);
    }
  };
}

/** An in-memory `Totals`, for tests and this example; it keeps the highest epoch it saw per shard. */
export class MemoryTotals implements Totals {
  readonly byCustomer = new Map<string, number>();
  readonly orders = new Set<string>();
  readonly #epochs = new Map<string, number>();

  async add(order: OrderPlaced, fencingToken: number, shardId: string): Promise<void> {
    if (fencingToken < (this.#epochs.get(shardId) ?? 0)) throw new Error(`stale writer for ${shardId}: epoch ${fencingToken}`);
    this.#epochs.set(shardId, fencingToken);
    // Idempotent by order id: a record replayed after a crash is not counted twice.
    if (this.orders.has(order.orderId)) return;
    this.orders.add(order.orderId);
    this.byCustomer.set(order.customer, (this.byCustomer.get(order.customer) ?? 0) + order.amountCents);
  }
}
