/**
 * `leasehold dashboard`: serves a live page of a group (members, leases, lineage, a timeline of changes)
 * until interrupted. One read of the group per interval, whatever the number of open pages; read-only
 * unless started with `--allow-actions`.
 */
import { parseStorageUrl } from '@leasehold/connect';
import { openBackend } from '../connect.js';
import { checkDashboardOptions, startDashboard } from '../dashboard/server.js';
import { checkGroup, type Io } from '../shared.js';

/** Options of {@link dashboard}. */
export interface DashboardCommandOptions {
  readonly storage: string;
  readonly group: string;
  readonly host: string;
  readonly port: number;
  readonly intervalMs: number;
  readonly stallMs: number;
  readonly token: string | undefined;
  readonly allowActions: boolean;
}

/** Opens the storage, starts the dashboard, prints its URL, and serves until the signal fires. */
export async function dashboard(options: DashboardCommandOptions, io: Io): Promise<void> {
  checkGroup(options.group);
  checkDashboardOptions(options);
  const target = parseStorageUrl(options.storage);
  const backend = await openBackend(target);
  try {
    const running = await startDashboard({
      storage: backend.storage,
      display: target.display,
      group: options.group,
      intervalMs: options.intervalMs,
      stallMs: options.stallMs,
      host: options.host,
      port: options.port,
      ...(options.token === undefined ? {} : { token: options.token }),
      ...(options.allowActions ? { actions: { storageUrl: options.storage } } : {}),
    });
    try {
      io.out(`dashboard of group ${options.group} in ${target.display}: ${running.url}\n`);
      io.out(options.allowActions ? 'actions are on (member remove, rewind, checkpoint set), each asks for confirmation\n' : 'read-only (start with --allow-actions to act on the group)\n');
      await new Promise<void>((resolve) => {
        if (io.signal.aborted) resolve();
        else io.signal.addEventListener('abort', () => resolve(), { once: true });
      });
    } finally {
      await running.close();
    }
  } finally {
    await backend.close();
  }
}
