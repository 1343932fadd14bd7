import { Link, LinkedSet } from '@dlock/core/adapter';
import type { MessageListener, RedisConnection, RedisSubscription } from './connection.js';
import { keySlot } from './key-slot.js';
import { messageText } from './replies.js';

/** What the adapter calls on an ioredis 5 or 6 `Redis` or `Cluster`; checked by `detect.ts`. */
export interface IORedisClient {
  readonly status: string;
  readonly isCluster: boolean;
  call(command: string, ...args: string[]): Promise<unknown>;
  on(event: string, listener: (...args: unknown[]) => void): unknown;
  off(event: string, listener: (...args: unknown[]) => void): unknown;
  connect(): Promise<unknown>;
  quit(): Promise<unknown>;
  disconnect(): void;
  subscribe(...channels: string[]): Promise<unknown>;
  unsubscribe(...channels: string[]): Promise<unknown>;
  ssubscribe(...channels: string[]): Promise<unknown>;
  sunsubscribe(...channels: string[]): Promise<unknown>;
  /** `Redis`: the TCP socket of the current connection. */
  readonly stream?: { unref?(): void } | undefined;
  /** `Cluster`: reloads the slot map (its sharded subscribers follow it). */
  refreshSlotsCache?(callback?: (error?: Error | null) => void): void;
  /** `Cluster`: slot → node keys ("host:port"), the master first. */
  readonly slots?: readonly (readonly string[] | undefined)[];
}

export interface IORedisStandalone extends IORedisClient {
  duplicate(override?: Record<string, unknown>): IORedisClient;
}

export interface IORedisCluster extends IORedisClient {
  duplicate(startupNodes?: unknown[], override?: Record<string, unknown>): IORedisClient;
}

/** States in which ioredis will never send again without a `connect()`. */
const CLOSED = new Set(['end', 'close']);

/**
 * Why a call fails when its connection drops before the reply. By default (`autoResendUnfulfilledCommands`) ioredis
 * keeps such a command and writes it again once reconnected; a copy of a release that already ran would then answer
 * "not held", and the caller would be told its lock had been taken when it had released it. So the caller learns
 * at once that the outcome is unknown, as node-redis reports a dropped connection, and the command is not sent
 * again (see `forget`).
 */
const CONNECTION_LOST = 'the connection to Redis closed before the reply (the outcome is unknown)';

const SUBSCRIPTION_LOST = 'the pub/sub connection closed before the subscription was confirmed';

/**
 * A pub/sub connection on ioredis. ioredis delivers every message through one emitter event per connection, so this
 * keeps the channel → listeners map itself and resubscribes nothing: ioredis does that on reconnect.
 */
class IORedisSubscription implements RedisSubscription {
  readonly #channels = new Map<string, Set<MessageListener>>();
  readonly #reconnects = new Set<() => void>();
  readonly #events: readonly [string, string];
  #connectedOnce: boolean;
  #connecting: Promise<void> | undefined;
  readonly #onMessage = (channel: unknown, message: unknown): void => {
    const listeners = typeof channel === 'string' ? this.#channels.get(channel) : undefined;
    const text = messageText(message);
    if (listeners === undefined || text === undefined) return;
    for (const listener of [...listeners]) {
      // Called from ioredis' socket handler: an exception here would crash the process.
      try {
        listener(text);
      } catch {
        // the listener's own failure is not the connection's
      }
    }
  };
  readonly #onReady = (): void => {
    this.#unref();
    if (!this.#connectedOnce) {
      this.#connectedOnce = true;
      return;
    }
    for (const callback of [...this.#reconnects]) callback();
  };
  // ioredis reconnects by itself; an 'error' event without a listener would crash the process.
  readonly #onError = (): void => {};
  /**
   * A slot of a channel we hold moved to another master, whose old self then unsubscribed us (a SUNSUBSCRIBE the
   * server sent by itself). ioredis 5 (RESP2) takes it for a reply nobody asked for, reports it only as a node
   * error and neither learns the new owner nor subscribes again, so every later notice on the channel was lost. A
   * refresh of its slot map makes its subscriber group subscribe the channels it keeps on their new owners; once
   * that is done (`subscribersReady`), the callers look again, since notices sent meanwhile were lost.
   */
  readonly #onNodeError = (error: unknown): void => {
    const channel = movedChannel(error);
    if (channel === undefined || !this.#channels.has(channel)) return;
    this.#moved = true;
    try {
      this.sub.refreshSlotsCache?.(() => {});
    } catch {
      // a client without a slot map to refresh: the waits' own timers still run
    }
  };
  /** A channel was taken away by a slot move and the subscriber group has not been reset since. */
  #moved = false;
  readonly #onSubscribersReady = (): void => {
    if (!this.#moved) return;
    this.#moved = false;
    for (const callback of [...this.#reconnects]) callback();
  };

  constructor(
    readonly sub: IORedisClient,
    readonly sharded: boolean,
    readonly owned: boolean,
  ) {
    this.#connectedOnce = !owned;
    this.#events = sharded ? ['smessage', 'ready'] : ['message', 'ready'];
    sub.on('error', this.#onError);
    if (sharded) {
      sub.on('nodeError', this.#onNodeError);
      sub.on('subscribersReady', this.#onSubscribersReady);
    }
    sub.on(this.#events[0], this.#onMessage);
    sub.on(this.#events[1], this.#onReady);
  }

  get isOpen(): boolean {
    return !CLOSED.has(this.sub.status);
  }

  get isReady(): boolean {
    return this.sub.status === 'ready';
  }

  connect(): Promise<void> {
    this.#connecting = this.sub.connect().then(() => this.#unref());
    return this.#connecting;
  }

  async subscribe(channel: string, listener: MessageListener): Promise<void> {
    await this.#connecting?.catch(() => {});
    let listeners = this.#channels.get(channel);
    if (!listeners) {
      listeners = new Set();
      this.#channels.set(channel, listeners);
    }
    listeners.add(listener);
    if (listeners.size > 1) return;
    const subscribing = this.sharded ? this.sub.ssubscribe(channel) : this.sub.subscribe(channel);
    await (this.sub.isCluster ? subscribing : this.#untilClosed(subscribing));
  }

  /**
   * `subscribing`, or a rejection once the connection closes before it is answered. ioredis 5 writes a SUBSCRIBE
   * while it is still in its handshake (status 'connect'); when that connection drops, ioredis neither sends it
   * again nor answers it: the channel stays unsubscribed and the promise pending for ever, and the service, still
   * waiting on its first subscription, never tried again (its waiters stopped queueing for good). Rejected, the
   * subscription is retried as any failed one.
   */
  #untilClosed(subscribing: Promise<unknown>): Promise<unknown> {
    return new Promise((resolve, reject) => {
      const onClose = (): void => {
        this.sub.off('close', onClose);
        reject(new Error(SUBSCRIPTION_LOST));
      };
      this.sub.on('close', onClose);
      subscribing.then(
        (reply) => {
          this.sub.off('close', onClose);
          resolve(reply);
        },
        (error: unknown) => {
          this.sub.off('close', onClose);
          reject(error);
        },
      );
    });
  }

  async unsubscribe(channel: string, listener: MessageListener): Promise<void> {
    const listeners = this.#channels.get(channel);
    if (!listeners?.delete(listener) || listeners.size > 0) return;
    this.#channels.delete(channel);
    await (this.sharded ? this.sub.sunsubscribe(channel) : this.sub.unsubscribe(channel));
  }

  onReconnect(callback: () => void): () => void {
    this.#reconnects.add(callback);
    return () => this.#reconnects.delete(callback);
  }

  async close(): Promise<void> {
    if (this.isOpen) await this.sub.quit();
  }

  destroy(): void {
    this.sub.disconnect();
  }

  detach(): void {
    this.sub.off('error', this.#onError);
    this.sub.off('nodeError', this.#onNodeError);
    this.sub.off('subscribersReady', this.#onSubscribersReady);
    this.sub.off(this.#events[0], this.#onMessage);
    this.sub.off(this.#events[1], this.#onReady);
    this.#reconnects.clear();
  }

  /** A connection the adapter made must not keep the process alive; a pending wait keeps it alive by its timer. */
  #unref(): void {
    if (this.owned) this.sub.stream?.unref?.();
  }
}

/** What ioredis 5 says of a SUNSUBSCRIBE the server sent by itself: "... Last reply: sunsubscribe,<channel>,<count>". */
const SERVER_SUNSUBSCRIBE = /Last reply: sunsubscribe,(.*),\d+$/s;

/** The channel a server-sent SUNSUBSCRIBE took away, read from the node error ioredis reports it as. */
function movedChannel(error: unknown): string | undefined {
  if (!(error instanceof Error)) return undefined;
  return SERVER_SUNSUBSCRIBE.exec(error.message)?.[1];
}

/** The first key a script call declares, which ioredis routes it by; undefined for other commands. */
function scriptKey(args: readonly string[]): string | undefined {
  const command = args[0]?.toUpperCase();
  if ((command === 'EVALSHA' || command === 'EVAL') && Number(args[2]) > 0) return args[3];
  return undefined;
}

/** The key ("host:port") under which a Cluster lists the node one of its connections goes to. */
function nodeKey(redis: unknown): string | undefined {
  const options = (redis as { options?: { host?: unknown; port?: unknown } } | null | undefined)?.options;
  const { host, port } = options ?? {};
  return typeof host === 'string' && typeof port === 'number' ? `${host}:${port}` : undefined;
}

/** A call waiting for its reply, in the set of the node it went to until it settles. */
class Waiting {
  readonly link: Link<Waiting> = new Link(this);

  constructor(
    /** ioredis' own promise for the command, which is its `Command`'s: how the command is found in its queues. */
    readonly call: Promise<unknown>,
    readonly reject: (error: Error) => void,
  ) {}
}

/** An entry of ioredis' command queues (a `denque` of `{ command, stream, select }`). */
interface QueuedCommand {
  readonly command?: { readonly promise?: unknown } | undefined;
}

interface CommandQueue {
  readonly length: number;
  peekAt(index: number): QueuedCommand | undefined;
  removeOne(index: number): unknown;
}

/**
 * The queues in which an ioredis `Redis` keeps commands it will write (again) once connected: the unanswered
 * commands of the connection that closed (`prevCommandQueue`, the same list as `commandQueue` until the next
 * connect), which `autoResendUnfulfilledCommands` resends, and the offline queue.
 */
const QUEUES = ['commandQueue', 'prevCommandQueue', 'offlineQueue'] as const;

function isCommandQueue(value: unknown): value is CommandQueue {
  const v = value as Partial<CommandQueue> | null | undefined;
  return typeof v?.length === 'number' && typeof v.peekAt === 'function' && typeof v.removeOne === 'function';
}

/**
 * Takes `calls` out of the queues of the connection that just closed, so that ioredis never sends them again. A
 * call answered as unknown must stay answered: an acquire script sent again once the server is back, after its
 * caller was told it failed and the clean-up had given up (the outage outlasting TTL + wait, as with
 * `maxRetriesPerRequest: null`), would grant the lock to nobody for a whole TTL. Uses ioredis internals: where they
 * are not as expected, nothing is removed. (A call sent through auto-pipelining has no command of its own here.)
 */
function forget(client: unknown, calls: ReadonlySet<unknown>): void {
  try {
    const seen = new Set<CommandQueue>();
    for (const name of QUEUES) {
      const queue = (client as Record<string, unknown>)[name];
      if (!isCommandQueue(queue) || seen.has(queue)) continue;
      seen.add(queue);
      for (let i = queue.length - 1; i >= 0; i--) {
        if (calls.has(queue.peekAt(i)?.command?.promise)) queue.removeOne(i);
      }
    }
  } catch {
    // another shape of client: the calls stay as ioredis keeps them
  }
}

/**
 * The calls waiting on one node, linked through the calls themselves: joining and leaving allocate nothing (a set's
 * table is made again each time it empties and fills, which a caller sending one command at a time does on every
 * call).
 */
const waitingSet = (): LinkedSet<Waiting> => new LinkedSet((entry: Waiting) => entry.link);

export class IORedisConnection implements RedisConnection {
  readonly cluster: boolean;
  /**
   * The calls waiting for a reply, by the node they went to ('' for a single node's one connection). A node's list
   * stays once made (one per node ever sent to), so a call makes none; the connection events are listened to only
   * while some call waits (`#waiting`).
   */
  readonly #inFlight = new Map<string, LinkedSet<Waiting>>();
  #waiting = 0;
  /** What tells that a connection closed: the client's 'close' on a single node, the Cluster's '-node'. */
  readonly #event: 'close' | '-node';
  readonly #listener: (...args: unknown[]) => void;
  readonly #onClose = (): void => this.#fail('');
  /**
   * A Cluster ended its connection to one node. ioredis does not reconnect it: it reloads the slot map and sends the
   * calls that were waiting on it again, so, as on a single node, they are answered at once as unknown.
   */
  readonly #onNodeGone = (redis: unknown): void => {
    const node = nodeKey(redis);
    if (node !== undefined) this.#fail(node);
  };

  constructor(
    private readonly client: IORedisStandalone | IORedisCluster,
    readonly description: string,
  ) {
    this.cluster = client.isCluster;
    this.#event = this.cluster ? '-node' : 'close';
    this.#listener = this.cluster ? this.#onNodeGone : this.#onClose;
  }

  /**
   * Ready, or making a connection right now (a client fresh from `new Redis()` is 'connecting', and ioredis queues
   * commands until it is up, in order, so an undo sent later still runs after the call it undoes). Waiting out a
   * retry delay ('reconnecting') or closed: known to be down, so calls fail at once.
   */
  isReady(): boolean {
    const { status } = this.client;
    return status === 'ready' || status === 'connecting' || status === 'connect';
  }

  /** ioredis routes by the keys it reads from the command itself (EVALSHA's numkeys included). */
  send(args: readonly string[], _key: string | undefined): Promise<unknown> {
    // Not `async`, and the arguments spread once; the reply as ioredis gives it (the script runner normalizes it).
    try {
      const call = this.client.call(...(args as [string, ...string[]]));
      // On a Cluster, a script call is watched on the master its first key's slot maps to (where ioredis sends it);
      // other commands, and a slot not mapped yet, are not covered. Nor are nodes given a
      // `clusterNodeRetryStrategy`: those reconnect instead of ending.
      const node = this.cluster ? this.#nodeOf(args) : '';
      return node === undefined ? call : this.#untilClosed(call, node);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  #nodeOf(args: readonly string[]): string | undefined {
    const key = scriptKey(args);
    return key === undefined ? undefined : this.masterOf(keySlot(key));
  }

  /** `call`, or a rejection as soon as the connection to `node` closes (see `CONNECTION_LOST`). */
  #untilClosed(call: Promise<unknown>, node: string): Promise<unknown> {
    return new Promise((resolve, reject) => {
      let waiting = this.#inFlight.get(node);
      if (waiting === undefined) {
        waiting = waitingSet();
        this.#inFlight.set(node, waiting);
      }
      const list = waiting;
      const entry = new Waiting(call, reject);
      list.add(entry);
      if (this.#waiting++ === 0) this.client.on(this.#event, this.#listener);
      call.then(
        (reply) => {
          this.#done(list, entry);
          resolve(reply);
        },
        (error: unknown) => {
          this.#done(list, entry);
          reject(error);
        },
      );
    });
  }

  #done(list: LinkedSet<Waiting>, entry: Waiting): void {
    if (list.delete(entry) && --this.#waiting === 0) this.client.off(this.#event, this.#listener);
  }

  /** Answers every call waiting on `node` as unknown; on a single node, ioredis will not send them again (`forget`). */
  #fail(node: string): void {
    const waiting = this.#inFlight.get(node);
    if (waiting === undefined || waiting.size === 0) return;
    const entries = waiting.values();
    for (const entry of entries) waiting.delete(entry);
    this.#waiting -= entries.length;
    if (this.#waiting === 0) this.client.off(this.#event, this.#listener);
    // A Cluster's node connections are ended, not reconnected: the Cluster itself decides what is sent again.
    if (!this.cluster) forget(this.client, new Set(entries.map((entry) => entry.call)));
    for (const entry of entries) entry.reject(new Error(CONNECTION_LOST));
  }

  masterOf(slot: number): string | undefined {
    const master = this.client.slots?.[slot]?.[0];
    return typeof master === 'string' ? master : undefined;
  }

  duplicate(): RedisSubscription {
    const sub = this.client.isCluster
      ? (this.client as IORedisCluster).duplicate([], { lazyConnect: true, shardedSubscribers: true })
      : (this.client as IORedisStandalone).duplicate({ lazyConnect: true });
    return new IORedisSubscription(sub, this.cluster, true);
  }

  static adopt(sub: IORedisClient): RedisSubscription {
    return new IORedisSubscription(sub, sub.isCluster, false);
  }
}
