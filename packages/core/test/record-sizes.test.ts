/**
 * The largest encoded records, as the adapter-author docs state them for column and item sizes: a state
 * with every field at its limit, each string made of the characters JSON writes longest (a control
 * character is one UTF-8 byte and six bytes of JSON, `\u0001`), encodes to exactly the stated size, and
 * one byte more in any field is refused.
 */
import { describe, expect, it } from 'vitest';
import { InvalidInputError, type LeaderState, type LeaseState, type MemberState } from '../src/index.js';
import {
  encodeLeaderState,
  encodeLeaseState,
  encodeMemberState,
  limits,
  validateLeaderState,
  validateLeaseState,
  validateMemberState,
} from '../src/adapter.js';

/** The sizes the docs state (core README "Limits", DESIGN section 3, UPGRADING.md). */
const LARGEST_LEASE_STATE_BYTES = 112_810;
const LARGEST_LEADER_STATE_BYTES = 35_914;
const LARGEST_MEMBER_STATE_BYTES = 2_048;

/** Control characters JSON writes as six bytes (`\u0001`); \b, \t, \n, \f and \r it writes as two. */
const SIX_BYTE_CONTROLS = Array.from({ length: 31 }, (_, i) => String.fromCharCode(i + 1)).filter((c) => JSON.stringify(c).length === 8);

/** A name of `bytes` UTF-8 bytes of six-byte control characters, its last one the `n`th of them (distinct names). */
function costliest(bytes: number, n = 0): string {
  return '\u0001'.repeat(bytes - 1) + (SIX_BYTE_CONTROLS[n] as string);
}

/** A string whose value in `{"k":…}` makes exactly `jsonBytes` bytes of JSON. */
function filling(jsonBytes: number): string {
  const room = jsonBytes - '{"k":""}'.length;
  return '\u0001'.repeat(Math.floor(room / 6)) + 'a'.repeat(room % 6);
}

function bytes(json: string): number {
  return Buffer.byteLength(json, 'utf8');
}

function largestLease(): LeaseState {
  return {
    format: Number.MAX_SAFE_INTEGER,
    owner: costliest(limits.maxNameBytes),
    epoch: Number.MAX_SAFE_INTEGER,
    checkpoint: costliest(limits.maxCheckpointBytes),
    parentKeys: Array.from({ length: limits.maxParentKeys }, (_, i) => costliest(limits.maxNameBytes, i)),
    incarnation: costliest(limits.maxNameBytes),
    metadata: { k: filling(limits.maxMetadataBytes) },
    k: filling(limits.maxExtensionBytes),
  } as LeaseState;
}

function largestLeader(): LeaderState {
  return {
    format: Number.MAX_SAFE_INTEGER,
    holder: costliest(limits.maxNameBytes),
    term: Number.MAX_SAFE_INTEGER,
    metadata: { k: filling(limits.maxMetadataBytes) },
    k: filling(limits.maxExtensionBytes),
  } as LeaderState;
}

describe('the largest encoded records', () => {
  it(`a lease state with every field at its limit encodes to ${LARGEST_LEASE_STATE_BYTES} bytes, and one byte more in any field is refused`, () => {
    const lease = largestLease();
    validateLeaseState(lease);
    expect(bytes(encodeLeaseState(lease))).toBe(LARGEST_LEASE_STATE_BYTES);
    const over: Array<[string, LeaseState]> = [
      ['owner', { ...lease, owner: `${lease.owner as string}\u0001` }],
      ['checkpoint', { ...lease, checkpoint: `${lease.checkpoint as string}\u0001` }],
      ['parent keys', { ...lease, parentKeys: [...lease.parentKeys, costliest(limits.maxNameBytes, 16)] }],
      ['parent key', { ...lease, parentKeys: [...lease.parentKeys.slice(1), `${lease.parentKeys[0] as string}\u0001`] }],
      ['incarnation', { ...lease, incarnation: `${lease.incarnation as string}\u0001` }],
      ['metadata', { ...lease, metadata: { k: `${lease.metadata.k as string}a` } }],
      ['fields core does not name', { ...lease, k: `${(lease as unknown as { k: string }).k}a` } as LeaseState],
    ];
    for (const [what, state] of over) expect(() => validateLeaseState(state), what).toThrow(InvalidInputError);
  });

  it(`a leader state with every field at its limit encodes to ${LARGEST_LEADER_STATE_BYTES} bytes, and one byte more in any field is refused`, () => {
    const leader = largestLeader();
    validateLeaderState(leader);
    expect(bytes(encodeLeaderState(leader))).toBe(LARGEST_LEADER_STATE_BYTES);
    const over: Array<[string, LeaderState]> = [
      ['holder', { ...leader, holder: `${leader.holder as string}\u0001` }],
      ['metadata', { ...leader, metadata: { k: `${leader.metadata.k as string}a` } }],
      ['fields core does not name', { ...leader, k: `${(leader as unknown as { k: string }).k}a` } as LeaderState],
    ];
    for (const [what, state] of over) expect(() => validateLeaderState(state), what).toThrow(InvalidInputError);
  });

  it(`a member state encodes to at most ${LARGEST_MEMBER_STATE_BYTES} bytes: its limit is on the encoded state itself`, () => {
    const base: MemberState = { format: 1, incarnation: 'i', leaseDurationMs: 10_000, status: 'alive', held: 0, changes: 0, requests: [], metadata: {} };
    const padding = (size: number): MemberState => ({ ...base, metadata: { k: '\u0001'.repeat(Math.floor(size / 6)) + 'a'.repeat(size % 6) } });
    const empty = bytes(encodeMemberState({ ...base, metadata: { k: '' } }));
    const largest = padding(LARGEST_MEMBER_STATE_BYTES - empty);
    validateMemberState(largest);
    expect(bytes(encodeMemberState(largest))).toBe(LARGEST_MEMBER_STATE_BYTES);
    expect(() => validateMemberState(padding(LARGEST_MEMBER_STATE_BYTES - empty + 1))).toThrow(InvalidInputError);
  });
});
