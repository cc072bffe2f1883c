/**
 * The size DynamoDB bills for a group's roster item, computed from the layout of
 * `@leasehold/storage-dynamodb` (its `schema.ts`): the keys `pk` (the group) and `sk` (`roster`), `hv`
 * (the group's version counter), and per member `v:<workerId>` (its version, a number) and `m:<workerId>`
 * (a map of `s`, the member state JSON of `encodeMemberState`, and `w`, a 16-character write id).
 *
 * DynamoDB's item size rules: an attribute counts its name's UTF-8 bytes plus its value; a string its
 * UTF-8 bytes; a number (its significant digits + 1) / 2 rounded up, plus 1; a map 3 bytes, plus per
 * entry 1 byte, its name and its value. A write of an item costs ceil(size / 1 KB) write units (an
 * UpdateItem is billed on the larger of the item before and after); a strongly consistent read
 * ceil(size / 4 KB) read units.
 */
import { type MemberRecord } from '../src/index.js';
import { encodeMemberState } from '../src/adapter.js';

const bytes = (text: string): number => Buffer.byteLength(text, 'utf8');

function numberBytes(value: number): number {
  const digits = String(Math.abs(value)).replace('.', '').replace(/^0+/, '').replace(/0+$/, '').length || 1;
  return Math.ceil((digits + 1) / 2) + 1;
}

/** The roster item's size in bytes, with `idOf` giving each member's worker id (to model other id lengths). */
export function rosterItemBytes(group: string, members: readonly MemberRecord[], idOf: (member: MemberRecord, index: number) => string = (member) => member.workerId): number {
  const highVersion = Math.max(0, ...members.map((member) => member.version));
  let size = bytes('pk') + bytes(group) + bytes('sk') + bytes('roster') + bytes('hv') + numberBytes(highVersion);
  members.forEach((member, index) => {
    const id = idOf(member, index);
    size += bytes(`v:${id}`) + numberBytes(member.version);
    const state = encodeMemberState(member);
    size += bytes(`m:${id}`) + 3 + (1 + bytes('s') + bytes(state)) + (1 + bytes('w') + 16);
  });
  return size;
}

/** Write units of one write of an item of `size` bytes. */
export const writeUnits = (size: number): number => Math.ceil(size / 1024);
/** Read units of one strongly consistent read of an item of `size` bytes. */
export const readUnits = (size: number): number => Math.ceil(size / 4096);
