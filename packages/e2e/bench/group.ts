/** The systems the end-to-end benchmarks compare, and the group of worker processes each part measures. */
import type { WorkerProcess } from '../src/cluster.js';
import type { WorkerReport } from '../src/reports.js';

export type System = 'leasehold/postgres' | 'leasehold/redis' | 'leasehold/dynamodb' | 'lifion-kinesis';

/** The workers of one measured group, whichever library runs in them. */
export interface Group {
  readonly reports: WorkerReport[];
  start(workerId: string): Promise<WorkerProcess>;
  close(): Promise<void>;
}
