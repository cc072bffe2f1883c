/**
 * The contract's limits and the checks every adapter runs before it sends anything. Keeping them here
 * means every backend refuses exactly the same input with exactly the same error.
 */
import { describeValue, InvalidInputError } from './errors.js';
import type { LeaseChangeKind, LeaderState, LeaseState, LeaseUpdate, MemberState, NewLease, NewLeader, SubscribeOptions } from './storage.js';
import { leaderStateOf, leaseStateOf, memberStateOf } from './storage.js';

/**
 * The limits of the storage contract, in UTF-8 bytes.
 *
 * - Names (groups, lease keys, worker ids) up to 512 bytes: a Kinesis shard id is about 20, an ARN-based
 *   name a few hundred; 512 leaves room for composite keys while keeping a DynamoDB key (2,048 and 1,024
 *   bytes for partition and sort key) and a Redis key with prefix and hash tag small.
 * - A checkpoint up to 4,096 bytes: a Kinesis sequence number with sub-sequence is under 80; other
 *   sources may store a composite position.
 * - Metadata up to 16 KiB as JSON, so that a whole lease stays far below DynamoDB's 400 KB item and a
 *   batch of 10,000 leases stays a reasonable single statement or script call.
 * - Up to 16 parent keys: a Kinesis merge has 2.
 * - Fields a later core adds (see `LeaseState`) up to 16 KiB as JSON together.
 * - A roster of up to 1,000 members, each member's state up to 2 KiB as JSON (requests, metadata and fields
 *   a later core adds included), with up to 4 handoff requests: a member is one small record of its own
 *   (one DynamoDB write unit per heartbeat), and a whole roster reads back in one call, paginated inside
 *   the adapter where the backend needs it.
 * - Up to 16 worker ids in one `getMembers` call: a watcher's few members and its own; as many in one
 *   roster digest advance.
 * - The worker ids of at least the last 256 roster digest advances kept for `getRosterMoves`: more than a
 *   take tick's announcements in a rolling restart (about 64 a tick at 100 members in the core bench,
 *   most naming one member).
 * - Up to 100 lease keys in one `getLeases` call: DynamoDB's `BatchGetItem` reads at most 100 items, and
 *   a member's portion of a dealt cold start at 100 x 10,000 is 100 leases.
 */
export const limits = {
  maxNameBytes: 512,
  maxCheckpointBytes: 4096,
  maxMetadataBytes: 16 * 1024,
  maxMetadataKeyBytes: 512,
  maxParentKeys: 16,
  maxExtensionBytes: 16 * 1024,
  maxMembers: 1000,
  maxMemberBytes: 2048,
  maxRequests: 4,
  maxWatchedMembers: 16,
  rosterMovesKept: 256,
  maxLeasesPerRead: 100,
} as const;

const LEASE_FIELDS = new Set(['format', 'owner', 'epoch', 'checkpoint', 'parentKeys', 'incarnation', 'metadata', 'group', 'leaseKey', 'version']);
const MEMBER_FIELDS = new Set(['format', 'incarnation', 'leaseDurationMs', 'status', 'held', 'changes', 'requests', 'metadata', 'group', 'workerId', 'version']);
const LEADER_FIELDS = new Set(['format', 'holder', 'term', 'metadata', 'group', 'version']);
const REQUEST_FIELDS = new Set(['leaseKey', 'from']);

const CHANGE_KINDS: readonly LeaseChangeKind[] = ['released', 'handed-off', 'created', 'rewind'];

function byteLength(value: string): number {
  // A UTF-16 code unit is at most 3 UTF-8 bytes, so a short string is certainly within every limit and is
  // not counted (its length stands in); only a string that could exceed a limit is measured exactly.
  return value.length * 3 <= limits.maxNameBytes ? value.length : Buffer.byteLength(value, 'utf8');
}

function checkName(pkg: string, what: string, value: unknown): asserts value is string {
  if (typeof value !== 'string') {
    throw new InvalidInputError(`[${pkg}] ${what} must be a string, got ${describeValue(value)}`);
  }
  if (value.length === 0) throw new InvalidInputError(`[${pkg}] ${what} must not be empty`);
  if (value.includes('\u0000')) {
    throw new InvalidInputError(`[${pkg}] ${what} ${describeValue(value)} contains a NUL character`);
  }
  if (!value.isWellFormed()) {
    throw new InvalidInputError(`[${pkg}] ${what} ${describeValue(value)} is not well-formed Unicode`);
  }
  const bytes = byteLength(value);
  if (bytes > limits.maxNameBytes) {
    throw new InvalidInputError(
      `[${pkg}] ${what} ${describeValue(value)} is ${bytes} bytes long; the limit is ${limits.maxNameBytes}`,
    );
  }
}

/** An array of at most `most` names read in one call, each checked as `checkName` checks one. */
function checkNames(pkg: string, what: string, plural: string, values: unknown, most: number, use = 'may be read at once'): asserts values is readonly string[] {
  if (!Array.isArray(values)) throw new InvalidInputError(`[${pkg}] ${plural} must be an array, got ${describeValue(values)}`);
  if (values.length > most) throw new InvalidInputError(`[${pkg}] at most ${most} ${plural} ${use}, got ${values.length}`);
  for (const value of values) checkName(pkg, what, value);
}

function checkCounter(pkg: string, what: string, value: unknown): asserts value is number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0 || Object.is(value, -0)) {
    throw new InvalidInputError(`[${pkg}] ${what} must be a non-negative safe integer, got ${Object.is(value, -0) ? '-0' : describeValue(value)}`);
  }
}

function checkMetadata(pkg: string, value: unknown): void {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new InvalidInputError(`[${pkg}] metadata must be an object of strings, got ${describeValue(value)}`);
  }
  let size = 2;
  const keys = Object.keys(value);
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i] as string;
    const entry: unknown = (value as Record<string, unknown>)[key];
    if (key.length === 0 || key.includes('\u0000') || byteLength(key) > limits.maxMetadataKeyBytes) {
      throw new InvalidInputError(`[${pkg}] metadata key ${describeValue(key)} is empty, too long or contains NUL`);
    }
    if (typeof entry !== 'string') {
      throw new InvalidInputError(`[${pkg}] metadata value of ${describeValue(key)} must be a string, got ${describeValue(entry)}`);
    }
    size += key.length + entry.length + 6;
  }
  // Escapes can at most double a string and UTF-8 at most triple it: only a large map needs exact counting.
  const bytes = size * 6 <= limits.maxMetadataBytes ? size : Buffer.byteLength(JSON.stringify(value), 'utf8');
  if (bytes > limits.maxMetadataBytes) {
    throw new InvalidInputError(
      `[${pkg}] metadata is ${bytes} bytes as JSON; the limit is ${limits.maxMetadataBytes}`,
    );
  }
}

function isJsonValue(value: unknown, depth = 0): boolean {
  if (depth > 32) return false;
  if (value === null || typeof value === 'string' || typeof value === 'boolean') return true;
  if (typeof value === 'number') return Number.isFinite(value);
  if (Array.isArray(value)) return value.every((item) => isJsonValue(item, depth + 1));
  if (typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype) {
    return Object.values(value).every((item) => isJsonValue(item, depth + 1));
  }
  return false;
}

/** Fields core does not name (written by a later core) must be JSON values, within their own size limit. */
function checkExtensions(pkg: string, state: object, known: ReadonlySet<string>, whose = ''): void {
  let extensions: Record<string, unknown> | undefined;
  const names = Object.keys(state);
  for (let i = 0; i < names.length; i++) {
    const name = names[i] as string;
    if (known.has(name)) continue;
    const value: unknown = (state as Record<string, unknown>)[name];
    if (value === undefined) continue;
    if (name.length === 0 || name.includes('\u0000') || byteLength(name) > limits.maxMetadataKeyBytes || name === '__proto__') {
      throw new InvalidInputError(`[${pkg}] ${whose}field name ${describeValue(name)} is empty, too long, contains NUL or is __proto__`);
    }
    if (!isJsonValue(value)) {
      throw new InvalidInputError(`[${pkg}] ${whose}field ${describeValue(name)} must hold a JSON value, got ${describeValue(value)}`);
    }
    (extensions ??= {})[name] = value;
  }
  if (extensions === undefined) return;
  const bytes = Buffer.byteLength(JSON.stringify(extensions), 'utf8');
  if (bytes > limits.maxExtensionBytes) {
    throw new InvalidInputError(`[${pkg}] ${whose}fields core does not name are ${bytes} bytes as JSON; the limit is ${limits.maxExtensionBytes}`);
  }
}

function checkFormat(pkg: string, value: unknown): void {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) {
    throw new InvalidInputError(`[${pkg}] format must be a positive integer, got ${describeValue(value)}`);
  }
}

function checkOptionalName(pkg: string, what: string, value: unknown): void {
  if (value !== null) checkName(pkg, what, value);
}

/** Throws an `InvalidInputError` naming the bad value unless `group` is a valid group name. */
export function validateGroup(group: unknown, pkg = 'core'): asserts group is string {
  checkName(pkg, 'group', group);
}

/** Throws an `InvalidInputError` naming the bad value unless `leaseKey` is a valid lease key. */
export function validateLeaseKey(leaseKey: unknown, pkg = 'core'): asserts leaseKey is string {
  checkName(pkg, 'lease key', leaseKey);
}

/** Throws an `InvalidInputError` unless `leaseKeys` is an array of at most `limits.maxLeasesPerRead` valid lease keys. */
export function validateLeaseKeys(leaseKeys: unknown, pkg = 'core'): asserts leaseKeys is readonly string[] {
  checkNames(pkg, 'lease key', 'lease keys', leaseKeys, limits.maxLeasesPerRead);
}

/** Throws an `InvalidInputError` unless `domain` is a valid failure domain (named as a worker id is). */
export function validateFailureDomain(domain: unknown, pkg = 'core'): asserts domain is string {
  checkName(pkg, 'failureDomain', domain);
}

/** Throws an `InvalidInputError` unless `workerId` is a valid worker id. */
export function validateWorkerId(workerId: unknown, pkg = 'core'): asserts workerId is string {
  checkName(pkg, 'worker id', workerId);
}

/** Throws an `InvalidInputError` unless `workerIds` is an array of at most {@link limits}.maxWatchedMembers valid worker ids. */
export function validateWorkerIds(workerIds: unknown, pkg = 'core'): asserts workerIds is readonly string[] {
  checkNames(pkg, 'worker id', 'worker ids', workerIds, limits.maxWatchedMembers);
}

/**
 * Throws an `InvalidInputError` unless `options` are options `subscribe()` may be given: absent, or an
 * object whose `addressedTo`, if any, names at most {@link limits}.maxWatchedMembers valid worker ids.
 */
export function validateSubscribeOptions(options: unknown, pkg = 'core'): asserts options is SubscribeOptions | undefined {
  if (options === undefined) return;
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new InvalidInputError(`[${pkg}] subscribe options must be an object, got ${describeValue(options)}`);
  }
  const addressedTo = (options as SubscribeOptions).addressedTo;
  if (addressedTo !== undefined) checkNames(pkg, 'worker id', 'worker ids', addressedTo, limits.maxWatchedMembers, 'may be addressed by one subscription');
}

/** Throws an `InvalidInputError` unless `digest` is a roster digest a reader may have read (a counter). */
export function validateDigest(digest: unknown, pkg = 'core'): asserts digest is number {
  checkCounter(pkg, 'roster digest', digest);
}

/** Throws an `InvalidInputError` unless `version` is a valid expected version. */
export function validateVersion(version: unknown, pkg = 'core'): asserts version is number {
  checkCounter(pkg, 'expected version', version);
}

/** Throws an `InvalidInputError` naming the first bad field of a lease state. */
export function validateLeaseState(state: LeaseState, pkg = 'core'): void {
  if (typeof state !== 'object' || state === null) {
    throw new InvalidInputError(`[${pkg}] lease state must be an object, got ${describeValue(state)}`);
  }
  checkFormat(pkg, state.format);
  checkOptionalName(pkg, 'owner', state.owner);
  checkCounter(pkg, 'epoch', state.epoch);
  if (state.checkpoint !== null) {
    if (typeof state.checkpoint !== 'string' || state.checkpoint.length === 0) {
      throw new InvalidInputError(`[${pkg}] checkpoint must be a non-empty string or null, got ${describeValue(state.checkpoint)}`);
    }
    const bytes = byteLength(state.checkpoint);
    if (bytes > limits.maxCheckpointBytes) {
      throw new InvalidInputError(
        `[${pkg}] checkpoint ${describeValue(state.checkpoint)} is ${bytes} bytes long; the limit is ${limits.maxCheckpointBytes}`,
      );
    }
  }
  if (!Array.isArray(state.parentKeys)) {
    throw new InvalidInputError(`[${pkg}] parentKeys must be an array, got ${describeValue(state.parentKeys)}`);
  }
  if (state.parentKeys.length > limits.maxParentKeys) {
    throw new InvalidInputError(
      `[${pkg}] a lease has ${state.parentKeys.length} parent keys; the limit is ${limits.maxParentKeys}`,
    );
  }
  for (const parent of state.parentKeys) checkName(pkg, 'parent key', parent);
  checkOptionalName(pkg, 'incarnation', state.incarnation);
  checkMetadata(pkg, state.metadata);
  checkExtensions(pkg, state, LEASE_FIELDS);
}

/** Validates a {@link NewLease} and returns its group, key and full state. */
export function validateNewLease(lease: NewLease, pkg = 'core'): { group: string; leaseKey: string; state: LeaseState } {
  if (typeof lease !== 'object' || lease === null) {
    throw new InvalidInputError(`[${pkg}] lease must be an object, got ${describeValue(lease)}`);
  }
  validateGroup(lease.group, pkg);
  validateLeaseKey(lease.leaseKey, pkg);
  const state = leaseStateOf(lease);
  validateLeaseState(state, pkg);
  return { group: lease.group, leaseKey: lease.leaseKey, state };
}

/** Validates a whole batch before anything is sent: one bad update refuses the batch. */
export function validateLeaseUpdates(group: string, updates: readonly LeaseUpdate[], pkg = 'core'): void {
  validateGroup(group, pkg);
  if (!Array.isArray(updates)) {
    throw new InvalidInputError(`[${pkg}] updates must be an array, got ${describeValue(updates)}`);
  }
  const seen = new Set<string>();
  for (const update of updates as readonly LeaseUpdate[]) {
    validateLeaseKey(update.leaseKey, pkg);
    if (seen.has(update.leaseKey)) {
      throw new InvalidInputError(`[${pkg}] lease key ${describeValue(update.leaseKey)} appears twice in one batch`);
    }
    seen.add(update.leaseKey);
    validateVersion(update.expectedVersion, pkg);
    validateLeaseState(update.next, pkg);
    if (update.notify !== undefined && !CHANGE_KINDS.includes(update.notify)) {
      throw new InvalidInputError(`[${pkg}] notify must be one of ${CHANGE_KINDS.join(', ')}, got ${describeValue(update.notify)}`);
    }
  }
}

/** Throws an `InvalidInputError` naming the first bad field of a leader state. */
export function validateLeaderState(state: LeaderState, pkg = 'core'): void {
  if (typeof state !== 'object' || state === null) {
    throw new InvalidInputError(`[${pkg}] leader state must be an object, got ${describeValue(state)}`);
  }
  checkFormat(pkg, state.format);
  checkOptionalName(pkg, 'holder', state.holder);
  checkCounter(pkg, 'term', state.term);
  checkMetadata(pkg, state.metadata);
  checkExtensions(pkg, state, LEADER_FIELDS);
}

/** Validates a {@link NewLeader} and returns its group and full state. */
export function validateNewLeader(leader: NewLeader, pkg = 'core'): { group: string; state: LeaderState } {
  if (typeof leader !== 'object' || leader === null) {
    throw new InvalidInputError(`[${pkg}] leader must be an object, got ${describeValue(leader)}`);
  }
  validateGroup(leader.group, pkg);
  const state = leaderStateOf(leader);
  validateLeaderState(state, pkg);
  return { group: leader.group, state };
}

/** Throws an `InvalidInputError` naming the first bad field of a member state. */
export function validateMemberState(state: MemberState, pkg = 'core'): void {
  if (typeof state !== 'object' || state === null) {
    throw new InvalidInputError(`[${pkg}] member state must be an object, got ${describeValue(state)}`);
  }
  checkFormat(pkg, state.format);
  checkName(pkg, 'incarnation', state.incarnation);
  if (typeof state.leaseDurationMs !== 'number' || !Number.isSafeInteger(state.leaseDurationMs) || state.leaseDurationMs < 1) {
    throw new InvalidInputError(`[${pkg}] leaseDurationMs must be a positive integer of milliseconds, got ${describeValue(state.leaseDurationMs)}`);
  }
  if (state.status !== 'alive' && state.status !== 'dead') {
    throw new InvalidInputError(`[${pkg}] status must be 'alive' or 'dead', got ${describeValue(state.status)}`);
  }
  checkCounter(pkg, 'held', state.held);
  checkCounter(pkg, 'changes', state.changes);
  if (!Array.isArray(state.requests)) {
    throw new InvalidInputError(`[${pkg}] requests must be an array, got ${describeValue(state.requests)}`);
  }
  if (state.requests.length > limits.maxRequests) {
    throw new InvalidInputError(`[${pkg}] a member has ${state.requests.length} handoff requests; the limit is ${limits.maxRequests}`);
  }
  for (const request of state.requests as readonly unknown[]) {
    if (typeof request !== 'object' || request === null || Array.isArray(request)) {
      throw new InvalidInputError(`[${pkg}] a handoff request must be an object, got ${describeValue(request)}`);
    }
    const { leaseKey, from } = request as { leaseKey?: unknown; from?: unknown };
    checkName(pkg, 'requested lease key', leaseKey);
    checkName(pkg, 'requested from', from);
    // A later core's fields on a request round-trip as a member's do; the member's size limit bounds them.
    checkExtensions(pkg, request, REQUEST_FIELDS, 'a handoff request\'s ');
  }
  checkMetadata(pkg, state.metadata);
  checkExtensions(pkg, state, MEMBER_FIELDS);
  const bytes = Buffer.byteLength(JSON.stringify(memberStateOf(state)), 'utf8');
  if (bytes > limits.maxMemberBytes) {
    throw new InvalidInputError(`[${pkg}] member state is ${bytes} bytes as JSON; the limit is ${limits.maxMemberBytes}`);
  }
}

/** Validates the arguments of `putMember` before anything is sent. */
export function validateMemberWrite(group: string, workerId: string, expectedVersion: number | null, next: MemberState, pkg = 'core'): void {
  validateGroup(group, pkg);
  validateWorkerId(workerId, pkg);
  if (expectedVersion !== null) validateVersion(expectedVersion, pkg);
  validateMemberState(next, pkg);
}
