import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Checkpoint, InvalidConfigError, MemoryStorage, type LeaseRecord, type Storage } from '@leasehold/core';
import { leaseStateOf, REWIND_FIELDS } from '@leasehold/core/adapter';
import { afterEach, describe, expect, it } from 'vitest';
import { GroupWatch, type Snapshot } from '../src/dashboard/snapshot.js';
import { startDashboard, type DashboardOptions, type RunningDashboard } from '../src/dashboard/server.js';
import { changesBetween } from '../src/dashboard/timeline.js';
import { countingStorage, eventually, openEvents, type EventClient } from './dashboard-support.js';
import { AWS_ENV, freshName, join, leasehold, postgresBackend, seed, sharedBackends } from './support.js';

const shared = sharedBackends();
const BIN = fileURLToPath(new URL('../dist/bin.js', import.meta.url));

const open: Array<RunningDashboard | EventClient> = [];
afterEach(async () => {
  for (const item of open.splice(0)) {
    if ('states' in item) item.close();
    else await item.close();
  }
});

async function dashboardOf(storage: Storage, group: string, options: Partial<DashboardOptions> = {}): Promise<RunningDashboard> {
  const running = await startDashboard({ storage, display: 'memory:', group, intervalMs: 100, stallMs: 60_000, ...options });
  open.push(running);
  await running.ready;
  return running;
}

interface State {
  snapshot: Snapshot;
  error: string | null;
}

async function stateOf(running: RunningDashboard, headers: Record<string, string> = {}): Promise<State> {
  const response = await fetch(new URL('/api/state', running.url), { headers });
  expect(response.status).toBe(200);
  return (await response.json()) as State;
}

/** A group of two members (one dead), a leader, a parent shard finished and split in two, one child asked to rewind. */
async function seedGroup(storage: Storage, group: string): Promise<void> {
  await join(storage, group, 'worker-a', { leaseDurationMs: 60_000, held: 2, requests: [{ leaseKey: 'shard-3', from: 'worker-b' }] });
  await join(storage, group, 'worker-b', { leaseDurationMs: 60_000, status: 'dead' });
  const request = JSON.stringify({ id: 'rw-1', to: 'TRIM_HORIZON', requestedAt: '2024-01-01T00:00:00.000Z' });
  await seed(
    storage,
    [
      { group, leaseKey: 'shard-1', owner: null, checkpoint: Checkpoint.SHARD_END },
      { group, leaseKey: 'shard-2', owner: 'worker-a', incarnation: 'worker-a-inc', checkpoint: '17', parentKeys: ['shard-1'], metadata: { [REWIND_FIELDS.request]: request } },
      { group, leaseKey: 'shard-3', owner: 'worker-b', incarnation: 'worker-b-inc', checkpoint: '9', parentKeys: ['shard-1'] },
    ],
    { group, holder: 'worker-a', term: 3 },
  );
}

describe('leasehold dashboard: the snapshot', () => {
  it("shows each member's liveness, incarnation, leases and handoff requests, and each lease's owner, checkpoint, rewind request and generation", async () => {
    const storage = new MemoryStorage();
    const group = freshName('orders');
    await seedGroup(storage, group);
    const { snapshot } = await stateOf(await dashboardOf(storage, group));

    expect(snapshot.group).toBe(group);
    expect(snapshot.leader?.holder).toBe('worker-a');
    expect(snapshot.members.map((member) => [member.workerId, member.liveness, member.incarnation, member.leases, member.leader])).toEqual([
      ['worker-a', 'alive', 'worker-a-inc', 1, true],
      ['worker-b', 'dead', 'worker-b-inc', 1, false],
    ]);
    expect(snapshot.members[0]?.requests).toEqual([{ leaseKey: 'shard-3', from: 'worker-b' }]);
    const leases = new Map(snapshot.leases.map((lease) => [lease.leaseKey, lease]));
    expect(leases.get('shard-1')).toMatchObject({ finished: true, owner: null, generation: 0 });
    expect(leases.get('shard-2')).toMatchObject({ owner: 'worker-a', held: true, checkpoint: '17', generation: 1, rewindRequest: { id: 'rw-1', to: 'TRIM_HORIZON' } });
    expect(leases.get('shard-3')).toMatchObject({ owner: 'worker-b', ownerLiveness: 'dead', held: false, generation: 1, rewindRequest: null });
    expect(snapshot.lag).toEqual({ available: false, reason: expect.stringContaining('not available') });
  });

  it('keeps a parent the leader deleted in the lineage, so that its children are still drawn one generation after it', async () => {
    const storage = new MemoryStorage();
    const group = freshName('orders');
    await seedGroup(storage, group);
    const watch = new GroupWatch({ group, display: 'memory:', stallMs: 60_000 });
    await watch.read(storage);
    const parent = (await storage.listLeases(group)).leases.find((lease) => lease.leaseKey === 'shard-1') as LeaseRecord;
    expect((await storage.deleteLease(group, 'shard-1', parent.version)).status).toBe('applied');
    const snapshot = await watch.read(storage);
    expect(snapshot.retired).toEqual([{ leaseKey: 'shard-1', streamId: null, parentKeys: [], generation: 0 }]);
    expect(snapshot.leases.map((lease) => [lease.leaseKey, lease.generation])).toEqual([
      ['shard-2', 1],
      ['shard-3', 1],
    ]);
  });

  it('lists a lease that cannot be read back with its error, and still shows the rest of the group', async () => {
    const backend = await postgresBackend(shared.pool);
    try {
      const group = freshName('orders');
      await seedGroup(backend.storage, group);
      await backend.corrupt(group, 'shard-3');
      const { snapshot, error } = await stateOf(await dashboardOf(backend.storage, group));
      expect(error).toBeNull();
      expect(snapshot.corrupt).toEqual([{ kind: 'lease', key: 'shard-3', error: expect.stringContaining('shard-3') }]);
      expect(snapshot.leases.map((lease) => lease.leaseKey)).toEqual(['shard-1', 'shard-2']);
    } finally {
      await backend.close();
    }
  });

  it('shows the storage URL with its password hidden, on the page and in the JSON (the leasehold binary)', async () => {
    const backend = await postgresBackend(shared.pool);
    try {
      const group = freshName('orders');
      await seedGroup(backend.storage, group);
      const url = new URL(backend.url);
      url.username = url.username || 'postgres';
      url.password = 'hunter2-secret';
      const child = spawn(process.execPath, [BIN, 'dashboard', '--storage', url.toString(), '--group', group, '--port', '0', '--interval-ms', '200'], {
        env: { ...process.env, ...AWS_ENV },
      });
      try {
        let stdout = '';
        child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
        const printed = await eventually(() => /http:\/\/\S+/.exec(stdout)?.[0], (found) => found !== undefined, 'the dashboard to print its URL');
        const state = await eventually(async () => (await fetch(new URL('/api/state', printed))).text(), (text) => text.includes('"snapshot":{'), 'a snapshot');
        const page = await (await fetch(printed as string)).text();
        expect(state).not.toContain('hunter2-secret');
        expect(page).not.toContain('hunter2-secret');
        expect(stdout).not.toContain('hunter2-secret');
        expect(JSON.parse(state).snapshot.storage).toContain(':***@');
      } finally {
        child.kill('SIGTERM');
      }
    } finally {
      await backend.close();
    }
  });
});

describe('leasehold dashboard: the timeline', () => {
  it('tells takes, handovers, releases, a member expiring, a lease created and finished, rewinds requested and applied, and a stall', async () => {
    const storage = new MemoryStorage();
    const group = freshName('orders');
    let now = 0;
    const watch = new GroupWatch({ group, display: 'memory:', stallMs: 5_000, now: () => now });
    await join(storage, group, 'worker-a', { leaseDurationMs: 2_000 });
    await join(storage, group, 'worker-b', { leaseDurationMs: 2_000 });
    await join(storage, group, 'worker-c', { leaseDurationMs: 2_000 });
    const [free, handed, released, finishing, rewound, moving] = await seed(storage, [
      { group, leaseKey: 'free', owner: null, checkpoint: '1' },
      { group, leaseKey: 'handed', owner: 'worker-a', incarnation: 'worker-a-inc', checkpoint: '1' },
      { group, leaseKey: 'released', owner: 'worker-a', incarnation: 'worker-a-inc', checkpoint: '1' },
      { group, leaseKey: 'finishing', owner: 'worker-b', incarnation: 'worker-b-inc', checkpoint: '1' },
      { group, leaseKey: 'rewound', owner: 'worker-b', incarnation: 'worker-b-inc', checkpoint: '8' },
      { group, leaseKey: 'moving', owner: 'worker-b', incarnation: 'worker-b-inc', checkpoint: '1' },
      { group, leaseKey: 'stalling', owner: 'worker-a', incarnation: 'worker-a-inc', checkpoint: '1' },
    ]);
    const before = await watch.read(storage);

    const write = async (lease: LeaseRecord | undefined, change: Partial<ReturnType<typeof leaseStateOf>>): Promise<void> => {
      const record = lease as LeaseRecord;
      const [result] = await storage.updateLeases(group, [{ leaseKey: record.leaseKey, expectedVersion: record.version, next: { ...leaseStateOf(record), ...change } }]);
      expect(result?.status).toBe('applied');
    };
    await write(free, { owner: 'worker-b', incarnation: 'worker-b-inc' });
    await write(handed, { owner: 'worker-b', incarnation: 'worker-b-inc' });
    await write(released, { owner: null, incarnation: null });
    await write(finishing, { checkpoint: Checkpoint.SHARD_END });
    await write(rewound, { checkpoint: '2', metadata: { [REWIND_FIELDS.rewound]: 'rw-9' } });
    await write(moving, { checkpoint: '2' });
    await seed(storage, [{ group, leaseKey: 'child', parentKeys: ['finishing'] }]);
    // worker-a and worker-b heartbeat; worker-c does not, for longer than its lease duration.
    for (const workerId of ['worker-a', 'worker-b']) {
      const member = (await storage.getRoster(group)).members.find((candidate) => candidate.workerId === workerId);
      if (member === undefined) throw new Error(`no member ${workerId}`);
      await storage.putMember(group, workerId, member.version, { ...member });
    }
    now += 5_000;
    const after = await watch.read(storage);
    const events = changesBetween(before, after).map((event) => [event.kind, event.leaseKey ?? event.workerId]);

    expect(events).toEqual(
      expect.arrayContaining([
        ['member-expired', 'worker-c'],
        ['take', 'free'],
        ['handover', 'handed'],
        ['release', 'released'],
        ['finished', 'finishing'],
        ['rewind-applied', 'rewound'],
        ['lease-created', 'child'],
        ['stall', 'stalling'],
      ]),
    );
    expect(events).not.toContainEqual(['stall', 'moving']);
    expect(events).not.toContainEqual(['member-expired', 'worker-a']);

    const asked = (await storage.listLeases(group)).leases.find((lease) => lease.leaseKey === 'moving');
    const request = JSON.stringify({ id: 'rw-10', to: 'TRIM_HORIZON', requestedAt: '2024-01-01T00:00:00.000Z' });
    await write(asked, { metadata: { [REWIND_FIELDS.request]: request } });
    const third = await watch.read(storage);
    expect(changesBetween(after, third).map((event) => [event.kind, event.leaseKey ?? event.workerId])).toContainEqual(['rewind-requested', 'moving']);
  });
});

describe('leasehold dashboard: access', () => {
  it('refuses every request without the token, and takes it once from ?token= then from a cookie', async () => {
    const storage = new MemoryStorage();
    const running = await dashboardOf(storage, freshName('orders'), { token: 'a-long-enough-token' });
    const base = new URL('/', running.url);
    base.search = '';
    for (const path of ['/', '/events', '/api/state']) expect((await fetch(new URL(path, base))).status).toBe(401);
    expect((await fetch(new URL('/?token=wrong-token-value', base))).status).toBe(401);
    const first = await fetch(running.url, { redirect: 'manual' });
    expect(first.status).toBe(303);
    const cookie = (first.headers.get('set-cookie') ?? '').split(';')[0] as string;
    expect(cookie).toBe('leasehold_dashboard_token=a-long-enough-token');
    expect((await fetch(base, { headers: { cookie } })).status).toBe(200);
    expect((await fetch(new URL('/api/state', base), { headers: { 'x-leasehold-token': 'a-long-enough-token' } })).status).toBe(200);
    const events = await openEvents(base.toString(), { cookie });
    open.push(events);
    expect(events.status).toBe(200);
  });

  it('refuses to start on a host other than loopback without a token, naming the host', async () => {
    const start = startDashboard({ storage: new MemoryStorage(), display: 'memory:', group: 'orders', intervalMs: 1000, stallMs: 60_000, host: '0.0.0.0' });
    await expect(start).rejects.toThrow(InvalidConfigError);
    await expect(start).rejects.toThrow('--host "0.0.0.0" is reachable from other machines');
    const cli = await leasehold('dashboard', '--storage', 'redis://127.0.0.1:6379', '--group', 'orders', '--host', '0.0.0.0', '--port', '0');
    expect(cli.code).toBe(2);
    expect(cli.stderr).toContain('--host "0.0.0.0"');
  });

  it('refuses an --interval-ms out of range with an error naming the value', async () => {
    await expect(startDashboard({ storage: new MemoryStorage(), display: 'memory:', group: 'orders', intervalMs: 50, stallMs: 60_000 })).rejects.toThrow(
      new InvalidConfigError('[cli] --interval-ms must be a whole number from 100 to 60000, got 50'),
    );
    const cli = await leasehold('dashboard', '--storage', 'redis://127.0.0.1:6379', '--group', 'orders', '--interval-ms', 'soon');
    expect(cli.code).toBe(2);
    expect(cli.stderr).toContain('--interval-ms must be a whole number');
  });

  it('answers only requests naming a loopback host when bound to loopback', async () => {
    const running = await dashboardOf(new MemoryStorage(), freshName('orders'));
    const response = await new Promise<number>((resolve, reject) => {
      import('node:http').then(({ request }) => {
        const req = request(running.url, { headers: { host: 'attacker.example:80' } }, (res) => resolve(res.statusCode ?? 0));
        req.on('error', reject);
        req.end();
      }, reject);
    });
    expect(response).toBe(403);
  });
});

describe('leasehold dashboard: actions', () => {
  const post = (running: RunningDashboard, body: unknown, headers: Record<string, string> = {}) => {
    const origin = new URL(running.url).origin;
    return fetch(new URL('/api/actions', running.url), {
      method: 'POST',
      headers: { 'content-type': 'application/json', origin, 'x-leasehold-token': running.token ?? '', ...headers },
      body: JSON.stringify(body),
    });
  };

  it('refuses every action on a dashboard started without --allow-actions', async () => {
    const storage = new MemoryStorage();
    const group = freshName('orders');
    await seedGroup(storage, group);
    const running = await dashboardOf(storage, group);
    const response = await post(running, { action: 'member-remove', worker: 'worker-b', version: 1, confirm: true });
    expect(response.status).toBe(403);
    expect(await response.json()).toEqual({ error: expect.stringContaining('read-only: start it with --allow-actions') });
    expect((await storage.getRoster(group)).members.map((member) => member.workerId)).toEqual(['worker-a', 'worker-b']);
  });

  it('runs leasehold member remove for a confirmed same-origin request with the token, refuses one without confirm, token or origin, and plans a rewind unconfirmed', async () => {
    const backend = await postgresBackend(shared.pool);
    try {
      const group = freshName('orders');
      await seedGroup(backend.storage, group);
      const dead = (await backend.storage.getRoster(group)).members.find((member) => member.workerId === 'worker-b');
      const running = await dashboardOf(backend.storage, group, { actions: { storageUrl: backend.url } });
      expect(running.token).toMatch(/^[\w-]{20,}$/);
      const body = { action: 'member-remove', worker: 'worker-b', version: dead?.version };

      const unconfirmed = await post(running, body);
      expect(unconfirmed.status).toBe(400);
      expect(((await unconfirmed.json()) as { error: string }).error).toContain('needs "confirm": true');
      expect((await post(running, { ...body, confirm: true }, { 'x-leasehold-token': 'not-the-token' })).status).toBe(401);
      expect((await post(running, { ...body, confirm: true }, { origin: 'http://evil.example' })).status).toBe(403);
      expect((await backend.storage.getRoster(group)).members).toHaveLength(2);

      const done = await post(running, { ...body, confirm: true });
      expect(done.status).toBe(200);
      const result = (await done.json()) as { code: number; out: string };
      expect(result).toMatchObject({ action: 'member-remove', code: 0 });
      expect(result.out).toContain('removed dead member (incarnation "worker-b-inc") "worker-b"');
      expect((await backend.storage.getRoster(group)).members.map((member) => member.workerId)).toEqual(['worker-a']);

      // A plan writes nothing and needs no confirmation: leasehold rewind's dry run.
      const planned = await post(running, { action: 'rewind-plan', to: 'trim-horizon', shards: ['shard-3'] });
      const plan = (await planned.json()) as { code: number; out: string };
      expect(plan.code).toBe(0);
      expect(plan.out).toContain(`rewind of group "${group}" to trim-horizon`);
      expect(plan.out).toContain('dry run: nothing was written');
    } finally {
      await backend.close();
    }
  });
});

describe('leasehold dashboard: one reader for every page', () => {
  it('reads the group as often with ten pages open as with one', async () => {
    const group = freshName('orders');
    const readsWith = async (pages: number): Promise<{ reads: number; seen: number[] }> => {
      const storage = new MemoryStorage();
      await seedGroup(storage, group);
      const counted = countingStorage(storage);
      // One read at the start, then none for a minute: every read the pages cause would show.
      const running = await dashboardOf(counted.storage, group, { intervalMs: 60_000 });
      const clients = await Promise.all(Array.from({ length: pages }, () => openEvents(running.url)));
      open.push(...clients);
      await eventually(() => clients.every((client) => client.states.length >= 1), Boolean, 'every page to get the snapshot');
      for (let i = 0; i < pages; i++) await stateOf(running);
      return { reads: counted.total(), seen: clients.map((client) => ((client.states[0] as State).snapshot.leases ?? []).length) };
    };
    const one = await readsWith(1);
    const ten = await readsWith(10);
    expect(one.reads).toBeGreaterThan(0);
    expect(ten.reads).toBe(one.reads);
    expect(ten.seen).toEqual(Array.from({ length: 10 }, () => 3));
  });
});
