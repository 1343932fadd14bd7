/**
 * The part of `node-zookeeper-client` (1.1.x) this package calls, as a structural type: the adapter never imports the
 * client's types, and a wrapped or instrumented client works as long as it has these members.
 */

/** A node's metadata. 64-bit fields arrive as 8-byte big-endian buffers. */
export interface ZooKeeperStatLike {
  /** The zxid of the transaction that created the node: ensemble-wide and increasing. */
  readonly czxid: Buffer;
  /** The session that owns the node if it is ephemeral, else zero. */
  readonly ephemeralOwner: Buffer;
  /**
   * Read only to tell an abandoned lock parent (no children, no data, no child change for a while). A client whose
   * stats lack them never has a parent deleted by the root sweep.
   */
  readonly numChildren?: number;
  /** Bytes of data the node holds; see `numChildren`. */
  readonly dataLength?: number;
  /** The zxid of the last change to the node's children. */
  readonly pzxid?: Buffer;
  /**
   * The node's data version: a lock parent is deleted by a try only at the version it was seen with, so that data
   * written since is not lost. A client whose stats lack it never has a parent deleted by a try.
   */
  readonly version?: number;
}

/** One entry of a node's ACL, as node-zookeeper-client's `ACL` has it. */
export interface ZooKeeperAclLike {
  /** The permission bits (`Permission.ALL` is 31). */
  readonly permission: number;
  /** Whom the entry is for: the open ACL's is `{ scheme: 'world', id: 'anyone' }`. */
  readonly id: {
    /** The authentication scheme (`world`, `digest`, `ip`, `sasl`, …). */
    readonly scheme: string;
    /** The identity within that scheme. */
    readonly id: string;
  };
}

/** The client's state objects (`State.SYNC_CONNECTED` …); only `code` is read. */
export interface ZooKeeperStateLike {
  /** The state's name, e.g. `SYNC_CONNECTED`. */
  readonly name: string;
  /** The state's code, e.g. 3 for `SYNC_CONNECTED`, -122 for `EXPIRED`. */
  readonly code: number;
}

/** One result of a `multi` transaction; `err` is a ZooKeeper error code, 0 for success. */
export interface ZooKeeperOpResultLike {
  /** The operation's type code (create, delete, check…). */
  readonly type: number;
  /** The ZooKeeper error code of this operation; 0 or absent for success. */
  readonly err?: number;
  /** The created path, for a create that succeeded. */
  readonly path?: string;
}

/** A one-shot watch: called once when the watched node or its children change. The event is not read. */
export type ZooKeeperWatcher = (event: unknown) => void;
/** A request's callback: an error (with a numeric `code`, the ZooKeeper error) or the request's result. */
export type ZooKeeperCallback<T> = (error: Error | null | undefined, value: T) => void;

/** A `multi` transaction being built: each call adds an operation, `commit` sends them all as one. */
export interface ZooKeeperTransactionLike {
  /** Adds a check that `path` exists (at `version`, when given); the whole transaction fails otherwise. */
  check(path: string, version?: number): ZooKeeperTransactionLike;
  /**
   * Needed only by semaphores (`acquirePermit`), so a client without them is still accepted for locks; that call
   * then rejects with an `UnsupportedError`. node-zookeeper-client's own transaction has both.
   */
  create?(path: string, data: Buffer, mode: number): ZooKeeperTransactionLike;
  /** Adds a delete of `path` (at `version`, when given). Needed only by semaphores, as `create` is. */
  remove?(path: string, version?: number): ZooKeeperTransactionLike;
  /**
   * Adds a write of `path`'s data (at `version`, when given). Optional: without it (or `create`, `remove`), a try
   * that does not wait queues its node the ordinary way (see the README's *A caller that does not wait*), and a
   * semaphore takes a slot only through its queue (see *A take keeps the queue parent's data and ACL*).
   */
  setData?(path: string, data: Buffer, version?: number): ZooKeeperTransactionLike;
  /** Sends the operations as one atomic `multi`; `results` holds one entry per operation, in order. */
  commit(
    callback: (error: Error | null | undefined, results?: readonly ZooKeeperOpResultLike[]) => void,
  ): void;
}

/**
 * A node-zookeeper-client `Client`, or anything with the same members. The service checks for every method except
 * the optional ones when it is constructed.
 */
export interface ZooKeeperClientLike {
  /** Starts connecting; called only on a client the service made (`connectionString`). */
  connect(): void;
  /** Closes the client and its session; called only on a client the service made. */
  close(): void;
  /** The connection state now. */
  getState(): ZooKeeperStateLike;
  /** The current session's id, 8 bytes. */
  getSessionId(): Buffer;
  /** The session timeout the server granted, in ms. */
  getSessionTimeout(): number;
  /** Creates a node with `mode` (a `CreateMode` flag); the callback gets the created path. */
  create(path: string, data: Buffer, mode: number, callback: ZooKeeperCallback<string>): void;
  /** Deletes a node at `version` (-1: any version). */
  remove(path: string, version: number, callback: (error: Error | null | undefined) => void): void;
  /** Reads a node's stat; `null` when the node does not exist. */
  exists(path: string, callback: ZooKeeperCallback<ZooKeeperStatLike | null>): void;
  /** Reads a node's stat and leaves `watcher` on the node (called when it is created, changed or deleted). */
  exists(
    path: string,
    watcher: ZooKeeperWatcher,
    callback: ZooKeeperCallback<ZooKeeperStatLike | null>,
  ): void;
  /** `watcher` undefined reads without leaving a watch (node-zookeeper-client's own getData takes that). */
  getData(
    path: string,
    watcher: ZooKeeperWatcher | undefined,
    callback: (
      error: Error | null | undefined,
      data: Buffer | undefined,
      stat: ZooKeeperStatLike | undefined,
    ) => void,
  ): void;
  /**
   * Needed only by `updateMetadata` (an election's `proclaim`), so a client without it is still accepted; that call
   * then rejects with an `UnsupportedError`.
   */
  setData?(path: string, data: Buffer, version: number, callback: ZooKeeperCallback<unknown>): void;
  /**
   * Reads a node's ACL and stat. A try that does not wait (a semaphore's take too) reads the parent it would delete
   * with it first, and idle parents and semaphores are read with it before they are deleted: a node with another ACL
   * is someone's to keep, and only this read shows it.
   */
  getACL(
    path: string,
    callback: (
      error: Error | null | undefined,
      acls: readonly ZooKeeperAclLike[] | undefined,
      stat: ZooKeeperStatLike | undefined,
    ) => void,
  ): void;
  /** Lists the names of a node's children. */
  getChildren(path: string, callback: ZooKeeperCallback<string[]>): void;
  /** Lists the names of a node's children and leaves `watcher` on the list (called when a child comes or goes). */
  getChildren(path: string, watcher: ZooKeeperWatcher, callback: ZooKeeperCallback<string[]>): void;
  /** Starts a `multi` transaction. */
  transaction(): ZooKeeperTransactionLike;
  /** Listens for connection state changes; the service tells a session's end from them. */
  on(event: 'state', listener: (state: ZooKeeperStateLike) => void): unknown;
  /** Removes a listener added with `on`; the service removes its own when it closes. */
  removeListener(event: 'state', listener: (state: ZooKeeperStateLike) => void): unknown;
}

/** What `require('node-zookeeper-client')` gives; only used when the adapter makes its own clients. */
export interface ZooKeeperModuleLike {
  createClient(
    connectionString: string,
    options: { sessionTimeout: number; spinDelay: number; retries: number },
  ): ZooKeeperClientLike;
}

/** `State` codes of node-zookeeper-client. */
export const STATE = {
  DISCONNECTED: 0,
  SYNC_CONNECTED: 3,
  AUTH_FAILED: 4,
  CONNECTED_READ_ONLY: 5,
  EXPIRED: -122,
} as const;

/** `CreateMode` values (the wire flags). */
export const CREATE_MODE = { PERSISTENT: 0, EPHEMERAL: 1, EPHEMERAL_SEQUENTIAL: 3 } as const;

/**
 * Drops the client's TCP connection so that it reconnects (or, while closing, finishes closing).
 *
 * node-zookeeper-client has no read timeout: with traffic blackholed, or the server stopped, it stays
 * `SYNC_CONNECTED` forever, and `close()` waits forever for the server to confirm. The Java client drops a
 * connection that has been silent for two thirds of the session timeout; this is the same remedy. The client keeps
 * its socket in `connectionManager.socket`, which is not public API, so the reach is guarded: with a client built
 * differently this does nothing and returns false.
 */
export function dropConnection(client: object, options?: { readonly onceConnected?: boolean }): boolean {
  const manager: unknown = Reflect.get(client, 'connectionManager');
  if (typeof manager !== 'object' || manager === null) return false;
  const socket: unknown = Reflect.get(manager, 'socket');
  if (typeof socket !== 'object' || socket === null) return false;
  // While the TCP connect is pending the client's own connect timeout is armed; a socket dropped then would leave
  // that timer to destroy whichever socket comes next, perhaps one with a session on it.
  if (options?.onceConnected === true && Reflect.get(socket, 'connecting') !== false) return false;
  const destroy: unknown = Reflect.get(socket, 'destroy');
  if (typeof destroy !== 'function') return false;
  destroy.call(socket);
  return true;
}

/** node-zookeeper-client's `ConnectionManager` states once `close()` was called on the client: `CLOSING`, `CLOSED`. */
const CLOSING_STATES: ReadonlySet<unknown> = new Set([-1, -2]);

/**
 * Calls `onClosed` once `close()` has been called on the client, and returns the function that stops listening (or
 * undefined, with a client built differently). A client closed while disconnected emits no `state` event at all
 * (`CLOSING` and `CLOSED` are states of its `connectionManager` only, which is not public API): without this, a
 * listener on it would wait for a reconnect that never comes. Guarded like {@link dropConnection}.
 */
export function onClientClosed(client: object, onClosed: () => void): (() => void) | undefined {
  const manager: unknown = Reflect.get(client, 'connectionManager');
  if (typeof manager !== 'object' || manager === null) return undefined;
  const on: unknown = Reflect.get(manager, 'on');
  const off: unknown = Reflect.get(manager, 'removeListener');
  if (typeof on !== 'function' || typeof off !== 'function') return undefined;
  const listener = (state: unknown): void => {
    if (CLOSING_STATES.has(state)) onClosed();
  };
  on.call(manager, 'state', listener);
  return () => {
    off.call(manager, 'state', listener);
  };
}

/** True once `close()` was called on a node-zookeeper-client client (see {@link onClientClosed}). */
export function isClientClosed(client: object): boolean {
  const manager: unknown = Reflect.get(client, 'connectionManager');
  return typeof manager === 'object' && manager !== null && CLOSING_STATES.has(Reflect.get(manager, 'state'));
}

/**
 * The zxid in the header of the reply being handled, read inside a request's callback.
 *
 * The 1.1.3 client speaks only the old `create`, whose reply carries the new node's path but not its Stat, while
 * the reply header carries the zxid of the transaction, which for a create is the node's czxid. The client keeps
 * the last header zxid in `connectionManager.zxid` and calls the callback right after setting it, so reading it
 * synchronously there saves the `exists` that would otherwise fetch the fencing token. Not public API: guarded,
 * undefined when absent, and checked against `exists` once per service (see `ZooKeeperProtocol`).
 */
export function replyZxid(client: object): bigint | undefined {
  const manager: unknown = Reflect.get(client, 'connectionManager');
  if (typeof manager !== 'object' || manager === null) return undefined;
  const zxid: unknown = Reflect.get(manager, 'zxid');
  return Buffer.isBuffer(zxid) && zxid.length === 8 ? zxid.readBigUInt64BE(0) : undefined;
}

/** Every required method of `ZooKeeperClientLike`: what the service checks a caller's client for. */
export const CLIENT_METHODS = [
  'connect',
  'close',
  'getState',
  'getSessionId',
  'getSessionTimeout',
  'create',
  'remove',
  'exists',
  'getData',
  'getACL',
  'getChildren',
  'transaction',
  'on',
  'removeListener',
] as const satisfies readonly (keyof ZooKeeperClientLike)[];

/**
 * The methods of `CLIENT_METHODS` that `value` lacks (all of them when it is not an object): the service refuses a
 * client with any missing when it is constructed, as it could not use it properly.
 */
export function missingMethods(value: unknown): readonly string[] {
  if (typeof value !== 'object' || value === null) return CLIENT_METHODS;
  return CLIENT_METHODS.filter((m) => !hasMethod(value, m));
}

/**
 * Whether `value[name]` is a function. A getter that throws (a Proxy's trap, a revoked Proxy) counts as no method:
 * its error would reach the caller of the constructor instead of the InvalidArgumentError naming the option.
 */
export function hasMethod(value: object, name: string): boolean {
  try {
    return typeof Reflect.get(value, name) === 'function';
  } catch {
    return false;
  }
}
