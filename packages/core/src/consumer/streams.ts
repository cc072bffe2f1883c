/**
 * Multi-stream groups (DESIGN section 5, "Many streams in one group"): one group consumes several
 * streams, each read through its own source (its own client, account and credentials). A lease key then
 * names its stream: `<streamId>:<shardId>`, as KCL's multi-stream leases do. Each stream's shard sync sees
 * only that stream's leases, and the runtime reads each lease through its stream's source, so the rest of
 * the runtime (pumps, ordering across resharding, the coordinator) works on keys it never has to parse.
 */
import { describeValue, InvalidConfigError, SourceError } from '../errors.js';
import { optionKeys, refuseUnknownOptions } from '../known-options.js';
import type { ReadOptions, ShardBatch, ShardInfo, ShardSource, SourceRecord } from '../source.js';
import type { CheckpointStorage, LeaseListing, Position } from '../storage.js';
import { STREAM_SEPARATOR } from '../stream-keys.js';
import type { ShardSyncStorage } from './leader-duties.js';
import type { InitialPosition, StreamList, StreamSpec } from './options.js';

const PKG = 'core';

const STREAM_SPEC_KEYS = optionKeys<StreamSpec>({ id: true, source: true, initialPosition: true });

const STREAM_ID = /^[A-Za-z0-9._\-/:@+=]{1,512}$/;

/** Checks a stream id: 1 to 512 of the characters of ARNs and KCL stream identifiers. */
export function validateStreamId(id: unknown): string {
  if (typeof id !== 'string' || !STREAM_ID.test(id)) {
    throw new InvalidConfigError(`[${PKG}] stream id ${describeValue(id)} is not valid: use 1 to 512 of A-Z a-z 0-9 . _ - / : @ + =`);
  }
  return id;
}

/**
 * A stream's source as the runtime sees it in a multi-stream group: every shard id, parent and child is
 * the lease key (`<streamId>:<shardId>`), so that a pump, the shard sync and the lease table all speak in
 * keys; calls reach the stream's own source with its own shard ids.
 */
export class StreamSource<R extends SourceRecord = SourceRecord> implements ShardSource<R> {
  readonly streamId: string;
  readonly inner: ShardSource<R>;
  /** The stream's own initial position, if its spec gave one. */
  readonly initialPosition: InitialPosition | undefined;
  /** The inner source's: its hints are read back by it, under the shard's own id. */
  readonly resumeHintMaxAgeMs: number | undefined;
  readonly #prefix: string;

  constructor(streamId: string, inner: ShardSource<R>, initialPosition?: InitialPosition) {
    this.streamId = validateStreamId(streamId);
    this.inner = inner;
    this.initialPosition = initialPosition;
    this.resumeHintMaxAgeMs = inner.resumeHintMaxAgeMs;
    this.#prefix = `${streamId}${STREAM_SEPARATOR}`;
    if (inner.isShardGone) this.isShardGone = (key, options) => (inner.isShardGone as NonNullable<ShardSource['isShardGone']>)(this.#shard(key), options);
  }

  /** Whether a lease key belongs to this stream. */
  owns(leaseKey: string): boolean {
    return leaseKey.startsWith(this.#prefix) && !leaseKey.slice(this.#prefix.length).includes(STREAM_SEPARATOR) && leaseKey.length > this.#prefix.length;
  }

  async listShards(options?: ReadOptions): Promise<ShardInfo[]> {
    const shards = await this.inner.listShards(options);
    return shards.map((shard) => this.#keyed(shard));
  }

  async *read(leaseKey: string, from: Position, options?: ReadOptions): AsyncIterable<ShardBatch<R>> {
    for await (const batch of this.inner.read(this.#shard(leaseKey), from, options)) {
      if (batch.kind !== 'end') {
        yield batch;
        continue;
      }
      // Children and their parents are lease keys too, so the pump finds each child's other parents' leases.
      const childShards = batch.childShards?.map((child) => this.#keyed(child));
      yield { ...batch, childShardIds: batch.childShardIds.map((child) => this.#key(child)), ...(childShards ? { childShards } : {}) };
    }
  }

  comparePositions(a: Position, b: Position): number {
    return this.inner.comparePositions(a, b);
  }

  isShardGone?(leaseKey: string, options?: ReadOptions): Promise<boolean>;

  #keyed(shard: ShardInfo): ShardInfo {
    return { ...shard, shardId: this.#key(shard.shardId), parentShardIds: shard.parentShardIds.map((parent) => this.#key(parent)) };
  }

  #key(shardId: string): string {
    if (shardId.includes(STREAM_SEPARATOR) || shardId.length === 0) {
      throw new SourceError('ERR_BAD_SHARD_ID', `[${PKG}] stream ${describeValue(this.streamId)} named shard ${describeValue(shardId)}: in a multi-stream group shard ids must be non-empty and contain no ${STREAM_SEPARATOR}`);
    }
    return this.#prefix + shardId;
  }

  #shard(leaseKey: string): string {
    if (!this.owns(leaseKey)) throw new SourceError('ERR_SHARD_NOT_FOUND', `[${PKG}] lease ${describeValue(leaseKey)} is not a shard of stream ${describeValue(this.streamId)}`);
    return leaseKey.slice(this.#prefix.length);
  }
}

/** Resolves a stream list to sources keyed by stream id; refuses duplicates and bad ids with the value named. */
export async function resolveStreams<R extends SourceRecord>(list: StreamList<R>, signal?: AbortSignal): Promise<Map<string, StreamSource<R>>> {
  const specs = typeof list === 'function' ? await list() : list;
  if (!Array.isArray(specs)) throw new InvalidConfigError(`[${PKG}] streams must be an array of { id?, source }, got ${describeValue(specs)}`);
  const streams = new Map<string, StreamSource<R>>();
  for (const spec of specs as readonly StreamSpec<R>[]) {
    const source = (spec as Partial<StreamSpec<R>> | null)?.source;
    if (!source || typeof source.read !== 'function' || typeof source.listShards !== 'function') {
      throw new InvalidConfigError(`[${PKG}] a stream's source must implement ShardSource, got ${describeValue(source)}`);
    }
    refuseUnknownOptions(PKG, 'a stream of streams', spec, STREAM_SPEC_KEYS);
    let id = spec.id;
    if (id === undefined) {
      if (typeof source.streamIdentity !== 'function') {
        throw new InvalidConfigError(`[${PKG}] a stream needs an id: its source has no streamIdentity() to name it`);
      }
      id = await source.streamIdentity({ signal });
    }
    validateStreamId(id);
    if (streams.has(id)) throw new InvalidConfigError(`[${PKG}] stream id ${describeValue(id)} is listed twice`);
    streams.set(id, new StreamSource(id, source, spec.initialPosition));
  }
  return streams;
}

/**
 * The lease table as one stream's shard sync sees it: the round's listing (read once for every stream)
 * narrowed to the stream's leases; every other call goes to the store itself.
 */
export function streamView(
  storage: CheckpointStorage,
  listing: LeaseListing,
  stream: StreamSource<SourceRecord>,
): ShardSyncStorage {
  const narrowed: LeaseListing = {
    leases: listing.leases.filter((lease) => stream.owns(lease.leaseKey)),
    corrupt: listing.corrupt.filter((error) => {
      const leaseKey = (error as { leaseKey?: unknown }).leaseKey;
      return typeof leaseKey === 'string' && stream.owns(leaseKey);
    }),
  };
  return {
    contractVersion: storage.contractVersion,
    listLeases: () => Promise.resolve(narrowed),
    getRoster: (group) => storage.getRoster(group),
    createLease: (lease, options) => storage.createLease(lease, options),
    deleteLease: (group, leaseKey, version) => storage.deleteLease(group, leaseKey, version),
    getLease: (group, leaseKey) => storage.getLease(group, leaseKey),
    updateLeases: (group, updates) => storage.updateLeases(group, updates),
  };
}
