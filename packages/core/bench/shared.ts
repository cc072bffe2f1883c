/**
 * What every section of the bench shares: the heartbeat interval of the default timing, the tables and
 * figures it prints (shapes, bytes, before -> after), the p50/p99 summary of a scenario's samples, and the
 * wall-clock and CPU seconds a section took. It measures nothing itself.
 */
import { LEASE_MS } from './cluster.js';

export const HEARTBEAT_MS = LEASE_MS * 0.65;

export const fmt = (value: number, digits = 2): string => (Number.isFinite(value) ? value.toFixed(digits) : '-');
export const verdict = (ok: boolean): string => (ok ? 'pass' : 'FAIL');

export function table(header: readonly string[], rows: readonly (readonly string[])[]): void {
  const widths = header.map((title, i) => Math.max(title.length, ...rows.map((row) => (row[i] ?? '').length)));
  const line = (cells: readonly string[]): string => cells.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  ');
  console.log(line(header));
  for (const row of rows) console.log(line(row));
}

/** Wall-clock and CPU seconds since `from` (on a shared machine the wall time also counts the waits for a core). */
export interface Took {
  wallSeconds: number;
  cpuSeconds: number;
}

export function since(from: { wall: number; cpu: NodeJS.CpuUsage }): Took {
  const cpu = process.cpuUsage(from.cpu);
  return { wallSeconds: (performance.now() - from.wall) / 1_000, cpuSeconds: (cpu.user + cpu.system) / 1e6 };
}

export const now = (): { wall: number; cpu: NodeJS.CpuUsage } => ({ wall: performance.now(), cpu: process.cpuUsage() });
export const tookText = (took: Took): string => `${took.wallSeconds.toFixed(1)} s wall, ${took.cpuSeconds.toFixed(1)} s CPU`;

/** How a row scaled by `scaleToFleet` is marked wherever it is printed. */
export const NOT_MEASURED = "NOT MEASURED: 100 x 10,000's per-worker rates at 1,000 x 100,000's sizes";

export const shapeName = (workers: number, leases: number): string => `${workers.toLocaleString('en')} x ${leases.toLocaleString('en')}`;
export const shapeKey = (workers: number, leases: number): string => `${workers}x${leases}`;
export const kb = (bytes: number): string => (Number.isFinite(bytes) ? (bytes < 1_000 ? `${bytes.toFixed(0)} B` : `${(bytes / 1024).toFixed(bytes < 10 * 1024 ? 2 : 1)} KB`) : '-');
/** A figure before member items and after, side by side. */
const beforeAfter = (before: string, after: string): string => `${before} -> ${after}`;
export const pairOf = (was: number | undefined, is: number, show: (value: number) => string): string => beforeAfter(was === undefined ? 'n/a' : show(was), show(is));
/** One record -> whole roster -> watchers. */
export const trioOf = (oneRecord: number | undefined, whole: number | undefined, is: number, show: (value: number) => string): string =>
  [oneRecord, whole].map((was) => (was === undefined ? 'n/a' : show(was))).join(' -> ') + ` -> ${show(is)}`;
export const pct = (value: number): string => `${(value * 100).toFixed(value < 0.1 ? 1 : 0)}%`;
/** A member's sort key carries a 54-byte worker id: shortened for a table. */
export const shortItem = (item: string): string => (item.length > 24 ? `${item.slice(0, 24)}...` : item);
export const notRun = 'could not run it: it held 128 members at most';
export const rowName = (row: { workers: number; leases: number; measured: boolean }): string => shapeName(row.workers, row.leases) + (row.measured ? '' : ' (NOT MEASURED)');

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

export interface Summary {
  n: number;
  failures: number;
  p50: number;
  p99: number;
  min: number;
  max: number;
}

export function summarize(values: ReadonlyArray<number | null | undefined>): Summary {
  const sorted = values.filter((value): value is number => typeof value === 'number').sort((a, b) => a - b);
  return {
    n: sorted.length,
    failures: values.length - sorted.length,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    min: sorted[0] ?? NaN,
    max: sorted[sorted.length - 1] ?? NaN,
  };
}
