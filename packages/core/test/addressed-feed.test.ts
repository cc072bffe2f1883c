import { describe, expect, it } from 'vitest';
import { MemoryStorage, StorageUnavailableError, type ChangeSubscription, type LeaseChange, type SubscribeOptions } from '../src/index.js';
import { leaseStateOf, limits } from '../src/adapter.js';
import { AddressedFeed, type Addressing } from '../src/lease/addressed-feed.js';

const GROUP = 'orders';

/** A memory store whose subscriptions are logged as they open and close, and whose next subscribe can be made to fail or wait. */
function loggedStore() {
  const memory = new MemoryStorage();
  const log: string[] = [];
  let failNext = false;
  let gate: Promise<void> | null = null;
  const storage = {
    async subscribe(group: string, listener: (change: LeaseChange) => void, options?: SubscribeOptions): Promise<ChangeSubscription> {
      const name = options?.addressedTo?.join(',') ?? '*';
      if (failNext) {
        failNext = false;
        throw new StorageUnavailableError(`subscribe to ${name} failed`);
      }
      if (gate) await gate;
      const inner = await memory.subscribe(group, listener, options);
      log.push(`open ${name}`);
      const close = async (): Promise<void> => {
        log.push(`close ${name}`);
        await inner.close();
      };
      return { close, [Symbol.asyncDispose]: close };
    },
  };
  return {
    memory,
    storage,
    log,
    failNextSubscribe: () => (failNext = true),
    holdSubscribes: () => {
      let open!: () => void;
      gate = new Promise((resolve) => (open = resolve));
      return () => {
        gate = null;
        open();
      };
    },
  };
}

function feedOver(store: ReturnType<typeof loggedStore>, addressing: Addressing = 'watched') {
  const heard: LeaseChange[] = [];
  const reported: unknown[] = [];
  let running = true;
  const feed = new AddressedFeed({
    storage: store.storage,
    group: GROUP,
    listener: (change) => heard.push(change),
    addressing,
    report: (error) => reported.push(error),
    running: () => running,
  });
  return { feed, heard, reported, stop: () => (running = false) };
}

/** Settles the feed's moves in the background (each a few promise turns over the memory store). */
const settle = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 0));

async function handOver(memory: MemoryStorage, leaseKey: string, owner: string): Promise<void> {
  const created = await memory.createLease({ group: GROUP, leaseKey, owner: 'x', epoch: 1 });
  if (created.status !== 'applied') throw new Error('create');
  const [outcome] = await memory.updateLeases(GROUP, [{ leaseKey, expectedVersion: created.record.version, next: { ...leaseStateOf(created.record), owner, epoch: 2 }, notify: 'handed-off' }]);
  if (outcome?.status !== 'applied') throw new Error('hand over');
  await settle();
}

describe('AddressedFeed', () => {
  it('addresses itself, the members it watches and those it declared dead lately, sorted and once each; more than a subscription may name is everyone', () => {
    const { feed } = feedOver(loggedStore());
    expect(feed.addressFor('w2', ['w3', 'w1'], ['w1', 'w9'])).toEqual(['w1', 'w2', 'w3', 'w9']);
    const many = Array.from({ length: limits.maxWatchedMembers }, (_, i) => `d${i}`);
    expect(feed.addressFor('w0', [], many)).toBeNull();
    expect(feed.addressFor('w0', [], many.slice(1))).toHaveLength(limits.maxWatchedMembers);
    expect(feedOver(loggedStore(), 'self-only').feed.addressFor('w2', ['w3'], ['w9'])).toEqual(['w2']);
    expect(feedOver(loggedStore(), 'everyone').feed.addressFor('w2', ['w3'], ['w9'])).toBeNull();
  });

  it('hears the handovers to the owners it names and not the others, and after a move the new owners\' and not the old ones\'', async () => {
    const store = loggedStore();
    const { feed, heard } = feedOver(store);
    await feed.subscribe(['w1', 'w2']);
    await handOver(store.memory, 'a', 'w2');
    await handOver(store.memory, 'b', 'w3');
    feed.readdress(['w1', 'w3']);
    await settle();
    await handOver(store.memory, 'c', 'w2');
    await handOver(store.memory, 'd', 'w3');
    expect(heard.filter((change) => change.kind === 'handed-off').map((change) => change.leaseKey)).toEqual(['a', 'd']);
    // Every create is heard, whatever the address.
    expect(heard.filter((change) => change.kind === 'created').map((change) => change.leaseKey)).toEqual(['a', 'b', 'c', 'd']);
    expect(feed.address).toEqual(['w1', 'w3']);
  });

  it('opens the new subscription before it closes the old one, and does not move to the address it has', async () => {
    const store = loggedStore();
    const { feed } = feedOver(store);
    await feed.subscribe(['w1']);
    feed.readdress(['w1']);
    feed.readdress(['w1', 'w2']);
    await settle();
    expect(store.log).toEqual(['open w1', 'open w1,w2', 'close w1']);
  });

  it('moves once to the last address wanted when the address changes again during a move', async () => {
    const store = loggedStore();
    const { feed } = feedOver(store);
    await feed.subscribe(['w1']);
    const release = store.holdSubscribes();
    feed.readdress(['w1', 'w2']);
    feed.readdress(['w1', 'w3']);
    feed.readdress(['w1', 'w4']);
    release();
    await settle();
    await settle();
    expect(feed.address).toEqual(['w1', 'w4']);
    expect(store.log).toEqual(['open w1', 'open w1,w2', 'close w1', 'open w1,w4', 'close w1,w2']);
  });

  it('keeps the old subscription when a move fails, reports it, and moves at the next readdress', async () => {
    const store = loggedStore();
    const { feed, reported } = feedOver(store);
    await feed.subscribe(['w1']);
    store.failNextSubscribe();
    feed.readdress(['w1', 'w2']);
    await settle();
    expect(reported).toHaveLength(1);
    expect(feed.address).toEqual(['w1']);
    expect(feed.open).toBe(true);
    feed.readdress(['w1', 'w2']);
    await settle();
    expect(feed.address).toEqual(['w1', 'w2']);
  });

  it('closes what a move opens once the feed is closed or its coordinator stopped meanwhile: nothing is left listening', async () => {
    for (const how of ['closed', 'stopped'] as const) {
      const store = loggedStore();
      const { feed, heard, stop } = feedOver(store);
      await feed.subscribe(['w1']);
      const release = store.holdSubscribes();
      feed.readdress(['w1', 'w2']);
      if (how === 'closed') await feed.close();
      else stop();
      release();
      await settle();
      if (how === 'stopped') await feed.close();
      const opened = store.log.filter((line) => line.startsWith('open')).length;
      expect(store.log.filter((line) => line.startsWith('close')).length, how).toBe(opened);
      heard.length = 0;
      await handOver(store.memory, `k-${how}`, 'w1');
      expect(heard, how).toEqual([]);
    }
  });
});
