import { describe, expect, it } from 'vitest';
import {  } from '../src/index.js';
import { VersionWatch } from '../src/adapter.js';

describe('VersionWatch (observed expiry)', () => {
  it('expires a record whose version stood still for the duration from the moment this observer first saw it', () => {
    let now = 1_000;
    const watch = new VersionWatch(() => now);
    watch.see('w1', 7);
    now += 9_999;
    watch.see('w1', 7);
    expect(watch.expired('w1', 7, 10_000)).toBe(false);
    now += 1;
    expect(watch.expired('w1', 7, 10_000)).toBe(true);
    expect(watch.expiresAt('w1', 7, 10_000)).toBe(11_000);
  });

  it('starts over when the version moves, and says it moved; a version it does not watch never expires', () => {
    let now = 0;
    const watch = new VersionWatch(() => now);
    expect(watch.see('w1', 'a\u00001').moved).toBe(false);
    now = 8_000;
    const moved = watch.see('w1', 'a\u00002');
    expect(moved).toEqual({ version: 'a\u00002', seenAt: 8_000, moved: true, firstSeenAt: 0 });
    now = 17_000;
    expect(watch.expired('w1', 'a\u00002', 10_000)).toBe(false);
    expect(watch.expired('w1', 'a\u00001', 0)).toBe(false);
    expect(watch.expired('w2', 1, 0)).toBe(false);
  });

  it('forgets a record that left, so that one written again later starts a new watch', () => {
    let now = 0;
    const watch = new VersionWatch(() => now);
    watch.see('w1', 3);
    watch.see('w2', 3);
    watch.retain((key) => key === 'w2');
    now = 50_000;
    expect(watch.get('w1')).toBeUndefined();
    expect(watch.see('w1', 3)).toEqual({ version: '3', seenAt: 50_000, moved: false, firstSeenAt: 50_000 });
    watch.forget('w2');
    expect(watch.get('w2')).toBeUndefined();
  });
});
