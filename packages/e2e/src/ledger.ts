/**
 * The independent check of a run: from what the producer put and what the workers reported handing to
 * their handlers, how many records were lost, processed twice, or handed over out of order per key.
 *
 * Order, precisely: for each key, take its deliveries in time order and keep only the first delivery of
 * each record; their per-key sequence numbers must increase. A record delivered again later (a replay
 * after a crash) is a duplicate, not an order violation; a record of key k first delivered while an
 * earlier record of k had not been delivered yet is a violation, whether the two came from one shard or
 * from a parent and its child.
 */
import type { ProducedRecord } from './producer.js';
import type { RecordReport, WorkerReport } from './reports.js';

/** A per-key order violation: `seq` of `key` was first delivered after `after` of the same key. */
export interface OrderViolation {
  readonly key: string;
  readonly seq: number;
  readonly after: number;
  readonly shardId: string;
  readonly worker: string;
}

/** The outcome of a run. */
export interface LedgerResult {
  readonly produced: number;
  /** Distinct produced records delivered at least once. */
  readonly processed: number;
  /** Deliveries in all, duplicates included. */
  readonly deliveries: number;
  /** Produced records never delivered. */
  readonly lost: readonly ProducedRecord[];
  /** Deliveries of a record that had been delivered before. */
  readonly duplicates: readonly RecordReport[];
  /** Records processed twice or more (distinct). */
  readonly processedTwice: number;
  readonly orderViolations: readonly OrderViolation[];
  /** Deliveries of records the producer never put (a bug in the reader or the reports). */
  readonly unexpected: readonly RecordReport[];
  /** For each duplicate delivery, the first delivery of the same record. */
  readonly firstDeliveryOf: (report: RecordReport) => RecordReport | undefined;
}

const id = (key: string, seq: number): string => `${key}\u0000${seq}`;

/** The record reports of a run in time order (ties keep the order they were read in). */
export function deliveriesOf(reports: readonly WorkerReport[]): RecordReport[] {
  return reports
    .map((report, index) => ({ report, index }))
    .filter((entry): entry is { report: RecordReport; index: number } => entry.report.type === 'record')
    .sort((a, b) => a.report.at - b.report.at || a.index - b.index)
    .map((entry) => entry.report);
}

/** Checks a run: see the module comment for what each number means. */
export function checkLedger(produced: readonly ProducedRecord[], reports: readonly WorkerReport[]): LedgerResult {
  const producedIds = new Set(produced.map((record) => id(record.key, record.seq)));
  const first = new Map<string, RecordReport>();
  const twice = new Set<string>();
  const duplicates: RecordReport[] = [];
  const unexpected: RecordReport[] = [];
  const orderViolations: OrderViolation[] = [];
  const highest = new Map<string, number>();
  const deliveries = deliveriesOf(reports);
  for (const delivery of deliveries) {
    const recordId = id(delivery.key, delivery.seq);
    if (!producedIds.has(recordId)) {
      unexpected.push(delivery);
      continue;
    }
    if (first.has(recordId)) {
      duplicates.push(delivery);
      twice.add(recordId);
      continue;
    }
    first.set(recordId, delivery);
    const before = highest.get(delivery.key) ?? 0;
    if (delivery.seq !== before + 1) {
      orderViolations.push({ key: delivery.key, seq: delivery.seq, after: before, shardId: delivery.shardId, worker: delivery.worker });
    }
    highest.set(delivery.key, Math.max(before, delivery.seq));
  }
  return {
    produced: produced.length,
    processed: first.size,
    deliveries: deliveries.length,
    lost: produced.filter((record) => !first.has(id(record.key, record.seq))),
    duplicates,
    processedTwice: twice.size,
    orderViolations,
    unexpected,
    firstDeliveryOf: (report) => first.get(id(report.key, report.seq)),
  };
}

/** Whether every produced record was delivered, none out of order and none unknown. */
export function ledgerHolds(result: LedgerResult): boolean {
  return result.lost.length === 0 && result.orderViolations.length === 0 && result.unexpected.length === 0;
}

/** The verification table the demo prints. */
export function formatLedger(result: LedgerResult): string {
  const rows: [string, string, string][] = [
    ['produced', String(result.produced), ''],
    ['processed at least once', String(result.processed), result.processed === result.produced ? 'ok' : 'FAIL'],
    ['lost', String(result.lost.length), result.lost.length === 0 ? 'ok' : 'FAIL'],
    ['per-key order violations', String(result.orderViolations.length), result.orderViolations.length === 0 ? 'ok' : 'FAIL'],
    ['processed twice', String(result.processedTwice), 'replays after the crash (at-least-once), and the rewind\'s, if any'],
    ['deliveries in all', String(result.deliveries), ''],
  ];
  if (result.unexpected.length > 0) rows.push(['records never produced', String(result.unexpected.length), 'FAIL']);
  const width = Math.max(...rows.map(([name]) => name.length));
  const numbers = Math.max(...rows.map(([, value]) => value.length));
  const lines = rows.map(([name, value, verdict]) => `  ${name.padEnd(width)}  ${value.padStart(numbers)}  ${verdict}`.trimEnd());
  for (const record of result.lost.slice(0, 5)) lines.push(`  lost: ${record.key} #${record.seq} (${record.shardId} ${record.position})`);
  for (const violation of result.orderViolations.slice(0, 5)) {
    lines.push(`  out of order: ${violation.key} #${violation.seq} after #${violation.after} (${violation.shardId}, ${violation.worker})`);
  }
  return lines.join('\n');
}
