/**
 * The small part of node-redis (`redis` ^5 or ^6) each service calls. A `createClient()` client satisfies all four
 * interfaces; declaring them here keeps `redis` a peer dependency the adapter never imports. At run time the services
 * also check that each client is a node-redis 5 or 6 client (see `client-kind.ts`): ioredis and node-redis 4 have
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

/** What Redlock calls on each node's client. */
export interface RedlockClientLike {
  /** Sends one raw command. The abort signal removes a command that has not been written yet. */
  sendCommand(args: readonly string[], options?: { abortSignal?: AbortSignal }): Promise<unknown>;
  /** When false the node is known to be disconnected and is answered as failed at once, not after a timeout. */
  readonly isReady?: boolean;
  /** A new, unconnected client with the same options; used only for the pub/sub connection behind `watch`. */
  duplicate(): RedlockSubscriberLike;
}

/** What Redlock's `watch` needs of the duplicated connection. */
export interface RedlockSubscriberLike {
  on(event: 'error', listener: (error: unknown) => void): unknown;
  connect(): Promise<unknown>;
  subscribe(channel: string, listener: (message: string, channel: string) => void): Promise<unknown>;
  unsubscribe(channel: string, listener: (message: string, channel: string) => void): Promise<unknown>;
  /** Closes the connection at once, dropping anything pending. */
  destroy(): void;
}
