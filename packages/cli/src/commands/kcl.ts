/**
 * `leasehold import kcl` and `leasehold export kcl`: moving an application from the KCL to Leasehold with
 * its checkpoints, and back. Both are dry runs unless `--apply`: they print what they would write, one row
 * per shard. With `--apply`, an import refuses while KCL workers still renew leases in the table (watched
 * for `--observe-ms`) or while the Leasehold group has a live member, and refuses to overwrite leases the
 * group has; an export refuses while the group is live, and refuses to overwrite a KCL table's differing
 * leases unless `--replace`. The mapping itself is in `kcl/mapping.ts`.
 */
import { LeaseholdError, type LeaseListing, type Storage } from '@leasehold/core';
import { BIRTH_POSITION_FIELD, describeValue, parseStreamBirths, STREAMS_FIELD } from '@leasehold/core/adapter';
import { parseStorageUrl } from '@leasehold/connect';
import { openBackend } from '../connect.js';
import { pollOf, UNREADABLE_WATCH_MS } from '../guard.js';
import { isNewerFormat, newerFormatError } from '../health.js';
import { isLeaseItem, kclItemOf, MalformedKclLeaseError, parseKclItem, type KclItem, type KclLease } from '../kcl/lease.js';
import { exportPlanOf, importPlanOf, type ExportRow, type ImportPlan } from '../kcl/mapping.js';
import { openKclTable, watchKclTable, type KclTableTarget } from '../kcl/table.js';
import { watchRoster } from '../observe.js';
import { checkGroup, readGroup, readKnownGroup, table, type Io } from '../shared.js';
import { PKG } from '../pkg.js';

/** What both commands are told. */
interface KclCommandOptions {
  readonly storage: string;
  readonly group: string;
  readonly kcl: KclTableTarget;
  readonly apply: boolean;
  /** How long `--apply` watches the KCL table for workers that renew. */
  readonly observeMs: number;
  readonly json: boolean;
}

/** Options of {@link importKcl}. */
export interface ImportKclOptions extends KclCommandOptions {
  /** Only these streams of a multi-stream table (stream identifiers or names). */
  readonly streams: readonly string[];
  /** The KCL application's `AT_TIMESTAMP` initial position, for leases at `AT_TIMESTAMP`. */
  readonly initialTimestampMs?: number | undefined;
}

/** Options of {@link exportKcl}. */
export interface ExportKclOptions extends KclCommandOptions {
  /** Overwrite the table's leases that differ, and delete those the group does not have. */
  readonly replace: boolean;
}

/** Reads a KCL table's leases into Leasehold leases of a group: a dry run, or with `apply` the writes. */
export async function importKcl(options: ImportKclOptions, io: Io): Promise<void> {
  checkGroup(options.group);
  const target = parseStorageUrl(options.storage);
  const kcl = openKclTable(options.kcl);
  try {
    const items = await kcl.scan();
    if (items === null) throw new LeaseholdError('ERR_KCL_TABLE_NOT_FOUND', `[${PKG}] KCL table ${describeValue(kcl.name)} does not exist${where(options.kcl)}`);
    const { leases, others } = readLeases(items);
    if (leases.length === 0) throw new LeaseholdError('ERR_KCL_TABLE_EMPTY', `[${PKG}] KCL table ${describeValue(kcl.name)} holds no lease${where(options.kcl)}`);
    const plan = importPlanOf(leases, { streams: options.streams, initialTimestampMs: options.initialTimestampMs });

    const backend = await openBackend(target);
    try {
      const storage: Storage = backend.storage;
      const state = await readGroup(storage, options.group);
      const existing = existingKeys(plan, { leases: state.leases, corrupt: state.corrupt });
      printImportPlan(plan, { ...options, display: target.display, others, existing }, io);
      if (!options.apply) {
        if (!options.json) io.out(`dry run: nothing was written; run again with --apply to write these ${plan.rows.length} leases (stop the KCL workers first)\n`);
        return;
      }
      if (existing.length > 0) throw leasesExist(options.group, existing, target.display);

      io.err(`watching KCL table ${describeValue(kcl.name)} for ${options.observeMs} ms for workers that still renew leases\n`);
      const moved = await watchKclTable(kcl, items, options.observeMs, Math.max(50, Math.min(1000, Math.floor(options.observeMs / 5))));
      if (moved !== null) {
        throw new LeaseholdError(
          'ERR_KCL_WORKERS_RUNNING',
          `[${PKG}] KCL workers still run on table ${describeValue(kcl.name)}: lease ${describeValue(moved.leaseKey)}${moved.owner === null ? '' : ` of ${describeValue(moved.owner)}`} moved while watched (leaseCounter ${moved.fromCounter} -> ${moved.toCounter ?? 'deleted'}); stop every KCL worker of the application first, then import`,
        );
      }
      const listing = await refuseLiveGroup(storage, options.group, io);
      const nowExisting = existingKeys(plan, listing);
      if (nowExisting.length > 0) throw leasesExist(options.group, nowExisting, target.display);
      await writeImport(storage, options.group, plan, io);
      if (!options.json) {
        io.out(
          `imported ${plan.rows.length} KCL leases of table ${describeValue(kcl.name)} into group ${describeValue(options.group)} in ${target.display}; start the Leasehold workers${plan.multiStream ? ' with these streams' : ''}, and keep the KCL workers stopped\n`,
        );
      }
    } finally {
      await backend.close();
    }
  } finally {
    kcl.close();
  }
}

/** Writes a Leasehold group's leases into a KCL table: a dry run, or with `apply` the writes. */
export async function exportKcl(options: ExportKclOptions, io: Io): Promise<void> {
  checkGroup(options.group);
  const target = parseStorageUrl(options.storage);
  const backend = await openBackend(target);
  try {
    const storage: Storage = backend.storage;
    const kcl = openKclTable(options.kcl);
    try {
      const state = await readKnownGroup(storage, options.group, target.display);
      refuseUnreadable(state.corrupt.map((error) => error.leaseKey ?? '?'), options.group, target.display);
      const newer = state.leases.find(isNewerFormat);
      if (newer !== undefined) throw newerFormatError(newer);
      const births = parseStreamBirths(state.leader?.metadata[STREAMS_FIELD]);
      const birth = (streamId: string | undefined): string | undefined =>
        streamId === undefined ? state.leader?.metadata[BIRTH_POSITION_FIELD] : births[streamId]?.p;
      const plan = exportPlanOf(state.leases, birth);
      const items = await kcl.scan();
      const actions = exportActions(plan.rows, items ?? []);
      printExportPlan(plan.rows, actions, { ...options, display: target.display, tableExists: items !== null }, io);
      const differing = actions.replace.length + actions.remove.length;
      if (!options.apply) {
        if (!options.json) {
          const refusal = differing > 0 && !options.replace ? `; --apply would refuse: ${differing} leases of the table differ from the group's (pass --replace to overwrite them)` : '';
          io.out(`dry run: nothing was written; run again with --apply to write the KCL table (stop the Leasehold workers first)${refusal}\n`);
        }
        return;
      }
      if (differing > 0 && !options.replace) {
        const [first] = [...actions.replace, ...actions.remove];
        throw new LeaseholdError(
          'ERR_KCL_TABLE_NOT_EMPTY',
          `[${PKG}] KCL table ${describeValue(kcl.name)} holds ${differing} leases that differ from group ${describeValue(options.group)}'s (first ${describeValue(first)}); pass --replace to overwrite them and delete those the group does not have`,
        );
      }
      await refuseLiveGroup(storage, options.group, io);
      if (items !== null && items.some(isLeaseItem)) {
        io.err(`watching KCL table ${describeValue(kcl.name)} for ${options.observeMs} ms for KCL workers that renew leases\n`);
        const moved = await watchKclTable(kcl, items, options.observeMs, Math.max(50, Math.min(1000, Math.floor(options.observeMs / 5))));
        if (moved !== null) {
          throw new LeaseholdError('ERR_KCL_WORKERS_RUNNING', `[${PKG}] KCL workers run on table ${describeValue(kcl.name)}: lease ${describeValue(moved.leaseKey)} moved while watched; stop them first`);
        }
      }
      // The group may have been written between the first read and the watch: export what it holds now.
      const final = await readKnownGroup(storage, options.group, target.display);
      refuseUnreadable(final.corrupt.map((error) => error.leaseKey ?? '?'), options.group, target.display);
      const finalPlan = exportPlanOf(final.leases, birth);
      const finalActions = exportActions(finalPlan.rows, items ?? []);
      if (items === null) await kcl.create();
      for (const row of [...finalActions.create, ...finalActions.replace].map((key) => finalPlan.rows.find((candidate) => candidate.leaseKey === key) as ExportRow)) {
        await kcl.put(kclItemOf(row.kcl));
      }
      for (const leaseKey of finalActions.remove) await kcl.delete(leaseKey);
      if (!options.json) {
        io.out(
          `exported group ${describeValue(options.group)} to KCL table ${describeValue(kcl.name)}: ${finalActions.create.length} leases written, ${finalActions.replace.length} replaced, ${finalActions.same.length} already there, ${finalActions.remove.length} deleted${items === null ? ' (table created)' : ''}; start the KCL workers, and keep the Leasehold workers stopped\n`,
        );
      }
    } finally {
      kcl.close();
    }
  } finally {
    await backend.close();
  }
}

/** The table's leases, read; items of another entity type are kept aside; every malformed lease is named. */
function readLeases(items: readonly KclItem[]): { leases: KclLease[]; others: string[] } {
  const leases: KclLease[] = [];
  const others: string[] = [];
  const malformed: MalformedKclLeaseError[] = [];
  for (const item of items) {
    if (!isLeaseItem(item)) {
      others.push(`${item.leaseKey?.S ?? '?'} (${item.entityType?.S ?? '?'})`);
      continue;
    }
    try {
      leases.push(parseKclItem(item));
    } catch (error) {
      if (!(error instanceof MalformedKclLeaseError)) throw error;
      malformed.push(error);
    }
  }
  if (malformed.length === 1) throw malformed[0] as MalformedKclLeaseError;
  if (malformed.length > 1) {
    throw new LeaseholdError('ERR_KCL_LEASE_MALFORMED', `[${PKG}] ${malformed.length} KCL leases cannot be read, so nothing was planned: ${malformed.map((error) => error.message.replace(`[${PKG}] `, '')).join('; ')}`);
  }
  return { leases: leases.sort((a, b) => (a.leaseKey < b.leaseKey ? -1 : a.leaseKey > b.leaseKey ? 1 : 0)), others };
}

function where(target: KclTableTarget): string {
  const parts = [target.region === undefined ? undefined : `region ${target.region}`, target.endpoint === undefined ? undefined : `endpoint ${target.endpoint}`].filter(Boolean);
  return parts.length === 0 ? '' : ` (${parts.join(', ')})`;
}

/** The keys of the plan that the group already has, readable or not. */
function existingKeys(plan: ImportPlan, listing: Pick<LeaseListing, 'leases' | 'corrupt'>): string[] {
  const stored = new Set([...listing.leases.map((lease) => lease.leaseKey), ...listing.corrupt.map((error) => error.leaseKey ?? '')]);
  return plan.rows.map((row) => row.leaseKey).filter((key) => stored.has(key));
}

function leasesExist(group: string, keys: readonly string[], display: string): LeaseholdError {
  const named = keys.slice(0, 3).map((key) => describeValue(key)).join(', ');
  return new LeaseholdError(
    'ERR_LEASES_EXIST',
    `[${PKG}] group ${describeValue(group)} in ${display} already has ${keys.length} of the leases to import (${named}${keys.length > 3 ? ', ...' : ''}), so nothing was written: import into a new group, or delete those leases first`,
  );
}

function refuseUnreadable(keys: readonly string[], group: string, display: string): void {
  if (keys.length === 0) return;
  throw new LeaseholdError(
    'ERR_CORRUPT_RECORD',
    `[${PKG}] group ${describeValue(group)} has ${keys.length} leases in ${display} that cannot be read back (${keys.map((key) => describeValue(key)).join(', ')}), so nothing was exported; repair or delete them first (leasehold doctor --group)`,
  );
}

/**
 * Refuses while a member of the group heartbeats: each alive member is watched for its own lease duration,
 * as workers watch each other. Returns the leases listed after the watch.
 */
async function refuseLiveGroup(storage: Storage, group: string, io: Io): Promise<LeaseListing> {
  const roster = await storage.getRoster(group);
  const alive = roster.members.filter((member) => member.status === 'alive');
  if (alive.length > 0 || roster.corrupt.length > 0) {
    io.err(`watching the roster of group ${describeValue(group)} (${alive.length} alive members) for heartbeats: each member for its lease duration\n`);
  }
  const verdict = await watchRoster(storage, group, { minimumMs: 0, unreadableMs: UNREADABLE_WATCH_MS, pollMs: pollOf(0) });
  if (verdict.live) {
    const [moved] = verdict.moved;
    const who = moved !== undefined ? `worker ${describeValue(moved.workerId)} (incarnation ${describeValue(moved.incarnation)}) sent a heartbeat while watched` : `the member of worker ${describeValue(verdict.repaired[0])} heartbeat`;
    throw new LeaseholdError('ERR_GROUP_LIVE', `[${PKG}] group ${describeValue(group)} is live: ${who}; stop the group's workers first`);
  }
  return storage.listLeases(group);
}

/** Creates the leases, parents first; a lease that could not be created is named, and the others are still written. */
async function writeImport(storage: Storage, group: string, plan: ImportPlan, io: Io): Promise<void> {
  const failed: string[] = [];
  for (const row of plan.rows) {
    // `recreate`: a key this group deleted before is created again on purpose, its versions and epochs above the old ones.
    const outcome = await storage.createLease({ group, leaseKey: row.leaseKey, checkpoint: row.checkpoint, parentKeys: [...row.parentKeys], metadata: row.metadata }, { recreate: true });
    if (outcome.status === 'applied') {
      io.err(`imported ${row.kclLeaseKey} -> ${row.leaseKey} at ${row.checkpoint}\n`);
    } else {
      failed.push(`${describeValue(row.leaseKey)} (${outcome.status === 'conflict' ? 'it exists' : `outcome unknown: ${outcome.error.message}`})`);
    }
  }
  if (failed.length > 0) {
    throw new LeaseholdError(
      'ERR_IMPORT_INCOMPLETE',
      `[${PKG}] ${failed.length} of ${plan.rows.length} leases were not imported into group ${describeValue(group)}: ${failed.join(', ')}; check with leasehold status before starting workers`,
    );
  }
}

function printImportPlan(
  plan: ImportPlan,
  context: ImportKclOptions & { display: string; others: readonly string[]; existing: readonly string[] },
  io: Io,
): void {
  if (context.json) {
    io.out(
      `${JSON.stringify({
        kclTable: context.kcl.table,
        group: context.group,
        storage: context.display,
        multiStream: plan.multiStream,
        apply: context.apply,
        leases: plan.rows.map(({ metadata: _metadata, ...row }) => row),
        otherItems: context.others,
        existing: context.existing,
      })}\n`,
    );
    return;
  }
  io.out(`import of KCL table ${context.kcl.table} into group ${context.group} in ${context.display} (${plan.multiStream ? 'multi-stream' : 'one stream'}):\n`);
  io.out(
    `${table(
      ['KCL LEASE KEY', 'KCL CHECKPOINT', 'LEASEHOLD LEASE KEY', 'LEASEHOLD CHECKPOINT', 'KCL OWNER', 'PARENTS'],
      plan.rows.map((row) => [row.kclLeaseKey, row.kclCheckpoint, row.leaseKey, row.checkpoint, row.kclOwner ?? '-', row.parentKeys.length === 0 ? '-' : row.parentKeys.join(',')]),
    )}\n`,
  );
  for (const row of plan.rows) for (const note of row.notes) io.out(`note: ${row.kclLeaseKey}: ${note}\n`);
  if (context.others.length > 0) io.out(`not leases, left alone: ${context.others.join(', ')}\n`);
  if (context.existing.length > 0) {
    io.out(`the group already has ${context.existing.length} of these leases (${context.existing.join(', ')}): --apply refuses to overwrite them\n`);
  }
}

interface ExportActions {
  readonly create: string[];
  readonly replace: string[];
  readonly same: string[];
  readonly remove: string[];
  /** Leases of streams the group does not read (or of the other layout): left alone, whatever --replace says. */
  readonly others: string[];
}

/** What the export does to each lease of the table. */
function exportActions(rows: readonly ExportRow[], items: readonly KclItem[]): ExportActions {
  const stored = new Map(items.filter(isLeaseItem).map((item) => [item.leaseKey?.S ?? '', item]));
  const actions: ExportActions = { create: [], replace: [], same: [], remove: [], others: [] };
  for (const row of rows) {
    const existing = stored.get(row.leaseKey);
    if (existing === undefined) actions.create.push(row.leaseKey);
    else if (canonicalItem(existing) === canonicalItem(kclItemOf(row.kcl))) actions.same.push(row.leaseKey);
    else actions.replace.push(row.leaseKey);
  }
  const keys = new Set(rows.map((row) => row.leaseKey));
  // Only the leases of the group's own streams are the group's to delete: a group that imported some
  // streams of a multi-stream table leaves the others' checkpoints to the KCL application.
  const streams = new Set(rows.map((row) => row.kcl.streamName));
  const multiStream = rows.some((row) => row.kcl.streamName !== undefined);
  for (const [key, item] of [...stored].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    if (keys.has(key)) continue;
    const streamName = item.streamName?.S;
    const ours = multiStream ? streamName !== undefined && streams.has(streamName) : streamName === undefined;
    (ours ? actions.remove : actions.others).push(key);
  }
  return actions;
}

/** An item as text with its attributes in order and its sets sorted: equal leases give equal text. */
function canonicalItem(item: KclItem): string {
  const entries = Object.entries(item)
    .map(([name, value]) => [name, value.SS === undefined ? value : { SS: [...value.SS].sort() }] as const)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return JSON.stringify(entries, (_key, field: unknown) => (field instanceof Uint8Array ? Buffer.from(field).toString('base64') : field));
}

function printExportPlan(rows: readonly ExportRow[], actions: ExportActions, context: ExportKclOptions & { display: string; tableExists: boolean }, io: Io): void {
  const actionOf = (key: string): string =>
    actions.create.includes(key) ? 'write' : actions.replace.includes(key) ? (context.replace ? 'replace' : 'differs') : 'same';
  if (context.json) {
    io.out(
      `${JSON.stringify({
        kclTable: context.kcl.table,
        group: context.group,
        storage: context.display,
        apply: context.apply,
        tableExists: context.tableExists,
        leases: rows.map((row) => ({ leaseKey: row.leaseKey, checkpoint: row.checkpoint, kclLeaseKey: row.kcl.leaseKey, kclCheckpoint: row.kclCheckpoint, action: actionOf(row.leaseKey), notes: row.notes })),
        remove: actions.remove,
        leftAlone: actions.others,
      })}\n`,
    );
    return;
  }
  io.out(`export of group ${context.group} in ${context.display} to KCL table ${context.kcl.table}${context.tableExists ? '' : ' (to be created)'}:\n`);
  io.out(
    `${table(
      ['LEASEHOLD LEASE KEY', 'LEASEHOLD CHECKPOINT', 'KCL LEASE KEY', 'KCL CHECKPOINT', 'ACTION'],
      rows.map((row) => [row.leaseKey, row.checkpoint ?? '(none)', row.kcl.leaseKey, row.kclCheckpoint, actionOf(row.leaseKey)]),
    )}\n`,
  );
  for (const row of rows) for (const note of row.notes) io.out(`note: ${row.leaseKey}: ${note}\n`);
  if (actions.others.length > 0) {
    io.out(`left alone: ${actions.others.length} leases of the table are of streams the group does not read (${actions.others.join(', ')})\n`);
  }
  if (actions.remove.length > 0) {
    io.out(`the table has ${actions.remove.length} leases the group does not (finished and cleaned up, or never Leasehold's): ${actions.remove.join(', ')}; ${context.replace ? 'deleted' : 'deleted only with --replace'}\n`);
  }
}
