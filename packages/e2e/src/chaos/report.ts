/** The table a chaos run prints per backend, and whether the run holds. */
import type { ChaosResult } from './harness.js';

/** The failures of a run, empty when it holds. */
export function failuresOf(result: ChaosResult): string[] {
  const { verdict } = result;
  const failures: string[] = [];
  if (verdict.ledger.lost.length > 0) failures.push(`${verdict.ledger.lost.length} records lost`);
  if (verdict.ledger.unexpected.length > 0) failures.push(`${verdict.ledger.unexpected.length} records delivered that were never produced`);
  if (verdict.badDuplicates.length > 0) failures.push(`${verdict.badDuplicates.length} deliveries twice for a reason other than a failed owner`);
  if (verdict.ledger.orderViolations.length > 0) failures.push(`${verdict.ledger.orderViolations.length} per-key order violations`);
  if (verdict.regressions.length > 0) failures.push(`${verdict.regressions.length} checkpoint regressions`);
  if (verdict.zombies.length > 0) failures.push(`${verdict.zombies.length} records processed after the lease was taken`);
  if (result.unexpectedExits.length > 0) failures.push(`${result.unexpectedExits.length} workers exited by themselves`);
  if (result.corruptLeases.length > 0) failures.push(`${result.corruptLeases.length} leases read back corrupt`);
  if (result.sink) {
    if (result.sink.missing.length > 0) failures.push(`${result.sink.missing.length} records missing from the sink`);
    if (result.sink.duplicated.length > 0) failures.push(`${result.sink.duplicated.length} records in the sink more than once`);
    if (result.sink.unexpected > 0) failures.push(`${result.sink.unexpected} sink rows no record produced`);
    if (result.sink.tokenRegressions > 0) failures.push(`${result.sink.tokenRegressions} sink rows written by an older tenure after a newer one`);
  }
  return failures;
}

export function formatResult(result: ChaosResult): string {
  const { verdict } = result;
  const { ledger } = verdict;
  const zero = (count: number): string => (count === 0 ? 'ok' : 'FAIL');
  const rows: [string, string, string][] = [
    ['records produced', String(ledger.produced), ''],
    ['records processed', String(ledger.processed), ledger.processed === ledger.produced ? 'ok' : 'FAIL'],
    ['lost', String(ledger.lost.length), zero(ledger.lost.length)],
    ['processed twice', String(ledger.processedTwice), verdict.badDuplicates.length === 0 ? 'ok: replays after failed owners' : 'FAIL'],
  ];
  for (const [reason, count] of [...verdict.duplicateReasons].sort((a, b) => b[1] - a[1])) rows.push([`  ${reason}`, String(count), '']);
  rows.push(
    ['per-key order violations', String(ledger.orderViolations.length), zero(ledger.orderViolations.length)],
    ['checkpoint regressions', String(verdict.regressions.length), zero(verdict.regressions.length)],
    ['processed after lease was taken', String(verdict.zombies.length), zero(verdict.zombies.length)],
    [
      'longest time a shard had no owner',
      `${(verdict.longestUnownedMs / 1000).toFixed(2)} s`,
      `${(verdict.longestUnownedMs / result.leaseDurationMs).toFixed(2)} x lease (${verdict.longestUnownedShard ?? '-'})`,
    ],
    ['workers that exited by themselves', String(result.unexpectedExits.length), zero(result.unexpectedExits.length)],
    ['leases read back corrupt', String(result.corruptLeases.length), zero(result.corruptLeases.length)],
    ['monitor reads (failed)', `${result.monitorReads} (${result.monitorFailedReads})`, ''],
  );
  if (result.sink) {
    const { sink } = result;
    rows.push(
      [`sink rows (${result.sinkMode ?? 'transactional'}, exactly once)`, String(sink.rows), sink.rows === ledger.produced ? 'ok' : 'FAIL'],
      ['  missing from the sink', String(sink.missing.length), zero(sink.missing.length)],
      ['  in the sink twice or more', String(sink.duplicated.length), zero(sink.duplicated.length)],
      ['  rows no record produced', String(sink.unexpected), zero(sink.unexpected)],
      ['  written by an older tenure after a newer', String(sink.tokenRegressions), zero(sink.tokenRegressions)],
    );
  }
  if (result.fences) {
    const { fences } = result;
    rows.push(
      ['fence: batches committed', String(fences.applied), ''],
      ['  of them trimmed to what the sink lacked', String(fences.trimmed), `${fences.trimmedRecords} records kept out`],
      ['fence: replays refused (batch in the sink)', String(fences.replays), ''],
      ["fence: zombies' writes refused (older token)", String(fences.refused), ''],
    );
  }
  const width = Math.max(...rows.map(([name]) => name.length));
  const numbers = Math.max(...rows.map(([, value]) => value.length));
  const lines = [`${result.backend}: seed ${result.seed}, ${Math.round(result.durationMs / 1000)} s of faults, lease ${result.leaseDurationMs} ms`];
  lines.push(...rows.map(([name, value, verdictText]) => `  ${name.padEnd(width)}  ${value.padStart(numbers)}  ${verdictText}`.trimEnd()));
  for (const record of ledger.lost.slice(0, 5)) lines.push(`  lost: ${record.key} #${record.seq} (${record.shardId} ${record.position})`);
  for (const violation of ledger.orderViolations.slice(0, 5)) lines.push(`  out of order: ${violation.key} #${violation.seq} after #${violation.after} (${violation.shardId}, ${violation.worker})`);
  for (const { report, reason } of verdict.badDuplicates.slice(0, 5)) lines.push(`  twice: ${report.key} #${report.seq} by ${report.worker} on ${report.shardId} at ${report.position}: ${reason}`);
  for (const regression of verdict.regressions.slice(0, 5)) lines.push(`  regression: ${regression.shardId} read ${regression.read ?? 'null'} after ${regression.before ?? 'null'} (${regression.why})`);
  for (const zombie of verdict.zombies.slice(0, 5)) {
    const { report } = zombie;
    lines.push(
      `  after lease taken: ${report.worker} handed ${report.key} #${report.seq} of ${report.shardId} under epoch ${report.fencingToken}, ${(report.at - zombie.higherSeenAt).toFixed(0)} ms after epoch ${zombie.higherEpoch} was seen`,
    );
  }
  for (const message of result.corruptLeases.slice(0, 5)) lines.push(`  corrupt: ${message}`);
  for (const exit of result.unexpectedExits.slice(0, 3)) lines.push(`  ${exit.split('\n').slice(0, 6).join('\n    ')}`);
  return lines.join('\n');
}
