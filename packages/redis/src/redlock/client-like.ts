/**
 * The small structural part of a node-redis 5 or 6 client that Redlock calls. The adapter never imports `redis`: any
 * `createClient()` result fits. At run time the service also checks that each client is one (see `client-kind.ts`):
 * other libraries have methods of the same names with other contracts.
 */
export interface RedlockClientLike {
  /** Sends one raw command. The abort signal removes a command that has not been written yet. */
  sendCommand(args: readonly string[], options?: { abortSignal?: AbortSignal }): Promise<unknown>;
  /** When false the node is known to be disconnected and is answered as failed at once, not after a timeout. */
  readonly isReady?: boolean;
  /** A new, unconnected client with the same options; used only for the pub/sub connection behind `watch`. */
  duplicate(): RedlockSubscriberLike;
}

/** What `watch` needs of the duplicated connection. */
export interface RedlockSubscriberLike {
  on(event: 'error', listener: (error: unknown) => void): unknown;
  connect(): Promise<unknown>;
  subscribe(channel: string, listener: (message: string, channel: string) => void): Promise<unknown>;
  unsubscribe(channel: string, listener: (message: string, channel: string) => void): Promise<unknown>;
  /** Closes the connection at once, dropping anything pending. */
  destroy(): void;
}
