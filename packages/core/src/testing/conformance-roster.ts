/**
 * The conformance suite's roster rules, the group "roster contract": `getRoster`, `putMember` and
 * `removeMember`.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { limits } from '../validation.js';
import { memberStateOf, RECORD_FORMAT } from '../storage.js';
import type { MemberRecord, MemberState, Storage } from '../storage.js';
import {
  applied,
  assertInvalidInput,
  awkwardMemberMetadata,
  badNames,
  byWorker,
  chunks,
  conflict,
  define,
  heartbeat,
  join,
  largestMember,
  laterFields,
  memberOfRoster,
  memberOfSize,
  members,
  memberState,
  plain,
  sized,
  type ConformanceTarget,
  type TestApi,
} from './conformance-kit.js';

/**
 * Every operation of the roster (`getRoster`, `putMember`, `removeMember`): joins, conditional writes on
 * each member's own version, versions from one counter per group, names and values round-tripping, and
 * input refused before anything is sent.
 */
export function rosterContract(t: TestApi, target: ConformanceTarget): void {
  t.describe(`${target.name}: roster contract`, () => {
    define(t, target, 'a group nobody joined has an empty roster', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      assert.deepEqual(plain(await storage.getRoster(g)), { group: g, members: [], corrupt: [] });
    });

    define(t, target, 'a join applies only when the worker id has no member: a second join is a conflict carrying the stored member, and changes nothing', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const joined = await join(storage, g, 'w1', { incarnation: 'first', held: 3 });
      assert.equal(joined.group, g);
      assert.equal(joined.workerId, 'w1');
      assert.ok(Number.isSafeInteger(joined.version) && joined.version >= 1, `a member's version is a positive integer, got ${joined.version}`);
      assert.deepEqual(plain(memberStateOf(joined)), plain(memberState({ incarnation: 'first', held: 3 })));
      const moved = await heartbeat(storage, joined, { held: 4 });
      for (const state of [memberState({ incarnation: 'second' }), memberStateOf(moved), memberState({ incarnation: 'first', held: 3 })]) {
        assert.deepEqual(plain(conflict(await storage.putMember(g, 'w1', null, state), 'a second join')), plain(moved), 'a second join is a conflict carrying the stored member');
      }
      assert.deepEqual(plain(await members(storage, g)), [plain(moved)], 'the second join changed nothing');
    });

    define(t, target, 'a member put at the stored version applies; at a stale version it is a conflict carrying the stored member, and changes nothing', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const joined = await join(storage, g, 'w1');
      const moved = await heartbeat(storage, joined, { held: 2, changes: 1, requests: [{ leaseKey: 'k', from: 'w2' }] });
      assert.ok(moved.version > joined.version, `version ${moved.version} after ${joined.version}`);
      assert.deepEqual(plain(memberStateOf(moved)), plain(memberState({ held: 2, changes: 1, requests: [{ leaseKey: 'k', from: 'w2' }] })));
      for (const stale of [joined.version, moved.version + 1, moved.version + 1000, 0]) {
        const outcome = await storage.putMember(g, 'w1', stale, memberState({ status: 'dead', incarnation: 'thief' }));
        assert.deepEqual(plain(conflict(outcome, `a put at version ${stale}`)), plain(moved), 'a conflict carries the stored member');
      }
      assert.deepEqual(plain(await members(storage, g)), [plain(moved)], 'a stale put changed nothing');
      assert.equal(conflict(await storage.putMember(g, 'nobody', 1, memberState()), 'a put of an absent member at a version'), null, 'a put of an absent member at a version is a conflict with no current member');
      assert.deepEqual(plain(await members(storage, g)), [plain(moved)], 'and creates nothing');
    });

    define(t, target, 'every member write that applies moves the version, even a heartbeat that writes exactly the stored state', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      let member = await join(storage, g, 'w1', { held: 5 });
      for (let beat = 1; beat <= 3; beat++) {
        const next = await heartbeat(storage, member, {}, `heartbeat ${beat}`);
        assert.ok(next.version > member.version, `heartbeat ${beat} moves the version (${member.version} to ${next.version}): others see the member alive only by it`);
        assert.deepEqual(plain(memberStateOf(next)), plain(memberStateOf(member)));
        assert.deepEqual(plain(await memberOfRoster(storage, g, 'w1')), plain(next), `the stored member after heartbeat ${beat}`);
        assert.deepEqual(plain(conflict(await storage.putMember(g, 'w1', member.version, memberStateOf(member)), `heartbeat ${beat} at the version it replaced`)), plain(next));
        member = next;
      }
      for (const [what, step] of [['held', { held: 6 }], ['changes', { changes: 1 }], ['requests', { requests: [{ leaseKey: 'k', from: 'w2' }] }], ['metadata', { metadata: { note: 'x' } }], ['status', { status: 'dead' }], ['format', { format: RECORD_FORMAT + 1 }]] as const) {
        const next = await heartbeat(storage, member, step, what);
        assert.ok(next.version > member.version, `a write of the ${what} moves the version`);
        member = next;
      }
    });

    define(t, target, 'each applied member write gives a version greater than every version its worker id ever had, whatever other members write', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const current = new Map<string, MemberRecord>();
      const highest = new Map<string, number>();
      const check = (record: MemberRecord, what: string): void => {
        const before = highest.get(record.workerId) ?? 0;
        assert.ok(record.version > before, `${what}: version ${record.version}, but ${record.workerId} already had ${before}`);
        highest.set(record.workerId, record.version);
        current.set(record.workerId, record);
      };
      for (const workerId of ['a', 'b', 'c']) check(await join(storage, g, workerId), `join ${workerId}`);
      for (const workerId of ['c', 'a', 'a', 'b', 'c', 'b']) check(await heartbeat(storage, current.get(workerId) as MemberRecord), `heartbeat of ${workerId}`);
      const removed = current.get('b') as MemberRecord;
      assert.equal((await storage.removeMember(g, 'b', removed.version)).status, 'applied');
      check(await join(storage, g, 'd'), 'a join after a remove');
      check(await heartbeat(storage, current.get('a') as MemberRecord), 'a heartbeat after a remove');
      check(await join(storage, g, 'b'), 'b joining again after its remove');
    });

    define(t, target, 'a version never repeats for a worker id: a member removed and joining again gets a version greater than every version its worker id ever had', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const other = await heartbeat(storage, await join(storage, g, 'other'));
      let highest = 0;
      const seen = new Set<number>();
      for (let round = 0; round < 4; round++) {
        const joined = await join(storage, g, 'cycled', { incarnation: `incarnation-${round}` });
        assert.ok(joined.version > highest, `join ${round}: version ${joined.version}, but the worker id already had ${highest}`);
        assert.ok(!seen.has(joined.version), `join ${round}: version ${joined.version} repeats`);
        const beat = await heartbeat(storage, joined);
        assert.ok(beat.version > joined.version);
        seen.add(joined.version).add(beat.version);
        highest = beat.version;
        assert.equal((await storage.removeMember(g, 'cycled', beat.version)).status, 'applied', `remove ${round}`);
        assert.equal(conflict(await storage.putMember(g, 'cycled', beat.version, memberStateOf(beat)), 'a writer holding the removed version'), null, 'a writer holding the removed version must not write the member again');
        for (const old of seen) {
          assert.equal(conflict(await storage.putMember(g, 'cycled', old, memberState({ incarnation: 'zombie' })), `a put at the old version ${old}`), null);
        }
      }
      const last = await join(storage, g, 'cycled', { incarnation: 'last' });
      for (const old of seen) {
        assert.deepEqual(plain(conflict(await storage.putMember(g, 'cycled', old, memberState({ incarnation: 'zombie' })), `a put at the old version ${old}`)), plain(last), 'no old version of the worker id is its version again');
      }
      assert.deepEqual(plain(await memberOfRoster(storage, g, 'other')), plain(other), 'the other member is untouched');
      assert.equal((await storage.removeMember(g, 'other', other.version)).status, 'applied');
      assert.equal((await storage.removeMember(g, 'cycled', last.version)).status, 'applied');
      assert.deepEqual(await members(storage, g), [], 'every member left');
      const back = await join(storage, g, 'cycled', { incarnation: 'after an empty roster' });
      assert.ok(back.version > last.version, `a join after every member left: version ${back.version}, but the worker id already had ${last.version}`);
      assert.deepEqual(plain(conflict(await storage.putMember(g, 'other', other.version, memberStateOf(other)), 'a writer holding the version of a member that left')), null);
    });

    define(t, target, 'writes to different members never conflict with each other: each member is written at its own version alone', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      let a = await join(storage, g, 'a');
      let b = await join(storage, g, 'b');
      const c = await join(storage, g, 'c');
      for (let round = 0; round < 3; round++) {
        a = await heartbeat(storage, a, { held: round }, `a, round ${round}`);
        b = await heartbeat(storage, b, { held: round }, `b at the version it read before a moved, round ${round}`);
      }
      const joined = await join(storage, g, 'd');
      a = await heartbeat(storage, a, {}, 'a after another member joined');
      assert.equal((await storage.removeMember(g, 'd', joined.version)).status, 'applied');
      b = await heartbeat(storage, b, {}, 'b after another member was removed');
      assert.equal((await storage.removeMember(g, 'c', c.version)).status, 'applied', 'c is removed at the version it joined at, though every other member moved since');
      assert.deepEqual(plain(await members(storage, g)), plain([a, b]));
    });

    define(t, target, 'a remove at the stored version removes the member; at a stale version it is a conflict carrying the stored member; of an absent member a conflict with null', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const joined = await join(storage, g, 'w1');
      const moved = await heartbeat(storage, joined);
      const kept = await join(storage, g, 'w2');
      for (const stale of [joined.version, moved.version + 1000]) {
        assert.deepEqual(plain(conflict(await storage.removeMember(g, 'w1', stale), `a remove at version ${stale}`)), plain(moved));
      }
      assert.deepEqual(plain(await members(storage, g)), plain([moved, kept]), 'a stale remove changed nothing');
      assert.equal((await storage.removeMember(g, 'w1', moved.version)).status, 'applied');
      assert.deepEqual(plain(await members(storage, g)), [plain(kept)]);
      assert.equal(conflict(await storage.removeMember(g, 'w1', moved.version), 'a remove of a removed member'), null);
      assert.equal(conflict(await storage.removeMember(g, 'never', 1), 'a remove of a member that never joined'), null);
      assert.equal(conflict(await storage.removeMember(group(), 'never', 1), 'a remove in a group nobody joined'), null);
      assert.deepEqual(plain(await members(storage, g)), [plain(kept)]);
    });

    define(t, target, 'every member field round-trips exactly through join, put, the roster and a conflict: requests, metadata with awkward keys, the format and fields core does not name', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const first = memberState({
        format: RECORD_FORMAT + 1,
        incarnation: 'incarnation-ü "quoted"',
        leaseDurationMs: 12_345,
        held: 7,
        changes: 3,
        requests: [{ leaseKey: 'shard/ü:{1}', from: 'worker "b"' }, { leaseKey: 'shardId-2', from: 'w\u2028c' }],
        metadata: awkwardMemberMetadata(),
        ...laterFields,
      });
      const joined = await join(storage, g, 'w1', first);
      assert.deepEqual(plain(memberStateOf(joined)), plain(first), 'the joined member carries every field it was given');
      assert.deepEqual(Object.keys(joined.metadata).sort(), Object.keys(first.metadata).sort(), 'every metadata key is kept');
      assert.deepEqual(plain(await members(storage, g)), [plain(joined)]);
      assert.deepEqual(plain(conflict(await storage.putMember(g, 'w1', null, memberState()), 'join again')), plain(joined));
      const second = memberState({ format: RECORD_FORMAT + 2, status: 'dead', requests: [{ leaseKey: 'k', from: 'w2' }], metadata: { [`x-${randomUUID()}`]: '✓' }, ...{ lineage: { depth: 3 }, 'x-added': ['later'] } });
      const put = applied(await storage.putMember(g, 'w1', joined.version, second), 'put');
      assert.deepEqual(plain(memberStateOf(put)), plain(second), 'a put replaces the whole state: fields it leaves out are gone');
      const read = (await memberOfRoster(storage, g, 'w1')) as MemberRecord;
      assert.deepEqual(plain(read), plain(put));
      assert.deepEqual(plain(conflict(await storage.putMember(g, 'w1', joined.version, first), 'stale put')), plain(put));
      const emptied = applied(await storage.putMember(g, 'w1', put.version, memberState()), 'a put of empty requests and metadata');
      assert.deepEqual(plain(memberStateOf(emptied)), plain(memberState()));
      assert.deepEqual(plain(await members(storage, g)), [plain(emptied)]);
    });

    define(t, target, 'fields core does not name on a handoff request round-trip exactly through join, put, the roster and a conflict', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const requests = [
        { leaseKey: 'shardId-1', from: 'w2', ...laterFields },
        { leaseKey: 'shardId-2', from: 'w3', 'x-priority': 2, 'x-asked': { at: 1767225600123, why: ['balance', 'ü'] } },
      ];
      const joined = await join(storage, g, 'w1', { requests });
      assert.deepEqual(plain(joined.requests), plain(requests), 'the joined member carries every field of its requests');
      assert.deepEqual(plain((await memberOfRoster(storage, g, 'w1'))?.requests), plain(requests), 'the roster carries every field of its requests');
      const next = [{ leaseKey: 'shardId-3', from: 'w4', 'x-later': [true, null, 'ü'] }];
      const put = applied(await storage.putMember(g, 'w1', joined.version, memberState({ requests: next })), 'a put of other requests');
      assert.deepEqual(plain(put.requests), plain(next), 'a put replaces the requests whole, with their fields');
      assert.deepEqual(plain((await memberOfRoster(storage, g, 'w1'))?.requests), plain(next));
      assert.deepEqual(plain(conflict(await storage.putMember(g, 'w1', joined.version, memberState()), 'stale put')?.requests), plain(next));
      assert.deepEqual(plain(conflict(await storage.putMember(g, 'w1', null, memberState()), 'join again')?.requests), plain(next));
    });

    define(t, target, `a member state of ${limits.maxMemberBytes} bytes, with counters and leaseDurationMs at Number.MAX_SAFE_INTEGER and ${limits.maxRequests} requests, round-trips exactly`, async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const prefix = `${group()}-`;
      const g = prefix + sized(limits.maxNameBytes - Buffer.byteLength(prefix), '𝄞', 'g');
      const workerId = sized(limits.maxNameBytes, '€', 'w');
      const joined = applied(await storage.putMember(g, workerId, null, largestMember('a')), 'join at the limits');
      assert.deepEqual(plain(memberStateOf(joined)), plain(largestMember('a')));
      assert.deepEqual(plain(await members(storage, g)), [plain(joined)]);
      const put = applied(await storage.putMember(g, workerId, joined.version, largestMember('b')), 'put at the limits');
      assert.deepEqual(plain(memberStateOf(put)), plain(largestMember('b')));
      assert.deepEqual(plain(await members(storage, g)), [plain(put)]);
      assert.deepEqual(plain(conflict(await storage.putMember(g, workerId, joined.version, largestMember('a')), 'stale put')), plain(put));
      assert.deepEqual(plain(conflict(await storage.putMember(g, workerId, null, largestMember('a')), 'join again')), plain(put));
    });

    define(t, target, `a roster of ${limits.maxMembers} members of near the largest size reads back whole`, async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const ids = Array.from({ length: limits.maxMembers }, (_, i) => `worker-${String(i).padStart(3, '0')}-${sized(200, 'é', 'x')}`);
      // Near the largest size: a heartbeat below may add a digit to a counter.
      const written = new Map(ids.map((workerId, i) => [workerId, memberOfSize(limits.maxMemberBytes - 4 - (i % 3), memberState({ incarnation: `incarnation-${i}`, held: i % 10 }))]));
      const joined: MemberRecord[] = [];
      for (const chunk of chunks(ids, 16)) {
        joined.push(...(await Promise.all(chunk.map(async (workerId) => applied(await storage.putMember(g, workerId, null, written.get(workerId) as MemberState), `join ${workerId.slice(0, 10)}`)))));
      }
      const roster = await members(storage, g);
      assert.deepEqual(roster.map((member) => member.workerId), [...ids].sort((a, b) => (a < b ? -1 : 1)), `every one of the ${limits.maxMembers} members`);
      for (const member of roster) assert.deepEqual(plain(memberStateOf(member)), plain(written.get(member.workerId)), `member ${member.workerId.slice(0, 10)} reads back whole`);
      assert.deepEqual(plain(roster), plain(byWorker(joined)));
      const moved = await Promise.all(joined.map((member) => heartbeat(storage, member, { held: member.held + 1 })));
      assert.deepEqual(plain(await members(storage, g)), plain(byWorker(moved)), 'and again after every member moved');
    });

    define(t, target, 'worker ids and groups are compared byte for byte: ids that differ only in case, Unicode normalization or trailing spaces are different members, and ids of 256 to 512 bytes are stored whole', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const ids = ['Worker-1', 'worker-1', 'WORKER-1', 'caf\u00e9', 'cafe\u0301', 'a', 'a ', 'a  ', ' a', 'a\t', '\ufb01', 'fi', '\u0130', 'i\u0307', 'Ａ', 'A'];
      for (const bytes of [256, 257, 511, 512]) for (const unit of ['w', 'é', '€', '𝄞']) ids.push(sized(bytes, unit, 'a'), sized(bytes, unit, 'b'));
      const joined: MemberRecord[] = [];
      for (const [i, workerId] of ids.entries()) {
        const member = await join(storage, g, workerId, { incarnation: `incarnation-${i}`, requests: [{ leaseKey: workerId, from: workerId }] });
        assert.equal(member.workerId, workerId, `${JSON.stringify(workerId.slice(0, 20))} of ${Buffer.byteLength(workerId)} bytes is stored whole`);
        joined.push(member);
      }
      assert.deepEqual(plain(await members(storage, g)), plain(byWorker(joined)), 'every look-alike worker id is its own member');
      const beat = await heartbeat(storage, joined[0] as MemberRecord, { held: 9 });
      assert.deepEqual(plain(await memberOfRoster(storage, g, 'worker-1')), plain(joined[1]), 'a write of one id leaves its look-alikes untouched');
      const groups = [`${g}-G`, `${g}-g`, `${g}-caf\u00e9`, `${g}-cafe\u0301`, `${g}-x`, `${g}-x `];
      const prefix = `${g}-`;
      groups.push(...[sized(limits.maxNameBytes - Buffer.byteLength(prefix), '€', 'a'), sized(limits.maxNameBytes - Buffer.byteLength(prefix), '€', 'b')].map((name) => prefix + name));
      for (const [i, name] of groups.entries()) await join(storage, name, 'w', { incarnation: `group-${i}` });
      for (const [i, name] of groups.entries()) {
        assert.deepEqual((await members(storage, name)).map((member) => [member.group, member.workerId, member.incarnation]), [[name, 'w', `group-${i}`]], `group ${JSON.stringify(name.slice(0, 40))} is its own roster`);
      }
      assert.equal((await memberOfRoster(storage, g, (joined[0] as MemberRecord).workerId))?.version, beat.version);
    });

    define(t, target, 'groups side by side never see each other\'s members, even when one name is a prefix of another', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const base = group();
      const groups = [base, `${base}:1`, `${base}{x}`, `${base} 2`, `${base}/ü`, `${base}*`, `${base}%`, `${base}_`, `${base}:`, `${base}.members`];
      const joined = new Map<string, MemberRecord[]>();
      for (const [i, g] of groups.entries()) {
        joined.set(g, [await join(storage, g, 'shared', { incarnation: `of-${i}` }), await join(storage, g, `only-${i}`, { incarnation: `of-${i}` })]);
      }
      const [first] = joined.get(base) as MemberRecord[];
      joined.set(base, [await heartbeat(storage, first as MemberRecord, { held: 42 }), (joined.get(base) as MemberRecord[])[1] as MemberRecord]);
      for (const [i, g] of groups.entries()) {
        const roster = await members(storage, g);
        assert.deepEqual(plain(roster), plain(byWorker(joined.get(g) as MemberRecord[])), `group ${JSON.stringify(g)} sees only its own members`);
        for (const member of roster) assert.equal(member.incarnation, `of-${i}`);
      }
      const other = (joined.get(`${base}:1`) as MemberRecord[])[1] as MemberRecord;
      assert.equal(conflict(await storage.removeMember(base, 'only-1', other.version), 'a remove of another group\'s member'), null);
      assert.deepEqual(plain(await memberOfRoster(storage, `${base}:1`, 'only-1')), plain(other));
    });

    define(t, target, 'a client sees a member another client wrote at once: no client serves the roster from a cache of its own', async ({ clients, group }) => {
      const [writer, reader] = (await clients(2)) as [Storage, Storage];
      const g = group();
      assert.deepEqual(await members(reader, g), []);
      const joined = await join(writer, g, 'w1');
      assert.deepEqual(plain(await members(reader, g)), [plain(joined)], 'the reader sees the join');
      const beat = await heartbeat(writer, joined);
      assert.deepEqual(plain(await members(reader, g)), [plain(beat)], 'the reader sees the heartbeat');
      assert.deepEqual(plain(conflict(await reader.putMember(g, 'w1', joined.version, memberStateOf(joined)), 'the reader writing at the version it read first')), plain(beat));
      const other = await join(reader, g, 'w2');
      assert.deepEqual(plain(await members(writer, g)), plain([beat, other]), 'the writer sees the reader\'s join');
      assert.equal((await writer.removeMember(g, 'w1', beat.version)).status, 'applied');
      assert.deepEqual(plain(await members(reader, g)), [plain(other)], 'the reader sees the remove');
    });

    define(t, target, 'invalid member input is refused with an InvalidInputError before anything is sent: each bad field, too many requests, an oversize state, a bad group, worker id or expected version', async ({ clients, group }) => {
      const [storage] = (await clients(1)) as [Storage];
      const g = group();
      const joined = await join(storage, g, 'w1');
      const good = memberStateOf(joined);
      const bad = (fields: Record<string, unknown>): MemberState => ({ ...good, ...fields });
      const states: Array<[string, MemberState, string]> = [
        ['format 0', bad({ format: 0 }), 'format'],
        ['a fractional format', bad({ format: 1.5 }), 'format'],
        ['no format', bad({ format: undefined }), 'format'],
        ['an empty incarnation', bad({ incarnation: '' }), 'incarnation'],
        ['a null incarnation', bad({ incarnation: null }), 'incarnation'],
        ['an incarnation with NUL', bad({ incarnation: 'a\u0000b' }), 'incarnation'],
        ['an incarnation of 513 bytes', bad({ incarnation: 'i'.repeat(limits.maxNameBytes + 1) }), 'incarnation'],
        ['leaseDurationMs 0', bad({ leaseDurationMs: 0 }), 'leaseDurationMs'],
        ['a negative leaseDurationMs', bad({ leaseDurationMs: -1 }), 'leaseDurationMs'],
        ['a fractional leaseDurationMs', bad({ leaseDurationMs: 1.5 }), 'leaseDurationMs'],
        ['leaseDurationMs over Number.MAX_SAFE_INTEGER', bad({ leaseDurationMs: Number.MAX_SAFE_INTEGER + 1 }), 'leaseDurationMs'],
        ['a status that is neither alive nor dead', bad({ status: 'gone' }), 'status'],
        ['a negative held', bad({ held: -1 }), 'held'],
        ['held as -0', bad({ held: -0 }), 'held'],
        ['fractional changes', bad({ changes: 0.5 }), 'changes'],
        ['requests that are no array', bad({ requests: { leaseKey: 'k', from: 'w' } }), 'requests'],
        [`${limits.maxRequests + 1} requests`, bad({ requests: Array.from({ length: limits.maxRequests + 1 }, (_, i) => ({ leaseKey: `k${i}`, from: 'w2' })) }), `the limit is ${limits.maxRequests}`],
        ['a request with an empty lease key', bad({ requests: [{ leaseKey: '', from: 'w2' }] }), 'requested lease key'],
        ['a request with no from', bad({ requests: [{ leaseKey: 'k' }] }), 'requested from'],
        ['a request field core does not name that holds no JSON value', bad({ requests: [{ leaseKey: 'k', from: 'w2', 'x-bad': Number.NaN }] }), 'a handoff request\'s field "x-bad"'],
        ['metadata with a number', bad({ metadata: { n: 5 } }), 'metadata'],
        ['a field core does not name that holds no JSON value', bad({ 'x-bad': Number.NaN }), 'x-bad'],
        [`a state over ${limits.maxMemberBytes} bytes`, bad({ metadata: { blob: 'm'.repeat(limits.maxMemberBytes) } }), `the limit is ${limits.maxMemberBytes}`],
        [`a state of ${limits.maxMemberBytes + 1} bytes`, memberOfSize(limits.maxMemberBytes + 1, memberState()), `the limit is ${limits.maxMemberBytes}`],
      ];
      for (const [what, state, mentions] of states) {
        const check = (error: unknown): true => assertInvalidInput(error, mentions);
        await assert.rejects(storage.putMember(g, 'w1', joined.version, state), check, `a put of ${what}`);
        await assert.rejects(storage.putMember(g, 'new', null, state), check, `a join of ${what}`);
      }
      for (const [what, name, mentions] of badNames) {
        const check = (error: unknown): true => assertInvalidInput(error, mentions);
        await assert.rejects(storage.getRoster(name), check, `a roster of ${what}`);
        await assert.rejects(storage.putMember(name, 'w1', null, good), check, `a join in ${what}`);
        await assert.rejects(storage.putMember(g, name, null, good), check, `a join as ${what}`);
        await assert.rejects(storage.putMember(g, name, joined.version, good), check, `a put as ${what}`);
        await assert.rejects(storage.removeMember(name, 'w1', joined.version), check, `a remove in ${what}`);
        await assert.rejects(storage.removeMember(g, name, joined.version), check, `a remove as ${what}`);
      }
      for (const version of [-1, -0, 1.5, Number.NaN, Number.MAX_SAFE_INTEGER + 1, '1' as unknown as number, undefined as unknown as number]) {
        const check = (error: unknown): true => assertInvalidInput(error, 'version');
        await assert.rejects(storage.putMember(g, 'w1', version, good), check, `a put at version ${String(version)}`);
        await assert.rejects(storage.removeMember(g, 'w1', version), check, `a remove at version ${String(version)}`);
      }
      assert.deepEqual(plain(await members(storage, g)), [plain(joined)], 'nothing was written');
    });
  });
}
