/**
 * What every scenario starts from, written once: a Kinesis client, a producer over the scenario's keys,
 * and a cluster of worker processes with the lease timings the scenarios share (a 3 s lease, a take every
 * half second, 50 records a call). Each scenario adds the pacing it is about.
 */
import type { KinesisClient } from '@aws-sdk/client-kinesis';
import { Cluster, type ClusterOptions } from './cluster.js';
import { kinesisClient, type KinesisEndpoint } from './kinesis.js';
import { Producer } from './producer.js';

/** Where a scenario runs: the Kinesis endpoint, the storage URL, and the stream, group and keys of its own. */
export interface ScenarioPlace {
  readonly kinesis: KinesisEndpoint;
  readonly storageUrl: string;
  readonly streamName: string;
  readonly group: string;
  readonly keys: readonly string[];
}

/** The options a scenario sets itself; they go over the shared timings. */
export type ScenarioPacing = Pick<ClusterOptions, 'shardSyncIntervalMs' | 'batchDelayMs'> & Partial<ClusterOptions>;

/** The client, producer and cluster of a scenario at `place`; nothing is started. */
export function setUpScenario(place: ScenarioPlace, pacing: ScenarioPacing): { client: KinesisClient; producer: Producer; cluster: Cluster } {
  const client = kinesisClient(place.kinesis);
  const producer = new Producer(client, place.streamName, place.keys);
  const cluster = new Cluster({
    streamName: place.streamName,
    kinesisEndpoint: place.kinesis.endpoint,
    region: place.kinesis.region,
    storageUrl: place.storageUrl,
    group: place.group,
    leaseDurationMs: 3_000,
    takeIntervalMs: 500,
    maxRecordsPerCall: 50,
    ...pacing,
  });
  return { client, producer, cluster };
}
