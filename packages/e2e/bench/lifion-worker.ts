/**
 * The peer baseline: a lifion-kinesis consumer (polling mode, DynamoDB leases) as a worker process that
 * reports what it processes in the same JSON lines as src/worker.ts, so the same ledger judges both.
 *
 *   node --import tsx bench/lifion-worker.ts --stream S --kinesis-endpoint URL --dynamodb-endpoint URL --table T --group G --worker-id W
 */
import Kinesis from 'lifion-kinesis';
import { parseArgs } from 'node:util';
import { now } from '../src/reports.js';
import { memoryFigures } from '../src/stats.js';

const { values: args } = parseArgs({
  options: {
    stream: { type: 'string' },
    'kinesis-endpoint': { type: 'string' },
    'dynamodb-endpoint': { type: 'string' },
    table: { type: 'string' },
    group: { type: 'string' },
    'worker-id': { type: 'string' },
    // With a positive value: a `stats` report this often, as src/worker.ts makes (its memory; no runtime counts).
    'stats-interval-ms': { type: 'string', default: '0' },
  },
});
const workerId = args['worker-id']!;
const write = (report: Record<string, unknown>): void => {
  process.stdout.write(`${JSON.stringify({ ...report, worker: workerId, at: now() })}\n`);
};
process.stdin.on('end', () => process.exit(1));
process.stdin.resume();

const credentials = { accessKeyId: 'local', secretAccessKey: 'local', region: 'us-east-1' };
const consumer = new Kinesis({
  ...credentials,
  endpoint: args['kinesis-endpoint'],
  streamName: args.stream!,
  consumerGroup: args.group,
  createStreamIfNeeded: false,
  initialPositionInStream: 'TRIM_HORIZON',
  dynamoDb: { ...credentials, endpoint: args['dynamodb-endpoint'], tableName: args.table },
  leaseAcquisitionInterval: 500,
  leaseAcquisitionRecoveryInterval: 500,
  noRecordsPollDelay: 200,
  pollDelay: 0,
  limit: 100,
  shouldParseJson: true,
  statsInterval: 3_600_000,
  logger: { debug: () => undefined, warn: () => undefined, error: (...parts: unknown[]) => process.stderr.write(`${parts.map(String).join(' ')}\n`) },
});
consumer.on('data', (data: { shardId: string; records: { data: { key: string; seq: number }; sequenceNumber: string }[] }) => {
  for (const record of data.records) {
    write({ type: 'record', shardId: data.shardId, fencingToken: 0, key: record.data.key, seq: record.data.seq, position: record.sequenceNumber });
  }
});
consumer.on('error', (error: Error) => process.stderr.write(`lifion error: ${error.message}\n`));
process.on('SIGTERM', () => {
  consumer.stopConsumer();
  write({ type: 'stopped' });
  process.exit(0);
});
const statsIntervalMs = Number(args['stats-interval-ms']);
if (statsIntervalMs > 0) {
  setInterval(() => {
    write({
      type: 'stats',
      collected: typeof (globalThis as { gc?: unknown }).gc === 'function',
      ...memoryFigures(),
      resources: process.getActiveResourcesInfo().length,
      shards: 0,
      diagnostics: {},
    });
  }, statsIntervalMs).unref();
}

await consumer.startConsumer();
write({ type: 'ready', pid: process.pid });
