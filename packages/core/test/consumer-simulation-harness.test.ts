import { describe, expect, it } from 'vitest';
import { Checkpoint, CorruptRecordError, MemoryStorage, type SourceRecord } from '../src/index.js';
import { ConsumerLedger, type ConsumerGuarantee, type StartingPoint } from '../src/testing/consumer-checks.js';
import { consumerReplayCommand, consumerShapeOf, simulateConsumers, VIRTUAL_EPOCH_MS } from '../src/testing/index.js';

const GROUP = 'ledger';

/** A ledger over a real MemoryStorage, with a hand-moved clock, collecting what it reports. */
function ledgerWorld(start: StartingPoint = { kind: 'TRIM_HORIZON' }) {
  let now = 0;
  const violations: Array<{ guarantee: ConsumerGuarantee; detail: string }> = [];
  const ledger = new ConsumerLedger({
    start,
    now: () => now,
    wallOf: (ms) => VIRTUAL_EPOCH_MS + ms,
    violate: (guarantee, detail) => violations.push({ guarantee, detail }),
  });
  const storage = new MemoryStorage({ onWrite: (event) => ledger.onWrite(event) });
  let position = 0;
  const put = (partitionKey: string, shardId: string) => {
    const entry = ledger.addRecord(partitionKey, shardId, String(++position), VIRTUAL_EPOCH_MS + now);
    return { position: entry.position, partitionKey, data: new Uint8Array() } satisfies SourceRecord;
  };
  const at = (ms: number): void => {
    now = ms;
  };
  /** Creates a lease (at TRIM_HORIZON, as shard sync would) and takes it for `owner`, returning its tenure (epoch) and version. */
  const take = async (leaseKey: string, owner: string, parentKeys: string[] = []) => {
    const created = await storage.createLease({ group: GROUP, leaseKey, parentKeys, checkpoint: Checkpoint.TRIM_HORIZON });
    const current = created.status === 'applied' ? created.record : await storage.getLease(GROUP, leaseKey);
    if (!current) throw new Error(`no lease ${leaseKey}`);
    const [taken] = await storage.updateLeases(GROUP, [
      { leaseKey, expectedVersion: current.version, next: { ...current, owner, epoch: current.epoch + 1 } },
    ]);
    if (taken?.status !== 'applied') throw new Error(`could not take ${leaseKey}`);
    return taken.record;
  };
  const checkpoint = async (leaseKey: string, position: string) => {
    const current = await storage.getLease(GROUP, leaseKey);
    if (!current) throw new Error(`no lease ${leaseKey}`);
    const [written] = await storage.updateLeases(GROUP, [{ leaseKey, expectedVersion: current.version, next: { ...current, checkpoint: position } }]);
    return written;
  };
  return { ledger, storage, violations, put, at, take, checkpoint };
}

describe('the consumer simulation ledger', () => {
  it('reports a record first handed over after a later record of its key, once per key and pair of shards, and lets replays be', async () => {
    const { ledger, violations, put, take, checkpoint } = ledgerWorld();
    ledger.addShard('parent', [], false);
    ledger.addShard('child', ['parent'], true);
    const early = [put('k', 'parent'), put('k', 'parent')];
    const late = put('k', 'child');
    ledger.handOver('parent', 1, [early[0] as SourceRecord], 'w1');
    ledger.handOver('parent', 1, [early[0] as SourceRecord], 'w1');
    ledger.succeeded('parent', [early[0] as SourceRecord], 'w1');
    expect(violations).toEqual([]);
    // The parent's lease says it ended, though a record of it was never handed over: the checkpoint skips
    // it, and per-key order tells.
    await take('parent', 'w1');
    await checkpoint('parent', Checkpoint.SHARD_END);
    ledger.handOver('child', 1, [late], 'w2');
    ledger.handOver('parent', 2, [early[1] as SourceRecord], 'w1');
    ledger.handOver('parent', 2, [early[1] as SourceRecord], 'w1');
    expect(violations).toEqual([
      { guarantee: 'skip', detail: 'checkpoint SHARD_END of parent (owner w1, epoch 1) passes record k#2 at 2, which was never handed over and neither succeeded nor given up' },
      { guarantee: 'order', detail: expect.stringMatching(/^record k#2 \(parent at 2\) was first handed over by w1 after k#3 \(child at 3/) as string },
    ]);
  });

  it('reports a child handed over before a parent reached SHARD_END, once, and not after the parent ended or left the stream', async () => {
    const { ledger, violations, put, take, checkpoint } = ledgerWorld();
    ledger.addShard('a', [], false);
    ledger.addShard('b', [], false);
    ledger.addShard('child', ['a', 'b'], true);
    await take('a', 'w1');
    await checkpoint('a', Checkpoint.SHARD_END);
    ledger.closeShard('b');
    const record = put('k', 'child');
    ledger.handOver('child', 1, [record], 'w2');
    ledger.handOver('child', 1, [record], 'w2');
    ledger.trimShard('b');
    ledger.handOver('child', 1, [record], 'w2');
    expect(violations).toEqual([{ guarantee: 'order', detail: 'w2 handed over records of child before its parent b reached SHARD_END (lease never created)' }]);
  });

  it('owes every record with TRIM_HORIZON, except those of a shard trimmed before anyone read them', () => {
    const { ledger, put, at } = ledgerWorld();
    ledger.addShard('s0', [], false);
    ledger.addShard('s1', [], false);
    const read = put('a', 's0');
    put('b', 's1');
    ledger.handOver('s0', 1, [read], 'w1');
    at(10);
    ledger.closeShard('s0');
    ledger.closeShard('s1');
    ledger.trimShard('s0');
    ledger.trimShard('s1');
    expect(ledger.records.map((entry) => ledger.required(entry))).toEqual([true, false]);
  });

  it('with LATEST owes what arrived from the birth on (the earliest AT_TIMESTAMP a created lease carried), and all of a later child', async () => {
    const { ledger, storage, put, at } = ledgerWorld({ kind: 'LATEST' });
    ledger.addShard('s0', [], false);
    put('a', 's0');
    at(1_000);
    put('a', 's0');
    at(2_000);
    await storage.createLease({ group: GROUP, leaseKey: 's0', checkpoint: Checkpoint.atTimestamp(VIRTUAL_EPOCH_MS + 1_000) });
    expect(ledger.birthWallMs).toBe(VIRTUAL_EPOCH_MS + 1_000);
    at(3_000);
    ledger.closeShard('s0');
    ledger.addShard('s1', ['s0'], true);
    put('a', 's1');
    expect(ledger.records.map((entry) => ledger.required(entry))).toEqual([false, true, true]);
    expect([...ledger.owed().keys()]).toEqual(['s0', 's1']);
  });

  it('with LATEST and no timestamp in any lease, dates the birth at the first lease creation', async () => {
    const { ledger, storage, at } = ledgerWorld({ kind: 'LATEST' });
    ledger.addShard('s0', [], false);
    at(500);
    await storage.createLease({ group: GROUP, leaseKey: 's0' });
    at(900);
    await storage.createLease({ group: GROUP, leaseKey: 's1' });
    expect(ledger.birthWallMs).toBe(VIRTUAL_EPOCH_MS + 500);
  });

  it('reports a lease created again after it reached SHARD_END or was deleted, and a SHARD_END that moves back', async () => {
    const { ledger, storage, violations, take, checkpoint } = ledgerWorld();
    ledger.addShard('s0', [], false);
    ledger.addShard('s1', [], false);
    await take('s0', 'w1');
    await checkpoint('s0', Checkpoint.SHARD_END);
    await checkpoint('s0', Checkpoint.TRIM_HORIZON);
    await take('s1', 'w1');
    await checkpoint('s1', Checkpoint.SHARD_END);
    const finished = await storage.getLease(GROUP, 's1');
    await storage.deleteLease(GROUP, 's1', finished?.version ?? 0);
    await storage.createLease({ group: GROUP, leaseKey: 's1', checkpoint: Checkpoint.TRIM_HORIZON }, { recreate: true });
    expect(violations).toEqual([
      { guarantee: 'resurrection', detail: 'SHARD_END checkpoint of s0 moved back to TRIM_HORIZON (owner w1)' },
      { guarantee: 'resurrection', detail: 'lease of s1 created again (checkpoint TRIM_HORIZON, version 4) after it reached SHARD_END' },
    ]);
  });

  it('reports the deletion of a lease whose shard neither ended nor left the stream, and allows it once the shard is trimmed', async () => {
    const { ledger, storage, violations, take, at } = ledgerWorld();
    ledger.addShard('live', [], false);
    ledger.addShard('gone', [], false);
    const live = await take('live', 'w1');
    const gone = await take('gone', 'w1');
    at(10);
    ledger.closeShard('gone');
    ledger.trimShard('gone');
    await storage.deleteLease(GROUP, 'gone', gone.version);
    await storage.deleteLease(GROUP, 'live', live.version);
    expect(violations).toEqual([
      { guarantee: 'deletion', detail: 'lease of live deleted at checkpoint TRIM_HORIZON (owner w1, version 2) though the shard neither ended nor left the stream' },
    ]);
  });

  it('reports a checkpoint written in a tenure that never handed its records over, and an acknowledged checkpoint that is lost', async () => {
    const { ledger, storage, violations, put, take, checkpoint } = ledgerWorld();
    ledger.addShard('s0', [], false);
    const records = [put('k', 's0'), put('k', 's0')];
    const first = await take('s0', 'w1');
    ledger.handOver('s0', first.epoch, [records[0] as SourceRecord], 'w1');
    ledger.succeeded('s0', [records[0] as SourceRecord], 'w1');
    await checkpoint('s0', '1');
    ledger.acknowledged('s0', '1');
    expect(violations).toEqual([]);
    // The same worker takes the lease again; a checkpoint of the earlier tenure's batch lands in the new one.
    const second = await take('s0', 'w1');
    await checkpoint('s0', '1');
    await checkpoint('s0', '2');
    expect(violations).toEqual([
      { guarantee: 'fencing', detail: `checkpoint 2 of s0 written in tenure ${second.epoch} of w1, which started at 1 and had handed over nothing` },
      { guarantee: 'skip', detail: `checkpoint 2 of s0 (owner w1, epoch ${second.epoch}) passes record k#2 at 2, which was never handed over and neither succeeded nor given up` },
    ]);
    const current = await storage.getLease(GROUP, 's0');
    await storage.updateLeases(GROUP, [{ leaseKey: 's0', expectedVersion: current?.version ?? 0, next: { ...(current as NonNullable<typeof current>), checkpoint: null } }]);
    expect(violations.slice(2).map((violation) => violation.detail)).toEqual([
      'checkpoint of s0 moved back from 2 to null (owner w1)',
      `acknowledged checkpoint 1 of s0 lost: stored null (version ${(current?.version ?? 0) + 1})`,
    ]);
  });

  it('lets a tenure that starts at a timestamp checkpoint what arrived before it, even after it began, which it never hands over', async () => {
    const { ledger, storage, violations, put, at, checkpoint } = ledgerWorld({ kind: 'AT_TIMESTAMP', timestampMs: VIRTUAL_EPOCH_MS + 2_000 });
    ledger.addShard('s0', [], false);
    put('k', 's0');
    at(1_000);
    await storage.createLease({ group: GROUP, leaseKey: 's0', checkpoint: Checkpoint.atTimestamp(VIRTUAL_EPOCH_MS + 2_000) });
    const created = await storage.getLease(GROUP, 's0');
    await storage.updateLeases(GROUP, [{ leaseKey: 's0', expectedVersion: created?.version ?? 0, next: { ...(created as NonNullable<typeof created>), owner: 'w1', epoch: 1 } }]);
    at(1_500);
    put('k', 's0');
    await checkpoint('s0', '2');
    expect(violations).toEqual([]);
    at(2_500);
    put('k', 's0');
    await checkpoint('s0', '3');
    expect(violations.map((violation) => violation.detail)).toEqual([
      'checkpoint 3 of s0 written in tenure 1 of w1, which started at 2 and had handed over nothing',
      'checkpoint 3 of s0 (owner w1, epoch 1) passes record k#3 at 3, which was never handed over and neither succeeded nor given up',
    ]);
  });
});

describe('the consumer simulation ledger, on records given up', () => {
  it('reports a checkpoint past a record handed over that neither succeeded nor was given up, and lets dead-lettered and skipped records be passed', async () => {
    const { ledger, violations, put, take, checkpoint } = ledgerWorld();
    ledger.addShard('s0', [], false);
    const records = [put('k', 's0'), put('k', 's0'), put('k', 's0'), put('k', 's0')];
    const lease = await take('s0', 'w1');
    ledger.handOver('s0', lease.epoch, records, 'w1');
    ledger.succeeded('s0', records.slice(0, 1), 'w1');
    ledger.deadLettered('s0', ['2'], 'w1');
    ledger.skipped('s0', '3', false, 'w1');
    await checkpoint('s0', '3');
    expect(violations).toEqual([]);
    await checkpoint('s0', '4');
    ledger.checkHandled();
    expect(violations).toEqual([
      { guarantee: 'skip', detail: 'checkpoint 4 of s0 (owner w1, epoch 1) passes record k#4 at 4, which was handed over 1 times and neither succeeded nor given up' },
      { guarantee: 'handled', detail: '1 records of s0 were handed over but neither succeeded nor were given up (first: k#4 at 4, handed over 1 times); lease owner w1 epoch 1 checkpoint 4 parents []' },
    ]);
  });

  it('with a dead-letter handler configured, reports a record skipped that it never accepted, and a poison record claimed done', () => {
    let now = 0;
    const violations: Array<{ guarantee: ConsumerGuarantee; detail: string }> = [];
    const ledger = new ConsumerLedger({
      start: { kind: 'TRIM_HORIZON' },
      now: () => now++,
      wallOf: (ms) => VIRTUAL_EPOCH_MS + ms,
      violate: (guarantee, detail) => violations.push({ guarantee, detail }),
      deadLetterConfigured: true,
    });
    ledger.addShard('s0', [], false);
    const poison = ledger.addRecord('k', 's0', '1', VIRTUAL_EPOCH_MS, true);
    const other = ledger.addRecord('k', 's0', '2', VIRTUAL_EPOCH_MS);
    const asRecord = (entry: typeof poison): SourceRecord => ({ position: entry.position, partitionKey: entry.partitionKey, data: new Uint8Array() });
    ledger.handOver('s0', 1, [asRecord(poison), asRecord(other)], 'w1');
    ledger.deadLettered('s0', ['1'], 'w1');
    ledger.skipped('s0', '1', true, 'w1');
    ledger.skipped('s0', '2', true, 'w1');
    ledger.succeeded('s0', [asRecord(poison)], 'w1');
    expect(violations).toEqual([
      { guarantee: 'skip', detail: 'w1 skipped record k#2 of s0 at 2 without the dead-letter handler accepting it' },
      { guarantee: 'handled', detail: "w1's handler of s0 claimed poison record k#1 at 1 done" },
    ]);
  });
});

describe('the consumer simulation ledger, in a multi-stream group', () => {
  /** Two streams, `a` and `b`, each with a shard `shard-0000` and its own positions from 1. */
  function streamsLedger(startOfB: StartingPoint = { kind: 'TRIM_HORIZON' }, graceMs = 10_000) {
    let now = 0;
    const violations: Array<{ guarantee: ConsumerGuarantee; detail: string }> = [];
    const ledger = new ConsumerLedger({
      start: { kind: 'TRIM_HORIZON' },
      now: () => now,
      wallOf: (ms) => VIRTUAL_EPOCH_MS + ms,
      violate: (guarantee, detail) => violations.push({ guarantee, detail }),
      removedStreamGraceMs: graceMs,
    });
    ledger.addStream('a', { kind: 'TRIM_HORIZON' });
    ledger.addStream('b', startOfB);
    ledger.addShard('a:shard-0000', [], false, 'a');
    ledger.addShard('b:shard-0000', [], false, 'b');
    const storage = new MemoryStorage({ onWrite: (event) => ledger.onWrite(event) });
    const positions = new Map<string, number>();
    const encoder = new TextEncoder();
    const put = (shardId: string, partitionKey = 'k') => {
      const stream = shardId.slice(0, shardId.indexOf(':'));
      const position = String((positions.get(stream) ?? 0) + 1);
      positions.set(stream, Number(position));
      const entry = ledger.addRecord(`${stream}/${partitionKey}`, shardId, position, VIRTUAL_EPOCH_MS + now);
      return { position, partitionKey, data: encoder.encode(String(entry.index)) } satisfies SourceRecord;
    };
    const at = (ms: number): void => {
      now = ms;
    };
    return { ledger, storage, violations, put, at };
  }

  it('finds records by their stream and position, and keeps order per stream and key', () => {
    const { ledger, violations, put } = streamsLedger();
    const [a1, a2] = [put('a:shard-0000'), put('a:shard-0000')];
    const b1 = put('b:shard-0000');
    expect(ledger.recordAt('b:shard-0000', '1')?.shardId).toBe('b:shard-0000');
    // Key k of stream b is not key k of stream a: b's first record after a's second breaks no order.
    ledger.handOver('a:shard-0000', 1, [a1, a2], 'w1');
    ledger.handOver('b:shard-0000', 1, [b1], 'w1');
    expect(violations).toEqual([]);
    // A record of stream b handed over as the record at the same position of stream a tells.
    ledger.handOver('a:shard-0000', 1, [{ ...b1 }], 'w1');
    expect(violations).toEqual([{ guarantee: 'streams', detail: 'w1 handed over record b/k#1 of b:shard-0000 as the record at 1 of a:shard-0000' }]);
  });

  it("reports a lease of no stream, parents that are not the shard's, and a lease created at another position than its stream's start", async () => {
    const { ledger, storage, violations } = streamsLedger({ kind: 'LATEST' });
    ledger.addShard('b:shard-0001', ['b:shard-0000'], true, 'b');
    await storage.createLease({ group: GROUP, leaseKey: 'shard-0000', checkpoint: Checkpoint.TRIM_HORIZON });
    await storage.createLease({ group: GROUP, leaseKey: 'a:shard-0000', checkpoint: Checkpoint.TRIM_HORIZON, parentKeys: ['b:shard-0000'] });
    await storage.createLease({ group: GROUP, leaseKey: 'b:shard-0000', checkpoint: Checkpoint.TRIM_HORIZON });
    // A child of resharding may start at its own beginning.
    await storage.createLease({ group: GROUP, leaseKey: 'b:shard-0001', checkpoint: Checkpoint.TRIM_HORIZON, parentKeys: ['b:shard-0000'] });
    expect(violations).toEqual([
      { guarantee: 'streams', detail: 'lease shard-0000 created (parents []), which names no shard of any stream of the group' },
      { guarantee: 'streams', detail: "lease of a:shard-0000 created with parents [b:shard-0000], but the shard's parents are []" },
      { guarantee: 'start', detail: 'lease of b:shard-0000 created at TRIM_HORIZON, though stream b starts at LATEST' },
    ]);
  });

  it('with LATEST, reports a second pin of one stream, and owes each stream from its own birth', async () => {
    const { ledger, storage, violations, put, at } = streamsLedger({ kind: 'LATEST' });
    ledger.addShard('b:shard-0001', [], false, 'b');
    put('b:shard-0000');
    at(1_000);
    await storage.createLease({ group: GROUP, leaseKey: 'b:shard-0000', checkpoint: Checkpoint.atTimestamp(VIRTUAL_EPOCH_MS + 1_000) });
    const later = put('b:shard-0000');
    await storage.createLease({ group: GROUP, leaseKey: 'b:shard-0001', checkpoint: Checkpoint.atTimestamp(VIRTUAL_EPOCH_MS + 2_000) });
    expect(ledger.birthWallMsOf('b')).toBe(VIRTUAL_EPOCH_MS + 1_000);
    expect(ledger.birthWallMsOf('a')).toBeNull();
    expect(ledger.records.map((entry) => ledger.required(entry))).toEqual([false, true]);
    expect(later.position).toBe('2');
    expect(violations).toEqual([
      { guarantee: 'start', detail: `lease of b:shard-0001 created at AT_TIMESTAMP:${VIRTUAL_EPOCH_MS + 2_000}, though stream b starts at LATEST, pinned at AT_TIMESTAMP:${VIRTUAL_EPOCH_MS + 1_000}` },
    ]);
  });

  it("deletes a removed stream's live leases only after the grace, never a listed stream's, and owes nothing of a stream removed for good", async () => {
    const { ledger, storage, violations, put, at } = streamsLedger();
    const created = async (leaseKey: string) => {
      const outcome = await storage.createLease({ group: GROUP, leaseKey, checkpoint: Checkpoint.TRIM_HORIZON });
      return outcome.status === 'applied' ? outcome.record.version : 0;
    };
    const a = await created('a:shard-0000');
    const b = await created('b:shard-0000');
    put('b:shard-0000');
    ledger.listStream('b', false);
    at(9_999);
    expect([...ledger.owed().keys()]).toEqual(['b:shard-0000']);
    await storage.deleteLease(GROUP, 'b:shard-0000', b);
    ledger.listStream('b', true);
    at(20_000);
    ledger.listStream('b', false, true);
    expect([...ledger.owed().keys()]).toEqual([]);
    expect(ledger.leasesOf('a').map((lease) => lease.leaseKey)).toEqual(['a:shard-0000']);
    await storage.deleteLease(GROUP, 'a:shard-0000', a);
    expect(violations).toEqual([
      { guarantee: 'removed-stream', detail: 'lease of b:shard-0000 deleted at checkpoint TRIM_HORIZON (owner null, version 1) 9999 ms after its stream left the list, within the grace of 10000 ms' },
      { guarantee: 'deletion', detail: 'lease of a:shard-0000 deleted at checkpoint TRIM_HORIZON (owner null, version 1) though the shard neither ended nor left the stream, and its stream is listed' },
    ]);
  });
});

describe('MemoryStorage.repair', () => {
  it('makes a corrupt lease read back with every field it had, at the version the damage left, and refuses a lease that is not corrupt', async () => {
    const storage = new MemoryStorage();
    const created = await storage.createLease({ group: GROUP, leaseKey: 's0', checkpoint: '7' });
    const { version } = storage.corrupt(GROUP, 's0');
    await expect(storage.getLease(GROUP, 's0')).rejects.toBeInstanceOf(CorruptRecordError);
    storage.repair(GROUP, 's0');
    expect(await storage.getLease(GROUP, 's0')).toEqual(created.status === 'applied' ? { ...created.record, version } : undefined);
    expect(() => storage.repair(GROUP, 's0')).toThrow('[memory-storage] group "ledger" has no corrupt lease "s0" to repair');
  });
});

describe('the consumer simulation', () => {
  it('replays a seed exactly: the same seed gives the same run', async () => {
    const [a, b] = [await simulateConsumers({ seed: 7 }), await simulateConsumers({ seed: 7 })];
    expect(b).toEqual(a);
    expect(a.stats.batches).toBeGreaterThan(0);
  });

  it('runs real consumers through at least three generations of resharding and a few hundred records', async () => {
    for (const seed of [1, 2, 3]) {
      const { stats } = await simulateConsumers({ seed, multiStream: false });
      expect(stats.generations).toBeGreaterThanOrEqual(3);
      expect(stats.records).toBeGreaterThanOrEqual(100);
      expect(stats.records).toBeLessThan(300);
      expect(stats.delivered).toBeGreaterThan(0);
    }
  });

  it('draws 2-5 workers, 1-4 shards, every initial position and every checkpointing policy from seeds', () => {
    const shapes = Array.from({ length: 1000 }, (_, i) => consumerShapeOf(i + 1));
    expect(new Set(shapes.map((shape) => shape.workers))).toEqual(new Set([2, 3, 4, 5]));
    expect(new Set(shapes.map((shape) => shape.shards))).toEqual(new Set([1, 2, 3, 4]));
    expect(new Set(shapes.map((shape) => shape.initialPosition))).toEqual(new Set(['TRIM_HORIZON', 'LATEST', 'AT_TIMESTAMP']));
    const policies = new Set(shapes.map((shape) => (typeof shape.checkpointing === 'string' ? shape.checkpointing : Object.keys(shape.checkpointing).join())));
    expect(policies).toEqual(new Set(['batch', 'manual', 'everyRecords', 'everyMs']));
    expect(shapes.filter((shape) => shape.listLagMs > 0).length).toBeGreaterThan(500);
  });

  it('draws the retry, skip and poison failure policies, poison ones with and without bisection, record age and a dead-letter handler', () => {
    const policies = Array.from({ length: 1000 }, (_, i) => consumerShapeOf(i + 1).onHandlerError);
    expect(new Set(policies.map((policy) => (typeof policy === 'string' ? policy : 'poison')))).toEqual(new Set(['retry', 'skip', 'poison']));
    const poison = policies.filter((policy) => typeof policy === 'object');
    expect(poison.length).toBeGreaterThan(150);
    expect(new Set(poison.map((policy) => policy.bisect))).toEqual(new Set([true, false]));
    expect(new Set(poison.map((policy) => policy.deadLetter))).toEqual(new Set([true, false]));
    expect(new Set(poison.map((policy) => policy.maxRecordAgeMs === undefined))).toEqual(new Set([true, false]));
    expect(new Set(poison.map((policy) => policy.maxAttempts))).toEqual(new Set([2, 3, 4]));
  });

  it('a poison run gives every poison record up: dead-lettered with a dead-letter handler, skipped by policy without one', async () => {
    const withHandler = await simulateConsumers({ seed: 15 });
    expect(withHandler.shape.onHandlerError).toMatchObject({ deadLetter: true });
    expect(withHandler.violations).toEqual([]);
    expect(withHandler.stats.poison).toBeGreaterThan(0);
    expect(withHandler.stats.deadLettered).toBeGreaterThanOrEqual(withHandler.stats.poison);
    expect(withHandler.stats.skipped).toBe(withHandler.stats.deadLettered);
    const withoutHandler = await simulateConsumers({ seed: 9 });
    expect(withoutHandler.shape.onHandlerError).toMatchObject({ deadLetter: false });
    expect(withoutHandler.violations).toEqual([]);
    expect(withoutHandler.stats.poison).toBeGreaterThan(0);
    expect(withoutHandler.stats.deadLettered).toBe(0);
    expect(withoutHandler.stats.skipped).toBeGreaterThanOrEqual(withoutHandler.stats.poison);
  });

  it('draws a multi-stream group for a third of the seeds: 2-3 streams, each kind of life, own initial positions, listing faults', () => {
    const shapes = Array.from({ length: 1000 }, (_, i) => consumerShapeOf(i + 1).multiStream);
    const multi = shapes.filter((shape) => shape !== null);
    expect(multi.length).toBeGreaterThan(280);
    expect(multi.length).toBeLessThan(390);
    expect(new Set(multi.map((shape) => shape.streams.length))).toEqual(new Set([2, 3]));
    const streams = multi.flatMap((shape) => shape.streams);
    expect(new Set(streams.map((stream) => stream.life))).toEqual(new Set(['always', 'added', 'bounced', 'removed']));
    // The first stream is listed all along, and every run changes its list.
    expect(multi.every((shape) => shape.streams[0]?.life === 'always' && shape.streams.some((stream) => stream.life !== 'always'))).toBe(true);
    expect(new Set(streams.map((stream) => stream.initialPosition))).toEqual(new Set([null, 'TRIM_HORIZON', 'LATEST', 'AT_TIMESTAMP']));
    expect(multi.filter((shape) => shape.streams.some((stream) => stream.listingFault)).length).toBeGreaterThan(100);
    expect(multi.every((shape) => shape.removedStreamGraceMs < 20_000)).toBe(true);
    // Only the multi-stream third changed: the other seeds draw what they drew before.
    expect(consumerShapeOf(1)).toMatchObject({ workers: 5, shards: 4, initialPosition: 'AT_TIMESTAMP', reshards: 4, multiStream: null });
  });

  it('runs a multi-stream group on every seed when asked: every stream read, keys that name their stream, nothing broken', async () => {
    for (const seed of [1, 2, 3]) {
      const { shape, stats, violations } = await simulateConsumers({ seed, multiStream: true });
      expect(violations).toEqual([]);
      expect(stats.streams).toBe(shape.multiStream?.streams.length);
      expect(stats.streams).toBeGreaterThanOrEqual(2);
      expect(stats.delivered).toBeGreaterThan(0);
      expect(stats.delivered).toBe(stats.owed);
    }
  });

  it('names the command that replays a run, with its overrides and unsafe switches', () => {
    expect(consumerReplayCommand({ seed: 12 })).toBe('pnpm sim --consumer --seed 12 --trace');
    expect(consumerReplayCommand({ seed: 12, multiStream: true })).toBe('pnpm sim --consumer --seed 12 --multi-stream --trace');
    expect(consumerReplayCommand({ seed: 12, multiStream: false, unsafe: { crossStreamSync: true } })).toBe(
      'pnpm sim --consumer --seed 12 --single-stream --unsafe-cross-stream-sync --trace',
    );
    expect(consumerReplayCommand({ seed: 12, exactlyOnce: true })).toBe('pnpm sim --consumer --seed 12 --exactly-once --trace');
    expect(consumerReplayCommand({ seed: 12, workers: 3, initialPosition: 'LATEST', unsafe: { keepFailedPump: true, birthRace: true } })).toBe(
      'pnpm sim --consumer --seed 12 --workers 3 --initial-position LATEST --unsafe-birth-race --unsafe-keep-failed-pump --trace',
    );
  });
});
