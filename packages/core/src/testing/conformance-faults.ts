/**
 * The conformance suite's rules on cut and broken connections, the group "lost connections" (needs the
 * target's `faults` hook).
 */
import assert from 'node:assert/strict';
import { LeaseholdError } from '../errors.js';
import { limits } from '../validation.js';
import { leaderStateOf, leaseStateOf, memberStateOf, RECORD_FORMAT } from '../storage.js';
import type { DeleteResult, LeaseRecord, MemberRecord, MemberState, Storage, WriteResult } from '../storage.js';
import type { TcpProxy } from './tcp-proxy.js';
import {
  applied,
  byKey,
  byWorker,
  createMany,
  define,
  join,
  listed,
  memberOfRoster,
  members,
  memberState,
  plain,
  proxied,
  settles,
  show,
  type BreakableFaults,
  type ConformanceTarget,
  type Context,
  type TestApi,
} from './conformance-kit.js';

/**
 * Fifty leases of a fresh group checkpointed in one batch through `client`, whose connection the proxy
 * cuts once the backend answers: the leases before, how the call settled, and the leases stored after.
 */
async function cutBatch(
  proxy: TcpProxy,
  client: Storage,
  direct: Storage,
  g: string,
): Promise<{ before: LeaseRecord[]; settled: { value: WriteResult<LeaseRecord>[] } | { thrown: unknown }; stored: Map<string, LeaseRecord> }> {
  const keys = Array.from({ length: 50 }, (_, i) => `k${i}`);
  await createMany(direct, g, keys, () => ({ owner: 'w', epoch: 1 }));
  const before = await listed(direct, g);
  await client.getLease(g, 'k0');
  const updates = before.map((lease) => ({ leaseKey: lease.leaseKey, expectedVersion: lease.version, next: { ...leaseStateOf(lease), checkpoint: `cp-${lease.leaseKey}` } }));
  let cut = false;
  const armed = proxy.cutOnResponse().then(() => {
    cut = true;
  });
  const settled = await settles(client.updateLeases(g, updates), 'updateLeases');
  await Promise.race([armed, new Promise((resolve) => setTimeout(resolve, 50))]);
  proxy.disarm();
  assert.ok(cut, `the batch returned without the backend answering it (${show(settled)})`);
  return { before, settled, stored: byKey(await listed(direct, g)) };
}

function isUnavailable(error: unknown): boolean {
  return error instanceof LeaseholdError && error.code === 'ERR_STORAGE_UNAVAILABLE';
}

/**
 * Runs a write on `client` while the proxy cuts the connection once the backend answers it, and checks
 * the outcome against what `read` (on a direct client) says is stored: the write is `unknown` (with a
 * typed error) or `applied` exactly as stored; never a conflict; thrown only as a `StorageUnavailableError`
 * when nothing was written.
 */
async function cutWrite<R extends { status: string }, S>(
  proxy: TcpProxy,
  write: () => Promise<R>,
  read: () => Promise<S>,
  expect: { before: S; written: (outcome: R | undefined) => S; what: string },
): Promise<void> {
  let cut = false;
  const armed = proxy.cutOnResponse().then(() => {
    cut = true;
  });
  const settled = await settles(write(), expect.what);
  await Promise.race([armed, new Promise((resolve) => setTimeout(resolve, 50))]);
  proxy.disarm();
  assert.ok(cut, `${expect.what}: the call returned without the backend answering it (${show(settled)})`);
  const stored = plain(await read());
  const wasWritten = show(stored) !== show(plain(expect.before));
  if ('thrown' in settled) {
    assert.ok(!wasWritten, `${expect.what}: threw ${show(settled.thrown)} although the write reached the backend and applied; a write that may have reached the backend must return unknown`);
    assert.ok(isUnavailable(settled.thrown), `${expect.what}: a call that sent nothing may throw only a StorageUnavailableError, got ${show(settled.thrown)}`);
    return;
  }
  const outcome = settled.value;
  if (outcome.status === 'unknown') {
    const error = (outcome as unknown as { error?: unknown }).error;
    assert.ok(error instanceof LeaseholdError, `${expect.what}: an unknown outcome carries a LeaseholdError, got ${show(error)}`);
  } else {
    assert.equal(outcome.status, 'applied', `${expect.what}: a write cut after the backend received it is unknown (or applied, if the adapter proved it), got ${show(outcome)}`);
    assert.deepEqual(stored, plain(expect.written(outcome)), `${expect.what}: an applied outcome is what is stored`);
  }
  if (wasWritten) assert.deepEqual(stored, plain(expect.written(outcome.status === 'applied' ? outcome : undefined)), `${expect.what}: the write is stored whole or not at all`);
}

/**
 * Runs a member write on `client` while the proxy cuts the connection once the backend answers it, and
 * checks the outcome against the member `read` (on a direct client) finds: `unknown` (with a typed error)
 * or `applied` exactly as stored; never a conflict; thrown only as a `StorageUnavailableError` when
 * nothing was written. `next` is the state a put writes (with a version above the one before), `null` for
 * a remove.
 */
async function cutMemberWrite(
  proxy: TcpProxy,
  write: () => Promise<WriteResult<MemberRecord> | DeleteResult<MemberRecord>>,
  read: () => Promise<MemberRecord | null>,
  expect: { before: MemberRecord | null; next: MemberState | null; what: string },
): Promise<void> {
  let cut = false;
  const armed = proxy.cutOnResponse().then(() => {
    cut = true;
  });
  const settled = await settles(write(), expect.what);
  await Promise.race([armed, new Promise((resolve) => setTimeout(resolve, 50))]);
  proxy.disarm();
  assert.ok(cut, `${expect.what}: the call returned without the backend answering it (${show(settled)})`);
  const stored = await read();
  const wasWritten = show(plain(stored)) !== show(plain(expect.before));
  if ('thrown' in settled) {
    assert.ok(!wasWritten, `${expect.what}: threw ${show(settled.thrown)} although the write reached the backend and applied; a write that may have reached the backend must return unknown`);
    assert.ok(isUnavailable(settled.thrown), `${expect.what}: a call that sent nothing may throw only a StorageUnavailableError, got ${show(settled.thrown)}`);
    return;
  }
  const outcome = settled.value;
  if (outcome.status === 'unknown') {
    assert.ok(outcome.error instanceof LeaseholdError, `${expect.what}: an unknown outcome carries a LeaseholdError, got ${show(outcome.error)}`);
  } else {
    assert.equal(outcome.status, 'applied', `${expect.what}: a write cut after the backend received it is unknown (or applied, if the adapter proved it), got ${show(outcome)}`);
    if ('record' in outcome) assert.deepEqual(plain(stored), plain(outcome.record), `${expect.what}: an applied outcome is what is stored`);
    else assert.equal(stored, null, `${expect.what}: an applied remove removed the member`);
  }
  if (!wasWritten) return;
  if (expect.next === null) {
    assert.equal(stored, null, `${expect.what}: the member is removed or left as it was`);
  } else {
    assert.ok(stored !== null && stored.version > (expect.before?.version ?? 0), `${expect.what}: a written member has a new version, got ${show(stored)}`);
    assert.deepEqual(plain(memberStateOf(stored)), plain(expect.next), `${expect.what}: the member is written whole or not at all`);
  }
}

async function assertRecovers(client: Storage, direct: Storage, group: string, leaseKey: string): Promise<void> {
  const settled = await settles(client.getLease(group, leaseKey), 'a read after the cut');
  assert.ok('value' in settled, `the client works again after a cut connection: a read threw ${show(settled)}`);
  assert.deepEqual(plain(settled.value), plain(await direct.getLease(group, leaseKey)), 'the client works again after a cut connection');
}

/**
 * Lost connections: a write whose connection is cut after the backend received it is `unknown`, never
 * thrown nor guessed; a cut read throws a `StorageUnavailableError` or returns the exact answer, never
 * part of it. Needs the target's `faults` hook.
 */
export function faultContract(t: TestApi, target: ConformanceTarget): void {
  t.describe(`${target.name}: lost connections`, () => {
    define(t, target, 'a create whose connection is cut after the backend received it is unknown, never thrown nor a conflict, and the client works again', async (context) => {
      const { proxy, client, direct } = await proxied(target, context);
      const g = context.group();
      await client.getLease(g, 'warm-up');
      await cutWrite(proxy, () => client.createLease({ group: g, leaseKey: 'k', owner: 'w', epoch: 1 }), () => direct.getLease(g, 'k'), {
        before: null,
        written: (outcome) => outcome?.status === 'applied' ? outcome.record : { format: RECORD_FORMAT, owner: 'w', epoch: 1, checkpoint: null, parentKeys: [], incarnation: null, metadata: {}, group: g, leaseKey: 'k', version: 1 },
        what: 'createLease',
      });
      await assertRecovers(client, direct, g, 'k');
    });

    define(t, target, 'an update whose connection is cut after the backend received it is unknown, never thrown nor a conflict, and the client works again', async (context) => {
      const { proxy, client, direct } = await proxied(target, context);
      const g = context.group();
      const lease = applied(await direct.createLease({ group: g, leaseKey: 'k', owner: 'w', epoch: 1 }), 'create');
      await client.getLease(g, 'k');
      const next = { ...leaseStateOf(lease), checkpoint: '77' };
      await cutWrite(proxy, async () => (await client.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next }]))[0] as WriteResult<LeaseRecord>, () => direct.getLease(g, 'k'), {
        before: lease,
        written: (outcome) => outcome?.status === 'applied' ? outcome.record : { ...next, group: g, leaseKey: 'k', version: lease.version + 1 },
        what: 'updateLeases',
      });
      await assertRecovers(client, direct, g, 'k');
    });

    define(t, target, 'a delete whose connection is cut after the backend received it is unknown, never thrown nor a conflict, and the client works again', async (context) => {
      const { proxy, client, direct } = await proxied(target, context);
      const g = context.group();
      const lease = applied(await direct.createLease({ group: g, leaseKey: 'k', owner: 'w', epoch: 1 }), 'create');
      await client.getLease(g, 'k');
      await cutWrite(proxy, () => client.deleteLease(g, 'k', lease.version), () => direct.getLease(g, 'k'), {
        before: lease,
        written: () => null,
        what: 'deleteLease',
      });
      await assertRecovers(client, direct, g, 'k');
    });

    define(t, target, 'a leader create or update whose connection is cut after the backend received it is unknown, never thrown nor a conflict', async (context) => {
      const { proxy, client, direct } = await proxied(target, context);
      const g = context.group();
      await client.getLeader(g);
      await cutWrite(proxy, () => client.createLeader({ group: g, holder: 'w', term: 1 }), () => direct.getLeader(g), {
        before: null,
        written: (outcome) => outcome?.status === 'applied' ? outcome.record : { format: RECORD_FORMAT, holder: 'w', term: 1, metadata: {}, group: g, version: 1 },
        what: 'createLeader',
      });
      const current = (await direct.getLeader(g)) ?? applied(await direct.createLeader({ group: g, holder: 'w', term: 1 }), 'create leader');
      await client.getLeader(g);
      const next = { ...leaderStateOf(current), holder: 'v', term: 2 };
      await cutWrite(proxy, () => client.updateLeader(g, current.version, next), () => direct.getLeader(g), {
        before: current,
        written: (outcome) => outcome?.status === 'applied' ? outcome.record : { ...next, group: g, version: current.version + 1 },
        what: 'updateLeader',
      });
    });

    define(t, target, 'a batch whose connection is cut after the backend received it is unknown or applied item by item, never thrown nor a conflict, and each lease is written whole or not at all', async (context) => {
      const { proxy, client, direct } = await proxied(target, context);
      const g = context.group();
      const { before, settled, stored } = await cutBatch(proxy, client, direct, g);
      const written = before.filter((lease) => stored.get(lease.leaseKey)?.version !== lease.version);
      for (const lease of before) {
        const now = stored.get(lease.leaseKey);
        const whole = now?.version === lease.version ? lease : { ...lease, checkpoint: `cp-${lease.leaseKey}`, version: lease.version + 1 };
        assert.deepEqual(plain(now), plain(whole), `lease ${lease.leaseKey} is written whole or not at all`);
      }
      if ('thrown' in settled) {
        assert.deepEqual(written.map((lease) => lease.leaseKey), [], `the batch threw ${show(settled.thrown)} although it reached the backend and applied; a write that may have reached the backend must return unknown`);
        assert.ok(isUnavailable(settled.thrown), `a batch that sent nothing may throw only a StorageUnavailableError, got ${show(settled.thrown)}`);
        return;
      }
      assert.equal(settled.value.length, before.length, 'one result per update');
      settled.value.forEach((outcome, i) => {
        const leaseKey = before[i]?.leaseKey as string;
        if (outcome.status === 'unknown') {
          assert.ok(outcome.error instanceof LeaseholdError, `item ${leaseKey}: an unknown outcome carries a LeaseholdError, got ${show(outcome.error)}`);
        } else {
          assert.equal(outcome.status, 'applied', `item ${leaseKey}: a write cut after the backend received it is unknown (or applied, if the adapter proved it), got ${show(outcome)}`);
          assert.deepEqual(plain(outcome.record), plain(stored.get(leaseKey)), `item ${leaseKey}: an applied outcome is what is stored`);
        }
      });
    });

    define(t, target, 'a read whose connection is cut before its answer arrives throws a StorageUnavailableError or returns the exact answer', async (context) => {
      const { proxy, client, direct } = await proxied(target, context);
      const g = context.group();
      await createMany(direct, g, ['a', 'b', 'c'], () => ({ owner: 'w', epoch: 1, checkpoint: '5' }));
      applied(await direct.createLeader({ group: g, holder: 'w', term: 1 }), 'leader');
      const reads: Array<[string, () => Promise<unknown>]> = [
        ['getLease', () => client.getLease(g, 'b')],
        ['getLeader', () => client.getLeader(g)],
        ['listLeases', async () => sortListing(await client.listLeases(g))],
      ];
      const truth: Record<string, unknown> = {
        getLease: await direct.getLease(g, 'b'),
        getLeader: await direct.getLeader(g),
        listLeases: sortListing(await direct.listLeases(g)),
      };
      // The read of many leases, when the adapter has it (optional).
      if (client.getLeases !== undefined && direct.getLeases !== undefined) {
        reads.push(['getLeases', async () => sortListing(await (client as Required<Pick<Storage, 'getLeases'>>).getLeases(g, ['a', 'c', 'absent']))]);
        truth.getLeases = sortListing(await direct.getLeases(g, ['a', 'c', 'absent']));
      }
      for (const [what, read] of reads) {
        await client.getLease(g, 'warm-up');
        const armed = proxy.cutOnResponse();
        const settled = await settles(read(), what);
        proxy.disarm();
        void armed;
        if ('thrown' in settled) assert.ok(isUnavailable(settled.thrown), `${what}: a read that fails throws a StorageUnavailableError, got ${show(settled.thrown)}`);
        else assert.deepEqual(plain(settled.value), plain(truth[what]), `${what}: a read that returns returns the exact answer`);
      }
    });

    define(t, target, 'a listing whose connection is cut in the middle of its answer throws a StorageUnavailableError or returns every lease, never part of them', async (context) => {
      const { proxy, client, direct } = await proxied(target, context);
      const g = context.group();
      const keys = Array.from({ length: 600 }, (_, i) => `lease-${String(i).padStart(4, '0')}`);
      await createMany(direct, g, keys, () => ({ metadata: { padding: 'p'.repeat(1000) } }));
      const truth = sortListing(await direct.listLeases(g));
      const start = proxy.answeredBytes;
      assert.deepEqual(plain(sortListing(await client.listLeases(g))), plain(truth));
      const size = proxy.answeredBytes - start;
      for (const fraction of [0.25, 0.5, 0.9]) {
        await client.getLease(g, 'warm-up');
        const armed = proxy.cutOnResponse({ afterBytes: Math.floor(size * fraction) });
        const settled = await settles(client.listLeases(g), 'listLeases');
        proxy.disarm();
        void armed;
        if ('thrown' in settled) assert.ok(isUnavailable(settled.thrown), `cut after ${fraction * 100}% of the answer: a listing that fails throws a StorageUnavailableError, got ${show(settled.thrown)}`);
        else assert.deepEqual(plain(sortListing(settled.value)), plain(truth), `cut after ${fraction * 100}% of the answer: a listing that returns lists every lease`);
      }
    });

    define(t, target, 'a member join, put or remove whose connection is cut after the backend received it is unknown, never thrown nor a conflict, and the client works again', async (context) => {
      const { proxy, client, direct } = await proxied(target, context);
      const g = context.group();
      await client.getRoster(g);
      const read = (): Promise<MemberRecord | null> => memberOfRoster(direct, g, 'w');
      await cutMemberWrite(proxy, () => client.putMember(g, 'w', null, memberState({ held: 1 })), read, { before: null, next: memberState({ held: 1 }), what: 'a join' });
      const current = (await read()) ?? (await join(direct, g, 'w', { held: 1 }));
      await client.getRoster(g);
      await cutMemberWrite(proxy, () => client.putMember(g, 'w', current.version, { ...memberStateOf(current), held: 2 }), read, { before: current, next: { ...memberStateOf(current), held: 2 }, what: 'a put' });
      const now = (await read()) as MemberRecord;
      await client.getRoster(g);
      await cutMemberWrite(proxy, () => client.removeMember(g, 'w', now.version), read, { before: now, next: null, what: 'a remove' });
      const settled = await settles(client.getRoster(g), 'a roster read after the cut');
      assert.ok('value' in settled, `the client works again after a cut connection: a roster read threw ${show(settled)}`);
      assert.deepEqual(plain(byWorker(settled.value.members)), plain(await members(direct, g)), 'the client works again after a cut connection');
    });

    define(t, target, 'a roster read whose connection is cut in the middle of its answer throws a StorageUnavailableError or returns the whole roster, never part of it', async (context) => {
      const { proxy, client, direct } = await proxied(target, context);
      const g = context.group();
      await Promise.all(Array.from({ length: limits.maxMembers }, (_, i) => join(direct, g, `worker-${String(i).padStart(3, '0')}`, { metadata: { padding: 'p'.repeat(1500) } })));
      const truth = plain(await members(direct, g));
      const start = proxy.answeredBytes;
      assert.deepEqual(plain(await members(client, g)), truth);
      const size = proxy.answeredBytes - start;
      for (const fraction of [0, 0.25, 0.5, 0.9]) {
        await client.getRoster(`${g}-warm-up`);
        const armed = proxy.cutOnResponse(fraction === 0 ? {} : { afterBytes: Math.floor(size * fraction) });
        const settled = await settles(client.getRoster(g), 'getRoster');
        proxy.disarm();
        void armed;
        if ('thrown' in settled) assert.ok(isUnavailable(settled.thrown), `cut after ${fraction * 100}% of the answer: a roster read that fails throws a StorageUnavailableError, got ${show(settled.thrown)}`);
        else assert.deepEqual(plain({ ...settled.value, members: byWorker(settled.value.members) }), { group: g, members: truth, corrupt: [] }, `cut after ${fraction * 100}% of the answer: a roster read that returns returns the whole roster`);
      }
    });

    define(t, target, 'a client whose connection is broken fails each call with a typed error (thrown, or unknown for a write) and writes nothing', async (context) => {
      const faults = breakable(target, context);
      const [direct] = (await context.clients(1)) as [Storage];
      const g = context.group();
      const lease = applied(await direct.createLease({ group: g, leaseKey: 'k', owner: 'w', epoch: 1 }), 'create');
      const leader = applied(await direct.createLeader({ group: g, holder: 'w', term: 1 }), 'leader');
      const member = await join(direct, g, 'w');
      const calls: Array<[string, (storage: Storage) => Promise<unknown>]> = [
        ['listLeases', (storage) => storage.listLeases(g)],
        ['getLease', (storage) => storage.getLease(g, 'k')],
        ['getLeader', (storage) => storage.getLeader(g)],
        ['createLease', (storage) => storage.createLease({ group: g, leaseKey: 'new' })],
        ['updateLeases', (storage) => storage.updateLeases(g, [{ leaseKey: 'k', expectedVersion: lease.version, next: { ...leaseStateOf(lease), checkpoint: '9' } }])],
        ['deleteLease', (storage) => storage.deleteLease(g, 'k', lease.version)],
        ['createLeader', (storage) => storage.createLeader({ group: `${g}-other` })],
        ['updateLeader', (storage) => storage.updateLeader(g, leader.version, { ...leaderStateOf(leader), term: 2 })],
        ['getRoster', (storage) => storage.getRoster(g)],
        ['putMember (a join)', (storage) => storage.putMember(g, 'new', null, memberState())],
        ['putMember (a heartbeat)', (storage) => storage.putMember(g, 'w', member.version, memberStateOf(member))],
        ['removeMember', (storage) => storage.removeMember(g, 'w', member.version)],
      ];
      for (const [what, call] of calls) {
        const breakable = await faults.createStorage();
        const storage = breakable.storage;
        context.cleanup(async () => target.closeStorage?.(storage));
        await storage.getLease(g, 'warm-up');
        await breakable.breakConnection();
        const settled = await settles(call(storage), what);
        if ('thrown' in settled) {
          assert.ok(isUnavailable(settled.thrown), `${what}: a call on a broken connection throws a StorageUnavailableError, got ${show(settled.thrown)}`);
        } else {
          const outcomes = (Array.isArray(settled.value) ? settled.value : [settled.value]) as Array<{ status?: unknown; error?: unknown }>;
          for (const outcome of outcomes) {
            assert.equal(outcome?.status, 'unknown', `${what}: a call on a broken connection cannot succeed, got ${show(outcome)}`);
            assert.ok(outcome.error instanceof LeaseholdError, `${what}: an unknown outcome carries a LeaseholdError, got ${show(outcome.error)}`);
          }
        }
      }
      assert.deepEqual(plain(await listed(direct, g)), [plain(lease)], 'nothing was written');
      assert.deepEqual(plain(await direct.getLeader(g)), plain(leader));
      assert.equal(await direct.getLeader(`${g}-other`), null);
      assert.deepEqual(plain(await members(direct, g)), [plain(member)], 'no member was written');
    });

    define(t, target, 'a batch whose connection is cut on a client that does not send it again is unknown item by item, or applied as stored: never a conflict with no current lease', async (context) => {
      const faults = target.faults;
      const { proxy, client, direct } = await proxied(target, context);
      // A client of its own, through the same proxy, that never sends the batch again after the cut.
      const once = faults?.kind === 'proxy' && faults.createStorageWithoutResend ? await faults.createStorageWithoutResend(proxy.address) : client;
      if (once !== client) context.cleanup(async () => target.closeStorage?.(once));
      const g = context.group();
      const { before, settled, stored } = await cutBatch(proxy, once, direct, g);
      for (const lease of before) {
        const now = stored.get(lease.leaseKey);
        const whole = now?.version === lease.version ? lease : { ...lease, checkpoint: `cp-${lease.leaseKey}`, version: lease.version + 1 };
        assert.deepEqual(plain(now), plain(whole), `lease ${lease.leaseKey} is written whole or not at all`);
      }
      if ('thrown' in settled) {
        const written = before.filter((lease) => stored.get(lease.leaseKey)?.version !== lease.version);
        assert.deepEqual(written.map((lease) => lease.leaseKey), [], `the batch threw ${show(settled.thrown)} although it reached the backend and applied; a write that may have reached the backend must return unknown`);
        assert.ok(isUnavailable(settled.thrown), `a batch that sent nothing may throw only a StorageUnavailableError, got ${show(settled.thrown)}`);
        return;
      }
      assert.equal(settled.value.length, before.length, 'one result per update');
      settled.value.forEach((outcome, i) => {
        const leaseKey = before[i]?.leaseKey as string;
        if (outcome.status === 'unknown') {
          assert.ok(outcome.error instanceof LeaseholdError, `item ${leaseKey}: an unknown outcome carries a LeaseholdError, got ${show(outcome.error)}`);
        } else {
          const why = outcome.status === 'conflict' && outcome.current === null ? 'a conflict with no current lease, although the lease exists and may be held' : 'no other client wrote the lease, so the exact answer can only be applied';
          assert.equal(outcome.status, 'applied', `item ${leaseKey}: a batch whose call failed is unknown (or applied, if the adapter proved it), got ${show(outcome)}: ${why}`);
          assert.deepEqual(plain(outcome.record), plain(stored.get(leaseKey)), `item ${leaseKey}: an applied outcome is what is stored`);
        }
      });
      await assertRecovers(once, direct, g, 'k0');
    });
  });
}

function breakable(target: ConformanceTarget, context: Context): BreakableFaults {
  const faults = target.faults;
  if (faults?.kind !== 'break') {
    context.notChecked(
      `not checked: ${target.notApplicable?.faults ?? (faults ? 'the target cuts connections with a proxy instead (the tests above)' : `the target has no breakable fault hook (faults.kind 'break')`)}`,
    );
  }
  return faults;
}

function sortListing(listing: { leases: LeaseRecord[]; corrupt: unknown[] }): { leases: LeaseRecord[]; corrupt: unknown[] } {
  return { leases: [...listing.leases].sort((a, b) => (a.leaseKey < b.leaseKey ? -1 : a.leaseKey > b.leaseKey ? 1 : 0)), corrupt: listing.corrupt };
}
