/**
 * Charging a V8 CPU profile's samples to the components of a worker (cpu-profile-summary.ts): each sample
 * inside a span goes to the first frame up its stack that is not node's own (a socket write under ioredis
 * is the Redis client's), to module loading if node's module loader is on its stack, and to garbage
 * collection or V8's own work by the profile's pseudo-frames; idle samples are left out. And the spans a
 * bench writes beside the profiles (`BENCH_CPU_PROFILE`) for the summary to cut them by.
 */
import { writeFileSync } from 'node:fs';

/** A measured span of some processes' CPU, on the monotonic clock a profile's sample times are on. */
export interface ProfileWindow {
  readonly kind: string;
  readonly startUs: number;
  readonly endUs: number;
  readonly pids: readonly number[];
  /** Their CPU over the span (ms, from /proc or the process itself) and the records they read in it. */
  readonly cpuMs: number;
  readonly records: number;
}

/** Now on the monotonic clock of V8's profiles (microseconds). */
export const monotonicUs = (): number => Number(process.hrtime.bigint() / 1000n);

/** Writes `window` into `dir` beside the profiles, named by its kind and processes. */
export function writeProfileWindow(dir: string, window: ProfileWindow): void {
  writeFileSync(`${dir}/window-${window.kind.replace(/[^a-z0-9]+/gi, '_')}-${window.pids.join('-')}.json`, `${JSON.stringify(window)}\n`);
}
export interface ProfileNode {
  readonly id: number;
  readonly callFrame: { readonly functionName: string; readonly url: string };
  readonly children?: readonly number[];
}

export interface Profile {
  readonly nodes: readonly ProfileNode[];
  readonly startTime: number;
  readonly samples: readonly number[];
  readonly timeDeltas: readonly number[];
}


/** The components, in the order the table lists them. */
export const COMPONENTS = [
  'AWS SDK (building, signing, HTTP, deserializing)',
  'Redis client and adapter',
  'PostgreSQL client and adapter',
  'DynamoDB adapter (its SDK client included)',
  'module loading',
  'node internals (timers, microtasks, sockets, streams)',
  'garbage collection',
  'V8 compiling and other native work (program)',
  'source-kinesis (polling, record conversion, queue)',
  'core: consumer runtime',
  'core: leases, membership, leader',
  'core: other',
  'the bench worker (its reports)',
  'other',
] as const;
export type Component = (typeof COMPONENTS)[number];

/** The component a frame's script belongs to, or undefined for node's own. */
function componentOfUrl(url: string): Component | undefined {
  if (url === '' || url.startsWith('node:')) return undefined;
  if (/storage-redis|\/ioredis\/|redis-parser|redis-errors|\/denque\//.test(url)) return 'Redis client and adapter';
  if (/storage-postgres|\/pg\/|\/pg-protocol\/|\/pg-pool\/|pg-types/.test(url)) return 'PostgreSQL client and adapter';
  if (/storage-dynamodb|client-dynamodb|lib-dynamodb|util-dynamodb/.test(url)) return 'DynamoDB adapter (its SDK client included)';
  if (/@aws-sdk|@smithy|@aws-crypto|fast-xml-parser|\/tslib\/|\/uuid\//.test(url)) return 'AWS SDK (building, signing, HTTP, deserializing)';
  if (/source-kinesis/.test(url)) return 'source-kinesis (polling, record conversion, queue)';
  if (/core\/(dist|src)\/(consumer|runtime)/.test(url)) return 'core: consumer runtime';
  if (/core\/(dist|src)\/(lease|membership|leader|coordinator)/.test(url)) return 'core: leases, membership, leader';
  if (/core\/(dist|src)\//.test(url)) return 'core: other';
  if (/\/e2e\//.test(url)) return 'the bench worker (its reports)';
  return 'other';
}

/** The component a sample is charged to, from its leaf up. */
function componentOf(leaf: ProfileNode, parentOf: ReadonlyMap<number, ProfileNode>): Component | undefined {
  if (leaf.callFrame.functionName === '(idle)') return undefined;
  if (leaf.callFrame.functionName === '(garbage collector)') return 'garbage collection';
  if (leaf.callFrame.functionName === '(program)') return 'V8 compiling and other native work (program)';
  let charged: Component | undefined;
  for (let node: ProfileNode | undefined = leaf; node !== undefined; node = parentOf.get(node.id)) {
    if (node.callFrame.url.startsWith('node:internal/modules/')) return 'module loading';
    charged ??= componentOfUrl(node.callFrame.url);
  }
  return charged ?? 'node internals (timers, microtasks, sockets, streams)';
}

/**
 * How many sampling intervals one sample may stand for. V8 samples a running process at its interval,
 * idle or not (an idle one as `(idle)`); a much longer gap is time the process did not run at all: stopped
 * by SIGSTOP (the burst drain pauses the workers after their span), or its sampler starved by a busy
 * machine. Such a gap is charged as this many intervals, not to whatever the last sample before it held.
 */
const MAX_INTERVALS_PER_SAMPLE = 10;

/** The median interval between a profile's samples (microseconds). */
function sampleInterval(profile: Profile): number {
  const deltas = profile.timeDeltas.slice(1).filter((delta) => delta > 0).sort((a, b) => a - b);
  return deltas[Math.floor(deltas.length / 2)] ?? 1_000;
}

/** Sampled microseconds per component inside [startUs, endUs]. */
export function chargeProfile(profile: Profile, startUs: number, endUs: number): Map<Component, number> {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const parentOf = new Map<number, ProfileNode>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parentOf.set(child, node);
  const charged = new Map<Component, number>();
  const maxWeight = MAX_INTERVALS_PER_SAMPLE * sampleInterval(profile);
  let at = profile.startTime;
  for (let i = 0; i < profile.samples.length; i++) {
    at += profile.timeDeltas[i]!;
    // A sample's time is when it was taken; its weight is the interval up to the next one.
    const weight = Math.min(profile.timeDeltas[i + 1] ?? 0, maxWeight);
    if (at < startUs || at > endUs) continue;
    const component = componentOf(byId.get(profile.samples[i]!)!, parentOf);
    if (component !== undefined) charged.set(component, (charged.get(component) ?? 0) + weight);
  }
  return charged;
}
