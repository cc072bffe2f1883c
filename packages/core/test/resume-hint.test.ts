import { describe, expect, it } from 'vitest';
import { judgeResume, RESUME_FIELD, withoutResume, withResume } from '../src/lease/resume-hint.js';
import { updateOf } from '../src/rewind/writes.js';
import { leaseStateOf, type LeaseRecord } from '../src/storage.js';
import { run } from './support/virtual.js';
import { GROUP, perKey, range, world } from './support/consumer-world.js';

const MAX_AGE = 240_000;

/** A lease as its recipient holds it, carrying the hint a handover wrote. */
function handed(hint: object | string, lease: { fencingToken?: number; checkpoint?: string | null } = {}) {
  return {
    fencingToken: lease.fencingToken ?? 7,
    checkpoint: lease.checkpoint === undefined ? '41' : lease.checkpoint,
    metadata: { other: 'kept', [RESUME_FIELD]: typeof hint === 'string' ? hint : JSON.stringify(hint) },
  };
}

const good = { epoch: 7, checkpoint: '41', hint: 'iterator-after-41', ageMs: 30 };

describe('the resume hint a handover carries', () => {
  it('is used when it was written for the tenure and the checkpoint the lease is held at, and is young enough', () => {
    expect(judgeResume(handed(good), 20, MAX_AGE)).toEqual({ hint: 'iterator-after-41', ageMs: 50 });
  });

  it('is not used for another checkpoint, another tenure, past the age bound, malformed or missing', () => {
    expect(judgeResume(handed({ ...good, checkpoint: '40' }), 0, MAX_AGE)).toEqual({ refused: 'checkpoint' });
    expect(judgeResume(handed(good, { checkpoint: null }), 0, MAX_AGE)).toEqual({ refused: 'checkpoint' });
    expect(judgeResume(handed({ ...good, epoch: 6 }), 0, MAX_AGE)).toEqual({ refused: 'epoch' });
    expect(judgeResume(handed(good, { fencingToken: 8 }), 0, MAX_AGE)).toEqual({ refused: 'epoch' });
    // Its age at the handover plus the recipient's own time since it read the lease.
    expect(judgeResume(handed({ ...good, ageMs: 200_000 }), 40_000, MAX_AGE)).toEqual({ refused: 'age' });
    expect(judgeResume(handed({ ...good, ageMs: 200_000 }), 39_999, MAX_AGE)).toEqual({ hint: 'iterator-after-41', ageMs: 239_999 });
    for (const bad of ['not json', 'null', '[]', JSON.stringify({ ...good, hint: '' }), JSON.stringify({ ...good, epoch: '7' }), JSON.stringify({ ...good, ageMs: -1 }), JSON.stringify({ ...good, checkpoint: 41 })]) {
      expect(judgeResume(handed(bad), 0, MAX_AGE)).toEqual({ refused: 'malformed' });
    }
    expect(judgeResume({ fencingToken: 7, checkpoint: '41', metadata: {} }, 0, MAX_AGE)).toEqual({ refused: 'missing' });
  });

  it('is written bound to the tenure the handover starts, with its age by the sender\'s clock, and dropped by any other write', () => {
    const next = { ...leaseStateOf({ owner: 'b', incarnation: 'ib', epoch: 8, checkpoint: '41' }), metadata: { other: 'kept' } };
    const written = withResume(next, { position: '41', hint: 'iterator-after-41', receivedAt: 1_000 }, 1_250);
    expect(JSON.parse(written.metadata[RESUME_FIELD]!)).toEqual({ epoch: 8, checkpoint: '41', hint: 'iterator-after-41', ageMs: 250 });
    expect(withoutResume(written).metadata).toEqual({ other: 'kept' });
    // Too large to carry: the handover is written without it.
    expect(withResume(next, { position: '41', hint: 'x'.repeat(2_049), receivedAt: 0 }, 0)).toBe(next);
    expect(withResume({ ...next, metadata: { big: 'y'.repeat(16 * 1024 - 20) } }, { position: '41', hint: 'short', receivedAt: 0 }, 0).metadata[RESUME_FIELD]).toBeUndefined();
  });

  it('is dropped by an operator\'s rewind, requested of the owner or applied at once, like every other write but a handover', () => {
    const lease = { group: GROUP, leaseKey: 's', version: 3, ...withResume({ ...leaseStateOf({ owner: 'b', incarnation: 'ib', epoch: 8, checkpoint: '41' }), metadata: { other: 'kept' } }, { position: '41', hint: 'it', receivedAt: 0 }, 0) } as LeaseRecord;
    expect(lease.metadata[RESUME_FIELD]).toBeDefined();
    for (const how of ['request', 'direct'] as const) {
      const update = updateOf(lease, { how, to: '10' }, 'rw-1', '2026-12-04T00:00:00.000Z');
      expect(update.next.metadata[RESUME_FIELD], how).toBeUndefined();
      expect(update.next.metadata.other, how).toBe('kept');
    }
  });
});

describe('a graceful stop with resume hints', () => {
  /** Two workers share four shards; the first stops and hands its shards over. */
  async function handover(sourceTtlMs?: number) {
    const w = world(4, sourceTtlMs === undefined ? {} : { resumeHintTtlMs: sourceTtlMs });
    const first = w.consumer('first');
    const second = w.consumer('second');
    await run(w.scheduler, first.start());
    await run(w.scheduler, second.start());
    w.produce(['a', 'b', 'c', 'd', 'e', 'f'], 30);
    await w.scheduler.advance(30_000);
    const handedOver = first.shards.length;
    expect(handedOver).toBeGreaterThan(0);
    const before = { ...w.source.starts };
    await run(w.scheduler, first.stop());
    w.produce(['a', 'b', 'c', 'd', 'e', 'f'], 30, 31);
    await w.scheduler.advance(10_000);
    expect(second.shards).toHaveLength(4);
    const starts = { fromHint: w.source.starts.fromHint - before.fromHint, fromPosition: w.source.starts.fromPosition - before.fromPosition };
    const leases = (await w.storage.listLeases(GROUP)).leases;
    await run(w.scheduler, second.stop());
    return { ...w, handedOver, starts, leases };
  }

  it('the recipient reads on from the hint without looking the checkpoint up, and processes every record once', async () => {
    const { seen, handedOver, starts, leases } = await handover();
    expect(starts).toEqual({ fromHint: handedOver, fromPosition: 0 });
    for (const values of perKey(seen).values()) expect(values).toEqual(range(1, 60));
    // The recipient's checkpoints dropped the hints: no later tenure finds one.
    expect(leases.filter((lease: LeaseRecord) => RESUME_FIELD in lease.metadata)).toEqual([]);
  });

  it('a hint the source no longer takes (expired) falls back to the checkpoint, and still every record is processed once', async () => {
    // Hints live 1 ms of the source's clock: the recipient's bound (4/5 of it) refuses them all.
    const { seen, handedOver, starts } = await handover(1);
    expect(starts).toEqual({ fromHint: 0, fromPosition: handedOver });
    for (const values of perKey(seen).values()) expect(values).toEqual(range(1, 60));
  });
});
