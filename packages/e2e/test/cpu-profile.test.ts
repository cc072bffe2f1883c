import { describe, expect, it } from 'vitest';
import { chargeProfile, type Profile, type ProfileNode } from '../bench/cpu-profile.js';

const frame = (id: number, functionName: string, url: string, children: number[] = []): ProfileNode => ({ id, callFrame: { functionName, url }, children });

// root -> timer (node) -> ioredis write -> socket write (node); root -> SDK deserializer; root -> worker -> loader -> module;
// and the pseudo-frames for idle, collection and V8's own work.
const nodes: ProfileNode[] = [
  frame(1, '(root)', '', [2, 5, 6, 9, 10, 11]),
  frame(2, 'listOnTimeout', 'node:internal/timers', [3]),
  frame(3, 'sendCommand', 'file:///app/node_modules/ioredis/built/Redis.js', [4]),
  frame(4, 'writeGeneric', 'node:internal/stream_base_commons'),
  frame(5, '_readStruct', 'file:///app/node_modules/@smithy/core/dist-cjs/submodules/protocols/index.js'),
  frame(6, 'main', 'file:///app/packages/e2e/bench/dist/src/worker.js', [7]),
  frame(7, 'import', 'node:internal/modules/esm/loader', [8]),
  frame(8, 'top', 'file:///app/packages/core/dist/lease/taking.js'),
  frame(9, '(idle)', ''),
  frame(10, '(garbage collector)', ''),
  frame(11, '(program)', ''),
];

/** A profile of one sample per node id in `samples`, 1 ms apart from t = 1,000 us, the first at t = 2,000 us. */
function profileOf(samples: number[]): Profile {
  return { nodes, startTime: 1_000, samples, timeDeltas: samples.map(() => 1_000) };
}

describe('charging a worker profile to its components', () => {
  it('charges each sample to the first frame up its stack that is not node\'s own, with the time until the next sample', () => {
    // Samples at 2, 3, 4, 5, 6, 7 ms: the last one has no interval after it and weighs nothing.
    const charged = chargeProfile(profileOf([4, 5, 5, 10, 11, 4]), 0, 10_000);
    expect(Object.fromEntries(charged)).toEqual({
      'Redis client and adapter': 1_000,
      'AWS SDK (building, signing, HTTP, deserializing)': 2_000,
      'garbage collection': 1_000,
      'V8 compiling and other native work (program)': 1_000,
    });
  });

  it('charges a sample under node\'s module loader to module loading, whoever runs inside it', () => {
    expect(Object.fromEntries(chargeProfile(profileOf([8, 8]), 0, 10_000))).toEqual({ 'module loading': 1_000 });
  });

  it('leaves out idle samples and those outside the span', () => {
    // Samples at 2, 3, 4, 5 ms; the span holds 3 and 4 ms: one idle, one SDK.
    const charged = chargeProfile(profileOf([5, 9, 5, 5]), 2_500, 4_500);
    expect(Object.fromEntries(charged)).toEqual({ 'AWS SDK (building, signing, HTTP, deserializing)': 1_000 });
  });

  it('charges a gap in the samples (the process stopped) as ten intervals, not to the sample before it', () => {
    // The Redis sample at 2 ms is followed by a 500 ms gap (SIGSTOP), then 1 ms intervals again.
    const profile: Profile = { nodes, startTime: 1_000, samples: [4, 5, 5, 5, 5], timeDeltas: [1_000, 500_000, 1_000, 1_000, 1_000] };
    expect(Object.fromEntries(chargeProfile(profile, 0, 1_000_000))).toEqual({
      'Redis client and adapter': 10_000,
      'AWS SDK (building, signing, HTTP, deserializing)': 3_000,
    });
  });

  it('charges a stack of node\'s frames alone to node internals', () => {
    expect(Object.fromEntries(chargeProfile(profileOf([2, 2]), 0, 10_000))).toEqual({ 'node internals (timers, microtasks, sockets, streams)': 1_000 });
  });
});
