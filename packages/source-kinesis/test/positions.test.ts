import { InvalidInputError } from '@leasehold/core';
import { describe, expect, it } from 'vitest';
import { kinesisPosition, kinesisPositionParts } from '../src/positions.js';

const SEQ = '49655802218836443958227395874624049733543284513093844994';

describe('Kinesis positions as tools write and read them', () => {
  it('a whole record is its sequence number, and a sub-record of an aggregate is <sequence>:<sub>', () => {
    expect(kinesisPosition(SEQ)).toBe(SEQ);
    expect(kinesisPosition(SEQ, 0)).toBe(`${SEQ}:0`);
    expect(kinesisPosition(SEQ, 12)).toBe(`${SEQ}:12`);
  });

  it('a position reads back as its record and sub-sequence, and a sentinel as no record', () => {
    expect(kinesisPositionParts(`${SEQ}:3`)).toEqual({ sequenceNumber: SEQ, subSequenceNumber: 3 });
    expect(kinesisPositionParts(SEQ)).toEqual({ sequenceNumber: SEQ, subSequenceNumber: undefined });
    for (const sentinel of ['TRIM_HORIZON', 'LATEST', 'SHARD_END', 'AT_TIMESTAMP:1714557600000']) expect(kinesisPositionParts(sentinel)).toBeUndefined();
  });

  it('what is not a sequence number or a sub-sequence of at most 10 digits is refused, naming it', () => {
    expect(() => kinesisPosition('12a')).toThrow(new InvalidInputError('[source-kinesis] sequence number "12a" is not a Kinesis sequence number'));
    expect(() => kinesisPosition(SEQ, -1)).toThrow(InvalidInputError);
    expect(() => kinesisPosition(SEQ, 10_000_000_000)).toThrow(/sub-sequence number "10000000000" of record "49655802/);
    expect(() => kinesisPositionParts('later')).toThrow(/position "later" is not a sequence number/);
  });
});
