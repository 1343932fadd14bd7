import type {
  ZooKeeperAclLike,
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
  data: Buffer;
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
    ['/', { czxid: 0n, owner: 0n, data: Buffer.alloc(0), cversion: 0, pzxid: 0n }],
  ]);
  readonly #dataWatches = new Map<string, ZooKeeperWatcher[]>();
  readonly #childWatches = new Map<string, ZooKeeperWatcher[]>();
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

  /** State listeners added and not removed. */
  get stateListeners(): number {
    return this.#stateListeners.size;
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
        data: Buffer.from(data),
        cversion: 0,
        pzxid: this.#zxid,
      });
      this.connectionManager.zxid = long(this.#zxid);
      callback(null, full);
      this.#fire(this.#dataWatches, full, 1);
      this.#fire(this.#childWatches, this.#parent(full), 4);
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
    this.#fire(this.#dataWatches, path, 2);
    this.#fire(this.#childWatches, this.#parent(path), 4);
  }

  /** One-shot, as on the server: each watcher registered on the path fires once, with the event's path. */
  #fire(watches: Map<string, ZooKeeperWatcher[]>, path: string, type: number): void {
    const watchers = watches.get(path) ?? [];
    watches.delete(path);
    for (const watcher of new Set(watchers)) watcher({ type, path });
  }

  /** How many watchers are registered (data and child), for tests of watch sharing. */
  get watchCount(): number {
    let count = 0;
    for (const watchers of [...this.#dataWatches.values(), ...this.#childWatches.values()]) {
      count += new Set(watchers).size;
    }
    return count;
  }

  #stat(path: string): ZooKeeperStatLike | null {
    const node = this.#nodes.get(path);
    return node
      ? {
          czxid: long(node.czxid),
          ephemeralOwner: long(node.owner),
          numChildren: this.children(path).length,
          dataLength: node.data.length,
          pzxid: long(node.pzxid),
          version: 0, // nothing here writes a lock parent's data
        }
      : null;
  }

  exists(path: string, a: unknown, b?: unknown): void {
    const callback = (b ?? a) as ZooKeeperCallback<ZooKeeperStatLike | null>;
    const watcher = b === undefined ? undefined : (a as ZooKeeperWatcher);
    this.#answer(`exists ${path}`, () => {
      // As on the server: set on a missing node too, and fired by its creation.
      if (watcher) this.#dataWatches.set(path, [...(this.#dataWatches.get(path) ?? []), watcher]);
      callback(null, this.#stat(path));
    });
  }

  /** Every node has the open ACL (world:anyone, all permissions), as node-zookeeper-client creates them. */
  getACL(
    path: string,
    callback: (
      error: Error | null | undefined,
      acls: readonly ZooKeeperAclLike[] | undefined,
      stat: ZooKeeperStatLike | undefined,
    ) => void,
  ): void {
    this.#answer(`getACL ${path}`, () => {
      const stat = this.#stat(path);
      if (!stat) return callback(error(-101), undefined, undefined);
      callback(null, [{ permission: 31, id: { scheme: 'world', id: 'anyone' } }], stat);
    });
  }

  getData(
    path: string,
    watcher: ZooKeeperWatcher | undefined,
    callback: (
      error: Error | null | undefined,
      data: Buffer | undefined,
      stat: ZooKeeperStatLike | undefined,
    ) => void,
  ): void {
    this.#answer(`getData ${path}`, () => {
      const stat = this.#stat(path);
      if (!stat) return callback(error(-101), undefined, undefined);
      if (watcher) this.#dataWatches.set(path, [...(this.#dataWatches.get(path) ?? []), watcher]);
      callback(null, Buffer.from(this.#nodes.get(path)?.data ?? Buffer.alloc(0)), stat);
    });
  }

  setData(path: string, data: Buffer, _version: number, callback: ZooKeeperCallback<unknown>): void {
    this.#answer(`setData ${path}`, () => {
      const node = this.#nodes.get(path);
      if (!node) return callback(error(-101), undefined);
      this.#zxid += 1n;
      node.data = Buffer.from(data);
      callback(null, this.#stat(path));
      this.#fire(this.#dataWatches, path, 3);
    });
  }

  /** Deletes a node as another client would (no session of ours involved). */
  deleteNode(path: string): void {
    if (this.#nodes.has(path)) this.#delete(path);
  }

  getChildren(path: string, a: unknown, b?: unknown): void {
    const callback = (b ?? a) as ZooKeeperCallback<string[]>;
    const watcher = b === undefined ? undefined : (a as ZooKeeperWatcher);
    this.#answer(`getChildren ${path}`, () => {
      if (!this.#nodes.has(path)) return callback(error(-101), []);
      if (watcher) this.#childWatches.set(path, [...(this.#childWatches.get(path) ?? []), watcher]);
      callback(
        null,
        this.children(path).map((p) => p.slice(path.length + 1)),
      );
    });
  }

  transaction(): ZooKeeperTransactionLike {
    const ops: TransactionOp[] = [];
    const transaction: ZooKeeperTransactionLike = {
      check: (path) => {
        ops.push({ type: 'check', path });
        return transaction;
      },
      create: (path, data, mode) => {
        ops.push({ type: 'create', path, data, mode });
        return transaction;
      },
      remove: (path) => {
        ops.push({ type: 'delete', path });
        return transaction;
      },
      setData: (path, data) => {
        ops.push({ type: 'setData', path, data });
        return transaction;
      },
      commit: (callback) => {
        if (ops.every((op) => op.type === 'check')) {
          // Checks only (the renewal batches): every node's result, as tests of those batches expect.
          this.#answer(`multi ${ops.length}`, () => {
            const results: ZooKeeperOpResultLike[] = ops.map((op) => ({
              type: 13,
              err: this.#nodes.has(op.path) ? 0 : -101,
            }));
            const failed = results.some((r) => r.err !== 0);
            callback(failed ? error(-101) : null, results);
          });
          return;
        }
        this.#answer(`multi ${ops.map((op) => `${op.type} ${op.path}`).join(', ')}`, () =>
          this.#commit(ops, callback),
        );
      },
    };
    return transaction;
  }

  /**
   * A `multi` with writes, as the server runs it: all or nothing, one zxid for every operation, the watches fired
   * only once it has committed. A refusal names the failing operation's code; the ones after it get -2.
   */
  #commit(
    ops: readonly TransactionOp[],
    callback: (error: Error | null | undefined, results?: readonly ZooKeeperOpResultLike[]) => void,
  ): void {
    const saved = new Map([...this.#nodes].map(([path, node]) => [path, { ...node }]));
    const zxid = this.#zxid + 1n;
    const fired: [Map<string, ZooKeeperWatcher[]>, string, number][] = [];
    const results: ZooKeeperOpResultLike[] = [];
    let failure: number | undefined;
    for (const op of ops) {
      const code = failure === undefined ? this.#apply(op, zxid, fired, results) : -2;
      if (code !== 0) {
        failure ??= code;
        results.push({ type: -1, err: code });
      }
    }
    if (failure !== undefined) {
      this.#nodes.clear();
      for (const [path, node] of saved) this.#nodes.set(path, node);
      callback(error(failure), results);
      return;
    }
    this.#zxid = zxid;
    this.connectionManager.zxid = long(zxid);
    callback(null, results);
    for (const [watches, path, type] of fired) this.#fire(watches, path, type);
  }

  /** One operation of {@link #commit}: 0, with its result pushed, or the error code. */
  #apply(
    op: TransactionOp,
    zxid: bigint,
    fired: [Map<string, ZooKeeperWatcher[]>, string, number][],
    results: ZooKeeperOpResultLike[],
  ): number {
    if (op.type === 'check') {
      if (!this.#nodes.has(op.path)) return -101;
      results.push({ type: 13, err: 0 });
      return 0;
    }
    if (op.type === 'setData') {
      const node = this.#nodes.get(op.path);
      if (!node) return -101;
      node.data = Buffer.from(op.data ?? Buffer.alloc(0));
      results.push({ type: 5, err: 0 });
      return 0;
    }
    const parentPath = this.#parent(op.path);
    const parent = this.#nodes.get(parentPath);
    if (op.type === 'delete') {
      if (!this.#nodes.has(op.path)) return -101;
      if (this.children(op.path).length > 0) return -111;
      this.#nodes.delete(op.path);
      if (parent) parent.pzxid = zxid;
      fired.push(
        [this.#dataWatches, op.path, 2],
        [this.#childWatches, op.path, 2],
        [this.#childWatches, parentPath, 4],
      );
      results.push({ type: 2, err: 0 });
      return 0;
    }
    if (!parent) return -101;
    const mode = op.mode ?? 0;
    const full =
      mode === 2 || mode === 3 ? `${op.path}${String(parent.cversion).padStart(10, '0')}` : op.path;
    if (this.#nodes.has(full)) return -110;
    parent.cversion += 1;
    parent.pzxid = zxid;
    this.#nodes.set(full, {
      czxid: zxid,
      owner: mode === 1 || mode === 3 ? this.#sessionId : 0n,
      data: Buffer.from(op.data ?? Buffer.alloc(0)),
      cversion: 0,
      pzxid: zxid,
    });
    fired.push([this.#dataWatches, full, 1], [this.#childWatches, parentPath, 4]);
    results.push({ type: 1, path: full });
    return 0;
  }
}

/** One operation of a {@link FakeZooKeeper} transaction. */
interface TransactionOp {
  readonly type: 'check' | 'create' | 'delete' | 'setData';
  readonly path: string;
  readonly data?: Buffer;
  readonly mode?: number;
}
