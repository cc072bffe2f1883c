import { InvalidInputError, describeValue } from './errors.js';
import { Checkpoint, type Position } from './storage.js';

const NUMERIC = /^(\d+)(?::(\d+))?$/;
const WHOLE_RECORD = 2n ** 64n;

/**
 * Compares two positions of one partition: `TRIM_HORIZON` first, then `AT_TIMESTAMP:<ms>` by time, then
 * numeric positions (`<sequence>` or `<sequence>:<subSequence>`, compared as unbounded integers, so
 * Kinesis's 128-bit sequence numbers order correctly; a bare `<sequence>` means the whole record, after
 * every sub-sequence of it), and `SHARD_END` last. `LATEST` cannot be ordered
 * against a real position and is refused. Sources with other formats bring their own comparator.
 */
export function compareNumericPositions(a: Position, b: Position): number {
  const ra = rank(a);
  const rb = rank(b);
  if (ra.kind !== rb.kind) return ra.kind - rb.kind;
  if (ra.major !== rb.major) return ra.major < rb.major ? -1 : 1;
  if (ra.minor !== rb.minor) return ra.minor < rb.minor ? -1 : 1;
  return 0;
}

function rank(position: Position): { kind: number; major: bigint; minor: bigint } {
  if (position === Checkpoint.TRIM_HORIZON) return { kind: 0, major: 0n, minor: 0n };
  if (position === Checkpoint.SHARD_END) return { kind: 3, major: 0n, minor: 0n };
  const timestamp = Checkpoint.timestampOf(position);
  if (timestamp !== undefined) return { kind: 1, major: BigInt(timestamp), minor: 0n };
  const match = NUMERIC.exec(position);
  if (match) return { kind: 2, major: BigInt(match[1] as string), minor: match[2] === undefined ? WHOLE_RECORD : BigInt(match[2]) };
  throw new InvalidInputError(`[core] position ${describeValue(position)} cannot be compared`);
}
