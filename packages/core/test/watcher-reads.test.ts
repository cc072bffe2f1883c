import { describe, expect, it } from 'vitest';
import { InvalidConfigError, MemoryStorage, type Storage } from '../src/index.js';
import { checkWatcherReads } from '../src/adapter.js';
import { Passthrough, WatchingClient } from './support/broken-adapters.js';

describe('checkWatcherReads', () => {
  it('says a store with getMembers, getRosterDigest and advanceRosterDigest has the watchers\' reads', () => {
    expect(checkWatcherReads(new MemoryStorage())).toBe(true);
  });

  it('says a store with none of them has no watchers\' reads', () => {
    expect(checkWatcherReads(new Passthrough(new MemoryStorage()))).toBe(false);
  });

  it('refuses a store with one or two of them with an InvalidConfigError naming what it lacks', () => {
    const store = new MemoryStorage();
    const cases: Array<[Storage, string]> = [
      [new WatchingClient(store, 'lacks-digest'), '[storage-x] the storage has getMembers but not getRosterDigest nor advanceRosterDigest'],
      [new WatchingClient(store, 'lacks-advance'), '[storage-x] the storage has getMembers and getRosterDigest but not advanceRosterDigest'],
      [Object.assign(new Passthrough(store), { advanceRosterDigest: () => store.advanceRosterDigest('g') }), '[storage-x] the storage has advanceRosterDigest but not getMembers nor getRosterDigest'],
    ];
    for (const [storage, message] of cases) {
      expect(() => checkWatcherReads(storage, 'storage-x')).toThrow(InvalidConfigError);
      expect(() => checkWatcherReads(storage, 'storage-x')).toThrow(`${message}: a store has all three of getMembers, getRosterDigest and advanceRosterDigest, or none`);
    }
  });
});
