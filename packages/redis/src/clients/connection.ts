/**
 * The one seam between the services and a Redis client library. The services speak only these two interfaces; one
 * small adapter per client family (`node-redis.ts`, `ioredis.ts`) implements them, and `detect.ts` picks the adapter
 * for whatever object a user passes. The adapter never imports a client library: every family is a peer dependency
 * the user brings.
 */

/** Receives one pub/sub message (already a string). */
export type MessageListener = (message: string) => void;

export interface RedisConnection {
  /** How errors name the client: "an ioredis Cluster client". */
  readonly description: string;
  /**
   * A Redis Cluster client: commands are routed by key slot, the library follows MOVED and ASK, and notices travel
   * over sharded pub/sub (SPUBLISH/SSUBSCRIBE), which reaches the subscriber on the shard that owns the channel.
   */
  readonly cluster: boolean;
  /**
   * False while the client knows it is disconnected. Calls then fail at once: a command parked in the library's
   * offline queue would run after its caller gave up (node-redis #1039, ioredis' offline queue).
   */
  isReady(): boolean;
  /**
   * Sends one raw command and answers its reply, which may come as the library gives it (a Buffer, a bigint):
   * `LuaScript`, through which every script call goes, normalizes it (see `replies.ts`). In a cluster the command
   * goes to the master serving `key`'s slot (every key a lock script declares shares one slot). `signal` removes a
   * command that has not been written yet, where the library can.
   */
  send(args: readonly string[], key: string | undefined, signal?: AbortSignal): Promise<unknown>;
  /** The master serving `slot` as the client last learned it ("host:port"); undefined on a single node or unknown. */
  masterOf(slot: number): string | undefined;
  /** A new pub/sub connection made the way the library expects (`duplicate()`); the caller owns it. */
  duplicate(): RedisSubscription;
}

/** A pub/sub connection: sharded channels on a cluster, classic ones on a single node. */
export interface RedisSubscription {
  readonly isOpen: boolean;
  readonly isReady: boolean;
  /** Starts connecting. Connections the adapter makes itself do not keep the process alive. */
  connect(): Promise<void>;
  subscribe(channel: string, listener: MessageListener): Promise<void>;
  unsubscribe(channel: string, listener: MessageListener): Promise<void>;
  /** Calls `callback` after each reconnect (messages sent meanwhile were lost). Returns the unregister function. */
  onReconnect(callback: () => void): () => void;
  /** Closes the connection politely; `destroy()` drops it at once. */
  close(): Promise<void>;
  destroy(): void;
  /**
   * Detaches the adapter's listeners from a connection the caller owns (the caller keeps it open). On one the adapter
   * made and is dropping, its error listener stays: the library may still report a reconnect under way.
   */
  detach(): void;
}
