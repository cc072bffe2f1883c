/**
 * The size DynamoDB bills for a group's roster item, computed from the layout of
 * `@leasehold/storage-dynamodb` (its `schema.ts`): the keys `pk` (the group) and `sk` (`roster`), `hv`
 * (the group's version counter), and per member `v:<workerId>` (its version, a number) and `m:<workerId>`
 * (a map of `s`, the member state JSON of `encodeMemberState`, and `w`, a 16-character write id).
 *
 * DynamoDB's item size rules: an attribute counts its name's UTF-8 bytes plus its value; a string its
 * UTF-8 bytes; a number one byte per two significant digits plus 1 (see `numberBytes`); a map 3 bytes, plus per
 * entry 1 byte, its name and its value. A write of an item costs ceil(size / 1 KB) write units (an
 * UpdateItem is billed on the larger of the item before and after); a strongly consistent read
 * ceil(size / 4 KB) read units.
 */
import { type MemberRecord } from '../src/index.js';
import { encodeMemberState } from '../src/adapter.js';

const bytes = (text: string): number => Buffer.byteLength(text, 'utf8');

/**
 * A DynamoDB number's billed bytes: one byte per two digits, the digits paired from the decimal point (a
 * base-100 digit each) with the pairs of zeros at either end trimmed, plus one byte. 12 and 100,000 are 2
 * bytes, 123 and 12,345 are 3 and 4.
 */
export function numberBytes(value: number): number {
  const [integer = '', fraction = ''] = String(Math.abs(value)).split('.');
  const pairs = `${integer.length % 2 === 1 ? '0' : ''}${integer}${fraction}${fraction.length % 2 === 1 ? '0' : ''}`.match(/../g) ?? [];
  while (pairs[0] === '00') pairs.shift();
  while (pairs[pairs.length - 1] === '00') pairs.pop();
  return Math.max(1, pairs.length) + 1 + (value < 0 ? 1 : 0);
}

/** The roster item's bytes without its members: its key and `hv`. */
export function rosterBaseBytes(group: string, highVersion: number): number {
  return bytes('pk') + bytes(group) + bytes('sk') + bytes('roster') + bytes('hv') + numberBytes(highVersion);
}

/** One member's bytes on the roster item: `v:<workerId>` (its version) and `m:<workerId>` (its state and write id). */
export function memberEntryBytes(member: MemberRecord, id: string = member.workerId): number {
  const state = encodeMemberState(member);
  return bytes(`v:${id}`) + numberBytes(member.version) + bytes(`m:${id}`) + 3 + (1 + bytes('s') + bytes(state)) + (1 + bytes('w') + 16);
}

/** The roster item's size in bytes, with `idOf` giving each member's worker id (to model other id lengths). */
export function rosterItemBytes(group: string, members: readonly MemberRecord[], idOf: (member: MemberRecord, index: number) => string = (member) => member.workerId): number {
  const highVersion = Math.max(0, ...members.map((member) => member.version));
  return members.reduce((size, member, index) => size + memberEntryBytes(member, idOf(member, index)), rosterBaseBytes(group, highVersion));
}

/** Write units of one write of an item of `size` bytes. */
export const writeUnits = (size: number): number => Math.ceil(size / 1024);
/** Read units of one strongly consistent read of an item of `size` bytes. */
export const readUnits = (size: number): number => Math.ceil(size / 4096);
