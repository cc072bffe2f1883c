/**
 * A worker's memory as a `stats` report carries it (see reports.ts): `process.memoryUsage()`, each V8 heap
 * space's committed size, and on Linux the anonymous and file-backed parts of the RSS.
 */
import { readFileSync } from 'node:fs';
import { getHeapSpaceStatistics } from 'node:v8';

export interface MemoryFigures {
  readonly rss: number;
  readonly heapUsed: number;
  readonly heapTotal: number;
  readonly external: number;
  readonly arrayBuffers: number;
  readonly heapSpaces: Record<string, number>;
  /** Of `heapUsed`, what compiled code takes (the code spaces): it grows as the JIT warms up, then stays. */
  readonly codeUsed: number;
  readonly rssAnon?: number;
  readonly rssFile?: number;
}

/** The process's memory now (after a collection when the process runs with --expose-gc). */
export function memoryFigures(): MemoryFigures {
  (globalThis as { gc?: () => void }).gc?.();
  const { rss, heapUsed, heapTotal, external, arrayBuffers } = process.memoryUsage();
  const heapSpaces: Record<string, number> = {};
  let codeUsed = 0;
  for (const space of getHeapSpaceStatistics()) {
    if (space.space_size > 0) heapSpaces[space.space_name] = space.space_size;
    if (space.space_name.startsWith('code_')) codeUsed += space.space_used_size;
  }
  const figures: MemoryFigures = { rss, heapUsed, heapTotal, external, arrayBuffers, heapSpaces, codeUsed };
  if (process.platform !== 'linux') return figures;
  const status = readFileSync('/proc/self/status', 'utf8');
  const kb = (name: string): number | undefined => {
    const value = new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1];
    return value === undefined ? undefined : Number(value) * 1024;
  };
  return { ...figures, rssAnon: kb('RssAnon'), rssFile: kb('RssFile') };
}
