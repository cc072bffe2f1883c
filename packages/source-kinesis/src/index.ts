export { KinesisSource, type KinesisSourceOptions, type EnhancedFanOutOptions } from './kinesis-source.js';
export type { KinesisRecord } from './record.js';
export type { MalformedAggregatePolicy } from './aggregation.js';
export { StreamNotFoundError, ShardNotFoundError, ConsumerNotFoundError, AccessDeniedError, MalformedRecordError } from './errors.js';
export { kinesisPosition, kinesisPositionParts } from './positions.js';
