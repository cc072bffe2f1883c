/**
 * The command line: commands, options and help, and the one place where an error becomes one line on
 * standard error and an exit code.
 */
import { readFileSync } from 'node:fs';
import { STORAGE_ENV } from '@leasehold/connect';
import { InvalidConfigError } from '@leasehold/core';
import { describeValue } from '@leasehold/core/adapter';
import { Command, CommanderError, Option } from 'commander';
import { checkpointReset, checkpointSet } from './commands/checkpoint.js';
import { doctor } from './commands/doctor.js';
import { leaseCreate, leaseDelete } from './commands/lease.js';
import { memberList, memberRemove } from './commands/member.js';
import { setup } from './commands/setup.js';
import { copy } from './commands/copy.js';
import { dashboard } from './commands/dashboard.js';
import { rewind } from './commands/rewind.js';
import { status } from './commands/status.js';
import { exportKcl, importKcl } from './commands/kcl.js';
import { errorLine, EXIT, exitCodeOf, parseCount, type Io } from './shared.js';
import { PKG } from './pkg.js';

const STORAGE_HELP = 'postgres://..., redis://... or dynamodb://TABLE?region=...&endpoint=...';

/** `--storage`, or the storage URL in LEASEHOLD_STORAGE, the variable workers open theirs from. */
function storageOption(): Option {
  return new Option('--storage <url>', STORAGE_HELP).env(STORAGE_ENV).makeOptionMandatory();
}

function observeOption(): Option {
  return new Option(
    '--observe-ms <ms>',
    "watch each alive member of the group's roster at least this long for heartbeats (0: each for its own lease duration, as workers do; a member that cannot be read back: 12 s)",
  ).default('0');
}

function forceOption(): Option {
  return new Option('--force', 'write even if a worker of the group is live').default(false);
}

const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };

function build(io: Io): Command {
  const program = new Command('leasehold')
    .description('Inspect and operate the leases, checkpoints and leaders of Leasehold consumer groups.')
    .version(version)
    .showHelpAfterError('(run leasehold help for the commands)')
    .exitOverride()
    .configureOutput({ writeOut: (text) => io.out(text), writeErr: (text) => io.err(text) });

  program
    .command('status')
    .description("show a group's members and their liveness, its leases with their owners' liveness, and its leader")
    .addOption(storageOption())
    .requiredOption('--group <name>', 'the consumer group')
    .option('--json', 'print JSON (one document per screen, one line each with --watch)', false)
    .option('--watch', 'refresh in place until interrupted', false)
    .option('--interval-ms <ms>', 'pause between screens with --watch', '2000')
    .option('--iterations <n>', 'with --watch, stop after this many screens')
    .option('--observe-ms <ms>', 'watch the roster this long before the first screen, so that members that stopped heartbeating show as expired', '0')
    .option('--member-rows <n>', 'show at most this many members in the table, those not alive, the leader and those asking for handoffs first, and count the others (--json gives every member)', '50')
    .action(async (options: { storage: string; group: string; json: boolean; watch: boolean; intervalMs: string; iterations?: string; observeMs: string; memberRows: string }) => {
      await status(
        {
          storage: options.storage,
          group: options.group,
          json: options.json,
          watch: options.watch,
          intervalMs: parseCount('--interval-ms', options.intervalMs, 1),
          iterations: options.iterations === undefined ? undefined : parseCount('--iterations', options.iterations, 1),
          observeMs: parseCount('--observe-ms', options.observeMs, 0),
          memberRows: parseCount('--member-rows', options.memberRows, 1),
        },
        io,
      );
    });

  program
    .command('dashboard')
    .description("serve a live web page of a group: members and their liveness, leases, the shard lineage and a timeline of changes (read-only unless --allow-actions)")
    .addOption(storageOption())
    .requiredOption('--group <name>', 'the consumer group')
    .option('--host <host>', 'the address to listen on; another than 127.0.0.1, ::1 or localhost needs --token', '127.0.0.1')
    .option('--port <n>', 'the port to listen on (0: a free port)', '8740')
    .option('--interval-ms <ms>', 'how often the group is read, whatever the number of open pages (100 to 60000)', '1000')
    .option('--stall-ms <ms>', 'show a held shard stalled once its checkpoint stood this long while others moved', '60000')
    .addOption(new Option('--token <token>', 'a secret every request must carry (?token= once, then a cookie); needed on a host other than loopback').env('LEASEHOLD_DASHBOARD_TOKEN'))
    .option('--allow-actions', 'offer member remove, rewind and checkpoint set on the page, through the commands of the same name and their guards', false)
    .action(async (options: { storage: string; group: string; host: string; port: string; intervalMs: string; stallMs: string; token?: string; allowActions: boolean }) => {
      await dashboard(
        {
          storage: options.storage,
          group: options.group,
          host: options.host,
          port: parsePort(options.port),
          intervalMs: parseCount('--interval-ms', options.intervalMs, 0),
          stallMs: parseCount('--stall-ms', options.stallMs, 1),
          token: options.token,
          allowActions: options.allowActions,
        },
        io,
      );
    });

  const checkpoint = program.command('checkpoint').description("move a lease's checkpoint by hand (refused while the group is live)");
  checkpoint
    .command('set')
    .description('set the checkpoint of one lease to a position')
    .addOption(storageOption())
    .requiredOption('--group <name>', 'the consumer group')
    .requiredOption('--lease <key>', 'the lease (shard id)')
    .requiredOption('--position <position>', 'the new checkpoint: a sequence number or TRIM_HORIZON, LATEST, AT_TIMESTAMP:<ms>, SHARD_END')
    .option('--reopen-finished', 'move the checkpoint of a finished (SHARD_END) lease too: its shard is read again, after its children', false)
    .addOption(forceOption())
    .addOption(observeOption())
    .action(async (options: { storage: string; group: string; lease: string; position: string; reopenFinished: boolean; force: boolean; observeMs: string }) => {
      await checkpointSet({ ...options, observeMs: parseCount('--observe-ms', options.observeMs, 0) }, io);
    });
  checkpoint
    .command('reset')
    .description('set the checkpoint of one lease, or of every lease of the group, to TRIM_HORIZON or LATEST (finished leases are left alone)')
    .addOption(storageOption())
    .requiredOption('--group <name>', 'the consumer group')
    .option('--lease <key>', 'only this lease (default: every lease of the group)')
    .option('--to <position>', 'TRIM_HORIZON, LATEST or AT_TIMESTAMP:<ms>', 'TRIM_HORIZON')
    .addOption(forceOption())
    .addOption(observeOption())
    .action(async (options: { storage: string; group: string; lease?: string; to: string; force: boolean; observeMs: string }) => {
      await checkpointReset({ ...options, lease: options.lease, observeMs: parseCount('--observe-ms', options.observeMs, 0) }, io);
    });

  program
    .command('rewind')
    .description("move a live group's checkpoints back to a time, to the stream's start or to a position of one shard, while its workers run (a dry run unless --apply)")
    .addOption(storageOption())
    .requiredOption('--group <name>', 'the consumer group')
    .option('--stream <name>', 'only the leases of this stream, in a group that reads several (keys <stream>:<shard>)')
    .option('--shard <id>', 'only this shard (repeat for more; default: every lease)', (value: string, previous: string[]) => [...previous, value], [] as string[])
    .requiredOption('--to <target>', 'an ISO time (2024-05-01T10:00:00Z), trim-horizon, latest, or a sequence number of the one --shard (the records after it)')
    .option('--apply', 'write the rewind, then wait until every shard moved', false)
    .option('--timeout-ms <ms>', 'with --apply, how long to wait for every shard to move before exiting with 1', '120000')
    .option('--json', 'print one JSON document: the plan, and with --apply the progress', false)
    .action(async (options: { storage: string; group: string; stream?: string; shard: string[]; to: string; apply: boolean; timeoutMs: string; json: boolean }) => {
      await rewind(
        {
          storage: options.storage,
          group: options.group,
          stream: options.stream,
          shards: options.shard,
          to: options.to,
          apply: options.apply,
          timeoutMs: parseCount('--timeout-ms', options.timeoutMs, 0),
          json: options.json,
        },
        io,
      );
    });

  const lease = program.command('lease').description('delete a lease, or create one again (refused while the group is live)');
  lease
    .command('delete')
    .description('delete one lease: one that cannot be read back, or of a shard gone from the stream')
    .addOption(storageOption())
    .requiredOption('--group <name>', 'the consumer group')
    .requiredOption('--key <key>', 'the lease (shard id)')
    .option('--at-version <n>', 'the stored version to delete at: needed for a lease that cannot be read back')
    .option('--unfinished', 'delete a lease whose shard is not finished: that shard is not read again unless its lease is created again', false)
    .addOption(forceOption())
    .addOption(observeOption())
    .action(async (options: { storage: string; group: string; key: string; atVersion?: string; unfinished: boolean; force: boolean; observeMs: string }) => {
      const version = options.atVersion === undefined ? undefined : parseCount('--at-version', options.atVersion, 1);
      await leaseDelete({ ...options, version, observeMs: parseCount('--observe-ms', options.observeMs, 0) }, io);
    });
  lease
    .command('create')
    .description('create one lease (again, after a delete) at a checkpoint, with its parents')
    .addOption(storageOption())
    .requiredOption('--group <name>', 'the consumer group')
    .requiredOption('--key <key>', 'the lease (shard id)')
    .requiredOption('--checkpoint <position>', 'where its shard is read from: a sequence number or TRIM_HORIZON, LATEST, AT_TIMESTAMP:<ms>, SHARD_END')
    .option('--parent <key>', "a parent shard's lease key (repeat for a merge)", (value: string, previous: string[]) => [...previous, value], [] as string[])
    .addOption(forceOption())
    .addOption(observeOption())
    .action(async (options: { storage: string; group: string; key: string; checkpoint: string; parent: string[]; force: boolean; observeMs: string }) => {
      await leaseCreate({ ...options, parents: options.parent, observeMs: parseCount('--observe-ms', options.observeMs, 0) }, io);
    });

  const member = program.command('member').description("list a group's roster, or remove a dead or corrupt member");
  member
    .command('list')
    .description('list the members as stored: worker id, version, incarnation, status, lease duration, held count, leases naming it')
    .addOption(storageOption())
    .requiredOption('--group <name>', 'the consumer group')
    .option('--json', 'print JSON', false)
    .action(async (options: { storage: string; group: string; json: boolean }) => {
      await memberList(options, io);
    });
  member
    .command('remove')
    .description('remove one member at its stored version: a dead one at once, an alive one only once watched not heartbeating for its lease duration')
    .addOption(storageOption())
    .requiredOption('--group <name>', 'the consumer group')
    .requiredOption('--worker <id>', 'the worker id of the member')
    .requiredOption('--at-version <n>', 'the stored version to remove at (leasehold member list; for a member that cannot be read back, as stored in the backend)')
    .addOption(observeOption())
    .action(async (options: { storage: string; group: string; worker: string; atVersion: string; observeMs: string }) => {
      await memberRemove(
        {
          storage: options.storage,
          group: options.group,
          worker: options.worker,
          version: parseCount('--at-version', options.atVersion, 1),
          observeMs: parseCount('--observe-ms', options.observeMs, 0),
        },
        io,
      );
    });

  program
    .command('setup')
    .description('set a backend up for Leasehold: the Postgres tables and their schema version, the DynamoDB table (Redis needs nothing); harmless when done')
    .addOption(storageOption())
    .option('--json', 'print what was done as JSON', false)
    .action(async (options: { storage: string; json: boolean }) => {
      await setup(options, io);
    });

  program
    .command('copy')
    .description("copy a group's leases, checkpoints and leader record to another backend, then verify the copy (members are live state and are not copied)")
    .requiredOption('--from <url>', `the source: ${STORAGE_HELP}`)
    .requiredOption('--to <url>', 'the target, in the same forms')
    .requiredOption('--group <name>', 'the consumer group')
    .option('--replace', "overwrite the group's records in the target where they differ from the source", false)
    .option('--setup', 'set the target up first, as leasehold setup does', false)
    .addOption(forceOption())
    .addOption(observeOption())
    .action(async (options: { from: string; to: string; group: string; replace: boolean; setup: boolean; force: boolean; observeMs: string }) => {
      await copy({ ...options, observeMs: parseCount('--observe-ms', options.observeMs, 0) }, io);
    });

  const kclHelp = {
    table: 'the KCL application\'s lease table in DynamoDB (by default named after the application)',
    region: 'the region of the KCL table (default: the AWS default chain)',
    endpoint: 'an endpoint for the KCL table (an emulator, a VPC endpoint)',
    observe: 'with --apply, watch the KCL table this long for KCL workers that still renew leases (KCL renews every third of its failover time, 10 s by default)',
  };
  interface KclCommandLine {
    storage: string;
    group: string;
    kclTable: string;
    kclRegion?: string;
    kclEndpoint?: string;
    apply: boolean;
    observeMs: string;
    json: boolean;
  }
  const kclOf = (options: KclCommandLine) => ({
    storage: options.storage,
    group: options.group,
    kcl: { table: options.kclTable, region: options.kclRegion, endpoint: options.kclEndpoint },
    apply: options.apply,
    observeMs: parseCount('--observe-ms', options.observeMs, 1),
    json: options.json,
  });

  program
    .command('import')
    .description('bring checkpoints kept by another consumer library into a Leasehold group')
    .command('kcl')
    .description("write a KCL application's leases and checkpoints (KCL 1.x, 2.x, 3.x lease tables, one stream or several) as a Leasehold group's: a dry run unless --apply")
    .requiredOption('--kcl-table <name>', kclHelp.table)
    .option('--kcl-region <region>', kclHelp.region)
    .option('--kcl-endpoint <url>', kclHelp.endpoint)
    .addOption(storageOption())
    .requiredOption('--group <name>', 'the Leasehold consumer group to write (it must not have these leases yet)')
    .option('--stream <name>', 'only the leases of this stream of a multi-stream KCL table, by stream name or account:stream:epoch (repeat for more; default: every stream)', (value: string, previous: string[]) => [...previous, value], [] as string[])
    .option('--kcl-initial-timestamp <time>', "the KCL application's AT_TIMESTAMP initial position (ISO time or milliseconds since the epoch), for leases KCL keeps at AT_TIMESTAMP")
    .option('--apply', 'write the leases, once the KCL workers are seen stopped and the group has no live member', false)
    .option('--observe-ms <ms>', kclHelp.observe, '10000')
    .option('--json', 'print the plan as one JSON document', false)
    .action(async (options: KclCommandLine & { stream: string[]; kclInitialTimestamp?: string }) => {
      await importKcl({ ...kclOf(options), streams: options.stream, initialTimestampMs: parseTime('--kcl-initial-timestamp', options.kclInitialTimestamp) }, io);
    });

  program
    .command('export')
    .description("write a Leasehold group's leases and checkpoints in another consumer library's form, to roll back")
    .command('kcl')
    .description("write a Leasehold group's leases and checkpoints into a KCL lease table (created if absent): a dry run unless --apply")
    .addOption(storageOption())
    .requiredOption('--group <name>', 'the Leasehold consumer group to read')
    .requiredOption('--kcl-table <name>', kclHelp.table)
    .option('--kcl-region <region>', kclHelp.region)
    .option('--kcl-endpoint <url>', kclHelp.endpoint)
    .option('--replace', 'overwrite leases of the KCL table that differ from the group\'s, and delete those the group does not have', false)
    .option('--apply', 'write the KCL table, once the group has no live member and no KCL worker renews in the table', false)
    .option('--observe-ms <ms>', kclHelp.observe, '10000')
    .option('--json', 'print the plan as one JSON document', false)
    .action(async (options: KclCommandLine & { replace: boolean }) => {
      await exportKcl({ ...kclOf(options), replace: options.replace }, io);
    });

  program
    .command('doctor')
    .description("check connectivity, tables, permissions and the settings safety needs; with --group, that group's leases too")
    .addOption(storageOption())
    .option('--group <name>', 'also check this group: corrupt leases and members, dead members leases still name, stalled shards, records of a newer Leasehold')
    .option('--json', 'print the checklist as JSON', false)
    .action(async (options: { storage: string; group?: string; json: boolean }) => {
      await doctor(options, io);
    });

  return program;
}

/** A TCP port, 0 to 65535, or an `InvalidConfigError` naming the value. */
function parsePort(value: string): number {
  const port = parseCount('--port', value, 0);
  if (port > 65_535) throw new InvalidConfigError(`[${PKG}] --port must be from 0 to 65535, got ${describeValue(value)}`);
  return port;
}

/** An ISO time or milliseconds since the epoch, or an `InvalidConfigError` naming the option. */
function parseTime(option: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const ms = /^\d+$/.test(value) ? Number(value) : Date.parse(value);
  if (!Number.isSafeInteger(ms) || ms < 0) throw new InvalidConfigError(`[${PKG}] ${option} must be an ISO time or milliseconds since the epoch, got ${describeValue(value)}`);
  return ms;
}

/**
 * Runs the command line on `argv` (without `node` and the script) and resolves to the exit code: 0 on
 * success, 1 on a failure or refusal, 2 on a bad command line. Errors are printed as one line on `io.err`.
 */
export async function run(argv: readonly string[], io: Io): Promise<number> {
  const program = build(io);
  try {
    await program.parseAsync([...argv], { from: 'user' });
    return EXIT.ok;
  } catch (error) {
    if (error instanceof CommanderError) {
      // Help and version exit with 0; commander has already printed its message for the rest.
      return error.exitCode === 0 ? EXIT.ok : EXIT.usage;
    }
    io.err(`${errorLine(error)}\n`);
    return exitCodeOf(error);
  }
}
