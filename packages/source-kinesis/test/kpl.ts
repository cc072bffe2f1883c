import { createRequire } from 'node:module';

/** The KPL-format encoder of aws-kinesis-agg (magic number, protobuf, MD5 trailer), typed for the tests. */
interface RecordAggregator {
  addUserRecord(record: { partitionKey: string; data: Buffer; explicitHashKey?: string }): void;
  build(): { partitionKey: string; data: Buffer } | undefined;
}
const { RecordAggregator } = createRequire(import.meta.url)('aws-kinesis-agg') as {
  RecordAggregator: new () => RecordAggregator;
};

/** One aggregated record holding `texts` as user records, keyed `pk-<i>`. */
export function aggregate(texts: string[], explicitHashKey?: string): { partitionKey: string; data: Buffer } {
  const aggregator = new RecordAggregator();
  texts.forEach((text, i) =>
    aggregator.addUserRecord({
      partitionKey: `pk-${i}`,
      data: Buffer.from(text),
      ...(explicitHashKey === undefined ? {} : { explicitHashKey }),
    }),
  );
  return aggregator.build()!;
}
