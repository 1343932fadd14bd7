import type {
  ZooKeeperCallback,
  ZooKeeperClientLike,
  ZooKeeperOpResultLike,
  ZooKeeperStateLike,
  ZooKeeperStatLike,
  ZooKeeperTransactionLike,
  ZooKeeperWatcher,
} from '../src/client-like.js';

interface Node {
  readonly czxid: bigint;
  readonly owner: bigint;
  readonly dataLength: number;
  cversion: number;
  /** The zxid of the last child created or deleted under it. */
  pzxid: bigint;
}

export const CONNECTED: ZooKeeperStateLike = { name: 'SYNC_CONNECTED', code: 3 };
export const DISCONNECTED: ZooKeeperStateLike = { name: 'DISCONNECTED', code: 0 };
export const EXPIRED: ZooKeeperStateLike = { name: 'EXPIRED', code: -122 };
const error = (code: number): Error & { code: number } => Object.assign(new Error(`zk ${code}`), { code });
const long = (value: bigint): Buffer => {
  const buffer = Buffer.alloc(8);
  buffer.writeBigUInt64BE(value);
  return buffer;
};

/**
 * An in-memory stand-in for a connected node-zookeeper-client, for deterministic unit tests of the adapter's timing
 * (the real server is what the integration tests use). It answers on a microtask, or not at all while `silent`
 * (a blackhole the client never notices), and counts what it was asked.
 */
export class FakeZooKeeper implements ZooKeeperClientLike {
  silent = false;
  readonly calls: string[] = [];
  drops = 0;
  readonly #nodes = new Map<string, Node>([
    ['/', { czxid: 0n, owner: 0n, dataLength: 0, cversion: 0, pzxid: 0n }],
  ]);
  readonly #dataWatches = new Map<string, ZooKeeperWatcher[]>();
  readonly #stateListeners = new Set<(state: ZooKeeperStateLike) => void>();
  #state = CONNECTED;
  #sessionId = 0x0100_0000_0000_0001n;
  readonly #timeoutMs: number;
  #zxid = 100n;

  /** Read by the adapter like node-zookeeper-client's internals: the reply zxid and the socket. */
  readonly connectionManager = {
    zxid: long(0n),
    socket: {
      destroy: () => {
        this.drops += 1;
      },
    },
  };

  constructor(timeoutMs: number) {
    this.#timeoutMs = timeoutMs;
  }

  connect(): void {}
  close(): void {}
  getState(): ZooKeeperStateLike {
    return this.#state;
  }
  getSessionId(): Buffer {
    return long(this.#sessionId);
  }
  getSessionTimeout(): number {
    return this.#timeoutMs;
  }
  on(_event: 'state', listener: (state: ZooKeeperStateLike) => void): unknown {
    this.#stateListeners.add(listener);
    return this;
  }
  removeListener(_event: 'state', listener: (state: ZooKeeperStateLike) => void): unknown {
    this.#stateListeners.delete(listener);
    return this;
  }

  /** Moves to `state` and tells the listeners, as the client does. */
  setState(state: ZooKeeperStateLike): void {
    this.#state = state;
    for (const listener of [...this.#stateListeners]) listener(state);
  }

  /** The server expires the session: its ephemeral nodes go. Reconnecting afterwards gets a new session. */
  expireSession(): void {
    for (const [path, node] of [...this.#nodes]) {
      if (node.owner === this.#sessionId) this.#delete(path);
    }
    this.#sessionId += 1n;
  }

  has(path: string): boolean {
    return this.#nodes.has(path);
  }

  children(path: string): string[] {
    const prefix = `${path}/`;
    return [...this.#nodes.keys()].filter(
      (p) => p.startsWith(prefix) && !p.slice(prefix.length).includes('/'),
    );
  }

  #answer(op: string, fn: () => void): void {
    this.calls.push(op);
    if (this.silent) return;
    queueMicrotask(fn);
  }

  #parent(path: string): string {
    return path.slice(0, path.lastIndexOf('/')) || '/';
  }

  create(path: string, data: Buffer, mode: number, callback: ZooKeeperCallback<string>): void {
    this.#answer(`create ${path}`, () => {
      const parent = this.#nodes.get(this.#parent(path));
      if (!parent) return callback(error(-101), '');
      const full = mode === 3 ? `${path}${String(parent.cversion).padStart(10, '0')}` : path;
      if (this.#nodes.has(full)) return callback(error(-110), '');
      this.#zxid += 1n;
      parent.cversion += 1;
      parent.pzxid = this.#zxid;
      this.#nodes.set(full, {
        czxid: this.#zxid,
        owner: mode === 3 ? this.#sessionId : 0n,
        dataLength: data.length,
        cversion: 0,
        pzxid: this.#zxid,
      });
      this.connectionManager.zxid = long(this.#zxid);
      callback(null, full);
    });
  }

  remove(path: string, _version: number, callback: (error: Error | null | undefined) => void): void {
    this.#answer(`delete ${path}`, () => {
      if (!this.#nodes.has(path)) return callback(error(-101));
      if (this.children(path).length > 0) return callback(error(-111));
      this.#delete(path);
      callback(null);
    });
  }

  #delete(path: string): void {
    this.#nodes.delete(path);
    this.#zxid += 1n;
    const parent = this.#nodes.get(this.#parent(path));
    if (parent) parent.pzxid = this.#zxid;
    for (const watcher of this.#dataWatches.get(path) ?? []) watcher({ type: 2, path });
    this.#dataWatches.delete(path);
  }

  #stat(path: string): ZooKeeperStatLike | null {
    const node = this.#nodes.get(path);
    return node
      ? {
          czxid: long(node.czxid),
          ephemeralOwner: long(node.owner),
          numChildren: this.children(path).length,
          dataLength: node.dataLength,
          pzxid: long(node.pzxid),
        }
      : null;
  }

  exists(path: string, a: unknown, b?: unknown): void {
    const callback = (b ?? a) as ZooKeeperCallback<ZooKeeperStatLike | null>;
    this.#answer(`exists ${path}`, () => callback(null, this.#stat(path)));
  }

  getData(
    path: string,
    watcher: ZooKeeperWatcher,
    callback: (
      error: Error | null | undefined,
      data: Buffer | undefined,
      stat: ZooKeeperStatLike | undefined,
    ) => void,
  ): void {
    this.#answer(`getData ${path}`, () => {
      const stat = this.#stat(path);
      if (!stat) return callback(error(-101), undefined, undefined);
      this.#dataWatches.set(path, [...(this.#dataWatches.get(path) ?? []), watcher]);
      callback(null, Buffer.alloc(0), stat);
    });
  }

  getChildren(path: string, a: unknown, b?: unknown): void {
    const callback = (b ?? a) as ZooKeeperCallback<string[]>;
    this.#answer(`getChildren ${path}`, () => {
      if (!this.#nodes.has(path)) return callback(error(-101), []);
      callback(
        null,
        this.children(path).map((p) => p.slice(path.length + 1)),
      );
    });
  }

  transaction(): ZooKeeperTransactionLike {
    const paths: string[] = [];
    const transaction: ZooKeeperTransactionLike = {
      check: (path) => {
        paths.push(path);
        return transaction;
      },
      commit: (callback) => {
        this.#answer(`multi ${paths.length}`, () => {
          const results: ZooKeeperOpResultLike[] = paths.map((p) => ({
            type: 13,
            err: this.#nodes.has(p) ? 0 : -101,
          }));
          const failed = results.some((r) => r.err !== 0);
          callback(failed ? error(-101) : null, results);
        });
      },
    };
    return transaction;
  }
}
