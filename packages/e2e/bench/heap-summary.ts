/**
 * What a V8 heap snapshot (`.heapsnapshot`, as `--heapsnapshot-signal` or `v8.writeHeapSnapshot()` write it)
 * is made of, without a browser: the live heap by constructor (count, self size), the objects that retain
 * the most (retained size from the dominator tree, weak edges left out as DevTools does, with the chain of
 * dominators above each), and the record batches: objects with a `sequenceNumber` (the Kinesis source's
 * records) or a `SequenceNumber` (the SDK's), with what dominates them. Given two snapshots it prints the
 * difference by constructor, second minus first.
 *
 *   node --import tsx bench/heap-summary.ts A.heapsnapshot [B.heapsnapshot] [--top 25]
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

interface Snapshot {
  readonly count: number;
  readonly typeOf: (node: number) => string;
  readonly nameOf: (node: number) => string;
  readonly selfSize: Float64Array;
  readonly retained: Float64Array;
  readonly dominator: Int32Array;
  /** Per node, the names of its non-weak property edges' targets are reachable through `edgesOf`. */
  readonly edgesOf: (node: number) => Array<{ type: string; name: string; to: number }>;
  readonly reachable: Uint8Array;
}

function load(file: string): Snapshot {
  const raw = JSON.parse(readFileSync(file, 'utf8')) as {
    snapshot: { meta: { node_fields: string[]; node_types: [string[]]; edge_fields: string[]; edge_types: [string[]] }; node_count: number };
    nodes: number[];
    edges: number[];
    strings: string[];
  };
  const { meta } = raw.snapshot;
  const nodeFields = meta.node_fields.length;
  const edgeFields = meta.edge_fields.length;
  const [TYPE, NAME, SELF, EDGES] = ['type', 'name', 'self_size', 'edge_count'].map((field) => meta.node_fields.indexOf(field)) as [number, number, number, number];
  const [ETYPE, ENAME, ETO] = ['type', 'name_or_index', 'to_node'].map((field) => meta.edge_fields.indexOf(field)) as [number, number, number];
  const nodeTypes = meta.node_types[0];
  const edgeTypes = meta.edge_types[0];
  const weak = edgeTypes.indexOf('weak');
  const count = raw.nodes.length / nodeFields;
  const firstEdge = new Int32Array(count + 1);
  for (let node = 0, edge = 0; node < count; node++) {
    firstEdge[node] = edge;
    edge += raw.nodes[node * nodeFields + EDGES]! * edgeFields;
  }
  firstEdge[count] = raw.edges.length;
  const selfSize = new Float64Array(count);
  for (let node = 0; node < count; node++) selfSize[node] = raw.nodes[node * nodeFields + SELF]!;
  const targets = (node: number, visit: (to: number) => void): void => {
    for (let edge = firstEdge[node]!; edge < firstEdge[node + 1]!; edge += edgeFields) {
      if (raw.edges[edge + ETYPE] !== weak) visit(raw.edges[edge + ETO]! / nodeFields);
    }
  };

  // Post order from the root (node 0), iteratively.
  const order = new Int32Array(count).fill(-1);
  const postOrder: number[] = [];
  const reachable = new Uint8Array(count);
  const stack: Array<[number, number]> = [[0, firstEdge[0]!]];
  reachable[0] = 1;
  while (stack.length > 0) {
    const top = stack[stack.length - 1]!;
    const [node, edge] = top;
    if (edge >= firstEdge[node + 1]!) {
      order[node] = postOrder.length;
      postOrder.push(node);
      stack.pop();
      continue;
    }
    top[1] = edge + edgeFields;
    if (raw.edges[edge + ETYPE] === weak) continue;
    const to = raw.edges[edge + ETO]! / nodeFields;
    if (reachable[to] === 0) {
      reachable[to] = 1;
      stack.push([to, firstEdge[to]!]);
    }
  }
  // Predecessors of the reachable nodes, by post-order index.
  const predecessors: number[][] = postOrder.map(() => []);
  for (const node of postOrder) targets(node, (to) => void predecessors[order[to]!]!.push(order[node]!));
  // Cooper, Harvey and Kennedy, "A Simple, Fast Dominance Algorithm", over post-order indexes.
  const reached = postOrder.length;
  const idom = new Int32Array(reached).fill(-1);
  const rootIndex = reached - 1;
  idom[rootIndex] = rootIndex;
  const intersect = (a: number, b: number): number => {
    while (a !== b) {
      while (a < b) a = idom[a]!;
      while (b < a) b = idom[b]!;
    }
    return a;
  };
  for (let changed = true; changed; ) {
    changed = false;
    for (let index = rootIndex - 1; index >= 0; index--) {
      let candidate = -1;
      for (const predecessor of predecessors[index]!) {
        if (idom[predecessor] === -1) continue;
        candidate = candidate === -1 ? predecessor : intersect(predecessor, candidate);
      }
      if (candidate !== -1 && idom[index] !== candidate) {
        idom[index] = candidate;
        changed = true;
      }
    }
  }
  const retained = new Float64Array(count);
  const dominator = new Int32Array(count).fill(-1);
  for (let index = 0; index < reached; index++) retained[postOrder[index]!] = selfSize[postOrder[index]!]!;
  for (let index = 0; index < rootIndex; index++) {
    const node = postOrder[index]!;
    const parent = postOrder[idom[index]!]!;
    dominator[node] = parent;
    retained[parent] = retained[parent]! + retained[node]!;
  }
  return {
    count,
    typeOf: (node) => nodeTypes[raw.nodes[node * nodeFields + TYPE]!] ?? '?',
    nameOf: (node) => raw.strings[raw.nodes[node * nodeFields + NAME]!] ?? '?',
    selfSize,
    retained,
    dominator,
    reachable,
    edgesOf: (node) => {
      const edges: Array<{ type: string; name: string; to: number }> = [];
      for (let edge = firstEdge[node]!; edge < firstEdge[node + 1]!; edge += edgeFields) {
        const type = edgeTypes[raw.edges[edge + ETYPE]!] ?? '?';
        const nameOrIndex = raw.edges[edge + ENAME]!;
        const name = type === 'element' || type === 'hidden' ? String(nameOrIndex) : (raw.strings[nameOrIndex] ?? '?');
        edges.push({ type, name, to: raw.edges[edge + ETO]! / nodeFields });
      }
      return edges;
    },
  };
}

/** The constructor (or kind) a node counts under. */
function kindOf(snapshot: Snapshot, node: number): string {
  const type = snapshot.typeOf(node);
  if (type === 'object' || type === 'native') return snapshot.nameOf(node).split(' ')[0]!.slice(0, 60);
  if (type === 'closure') return '(closure)';
  if (type === 'code') return `(code ${snapshot.nameOf(node).slice(0, 30)})`;
  return `(${type})`;
}

function byKind(snapshot: Snapshot): Map<string, { count: number; size: number }> {
  const kinds = new Map<string, { count: number; size: number }>();
  for (let node = 0; node < snapshot.count; node++) {
    if (snapshot.reachable[node] === 0) continue;
    const kind = kindOf(snapshot, node);
    const entry = kinds.get(kind) ?? { count: 0, size: 0 };
    entry.count++;
    entry.size += snapshot.selfSize[node]!;
    kinds.set(kind, entry);
  }
  return kinds;
}

const mb = (bytes: number): string => (bytes / 1024 / 1024).toFixed(2);

function describe(snapshot: Snapshot, node: number): string {
  return `${kindOf(snapshot, node)}${snapshot.typeOf(node) === 'closure' ? ` ${snapshot.nameOf(node)}` : ''}@${node}`;
}

function chain(snapshot: Snapshot, node: number, depth = 6): string {
  const names: string[] = [];
  for (let at = snapshot.dominator[node]!; at > 0 && names.length < depth; at = snapshot.dominator[at]!) names.push(describe(snapshot, at));
  return names.join(' < ');
}

function summarize(file: string, snapshot: Snapshot, top: number): void {
  let total = 0;
  for (let node = 0; node < snapshot.count; node++) if (snapshot.reachable[node] === 1) total += snapshot.selfSize[node]!;
  console.log(`\n${file}: ${mb(total)} MB live in ${snapshot.count} nodes`);
  const kinds = [...byKind(snapshot)].sort((a, b) => b[1].size - a[1].size).slice(0, top);
  console.log('by constructor (self size):');
  for (const [kind, { count, size }] of kinds) console.log(`  ${mb(size).padStart(7)} MB ${String(count).padStart(8)}  ${kind}`);
  const types = new Map<string, number>();
  for (let node = 0; node < snapshot.count; node++) if (snapshot.reachable[node] === 1) types.set(snapshot.typeOf(node), (types.get(snapshot.typeOf(node)) ?? 0) + snapshot.selfSize[node]!);
  console.log(`by node type (self size): ${[...types].sort((a, b) => b[1] - a[1]).map(([type, size]) => `${type} ${mb(size)}`).join(', ')} MB`);
  // Retained size by constructor, each object counted once: not inside another of its own kind.
  const outermost = new Map<string, { count: number; size: number }>();
  for (let node = 1; node < snapshot.count; node++) {
    if (snapshot.reachable[node] === 0 || snapshot.typeOf(node) !== 'object') continue;
    const kind = kindOf(snapshot, node);
    let nested = false;
    for (let at = snapshot.dominator[node]!; at > 0 && !nested; at = snapshot.dominator[at]!) nested = snapshot.typeOf(at) === 'object' && kindOf(snapshot, at) === kind;
    if (nested) continue;
    const entry = outermost.get(kind) ?? { count: 0, size: 0 };
    entry.count++;
    entry.size += snapshot.retained[node]!;
    outermost.set(kind, entry);
  }
  console.log('retained by constructor (objects inside one of their own kind counted with it):');
  for (const [kind, { count, size }] of [...outermost].sort((a, b) => b[1].size - a[1].size).slice(0, top)) console.log(`  ${mb(size).padStart(7)} MB ${String(count).padStart(8)}  ${kind}`);
  // The largest retainers below the synthetic roots, each with the dominators above it.
  const nodes: number[] = [];
  for (let node = 1; node < snapshot.count; node++) if (snapshot.reachable[node] === 1 && snapshot.typeOf(node) !== 'synthetic') nodes.push(node);
  nodes.sort((a, b) => snapshot.retained[b]! - snapshot.retained[a]!);
  console.log('largest retained sizes:');
  for (const node of nodes.slice(0, top)) console.log(`  ${mb(snapshot.retained[node]!).padStart(7)} MB  ${describe(snapshot, node)}  < ${chain(snapshot, node)}`);
  // Record batches: the source's records and the SDK's, and what holds them (by their dominator's kind).
  for (const property of ['sequenceNumber', 'SequenceNumber']) {
    let count = 0;
    let retained = 0;
    const holders = new Map<string, number>();
    for (let node = 0; node < snapshot.count; node++) {
      if (snapshot.reachable[node] === 0 || snapshot.typeOf(node) !== 'object') continue;
      if (!snapshot.edgesOf(node).some((edge) => edge.type === 'property' && edge.name === property)) continue;
      count++;
      retained += snapshot.retained[node]!;
      const holder = chain(snapshot, node, 3);
      holders.set(holder, (holders.get(holder) ?? 0) + 1);
    }
    console.log(`objects with a ${property}: ${count}, retaining ${mb(retained)} MB; held by:`);
    for (const [holder, many] of [...holders].sort((a, b) => b[1] - a[1]).slice(0, 8)) console.log(`  ${String(many).padStart(6)}  ${holder}`);
  }
}

/** What holds the objects of `kind` (`--holders Map`): their retained size grouped by the chain of dominators above them. */
function holders(snapshot: Snapshot, kind: string, top: number): void {
  const chains = new Map<string, { count: number; size: number }>();
  for (let node = 1; node < snapshot.count; node++) {
    if (snapshot.reachable[node] === 0 || kindOf(snapshot, node) !== kind) continue;
    const above = chain(snapshot, node, 4).replace(/@\d+/g, '');
    const entry = chains.get(above) ?? { count: 0, size: 0 };
    entry.count++;
    entry.size += snapshot.retained[node]!;
    chains.set(above, entry);
  }
  console.log(`${kind} by what holds it (retained size):`);
  for (const [above, { count, size }] of [...chains].sort((a, b) => b[1].size - a[1].size).slice(0, top)) console.log(`  ${mb(size).padStart(7)} MB ${String(count).padStart(6)}  < ${above}`);
}

const { values, positionals } = parseArgs({ allowPositionals: true, options: { top: { type: 'string', default: '25' }, holders: { type: 'string', multiple: true } } });
const top = Number(values.top);
const snapshots = positionals.map((file) => [file, load(file)] as const);
for (const [file, snapshot] of snapshots) {
  summarize(file, snapshot, top);
  for (const kind of values.holders ?? []) holders(snapshot, kind, top);
}
if (snapshots.length === 2) {
  const [first, second] = snapshots.map(([, snapshot]) => byKind(snapshot)) as [Map<string, { count: number; size: number }>, Map<string, { count: number; size: number }>];
  const kinds = new Set([...first.keys(), ...second.keys()]);
  const diffs = [...kinds].map((kind) => {
    const a = first.get(kind) ?? { count: 0, size: 0 };
    const b = second.get(kind) ?? { count: 0, size: 0 };
    return { kind, size: b.size - a.size, count: b.count - a.count };
  });
  diffs.sort((a, b) => Math.abs(b.size) - Math.abs(a.size));
  const total = diffs.reduce((sum, diff) => sum + diff.size, 0);
  console.log(`\nsecond minus first, by constructor (self size): ${mb(total)} MB in all`);
  for (const { kind, size, count } of diffs.slice(0, top)) console.log(`  ${mb(size).padStart(7)} MB ${String(count).padStart(8)}  ${kind}`);
}
