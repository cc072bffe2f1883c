import { deflateRawSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { RECORD_FORMAT } from '../src/adapter.js';
import type { MemberRecord } from '../src/storage.js';
import { limits } from '../src/validation.js';
import { HANDED_FIELD, NotesRead, readNote, recipientTag, writeNote } from '../src/lease/leave-notes.js';

const shard = (i: number) => `shardId-${String(i).padStart(12, '0')}`;

/** 100 leases of one worker handed to 99 others, as a graceful stop at 100 x 10,000 does. */
function stopOfOneOfAHundred(keyOf: (i: number) => string, idOf: (w: number) => string): Map<string, string[]> {
  const handed = new Map<string, string[]>();
  for (let i = 0; i < 100; i++) {
    const to = idOf(i % 99);
    handed.set(to, [...(handed.get(to) ?? []), keyOf(i * 97)]);
  }
  return handed;
}

/** Whether a leave record of `metadata` plus the note fits the member's limit. */
const fitsBeside = (metadata: Record<string, string>) => (value: string) =>
  Buffer.byteLength(JSON.stringify({ format: RECORD_FORMAT, incarnation: 'abcdefgh-1', leaseDurationMs: 10_000, status: 'dead', held: 0, changes: 3, requests: [], metadata: { ...metadata, [HANDED_FIELD]: value } }), 'utf8') <=
  limits.maxMemberBytes;

/** A roster of `members`, as the notes read it. */
const roster = (members: MemberRecord[]) => ({ values: () => members, has: (workerId: string) => members.some((member) => member.workerId === workerId) });

function dead(workerId: string, metadata: Record<string, string>, incarnation = `inc-${workerId}`): MemberRecord {
  return { group: 'g', workerId, version: 1, format: RECORD_FORMAT, incarnation, leaseDurationMs: 10_000, status: 'dead', held: 0, changes: 0, requests: [], metadata };
}

describe('a leave note', () => {
  it('names every lease a worker of a hundred hands over, within the member record, for Kinesis shard ids and for multi-stream keys', () => {
    const kinesis = stopOfOneOfAHundred(shard, (w) => `ip-10-0-${w}-${(w * 37) % 256}.ec2.internal-${1000 + w}`);
    const multi = stopOfOneOfAHundred((i) => `arn:aws:kinesis:us-east-1:123456789012:stream/orders-prod:${shard(i)}`, (w) => `8f14e45f-ceea-467f-a0e6-${String(w).padStart(12, '0')}`);
    const busyMember = { 'leasehold.digest': '123456', 'leasehold.max-leases': '150', 'leasehold.leaving': '1', app: 'orders-consumer' };
    for (const handed of [kinesis, multi]) {
      const value = writeNote(handed, true, fitsBeside(busyMember));
      expect(value).toBeDefined();
      const note = readNote(value)!;
      expect(note.complete).toBe(true);
      expect(note.count).toBe(100);
      for (const [workerId, keys] of handed) expect(note.byTag.get(recipientTag(workerId))).toEqual([...keys].sort());
    }
  });

  it('names as many recipients as fit, and then says it is not complete', () => {
    // Keys that do not compress: 30 of 400 bytes, one per recipient.
    let state = 7;
    const noise = () => Array.from({ length: 400 }, () => ((state = (state * 1103515245 + 12345) % 2 ** 31), 'abcdefghijklmnopqrstuvwxyz0123456789'[state % 36])).join('');
    const handed = new Map(Array.from({ length: 30 }, (_, w) => [`worker-${w}`, [noise()]] as const));
    const value = writeNote(handed, true, fitsBeside({}))!;
    expect(fitsBeside({})(value)).toBe(true);
    const note = readNote(value)!;
    expect(note.complete).toBe(false);
    expect(note.count).toBeGreaterThan(0);
    expect(note.count).toBeLessThan(30);
    // Each named recipient is named with its own key.
    for (const [workerId, keys] of handed) {
      const named = note.byTag.get(recipientTag(workerId));
      if (named) expect(named).toEqual(keys);
    }
  });

  it('is not complete when the stop did not hand over everything, and absent when it handed nothing or nothing fits', () => {
    const handed = new Map([['worker-1', [shard(1)]]]);
    expect(readNote(writeNote(handed, false, () => true))).toMatchObject({ complete: false, count: 1 });
    expect(writeNote(new Map(), true, () => true)).toBeUndefined();
    expect(writeNote(handed, true, () => false)).toBeUndefined();
  });

  it('reads as no note when the field holds something else: not base64, not deflated, not the document, or one that inflates past its bound', () => {
    const deflated = (text: string) => deflateRawSync(Buffer.from(text, 'utf8')).toString('base64');
    expect(readNote(undefined)).toBeUndefined();
    expect(readNote('not a note')).toBeUndefined();
    expect(readNote(deflated('[1,2]'))).toBeUndefined();
    expect(readNote(deflated('{"c":2,"h":[]}'))).toBeUndefined();
    expect(readNote(deflated('{"c":1,"h":[["tag"]]}'))).toBeUndefined();
    expect(readNote(deflated('{"c":1,"h":[["tag",7]]}'))).toBeUndefined();
    expect(readNote(deflated(`{"c":1,"h":[["tag","${'k'.repeat(300 * 1024)}"]]}`))).toBeUndefined();
    expect(readNote(deflated('{"c":1,"h":[["tag","k1"],["tag","k2"]]}'))).toMatchObject({ complete: true, count: 2, byTag: new Map([['tag', ['k1', 'k2']]]) });
  });

  it('tags a recipient by a 32-bit FNV-1a of its worker id, the same in every release', () => {
    // FNV-1a of "" is the offset basis, 0x811c9dc5; of "a", 0xe40c292c.
    expect(recipientTag('')).toBe((0x811c9dc5).toString(36));
    expect(recipientTag('a')).toBe((0xe40c292c).toString(36));
    expect(recipientTag('worker-042')).not.toBe(recipientTag('worker-043'));
  });
});

describe('the notes a worker reads', () => {
  it('gives the leases named for this worker once per leave, and counts every lease named as on its way for the window', () => {
    const handed = new Map([
      ['me', [shard(1), shard(2)]],
      ['other', [shard(3)]],
    ]);
    const leaver = dead('leaver', { [HANDED_FIELD]: writeNote(handed, true, () => true)! });
    const notes = new NotesRead('me', false);
    expect(notes.read(roster([leaver]), 1_000).sort()).toEqual([shard(1), shard(2)]);
    expect(notes.read(roster([leaver]), 2_000)).toEqual([]);
    expect(notes.onTheirWay(1_000 + 3_999, 4_000)).toBe(3);
    expect(notes.onTheirWay(1_000 + 4_000, 4_000)).toBe(0);
    // The same worker id leaving again, in a new incarnation, is a new note.
    expect(notes.read(roster([dead('leaver', leaver.metadata, 'inc-2')]), 9_000).sort()).toEqual([shard(1), shard(2)]);
    // Its record removed, its note is forgotten.
    notes.read(roster([]), 10_000);
    expect(notes.onTheirWay(10_000, 4_000)).toBe(0);
  });

  it('says how many leases the notes read within the window name for a worker, by its hash', () => {
    const handed = new Map([
      ['me', [shard(1)]],
      ['other', [shard(2), shard(3)]],
    ]);
    const notes = new NotesRead('me', false);
    expect(notes.namedFor('other', 0, 4_000)).toBe(0);
    notes.read(roster([dead('leaver', { [HANDED_FIELD]: writeNote(handed, true, () => true)! })]), 1_000);
    expect(notes.namedFor('other', 2_000, 4_000)).toBe(2);
    expect(notes.namedFor('me', 2_000, 4_000)).toBe(1);
    expect(notes.namedFor('nobody', 2_000, 4_000)).toBe(0);
    expect(notes.namedFor('other', 5_000, 4_000)).toBe(0);
  });

  it('ignores live members, its own leave, and a note that cannot be read, whose leases it does not count', () => {
    const note = writeNote(new Map([['me', [shard(1)]]]), true, () => true)!;
    const notes = new NotesRead('me', false);
    expect(notes.read(roster([{ ...dead('alive', { [HANDED_FIELD]: note }), status: 'alive' }, dead('me', { [HANDED_FIELD]: note }), dead('garbled', { [HANDED_FIELD]: 'x' })]), 0)).toEqual([]);
    expect(notes.onTheirWay(0, 4_000)).toBe(0);
  });

  it('counts a note for as long as it is read under the unsafe switch noteTrusted', () => {
    const notes = new NotesRead('me', true);
    notes.read(roster([dead('leaver', { [HANDED_FIELD]: writeNote(new Map([['x', [shard(1)]]]), true, () => true)! })]), 0);
    expect(notes.onTheirWay(1_000_000, 4_000)).toBe(1);
  });
});
