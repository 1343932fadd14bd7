/**
 * The small part of node-redis (`redis` ^5 or ^6) the adapter calls. A `createClient()` client satisfies both
 * interfaces; declaring them here keeps `redis` a peer dependency the adapter never imports. At run time the service
 * also checks that the client is a node-redis 5 or 6 client (see `client-kind.ts`): ioredis and node-redis 4 have
 * methods of the same names with other contracts.
 */

/** Receives one pub/sub message. */
export type MessageListener = (message: string, channel: string) => void;

/** A connected node-redis client: lock commands go through it, as raw commands with Lua scripts. */
export interface RedisClientLike {
  sendCommand(args: readonly string[]): Promise<unknown>;
  /** node-redis sets this while the connection is up; calls fail fast instead of queueing while it is false. */
  readonly isReady?: boolean;
  /** Used to make the subscriber connection when none is passed. */
  duplicate(): RedisSubscriberLike;
}

/** A connection for pub/sub only (node-redis puts a subscribed RESP2 connection into subscriber mode). */
export interface RedisSubscriberLike {
  readonly isOpen: boolean;
  readonly isReady: boolean;
  connect(): Promise<unknown>;
  subscribe(channel: string, listener: MessageListener): Promise<unknown>;
  unsubscribe(channel: string, listener?: MessageListener): Promise<unknown>;
  on(event: string, listener: () => void): unknown;
  off(event: string, listener: () => void): unknown;
  /** Closes the connection (the adapter only closes subscribers it created). */
  close(): Promise<unknown>;
  destroy(): void;
  /** Lets the process exit while only this connection is open. */
  unref?(): void;
}
