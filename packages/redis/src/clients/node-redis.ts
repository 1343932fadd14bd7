import { getEventListeners } from 'node:events';
import { type Clock, TransportError } from '@dlock/core';
import type { MessageListener, RedisConnection, RedisSubscription } from './connection.js';
import { keySlot } from './key-slot.js';
import { messageText, normalizeReply } from './replies.js';

/** What the adapter calls on a node-redis 5 or 6 client (`createClient`); checked by `detect.ts`. */
export interface NodeRedisClient {
  readonly isOpen: boolean;
  readonly isReady: boolean;
  sendCommand(args: readonly string[], options?: { abortSignal?: AbortSignal }): Promise<unknown>;
  duplicate(): NodeRedisClient;
  connect(): Promise<unknown>;
  subscribe(channel: string, listener: (message: unknown) => void): Promise<unknown>;
  unsubscribe(channel: string, listener?: (message: unknown) => void): Promise<unknown>;
  on(event: string, listener: (...args: unknown[]) => void): unknown;
  off(event: string, listener: (...args: unknown[]) => void): unknown;
  close(): Promise<unknown>;
  destroy(): void;
  unref?(): void;
}

/** The connection a cluster client keeps for sharded pub/sub on one master. */
interface ShardSubscriber {
  on(event: string, listener: (...args: unknown[]) => void): unknown;
}

/** What the adapter calls on a node-redis 5 or 6 cluster client (`createCluster`). */
export interface NodeRedisCluster {
  readonly isOpen: boolean;
  readonly slots: readonly (
    | {
        readonly master?: {
          readonly address?: unknown;
          readonly pubSub?: { readonly client?: ShardSubscriber | undefined } | undefined;
        };
      }
    | undefined
  )[];
  sendCommand(
    firstKey: string | undefined,
    isReadonly: boolean,
    args: readonly string[],
    options?: { abortSignal?: AbortSignal },
  ): Promise<unknown>;
  duplicate(): NodeRedisCluster;
  connect(): Promise<unknown>;
  sSubscribe(channel: string, listener: (message: unknown) => void): Promise<unknown>;
  sUnsubscribe(channel: string, listener?: (message: unknown) => void): Promise<unknown>;
  on(event: string, listener: (...args: unknown[]) => void): unknown;
  off(event: string, listener: (...args: unknown[]) => void): unknown;
  close(): Promise<unknown>;
  destroy(): void;
}

// node-redis reconnects by itself; an 'error' event without a listener would crash the process.
const ignore = (): void => {};

/**
 * Listeners as node-redis calls them: each subscribe takes its own listener, and node-redis removes exactly that one
 * on unsubscribe. This keeps, per channel, the user-facing listener → node-redis listener map so both stay in step.
 */
class ListenerMap {
  readonly #channels = new Map<string, Map<MessageListener, (message: unknown) => void>>();

  wrap(channel: string, listener: MessageListener): (message: unknown) => void {
    let byListener = this.#channels.get(channel);
    if (!byListener) {
      byListener = new Map();
      this.#channels.set(channel, byListener);
    }
    let wrapped = byListener.get(listener);
    if (!wrapped) {
      wrapped = (message: unknown) => {
        const text = messageText(message);
        if (text === undefined) return;
        // Called from the library's socket handler: an exception here would crash the process.
        try {
          listener(text);
        } catch {
          // the listener's own failure is not the connection's
        }
      };
      byListener.set(listener, wrapped);
    }
    return wrapped;
  }

  /** The node-redis listeners subscribed to `channel`. */
  of(channel: string): ((message: unknown) => void)[] {
    return [...(this.#channels.get(channel)?.values() ?? [])];
  }

  take(channel: string, listener: MessageListener): ((message: unknown) => void) | undefined {
    const byListener = this.#channels.get(channel);
    const wrapped = byListener?.get(listener);
    byListener?.delete(listener);
    if (byListener?.size === 0) this.#channels.delete(channel);
    return wrapped;
  }
}

/** A node-redis client or cluster connection used for pub/sub. */
class NodeRedisSubscription implements RedisSubscription {
  readonly #listeners = new ListenerMap();
  readonly #reconnects = new Set<() => void>();
  #connectedOnce = false;
  #connecting: Promise<void> | undefined;
  readonly #onReady = (): void => {
    // The first 'ready' is the connect itself; every later one is a reconnect (node-redis resubscribed by then).
    if (!this.#connectedOnce) {
      this.#connectedOnce = true;
      return;
    }
    for (const callback of [...this.#reconnects]) callback();
  };
  /** The per-master sharded subscribers this watches for channels taken away by a slot move. */
  readonly #shards = new WeakSet<ShardSubscriber>();
  /**
   * A slot of a channel we hold moved to another master, whose old self unsubscribed us (a SUNSUBSCRIBE the server
   * sent by itself). node-redis 5 drops the channel's listeners and announces it under an event name its cluster
   * does not listen to, so the channel stayed unsubscribed and every later notice on it was lost. Subscribing it
   * again needs the new owner: a keyed command answered MOVED makes the cluster client reload its slot map. Then the
   * callers look again, since notices sent meanwhile were lost. (Where the library follows the move itself, this
   * subscribes listeners it already has: a no-op.)
   */
  readonly #onChannelMoved = (channel: unknown): void => {
    if (typeof channel !== 'string') return;
    const listeners = this.#listeners.of(channel);
    if (listeners.length === 0) return;
    const cluster = this.sub as NodeRedisCluster;
    void (async () => {
      try {
        await cluster.sendCommand(channel, false, ['EXISTS', channel]);
        for (const listener of listeners) await cluster.sSubscribe(channel, listener);
        this.#watchShard(channel);
      } catch {
        // the waits' own timers still run
        return;
      }
      for (const callback of [...this.#reconnects]) callback();
    })();
  };

  /** A connection the adapter made (a duplicate), not one the user passed in and owns. */
  readonly #ours: boolean;

  constructor(
    private readonly sub: NodeRedisClient | NodeRedisCluster,
    private readonly sharded: boolean,
    alreadyConnected: boolean,
  ) {
    this.#connectedOnce = alreadyConnected;
    this.#ours = !alreadyConnected;
    sub.on('error', ignore);
    sub.on('ready', this.#onReady);
  }

  get isOpen(): boolean {
    return this.sub.isOpen;
  }

  get isReady(): boolean {
    return 'isReady' in this.sub ? this.sub.isReady : this.sub.isOpen;
  }

  connect(): Promise<void> {
    // Our own connection must not keep the process alive; a pending wait keeps it alive with its timer.
    if ('unref' in this.sub) this.sub.unref?.();
    this.#connecting = this.sub.connect().then(() => {});
    return this.#connecting;
  }

  async subscribe(channel: string, listener: MessageListener): Promise<void> {
    // A subscribe sent before the connect finished would be refused as "client is closed".
    await this.#connecting?.catch(() => {});
    const wrapped = this.#listeners.wrap(channel, listener);
    if (this.sharded) {
      await (this.sub as NodeRedisCluster).sSubscribe(channel, wrapped);
      this.#watchShard(channel);
    } else await (this.sub as NodeRedisClient).subscribe(channel, wrapped);
  }

  /** Listens for slot moves on the sharded subscriber that now carries `channel` (see `#onChannelMoved`). */
  #watchShard(channel: string): void {
    try {
      const shard = (this.sub as NodeRedisCluster).slots[keySlot(channel)]?.master?.pubSub?.client;
      if (shard === undefined || this.#shards.has(shard)) return;
      this.#shards.add(shard);
      shard.on('sharded-channel-moved', this.#onChannelMoved);
    } catch {
      // a cluster client of another shape: moves are then left to the library and the waits' timers
    }
  }

  async unsubscribe(channel: string, listener: MessageListener): Promise<void> {
    const wrapped = this.#listeners.take(channel, listener);
    if (wrapped === undefined) return;
    if (this.sharded) await (this.sub as NodeRedisCluster).sUnsubscribe(channel, wrapped);
    else await (this.sub as NodeRedisClient).unsubscribe(channel, wrapped);
  }

  onReconnect(callback: () => void): () => void {
    this.#reconnects.add(callback);
    return () => this.#reconnects.delete(callback);
  }

  async close(): Promise<void> {
    if (this.sub.isOpen) await this.sub.close();
  }

  destroy(): void {
    try {
      this.sub.destroy();
    } catch {
      // node-redis throws when destroying a closed client: closed is what we wanted.
    }
  }

  detach(): void {
    this.sub.off('ready', this.#onReady);
    // Ours keeps its listener for good: destroy() does not stop a reconnect node-redis has under way, whose failures
    // it still emits, and an 'error' event with no listener crashes the process.
    if (!this.#ours) this.sub.off('error', ignore);
    this.#reconnects.clear();
  }
}

/**
 * Why a command that node-redis had not written yet fails when its connection drops: node-redis keeps such commands
 * (its write queue, where they wait for the next turn of the event loop, or while the socket needs draining) and
 * writes them once connected again, however long that takes. An acquire written so after its caller was told it
 * failed and its clean-up gave up (an outage longer than TTL + wait) would grant the lock to nobody for a TTL.
 */
const UNSENT_ON_DROP = 'the connection to Redis dropped before the command was written (it did not run)';

/** How many signals of answered commands a client keeps for its next commands (a burst's worth). */
const SPARE_SIGNALS = 256;

/**
 * One command sent with a signal of the adapter's, and that signal. node-redis adds an abort listener to the signal
 * a command is queued with, and Node checks each new listener against all those already on a signal: one signal
 * shared by a burst of n queued commands cost O(n²) (200 listeners on it for 200 concurrent acquires). So each
 * command waiting to be written has a signal of its own, with node-redis's one listener on it. A signal costs a few
 * microseconds to make, more than the rest of a send: once its command is answered (written, so node-redis let go
 * of it), it and this record, its reactions included, serve a later command.
 */
class UnsentCommand {
  readonly #controller = new AbortController();
  /** What the command is sent with: one object for each of the commands this record serves. */
  readonly options: { readonly abortSignal: AbortSignal } = { abortSignal: this.#controller.signal };

  constructor(private readonly owner: UnsentCommands) {}

  /** node-redis still listens on the signal only while the command waits to be written (it removes it on write). */
  get unwritten(): boolean {
    return getEventListeners(this.#controller.signal, 'abort').length > 0;
  }

  /** Takes the command out of node-redis's queue: its listener rejects the call (with its own AbortError). */
  drop(): void {
    this.#controller.abort(new TransportError(UNSENT_ON_DROP));
  }

  readonly answered = (reply: unknown): unknown => {
    this.owner.settled(this, true);
    return reply;
  };

  readonly failed = (error: unknown): never => {
    this.owner.settled(this, false);
    // Aborted only by `drop`, and then node-redis's rejection is the first and only one: the command never ran.
    if (this.#controller.signal.aborted) throw new TransportError(UNSENT_ON_DROP, { cause: error });
    throw error;
  };
}

/**
 * The commands this adapter sent on one node-redis client without a signal of their own, not yet answered. When the
 * client starts reconnecting, those node-redis has not written yet are dropped: it takes them out of its queue and
 * their callers get a `TransportError` saying why. One 'reconnecting' listener per client however many services use
 * it.
 */
class UnsentCommands {
  readonly #pending = new Set<UnsentCommand>();
  readonly #spare: UnsentCommand[] = [];

  constructor(client: NodeRedisClient) {
    client.on('reconnecting', () => {
      // Commands written before the drop are not ours to fail: node-redis rejects them with the socket's error.
      for (const command of this.#pending) if (command.unwritten) command.drop();
    });
  }

  send(client: NodeRedisClient, args: readonly string[]): Promise<unknown> {
    const command = this.#spare.pop() ?? new UnsentCommand(this);
    const sent = client.sendCommand(args, command.options);
    this.#pending.add(command);
    return sent.then(command.answered, command.failed);
  }

  settled(command: UnsentCommand, answered: boolean): void {
    this.#pending.delete(command);
    // A failed command's signal may be aborted, or still carry a listener node-redis left (its timeout path).
    if (answered && this.#spare.length < SPARE_SIGNALS) this.#spare.push(command);
  }
}

const unsentCommands = new WeakMap<NodeRedisClient, UnsentCommands>();

function unsentOf(client: NodeRedisClient): UnsentCommands {
  let unsent = unsentCommands.get(client);
  if (unsent === undefined) {
    unsent = new UnsentCommands(client);
    unsentCommands.set(client, unsent);
  }
  return unsent;
}

export class NodeRedisConnection implements RedisConnection {
  readonly cluster = false;
  readonly #unsent: UnsentCommands;

  constructor(
    private readonly client: NodeRedisClient,
    readonly description: string,
  ) {
    this.#unsent = unsentOf(client);
  }

  isReady(): boolean {
    return this.client.isReady !== false;
  }

  /**
   * node-redis' own promise, raw, for a call with a signal of its own (a Redlock round's ends with the round). A call
   * without one gets one of the adapter's, so that it is never written after a reconnect (see {@link UnsentCommands}):
   * its one layer passes the reply on untouched (the script runner normalizes it).
   */
  send(args: readonly string[], _key: string | undefined, signal?: AbortSignal): Promise<unknown> {
    try {
      if (signal === undefined) return this.#unsent.send(this.client, args);
      return this.client.sendCommand(args, { abortSignal: signal });
    } catch (error) {
      return Promise.reject(error);
    }
  }

  masterOf(): undefined {
    return undefined;
  }

  duplicate(): RedisSubscription {
    return new NodeRedisSubscription(this.client.duplicate(), false, false);
  }

  /** A subscriber connection the user passed in (already connected by them). */
  static adopt(sub: NodeRedisClient): RedisSubscription {
    return new NodeRedisSubscription(sub, false, true);
  }
}

/** A script's first declared key, which node-redis routes by (ioredis finds it by itself). */
function scriptKey(args: readonly string[]): string | undefined {
  const command = args[0]?.toUpperCase();
  if ((command === 'EVALSHA' || command === 'EVAL') && Number(args[2]) > 0) return args[3];
  return undefined;
}

/** Pause between tries of a command a migrating slot refused, and how many tries (ioredis waits 100 ms, unbounded). */
const TRYAGAIN_PAUSE_MS = 20;
const TRYAGAIN_TRIES = 50;

/** The server refused a multi-key command while its slot migrates: it did not run, so sending it again is safe. */
function isTryAgain(error: unknown): boolean {
  return error instanceof Error && error.message.startsWith('TRYAGAIN');
}

export class NodeRedisClusterConnection implements RedisConnection {
  readonly cluster = true;

  constructor(
    private readonly client: NodeRedisCluster,
    readonly description: string,
    private readonly clock: Clock,
  ) {}

  isReady(): boolean {
    return this.client.isOpen;
  }

  /**
   * node-redis follows MOVED and ASK but hands TRYAGAIN (a multi-key script while its slot migrates) to the caller:
   * it is retried here, briefly, as ioredis does by itself. The call's own bound still ends the wait.
   */
  async send(args: readonly string[], key: string | undefined, signal?: AbortSignal): Promise<unknown> {
    const options = signal === undefined ? undefined : { abortSignal: signal };
    const route = key ?? scriptKey(args);
    for (let tries = 1; ; tries++) {
      try {
        return normalizeReply(await this.client.sendCommand(route, false, args, options));
      } catch (error) {
        if (!isTryAgain(error) || tries >= TRYAGAIN_TRIES || signal?.aborted) throw error;
        await this.clock.sleep(TRYAGAIN_PAUSE_MS, signal);
      }
    }
  }

  masterOf(slot: number): string | undefined {
    const address = this.client.slots[slot]?.master?.address;
    return typeof address === 'string' ? address : undefined;
  }

  duplicate(): RedisSubscription {
    return new NodeRedisSubscription(this.client.duplicate(), true, false);
  }

  static adopt(sub: NodeRedisCluster): RedisSubscription {
    return new NodeRedisSubscription(sub, true, true);
  }
}
