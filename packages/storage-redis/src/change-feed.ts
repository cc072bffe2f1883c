/**
 * The change feed over pub/sub: one subscriber connection per storage (a duplicate of the client, opened on
 * first use and closed by `close()`), shared by every subscription of the storage, which dispatches what
 * comes in on it by group and owner.
 *
 * The storage's scripts publish a handover that names its new owner on that owner's channel of the group,
 * `<group channel>:to:<worker id>`, and every other change on the group's channel. The connection is on
 * the channels and patterns some open subscription needs, counted per channel or pattern, so that closing
 * one subscription never deafens another.
 */
import { StorageUnavailableError, type ChangeSubscription, type LeaseChange, type LeaseChangeKind } from '@leasehold/core';
import { describeValue } from '@leasehold/core/adapter';
import type { Cluster, Redis } from 'ioredis';
import { PKG } from './keys.js';

const CHANGE_KINDS: ReadonlySet<string> = new Set<LeaseChangeKind>(['released', 'handed-off', 'created', 'rewind']);
/**
 * The prefix of an owner note, `owner:<worker id>\0<change message>`: the releases before owners' channels
 * published one on a group's channel just before the change message `<kind>:<lease key>` of a handover, to
 * name its owner. This release publishes none (a handover that names its owner goes out on that owner's
 * channel, whose name says it) but still reads them: in a rolling upgrade, workers of an earlier release
 * still publish handovers that way. Names never hold a NUL, so the first one ends the owner.
 */
const OWNER_NOTE = 'owner:';
/**
 * Between a group's channel and a worker id in the name of the channel of the handovers to that worker,
 * `<group channel>:to:<worker id>`: after the group's channel, so that every channel of a group carries the
 * group's hash tag, as its keys do, whatever braces a worker id holds.
 */
const OWNER_CHANNEL = ':to:';

type Listener = (change: LeaseChange) => void;

/** One subscription of this client: its listener, and the owners whose handovers it asked for (`null`: every change). */
interface Feed {
  readonly hear: Listener;
  readonly addressed: ReadonlySet<string> | null;
}

/** The open subscriptions of one group on this client. */
interface GroupFeeds {
  readonly group: string;
  readonly feeds: Set<Feed>;
  /** The owner note heard last on the group's channel, until its next message: it names the owner of that message alone. */
  note: { readonly owner: string; readonly message: string } | undefined;
}

/**
 * A channel or pattern the subscriber connection is on, shared by every subscription of this client that
 * needs it, and left when the last of them closes: closing one subscription never deafens another.
 */
interface Joined {
  /** The group's channel, whose subscriptions hear what comes in on it. */
  readonly groupChannel: string;
  /** The worker whose handovers the channel carries; `null` for the group's channel, and for a pattern. */
  readonly owner: string | null;
  users: number;
  ready: Promise<void>;
}

/** One subscription's use of a {@link Joined} channel or pattern. */
interface Membership {
  /** Settles once the connection is on it; rejects with a `StorageUnavailableError` if it could not be. */
  readonly ready: Promise<void>;
  /** Gives the use up (once), and leaves the channel or pattern when no other subscription uses it. */
  readonly leave: () => Promise<void>;
}

/** The pub/sub connection of one storage, shared by all its subscriptions, and their bookkeeping. */
export class ChangeFeed {
  readonly #client: Redis | Cluster;
  #subscriber: Redis | Cluster | undefined;
  /** The subscriptions of each group, by the group's channel. */
  readonly #groups = new Map<string, GroupFeeds>();
  /** The channels the subscriber connection is on, by name: groups' channels and owners' channels. */
  readonly #channels = new Map<string, Joined>();
  /** The patterns the subscriber connection is on (one per group with a subscription of every change), by pattern. */
  readonly #patterns = new Map<string, Joined>();
  #closed = false;

  /** `client`: the storage's client, which the subscriber connection duplicates on first use. */
  constructor(client: Redis | Cluster) {
    this.#client = client;
  }

  /**
   * Subscribes `listener` to the changes of `group`, whose channel is `groupChannel`: of the handovers to
   * `addressedTo` only when it names some. Resolves once the connection is on every channel and pattern the
   * subscription needs; the caller has validated its arguments.
   */
  async subscribe(group: string, groupChannel: string, listener: Listener, addressedTo: readonly string[] | undefined): Promise<ChangeSubscription> {
    const addressed = addressedTo?.length ? new Set(addressedTo) : null;
    const subscriber = this.#subscriberConnection();
    let feeds = this.#groups.get(groupChannel);
    if (!feeds) {
      feeds = { group, feeds: new Set(), note: undefined };
      this.#groups.set(groupChannel, feeds);
    }
    const feed: Feed = { hear: (change) => listener(change), addressed };
    feeds.feeds.add(feed);

    // A failure names what the connection could not be put on, so that an operator can tell which.
    const couldNot = (what: string) => (error: unknown): never => {
      throw new StorageUnavailableError(`[${PKG}] could not subscribe to the ${what} of group ${describeValue(group)}: ${messageOf(error)}`, { cause: error });
    };
    const onChannel = (channel: string, owner: string | null, what: string): Membership =>
      this.#join(this.#channels, channel, groupChannel, owner, () => subscriber.subscribe(channel).then(() => undefined, couldNot(what)), () => subscriber.unsubscribe(channel));
    const memberships = [onChannel(groupChannel, null, 'changes')];
    if (addressed === null) {
      // Every owner's channel of the group. The group's part is escaped although neither a prefix nor the
      // base64url of a group holds a glob character today: a pattern must never match another group's.
      const pattern = `${escapeGlob(groupChannel + OWNER_CHANNEL)}*`;
      memberships.push(
        this.#join(this.#patterns, pattern, groupChannel, null, () => subscriber.psubscribe(pattern).then(() => undefined, couldNot('handovers')), () => subscriber.punsubscribe(pattern)),
      );
    } else {
      for (const owner of addressed) memberships.push(onChannel(groupChannel + OWNER_CHANNEL + owner, owner, `handovers to ${describeValue(owner)}`));
    }

    let closing: Promise<void> | undefined;
    const close = (): Promise<void> =>
      (closing ??= (async () => {
        feeds.feeds.delete(feed);
        if (feeds.feeds.size === 0 && this.#groups.get(groupChannel) === feeds) this.#groups.delete(groupChannel);
        await Promise.all(memberships.map((membership) => membership.leave()));
      })());
    try {
      await Promise.all(memberships.map((membership) => membership.ready));
    } catch (error) {
      await close();
      throw error;
    }
    return { close, [Symbol.asyncDispose]: close };
  }

  /** Closes the pub/sub connection, if one was opened, and drops every subscription; `subscribe()` is refused from then on. */
  async close(): Promise<void> {
    this.#closed = true;
    const subscriber = this.#subscriber;
    this.#subscriber = undefined;
    this.#groups.clear();
    this.#channels.clear();
    this.#patterns.clear();
    if (subscriber) {
      await subscriber.quit().catch(() => subscriber.disconnect());
    }
  }

  #subscriberConnection(): Redis | Cluster {
    if (this.#closed) throw new StorageUnavailableError(`[${PKG}] the storage is closed; subscribe() needs an open one`);
    if (!this.#subscriber) {
      const client = this.#client;
      const subscriber: Redis | Cluster = client.isCluster ? (client as Cluster).duplicate() : (client as Redis).duplicate();
      // Connection errors are retried by ioredis; without a listener they would be printed as unhandled.
      subscriber.on('error', () => undefined);
      subscriber.on('message', (channel: string, message: string) => this.#deliver(channel, message));
      subscriber.on('pmessage', (pattern: string, channel: string, message: string) => this.#deliverMatched(pattern, channel, message));
      // A note heard just before the connection dropped names a message that was lost with it: forget it, so
      // that it cannot name a later message of the same lease.
      subscriber.on('close', () => {
        for (const feeds of this.#groups.values()) feeds.note = undefined;
      });
      this.#subscriber = subscriber;
    }
    return this.#subscriber;
  }

  /**
   * Puts the subscriber connection on a channel or pattern (`enter`) unless a subscription of this client
   * has already, and counts one more use of it; the connection leaves it (`exit`) when its last use is
   * given up.
   */
  #join(joined: Map<string, Joined>, name: string, groupChannel: string, owner: string | null, enter: () => Promise<void>, exit: () => Promise<unknown>): Membership {
    let current = joined.get(name);
    if (!current) {
      const created: Joined = { groupChannel, owner, users: 0, ready: Promise.resolve() };
      created.ready = enter().catch((error: unknown) => {
        // Failed: the next subscription that needs it tries again.
        if (joined.get(name) === created) joined.delete(name);
        throw error;
      });
      joined.set(name, created);
      current = created;
    }
    const used = current;
    used.users += 1;
    let left = false;
    const leave = async (): Promise<void> => {
      if (left) return;
      left = true;
      used.users -= 1;
      if (used.users > 0 || joined.get(name) !== used) return;
      joined.delete(name);
      // Leaving is tidiness: with no subscription left that asked for it, a message would be dropped anyway.
      await exit().catch(() => undefined);
    };
    return { ready: used.ready, leave };
  }

  /**
   * A message on a channel: on a group's, any change, or an owner note of an earlier release; on an owner's,
   * a handover to that owner, for the subscriptions addressed to it alone (the others hear it through the
   * group's pattern).
   */
  #deliver(channelName: string, message: string): void {
    const joined = this.#channels.get(channelName);
    if (!joined) return;
    const feeds = this.#groups.get(joined.groupChannel);
    if (!feeds) return;
    const { owner } = joined;
    if (owner !== null) {
      const change = parseChange(feeds.group, message, owner);
      if (change) hand(feeds, change, (feed) => feed.addressed?.has(owner) === true);
      return;
    }
    const note = feeds.note;
    feeds.note = undefined;
    if (message.startsWith(OWNER_NOTE)) {
      const end = message.indexOf('\0', OWNER_NOTE.length);
      if (end > OWNER_NOTE.length) feeds.note = { owner: message.slice(OWNER_NOTE.length, end), message: message.slice(end + 1) };
      return;
    }
    // Without a note just before it (a writer of an earlier release, or a note lost), the owner is unknown.
    const change = parseChange(feeds.group, message, note?.message === message ? note.owner : undefined);
    if (!change) return;
    // A handover an earlier release noted the owner of came on the group's channel: each addressed
    // subscription is still handed only the handovers to its owners, as on owners' channels.
    const noted = change.kind === 'handed-off' ? change.owner : undefined;
    hand(feeds, change, typeof noted === 'string' ? (feed) => feed.addressed === null || feed.addressed.has(noted) : () => true);
  }

  /**
   * A message on an owner's channel matched by a group's pattern: a handover to that owner, for the
   * subscriptions of every change alone (an addressed one hears its owners' on their channels).
   */
  #deliverMatched(pattern: string, channelName: string, message: string): void {
    const joined = this.#patterns.get(pattern);
    if (!joined) return;
    const feeds = this.#groups.get(joined.groupChannel);
    const prefix = joined.groupChannel + OWNER_CHANNEL;
    if (!feeds || !channelName.startsWith(prefix) || channelName.length === prefix.length) return;
    const change = parseChange(feeds.group, message, channelName.slice(prefix.length));
    if (change) hand(feeds, change, (feed) => feed.addressed === null);
  }
}

/** The change a message `<kind>:<lease key>` announces, with its owner if known; `undefined` for a kind not known. */
function parseChange(group: string, message: string, owner: string | undefined): LeaseChange | undefined {
  const split = message.indexOf(':');
  if (split < 0) return undefined;
  const kind = message.slice(0, split);
  if (!CHANGE_KINDS.has(kind)) return undefined;
  const leaseKey = message.slice(split + 1);
  return owner === undefined ? { group, leaseKey, kind: kind as LeaseChangeKind } : { group, leaseKey, kind: kind as LeaseChangeKind, owner };
}

/** Hands a change to each of the group's subscriptions that `wants` it. */
function hand(feeds: GroupFeeds, change: LeaseChange, wants: (feed: Feed) => boolean): void {
  for (const feed of [...feeds.feeds]) {
    if (!wants(feed)) continue;
    try {
      feed.hear(change);
    } catch {
      // The feed is best effort; a listener owns its errors and must not stop the others.
    }
  }
}

/** `text` matched literally in a Redis glob pattern: `* ? [ ] \` escaped with a backslash. */
function escapeGlob(text: string): string {
  return text.replace(/[*?[\]\\]/g, '\\$&');
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
